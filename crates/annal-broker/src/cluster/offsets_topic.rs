//! Creating `__consumer_offsets` (and `__transaction_state`) in a cluster: a CreateTopics to the active controller (the only writer of
//! metadata), with `offsets.topic.replication.factor` capped at the live brokers, as Kafka's auto-creation of
//! its internal topics does. The topic then reaches this broker's partitions through the image, like any other.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::CreateTopicsRequest;
use kafka_protocol::protocol::StrBytes;

use super::controller_channel::ControllerChannel;
use super::ClusterRuntime;
use crate::group::{BoxFuture, OffsetsTopicCreator, OffsetsTopicSpec};
use crate::replica::ReplicaManager;
use annal_metadata::MetadataNode;

/// How long creation waits for the topic to reach this broker's partitions.
const VISIBLE_WAIT_MAX: Duration = Duration::from_secs(5);
const VISIBLE_POLL: Duration = Duration::from_millis(20);
const TOPIC_ALREADY_EXISTS: i16 = 36;

pub struct ControllerOffsetsTopic {
    channel: Arc<ControllerChannel>,
    node: Arc<MetadataNode>,
    replicas: Arc<ReplicaManager>,
}

impl ControllerOffsetsTopic {
    pub fn new(cluster: &ClusterRuntime, replicas: Arc<ReplicaManager>) -> ControllerOffsetsTopic {
        ControllerOffsetsTopic {
            channel: cluster.channel().clone(),
            node: cluster.node().clone(),
            replicas,
        }
    }

    async fn create_now(&self, spec: OffsetsTopicSpec) -> anyhow::Result<()> {
        let live = self.node.image().live_brokers().count();
        let live = i16::try_from(live).unwrap_or(i16::MAX);
        let name = spec.name;
        anyhow::ensure!(live > 0, "no live broker to place {name} on yet");
        let replication_factor = spec.replication_factor.clamp(1, live);
        let mut spec = spec;
        // A min.insync.replicas above the replicas placed would refuse every acks=all write (see decision 0012).
        if let Some(min_isr) = spec.configs.get_mut("min.insync.replicas") {
            let capped = min_isr
                .parse::<i16>()
                .unwrap_or(1)
                .clamp(1, replication_factor);
            *min_isr = capped.to_string();
        }
        let topic = CreatableTopic::default()
            .with_name(StrBytes::from_static_str(name).into())
            .with_num_partitions(spec.partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                spec.configs
                    .into_iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k))
                            .with_value(Some(StrBytes::from_string(v)))
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let resp = self.channel.send(&req, 5).await?;
        for t in &resp.topics {
            anyhow::ensure!(
                t.error_code == 0 || t.error_code == TOPIC_ALREADY_EXISTS,
                "the controller refused to create {name} (error {}: {})",
                t.error_code,
                t.error_message.as_deref().unwrap_or("")
            );
        }
        tracing::info!(
            replication_factor,
            partitions = spec.partitions,
            "asked the controller to create {name}"
        );
        let deadline = tokio::time::Instant::now() + VISIBLE_WAIT_MAX;
        while !self.applied_here(name) {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{name} was created but has not reached this broker yet; retry"
            );
            tokio::time::sleep(VISIBLE_POLL).await;
        }
        Ok(())
    }

    /// Whether this broker's partitions of `name` have caught up with the topic in its metadata image: each
    /// one exists and is at (or past) the image's partition epoch, which every leadership or ISR change
    /// raises (a partition is installed at partition epoch -1, led by nobody). The topic becomes visible in the registry
    /// before its partitions take their leaderships, so visibility alone let the coordinator look for the
    /// partitions it leads too early and answer NOT_COORDINATOR to the request that created the topic.
    fn applied_here(&self, name: &str) -> bool {
        let image = self.node.image();
        let Some(topic) = image.topic_by_name(name) else {
            return false;
        };
        topic.partitions.iter().all(|(&index, state)| {
            self.replicas
                .partition(name, index)
                .is_some_and(|p| p.partition_epoch() >= state.partition_epoch)
        })
    }
}

impl OffsetsTopicCreator for ControllerOffsetsTopic {
    fn create(&self, spec: OffsetsTopicSpec) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(self.create_now(spec))
    }
}
