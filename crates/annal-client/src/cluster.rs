//! The cluster as a whole: brokers, controller, topics' partition health (Metadata + DescribeCluster) and the
//! KRaft metadata quorum (DescribeQuorum).
//!
//! In KRaft, Metadata and DescribeCluster sent to a broker name a random live broker as "controller" (KIP-590:
//! clients cannot reach controllers); the active controller is the quorum leader that DescribeQuorum reports.

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::{
    describe_quorum_request::{PartitionData, TopicData},
    describe_quorum_response::ReplicaState,
    ApiKey, DescribeClusterRequest, DescribeQuorumRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{topic_from_response, Client, TopicMetadata};
use crate::errors::describe;

mod versions {
    pub const DESCRIBE_CLUSTER: (i16, i16) = (0, 2);
    /// v2 (KIP-853) adds replica directory ids and the voters' endpoints, neither of which we show.
    pub const DESCRIBE_QUORUM: (i16, i16) = (0, 2);
    /// `include_fenced_brokers` exists from v2 (KIP-1073).
    pub const DESCRIBE_CLUSTER_FENCED: i16 = 2;
}

/// The KRaft metadata log, the one partition DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// A voter whose last fetch is this much older than the leader's clock (the leader reports its own entry at its
/// current time) is counted as down. Kafka's controller.quorum.fetch.timeout.ms is 2 s; this leaves margin.
const VOTER_STALE_MS: i64 = 10_000;

/// One broker as DescribeCluster (or Metadata) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Listed only when the broker supports DescribeCluster v2 (fenced brokers are otherwise left out).
    pub fenced: bool,
}

/// What Metadata (all topics) and DescribeCluster say about the cluster.
#[derive(Debug, Clone)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    /// -1 when unknown. In KRaft this is a live broker, not the active controller (see the module notes).
    pub controller_id: i32,
    /// Sorted by node id.
    pub brokers: Vec<ClusterBroker>,
    /// Topics the broker listed without error, sorted by name.
    pub topics: Vec<TopicMetadata>,
    /// Topics the broker listed with an error code, and that code.
    pub topic_errors: Vec<(String, i16)>,
}

/// The metadata quorum as DescribeQuorum reports it.
#[derive(Debug, Clone)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    /// Sorted by node id.
    pub voters: Vec<QuorumReplica>,
    /// Sorted by node id. In KRaft, brokers replicate the metadata log as observers.
    pub observers: Vec<QuorumReplica>,
}

/// One replica of the metadata log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumReplica {
    pub node_id: i32,
    pub log_end_offset: i64,
    /// How far this replica's log end is behind the leader's (0 for the leader itself; never negative).
    pub lag: i64,
    /// Leader clock, ms; -1 if never.
    pub last_fetch_timestamp: i64,
    /// Leader clock, ms; -1 if never.
    pub last_caught_up_timestamp: i64,
}

impl ClusterDescription {
    /// Whether Metadata lists a broker with this id.
    pub fn has_broker(&self, node_id: i32) -> bool {
        self.brokers
            .iter()
            .any(|b| b.node_id == node_id && !b.fenced)
    }
}

impl QuorumDescription {
    /// Quorum members that are not live brokers: observers (brokers) missing from `cluster.brokers`, and voters
    /// missing from it that have also stopped fetching. A voter absent from Metadata may be a dedicated
    /// controller, which is never a broker, so absence alone does not make it down. Sorted, no duplicates.
    pub fn nodes_down(&self, cluster: &ClusterDescription) -> Vec<i32> {
        let leader_clock = self
            .voters
            .iter()
            .find(|v| v.node_id == self.leader_id)
            .map(|v| v.last_fetch_timestamp);
        let voter_stale = |v: &QuorumReplica| {
            v.node_id != self.leader_id
                && match leader_clock {
                    Some(now) if now >= 0 => {
                        v.last_fetch_timestamp < 0 || now - v.last_fetch_timestamp > VOTER_STALE_MS
                    }
                    // Without the leader's clock, only a voter that never fetched is known to be down.
                    _ => v.last_fetch_timestamp < 0,
                }
        };
        let down: BTreeSet<i32> = self
            .observers
            .iter()
            .filter(|o| !cluster.has_broker(o.node_id))
            .chain(
                self.voters
                    .iter()
                    .filter(|v| !cluster.has_broker(v.node_id) && voter_stale(v)),
            )
            .map(|r| r.node_id)
            .collect();
        down.into_iter().collect()
    }
}

impl Client {
    /// Brokers, controller and every topic (Metadata for all topics, at the highest common version, plus
    /// DescribeCluster when the broker offers it, for racks and fenced brokers).
    pub async fn describe_cluster(&mut self) -> Result<ClusterDescription> {
        let metadata = self.metadata_response(None).await?;
        let mut description = ClusterDescription {
            cluster_id: metadata.cluster_id.as_ref().map(|c| c.to_string()),
            controller_id: metadata.controller_id.0,
            brokers: metadata
                .brokers
                .iter()
                .map(|b| ClusterBroker {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                    fenced: false,
                })
                .collect(),
            topics: Vec::new(),
            topic_errors: Vec::new(),
        };
        for (code, topic) in metadata.topics.into_iter().map(topic_from_response) {
            if code == 0 {
                description.topics.push(topic);
            } else {
                description.topic_errors.push((topic.name, code));
            }
        }
        description.topics.sort_by(|a, b| a.name.cmp(&b.name));
        description.topic_errors.sort();
        if self
            .bootstrap_conn()
            .broker_versions(ApiKey::DescribeCluster)
            .is_some()
        {
            self.merge_describe_cluster(&mut description).await?;
        }
        description.brokers.sort_by_key(|b| b.node_id);
        Ok(description)
    }

