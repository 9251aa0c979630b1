//! Leader election and ISR/ELR changes caused by broker transitions, as pure functions of the image (Kafka's
//! `ReplicationControlManager.generateLeaderAndIsrUpdates`); the per-partition rules are in
//! [`super::partition_change`]. docs/decisions/0010-controller-elections.md has the rules in prose.

use crate::image::{MetadataImage, PartitionState, TopicImage};
use crate::records::{ConfigResourceType, PartitionChangeRecord, NO_LEADER};

use super::partition_change::{Decision, Election, PartitionChange};
use super::ControllerConfig;
use crate::image::ConfigResource;

/// The election settings of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicPolicy {
    /// Effective `min.insync.replicas`, capped at the replication factor as Kafka caps it.
    pub min_isr: usize,
    /// `unclean.leader.election.enable`.
    pub unclean: bool,
}

/// Reads topic policies: the topic's config, else the cluster-wide broker default (`""`), else the
/// controller's static config.
pub struct Policies<'a> {
    image: &'a MetadataImage,
    min_isr_default: i32,
    unclean_default: bool,
}

impl<'a> Policies<'a> {
    pub fn new(image: &'a MetadataImage, config: &ControllerConfig) -> Self {
        Policies {
            image,
            min_isr_default: config.min_insync_replicas,
            unclean_default: config.unclean_leader_election_enable,
        }
    }

    fn config(&self, topic: &str, name: &str) -> Option<&'a str> {
        let lookup = |resource_type, resource_name: &str| {
            self.image
                .configs
                .get(&ConfigResource {
                    resource_type,
                    name: resource_name.to_string(),
                })
                .and_then(|c| c.get(name))
                .map(String::as_str)
        };
        lookup(ConfigResourceType::Topic, topic).or_else(|| lookup(ConfigResourceType::Broker, ""))
    }

    pub fn topic(&self, topic: &TopicImage) -> TopicPolicy {
        let min_isr = self
            .config(&topic.name, "min.insync.replicas")
            .and_then(|v| v.trim().parse::<i32>().ok())
            .unwrap_or(self.min_isr_default)
            .max(1);
        let rf = topic
            .partitions
            .values()
            .next()
            .map_or(1, |p| p.replicas.len());
        let unclean = self
            .config(&topic.name, "unclean.leader.election.enable")
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(self.unclean_default);
        TopicPolicy {
            min_isr: (min_isr as usize).min(rf),
            unclean,
        }
    }
}

/// Which broker transition the changes are for (Kafka's brokerToRemove / brokerToAdd / brokerWithUncleanShutdown).
#[derive(Debug, Clone, Copy, Default)]
struct Transition {
    /// Fenced or entering controlled shutdown: leaves every ISR and every leadership.
    remove: Option<i32>,
    /// Being unfenced: may lead although the image still shows it fenced.
    add: Option<i32>,
    /// Restarted without a clean shutdown: leaves the ISR and the ELR.
    unclean_shutdown: Option<i32>,
}

/// Logs an election that may have lost acknowledged records, naming the partition and the new leader.
fn log_unclean(topic: &str, partition: i32, d: &Decision) {
    if d.last_known_leader {
        // Every in-sync replica restarted without a clean shutdown (e.g. the whole cluster was killed): the last
        // leader is the replica that had every committed record, unless its own unflushed tail was lost.
        tracing::warn!(
            topic,
            partition,
            leader = d.record.leader,
            "{topic}-{partition} recovered on broker {}, its last known leader: every in-sync replica restarted \
             without a clean shutdown, so no replica could prove it was in sync. Nothing acknowledged is lost \
             unless that broker lost writes it had not flushed to disk",
            d.record.leader
        );
    } else if d.unclean {
        tracing::warn!(
            topic,
            partition,
            leader = d.record.leader,
            "unclean leader election: {topic}-{partition} is now led by broker {}, which was not in the ISR or \
             ELR; records only the old ISR had may be lost",
            d.record.leader
        );
    }
}

