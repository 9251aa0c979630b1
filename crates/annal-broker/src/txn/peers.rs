//! Connections from this broker's transaction machinery to other brokers (to itself too, as Kafka does): markers
//! to partition leaders, KIP-890 verification to transaction coordinators. One connection per address, one request
//! at a time on it; a closed connection is reopened by the next request. The map holds one entry per broker
//! address the cluster has, so it is bounded by the cluster's size.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use annal_client::{Connection, ConnectionOptions};
use kafka_protocol::protocol::Request;
use tokio::sync::Mutex;

pub(crate) struct Peers {
    client_id: &'static str,
    request_timeout: Duration,
    max_response_bytes: usize,
    /// TLS and SASL of the inter-broker listener.
    security: crate::security::InterBrokerClient,
    connections: Mutex<HashMap<String, Arc<Mutex<Option<Connection>>>>>,
}

impl Peers {
    pub fn new(
        client_id: &'static str,
        request_timeout: Duration,
        max_response_bytes: usize,
        security: crate::security::InterBrokerClient,
    ) -> Peers {
        Peers {
            client_id,
            request_timeout,
            max_response_bytes,
            security,
            connections: Mutex::new(HashMap::new()),
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
