//! One partition as this broker holds it: its replication state (leader epoch, replicas, ISR, whether this broker
//! leads it), its high watermark, and the only lock on its [`Log`].
//!
//! Locking order: the state lock (`state`) before the log lock (`log`), never the reverse. Neither is held across
//! an `await`: every method here is synchronous; those that touch the disk are called off the async workers.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use annal_log::producer::ProducerStateManager;
use annal_log::{
    AppendInfo, AppendOptions, AppendOrigin, DurableLog, DurableWait, FileSlice, GroupCommit, Log,
    LogConfig, LogError, SyncHandle, TimestampType,
};
use annal_metadata::env::testing::{planted, PlantedBug};
use parking_lot::{Condvar, Mutex, RwLock};
use uuid::Uuid;

use super::checkpoints;
use super::delayed_fetch::FetchWatchers;
use super::PartitionError;

/// Most leader epochs a partition remembers (epoch -> first offset). Every leader change adds one; the oldest
/// fall off, so OffsetForLeaderEpoch for an epoch that old answers with the earliest one kept.
pub const LEADER_EPOCHS_MAX: usize = 1024;

/// The topic settings a partition applies itself (derived from the topic's configs and the broker's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionConfig {
    /// `flush.messages=1`: acknowledge only fsynced records, and expose only them (high watermark = flushed).
    pub durable: bool,
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
    /// `min.insync.replicas`: the ISR size acks=all needs.
    pub min_insync_replicas: i32,
}

impl Default for PartitionConfig {
    fn default() -> PartitionConfig {
        PartitionConfig {
            durable: false,
            log_append_time: false,
            min_insync_replicas: 1,
        }
    }
}

/// Who leads the partition, as this broker last learned it from the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReplicaState {
    leader_epoch: i32,
    /// The leader's broker id (-1 when none is known).
    leader: i32,
    replicas: Vec<i32>,
    /// The ISR the controller last confirmed (through the image or an AlterPartition answer).
    isr: Vec<i32>,
    /// The ISR this leader asked the controller for and has no answer to yet (one request in flight at most).
    /// It is never acted on: until confirmed, the high watermark counts the union of both (Kafka's maximal
    /// ISR), so neither a member leaving nor one joining can let it pass what a confirmed member lacks.
    pending_isr: Option<Vec<i32>>,
    /// Bumped by the controller on every change of this partition (ISR or leader); AlterPartition carries it.
    partition_epoch: i32,
    /// (epoch, first offset of that epoch), ascending in both: Kafka's leader-epoch cache, persisted in the
    /// partition directory's `leader-epoch-checkpoint`.
    epochs: Vec<(i32, i64)>,
    /// What this leader knows of each follower (empty while following).
    followers: HashMap<i32, FollowerProgress>,
    config: PartitionConfig,
}

/// A leader-epoch cache changed by a leadership change and not yet durable (`Partition::defer_epochs`).
#[derive(Debug, Default)]
struct EpochsSync {
    /// Bumped by every deferred change, so a batch sync can tell whether what it staged is still current.
    generation: u64,
    pending: Option<Vec<(i32, i64)>>,
    /// A batch sync (`Partition::sync_leader_epochs_of`) is writing `pending`: appends wait for it.
    claimed: bool,
}

/// A follower as its leader sees it, from its fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end offset: the offset of its last fetch (-1 before its first at this epoch).
    pub log_end_offset: i64,
    /// The last time the follower had everything the leader had (Kafka's lastCaughtUpTimeMs).
    pub last_caught_up_ms: i64,
    /// The broker epoch its fetches carry (-1 if unknown, before Fetch v15).
    pub broker_epoch: i64,
    /// The leader's log end and the time at the follower's previous fetch: a fetch that reaches that offset
    /// proves the follower was caught up then.
    last_fetch_leader_end: i64,
    last_fetch_ms: i64,
}

impl ReplicaState {
    /// The ISR the high watermark must respect: the confirmed one plus any member a pending change adds.
    fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        if let Some(pending) = &self.pending_isr {
            for r in pending {
                if !isr.contains(r) {
                    isr.push(*r);
                }
            }
        }
        isr
    }
}

/// A follower's fetch, as the leader checks and records it.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaFetch {
    pub replica_id: i32,
    /// -1 when the request carries none (Fetch < v15).
    pub broker_epoch: i64,
    /// The epoch of the last batch the follower has (-1: none, or Fetch < v12).
    pub last_fetched_epoch: i32,
}

/// An ISR change this leader wants the controller to make (AlterPartition), at the epochs it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// (broker id, broker epoch) of every member of the proposed ISR.
    pub new_isr: Vec<(i32, i64)>,
}

/// What a leader append returned: the engine's answer, and for durable partitions the wait for its fsync
/// (await it, then call [`Partition::high_watermark_moved`]).
pub struct LeaderAppend {
    pub info: AppendInfo,
    pub durable: Option<DurableWait>,
}

/// What a fetch read: the records as a file range (sent with `sendfile`, never copied here), and the offsets the
/// response reports. `records` carries a read error (such as OFFSET_OUT_OF_RANGE) with the offsets still set.
pub struct PartitionRead {
    pub records: Result<Option<FileSlice>, PartitionError>,
    pub high_watermark: i64,
    /// `min(high watermark, first unstable offset)`: what read_committed consumers may read.
    pub last_stable_offset: i64,
    /// For a read_committed read: the aborted transactions `(producer id, first offset)` overlapping the
    /// records returned, from the transaction indexes. `None` for read_uncommitted and replica reads.
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    pub log_start_offset: i64,
    /// For a follower whose log diverges from the leader's (Fetch v12+): the largest epoch both have and where
    /// it ends on the leader. The follower truncates there.
    pub diverging_epoch: Option<(i32, i64)>,
}

/// Which offset ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The high watermark (-1).
    Latest,
    /// The log start offset (-2, and -4 "earliest local": there is no tiered storage).
    Earliest,
    /// The record with the largest timestamp (-3).
    MaxTimestamp,
    /// The first record with timestamp >= this.
    Timestamp(i64),
}

/// A ListOffsets answer: timestamp (-1 if none), offset (-1 if none), leader epoch of that offset (-1 if none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndEpoch {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

pub struct Partition {
    topic: String,
    index: i32,
    topic_id: Uuid,
    /// This broker's id, to tell whether a leader change makes it leader.
    local_broker_id: i32,
    state: RwLock<ReplicaState>,
    /// Private: every engine call goes through a method here, under `state` when the call depends on it.
    log: Arc<PartitionLog>,
    /// Group commit for durable acknowledgements, started at the first durable produce so that partitions
    /// which never need it cost no thread.
    commit: OnceLock<GroupCommit>,
    /// The partition directory (for the leader-epoch checkpoint).
    dir: PathBuf,
    /// The leader-epoch cache as last changed by a leadership change, while it is not yet durable in
    /// `leader-epoch-checkpoint` (see [`Partition::sync_leader_epochs_of`]). Taken after `state`, never before.
    epochs_unsynced: Mutex<EpochsSync>,
    /// Whether `epochs_unsynced` may hold something: the append paths' lock-free check.
    epochs_unsynced_flag: AtomicBool,
    /// Signalled when a batch sync releases its claim on `epochs_unsynced`.
    epochs_synced: Condvar,
    /// What consumers may read. Moves forward only, except when a follower truncates below it.
    high_watermark: AtomicI64,
    /// Long-polling consumer fetches (and acks=all produces) waiting for the high watermark to move.
    watchers: FetchWatchers,
    /// Long-polling follower fetches, waiting for the log end to move.
    replica_watchers: FetchWatchers,
    /// Produce and fetch counters for the metrics (atomics only; `crate::ops`).
    pub(crate) stats: crate::ops::PartitionStats,
}