    /// DescribeCluster's cluster id, controller id and brokers replace Metadata's (they are the same view, plus
    /// fenced brokers from v2).
    async fn merge_describe_cluster(&mut self, description: &mut ClusterDescription) -> Result<()> {
        let conn = self.bootstrap_conn();
        let version = conn.pick_version(ApiKey::DescribeCluster, versions::DESCRIBE_CLUSTER)?;
        let request = DescribeClusterRequest::default()
            .with_include_fenced_brokers(version >= versions::DESCRIBE_CLUSTER_FENCED);
        let response = conn.send_version(&request, version).await?;
        if response.error_code != 0 {
            bail!(
                "broker at {} refused DescribeCluster: {}",
                conn.addr(),
                describe(
                    response.error_code,
                    response.error_message.as_ref().map(|m| m.as_str())
                )
            );
        }
        description.cluster_id = Some(response.cluster_id.to_string());
        description.controller_id = response.controller_id.0;
        description.brokers = response
            .brokers
            .iter()
            .map(|b| ClusterBroker {
                node_id: b.broker_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.to_string()),
                fenced: b.is_fenced,
            })
            .collect();
        Ok(())
    }

    /// The metadata quorum, or `None` when the broker does not offer DescribeQuorum (ApiKey 55).
    pub async fn describe_quorum(&mut self) -> Result<Option<QuorumDescription>> {
        let conn = self.bootstrap_conn();
        if conn.broker_versions(ApiKey::DescribeQuorum).is_none() {
            return Ok(None);
        }
        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let (response, _) = conn.send(&request, versions::DESCRIBE_QUORUM).await?;
        let addr = conn.addr().to_string();
        if response.error_code != 0 {
            bail!(
                "broker at {addr} refused DescribeQuorum: {}",
                describe(
                    response.error_code,
                    response.error_message.as_ref().map(|m| m.as_str())
                )
            );
        }
        let partition = response
            .topics
            .into_iter()
            .filter(|t| t.topic_name.as_str() == METADATA_TOPIC)
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == 0)
            .ok_or_else(|| {
                anyhow!(
                    "broker at {addr} answered DescribeQuorum without {METADATA_TOPIC} partition 0"
                )
            })?;
        if partition.error_code != 0 {
            bail!(
                "broker at {addr} cannot describe the metadata quorum: {}",
                describe(
                    partition.error_code,
                    partition.error_message.as_ref().map(|m| m.as_str())
                )
            );
        }
        let leader_id = partition.leader_id.0;
        let leader_end = partition
            .current_voters
            .iter()
            .find(|v| v.replica_id.0 == leader_id)
            .map(|v| v.log_end_offset)
            .unwrap_or(partition.high_watermark);
        let replicas = |states: &[ReplicaState]| {
            let mut out: Vec<QuorumReplica> = states
                .iter()
                .map(|s| QuorumReplica {
                    node_id: s.replica_id.0,
                    log_end_offset: s.log_end_offset,
                    lag: leader_end.saturating_sub(s.log_end_offset).max(0),
                    last_fetch_timestamp: s.last_fetch_timestamp,
                    last_caught_up_timestamp: s.last_caught_up_timestamp,
                })
                .collect();
            out.sort_by_key(|r| r.node_id);
            out
        };
        Ok(Some(QuorumDescription {
            leader_id,
            leader_epoch: partition.leader_epoch,
            high_watermark: partition.high_watermark,
            voters: replicas(&partition.current_voters),
            observers: replicas(&partition.observers),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(node_id: i32) -> ClusterBroker {
        ClusterBroker {
            node_id,
            host: "h".into(),
            port: 9092,
            rack: None,
            fenced: false,
        }
    }

    fn replica(node_id: i32, last_fetch_timestamp: i64) -> QuorumReplica {
        QuorumReplica {
            node_id,
            log_end_offset: 10,
            lag: 0,
            last_fetch_timestamp,
            last_caught_up_timestamp: last_fetch_timestamp,
        }
    }

    #[test]
    fn nodes_down_are_missing_observers_and_silent_voters() {
        let cluster = ClusterDescription {
            cluster_id: None,
            controller_id: 1,
            brokers: vec![broker(1), broker(2)],
            topics: vec![],
            topic_errors: vec![],
        };
        let now = 1_000_000;
        let quorum = QuorumDescription {
            leader_id: 3000,
            leader_epoch: 5,
            high_watermark: 10,
            // 3000: leader, dedicated controller. 3001: fetching controller. 3002: silent controller.
            voters: vec![
                replica(3000, now),
                replica(3001, now - 500),
                replica(3002, now - 60_000),
            ],
            // 4 is a broker that left Metadata (fenced or dead) but still appears as an observer.
            observers: vec![replica(1, now), replica(2, now), replica(4, now - 20_000)],
        };
        assert_eq!(quorum.nodes_down(&cluster), vec![4, 3002]);
        let mut fenced = cluster.clone();
        fenced.brokers[1].fenced = true;
        assert_eq!(quorum.nodes_down(&fenced), vec![2, 4, 3002]);
    }
}
