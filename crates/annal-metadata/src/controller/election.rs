//! Leader election and ISR changes, as pure functions of the image: which `PartitionChangeRecord`s move
//! partitions off a broker that is being fenced or shut down, and which bring offline partitions back.
//!
//! Rules (Kafka's, without unclean election): a leader is chosen from the ISR, in replica (preference) order,
//! among brokers that are live and not shutting down; if there is none the partition goes offline (leader -1)
//! and its ISR keeps its last member, so the replica that has every committed record is the one that is
//! elected when it comes back. The image bumps leader and partition epochs on every change it applies.

use std::collections::BTreeSet;

use crate::image::{MetadataImage, PartitionState};
use crate::records::{PartitionChangeRecord, NO_LEADER};

/// The first replica, in preference order, that is in the ISR and acceptable; `None` if none is.
pub fn elect_leader(
    partition: &PartitionState,
    isr: &[i32],
    acceptable: impl Fn(i32) -> bool,
) -> Option<i32> {
    partition
        .replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r) && acceptable(*r))
}

/// Brokers that may lead or join an ISR once `leaving` is gone: usable in `image`, minus `leaving`.
fn acceptable_without(image: &MetadataImage, leaving: i32) -> BTreeSet<i32> {
    image
        .usable_brokers()
        .map(|b| b.id)
        .filter(|id| *id != leaving)
        .collect()
}

/// Changes that take `broker` out of every ISR it can leave (all but those where it is the last member) and
/// move its leaderships to other acceptable ISR members, or offline when there is none.
pub fn move_off_broker(image: &MetadataImage, broker: i32) -> Vec<PartitionChangeRecord> {
    let acceptable = acceptable_without(image, broker);
    let mut changes = Vec::new();
    for topic in image.topics.values() {
        for (index, p) in &topic.partitions {
            if p.leader != broker && !p.isr.contains(&broker) {
                continue;
            }
            let mut isr: Vec<i32> = p.isr.iter().copied().filter(|r| *r != broker).collect();
            if isr.is_empty() {
                // No unclean election: the last in-sync replica stays in the ISR, so it is the one elected when
                // it returns.
                isr = p.isr.clone();
            }
            let mut change = PartitionChangeRecord::new(topic.id, *index);
            if p.leader == broker {
                let leader =
                    elect_leader(p, &isr, |r| acceptable.contains(&r)).unwrap_or(NO_LEADER);
                change.leader = leader;
            } else if p.leader != NO_LEADER && !isr.contains(&p.leader) {
                unreachable!("a leader stays in the ISR when another member leaves");
            }
            if isr != p.isr {
                change.isr = Some(isr);
            }
            if change.isr.is_some() || change.leader != crate::records::LEADER_UNCHANGED {
                changes.push(change);
            }
        }
    }
    changes
}

/// Changes that elect a leader for every offline partition whose ISR contains `broker`, once `broker` is usable.
pub fn elect_offline_with(image: &MetadataImage, broker: i32) -> Vec<PartitionChangeRecord> {
    let mut acceptable: BTreeSet<i32> = image.usable_brokers().map(|b| b.id).collect();
    acceptable.insert(broker);
    let mut changes = Vec::new();
    for topic in image.topics.values() {
        for (index, p) in &topic.partitions {
            if p.leader != NO_LEADER || !p.isr.contains(&broker) {
                continue;
            }
            if let Some(leader) = elect_leader(p, &p.isr, |r| acceptable.contains(&r)) {
                let mut change = PartitionChangeRecord::new(topic.id, *index);
                change.leader = leader;
                changes.push(change);
            }
        }
    }
    changes
}