impl Partition {
    /// Wraps an open log. The partition has no leader until [`make_leader`](Self::make_leader) or
    /// [`make_follower`](Self::make_follower) is called (the replica manager does that at open).
    pub fn new(
        topic: &str,
        index: i32,
        topic_id: Uuid,
        local_broker_id: i32,
        log: Log,
        config: PartitionConfig,
    ) -> Partition {
        let dir = log.dir().to_path_buf();
        let epochs = checkpoints::read_leader_epochs(&dir).unwrap_or_default();
        Partition {
            topic: topic.to_string(),
            index,
            topic_id,
            local_broker_id,
            state: RwLock::new(ReplicaState {
                leader_epoch: -1,
                leader: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
                pending_isr: None,
                partition_epoch: -1,
                epochs,
                followers: HashMap::new(),
                config,
            }),
            log: Arc::new(PartitionLog(Mutex::new(log))),
            commit: OnceLock::new(),
            dir,
            epochs_unsynced: Mutex::new(EpochsSync::default()),
            epochs_unsynced_flag: AtomicBool::new(false),
            epochs_synced: Condvar::new(),
            high_watermark: AtomicI64::new(0),
            watchers: FetchWatchers::default(),
            replica_watchers: FetchWatchers::default(),
            stats: Default::default(),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> i32 {
        self.index
    }

    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }

    /// `<topic>-<index>`, for messages and logs.
    /// The partition's log directory.
    pub fn log_dir(&self) -> std::path::PathBuf {
        self.log.lock().dir().to_path_buf()
    }

    pub fn name(&self) -> String {
        format!("{}-{}", self.topic, self.index)
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state.read().leader_epoch
    }

    /// The leader's broker id, or -1 when none is known.
    pub fn leader(&self) -> i32 {
        self.state.read().leader
    }

    pub fn is_leader(&self) -> bool {
        self.state.read().leader == self.local_broker_id
    }

    pub fn replicas(&self) -> Vec<i32> {
        self.state.read().replicas.clone()
    }

    pub fn isr(&self) -> Vec<i32> {
        self.state.read().isr.clone()
    }

    pub fn config(&self) -> PartitionConfig {
        self.state.read().config
    }

    pub fn partition_epoch(&self) -> i32 {
        self.state.read().partition_epoch
    }

    /// The ISR change in flight, if any.
    pub fn pending_isr(&self) -> Option<Vec<i32>> {
        self.state.read().pending_isr.clone()
    }

    /// What this leader knows of `replica` (None while following, or for a replica that has not fetched).
    pub fn follower_progress(&self, replica: i32) -> Option<FollowerProgress> {
        self.state.read().followers.get(&replica).copied()
    }

    /// The leader-epoch cache: (epoch, first offset), ascending.
    pub fn leader_epochs(&self) -> Vec<(i32, i64)> {
        self.state.read().epochs.clone()
    }

    /// Makes this broker the partition's leader at `leader_epoch` (the controller bumps the epoch on every
    /// leader change). Returns false, changing nothing, if `leader_epoch` is older than the one already known
    /// (a stale metadata update). Batches appended from now on carry `leader_epoch`; the new epoch starts at
    /// the log end in the leader-epoch cache.
    pub fn make_leader(
        &self,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
    ) -> bool {
        assert!(leader_epoch >= 0, "leader epochs start at 0");
        assert!(
            isr.contains(&self.local_broker_id),
            "{}: a leader is always in its own ISR",
            self.name()
        );
        let changed = self.become_(
            self.local_broker_id,
            leader_epoch,
            partition_epoch,
            replicas,
            isr,
        );
        // A shorter ISR (or a larger one) may move the high watermark; waiting produces re-check min ISR.
        self.high_watermark_moved();
        changed
    }

    /// Makes `leader` the partition's leader at `leader_epoch`; this broker follows (it rejects produce and
    /// client fetches with NOT_LEADER_OR_FOLLOWER). Returns false if `leader_epoch` is stale.
    pub fn make_follower(
        &self,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
    ) -> bool {
        assert!(leader_epoch >= 0, "leader epochs start at 0");
        assert_ne!(
            leader,
            self.local_broker_id,
            "{}: make_follower names this broker as leader; call make_leader",
            self.name()
        );
        let changed = self.become_(leader, leader_epoch, partition_epoch, replicas, isr);
        if changed && planted(PlantedBug::TruncateToHighWatermark) {
            // PLANTED BUG (simulator only): pre-KIP-101 truncation to the local high watermark, which may
            // trail what the old leader committed.
            let hw = self.high_watermark.load(Ordering::Acquire);
            if hw < self.log_end_offset() {
                let _ = self.truncate_to(hw, None);
            }
        }
        // Long polls end now: they get NOT_LEADER_OR_FOLLOWER at once and go to the new leader.
        self.watchers.wake_all();
        self.replica_watchers.wake_all();
        changed
    }

    fn become_(
        &self,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
    ) -> bool {
        let mut state = self.state.write();
        if leader_epoch < state.leader_epoch
            || (leader_epoch == state.leader_epoch && partition_epoch < state.partition_epoch)
        {
            tracing::info!(partition = %self.name(), leader_epoch, partition_epoch, current = state.leader_epoch, "ignoring a stale partition change");
            return false;
        }
        let new_leadership = leader_epoch > state.leader_epoch || leader != state.leader;
        let leading = leader == self.local_broker_id;
        if leading && state.epochs.last().is_none_or(|(e, _)| *e < leader_epoch) {
            let log = self.log.lock();
            // The first epoch covers what the log already holds (a single node has always written epoch 0).
            let start = if state.epochs.is_empty() {
                log.log_start_offset()
            } else {
                log.log_end_offset()
            };
            drop(log);
            state.epochs.push((leader_epoch, start));
            if state.epochs.len() > LEADER_EPOCHS_MAX {
                state.epochs.remove(0);
            }
            // Not written here: the caller makes a whole image's worth durable at once
            // (`sync_leader_epochs_of`), and an append in this epoch makes it durable first if that has not
            // happened yet (`ensure_epochs_durable`), so no record of the epoch is ever on disk without it.
            self.defer_epochs(&state.epochs);
        }
        if new_leadership {
            state.pending_isr = None;
            state.followers.clear();
            if leading {
                // Kafka's rule at election: every replica counts as caught up now, so none is dropped from the
                // ISR before it has had replica.lag.time.max.ms to fetch from the new leader. Lag is measured on
                // the monotonic clock: a stepped wall clock must not drop (or keep) followers.
                let now = crate::monotonic_ms();
                let end = self.log.lock().log_end_offset();
                for r in replicas.iter().filter(|r| **r != self.local_broker_id) {
                    state.followers.insert(
                        *r,
                        FollowerProgress {
                            log_end_offset: -1,
                            last_caught_up_ms: now,
                            broker_epoch: -1,
                            last_fetch_leader_end: end,
                            last_fetch_ms: now,
                        },
                    );
                }
            }
        }
        if let Some(pending) = &state.pending_isr {
            // The controller's answer came through the image before the AlterPartition response.
            if partition_epoch > state.partition_epoch && pending == &isr {
                state.pending_isr = None;
            }
        }
        state.leader_epoch = leader_epoch;
        state.partition_epoch = partition_epoch;
        state.leader = leader;
        state.replicas = replicas;
        state.isr = isr;
        true
    }

    /// Writes the leader-epoch cache; a failure is logged (the cache is rebuilt by replication if lost).
    /// The caller holds the state lock, so `epochs` is the newest cache and supersedes any deferred one.
    fn persist_epochs(&self, epochs: &[(i32, i64)]) {
        let mut unsynced = self.epochs_unsynced.lock();
        if let Err(e) = checkpoints::write_leader_epochs(&self.dir, epochs) {
            tracing::error!(partition = %self.name(), error = %e, "cannot write the leader-epoch checkpoint");
        }
        unsynced.pending = None;
        self.epochs_unsynced_flag.store(false, Ordering::Release);
    }

    /// Records a changed leader-epoch cache to be made durable later (caller holds the state lock).
    fn defer_epochs(&self, epochs: &[(i32, i64)]) {
        let mut unsynced = self.epochs_unsynced.lock();
        unsynced.generation += 1;
        unsynced.pending = Some(epochs.to_vec());
        self.epochs_unsynced_flag.store(true, Ordering::Release);
    }

    /// Makes a deferred leader-epoch cache durable now (one atomic write with fsyncs), if there is one. Every
    /// append calls it first, so a record of a new epoch never reaches the log before the epoch's entry is
    /// durable in the checkpoint, the invariant truncation by epoch after a crash relies on (Kafka's
    /// `LeaderEpochFileCache.assign` flushes synchronously for the same reason). While a batch sync has
    /// claimed the cache it waits for that batch instead (cheaper than a write of its own). A failure is
    /// logged, as for every checkpoint write, and not retried.
    fn ensure_epochs_durable(&self) {
        if !self.epochs_unsynced_flag.load(Ordering::Acquire) {
            return;
        }
        let mut unsynced = self.epochs_unsynced.lock();
        while unsynced.claimed {
            self.epochs_synced.wait(&mut unsynced);
        }
        if let Some(epochs) = unsynced.pending.take() {
            if let Err(e) = checkpoints::write_leader_epochs(&self.dir, &epochs) {
                tracing::error!(partition = %self.name(), error = %e, "cannot write the leader-epoch checkpoint");
            }
        }
        self.epochs_unsynced_flag.store(false, Ordering::Release);
    }

    /// Whether the leader-epoch cache has changes not yet durable (an append would write them first).
    pub fn leader_epochs_unsynced(&self) -> bool {
        self.epochs_unsynced_flag.load(Ordering::Acquire)
    }

    /// Makes the deferred leader-epoch caches of many partitions durable together, with two file-system syncs
    /// in all instead of two fsyncs per partition: each cache is claimed (appends to it now wait for this
    /// batch), written to a staging file, the staging files are synced, renamed over the checkpoints, and the
    /// renames synced. A crash at any point leaves each checkpoint old and whole or new and whole. A partition
    /// whose cache changed meanwhile (another leadership change, a truncation that wrote it) is left to that
    /// change: its waiting appends write it themselves. Blocking.
    pub fn sync_leader_epochs_of(parts: &[Arc<Partition>]) {
        let claimed: Vec<(Arc<Partition>, u64)> = parts
            .iter()
            .filter_map(|p| p.claim_epochs().map(|g| (p.clone(), g)))
            .collect();
        if claimed.is_empty() {
            return;
        }
        let staged: Vec<bool> = crate::log_io::map_in_parallel(
            claimed.iter().map(|(p, g)| (p.clone(), *g)).collect(),
            |(p, generation)| p.stage_epochs(generation),
        );
        let tmp_files: Vec<PathBuf> = claimed
            .iter()
            .zip(&staged)
            .filter(|(_, ok)| **ok)
            .map(|((p, _), _)| checkpoints::staged_leader_epochs_path(&p.dir))
            .collect();
        let mut renamed = vec![false; claimed.len()];
        match checkpoints::sync_files(&tmp_files) {
            Err(e) => {
                tracing::warn!(error = %e, "cannot sync staged leader-epoch checkpoints; each is written on its own")
            }
            Ok(()) => {
                let work: Vec<(Arc<Partition>, u64, bool)> = claimed
                    .iter()
                    .zip(&staged)
                    .map(|((p, g), ok)| (p.clone(), *g, *ok))
                    .collect();
                renamed = crate::log_io::map_in_parallel(work, |(p, generation, ok)| {
                    ok && p.publish_staged_epochs(generation)
                });
                let dirs: Vec<PathBuf> = claimed
                    .iter()
                    .zip(&renamed)
                    .filter(|(_, r)| **r)
                    .map(|((p, _), _)| p.dir.clone())
                    .collect();
                if let Err(e) = checkpoints::sync_files(&dirs) {
                    tracing::warn!(error = %e, "cannot sync renamed leader-epoch checkpoints; each is written on its own");
                    renamed = vec![false; claimed.len()];
                }
            }
        }
        for ((p, generation), durable) in claimed.iter().zip(renamed) {
            let mut unsynced = p.epochs_unsynced.lock();
            unsynced.claimed = false;
            if durable && unsynced.pending.is_some() && unsynced.generation == *generation {
                unsynced.pending = None;
                p.epochs_unsynced_flag.store(false, Ordering::Release);
            }
            p.epochs_synced.notify_all();
        }
        // What the batch could not make durable (an error, or a newer change) is written now, each on its own.
        for (p, _) in &claimed {
            p.ensure_epochs_durable();
        }
    }

    /// Claims the deferred cache for a batch sync; its generation, or None if nothing is deferred.
    fn claim_epochs(&self) -> Option<u64> {
        let mut unsynced = self.epochs_unsynced.lock();
        if unsynced.pending.is_none() || unsynced.claimed {
            return None;
        }
        unsynced.claimed = true;
        Some(unsynced.generation)
    }

    /// Writes the claimed cache to the staging file (no fsync), if it is still `generation`. True if written.
    fn stage_epochs(&self, generation: u64) -> bool {
        let unsynced = self.epochs_unsynced.lock();
        let Some(epochs) = unsynced
            .pending
            .as_ref()
            .filter(|_| unsynced.generation == generation)
        else {
            return false;
        };
        match checkpoints::stage_leader_epochs(&self.dir, epochs) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(partition = %self.name(), error = %e, "cannot stage the leader-epoch checkpoint; writing it on its own");
                false
            }
        }
    }

    /// Renames the (synced) staging file over the checkpoint if the cache is still the one staged; else
    /// removes it. True if renamed.
    fn publish_staged_epochs(&self, generation: u64) -> bool {
        let unsynced = self.epochs_unsynced.lock();
        let current = unsynced.pending.is_some() && unsynced.generation == generation;
        match checkpoints::publish_staged_leader_epochs(&self.dir, current) {
            Ok(()) => current,
            Err(e) => {
                tracing::warn!(partition = %self.name(), error = %e, "cannot rename the staged leader-epoch checkpoint; writing it on its own");
                false
            }
        }
    }

    /// Checks the CurrentLeaderEpoch a client sent (KIP-320; -1 means "not sent"): older than ours ->
    /// FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH. Then that this broker leads the partition.
    fn check_leader(
        &self,
        state: &ReplicaState,
        current_leader_epoch: i32,
    ) -> Result<(), PartitionError> {
        if current_leader_epoch >= 0 {
            if current_leader_epoch < state.leader_epoch {
                return Err(PartitionError::FencedLeaderEpoch {
                    partition: self.name(),
                    requested: current_leader_epoch,
                    current: state.leader_epoch,
                });
            }
            if current_leader_epoch > state.leader_epoch {
                return Err(PartitionError::UnknownLeaderEpoch {
                    partition: self.name(),
                    requested: current_leader_epoch,
                    current: state.leader_epoch,
                });
            }
        }
        if state.leader != self.local_broker_id {
            return Err(PartitionError::NotLeader {
                partition: self.name(),
            });
        }
        Ok(())
    }

    /// Appends a produce request's batches (blocking: call it off the async workers). Checks that this broker
    /// leads the partition and, for acks=all, that the ISR has min.insync.replicas members; stamps the leader
    /// epoch into every batch. For durable partitions the returned wait is registered right after the append,
    /// under the log lock, so the next group-commit fsync covers it.
    pub fn append_records_to_leader(
        &self,
        batches: &mut [u8],
        required_acks: i16,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        self.append_to_leader_as(AppendOrigin::Client, batches, required_acks, now_ms)
    }

    /// [`Self::append_records_to_leader`] for a given writer: the broker itself (transaction markers) appends
    /// as [`AppendOrigin::Coordinator`], which may write control batches.
    pub fn append_to_leader_as(
        &self,
        origin: AppendOrigin,
        batches: &mut [u8],
        required_acks: i16,
        now_ms: i64,
    ) -> Result<LeaderAppend, PartitionError> {
        let state = self.state.read();
        self.check_leader(&state, -1)?;
        self.ensure_epochs_durable();
        let min_isr = state.config.min_insync_replicas;
        if required_acks == -1 && (state.isr.len() as i64) < i64::from(min_isr) {
            return Err(PartitionError::NotEnoughReplicas {
                partition: self.name(),
                isr: state.isr.len(),
                min_isr,
            });
        }
        let opts = AppendOptions {
            leader_epoch: state.leader_epoch,
            now_ms,
            timestamp_type: if state.config.log_append_time {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            origin,
        };
        let mut log = self.log.lock();
        let info = log
            .append(batches, &opts)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            })?;
        let durable = state
            .config
            .durable
            .then(|| self.group_commit().durable(info.last_offset));
        // Keeps the ended-transaction list short on a leader nobody reads read_committed from.
        log.on_high_watermark(self.high_watermark.load(Ordering::Acquire));
        drop(log);
        drop(state);
        if !info.duplicate {
            // Followers fetch what is new at once; consumers when the high watermark passes it.
            self.replica_watchers.wake_all();
            if durable.is_none() {
                self.high_watermark_moved();
            }
        }
        Ok(LeaderAppend { info, durable })
    }

    fn group_commit(&self) -> &GroupCommit {
        self.commit.get_or_init(|| {
            // A flusher thread answers on the OS's schedule; a simulation (inline disk I/O) fsyncs in the
            // waiting task instead, so a durable partition's acknowledgements keep to simulated time.
            if annal_metadata::env::testing::current().inline_disk_io {
                GroupCommit::start_inline(Arc::clone(&self.log))
            } else {
                GroupCommit::start(Arc::clone(&self.log))
            }
        })
    }

    /// Re-evaluates the high watermark after something that can move it (an append, an fsync, a follower's
    /// fetch, an ISR change) and wakes what waits on this partition if it moved. Waiting produces are woken
    /// either way, since they also re-check the ISR size.
    pub fn high_watermark_moved(&self) {
        self.refresh_high_watermark();
        self.watchers.wake_all();
    }

    /// Recomputes the leader's high watermark; true if it advanced. A follower's comes from its leader.
    fn refresh_high_watermark(&self) -> bool {
        let state = self.state.read();
        if state.leader != self.local_broker_id {
            return false;
        }
        let log = self.log.lock();
        let candidate = leader_high_watermark(&state, self.local_broker_id, &log);
        drop(log);
        drop(state);
        match candidate {
            Some(hw) => self.high_watermark.fetch_max(hw, Ordering::AcqRel) < hw,
            None => false,
        }
    }

    /// How many long-polling client fetches wait on this partition now.
    pub fn waiting_fetches(&self) -> usize {
        self.watchers.len()
    }

    pub(crate) fn watchers(&self) -> &FetchWatchers {
        &self.watchers
    }

    pub(crate) fn replica_watchers(&self) -> &FetchWatchers {
        &self.replica_watchers
    }

    /// The high watermark: what consumers may read and ListOffsets LATEST answers. On a leader, the smallest
    /// log end over the ISR (see [`leader_high_watermark`]); on a follower, what the leader last said, capped
    /// by the local log end.
    pub fn high_watermark(&self) -> i64 {
        self.refresh_high_watermark();
        self.high_watermark.load(Ordering::Acquire)
    }

    /// Sets the high watermark restored from `replication-offset-checkpoint` at open (capped by the log end).
    pub fn restore_high_watermark(&self, hw: i64) {
        let end = self.log.lock().log_end_offset();
        self.high_watermark
            .store(hw.clamp(0, end.max(0)), Ordering::Release);
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.lock().log_start_offset()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log.lock().log_end_offset()
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.lock().size_bytes()
    }

    /// The log's segments, oldest first, and its retention settings (`retention.ms`, `retention.bytes`): what
    /// the metrics and the retention guard read. Blocking (brief lock).
    pub fn segments_and_retention(&self) -> (Vec<annal_log::SegmentInfo>, i64, i64) {
        let log = self.log.lock();
        let config = log.config();
        (log.segments(), config.retention_ms, config.retention_bytes)
    }

    /// The timestamp of the record at `offset` (below the high watermark), read from the one batch that holds
    /// it: the first unconsumed record of a consumer whose next offset is `offset`. `None` if there is none or
    /// the batch cannot be read. Blocking (one bounded read, decompressed within the log's limit).
    pub fn record_timestamp(&self, offset: i64) -> Option<i64> {
        let hw = self.high_watermark();
        let (slice, limit) = {
            let log = self.log.lock();
            let read = log.read(offset, 1, Some(hw)).ok()?;
            (read.slice?, log.config().decompressed_batch_limit())
        };
        let bytes = slice.read_to_vec().ok()?;
        let header = annal_log::batch::BatchHeader::parse(&bytes)?;
        let batch =
            annal_log::records::DecodedBatch::new(bytes.get(..header.size())?, limit).ok()?;
        // The record at `offset`, or the first after it (compaction leaves gaps inside batches).
        let found = batch
            .records()
            .filter_map(Result::ok)
            .find(|r| r.offset >= offset)
            .map(|r| r.timestamp);
        found
    }

    /// Reads whole batches from `offset`, at most `max_bytes` (the first batch whole even if larger) and nothing
    /// at or past the high watermark, or with `read_committed` the last stable offset; a read_committed read
    /// also answers the aborted transactions of the range it returns (from the transaction indexes, no scan).
    /// Takes the slice under the lock; its bytes are read (or sent) later.
    pub fn read(
        &self,
        current_leader_epoch: i32,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
    ) -> Result<PartitionRead, PartitionError> {
        let hw = self.high_watermark();
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        let mut log = self.log.lock();
        log.on_high_watermark(hw);
        let lso = log.last_stable_offset(hw);
        let upper = if read_committed && !planted(PlantedBug::ReadCommittedAboveStable) {
            lso
        } else {
            hw
        };
        let read = log
            .read(offset, max_bytes.max(1), Some(upper))
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            });
        let aborted_transactions = read_committed.then(|| match &read {
            Ok(r) => r
                .slice_end_offset
                .map(|end| log.aborted_transactions(offset, end.min(upper)))
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        });
        Ok(PartitionRead {
            records: read.map(|r| r.slice),
            high_watermark: hw,
            last_stable_offset: lso,
            aborted_transactions,
            log_start_offset: log.log_start_offset(),
            diverging_epoch: None,
        })
    }

    /// Reads this replica's own log from `offset`, whatever its role, up to `upper` (exclusive; `None`: the log
    /// end), at most `max_bytes` (the first batch whole). For checks that compare replicas (the deterministic
    /// simulator's "replicas agree below the high watermark"); clients read through [`Partition::read`].
    pub fn read_local(
        &self,
        offset: i64,
        max_bytes: usize,
        upper: Option<i64>,
    ) -> Result<Option<annal_log::FileSlice>, PartitionError> {
        let log = self.log.lock();
        let read = log
            .read(offset, max_bytes.max(1), upper)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            })?;
        Ok(read.slice)
    }

    /// The last stable offset: `min(high watermark, first unstable offset)`, where the first unstable offset is
    /// the start of the oldest transaction not yet ended by a marker the high watermark has passed. On a
    /// follower, from its own producer state and the high watermark its leader sent (as Kafka's followers do).
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        let mut log = self.log.lock();
        log.on_high_watermark(hw);
        log.last_stable_offset(hw)
    }

    /// Reads as the leader, up to the log end rather than the high watermark: for a coordinator loading its
    /// state when it becomes leader (Kafka's loaders read to the log end too). A new leader's high watermark
    /// may trail its log end until followers fetch at the new epoch, and records of the old leader's epoch that
    /// it holds are committed or will be: a leader never truncates its own log.
    pub fn read_to_log_end(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<PartitionRead, PartitionError> {
        let hw = self.high_watermark();
        let state = self.state.read();
        self.check_leader(&state, -1)?;
        let log = self.log.lock();
        let records = log
            .read(offset, max_bytes.max(1), None)
            .map(|r| r.slice)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            });
        Ok(PartitionRead {
            records,
            high_watermark: hw,
            last_stable_offset: log.last_stable_offset(hw),
            aborted_transactions: None,
            log_start_offset: log.log_start_offset(),
            diverging_epoch: None,
        })
    }

    /// Serves a follower's fetch: checks it is a replica and that its log does not diverge (answering the
    /// divergence point if it does, KIP-320), reads up to the log end (not the high watermark: followers need
    /// what is not committed yet), and records the follower's progress, which may advance the high watermark.
    pub fn read_for_follower(
        &self,
        fetch: ReplicaFetch,
        current_leader_epoch: i32,
        offset: i64,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<PartitionRead, PartitionError> {
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        if !state.replicas.contains(&fetch.replica_id) {
            return Err(PartitionError::NotAReplica {
                partition: self.name(),
                replica: fetch.replica_id,
            });
        }
        let log = self.log.lock();
        let log_end = log.log_end_offset();
        let log_start = log.log_start_offset();
        if fetch.last_fetched_epoch >= 0 {
            let (epoch, end) =
                end_offset_for_epoch(&state.epochs, fetch.last_fetched_epoch, log_end);
            if epoch != fetch.last_fetched_epoch || end < offset {
                let hw = self.high_watermark.load(Ordering::Acquire);
                let lso = log.last_stable_offset(hw);
                drop(log);
                drop(state);
                return Ok(PartitionRead {
                    records: Ok(None),
                    high_watermark: hw,
                    last_stable_offset: lso,
                    aborted_transactions: None,
                    log_start_offset: log_start,
                    diverging_epoch: Some((epoch, end)),
                });
            }
        }
        let records = log
            .read(offset, max_bytes.max(1), None)
            .map(|r| r.slice)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            });
        drop(log);
        drop(state);
        if records.is_ok() {
            self.record_follower_fetch(fetch, offset, log_end, now_ms);
        }
        let hw = self.high_watermark.load(Ordering::Acquire);
        Ok(PartitionRead {
            records,
            high_watermark: hw,
            last_stable_offset: self.log.lock().last_stable_offset(hw),
            aborted_transactions: None,
            log_start_offset: log_start,
            diverging_epoch: None,
        })
    }

    /// Records that `fetch.replica_id` has everything below `offset` (Kafka's updateFollowerFetchState).
    fn record_follower_fetch(
        &self,
        fetch: ReplicaFetch,
        offset: i64,
        leader_end: i64,
        now_ms: i64,
    ) {
        {
            let mut state = self.state.write();
            if state.leader != self.local_broker_id {
                return;
            }
            let entry = state
                .followers
                .entry(fetch.replica_id)
                .or_insert(FollowerProgress {
                    log_end_offset: -1,
                    last_caught_up_ms: 0,
                    broker_epoch: -1,
                    last_fetch_leader_end: leader_end,
                    last_fetch_ms: now_ms,
                });
            if offset >= leader_end {
                entry.last_caught_up_ms = now_ms;
            } else if offset >= entry.last_fetch_leader_end {
                entry.last_caught_up_ms = entry.last_caught_up_ms.max(entry.last_fetch_ms);
            }
            entry.log_end_offset = offset;
            entry.broker_epoch = fetch.broker_epoch;
            entry.last_fetch_leader_end = leader_end;
            entry.last_fetch_ms = now_ms;
        }
        if self.refresh_high_watermark() {
            self.watchers.wake_all();
        }
    }

    /// The ISR change this leader should ask for now, if any (none while one is in flight): members not caught
    /// up within `lag_max_ms` leave; replicas that have reached the high watermark at this leader's epoch (and,
    /// KIP-903, fetch with the broker epoch the controller knows, `broker_epoch_of`) join. The change is
    /// recorded as pending; report the controller's answer with [`Partition::isr_change_answered`].
    pub fn propose_isr_change(
        &self,
        now_ms: i64,
        lag_max_ms: i64,
        broker_epoch_of: impl Fn(i32) -> Option<i64>,
    ) -> Option<IsrChange> {
        let hw = self.high_watermark();
        let mut state = self.state.write();
        if state.leader != self.local_broker_id || state.pending_isr.is_some() {
            return None;
        }
        let epoch_start = state.epochs.last().map_or(0, |(_, start)| *start);
        let me = self.local_broker_id;
        let mut new_isr: Vec<i32> = state
            .isr
            .iter()
            .copied()
            .filter(|r| {
                *r == me
                    || state
                        .followers
                        .get(r)
                        .is_some_and(|f| now_ms - f.last_caught_up_ms <= lag_max_ms)
            })
            .collect();
        for r in &state.replicas {
            if new_isr.contains(r) {
                continue;
            }
            let Some(f) = state.followers.get(r) else {
                continue;
            };
            let epoch_known = broker_epoch_of(*r);
            let in_sync = f.log_end_offset >= hw
                && f.log_end_offset >= epoch_start
                && now_ms - f.last_caught_up_ms <= lag_max_ms
                && (f.broker_epoch < 0 || epoch_known == Some(f.broker_epoch));
            if in_sync {
                new_isr.push(*r);
            }
        }
        if new_isr == state.isr {
            return None;
        }
        let members = new_isr
            .iter()
            .map(|r| (*r, broker_epoch_of(*r).unwrap_or(-1)))
            .collect();
        tracing::info!(partition = %self.name(), isr = ?state.isr, proposed = ?new_isr, hw, "asking the controller to change the ISR");
        state.pending_isr = Some(new_isr);
        Some(IsrChange {
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            new_isr: members,
        })
    }

    /// Applies the controller's answer to this leader's AlterPartition: the confirmed ISR at its partition
    /// epoch, or `None` when it refused (the image says what holds). Either way the change is no longer
    /// pending.
    pub fn isr_change_answered(&self, answer: Option<(i32, i32, Vec<i32>)>) {
        {
            let mut state = self.state.write();
            state.pending_isr = None;
            if let Some((leader_epoch, partition_epoch, isr)) = answer {
                let current = leader_epoch == state.leader_epoch
                    && partition_epoch > state.partition_epoch
                    && isr.contains(&self.local_broker_id);
                if current {
                    tracing::info!(partition = %self.name(), ?isr, partition_epoch, "the controller changed the ISR");
                    state.isr = isr;
                    state.partition_epoch = partition_epoch;
                }
            }
        }
        self.high_watermark_moved();
    }

    /// Appends batches fetched from the leader, keeping their offsets and epochs, and learns the leader's high
    /// watermark and log start. Returns false (changing nothing) if this broker no longer follows `leader` at
    /// `leader_epoch` (a leadership change raced the fetch). Blocking.
    pub fn append_as_follower(
        &self,
        leader: i32,
        leader_epoch: i32,
        batches: &[u8],
        leader_hw: i64,
        leader_log_start: i64,
        now_ms: i64,
    ) -> Result<bool, PartitionError> {
        let mut state = self.state.write();
        if state.leader != leader
            || state.leader_epoch != leader_epoch
            || leader == self.local_broker_id
        {
            return Ok(false);
        }
        if !batches.is_empty() {
            // The epochs of a leadership change first (they may hold one this follower appends after).
            self.ensure_epochs_durable();
        }
        let mut log = self.log.lock();
        let storage = |source| PartitionError::Log {
            partition: self.name(),
            source,
        };
        if !batches.is_empty() {
            // The batches' new epochs are recorded before the batches are written, as Kafka's follower assigns
            // them before its append: a record on disk whose epoch the cache lacks makes this replica, once it
            // leads, answer a follower's divergence check with an epoch end that the follower's truncation
            // never satisfies (it truncates, fetches the same batches again, and diverges again, for good:
            // annal-sim seed 268, a follower's append written but its fsync failed). An entry whose batch then
            // did not make it into the log is taken out again below.
            let before = state.epochs.clone();
            for h in batch_headers(batches) {
                if state
                    .epochs
                    .last()
                    .is_none_or(|(e, _)| *e < h.partition_leader_epoch)
                {
                    state.epochs.push((h.partition_leader_epoch, h.base_offset));
                    if state.epochs.len() > LEADER_EPOCHS_MAX {
                        state.epochs.remove(0);
                    }
                }
            }
            if state.epochs != before {
                self.persist_epochs(&state.epochs);
            }
            let appended = log.append_as_follower(batches, now_ms).and_then(|_| {
                if state.config.durable {
                    // A durable follower reports (as its next fetch offset) only what is on disk.
                    log.flush()
                } else {
                    Ok(())
                }
            });
            if let Err(e) = appended {
                let end = log.log_end_offset();
                let kept: Vec<(i32, i64)> = state
                    .epochs
                    .iter()
                    .filter(|entry| before.contains(entry) || entry.1 < end)
                    .copied()
                    .collect();
                if kept != state.epochs {
                    state.epochs = kept;
                    self.persist_epochs(&state.epochs);
                }
                return Err(storage(e));
            }
        }
        if leader_log_start > log.log_start_offset() && leader_log_start <= log.log_end_offset() {
            log.delete_records_before(leader_log_start)
                .map_err(storage)?;
        }
        let hw = leader_hw.min(log.log_end_offset());
        // Ended transactions whose markers are committed no longer hold the follower's LSO back.
        log.on_high_watermark(hw);
        drop(log);
        drop(state);
        if self.high_watermark.fetch_max(hw, Ordering::AcqRel) < hw {
            self.watchers.wake_all();
        }
        Ok(true)
    }

    /// The follower's side of a divergence (KIP-101/279): removes everything from `offset` on (the end of the
    /// largest epoch it shares with the leader), drops the epochs that started there, and caps the high
    /// watermark by the new log end. If `offset` is before the log start, the log restarts empty at
    /// `restart_at`. Blocking.
    pub fn truncate_to(&self, offset: i64, restart_at: Option<i64>) -> Result<(), PartitionError> {
        let mut state = self.state.write();
        let mut log = self.log.lock();
        let storage = |source| PartitionError::Log {
            partition: self.name(),
            source,
        };
        match restart_at {
            Some(start) => log.truncate_fully_and_start_at(start).map_err(storage)?,
            None => log.truncate_to(offset).map_err(storage)?,
        }
        let end = log.log_end_offset();
        drop(log);
        let before = state.epochs.len();
        state.epochs.retain(|(_, start)| *start < end);
        if state.epochs.len() != before {
            self.persist_epochs(&state.epochs);
        }
        self.high_watermark.fetch_min(end, Ordering::AcqRel);
        tracing::info!(partition = %self.name(), log_end = end, "truncated to the leader's log");
        Ok(())
    }

    /// This replica's own answer to OffsetForLeaderEpoch (no leadership check): the largest epoch <= `epoch` it
    /// knows and where that ends in its log. A follower uses it to find the divergence point.
    pub fn local_end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let state = self.state.read();
        let log_end = self.log.lock().log_end_offset();
        end_offset_for_epoch(&state.epochs, epoch, log_end)
    }

    /// The largest epoch this replica's log holds batches of (a follower's LastFetchedEpoch), -1 if none.
    pub fn last_fetched_epoch(&self) -> i32 {
        let state = self.state.read();
        let end = self.log.lock().log_end_offset();
        state
            .epochs
            .iter()
            .rev()
            .find(|(_, start)| *start < end)
            .map_or(-1, |(e, _)| *e)
    }

    /// ListOffsets: the offset (and its timestamp and leader epoch) `spec` names.
    /// With `read_committed` (isolation level 1) LATEST is the last stable offset, and a lookup by time finds
    /// nothing at or past it, as Kafka answers.
    pub fn list_offsets(
        &self,
        current_leader_epoch: i32,
        spec: OffsetSpec,
        read_committed: bool,
    ) -> Result<OffsetAndEpoch, PartitionError> {
        let hw = self.high_watermark();
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        let mut log = self.log.lock();
        log.on_high_watermark(hw);
        let lso = log.last_stable_offset(hw);
        let (timestamp, offset) = match spec {
            OffsetSpec::Latest if read_committed => (-1, lso),
            OffsetSpec::Latest => (-1, hw),
            OffsetSpec::Timestamp(ts) if read_committed => match log.offset_for_timestamp(ts) {
                Ok(Some((offset, timestamp))) if offset < lso => (timestamp, offset),
                Ok(_) => (-1, -1),
                Err(source) => {
                    return Err(PartitionError::Log {
                        partition: self.name(),
                        source,
                    })
                }
            },
            OffsetSpec::Earliest => (-1, log.log_start_offset()),
            OffsetSpec::MaxTimestamp => log.max_timestamp().unwrap_or((-1, -1)),
            OffsetSpec::Timestamp(ts) => match log.offset_for_timestamp(ts) {
                Ok(Some((offset, timestamp))) => (timestamp, offset),
                Ok(None) => (-1, -1),
                Err(source) => {
                    return Err(PartitionError::Log {
                        partition: self.name(),
                        source,
                    })
                }
            },
        };
        let leader_epoch = match spec {
            // Kafka answers LATEST with the latest epoch, other lookups with the epoch of the offset found.
            OffsetSpec::Latest => state.epochs.last().map_or(-1, |(e, _)| *e),
            _ if offset < 0 => -1,
            _ => epoch_of_offset(&state.epochs, offset),
        };
        Ok(OffsetAndEpoch {
            timestamp,
            offset,
            leader_epoch,
        })
    }

    /// DeleteRecords: moves the log start to `offset` (-1: the high watermark), which must not pass the high
    /// watermark. Returns the new log start (the low watermark). Blocking.
    pub fn delete_records(&self, offset: i64) -> Result<i64, PartitionError> {
        let hw = self.high_watermark();
        let state = self.state.read();
        self.check_leader(&state, -1)?;
        let mut log = self.log.lock();
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(PartitionError::DeleteBeyondHighWatermark {
                partition: self.name(),
                offset,
                high_watermark: hw,
            });
        }
        if target <= log.log_start_offset() {
            return Ok(log.log_start_offset());
        }
        log.delete_records_before(target)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            })
    }

    /// OffsetForLeaderEpoch (KIP-101/320): the largest epoch <= `leader_epoch` this partition knows, and the
    /// offset where it ended (the log end for the current epoch). (-1, -1) if `leader_epoch` is newer than any
    /// known epoch, as Kafka answers.
    pub fn offset_for_leader_epoch(
        &self,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64), PartitionError> {
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        let log_end = self.log.lock().log_end_offset();
        Ok(end_offset_for_epoch(&state.epochs, leader_epoch, log_end))
    }

    /// Calls `f` with the engine's producer table (DescribeProducers).
    pub fn with_producer_state<R>(&self, f: impl FnOnce(&ProducerStateManager) -> R) -> R {
        f(self.log.lock().producer_state())
    }

    /// Applies changed topic settings. Becoming durable flushes what was appended before, so the high watermark
    /// (now the flushed offset) does not step back. Blocking.
    pub(crate) fn set_config(&self, log_config: LogConfig, config: PartitionConfig) {
        let mut state = self.state.write();
        let mut log = self.log.lock();
        log.set_config(log_config);
        if config.durable && log.flushed_offset() < log.log_end_offset() {
            if let Err(e) = log.flush() {
                tracing::error!(partition = %self.name(), error = %e, "flush after config change failed");
            }
        }
        state.config = config;
    }

    /// fsyncs if `flush.ms` is due. Blocking.
    pub fn flush_if_due(&self, now_ms: i64) -> Result<(), LogError> {
        let flushed = self.log.lock().flush_if_due(now_ms)?;
        if flushed && self.config().durable {
            self.high_watermark_moved();
        }
        Ok(())
    }

    /// How dirty this partition's compacted log is, when a cleaning pass should run now (`cleanup.policy` has
    /// `compact`, and `min.cleanable.dirty.ratio` or `max.compaction.lag.ms` says so). Nothing at or past the
    /// high watermark is cleanable. Blocking (brief lock).
    pub fn cleanable(&self, now_ms: i64) -> Option<annal_log::Cleanable> {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        log.cleanable(now_ms, Some(high_watermark))
            .filter(|c| c.should_clean(log.config()))
    }

    /// One cleaning pass if the log needs one (see annal-log's `cleaner.rs`): the log lock is held only to
    /// snapshot the segments and to swap the cleaned ones in, never while records are read or written.
    /// Blocking (the pass itself, outside the lock).
    pub fn clean(
        &self,
        cleaner: &annal_log::Cleaner,
        now_ms: i64,
    ) -> Result<Option<annal_log::CleanOutcome>, LogError> {
        let high_watermark = self.high_watermark();
        let Some(task) = self.log.lock().begin_clean(now_ms, Some(high_watermark)) else {
            return Ok(None);
        };
        let cleaned = cleaner.run(task)?;
        self.log.lock().finish_clean(cleaned).map(Some)
    }

    /// Whether this broker answers key lookups of the partition: it leads it, or it follows a leader and is in
    /// the ISR (its copy is caught up, and its high watermark, learned from the leader and capped by its own
    /// log end, is never above the leader's).
    pub fn serves_key_lookups(&self) -> bool {
        self.serves_key_lookups_in(&self.state.read())
    }

    fn serves_key_lookups_in(&self, state: &ReplicaState) -> bool {
        state.leader == self.local_broker_id
            || (state.leader >= 0 && state.isr.contains(&self.local_broker_id))
    }

    /// Finds records by key with the key index (annal-log's `key_lookup.rs`), as the leader or an in-sync
    /// follower ([`Partition::serves_key_lookups`]): nothing at or past this replica's high watermark is
    /// considered (the last stable offset for read_committed), so an answer never holds a record that a new
    /// leader might not have. A follower's high watermark may trail the leader's by a fetch: its answer is then
    /// a prefix of the leader's, never more. Blocking: the log lock is held for the lookup, whose work is
    /// bounded by its page (and by `LOOKUP_CATCH_UP_BYTES_MAX` of indexing the tail the background has not
    /// reached).
    pub fn lookup_key(
        &self,
        mut query: annal_log::KeyQuery,
    ) -> Result<annal_log::KeyLookup, PartitionError> {
        let hw = self.high_watermark();
        // Held for the lookup: no leadership change or truncation runs in the middle of it.
        let state = self.state.read();
        if !self.serves_key_lookups_in(&state) {
            return Err(PartitionError::NotLeader {
                partition: self.name(),
            });
        }
        let mut log = self.log.lock();
        log.on_high_watermark(hw);
        let visible = if query.read_committed {
            log.last_stable_offset(hw)
        } else {
            hw
        };
        query.upper_offset = Some(query.upper_offset.map_or(visible, |u| u.min(visible)));
        log.lookup_key(&query)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            })
    }

    /// One bounded step of building the key index (`key.index.enable`), about `budget_bytes` of log under the
    /// lock. Leaders and followers both index what they hold. Blocking.
    pub fn index_keys(&self, budget_bytes: u64) -> Result<annal_log::KeyIndexProgress, LogError> {
        self.log.lock().index_keys(budget_bytes)
    }

    /// The key index's backlog and size (metrics).
    pub fn key_index_stats(&self) -> annal_log::KeyIndexStats {
        self.log.lock().key_index_stats()
    }

    /// Whether the topic has `key.index.enable`.
    pub fn key_index_enabled(&self) -> bool {
        self.log.lock().config().key_index
    }

    /// Deletes segments past `retention.ms`/`retention.bytes`, keeping those the retention guard holds
    /// (`retention.guard.groups`); records the bytes held in [`Partition::stats`]. Blocking.
    pub fn apply_retention(
        &self,
        now_ms: i64,
        guard: Option<annal_log::RetentionGuard>,
    ) -> Result<annal_log::RetentionOutcome, LogError> {
        let outcome = self.log.lock().apply_retention_guarded(now_ms, guard)?;
        self.stats.set_guard_held_bytes(outcome.held_bytes);
        Ok(outcome)
    }

    /// fsyncs everything appended. Blocking.
    pub fn flush(&self) -> Result<(), LogError> {
        self.log.lock().flush()
    }

    /// Stops the group commit (its flusher thread holds the log) and returns the log if nothing else holds it.
    /// A deferred leader-epoch cache is written first.
    pub(crate) fn into_log(self) -> Option<Log> {
        self.ensure_epochs_durable();
        drop(self.commit);
        Arc::try_unwrap(self.log).ok().map(|l| l.0.into_inner())
    }
}

