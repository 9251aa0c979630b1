//! The log cleaner: compaction (`cleanup.policy=compact`), Kafka's semantics. See
//! `docs/decisions/0013-compaction.md`.
//!
//! A pass has three steps so that appends and fetches are never blocked for long:
//! 1. [`Log::begin_clean`] (under the caller's lock, cheap): decides whether the log is cleanable and takes a
//!    snapshot of the segments to clean (open file handles, sizes), a [`CleanTask`].
//! 2. [`Cleaner::run`] (no lock; the long part): builds a key -> latest offset map over the dirty section, then
//!    rewrites every cleanable segment, grouped up to `segment.bytes`, into a scratch directory, fsynced.
//!    Inactive segments are immutable, so reading them needs no lock; I/O is throttled.
//! 3. [`Log::finish_clean`] (under the lock, a few renames): checks that nothing the task read has changed
//!    (truncation, retention), then swaps the cleaned segments in through a manifest that makes the swap
//!    crash-safe (see [`swap`]) and records the new first dirty offset in `cleaner-offset-checkpoint`.
//!
//! What survives: the latest record of each key; a tombstone (a key with a null value) until its batch's delete
//! horizon (KIP-534: set to `now + delete.retention.ms` the first time a pass keeps it) has passed; records
//! without a key are removed (Kafka does the same). Offsets never change: a cleaned batch keeps its base offset,
//! last offset and producer fields (so idempotent producers' sequences survive), and the log has gaps.
//!
//! Transactions, as Kafka cleans them (see [`txn`]): a pass never reaches past the last stable offset, so every
//! transaction it sees has ended. Batches of aborted transactions go (and never enter the key map); committed
//! transactional records are cleaned like any others. A marker stays while any batch of its transaction does;
//! once none is left it gets a delete horizon (`delete.retention.ms`, KIP-534, as a tombstone does) and a pass
//! after the horizon removes it. An aborted transaction is indexed in the cleaned segment only while its data is
//! there. The last data batch of every producer still in the log's producer state (or, for a producer whose
//! epoch a marker bumped, its marker) is kept, emptied if need be, so a rebuilt producer state still knows its
//! epoch and last sequence.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::batch::{BatchHeader, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2};
use crate::config::LogConfig;
use crate::error::LogError;
use crate::records::{self, BatchFields, DecodedBatch};
use crate::segment::{self, Segment};
use crate::txn_index::AbortedTxn;

mod txn;
use txn::{ControlKind, TxnTracker};

