//! Connections from this broker's transaction machinery to other brokers (to itself too, as Kafka does): markers
//! to partition leaders, KIP-890 verification to transaction coordinators. One connection per address, one request
//! at a time on it; a closed connection is reopened by the next request. The map holds one entry per broker
//! address the cluster has, so it is bounded by the cluster's size.
//!
//! Connections open through the broker's network (`BrokerEnv::network`, via [`super::LeaderRoutes::network`]):
//! the OS's TCP in production, turmoil's in the deterministic simulator, so markers and verification run under
//! its faults and schedule like every other inter-broker connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use annal_client::net::Network;
use annal_client::{Connection, ConnectionOptions};
use kafka_protocol::protocol::Request;
use tokio::sync::Mutex;

pub(crate) struct Peers {
    client_id: &'static str,
    request_timeout: Duration,
    max_response_bytes: usize,
    /// TLS and SASL of the inter-broker listener.
    security: crate::security::InterBrokerClient,
    network: Arc<dyn Network>,
    /// A `BTreeMap`, not a `HashMap`: when the broker stops (a simulated crash), the connections close in the
    /// map's drop order, which the simulator must see the same way in every run.
    connections: Mutex<BTreeMap<String, Arc<Mutex<Option<Connection>>>>>,
}

impl Peers {
    pub fn new(
        client_id: &'static str,
        request_timeout: Duration,
        max_response_bytes: usize,
        security: crate::security::InterBrokerClient,
        network: Arc<dyn Network>,
    ) -> Peers {
        Peers {
            client_id,
            request_timeout,
            max_response_bytes,
            security,
            network,
            connections: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sends `request` to `addr` at the highest version both sides speak within `versions`.
    pub async fn send<R: Request>(
        &self,
        addr: &str,
        request: &R,
        versions: (i16, i16),
    ) -> anyhow::Result<R::Response> {
        let slot = {
            let mut connections = self.connections.lock().await;
            connections.entry(addr.to_string()).or_default().clone()
        };
        let mut conn = slot.lock().await;
        if conn.as_ref().is_none_or(Connection::is_closed) {
            let options = ConnectionOptions {
                connect_timeout: Duration::from_secs(5),
                request_timeout: self.request_timeout,
                max_response_bytes: self.max_response_bytes,
                client_id: self.client_id.to_string(),
                version_caps: None,
                network: self.network.clone(),
                ..ConnectionOptions::default()
            };
            *conn = Some(Connection::connect_with(addr, self.security.apply(options)).await?);
        }
        let Some(connection) = conn.as_mut() else {
            anyhow::bail!("no connection to {addr}");
        };
        let (response, _) = connection.send(request, versions).await?;
        Ok(response)
    }
}
