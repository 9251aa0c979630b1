//! One partition as this broker holds it: its replication state (leader epoch, replicas, ISR, whether this broker
//! leads it), its high watermark, and the only lock on its [`Log`].
//!
//! Locking order: the state lock (`state`) before the log lock (`log`), never the reverse. Neither is held across
//! an `await`: every method here is synchronous; those that touch the disk are called off the async workers.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use annal_log::producer::ProducerStateManager;
use annal_log::{
    AppendInfo, AppendOptions, DurableLog, DurableWait, FileSlice, GroupCommit, Log, LogConfig,
    LogError, SyncHandle, TimestampType,
};
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

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
    isr: Vec<i32>,
    /// (epoch, first offset of that epoch), ascending in both: Kafka's leader-epoch cache.
    /// In memory only for now; persisting it (leader-epoch-checkpoint) comes with replication.
    epochs: Vec<(i32, i64)>,
    config: PartitionConfig,
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
    pub log_start_offset: i64,
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
    /// Long-polling fetches waiting for this partition's high watermark to move.
    watchers: FetchWatchers,
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
                epochs: Vec::new(),
                config,
            }),
            log: Arc::new(PartitionLog(Mutex::new(log))),
            commit: OnceLock::new(),
            watchers: FetchWatchers::default(),
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

    /// Makes this broker the partition's leader at `leader_epoch` (the controller bumps the epoch on every
    /// leader change). Returns false, changing nothing, if `leader_epoch` is older than the one already known
    /// (a stale metadata update). Batches appended from now on carry `leader_epoch`.
    pub fn make_leader(&self, leader_epoch: i32, replicas: Vec<i32>, isr: Vec<i32>) -> bool {
        assert!(leader_epoch >= 0, "leader epochs start at 0");
        assert!(
            isr.contains(&self.local_broker_id),
            "{}: a leader is always in its own ISR",
            self.name()
        );
        self.become_(self.local_broker_id, leader_epoch, replicas, isr)
    }

    /// Makes `leader` the partition's leader at `leader_epoch`; this broker follows (it rejects produce and
    /// client fetches with NOT_LEADER_OR_FOLLOWER). Returns false if `leader_epoch` is stale.
    pub fn make_follower(
        &self,
        leader: i32,
        leader_epoch: i32,
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
        let changed = self.become_(leader, leader_epoch, replicas, isr);
        // Long polls end now: they get NOT_LEADER_OR_FOLLOWER at once and go to the new leader.
        self.watchers.wake_all();
        changed
    }

    fn become_(&self, leader: i32, leader_epoch: i32, replicas: Vec<i32>, isr: Vec<i32>) -> bool {
        let mut state = self.state.write();
        if leader_epoch < state.leader_epoch {
            tracing::info!(partition = %self.name(), leader_epoch, current = state.leader_epoch, "ignoring a stale leader change");
            return false;
        }
        if state.epochs.last().is_none_or(|(e, _)| *e < leader_epoch) {
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
        }
        state.leader_epoch = leader_epoch;
        state.leader = leader;
        state.replicas = replicas;
        state.isr = isr;
        true
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
        let state = self.state.read();
        self.check_leader(&state, -1)?;
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
            ..Default::default()
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
        drop(log);
        drop(state);
        if durable.is_none() && !info.duplicate {
            self.high_watermark_moved();
        }
        Ok(LeaderAppend { info, durable })
    }

    fn group_commit(&self) -> &GroupCommit {
        self.commit
            .get_or_init(|| GroupCommit::start(Arc::clone(&self.log)))
    }

    /// Wakes the fetches waiting on this partition (after an append or an fsync moved the high watermark).
    pub fn high_watermark_moved(&self) {
        self.watchers.wake_all();
    }

    pub(crate) fn watchers(&self) -> &FetchWatchers {
        &self.watchers
    }

    /// The high watermark: what consumers may read and ListOffsets LATEST answers. Today's rule (a single-member
    /// ISR): the log end, or for durable partitions the flushed offset. Replication will make it the smallest
    /// log end in the ISR.
    pub fn high_watermark(&self) -> i64 {
        let state = self.state.read();
        high_watermark(&self.log.lock(), state.config.durable)
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

    /// Reads whole batches from `offset`, at most `max_bytes` (the first batch whole even if larger) and nothing
    /// at or past the high watermark. Takes the slice under the lock; its bytes are read (or sent) later.
    pub fn read(
        &self,
        current_leader_epoch: i32,
        offset: i64,
        max_bytes: usize,
    ) -> Result<PartitionRead, PartitionError> {
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        let durable = state.config.durable;
        let log = self.log.lock();
        let hw = high_watermark(&log, durable);
        let records = log
            .read(offset, max_bytes.max(1), durable.then_some(hw))
            .map(|r| r.slice)
            .map_err(|source| PartitionError::Log {
                partition: self.name(),
                source,
            });
        Ok(PartitionRead {
            records,
            high_watermark: hw,
            log_start_offset: log.log_start_offset(),
        })
    }

    /// ListOffsets: the offset (and its timestamp and leader epoch) `spec` names.
    pub fn list_offsets(
        &self,
        current_leader_epoch: i32,
        spec: OffsetSpec,
    ) -> Result<OffsetAndEpoch, PartitionError> {
        let state = self.state.read();
        self.check_leader(&state, current_leader_epoch)?;
        let log = self.log.lock();
        let (timestamp, offset) = match spec {
            OffsetSpec::Latest => (-1, high_watermark(&log, state.config.durable)),
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
        let state = self.state.read();
        self.check_leader(&state, -1)?;
        let mut log = self.log.lock();
        let hw = high_watermark(&log, state.config.durable);
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

    /// Deletes segments past `retention.ms`/`retention.bytes`; returns how many. Blocking.
    pub fn apply_retention(&self, now_ms: i64) -> Result<u32, LogError> {
        self.log.lock().apply_retention(now_ms)
    }

    /// fsyncs everything appended. Blocking.
    pub fn flush(&self) -> Result<(), LogError> {
        self.log.lock().flush()
    }

    /// Stops the group commit (its flusher thread holds the log) and returns the log if nothing else holds it.
    pub(crate) fn into_log(self) -> Option<Log> {
        drop(self.commit);
        Arc::try_unwrap(self.log).ok().map(|l| l.0.into_inner())
    }
}

/// The high-watermark rule of a single-member ISR: the log end, or for durable partitions (`flush.messages=1`)
/// the flushed offset, so no consumer sees a record before its fsync (as Kafka's high watermark would not
/// expose it before the ISR has it).
pub fn high_watermark(log: &Log, durable: bool) -> i64 {
    if durable {
        log.flushed_offset().min(log.log_end_offset())
    } else {
        log.log_end_offset()
    }
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
        assert!(p.make_follower(2, 3, vec![1, 2], vec![1, 2]));
        let e = p
            .append_records_to_leader(&mut batch(), 1, 0)
            .err()
            .unwrap();
        assert_eq!(e.code(), crate::kafka_code::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(p.read(-1, 0, 100).err().unwrap().code(), 6);
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
        p.make_leader(0, vec![1, 2], vec![1]);
        let e = p
            .append_records_to_leader(&mut batch(), -1, 0)
            .err()
            .unwrap();
        assert_eq!(e.code(), crate::kafka_code::NOT_ENOUGH_REPLICAS);
        assert!(p.append_records_to_leader(&mut batch(), 1, 0).is_ok());
        p.make_leader(1, vec![1, 2], vec![1, 2]);
        assert!(p.append_records_to_leader(&mut batch(), -1, 0).is_ok());
    }

    #[test]
    fn batches_carry_the_leader_epoch_and_epochs_end_where_the_next_starts() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), PartitionConfig::default());
        p.make_leader(0, vec![1], vec![1]);
        p.append_records_to_leader(&mut batch(), 1, 0).unwrap();
        assert!(p.make_leader(5, vec![1], vec![1]));
        assert!(
            !p.make_leader(4, vec![1], vec![1]),
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
        let latest = p.list_offsets(5, OffsetSpec::Latest).unwrap();
        assert_eq!((latest.offset, latest.leader_epoch), (2, 5));
        let earliest = p.list_offsets(-1, OffsetSpec::Earliest).unwrap();
        assert_eq!((earliest.offset, earliest.leader_epoch), (0, 0));
        assert_eq!(
            p.list_offsets(4, OffsetSpec::Latest).err().unwrap().code(),
            74
        );
        assert_eq!(
            p.list_offsets(6, OffsetSpec::Latest).err().unwrap().code(),
            75
        );
    }
}
