//! KIP-951: a Produce or Fetch answered NOT_LEADER_OR_FOLLOWER (or, for Fetch, FENCED_LEADER_EPOCH) names the
//! partition's current leader and epoch, and the response lists those leaders' endpoints, so a client moves to
//! the new leader without a Metadata round trip.
//!
//! The leader and epoch are what this broker's partition was last told by the metadata image; the endpoints
//! are the live brokers' client listeners, as Metadata lists them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cluster::BrokerView;
use crate::Broker;

/// The hints one response collects: the leaders named so far, and their endpoints.
#[derive(Default)]
pub struct LeaderHints {
    leaders: BTreeMap<i32, Option<BrokerView>>,
}

impl LeaderHints {
    /// The current leader and leader epoch of `topic`-`partition` as this broker knows them, or `None` when it
    /// knows no leader (the client then falls back to Metadata). Remembers the leader for [`Self::endpoints`].
    pub fn leader(
        &mut self,
        broker: &Arc<Broker>,
        topic: &str,
        partition: i32,
    ) -> Option<(i32, i32)> {
        let p = broker.replica_manager.partition(topic, partition)?;
        let leader = p.leader();
        if leader < 0 {
            return None;
        }
        self.leaders.entry(leader).or_insert_with(|| {
            broker
                .cluster()
                .live_brokers()
                .into_iter()
                .find(|b| b.id == leader)
        });
        Some((leader, p.leader_epoch()))
    }

    /// The endpoints of every leader named (those this broker sees as live).
    pub fn endpoints(self) -> impl Iterator<Item = BrokerView> {
        self.leaders.into_values().flatten()
    }
}

/// Whether an error carries a leader hint (KIP-951).
pub fn wants_hint(error_code: i16, fetch: bool) -> bool {
    error_code == super::code::NOT_LEADER_OR_FOLLOWER
        || (fetch && error_code == super::code::FENCED_LEADER_EPOCH)
}

/// Adds the hints to a Fetch response (v12+ carries CurrentLeader, v16+ NodeEndpoints).
pub fn add_to_fetch(
    broker: &Arc<Broker>,
    version: i16,
    resp: &mut kafka_protocol::messages::FetchResponse,
) {
    use kafka_protocol::messages::fetch_response::{LeaderIdAndEpoch, NodeEndpoint};
    if version < 12 {
        return;
    }
    let mut hints = LeaderHints::default();
    for topic in &mut resp.responses {
        let name = if topic.topic_id.is_nil() {
            topic.topic.0.to_string()
        } else {
            match broker.replica_manager.topic_by_id(topic.topic_id) {
                Some(t) => t.name.clone(),
                None => continue,
            }
        };
        for p in &mut topic.partitions {
            if !wants_hint(p.error_code, true) {
                continue;
            }
            if let Some((leader, epoch)) = hints.leader(broker, &name, p.partition_index) {
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(leader.into())
                    .with_leader_epoch(epoch);
            }
        }
    }
    if version >= 16 {
        resp.node_endpoints = hints
            .endpoints()
            .map(|b| {
                NodeEndpoint::default()
                    .with_node_id(b.id.into())
                    .with_host(super::s(b.host))
                    .with_port(i32::from(b.port))
                    .with_rack(b.rack.map(super::s))
            })
            .collect();
    }
}

/// Adds the hints to a Produce response (v10+ carries CurrentLeader and NodeEndpoints).
pub fn add_to_produce(
    broker: &Arc<Broker>,
    version: i16,
    resp: &mut kafka_protocol::messages::ProduceResponse,
) {
    use kafka_protocol::messages::produce_response::{LeaderIdAndEpoch, NodeEndpoint};
    if version < 10 {
        return;
    }
    let mut hints = LeaderHints::default();
    for topic in &mut resp.responses {
        for p in &mut topic.partition_responses {
            if !wants_hint(p.error_code, false) {
                continue;
            }
            if let Some((leader, epoch)) = hints.leader(broker, &topic.name.0, p.index) {
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(leader.into())
                    .with_leader_epoch(epoch);
            }
        }
    }
    resp.node_endpoints = hints
        .endpoints()
        .map(|b| {
            NodeEndpoint::default()
                .with_node_id(b.id.into())
                .with_host(super::s(b.host))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.map(super::s))
        })
        .collect();
}