/// Name of the scratch directory (inside the partition directory) where a pass writes cleaned segments.
pub(crate) const SCRATCH_DIR: &str = ".cleaner";
/// The per-partition file holding the first dirty offset (Kafka keeps one per log directory).
pub(crate) const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Settings shared by all cleaner threads of a broker, named after Kafka's broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size` divided by `log.cleaner.threads`: memory for one pass's key map.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.max.bytes.per.second`: read plus write bytes of all passes sharing the [`Cleaner`].
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 128 << 20,
            io_max_bytes_per_second: f64::MAX,
        }
    }
}

/// What [`Log::cleanable`] knows about a log's dirty section.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// First offset not yet cleaned.
    pub first_dirty_offset: i64,
    /// First offset that may not be cleaned (active segment, upper bound, `min.compaction.lag.ms`).
    pub first_uncleanable_offset: i64,
    pub dirty_bytes: u64,
    pub clean_bytes: u64,
    /// `dirty / (clean + dirty)`.
    pub dirty_ratio: f64,
    /// `max.compaction.lag.ms` has passed for the oldest dirty segment: clean whatever the ratio.
    pub overdue: bool,
}

impl Cleanable {
    /// Whether a pass should run now (`min.cleanable.dirty.ratio` or overdue).
    pub fn should_clean(&self, config: &LogConfig) -> bool {
        self.dirty_bytes > 0
            && (self.overdue || self.dirty_ratio >= config.min_cleanable_dirty_ratio)
    }
}

/// An inactive segment as a pass sees it.
#[derive(Debug, Clone)]
pub(crate) struct SegmentSnapshot {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    pub file: Arc<File>,
}

/// A snapshot of the segments one pass cleans; made by [`Log::begin_clean`], consumed by [`Cleaner::run`].
#[derive(Debug)]
pub struct CleanTask {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    pub(crate) now_ms: i64,
    pub(crate) generation: u64,
    pub(crate) first_dirty: i64,
    pub(crate) first_uncleanable: i64,
    /// From the first segment to the last wholly below `first_uncleanable`.
    pub(crate) segments: Vec<SegmentSnapshot>,
    /// The log's aborted transactions that start below `first_uncleanable`, sorted by first offset.
    pub(crate) aborted: Vec<AbortedTxn>,
    /// The producers in the log's producer state (Kafka's `lastRecordsOfActiveProducers`).
    pub(crate) producers: HashMap<i64, LastRecord>,
}

/// A producer the log still tracks: the batch holding its state must survive cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastRecord {
    /// The last offset of its last data batch; `None` when a marker bumped its epoch since (then its markers at
    /// that epoch are what carries the state).
    pub last_data_offset: Option<i64>,
    pub epoch: i16,
}

impl CleanTask {
    pub fn first_dirty_offset(&self) -> i64 {
        self.first_dirty
    }

    pub fn first_uncleanable_offset(&self) -> i64 {
        self.first_uncleanable
    }
}

/// One group of old segments and the segment that replaces them (`None`: every record went).
#[derive(Debug)]
pub(crate) struct CleanedGroup {
    pub old: Vec<(i64, u64)>,
    pub new: Option<i64>,
}

/// The output of [`Cleaner::run`], to hand to [`Log::finish_clean`].
#[derive(Debug)]
pub struct CleanedLog {
    pub(crate) generation: u64,
    pub(crate) groups: Vec<CleanedGroup>,
    /// The next pass's first dirty offset.
    pub(crate) cleaned_up_to: i64,
    pub stats: CleanStats,
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segment bytes read: the dirty section once for the key map, then every cleaned segment.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Records of aborted transactions removed (included in `records_removed`).
    pub aborted_records_removed: u64,
    /// Transaction markers removed (their transactions had no data left and their delete horizon had passed).
    pub markers_removed: u64,
    pub segments_before: u32,
    pub segments_after: u32,
    /// Distinct keys in the dirty section's key map.
    pub keys: u64,
    /// The map's capacity (`dedupe_buffer_bytes` worth of entries).
    pub key_capacity: u64,
    /// Offsets from the first dirty one cleaned this pass (`cleaned_up_to - first dirty`).
    pub dirty_offsets_cleaned: u64,
}

/// How [`Log::finish_clean`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanOutcome {
    /// The cleaned segments replaced the old ones.
    Swapped(CleanStats),
    /// The log changed under the pass (truncated, or segments deleted by retention); nothing was swapped and
    /// the next pass starts over.
    Abandoned,
}

/// Runs cleaning passes. Clones share the I/O throttle (`log.cleaner.io.max.bytes.per.second` is for all
/// cleaner threads together, as in Kafka); each clone runs one pass at a time.
#[derive(Debug, Clone)]
pub struct Cleaner {
    config: CleanerConfig,
    throttle: Arc<Mutex<Throttle>>,
    /// Set to stop passes in flight (shutdown): they fail with an error and leave the log untouched.
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Cleaner {
    pub fn new(config: CleanerConfig) -> Cleaner {
        let rate = config.io_max_bytes_per_second;
        Cleaner {
            config,
            throttle: Arc::new(Mutex::new(Throttle::new(rate))),
            stop: Arc::default(),
        }
    }

    /// Stops this cleaner and its clones: passes in flight end with an error at their next batch (their
    /// scratch output is removed; the log is untouched), and later passes fail at once.
    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn config(&self) -> &CleanerConfig {
        &self.config
    }

    /// Cleans the task's segments into the scratch directory. Takes no lock on the log: the segments it reads are
    /// inactive (nothing appends to them); if the log truncates or deletes them meanwhile, `finish_clean`
    /// notices and abandons the result.
    pub fn run(&self, task: CleanTask) -> crate::Result<CleanedLog> {
        let scratch = task.dir.join(SCRATCH_DIR);
        remove_scratch(&scratch)?;
        std::fs::create_dir(&scratch)
            .map_err(|e| LogError::io("create cleaner scratch directory", &scratch, e))?;
        let result = self.run_in(&task, &scratch);
        if result.is_err() {
            let _ = remove_scratch(&scratch);
        }
        result
    }

    fn run_in(&self, task: &CleanTask, scratch: &Path) -> crate::Result<CleanedLog> {
        let limit = task.config.decompressed_batch_limit();
        let mut stats = CleanStats::default();
        let (map, cleaned_up_to) = self.build_key_map(task, limit, &mut stats)?;
        stats.keys = map.len() as u64;
        stats.key_capacity = map.capacity as u64;
        stats.dirty_offsets_cleaned = (cleaned_up_to - task.first_dirty).max(0) as u64;
        let to_clean: Vec<&SegmentSnapshot> = task
            .segments
            .iter()
            .filter(|s| s.base_offset < cleaned_up_to)
            .collect();
        let mut groups = Vec::new();
        // Carried across groups: a transaction's data may be in one group and its marker in the next.
        let mut txns = TxnTracker::new(&task.aborted);
        for group in group_by_size(&to_clean, &task.config) {
            stats.segments_before += group.len() as u32;
            let base = group[0].base_offset;
            let mut out = Segment::create(scratch, base, &task.config)?;
            let mut filter = Filter {
                map: &map,
                cleaned_up_to,
                now_ms: task.now_ms,
                delete_retention_ms: task.config.delete_retention_ms,
                producers: &task.producers,
                limit,
            };
            for snapshot in &group {
                stats.bytes_read += snapshot.size;
                self.for_each_batch(snapshot, |bytes, header| {
                    let (cleaned, index_entry) =
                        filter.clean_batch(bytes, header, &mut txns, &mut stats)?;
                    let bytes: &[u8] = match &cleaned {
                        Cleaned::Drop => {
                            debug_assert!(index_entry.is_none(), "an indexed abort keeps its marker");
                            return Ok(());
                        }
                        Cleaned::Keep => bytes,
                        Cleaned::Rebuilt(rebuilt) => rebuilt,
                    };
                    let header = BatchHeader::parse(bytes).ok_or_else(|| LogError::Unrecoverable {
                        path: segment_path(snapshot),
                        reason: format!(
                            "the cleaner rebuilt the batch at offset {} into bytes that do not parse",
                            header.base_offset
                        ),
                    })?;
                    out.append(bytes, &[header])?;
                    if let Some(entry) = index_entry {
                        // The marker just appended ends the transaction, so the entry is in marker order.
                        out.append_aborted_txn(entry)?;
                    }
                    stats.bytes_written += bytes.len() as u64;
                    self.throttle.lock().account(bytes.len() as u64);
                    Ok(())
                })?;
            }
            let old = group.iter().map(|s| (s.base_offset, s.size)).collect();
            if out.is_empty() {
                out.delete()?;
                groups.push(CleanedGroup { old, new: None });
            } else {
                out.on_inactive()?;
                out.sync()?;
                // The swap moves every file of the new segment over the old one's; a `.txnindex` must be there
                // even when no aborted transaction is left, or the old segment's entries would survive the swap.
                let txn_index = crate::txn_index::TxnIndex::path_in(scratch, base);
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&txn_index)
                    .map_err(|e| LogError::io("create cleaned transaction index", &txn_index, e))?;
                stats.segments_after += 1;
                groups.push(CleanedGroup {
                    old,
                    new: Some(base),
                });
            }
        }
        crate::checkpoint::sync_dir(scratch)?;
        Ok(CleanedLog {
            generation: task.generation,
            groups,
            cleaned_up_to,
            stats,
        })
    }

    /// The key map over `[first dirty, end)` and `end`: the log's dirty section, or as much of it as the map
    /// holds (the rest waits for the next pass, as in Kafka).
    fn build_key_map(
        &self,
        task: &CleanTask,
        limit: usize,
        stats: &mut CleanStats,
    ) -> crate::Result<(KeyMap, i64)> {
        let dirty_bytes: u64 = task
            .segments
            .iter()
            .filter(|s| s.next_offset > task.first_dirty)
            .map(|s| s.size)
            .sum();
        let mut map = KeyMap::new(self.config.dedupe_buffer_bytes, dirty_bytes);
        let mut end = task.first_uncleanable;
        // Aborted records never decide what survives (Kafka's map skips them too). The walk starts at the
        // first dirty segment: a transaction whose marker is before it ended before anything walked here.
        let walk_start = task
            .segments
            .iter()
            .find(|s| s.next_offset > task.first_dirty)
            .map_or(task.first_dirty, |s| s.base_offset);
        let aborted: Vec<AbortedTxn> = task
            .aborted
            .iter()
            .filter(|e| e.last_offset >= walk_start)
            .copied()
            .collect();
        let mut txns = TxnTracker::new(&aborted);
        'segments: for snapshot in task
            .segments
            .iter()
            .filter(|s| s.next_offset > task.first_dirty)
        {
            let mut full_at = None;
            stats.bytes_read += snapshot.size;
            self.for_each_batch(snapshot, |bytes, header| {
                if full_at.is_some() {
                    return Ok(());
                }
                if header.is_control() {
                    txns.on_control_batch(header, ControlKind::of(bytes, header));
                    return Ok(());
                }
                if txns.on_data_batch(header) || header.last_offset() < task.first_dirty {
                    return Ok(());
                }
                let decoded = match DecodedBatch::new(bytes, limit) {
                    Ok(decoded) => decoded,
                    Err(e) => {
                        tracing::warn!(dir = %task.dir.display(), base_offset = header.base_offset, error = %e,
                            "the cleaner cannot read a batch's records; it keeps the batch as it is");
                        return Ok(());
                    }
                };
                for record in decoded.records() {
                    let Ok(record) = record else { break };
                    stats.records_read += 1;
                    if record.offset < task.first_dirty {
                        continue;
                    }
                    let Some(key) = record.key else { continue };
                    if !map.put(key, record.offset) {
                        full_at = Some(record.offset);
                        break;
                    }
                }
                Ok(())
            })?;
            if let Some(offset) = full_at {
                if offset <= task.first_dirty {
                    return Err(LogError::Unrecoverable {
                        path: task.dir.clone(),
                        reason: format!(
                            "the cleaner's key map ({} entries) cannot hold the keys of one batch; raise log.cleaner.dedupe.buffer.size",
                            map.capacity
                        ),
                    });
                }
                end = offset;
                break 'segments;
            }
        }
        Ok((map, end))
    }

    /// Calls `visit` with each whole batch of a segment snapshot (read batch by batch, throttled).
    fn for_each_batch(
        &self,
        snapshot: &SegmentSnapshot,
        mut visit: impl FnMut(&[u8], &BatchHeader) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let mut position = 0u64;
        let mut bytes = Vec::new();
        while position < snapshot.size {
            if self.is_stopped() {
                return Err(LogError::Io {
                    op: "clean (the cleaner was stopped)",
                    path: segment_path(snapshot),
                    source: std::io::Error::new(std::io::ErrorKind::Interrupted, "cleaner stopped"),
                });
            }
            let header = header_at(snapshot, position)?;
            bytes.resize(header.size(), 0);
            snapshot
                .file
                .read_exact_at(&mut bytes, position)
                .map_err(|e| {
                    LogError::io("read segment for cleaning", segment_path(snapshot), e)
                })?;
            self.throttle.lock().account(bytes.len() as u64);
            visit(&bytes, &header)?;
            position += header.size() as u64;
        }
        Ok(())
    }
}

fn segment_path(snapshot: &SegmentSnapshot) -> PathBuf {
    PathBuf::from(segment::file_name(snapshot.base_offset, "log"))
}

fn header_at(snapshot: &SegmentSnapshot, position: u64) -> crate::Result<BatchHeader> {
    let mut head = [0u8; HEADER_SIZE];
    let remaining = snapshot.size - position;
    let want = (HEADER_SIZE as u64).min(remaining) as usize;
    snapshot
        .file
        .read_exact_at(&mut head[..want], position)
        .map_err(|e| LogError::io("read segment for cleaning", segment_path(snapshot), e))?;
    BatchHeader::parse(&head)
        .filter(|h| {
            h.magic == MAGIC_V2
                && h.length >= (HEADER_SIZE - LOG_OVERHEAD) as i32
                && h.size() as u64 <= remaining
        })
        .ok_or_else(|| LogError::Unrecoverable {
            path: segment_path(snapshot),
            reason: format!("no valid batch header at byte {position} while cleaning"),
        })
}

/// Consecutive segments whose total size fits `segment.bytes` and whose offsets fit one segment's 32-bit
/// relative offsets (Kafka's `groupSegmentsBySize`).
fn group_by_size<'a>(
    segments: &[&'a SegmentSnapshot],
    config: &LogConfig,
) -> Vec<Vec<&'a SegmentSnapshot>> {
    let mut groups: Vec<Vec<&SegmentSnapshot>> = Vec::new();
    for &segment in segments {
        if let Some(group) = groups.last_mut() {
            let size: u64 = group.iter().map(|s| s.size).sum::<u64>() + segment.size;
            let span = segment.next_offset - group[0].base_offset;
            if size <= config.segment_bytes && span <= i64::from(i32::MAX) {
                group.push(segment);
                continue;
            }
        }
        groups.push(vec![segment]);
    }
    groups
}

/// What the cleaner does with one batch.
#[derive(Debug)]
enum Cleaned {
    Drop,
    /// Copied byte for byte.
    Keep,
    Rebuilt(Vec<u8>),
}

/// Decides, batch by batch and record by record, what a batch keeps (Kafka's `cleanInto` filter).
struct Filter<'a> {
    map: &'a KeyMap,
    cleaned_up_to: i64,
    now_ms: i64,
    delete_retention_ms: i64,
    producers: &'a HashMap<i64, LastRecord>,
    limit: usize,
}

impl Filter<'_> {
    /// Whether `header` is the batch that holds a tracked producer's state (Kafka's
    /// `isBatchLastRecordOfProducer`): its last data batch, or, if a marker bumped its epoch since, its markers
    /// at that epoch. Such a batch is kept even when all its records go.
    fn holds_producer_state(&self, header: &BatchHeader) -> bool {
        if !header.has_producer_id() {
            return false;
        }
        self.producers
            .get(&header.producer_id)
            .is_some_and(|last| match last.last_data_offset {
                Some(offset) => header.last_offset() == offset,
                None => header.is_control() && header.producer_epoch == last.epoch,
            })
    }

    /// What to do with one batch, and the aborted transaction to index after it (for a marker that stays).
    fn clean_batch(
        &mut self,
        bytes: &[u8],
        header: &BatchHeader,
        txns: &mut TxnTracker<'_>,
        stats: &mut CleanStats,
    ) -> crate::Result<(Cleaned, Option<AbortedTxn>)> {
        let retain_empty = self.holds_producer_state(header);
        if header.is_control() {
            let decision = txns.on_control_batch(header, ControlKind::of(bytes, header));
            let expired = header
                .delete_horizon_ms()
                .is_some_and(|horizon| self.now_ms >= horizon);
            if decision.can_discard && (expired || header.records_count == 0) {
                if header.records_count > 0 {
                    stats.markers_removed += 1;
                }
                let cleaned = if retain_empty && header.records_count > 0 {
                    Cleaned::Rebuilt(records::encode_empty_batch(header))
                } else if retain_empty {
                    Cleaned::Keep
                } else {
                    Cleaned::Drop
                };
                return Ok((cleaned, None));
            }
            if decision.can_discard && header.delete_horizon_ms().is_none() {
                // Its transaction has no data left: the marker goes after delete.retention.ms, like a tombstone.
                return Ok((self.with_delete_horizon(bytes, header)?, None));
            }
            return Ok((Cleaned::Keep, decision.index_entry));
        }
        if txns.on_data_batch(header) {
            let count = u64::try_from(header.records_count).unwrap_or(0);
            stats.records_removed += count;
            stats.aborted_records_removed += count;
            let cleaned = match (retain_empty, header.records_count) {
                (false, _) => Cleaned::Drop,
                (true, 0) => Cleaned::Keep,
                (true, _) => Cleaned::Rebuilt(records::encode_empty_batch(header)),
            };
            return Ok((cleaned, None));
        }
        let decoded = match DecodedBatch::new(bytes, self.limit) {
            Ok(decoded) => decoded,
            Err(_) => return Ok((Cleaned::Keep, None)), // warned about while building the map; never lose data
        };
        let records = match decoded.collect_records() {
            Ok(records) => records,
            Err(_) => return Ok((Cleaned::Keep, None)),
        };
        let horizon_passed = header
            .delete_horizon_ms()
            .is_some_and(|horizon| self.now_ms >= horizon);
        let mut kept = Vec::with_capacity(records.len());
        for record in &records {
            let keep = if record.offset >= self.cleaned_up_to {
                true
            } else if let Some(key) = record.key {
                let latest = self.map.get(key).is_none_or(|o| record.offset >= o);
                latest && (record.value.is_some() || !horizon_passed)
            } else {
                false
            };
            if keep {
                kept.push(*record);
            } else {
                stats.records_removed += 1;
                if record.is_tombstone() {
                    stats.tombstones_removed += 1;
                }
            }
        }
        let needs_horizon =
            header.delete_horizon_ms().is_none() && kept.iter().any(|r| r.is_tombstone());
        if kept.len() == records.len() && !needs_horizon {
            return Ok((Cleaned::Keep, None));
        }
        if kept.is_empty() {
            let cleaned = if retain_empty {
                Cleaned::Rebuilt(records::encode_empty_batch(header))
            } else {
                Cleaned::Drop
            };
            return Ok((cleaned, None));
        }
        let mut fields = BatchFields::of(header);
        if needs_horizon {
            fields.delete_horizon_ms = Some(self.now_ms.saturating_add(self.delete_retention_ms));
        } else if !kept.iter().any(|r| r.is_tombstone()) {
            fields.delete_horizon_ms = None;
        }
        Ok((Cleaned::Rebuilt(self.encode(header, &fields, &kept)?), None))
    }

    /// `header`'s batch (a marker) with its records as they are and a delete horizon of now +
    /// `delete.retention.ms`.
    fn with_delete_horizon(&self, bytes: &[u8], header: &BatchHeader) -> crate::Result<Cleaned> {
        let Ok(decoded) = DecodedBatch::new(bytes, self.limit) else {
            return Ok(Cleaned::Keep);
        };
        let Ok(records) = decoded.collect_records() else {
            return Ok(Cleaned::Keep);
        };
        let mut fields = BatchFields::of(header);
        fields.delete_horizon_ms = Some(self.now_ms.saturating_add(self.delete_retention_ms));
        Ok(Cleaned::Rebuilt(self.encode(header, &fields, &records)?))
    }

    fn encode(
        &self,
        header: &BatchHeader,
        fields: &BatchFields,
        kept: &[records::Record<'_>],
    ) -> crate::Result<Vec<u8>> {
        let codec = header
            .compression()
            .ok_or_else(|| LogError::Unrecoverable {
                path: PathBuf::from(segment::file_name(header.base_offset, "log")),
                reason: format!(
                    "the batch at offset {} has an unknown codec in attributes {:#x}",
                    header.base_offset, header.attributes
                ),
            })?;
        records::encode_batch(fields, kept, codec, None).map_err(|e| LogError::Unrecoverable {
            path: PathBuf::from(segment::file_name(header.base_offset, "log")),
            reason: format!(
                "cannot re-encode the cleaned batch at offset {}: {e}",
                header.base_offset
            ),
        })
    }
}

/// Key -> latest offset, keyed by a 128-bit hash of the key (Kafka's `SkimpyOffsetMap` keeps an MD5), with a
/// capacity fixed by the dedupe buffer: it never grows past it.
struct KeyMap {
    entries: HashMap<KeyHash, i64, BuildHasherDefault<FirstWordHasher>>,
    capacity: usize,
}

/// Bytes per bucket of the table: 16 (hash) + 8 (offset) + 1 (hashbrown's control byte).
const BUCKET_BYTES: usize = 25;

impl KeyMap {
    fn new(budget_bytes: usize, dirty_bytes: u64) -> KeyMap {
        // hashbrown allocates a power of two of buckets and fills them to 7/8: the largest such table within
        // the budget fixes the capacity, and the table is reserved once and never grows.
        let buckets = (budget_bytes / BUCKET_BYTES).max(8);
        let buckets = 1usize << (usize::BITS - 1 - buckets.leading_zeros());
        let capacity = buckets / 8 * 7;
        // No more keys than records, and a record takes at least 7 bytes: don't reserve past that.
        let reserve = capacity.min((dirty_bytes / 7) as usize + 1);
        KeyMap {
            entries: HashMap::with_capacity_and_hasher(reserve, Default::default()),
            capacity,
        }
    }

    fn hash(key: &[u8]) -> KeyHash {
        let mut out = [0u64; 2];
        for (salt, word) in out.iter_mut().enumerate() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (salt as u8).hash(&mut hasher);
            key.hash(&mut hasher);
            *word = hasher.finish();
        }
        KeyHash(out[0], out[1])
    }

    /// Records `offset` as the latest for `key`; false (and nothing stored) when the map is full.
    fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = Self::hash(key);
        if let Some(latest) = self.entries.get_mut(&hash) {
            *latest = offset;
            return true;
        }
        if self.entries.len() >= self.capacity {
            return false;
        }
        self.entries.insert(hash, offset);
        true
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(&Self::hash(key)).copied()
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A key's 128-bit hash (two SipHash-1-3 words with different salts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyHash(u64, u64);

impl Hash for KeyHash {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0);
    }
}

/// The keys are already uniform hashes: the table uses their first word as is.
#[derive(Default)]
struct FirstWordHasher(u64);

impl Hasher for FirstWordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Kafka's `Throttler`: sleeps when the bytes done since the start of the period exceed the rate.
#[derive(Debug)]
struct Throttle {
    rate: f64,
    period_start: Instant,
    bytes: u64,
}

impl Throttle {
    const PERIOD: Duration = Duration::from_millis(300);

    fn new(rate: f64) -> Throttle {
        Throttle {
            rate,
            period_start: Instant::now(),
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: u64) {
        if !self.rate.is_finite() || self.rate <= 0.0 || self.rate >= 1e15 {
            return;
        }
        self.bytes += bytes;
        let elapsed = self.period_start.elapsed();
        if elapsed < Self::PERIOD {
            return;
        }
        let allowed = self.rate * elapsed.as_secs_f64();
        if (self.bytes as f64) > allowed {
            let sleep = (self.bytes as f64 - allowed) / self.rate;
            std::thread::sleep(Duration::from_secs_f64(sleep.min(10.0)));
        }
        self.period_start = Instant::now();
        self.bytes = 0;
    }
}

pub(crate) fn remove_scratch(scratch: &Path) -> crate::Result<()> {
    match std::fs::remove_dir_all(scratch) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("remove cleaner scratch directory", scratch, e)),
    }
}

/// The crash-safe swap. After a pass has written and fsynced its segments in the scratch directory,
/// `cleaner.swap` (written atomically) lists the old segments and the new ones: from then on the swap is
/// decided, and [`swap::complete`] (run by `finish_clean`, and again by `Log::open` if a crash interrupted it)
/// moves each new segment's files over the old ones (atomic renames) and deletes the old segments that have no
/// successor, idempotently. Without a manifest, the scratch directory is an unfinished pass and is deleted.
/// Either way the log is the old segments or the new ones, never a mix.
pub(crate) mod swap {
    use std::io::Write;
    use std::path::Path;

    use crate::error::LogError;
    use crate::segment::file_name;

    pub const MANIFEST: &str = "cleaner.swap";
    const SUFFIXES: [&str; 5] = [
        "log",
        "index",
        "timeindex",
        "txnindex",
        crate::key_index::SUFFIX,
    ];

    #[derive(Debug, Default, PartialEq, Eq)]
    pub struct Manifest {
        pub old: Vec<i64>,
        pub new: Vec<i64>,
    }

    pub fn write(dir: &Path, manifest: &Manifest) -> crate::Result<()> {
        let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
        let text = format!(
            "annal-cleaner-swap 1\nold {}\nnew {}\nend\n",
            join(&manifest.old),
            join(&manifest.new)
        );
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let path = dir.join(MANIFEST);
        let mut file = std::fs::File::create(&tmp)
            .map_err(|e| LogError::io("create swap manifest", &tmp, e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| LogError::io("write swap manifest", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| LogError::io("rename swap manifest", &path, e))?;
        crate::checkpoint::sync_dir(dir)
    }

    /// The manifest in `dir`, if a whole one is there.
    pub fn read(dir: &Path) -> Option<Manifest> {
        let text = std::fs::read_to_string(dir.join(MANIFEST)).ok()?;
        let mut lines = text.lines();
        if lines.next()? != "annal-cleaner-swap 1" {
            return None;
        }
        let parse = |line: Option<&str>, tag: &str| -> Option<Vec<i64>> {
            let rest = line?.strip_prefix(tag)?;
            rest.split_whitespace()
                .map(|v| v.parse().ok().filter(|v: &i64| *v >= 0))
                .collect()
        };
        let old = parse(lines.next(), "old")?;
        let new = parse(lines.next(), "new")?;
        (lines.next()? == "end").then_some(Manifest { old, new })
    }

    /// Whether [`complete`] has anything to do in a directory so listed: a manifest (whole or not) or the
    /// scratch directory.
    pub(crate) fn may_be_pending(listing: &crate::dir_listing::DirListing) -> bool {
        listing.may_contain(MANIFEST)
            || listing.may_contain(&format!("{MANIFEST}.tmp"))
            || listing.may_contain(super::SCRATCH_DIR)
    }

    /// Finishes the swap the manifest describes (idempotent), then removes the scratch directory and the
    /// manifest. Without a manifest, removes the scratch directory (an unfinished pass).
    pub fn complete(dir: &Path) -> crate::Result<()> {
        let scratch = dir.join(super::SCRATCH_DIR);
        let Some(manifest) = read(dir) else {
            let _ = std::fs::remove_file(dir.join(format!("{MANIFEST}.tmp")));
            let _ = std::fs::remove_file(dir.join(MANIFEST));
            return super::remove_scratch(&scratch);
        };
        for &base in &manifest.new {
            // The old segment's key index describes records the cleaner removed: it goes, and the new segment's
            // is rebuilt from the cleaned log (see `key_index.rs`).
            let key_index = dir.join(file_name(base, crate::key_index::SUFFIX));
            match std::fs::remove_file(&key_index) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(LogError::io(
                        "delete a cleaned segment's key index",
                        &key_index,
                        e,
                    ))
                }
            }
            for suffix in SUFFIXES {
                let from = scratch.join(file_name(base, suffix));
                let to = dir.join(file_name(base, suffix));
                match std::fs::rename(&from, &to) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {} // moved before a crash
                    Err(e) => return Err(LogError::io("move a cleaned segment in", &to, e)),
                }
            }
        }
        for base in manifest.old.iter().filter(|b| !manifest.new.contains(b)) {
            for suffix in SUFFIXES {
                let path = dir.join(file_name(*base, suffix));
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(LogError::io("delete a cleaned-away segment", &path, e)),
                }
            }
        }
        crate::checkpoint::sync_dir(dir)?;
        std::fs::remove_file(dir.join(MANIFEST))
            .map_err(|e| LogError::io("remove swap manifest", dir.join(MANIFEST), e))?;
        crate::checkpoint::sync_dir(dir)?;
        super::remove_scratch(&scratch)
    }
}

/// `cleaner-offset-checkpoint`: Kafka's checkpoint framing (version 0, entry count), one entry: the first
/// dirty offset of this partition.
pub(crate) fn read_checkpoint(dir: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join(CHECKPOINT_FILE)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" || lines.next()? != "1" {
        return None;
    }
    lines.next()?.trim().parse().ok().filter(|v: &i64| *v >= 0)
}

pub(crate) fn write_checkpoint(dir: &Path, first_dirty: i64) -> crate::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
    let path = dir.join(CHECKPOINT_FILE);
    let mut file = std::fs::File::create(&tmp)
        .map_err(|e| LogError::io("create cleaner checkpoint", &tmp, e))?;
    file.write_all(format!("0\n1\n{first_dirty}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| LogError::io("write cleaner checkpoint", &tmp, e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| LogError::io("rename cleaner checkpoint", &path, e))?;
    crate::checkpoint::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_map_refuses_new_keys_when_full_but_updates_known_ones() {
        let mut map = KeyMap::new(BUCKET_BYTES * 8, 1 << 20);
        assert_eq!(map.capacity, 7);
        for key in 0..7u8 {
            assert!(map.put(&[key], i64::from(key)));
        }
        assert!(!map.put(b"new", 9));
        assert!(map.put(&[0], 40));
        assert_eq!(
            (map.get(&[0]), map.get(&[6]), map.get(b"new")),
            (Some(40), Some(6), None)
        );
        assert_eq!(KeyMap::new(128 << 20, u64::MAX).capacity, (1 << 22) / 8 * 7);
    }

    #[test]
    fn swap_manifest_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = swap::Manifest {
            old: vec![0, 10, 20],
            new: vec![0],
        };
        swap::write(dir.path(), &manifest).unwrap();
        assert_eq!(swap::read(dir.path()), Some(manifest));
        std::fs::write(
            dir.path().join(swap::MANIFEST),
            "annal-cleaner-swap 1\nold 0 1\n",
        )
        .unwrap();
        assert_eq!(swap::read(dir.path()), None, "a torn manifest is not one");
    }

    #[test]
    fn throttle_sleeps_to_the_rate() {
        let mut throttle = Throttle::new(1_000_000.0);
        let start = Instant::now();
        for _ in 0..10 {
            throttle.account(100_000);
            std::thread::sleep(Duration::from_millis(40));
        }
        // 1 MB at 1 MB/s: about a second, however fast the loop.
        assert!(
            start.elapsed() >= Duration::from_millis(700),
            "{:?}",
            start.elapsed()
        );
    }
}