/// What the local log may expose: the log end, or for durable partitions (`flush.messages=1`) the flushed
/// offset, so no consumer sees a record before its fsync. The high watermark never passes it.
pub fn high_watermark(log: &Log, durable: bool) -> i64 {
    if durable {
        log.flushed_offset().min(log.log_end_offset())
    } else {
        log.log_end_offset()
    }
}

/// Kafka's high-watermark rule with KIP-966's strict min ISR: the smallest log end over the maximal ISR (the
/// leader's own counted as what it may expose, see [`high_watermark`]). `None` (no advance) while a member's
/// log end is unknown, or while a replicated partition's confirmed ISR is smaller than min.insync.replicas: then
/// no write is committed, so no consumer can read what a later leader might not have. A partition with one
/// replica has no one to wait for and keeps the single-node rule.
fn leader_high_watermark(state: &ReplicaState, me: i32, log: &Log) -> Option<i64> {
    let local = high_watermark(log, state.config.durable);
    if planted(PlantedBug::HighWatermarkBeforeIsr) {
        // PLANTED BUG (simulator only): the leader's own log end, whatever the ISR holds.
        return Some(local);
    }
    let replicated = state.replicas.len() > 1;
    let counted = match &state.pending_isr {
        // PLANTED BUG (simulator only): the proposed ISR counts before the controller committed it.
        Some(pending) if planted(PlantedBug::AckBeforeIsrCommitted) => pending.clone(),
        _ => state.maximal_isr(),
    };
    let confirmed = if planted(PlantedBug::AckBeforeIsrCommitted) {
        counted.len()
    } else {
        state.isr.len()
    };
    if replicated && (confirmed as i64) < i64::from(state.config.min_insync_replicas) {
        return None;
    }
    let mut hw = local;
    for r in counted {
        if r == me {
            continue;
        }
        let leo = state.followers.get(&r).map_or(-1, |f| f.log_end_offset);
        if leo < 0 {
            return None;
        }
        hw = hw.min(leo);
    }
    Some(hw)
}

