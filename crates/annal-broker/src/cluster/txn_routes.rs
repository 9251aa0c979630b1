//! What the transaction coordinator needs from the cluster: producer ids from the controller's blocks, and where
//! each partition's leader is (for WriteTxnMarkers), from this broker's metadata image.

use std::sync::Arc;

use annal_client::net::{Network, TokioNetwork};

use super::ClusterRuntime;
use crate::group::BoxFuture;
use crate::txn::{LeaderRoutes, ProducerIdSource};

pub struct ClusterTxnRoutes {
    cluster: Arc<ClusterRuntime>,
    node_id: i32,
    /// Markers go to the leaders' inter-broker endpoints (`inter.broker.listener.name`).
    inter_broker_listener: String,
    /// Where markers' and verifications' connections open (`BrokerEnv::connector`).
    network: Arc<dyn Network>,
}

impl ClusterTxnRoutes {
    pub fn new(cluster: Arc<ClusterRuntime>, node_id: i32, inter_broker_listener: String) -> Self {
        ClusterTxnRoutes {
            cluster,
            node_id,
            inter_broker_listener,
            network: Arc::new(TokioNetwork),
        }
    }

    /// Opens the coordinator's connections through `network` instead of the OS's TCP.
    pub fn with_network(mut self, network: Arc<dyn Network>) -> Self {
        self.network = network;
        self
    }
}

impl ProducerIdSource for ClusterTxnRoutes {
    fn next_producer_id(&self) -> BoxFuture<'_, anyhow::Result<i64>> {
        Box::pin(self.cluster.next_producer_id(self.node_id))
    }
}

impl LeaderRoutes for ClusterTxnRoutes {
    fn leader(&self, topic: &str, partition: i32) -> Result<Option<(i32, String)>, ()> {
        let image = self.cluster.image();
        let t = image.topic_by_name(topic).ok_or(())?;
        let state = t.partitions.get(&partition).ok_or(())?;
        if state.leader < 0 {
            return Ok(None);
        }
        let endpoint = image.broker(state.leader).and_then(|b| {
            b.listeners
                .iter()
                .find(|l| l.name == self.inter_broker_listener)
                .or_else(|| b.listeners.first())
                .map(|l| format!("{}:{}", l.host, l.port))
        });
        Ok(endpoint.map(|addr| (state.leader, addr)))
    }

    fn inter_broker_client(&self) -> crate::security::InterBrokerClient {
        self.cluster.inter_broker_client().clone()
    }

    fn network(&self) -> Arc<dyn Network> {
        self.network.clone()
    }
}
