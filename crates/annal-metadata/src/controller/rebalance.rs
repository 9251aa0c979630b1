//! Automatic preferred leader election (`auto.leader.rebalance.enable`): every
//! `leader.imbalance.check.interval.seconds` the active controller looks, per broker, at the partitions whose
//! preferred (first) replica it is; when more than `leader.imbalance.per.broker.percentage` of them are led by
//! someone else, it moves those leaderships back wherever the preferred replica is live and in the ISR.

use std::collections::BTreeMap;
use std::time::Instant;

use super::election;
use super::partition_change::Election;
use super::{Controller, State, WriteError};
use crate::image::MetadataImage;
use crate::records::{MetadataRecord, PartitionChangeRecord};

/// Most elections one check writes (Kafka's `maxElectionsPerImbalance`); the next check does the rest.
const MAX_ELECTIONS_PER_CHECK: usize = 1000;

/// The preferred elections that bring imbalanced brokers back under `percentage`.
pub fn rebalance_changes(
    image: &MetadataImage,
    policies: &election::Policies<'_>,
    percentage: u32,
) -> Vec<PartitionChangeRecord> {
    // preferred broker -> (partitions it prefers, those it does not lead)
    let mut by_broker: BTreeMap<i32, (usize, Vec<(uuid::Uuid, i32)>)> = BTreeMap::new();
    for t in image.topics.values() {
        for (i, p) in &t.partitions {
            let Some(&preferred) = p.replicas.first() else {
                continue;
            };
            let entry = by_broker.entry(preferred).or_default();
            entry.0 += 1;
            if p.leader != preferred {
                entry.1.push((t.id, *i));
            }
        }
    }
    let mut changes = Vec::new();
    for (broker, (preferred, not_led)) in by_broker {
        // not_led / preferred > percentage / 100, in integers.
        if not_led.len() * 100 <= preferred * percentage as usize {
            continue;
        }
        for (topic_id, index) in not_led {
            if changes.len() >= MAX_ELECTIONS_PER_CHECK {
                return changes;
            }
            let Some(topic) = image.topic_by_id(&topic_id) else {
                continue;
            };
            if let Some(c) = election::elect_one(image, policies, topic, index, Election::Preferred)
            {
                // Only a move to the preferred replica is a rebalance; other changes wait for their own cause.
                if c.leader == broker {
                    changes.push(c);
                }
            }
        }
    }
    changes
}

impl Controller {
    /// Runs the imbalance check when it is due (called from [`Controller::tick`] with the state lock held).
    pub(super) async fn maybe_rebalance(
        &self,
        state: &mut State,
        now: Instant,
    ) -> Result<(), WriteError> {
        if !self.config.auto_leader_rebalance_enable {
            return Ok(());
        }
        let interval = self.config.leader_imbalance_check_interval;
        match state.next_imbalance_check {
            None => {
                state.next_imbalance_check = Some(now + interval);
                return Ok(());
            }
            Some(due) if now < due => return Ok(()),
            Some(_) => state.next_imbalance_check = Some(now + interval),
        }
        let image = self.writer.image();
        let changes = rebalance_changes(
            &image,
            &self.policies(&image),
            self.config.leader_imbalance_per_broker_percentage,
        );
        if changes.is_empty() {
            return Ok(());
        }
        tracing::info!(
            partitions = changes.len(),
            "leader imbalance: moving leaderships back to preferred replicas"
        );
        self.writer
            .write(
                changes
                    .into_iter()
                    .map(MetadataRecord::PartitionChange)
                    .collect(),
            )
            .await?;
        Ok(())
    }
}
