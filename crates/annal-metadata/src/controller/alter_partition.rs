//! AlterPartition (56): a partition leader asks to change its ISR (followers caught up or fell behind).
//! Kafka's rules (`ReplicationControlManager.alterPartition`, KIP-497/841/903): only the current leader, at the
//! current leader and partition epochs, may change the ISR; the new ISR keeps the leader, names only replicas,
//! and only brokers that are live, not shutting down and (v3) at the broker epoch the leader saw. The change goes
//! through [`PartitionChange`], so the ELR follows the ISR (KIP-966) and a reassignment whose new replicas are
//! all in sync completes.

use std::collections::BTreeSet;

use kafka_protocol::messages::alter_partition_request::PartitionData;
use kafka_protocol::messages::alter_partition_response;
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};
use uuid::Uuid;

use super::errors::*;
use super::partition_change::{Election, PartitionChange, RECOVERED, RECOVERING};
use super::Controller;
use crate::image::MetadataImage;
use crate::records::{MetadataRecord, PartitionChangeRecord, LEADER_UNCHANGED};

/// Checks one partition's request against the image; the new ISR, or the error code.
fn check(
    image: &MetadataImage,
    leader: i32,
    topic_id: &Uuid,
    p: &PartitionData,
) -> Result<Vec<i32>, i16> {
    if image.topic_by_id(topic_id).is_none() {
        return Err(UNKNOWN_TOPIC_ID);
    }
    let state = image
        .partition(topic_id, p.partition_index)
        .ok_or(UNKNOWN_TOPIC_OR_PARTITION)?;
    if state.leader != leader {
        return Err(NOT_LEADER_OR_FOLLOWER);
    }
    if p.leader_epoch != state.leader_epoch {
        return Err(FENCED_LEADER_EPOCH);
    }
    if p.partition_epoch != state.partition_epoch {
        return Err(INVALID_UPDATE_VERSION);
    }
    // v3 names members with the broker epoch the leader saw them at; v2 by id alone.
    let members: Vec<(i32, Option<i64>)> = if p.new_isr_with_epochs.is_empty() {
        p.new_isr.iter().map(|b| (b.0, None)).collect()
    } else {
        p.new_isr_with_epochs
            .iter()
            .map(|b| (b.broker_id.0, Some(b.broker_epoch)))
            .collect()
    };
    let isr: Vec<i32> = members.iter().map(|(id, _)| *id).collect();
    let distinct: BTreeSet<i32> = isr.iter().copied().collect();
    if distinct.len() != isr.len()
        || !isr.contains(&leader)
        || isr.iter().any(|r| !state.replicas.contains(r))
    {
        return Err(INVALID_REQUEST);
    }
    // A leader recovering from an unclean election reports RECOVERED once it has; until then it is alone.
    if p.leader_recovery_state == RECOVERING && isr.len() > 1 {
        return Err(INVALID_REQUEST);
    }
    if state.leader_recovery_state != RECOVERING && p.leader_recovery_state == RECOVERING {
        return Err(INVALID_REQUEST);
    }
    if p.leader_recovery_state != RECOVERING && p.leader_recovery_state != RECOVERED {
        return Err(INVALID_REQUEST);
    }
    for (id, epoch) in &members {
        let eligible = image
            .broker(*id)
            .is_some_and(|b| b.is_usable() && epoch.is_none_or(|e| e == b.epoch));
        // The leader itself stays even while shutting down: it is leaving leadership through the controller.
        if !eligible && *id != leader {
            return Err(INELIGIBLE_REPLICA);
        }
    }
    Ok(isr)
}

/// The change for a checked request, through Kafka's partition change rules.
fn plan(
    image: &MetadataImage,
    policies: &super::election::Policies<'_>,
    acceptable: &dyn Fn(i32) -> bool,
    topic_id: Uuid,
    p: &PartitionData,
    isr: Vec<i32>,
) -> Option<PartitionChangeRecord> {
    let topic = image.topic_by_id(&topic_id)?;
    let state = topic.partitions.get(&p.partition_index)?;
    let policy = policies.topic(topic);
    let election = if policy.unclean {
        Election::Unclean
    } else {
        Election::Online
    };
    PartitionChange::new(
        state,
        topic_id,
        p.partition_index,
        acceptable,
        policy.min_isr,
    )
    .election(election)
    .target_isr(isr)
    .target_recovery_state(p.leader_recovery_state)
    .build()
    .map(|d| d.record)
}

impl Controller {
    /// AlterPartition (56).
    pub async fn alter_partition(&self, req: AlterPartitionRequest) -> AlterPartitionResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let leader = req.broker_id.0;
        if image
            .broker(leader)
            .is_none_or(|b| b.epoch != req.broker_epoch)
        {
            return AlterPartitionResponse::default().with_error_code(STALE_BROKER_EPOCH);
        }
        let mut records = Vec::new();
        let mut outcomes: Vec<(Uuid, i32, Result<(), i16>)> = Vec::new();
        let policies = self.policies(&image);
        let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_usable());
        for t in &req.topics {
            for p in &t.partitions {
                let outcome = check(&image, leader, &t.topic_id, p).and_then(|isr| {
                    let change = plan(&image, &policies, &acceptable, t.topic_id, p, isr);
                    let moved = change
                        .as_ref()
                        .is_some_and(|c| c.leader != LEADER_UNCHANGED && c.leader != leader);
                    records.extend(change.map(MetadataRecord::PartitionChange));
                    // Completing a reassignment may move the leadership: the leader must reload metadata.
                    if moved {
                        Err(NEW_LEADER_ELECTED)
                    } else {
                        Ok(())
                    }
                });
                outcomes.push((t.topic_id, p.partition_index, outcome));
            }
        }
        let mut write_error = None;
        if !records.is_empty() {
            if let Err(e) = self.writer.write(records).await {
                write_error = Some(e.code());
            }
        }
        let image = self.writer.image();
        let mut topics: Vec<alter_partition_response::TopicData> = Vec::new();
        for (topic_id, index, outcome) in outcomes {
            let mut data =
                alter_partition_response::PartitionData::default().with_partition_index(index);
            match (outcome, write_error) {
                // The change that moved the leader was not written: report why.
                (Err(NEW_LEADER_ELECTED), Some(code)) => data = data.with_error_code(code),
                (Err(code), _) | (Ok(()), Some(code)) => data = data.with_error_code(code),
                (Ok(()), None) => {
                    let s = image
                        .partition(&topic_id, index)
                        .expect("the partition was checked and nothing removed it under the lock");
                    data = data
                        .with_leader_id(BrokerId(s.leader))
                        .with_leader_epoch(s.leader_epoch)
                        .with_isr(s.isr.iter().map(|b| BrokerId(*b)).collect())
                        .with_leader_recovery_state(s.leader_recovery_state)
                        .with_partition_epoch(s.partition_epoch);
                }
            }
            match topics.iter_mut().find(|t| t.topic_id == topic_id) {
                Some(t) => t.partitions.push(data),
                None => topics.push(
                    alter_partition_response::TopicData::default()
                        .with_topic_id(topic_id)
                        .with_partitions(vec![data]),
                ),
            }
        }
        AlterPartitionResponse::default().with_topics(topics)
    }
}
