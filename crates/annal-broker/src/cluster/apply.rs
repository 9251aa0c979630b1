//! Applies the metadata image to this broker's partitions: topics the image has and the broker does not are
//! created (with the image's topic id and configs), topics gone from the image are deleted, grown topics get
//! their new partitions, and every partition is made leader or follower as the image says.
//!
//! Idempotent: applying the same image twice changes nothing, so the watcher can simply apply the newest image
//! whenever one is published (intermediate images may be skipped; only the latest state matters).
//!
//! Every broker keeps a log for every partition of every topic, empty where it is not a replica, so the replica
//! manager's dense partition map holds. Leaders are written by producers, follower replicas by the replica
//! fetchers this module starts and stops (see `docs/decisions/0010-replication.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use annal_metadata::image::{ConfigResource, MetadataImage};
use annal_metadata::records::ConfigResourceType;

use crate::replica::{Partition, ReplicaFetchers, ReplicaManager};

/// What one application changed, for the log line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub topics_created: usize,
    pub topics_deleted: usize,
    pub leadership_changes: usize,
}

/// The partitions whose leadership an application changed: their leader-epoch checkpoints still have to be made
/// durable ([`EpochsToSync::sync`]). Until then an append in a new epoch makes its own partition's durable first,
/// so this is a batching of fsyncs, not a condition for serving.
#[must_use = "the new leader epochs are made durable in a batch by `sync`"]
pub struct EpochsToSync(Vec<Arc<Partition>>);

/// Partitions per batch sync: an append to a partition of a batch in progress waits for that batch (two
/// file-system syncs and this many small file writes), so a batch is kept short; 100,000 partitions made
/// leaders at a restart are synced in 25 batches rather than one that holds every first append for seconds.
const EPOCH_SYNC_BATCH: usize = 4096;

impl EpochsToSync {
    /// Makes the leader-epoch checkpoints durable, [`EPOCH_SYNC_BATCH`] partitions at a time (blocking).
    pub fn sync(self) {
        for batch in self.0.chunks(EPOCH_SYNC_BATCH) {
            Partition::sync_leader_epochs_of(batch);
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Applies `image` (blocking: it opens and deletes logs). With `fetchers` (and the inter-broker listener name
/// to find leaders' endpoints by), every partition this broker is a follower replica of is fetched from its
/// leader, and no other. The partitions are servable as the image says when this returns; the new leader
/// epochs' checkpoints are synced by the caller, after it has reported the image applied (a restart of 100,000
/// partitions spent 15-20 s of its start-up there).
pub fn apply_image(
    rm: &ReplicaManager,
    image: &MetadataImage,
    fetchers: Option<(&ReplicaFetchers, &str)>,
) -> anyhow::Result<(Applied, EpochsToSync)> {
    let me = rm.local_broker_id();
    let mut applied = Applied::default();
    // Partitions whose leadership changed: their leader-epoch checkpoints are made durable together
    // afterwards (two file-system syncs per batch instead of two fsyncs each; an append in the new epoch
    // waits for its own).
    let mut changed_parts = Vec::new();
    for local in rm.topics() {
        let keep = image
            .topic_by_name(&local.name)
            .is_some_and(|t| t.id == local.id);
        if !keep {
            if let Some((f, _)) = fetchers {
                for p in rm.partitions_of(&local.name) {
                    f.unfollow(&local.name, p.index());
                }
            }
            rm.delete_topic(&local.name)?;
            applied.topics_deleted += 1;
        }
    }
    for topic in image.topics.values() {
        let configs: BTreeMap<String, String> = image
            .configs
            .get(&ConfigResource {
                resource_type: ConfigResourceType::Topic,
                name: topic.name.clone(),
            })
            .cloned()
            .unwrap_or_default();
        let count = i32::try_from(topic.partitions.len())
            .map_err(|_| anyhow::anyhow!("topic {} has too many partitions", topic.name))?;
        match rm.topic(&topic.name) {
            None => {
                rm.create_topic_with_id(&topic.name, topic.id, count, configs)?;
                applied.topics_created += 1;
            }
            Some(local) => {
                if local.partition_count < count {
                    rm.create_partitions(&topic.name, count)?;
                }
                if local.configs != configs {
                    rm.alter_topic_configs(&topic.name, configs)?;
                }
            }
        }
        for (&index, state) in &topic.partitions {
            let Some(p) = rm.partition(&topic.name, index) else {
                continue;
            };
            if let Some((f, listener)) = fetchers {
                follow_or_not(f, listener, image, me, &p, state);
            }
            let unchanged = p.leader_epoch() == state.leader_epoch
                && p.partition_epoch() == state.partition_epoch
                && p.leader() == state.leader
                && p.isr() == state.isr
                && p.replicas() == state.replicas;
            if unchanged {
                continue;
            }
            let changed = if state.leader == me {
                p.make_leader(
                    state.leader_epoch,
                    state.partition_epoch,
                    state.replicas.clone(),
                    state.isr.clone(),
                )
            } else {
                p.make_follower(
                    state.leader,
                    state.leader_epoch,
                    state.partition_epoch,
                    state.replicas.clone(),
                    state.isr.clone(),
                )
            };
            if changed {
                applied.leadership_changes += 1;
                changed_parts.push(p);
            }
        }
    }
    Ok((applied, EpochsToSync(changed_parts)))
}

/// Fetches the partition from its leader if this broker is one of its followers, else stops fetching it.
fn follow_or_not(
    fetchers: &ReplicaFetchers,
    listener: &str,
    image: &MetadataImage,
    me: i32,
    p: &Arc<Partition>,
    state: &annal_metadata::image::PartitionState,
) {
    let follower = state.leader >= 0 && state.leader != me && state.replicas.contains(&me);
    let endpoint = image.broker(state.leader).and_then(|b| {
        b.listeners
            .iter()
            .find(|l| l.name == listener)
            .or_else(|| b.listeners.first())
            .map(|l| format!("{}:{}", l.host, l.port))
    });
    match endpoint {
        Some(addr) if follower => fetchers.follow(p.clone(), state.leader, addr),
        _ => fetchers.unfollow(p.topic(), p.index()),
    }
}