/// The headers of the whole batches in `bytes` (already validated by the engine).
fn batch_headers(bytes: &[u8]) -> Vec<annal_log::batch::BatchHeader> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(h) = bytes
        .get(at..)
        .and_then(annal_log::batch::BatchHeader::parse)
    {
        let size = h.size();
        if size == 0 || at + size > bytes.len() {
            break;
        }
        out.push(h);
        at += size;
    }
    out
}

/// The epoch whose range holds `offset` (the first known epoch for offsets before it).
fn epoch_of_offset(epochs: &[(i32, i64)], offset: i64) -> i32 {
    epochs
        .iter()
        .rev()
        .find(|(_, start)| *start <= offset)
        .or(epochs.first())
        .map_or(-1, |(e, _)| *e)
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor`: the latest epoch ends at the log end; an older one where the
/// next epoch starts; an epoch newer than all is unknown (-1, -1).
fn end_offset_for_epoch(epochs: &[(i32, i64)], requested: i32, log_end: i64) -> (i32, i64) {
    let Some(&(latest, _)) = epochs.last() else {
        return (-1, -1);
    };
    if requested < 0 {
        return (-1, -1);
    }
    if requested == latest {
        return (latest, log_end);
    }
    let Some(higher) = epochs.iter().find(|(e, _)| *e > requested) else {
        return (-1, -1);
    };
    match epochs.iter().rev().find(|(e, _)| *e <= requested) {
        Some(&(floor, _)) => (floor, higher.1),
        None => (requested, higher.1),
    }
}

/// A partition's engine log behind its mutex. Private to this module: nothing outside a [`Partition`] locks it.
/// As a [`DurableLog`] it counts the group-commit fsyncs it runs (see [`durable_sync_count`]).
struct PartitionLog(Mutex<Log>);

impl Deref for PartitionLog {
    type Target = Mutex<Log>;

    fn deref(&self) -> &Mutex<Log> {
        &self.0
    }
}

static DURABLE_SYNCS: AtomicU64 = AtomicU64::new(0);

/// How many group-commit fsyncs (rounds, each covering every durable append waiting for it) this process has
/// run, over all partitions: for metrics, and for tests that check appends share fsyncs.
pub fn durable_sync_count() -> u64 {
    DURABLE_SYNCS.load(Ordering::Relaxed)
}

impl DurableLog for PartitionLog {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.0.lock())
    }

    fn sync(&self, handle: &SyncHandle) -> std::io::Result<()> {
        DURABLE_SYNCS.fetch_add(1, Ordering::Relaxed);
        handle.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_log::batch::build_uncompressed_batch;

    fn open(dir: &std::path::Path, config: PartitionConfig) -> Partition {
        let log = Log::open(dir, LogConfig::default()).unwrap();
        Partition::new("t", 0, Uuid::new_v4(), 1, log, config)
    }

    fn batch() -> Vec<u8> {
        build_uncompressed_batch(&[(None, Some(b"v".as_slice()))], 1_700_000_000_000)
    }

    #[test]
    fn a_follower_rejects_appends_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), PartitionConfig::default());
        assert!(p.make_follower(2, 3, 0, vec![1, 2], vec![1, 2]));
        let e = p
            .append_records_to_leader(&mut batch(), 1, 0)
            .err()
            .unwrap();
        assert_eq!(e.code(), crate::kafka_code::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(p.read(-1, 0, 100, false).err().unwrap().code(), 6);
        assert!(!p.is_leader());
        assert_eq!((p.leader(), p.leader_epoch()), (2, 3));
    }

    #[test]
    fn min_isr_applies_to_acks_all_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(
            dir.path(),
            PartitionConfig {
                min_insync_replicas: 2,
                ..Default::default()
            },
        );
        p.make_leader(0, 0, vec![1, 2], vec![1]);
        let e = p
            .append_records_to_leader(&mut batch(), -1, 0)
            .err()
            .unwrap();
        assert_eq!(e.code(), crate::kafka_code::NOT_ENOUGH_REPLICAS);
        assert!(p.append_records_to_leader(&mut batch(), 1, 0).is_ok());
        p.make_leader(1, 0, vec![1, 2], vec![1, 2]);
        assert!(p.append_records_to_leader(&mut batch(), -1, 0).is_ok());
    }

    #[test]
    fn batches_carry_the_leader_epoch_and_epochs_end_where_the_next_starts() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), PartitionConfig::default());
        p.make_leader(0, 0, vec![1], vec![1]);
        p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert!(p.make_leader(5, 0, vec![1], vec![1]));
        assert!(
            !p.make_leader(4, 0, vec![1], vec![1]),
            "a stale epoch changes nothing"
        );
        let mut b = batch();
        p.append_records_to_leader(&mut b, 1, 0).unwrap();
        let header = annal_log::batch::BatchHeader::parse(&b).unwrap();
        assert_eq!(header.partition_leader_epoch, 5);
        assert_eq!(p.offset_for_leader_epoch(-1, 0).unwrap(), (0, 1));
        assert_eq!(p.offset_for_leader_epoch(-1, 3).unwrap(), (0, 1));
        assert_eq!(p.offset_for_leader_epoch(-1, 5).unwrap(), (5, 2));
        assert_eq!(p.offset_for_leader_epoch(-1, 6).unwrap(), (-1, -1));
        let latest = p.list_offsets(5, OffsetSpec::Latest, false).unwrap();
        assert_eq!((latest.offset, latest.leader_epoch), (2, 5));
        let earliest = p.list_offsets(-1, OffsetSpec::Earliest, false).unwrap();
        assert_eq!((earliest.offset, earliest.leader_epoch), (0, 0));
        assert_eq!(
            p.list_offsets(4, OffsetSpec::Latest, false)
                .err()
                .unwrap()
                .code(),
            74
        );
        assert_eq!(
            p.list_offsets(6, OffsetSpec::Latest, false)
                .err()
                .unwrap()
                .code(),
            75
        );
    }

    fn replica(id: i32) -> ReplicaFetch {
        ReplicaFetch {
            replica_id: id,
            broker_epoch: 7,
            last_fetched_epoch: -1,
        }
    }

    fn leader_of_three(dir: &std::path::Path, min_isr: i32) -> Partition {
        let p = open(
            dir,
            PartitionConfig {
                min_insync_replicas: min_isr,
                ..Default::default()
            },
        );
        p.make_leader(0, 0, vec![1, 2, 3], vec![1, 2, 3]);
        p
    }

    #[test]
    fn the_high_watermark_is_the_smallest_log_end_in_the_isr_and_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of_three(dir.path(), 1);
        for _ in 0..3 {
            p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        }
        assert_eq!(p.high_watermark(), 0, "no follower has fetched");
        p.read_for_follower(replica(2), 0, 2, 1 << 20, 10).unwrap();
        assert_eq!(p.high_watermark(), 0, "replica 3 is in the ISR and unknown");
        p.read_for_follower(replica(3), 0, 1, 1 << 20, 10).unwrap();
        assert_eq!(p.high_watermark(), 1);
        p.read_for_follower(replica(3), 0, 3, 1 << 20, 10).unwrap();
        assert_eq!(p.high_watermark(), 2, "replica 2 is at 2");
        // A follower re-fetching an older offset (it truncated) does not pull the high watermark back.
        p.read_for_follower(replica(2), 0, 0, 1 << 20, 10).unwrap();
        assert_eq!(p.high_watermark(), 2);
        // Consumers never read past it.
        let read = p.read(0, 2, 1 << 20, false).unwrap();
        assert!(read.records.unwrap().is_none());
        assert_eq!(read.high_watermark, 2);
    }

    #[test]
    fn strict_min_isr_holds_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(
            dir.path(),
            PartitionConfig {
                min_insync_replicas: 2,
                ..Default::default()
            },
        );
        p.make_leader(0, 0, vec![1, 2, 3], vec![1]);
        p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert_eq!(p.high_watermark(), 0, "ISR [1] < min.insync.replicas=2");
        p.read_for_follower(replica(2), 0, 1, 1 << 20, 10).unwrap();
        assert_eq!(
            p.high_watermark(),
            0,
            "a caught-up follower outside the ISR does not count"
        );
        p.make_leader(0, 1, vec![1, 2, 3], vec![1, 2]);
        assert_eq!(
            p.high_watermark(),
            1,
            "the ISR grew to two, who both have offset 0"
        );
    }

    #[test]
    fn the_high_watermark_never_passes_what_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(
            dir.path(),
            PartitionConfig {
                durable: true,
                ..Default::default()
            },
        );
        p.make_leader(0, 0, vec![1, 2], vec![1, 2]);
        let appended = p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        p.read_for_follower(replica(2), 0, 1, 1 << 20, 10).unwrap();
        assert_eq!(
            p.high_watermark(),
            0,
            "the follower has it, the leader has not fsynced it"
        );
        futures_wait(appended.durable.unwrap());
        assert_eq!(p.high_watermark(), 1);
    }

    fn futures_wait(wait: DurableWait) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(wait)
            .unwrap();
    }

    #[test]
    fn isr_changes_are_proposed_once_and_pending_members_count_for_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), PartitionConfig::default());
        p.make_leader(0, 0, vec![1, 2, 3], vec![1]);
        p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert_eq!(p.high_watermark(), 1, "ISR [1], min ISR 1");
        let epochs = |_id: i32| Some(7i64);
        assert_eq!(
            p.propose_isr_change(20, 30_000, epochs),
            None,
            "nobody caught up"
        );
        p.read_for_follower(replica(2), 0, 1, 1 << 20, 20).unwrap();
        let change = p.propose_isr_change(20, 30_000, epochs).unwrap();
        assert_eq!(change.new_isr, vec![(1, 7), (2, 7)]);
        assert_eq!((change.leader_epoch, change.partition_epoch), (0, 0));
        assert_eq!(
            p.propose_isr_change(20, 30_000, epochs),
            None,
            "one change in flight"
        );
        // While it is pending, replica 2 already holds the high watermark back (maximal ISR).
        p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert_eq!(p.high_watermark(), 1);
        assert_eq!(
            p.isr(),
            vec![1],
            "not acted on before the controller confirms"
        );
        p.isr_change_answered(Some((0, 1, vec![1, 2])));
        assert_eq!(
            (p.isr(), p.partition_epoch(), p.pending_isr()),
            (vec![1, 2], 1, None)
        );
        // A follower with a stale broker epoch (restarted) does not join (KIP-903).
        p.read_for_follower(replica(3), 0, 2, 1 << 20, 30).unwrap();
        assert_eq!(p.propose_isr_change(30, 30_000, |_| Some(8)), None);
        // Replica 2 stops fetching: after replica.lag.time.max.ms it leaves; 3 (current epoch now) joins.
        let change = p.propose_isr_change(40_000, 30_000, epochs);
        assert_eq!(
            change.unwrap().new_isr,
            vec![(1, 7)],
            "3's last catch-up is also too old"
        );
    }

    /// A leadership change defers its leader-epoch checkpoint; the first append of the epoch writes it before
    /// the record, and a batch sync writes the others (staging file renamed, nothing left behind).
    #[test]
    fn leader_epoch_checkpoints_are_durable_before_a_record_of_their_epoch() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let pa = Arc::new(open(a.path(), PartitionConfig::default()));
        let pb = Arc::new(open(b.path(), PartitionConfig::default()));
        pa.make_leader(0, 0, vec![1], vec![1]);
        pb.make_leader(0, 0, vec![1], vec![1]);
        assert_eq!(checkpoints::read_leader_epochs(a.path()), None, "deferred");
        pa.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert_eq!(
            checkpoints::read_leader_epochs(a.path()),
            Some(vec![(0, 0)])
        );
        pa.make_leader(3, 0, vec![1], vec![1]);
        Partition::sync_leader_epochs_of(&[pa.clone(), pb.clone()]);
        assert_eq!(
            checkpoints::read_leader_epochs(a.path()),
            Some(vec![(0, 0), (3, 1)])
        );
        assert_eq!(
            checkpoints::read_leader_epochs(b.path()),
            Some(vec![(0, 0)])
        );
        for dir in [a.path(), b.path()] {
            assert!(!checkpoints::staged_leader_epochs_path(dir).exists());
        }
        assert!(!pa.epochs_unsynced_flag.load(Ordering::Acquire));
        // Nothing deferred: a batch sync writes nothing.
        std::fs::remove_file(b.path().join(checkpoints::LEADER_EPOCH_CHECKPOINT)).unwrap();
        Partition::sync_leader_epochs_of(std::slice::from_ref(&pb));
        assert_eq!(checkpoints::read_leader_epochs(b.path()), None);
    }

    #[test]
    fn a_follower_appends_learns_epochs_and_truncates_to_the_divergence_point() {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = open(ld.path(), PartitionConfig::default());
        leader.make_leader(0, 0, vec![1], vec![1]);
        leader.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        leader.make_leader(2, 0, vec![1], vec![1]);
        leader.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        leader.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        let bytes = leader
            .log
            .lock()
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .unwrap();
        let log = Log::open(fd.path(), LogConfig::default()).unwrap();
        let f = Partition::new("t", 0, Uuid::new_v4(), 2, log, PartitionConfig::default());
        f.make_follower(1, 2, 0, vec![1, 2], vec![1, 2]);
        assert!(
            !f.append_as_follower(1, 1, &bytes, 2, 0, 0).unwrap(),
            "stale epoch: nothing written"
        );
        assert!(f.append_as_follower(1, 2, &bytes, 2, 0, 0).unwrap());
        assert_eq!((f.log_end_offset(), f.high_watermark()), (3, 2));
        assert_eq!(f.leader_epochs(), vec![(0, 0), (2, 1)]);
        assert_eq!(f.last_fetched_epoch(), 2);
        assert_eq!(
            checkpoints::read_leader_epochs(fd.path()),
            Some(vec![(0, 0), (2, 1)])
        );
        // The new leader never had epoch 2: it says epoch 0 ends at 1; the follower cuts there, below its HW.
        assert_eq!(f.local_end_offset_for_epoch(0), (0, 1));
        f.truncate_to(1, None).unwrap();
        assert_eq!((f.log_end_offset(), f.high_watermark()), (1, 1));
        assert_eq!(f.leader_epochs(), vec![(0, 0)]);
        assert_eq!(
            checkpoints::read_leader_epochs(fd.path()),
            Some(vec![(0, 0)])
        );
        // The epoch cache survives a reopen.
        drop(f);
        let log = Log::open(fd.path(), LogConfig::default()).unwrap();
        let f = Partition::new("t", 0, Uuid::new_v4(), 2, log, PartitionConfig::default());
        assert_eq!(f.leader_epochs(), vec![(0, 0)]);
    }
}