/// The changes for `transition` on every partition `select` picks.
fn updates(
    image: &MetadataImage,
    policies: &Policies<'_>,
    transition: Transition,
    select: impl Fn(&PartitionState) -> bool,
) -> Vec<PartitionChangeRecord> {
    // The broker being unfenced may lead although the image still shows it fenced, unless it is shutting down.
    let acceptable = |r: i32| {
        let usable = image.broker(r).is_some_and(|b| {
            b.is_usable() || (Some(r) == transition.add && !b.in_controlled_shutdown)
        });
        Some(r) != transition.remove && Some(r) != transition.unclean_shutdown && usable
    };
    let mut changes = Vec::new();
    for topic in image.topics.values() {
        let policy = policies.topic(topic);
        for (index, p) in &topic.partitions {
            if !select(p) {
                continue;
            }
            let leaving = [transition.remove, transition.unclean_shutdown];
            let isr: Vec<i32> = p
                .isr
                .iter()
                .copied()
                .filter(|r| !leaving.contains(&Some(*r)))
                .collect();
            let mut change = PartitionChange::new(p, topic.id, *index, &acceptable, policy.min_isr)
                .target_isr(isr)
                .election(if policy.unclean {
                    Election::Unclean
                } else {
                    Election::Online
                });
            if let Some(b) = transition.unclean_shutdown {
                change = change.unclean_shutdown(b);
            }
            if let Some(d) = change.build() {
                log_unclean(&topic.name, *index, &d);
                changes.push(d.record);
            }
        }
    }
    changes
}

/// `broker` is fenced or shutting down: it leaves every ISR (into the ELR while the ISR is below min ISR) and
/// its leaderships move to the first acceptable replica in the ISR (then ELR), or the partition goes offline.
pub fn move_off_broker(
    image: &MetadataImage,
    policies: &Policies<'_>,
    broker: i32,
) -> Vec<PartitionChangeRecord> {
    let transition = Transition {
        remove: Some(broker),
        ..Transition::default()
    };
    updates(image, policies, transition, |p| {
        p.leader == broker || p.isr.contains(&broker)
    })
}

/// `broker` registered a new incarnation without proof of a clean shutdown (KIP-966): its log may have lost
/// records, so it leaves the ISR and the ELR as well as its leaderships. It rejoins the ISR through
/// AlterPartition once it caught up, at its new broker epoch (KIP-903).
pub fn remove_unclean_restart(
    image: &MetadataImage,
    policies: &Policies<'_>,
    broker: i32,
) -> Vec<PartitionChangeRecord> {
    let transition = Transition {
        remove: Some(broker),
        unclean_shutdown: Some(broker),
        ..Transition::default()
    };
    updates(image, policies, transition, |p| {
        p.leader == broker || p.isr.contains(&broker) || p.elr.contains(&broker)
    })
}

/// `broker` is being unfenced: elect leaders for offline partitions it (or another live replica) may lead.
pub fn elect_offline_with(
    image: &MetadataImage,
    policies: &Policies<'_>,
    broker: i32,
) -> Vec<PartitionChangeRecord> {
    let transition = Transition {
        add: Some(broker),
        ..Transition::default()
    };
    updates(image, policies, transition, |p| p.leader == NO_LEADER)
}

/// Offline partitions get a leader where one is electable now (run on the controller's tick): an in-sync (or
/// eligible) replica that is usable, or, for topics with unclean election enabled, any live replica (Kafka's
/// `maybeElectUncleanLeaders`, so turning the config on takes effect). The clean half finishes an unfencing
/// whose elections spanned batches and failed part-way ([`super::MetadataWriter::write_in_batches`]); when
/// nothing failed there is nothing for it to do.
pub fn elect_offline(image: &MetadataImage, policies: &Policies<'_>) -> Vec<PartitionChangeRecord> {
    updates(image, policies, Transition::default(), |p| {
        p.leader == NO_LEADER
    })
}

/// One partition's election among usable brokers (ElectLeaders, auto rebalance); `None` if nothing changes.
pub fn elect_one(
    image: &MetadataImage,
    policies: &Policies<'_>,
    topic: &TopicImage,
    index: i32,
    election: Election,
) -> Option<PartitionChangeRecord> {
    let p = topic.partitions.get(&index)?;
    let policy = policies.topic(topic);
    let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_usable());
    let d = PartitionChange::new(p, topic.id, index, &acceptable, policy.min_isr)
        .election(election)
        .build()?;
    log_unclean(&topic.name, index, &d);
    Some(d.record)
}
