//! The partition log: an ordered set of segments, plus the bookkeeping that spans them (log start offset,
//! recovery point, producer state).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchHeader};
use crate::checkpoint::{self, Checkpoint};
use crate::cleaner::{self, CleanOutcome, CleanTask, Cleanable, CleanedLog, SegmentSnapshot};
use crate::config::LogConfig;
use crate::control::{self, EndTxnMarker, TxnOutcome};
use crate::dir_listing::DirListing;
use crate::error::LogError;
use crate::producer::{CompletedTxn, ProducerStateManager, SequenceCheck};
use crate::roll_flush::{FlushFailure, Gate, RollFlush};
use crate::segment::{self, Segment};
use crate::slice::FileSlice;
use crate::txn_index::AbortedTxn;

/// Which clock stamps a batch: the producer's (`CreateTime`) or the broker's at append (`LogAppendTime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

/// Who is appending; it decides which batches are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendOrigin {
    /// A producer: control batches are refused.
    #[default]
    Client,
    /// The broker itself (transaction markers, coordinator records).
    Coordinator,
}

/// Options of one append.
#[derive(Debug, Clone, Copy)]
pub struct AppendOptions {
    /// Written into each batch's partition leader epoch field.
    pub leader_epoch: i32,
    /// The broker's clock, for `LogAppendTime` and time-based rolling.
    pub now_ms: i64,
    pub timestamp_type: TimestampType,
    pub origin: AppendOrigin,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            leader_epoch: 0,
            now_ms: now_ms(),
            timestamp_type: TimestampType::CreateTime,
            origin: AppendOrigin::Client,
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// Largest batch max-timestamp appended (after `LogAppendTime` stamping).
    pub max_timestamp: i64,
    /// The broker's timestamp when the topic uses `LogAppendTime`.
    pub log_append_time_ms: Option<i64>,
    pub log_start_offset: i64,
    /// The request repeated an idempotent producer's batch already in the log: nothing was written and the
    /// offsets are the original ones.
    pub duplicate: bool,
    pub records_count: u64,
}

/// The result of a read.
#[derive(Debug, Clone)]
pub struct LogRead {
    /// Whole batches; `None` when nothing is available at the offset (yet).
    pub slice: Option<FileSlice>,
    /// The offset the slice ends at (the next batch's base offset), when there is a slice: the upper bound of
    /// the aborted transactions a read_committed fetch of it reports.
    pub slice_end_offset: Option<i64>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// What retention must keep for consumers that have not read it yet (the broker's `retention.guard.groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionGuard {
    /// The lowest offset a guarded consumer has not consumed: segments holding it or later offsets are kept.
    pub keep_from: i64,
    /// The most bytes the guard keeps beyond what retention would (`None`: no limit).
    pub max_bytes: Option<u64>,
}

/// What one retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    pub deleted_segments: u32,
    /// Bytes retention would have deleted that the guard kept.
    pub held_bytes: u64,
}

/// A summary of one segment, for inspection tools.
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size_bytes: u64,
    pub max_timestamp: Option<i64>,
    pub path: PathBuf,
    /// Whether the offset and time indexes are in memory (the active segment once appended to) or read from
    /// their files on demand (sealed segments, and every segment after an open).
    pub indexes_in_memory: bool,
}

/// Snapshot files beyond this many (newest kept) are deleted.
const SNAPSHOTS_KEPT_MAX: usize = 2;

/// A partition's log. See the crate docs.
#[derive(Debug)]
pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    /// Keyed by base offset; never empty; the last one is the active segment.
    pub(crate) segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    /// Every offset below this is known to be on stable storage.
    recovery_point: i64,
    producers: ProducerStateManager,
    unflushed_records: u64,
    first_unflushed_ms: Option<i64>,
    /// The fsync of the last rolled segment, if it may still be running (at most one; see `roll_flush.rs`).
    roll_flush: Option<RollFlush>,
    /// Bumped by every truncation: a roll fsync that straddles one must not advance the recovery point.
    generation: u64,
    /// A background fsync failed: durability can no longer be promised, so appends and flushes fail until the
    /// log is reopened (recovery then revalidates everything after the recovery point).
    background_failure: Option<(PathBuf, std::io::ErrorKind, String)>,
    /// Holds roll fsyncs back (tests only).
    roll_flush_gate: Option<Arc<Gate>>,
    /// The cleaner's first dirty offset (`cleaner-offset-checkpoint`): offsets below it have been cleaned.
    first_dirty_offset: i64,
}

impl Log {
    /// Opens the log in `dir` (created if missing). After an unclean shutdown every segment from the recovery
    /// point on is validated batch by batch, torn tails are cut, and indexes are rebuilt; after a clean one only
    /// the index files are checked.
    pub fn open(dir: &Path, config: LogConfig) -> crate::Result<Log> {
        Self::open_inner(dir, config, None)
    }

    /// [`Log::open`] for an owner that records clean shutdowns itself, with one marker for all its logs
    /// (Apache Kafka's `.kafka_cleanshutdown`): `clean_marker` says whether that marker was found. The log
    /// skips recovery if it was, or if its own flag says so (a log last closed with [`Log::close`], which is
    /// then cleared as `open` does); a log closed with [`Log::close_for_marker`] has nothing to clear, so a
    /// clean restart writes nothing per log. The owner must remove its marker (durably) before any of its
    /// logs changes, and write it only once every one of them was closed with `close_for_marker`.
    pub fn open_with_marker(
        dir: &Path,
        config: LogConfig,
        clean_marker: bool,
    ) -> crate::Result<Log> {
        Self::open_inner(dir, config, Some(clean_marker))
    }

    fn open_inner(dir: &Path, config: LogConfig, clean_marker: Option<bool>) -> crate::Result<Log> {
        assert!(
            config.segment_bytes > 0 && config.segment_bytes <= LogConfig::SEGMENT_BYTES_MAX,
            "segment.bytes out of range"
        );
        // One listing answers which files exist for the whole open (see `dir_listing`).
        let mut listing = DirListing::read_or_create(dir)?;
        let checkpoint = if listing.may_contain(checkpoint::FILE_NAME) {
            Checkpoint::read(dir)?
        } else {
            None
        };
        // A cleaning pass interrupted after its swap was decided is finished here; one interrupted before is
        // dropped (see `cleaner::swap`). Either way the segments are the old ones or the new ones.
        if cleaner::swap::may_be_pending(&listing) {
            cleaner::swap::complete(dir)?;
            listing = DirListing::read_or_create(dir)?;
        }
        let (bases, snapshots) = scan_listing(dir, &listing);

        // The log's own flag is cleared on disk (below) before anything can change, in both modes, so it
        // can be trusted here whichever way the log was last closed.
        let clean = checkpoint.is_some_and(|c| c.clean_shutdown || clean_marker == Some(true));
        let recovery_point = checkpoint.map_or(0, |c| c.recovery_point);
        let first_to_recover = if clean {
            None
        } else {
            // The segment holding the recovery point and all later ones are scanned.
            Some(
                bases
                    .iter()
                    .rev()
                    .find(|&&b| b <= recovery_point)
                    .copied()
                    .unwrap_or(i64::MIN),
            )
        };

        let mut segments = BTreeMap::new();
        // The base of the first segment recovered (scanned) by this open: producer state must be replayed from
        // at or before it, so the transaction indexes of recovered segments get back every ABORT they hold.
        let mut first_recovered: Option<i64> = None;
        let mut previous_next: Option<i64> = None;
        let mut iter = bases.iter().copied().peekable();
        while let Some(base) = iter.next() {
            let recover = first_to_recover.is_some_and(|first| base >= first);
            let (seg, report) = Segment::open_listed(dir, base, &config, recover, &listing)?;
            if report.rebuilt_indexes.is_some() && first_recovered.is_none() {
                first_recovered = Some(base);
            }
            if let Some(reason) = &report.rebuilt_indexes {
                tracing::info!(dir = %dir.display(), base_offset = base, reason = %reason, "rebuilt segment indexes");
            }
            if previous_next.is_some_and(|n| base < n) {
                return Err(LogError::Unrecoverable {
                    path: seg.log_path().to_path_buf(),
                    reason: format!("segment starts at offset {base}, inside the previous segment; move it aside and restart"),
                });
            }
            previous_next = Some(seg.next_offset());
            let cut = report.truncated_bytes > 0;
            segments.insert(base, seg);
            if cut {
                // Nothing after a corrupt batch can be trusted to follow it: drop the later segments.
                for later in iter.by_ref() {
                    tracing::warn!(dir = %dir.display(), base_offset = later, "deleting a segment that follows a corrupt one");
                    let (seg, _) = Segment::open(dir, later, &config, false)?;
                    seg.delete()?;
                }
            }
        }
        let start_hint = checkpoint.map_or(0, |c| c.log_start_offset);
        if segments.is_empty() {
            segments.insert(start_hint, Segment::create(dir, start_hint, &config)?);
        }
        let first_base = *segments.keys().next().expect("non-empty");
        let log_end = segments
            .values()
            .next_back()
            .expect("non-empty")
            .next_offset();
        let log_start_offset = start_hint.max(first_base).min(log_end);

        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            recovery_point: if clean {
                log_end
            } else {
                recovery_point.min(log_end)
            },
            producers: ProducerStateManager::default(),
            unflushed_records: 0,
            first_unflushed_ms: None,
            roll_flush: None,
            generation: 0,
            background_failure: None,
            roll_flush_gate: None,
            first_dirty_offset: if listing.may_contain(cleaner::CHECKPOINT_FILE) {
                cleaner::read_checkpoint(dir).unwrap_or(0).min(log_end)
            } else {
                0
            },
        };
        log.load_producer_state(&snapshots, first_recovered)?;
        // The clean-shutdown flag must be cleared on disk before anything changes. Two atomic writes (file and
        // directory fsyncs) per partition were most of a 1,000-partition start-up, so the write is skipped when
        // the file already says what it would (after a crash) or when there is none (a new log, or one that is
        // recovered in full anyway: no checkpoint means "recover everything", the safe default).
        let wanted = Checkpoint {
            log_start_offset: log.log_start_offset,
            recovery_point: log.recovery_point,
            clean_shutdown: false,
        };
        // With an owner's marker, the file's flag is always false (`close_for_marker`), so this writes only
        // after a recovery moved the recovery point, or once for a log last closed with its own flag set.
        if checkpoint.is_some_and(|c| c != wanted) {
            log.write_checkpoint(false)?;
        }
        Ok(log)
    }

    /// Rebuilds producer state: the newest usable snapshot at or below the log end (and at or below
    /// `replay_from_at_most`, when segments were recovered), then the batches after it. Transaction markers
    /// replayed end their transactions; an ABORT missing from its segment's transaction index is added.
    fn load_producer_state(
        &mut self,
        snapshots: &[i64],
        replay_from_at_most: Option<i64>,
    ) -> crate::Result<()> {
        let log_end = self.log_end_offset();
        let mut from = self.log_start_offset;
        self.producers = ProducerStateManager::default();
        for &offset in snapshots.iter().rev() {
            let path = self.dir.join(segment::file_name(offset, "snapshot"));
            if offset > log_end {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if replay_from_at_most.is_some_and(|bound| offset > bound) {
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| ProducerStateManager::from_snapshot_bytes(&b))
            {
                Ok(state) => {
                    self.producers = state;
                    from = offset.max(self.log_start_offset);
                    break;
                }
                Err(reason) => {
                    tracing::warn!(snapshot = %path.display(), %reason, "ignoring an unreadable producer snapshot")
                }
            }
        }
        let producers = &mut self.producers;
        for seg in self
            .segments
            .values_mut()
            .filter(|s| s.next_offset() > from)
        {
            let mut aborted = Vec::new();
            seg.for_each_header(from, |h, marker| {
                if let Some(completed) = producers.replay(h, marker) {
                    if completed.outcome == TxnOutcome::Abort {
                        aborted.push(aborted_entry(producers, &completed));
                    }
                    producers.record_completed(completed);
                }
            })?;
            let mut indexed = seg.txn_index().last_marker_offset().unwrap_or(i64::MIN);
            for entry in aborted {
                if entry.last_offset <= indexed {
                    continue;
                }
                // Segments below the recovery point are trusted, not validated: a damaged one can put a marker
                // before its transaction's first batch or outside the segment. Such an entry cannot be indexed
                // (the index's order and ranges are its invariants); the marker itself stays in the log.
                let in_segment =
                    (seg.base_offset()..seg.next_offset()).contains(&entry.last_offset);
                if entry.first_offset > entry.last_offset || !in_segment {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        producer_id = entry.producer_id,
                        first_offset = entry.first_offset,
                        marker_offset = entry.last_offset,
                        segment = seg.base_offset(),
                        "not indexing an aborted transaction whose offsets are inconsistent (a damaged segment?)"
                    );
                    continue;
                }
                seg.append_aborted_txn(entry)?;
                indexed = entry.last_offset;
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Replaces the settings (topic config change). Takes effect at the next append, roll or retention pass.
    pub fn set_config(&mut self, config: LogConfig) {
        assert!(
            config.segment_bytes > 0 && config.segment_bytes <= LogConfig::SEGMENT_BYTES_MAX,
            "segment.bytes out of range"
        );
        let key_index = config.key_index;
        self.config = config;
        for seg in self.segments.values_mut() {
            if let Err(e) = seg.set_key_index(key_index) {
                tracing::warn!(segment = %seg.log_path().display(), error = %e, "cannot turn the key index off for a segment; its file is left (it is checked before any use)");
            }
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset the next appended record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    /// Offsets below this are on stable storage.
    pub fn flushed_offset(&self) -> i64 {
        self.recovery_point
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producers
    }

    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .values()
            .map(|s| SegmentInfo {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size_bytes: s.size(),
                max_timestamp: s.max_timestamp().map(|(ts, _)| ts),
                path: s.log_path().to_path_buf(),
                indexes_in_memory: s.indexes_in_memory(),
            })
            .collect()
    }

    pub(crate) fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Validates `batches` (one or more v2 batches, as in a Produce request), assigns their offsets in place and
    /// appends them. Nothing is written if any batch is invalid. See [`AppendInfo::duplicate`] for retries.
    pub fn append(
        &mut self,
        batches: &mut [u8],
        opts: &AppendOptions,
    ) -> crate::Result<AppendInfo> {
        self.finish_roll_flush(false)?;
        let validated = batch::validate_batches(batches, self.config.max_message_bytes)?;
        let mut staged = HashMap::new();
        let mut provisional_offset = self.log_end_offset();
        let mut markers: Vec<Option<EndTxnMarker>> = Vec::with_capacity(validated.len());
        for v in &validated {
            if v.header.is_control() {
                if opts.origin == AppendOrigin::Client {
                    return Err(LogError::InvalidRecord {
                        position: v.position,
                        reason: "clients may not write control batches".into(),
                    });
                }
                let marker = transaction_marker(batches, v)?;
                self.producers.check_marker(&v.header, &marker, &staged)?;
                let mut provisional = v.header;
                provisional.base_offset = provisional_offset;
                provisional_offset = provisional.next_offset();
                self.producers
                    .stage(&provisional, Some(&marker), &mut staged);
                markers.push(Some(marker));
                continue;
            }
            markers.push(None);
            if let SequenceCheck::Duplicate(meta) = self.producers.check(&v.header, &staged)? {
                return Ok(AppendInfo {
                    first_offset: meta.first_offset,
                    last_offset: meta.last_offset,
                    max_timestamp: meta.max_timestamp,
                    log_append_time_ms: None,
                    log_start_offset: self.log_start_offset,
                    duplicate: true,
                    records_count: 0,
                });
            }
            // Stage with provisional offsets so later batches of the same producer check against this one.
            let mut provisional = v.header;
            provisional.base_offset = provisional_offset;
            provisional_offset = provisional.next_offset();
            self.producers.stage(&provisional, None, &mut staged);
        }

        let total_records: i64 = validated
            .iter()
            .map(|v| i64::from(v.header.records_count))
            .sum();
        let incoming_max_timestamp = match opts.timestamp_type {
            TimestampType::LogAppendTime => opts.now_ms,
            TimestampType::CreateTime => validated
                .iter()
                .map(|v| v.header.max_timestamp)
                .max()
                .unwrap_or(opts.now_ms),
        };
        let incoming_last = self.log_end_offset() + total_records - 1;
        self.maybe_roll(
            batches.len() as u64,
            incoming_last,
            incoming_max_timestamp,
            self.log_end_offset(),
        )?;

        let first_offset = self.log_end_offset();
        let mut next = first_offset;
        let mut headers = Vec::with_capacity(validated.len());
        let mut max_timestamp = i64::MIN;
        for v in &validated {
            let size = v.header.size();
            let bytes = &mut batches[v.position..v.position + size];
            batch::assign_offset(bytes, next, opts.leader_epoch);
            if opts.timestamp_type == TimestampType::LogAppendTime {
                batch::set_log_append_time(bytes, opts.now_ms);
            }
            let header = BatchHeader::parse(bytes).expect("validated");
            max_timestamp = max_timestamp.max(header.max_timestamp);
            next = header.next_offset();
            headers.push(header);
        }
        self.active_mut().append(batches, &headers)?;

        // Batch by batch, so an abort's index entry sees the transactions open right after its marker.
        for (header, marker) in headers.iter().zip(&markers) {
            let mut staged = HashMap::new();
            let completed = self.producers.stage(header, marker.as_ref(), &mut staged);
            self.producers.commit(staged);
            self.complete_transaction(completed)?;
        }

        self.unflushed_records += total_records as u64;
        self.first_unflushed_ms.get_or_insert(opts.now_ms);
        if self.unflushed_records >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            max_timestamp,
            log_append_time_ms: (opts.timestamp_type == TimestampType::LogAppendTime)
                .then_some(opts.now_ms),
            log_start_offset: self.log_start_offset,
            duplicate: false,
            records_count: total_records as u64,
        })
    }

    /// Appends batches a leader already assigned (replication's follower side): offsets and partition leader
    /// epochs are kept as they are, nothing is re-stamped and no sequence is checked (the leader did; the log
    /// is the truth). The batches must be in offset order from the log end on (a cleaned leader log has gaps,
    /// which are kept), or nothing is written.
    ///
    /// A segment's offsets are 32-bit relative to its base, so batches that do not fit the active segment go
    /// into a new one starting at the first such batch's offset, as Kafka rolls at the append's first offset:
    /// a gap of more than 2^31 offsets (a long-cleaned leader) is taken, not refused.
    pub fn append_as_follower(&mut self, batches: &[u8], now_ms: i64) -> crate::Result<AppendInfo> {
        self.finish_roll_flush(false)?;
        let validated = batch::validate_replicated_batches(batches, self.config.max_message_bytes)?;
        let mut expected = self.log_end_offset();
        for v in &validated {
            if v.header.base_offset < expected || v.header.last_offset_delta < 0 {
                return Err(LogError::InvalidRecord {
                    position: v.position,
                    reason: format!(
                        "a replicated batch starts at offset {}, below the next offset {expected}",
                        v.header.base_offset
                    ),
                });
            }
            // Offsets come from the network: the batch's next offset must be representable.
            let next = v
                .header
                .base_offset
                .checked_add(i64::from(v.header.last_offset_delta))
                .and_then(|last| last.checked_add(1));
            let Some(next) = next else {
                return Err(LogError::InvalidRecord {
                    position: v.position,
                    reason: format!(
                        "a replicated batch at offset {} (last offset delta {}) ends past the largest offset",
                        v.header.base_offset, v.header.last_offset_delta
                    ),
                });
            };
            expected = next;
        }
        let (Some(first), Some(last)) = (validated.first(), validated.last()) else {
            return Err(LogError::InvalidRecord {
                position: 0,
                reason: "no batch to append".into(),
            });
        };
        let first_offset = self.log_end_offset().min(first.header.base_offset);
        let last_offset = last.header.last_offset();
        // Runs of batches that each fit one segment: a batch's own span is at most 2^31 - 1 (its delta is an
        // i32), so every run holds at least one batch and the loop ends.
        let mut start = 0;
        while start < validated.len() {
            let run_base = validated[start].header.base_offset;
            let mut end = start + 1;
            while end < validated.len()
                && validated[end].header.last_offset() - run_base <= i64::from(i32::MAX)
            {
                end += 1;
            }
            self.append_replicated_run(batches, &validated[start..end], now_ms)?;
            start = end;
        }
        let total_records: i64 = validated
            .iter()
            .map(|v| i64::from(v.header.records_count))
            .sum();
        let max_timestamp = validated
            .iter()
            .map(|v| v.header.max_timestamp)
            .max()
            .unwrap_or(now_ms);
        Ok(AppendInfo {
            first_offset,
            last_offset,
            max_timestamp,
            log_append_time_ms: None,
            log_start_offset: self.log_start_offset,
            duplicate: false,
            records_count: total_records as u64,
        })
    }

    /// Appends `run`, validated batches of the request `batches` that follow each other and fit one segment,
    /// rolling first if the active segment cannot take them.
    fn append_replicated_run(
        &mut self,
        batches: &[u8],
        run: &[batch::ValidatedBatch],
        now_ms: i64,
    ) -> crate::Result<()> {
        let from = run[0].position;
        let to = run[run.len() - 1].position + run[run.len() - 1].header.size();
        let bytes = &batches[from..to];
        let run_base = run[0].header.base_offset;
        let run_last = run[run.len() - 1].header.last_offset();
        debug_assert!(
            run_last - run_base <= i64::from(i32::MAX),
            "a run fits one segment"
        );
        let total_records: i64 = run.iter().map(|v| i64::from(v.header.records_count)).sum();
        let max_timestamp = run
            .iter()
            .map(|v| v.header.max_timestamp)
            .max()
            .unwrap_or(now_ms);
        // Kafka's roll offset: the run's first offset (past the log end when the leader's log has a gap there).
        self.maybe_roll(bytes.len() as u64, run_last, max_timestamp, run_base)?;
        assert!(
            self.active().can_hold_offset(run_last),
            "the active segment holds the run"
        );
        let headers: Vec<BatchHeader> = run.iter().map(|v| v.header).collect();
        // The leader validated its markers; one that does not read as a marker here changes no state.
        let markers: Vec<Option<EndTxnMarker>> = run
            .iter()
            .map(|v| {
                v.header
                    .is_control()
                    .then(|| transaction_marker(batches, v).ok())
                    .flatten()
            })
            .collect();
        self.active_mut().append(bytes, &headers)?;
        for (h, marker) in headers.iter().zip(&markers) {
            let completed = self.producers.replay(h, marker.as_ref());
            self.complete_transaction(completed)?;
        }
        self.unflushed_records += total_records as u64;
        self.first_unflushed_ms.get_or_insert(now_ms);
        if self.unflushed_records >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    /// Records a transaction that a marker just appended to the active segment ended: it is remembered until the
    /// high watermark passes its marker, and an ABORT gets its transaction index entry.
    fn complete_transaction(&mut self, completed: Option<CompletedTxn>) -> crate::Result<()> {
        let Some(txn) = completed else {
            return Ok(());
        };
        self.producers.record_completed(txn);
        if txn.outcome == TxnOutcome::Abort {
            let entry = aborted_entry(&self.producers, &txn);
            self.active_mut().append_aborted_txn(entry)?;
        }
        Ok(())
    }

    /// The first unstable offset (the start of the oldest transaction not yet ended, or ended by a marker at or
    /// past `high_watermark`), if any. The last stable offset is [`Log::last_stable_offset`].
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        self.producers.first_unstable_offset(high_watermark)
    }

    /// The last stable offset: read_committed consumers read below it, `min(high watermark, first unstable)`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset(high_watermark)
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// Tells the log its partition's high watermark: ended transactions whose markers are below it no longer
    /// hold the last stable offset back.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        self.producers.on_high_watermark(high_watermark);
    }

    /// The aborted transactions overlapping `[from_offset, upper_offset)`, oldest marker first, as
    /// `(producer id, first offset)` for a read_committed fetch's `aborted_transactions`. Reads only the
    /// in-memory transaction indexes of the segments from the one holding `from_offset` on, and stops at the
    /// first entry whose last stable offset passes `upper_offset` (no later entry can overlap).
    pub fn aborted_transactions(&self, from_offset: i64, upper_offset: i64) -> Vec<(i64, i64)> {
        let first = self
            .segments
            .range(..=from_offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let mut found = Vec::new();
        for seg in self.segments.range(first..).map(|(_, s)| s) {
            if seg
                .txn_index()
                .collect(from_offset, upper_offset, &mut found)
            {
                break;
            }
        }
        found
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// Every aborted transaction indexed in the log, oldest first (inspection tools and tests).
    pub fn aborted_transaction_entries(&self) -> Vec<AbortedTxn> {
        self.segments
            .values()
            .flat_map(|s| s.txn_index().entries().iter().copied())
            .collect()
    }

    /// Rolls to a new segment at `roll_base` (the log end, or a follower's first offset past a gap) when the
    /// active one cannot take `incoming_bytes` more, spans more than `segment.ms`, has full indexes, or could
    /// not express `incoming_last_offset` relative to its base. An empty active segment is kept unless the
    /// offsets do not fit it.
    ///
    /// As in Kafka, time-based rolling compares the incoming batches' timestamp with the segment's first
    /// batch's, not with the wall clock, so a producer replaying old data does not roll a segment per append.
    fn maybe_roll(
        &mut self,
        incoming_bytes: u64,
        incoming_last_offset: i64,
        incoming_max_timestamp: i64,
        roll_base: i64,
    ) -> crate::Result<()> {
        let active = self.active();
        let offsets_overflow = !active.can_hold_offset(incoming_last_offset);
        if active.is_empty() && !offsets_overflow {
            return Ok(());
        }
        let too_big = active.size() + incoming_bytes > self.config.segment_bytes;
        let key_index_full = active.key_index_full();
        let segment_ms_max = self.segment_ms_max();
        let too_old = active
            .first_batch_timestamp()
            .is_some_and(|ts| incoming_max_timestamp.saturating_sub(ts) > segment_ms_max);
        if too_big || too_old || active.indexes_full() || offsets_overflow || key_index_full {
            self.roll_at(roll_base)?;
        }
        Ok(())
    }

    /// The age at which the active segment rolls: `segment.ms`, or on a compacted log `max.compaction.lag.ms` when
    /// that is smaller (Kafka's `LogConfig.maxSegmentMs`). The cleaner never touches the active segment, so
    /// without this a quiet compacted partition would keep its dirty records for up to `segment.ms` (7 days by
    /// default), past the maximum lag the topic promises.
    fn segment_ms_max(&self) -> i64 {
        if self.config.compact && self.config.max_compaction_lag_ms > 0 {
            self.config
                .segment_ms
                .min(self.config.max_compaction_lag_ms)
        } else {
            self.config.segment_ms
        }
    }

    /// Starts a new active segment at the log end offset. The old one is fsynced in the background (as Kafka
    /// schedules a flush at roll): once that is done the recovery point advances past it, so a crash only
    /// rescans the new segment. A previous roll's fsync still running is waited for first (at most one runs).
    pub fn roll(&mut self) -> crate::Result<()> {
        self.roll_at(self.log_end_offset())
    }

    /// [`Log::roll`] to a new active segment at `base`, at or past the log end: a follower taking a leader's
    /// gap wider than a segment's 32-bit relative offsets starts the segment at the batch after the gap (an
    /// empty active segment before it stays, empty, as Kafka leaves it).
    fn roll_at(&mut self, base: i64) -> crate::Result<()> {
        assert!(
            base >= self.log_end_offset(),
            "a roll never starts a segment inside the log"
        );
        if self.active().base_offset() == base {
            return Ok(()); // already empty
        }
        // The small fsyncs here (checkpoint, producer snapshot) go before the old segment's fsync starts: while
        // a large fdatasync runs, ext4's journal commit makes any other fsync wait for it (measured: a
        // checkpoint write took 250-320 ms during a 1 GiB segment's fsync).
        if self.finish_roll_flush(true)? {
            self.write_checkpoint(false)?; // the recovery point the previous roll's fsync earned
        }
        let old = self.active_mut();
        old.on_inactive()?;
        let files = old.durable_files()?;
        self.write_producer_snapshot(base)?;
        let segment = Segment::create(&self.dir, base, &self.config)?;
        self.segments.insert(base, segment);
        self.roll_flush = Some(RollFlush::start(
            files,
            base,
            self.generation,
            self.roll_flush_gate.clone(),
        ));
        Ok(())
    }

    /// Takes the outcome of the roll fsync in flight if it is over (or, with `wait`, once it is): on success the
    /// recovery point advances to the rolled segment's end, unless a truncation happened since it started.
    /// Returns whether the recovery point moved. Also fails if an earlier fsync of this log failed (`Log::fsync_failed`).
    fn finish_roll_flush(&mut self, wait: bool) -> crate::Result<bool> {
        if let Some((path, kind, message)) = &self.background_failure {
            return Err(background_failure_error(path, *kind, message));
        }
        if !self
            .roll_flush
            .as_ref()
            .is_some_and(|f| wait || f.is_finished())
        {
            return Ok(false);
        }
        let flush = self.roll_flush.take().expect("checked above");
        let (upto, generation) = (flush.upto, flush.generation);
        match flush.wait() {
            Ok(()) if generation == self.generation => {
                let before = self.recovery_point;
                self.recovery_point = before.max(upto.min(self.log_end_offset()));
                Ok(self.recovery_point > before)
            }
            Ok(()) => Ok(false),
            Err(FlushFailure { path, error }) => Err(self.fsync_failed(&path, &error)),
        }
    }

    /// Waits for a roll fsync in flight before segments are deleted: its thread holds the files open, so their
    /// space would come back only when it ends (a nearly full disk must get it back at once). Its outcome is
    /// recorded as usual; a failure surfaces at the next append or flush.
    fn settle_roll_flush(&mut self) {
        let _ = self.finish_roll_flush(true);
    }

    /// Makes roll fsyncs wait until the returned gate is opened (tests observe appends during a pending one).
    #[cfg(test)]
    pub(crate) fn hold_roll_flushes(&mut self) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        self.roll_flush_gate = Some(Arc::clone(&gate));
        gate
    }

    fn write_producer_snapshot(&self, offset: i64) -> crate::Result<()> {
        let path = self.dir.join(segment::file_name(offset, "snapshot"));
        let tmp = path.with_extension("snapshot.tmp");
        std::fs::write(&tmp, self.producers.snapshot_bytes())
            .map_err(|e| LogError::io("write producer snapshot", &tmp, e))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| LogError::io("fsync producer snapshot", &tmp, e))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| LogError::io("rename producer snapshot", &path, e))?;
        // Keep only the newest few.
        let (_, snapshots) = scan_directory(&self.dir)?;
        if snapshots.len() > SNAPSHOTS_KEPT_MAX {
            for old in &snapshots[..snapshots.len() - SNAPSHOTS_KEPT_MAX] {
                let _ = std::fs::remove_file(self.dir.join(segment::file_name(*old, "snapshot")));
            }
        }
        Ok(())
    }

    /// Reads whole batches starting with the one that contains `offset`: at most `max_bytes` unless the first
    /// batch alone is larger (it is returned whole), and nothing at or past `upper_bound` (for example the high
    /// watermark). A read at the log end returns no slice.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
    ) -> crate::Result<LogRead> {
        let log_end = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end,
            });
        }
        let upper = upper_bound.unwrap_or(log_end).min(log_end);
        let mut slice = None;
        let mut slice_end_offset = None;
        if offset < upper {
            let first = self
                .segments
                .range(..=offset)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b);
            for seg in self.segments.range(first..).map(|(_, s)| s) {
                if let Some((found, ends_at)) = seg.read(offset, max_bytes, upper)? {
                    slice = Some(found);
                    slice_end_offset = Some(ends_at);
                    break;
                }
            }
        }
        Ok(LogRead {
            slice,
            slice_end_offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: log_end,
        })
    }

    /// The first offset at or after the log start whose record timestamp is >= `timestamp`, and that timestamp
    /// (ListOffsets by time). Exact to the record in every codec, as Kafka is.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> crate::Result<Option<(i64, i64)>> {
        for seg in self
            .segments
            .values()
            .filter(|s| s.next_offset() > self.log_start_offset)
        {
            if let Some(found) = seg.find_offset_by_timestamp(
                timestamp,
                self.log_start_offset,
                self.config.decompressed_batch_limit(),
            )? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The largest timestamp in the log and the last offset of the batch that carries it.
    ///
    /// The offset is the first record carrying that timestamp, in every codec (as Kafka answers ListOffsets
    /// MAX_TIMESTAMP); the batch's last offset only if its records cannot be read.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let (segment, ts, batch_last_offset) = self
            .segments
            .values()
            .filter(|s| s.next_offset() > self.log_start_offset)
            .filter_map(|s| s.max_timestamp().map(|(ts, off)| (s, ts, off)))
            .fold(
                None,
                |best: Option<(&Segment, i64, i64)>, (s, ts, off)| match best {
                    Some((_, b, _)) if b >= ts => best,
                    _ => Some((s, ts, off)),
                },
            )?;
        let exact = segment
            .first_offset_with_timestamp(
                batch_last_offset,
                ts,
                self.config.decompressed_batch_limit(),
            )
            .unwrap_or(None);
        Some((
            ts,
            exact
                .unwrap_or(batch_last_offset)
                .max(self.log_start_offset),
        ))
    }

    /// Removes every batch from the one containing `offset` on (replication's truncation). The log end becomes
    /// that batch's base offset.
    pub fn truncate_to(&mut self, offset: i64) -> crate::Result<()> {
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        // Before any file changes: a roll fsync in flight must not vouch for what comes after.
        self.generation += 1;
        let first_base = *self.segments.keys().next().expect("non-empty");
        if offset <= first_base {
            return self.truncate_fully_and_start_at(offset.max(0));
        }
        let later: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        for base in later {
            self.segments.remove(&base).expect("listed").delete()?;
        }
        let (&base, seg) = self
            .segments
            .range_mut(..=offset)
            .next_back()
            .expect("offset > first base");
        seg.truncate_to(offset)?;
        if seg.is_empty() && base != first_base {
            // An empty non-first segment stays as the active segment; its base is the new log end.
            debug_assert_eq!(seg.next_offset(), base);
        }
        let log_end = self.log_end_offset();
        self.log_start_offset = self.log_start_offset.min(log_end);
        self.recovery_point = self.recovery_point.min(log_end);
        self.truncate_cleaner_checkpoint(log_end)?;
        self.rebuild_producer_state_after_truncation()?;
        self.write_checkpoint(false)
    }

    /// Removes every batch and starts the log, empty, at `offset` (a follower whose log ends before the
    /// leader's log start).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> crate::Result<()> {
        self.generation += 1;
        let all: Vec<i64> = self.segments.keys().copied().collect();
        for base in all {
            self.segments.remove(&base).expect("listed").delete()?;
        }
        self.segments
            .insert(offset, Segment::create(&self.dir, offset, &self.config)?);
        self.log_start_offset = offset;
        self.recovery_point = offset;
        self.truncate_cleaner_checkpoint(offset)?;
        self.rebuild_producer_state_after_truncation()?;
        self.write_checkpoint(false)
    }

    fn rebuild_producer_state_after_truncation(&mut self) -> crate::Result<()> {
        let (_, snapshots) = scan_directory(&self.dir)?;
        self.load_producer_state(&snapshots, None)
    }

    /// After a truncation the offsets past the log end are new data: they are dirty again.
    fn truncate_cleaner_checkpoint(&mut self, log_end: i64) -> crate::Result<()> {
        if self.first_dirty_offset > log_end {
            self.first_dirty_offset = log_end;
            cleaner::write_checkpoint(&self.dir, log_end)?;
        }
        Ok(())
    }

    /// How dirty a compacted log is, or `None` if it is not compacted (`LogConfig::compact`). Offsets at or
    /// past the last stable offset (below `upper_bound`, the high watermark; `None`: the log end) are never
    /// cleaned, so every transaction a pass sees has ended; nor is the active segment, nor a segment whose newest
    /// record is younger than `min.compaction.lag.ms` (Kafka's `cleanableOffsets`).
    pub fn cleanable(&self, now_ms: i64, upper_bound: Option<i64>) -> Option<Cleanable> {
        if !self.config.compact {
            return None;
        }
        let active_base = self.active().base_offset();
        let high_watermark = upper_bound.unwrap_or_else(|| self.log_end_offset());
        let upper = self.last_stable_offset(high_watermark);
        let lag = self.config.min_compaction_lag_ms;
        let mut first_uncleanable = active_base;
        for seg in self.segments.values() {
            let too_new = lag > 0
                && seg
                    .max_timestamp()
                    .is_some_and(|(ts, _)| ts > now_ms.saturating_sub(lag));
            if seg.base_offset() == active_base || seg.next_offset() > upper || too_new {
                first_uncleanable = seg.base_offset();
                break;
            }
        }
        let first_dirty = self.first_dirty_offset.max(self.log_start_offset);
        let (mut dirty_bytes, mut clean_bytes) = (0u64, 0u64);
        let mut oldest_dirty: Option<i64> = None;
        for seg in self
            .segments
            .values()
            .filter(|s| s.base_offset() < first_uncleanable)
        {
            if seg.next_offset() > first_dirty {
                dirty_bytes += seg.size();
                if oldest_dirty.is_none() {
                    oldest_dirty = seg.first_batch_timestamp();
                }
            } else {
                clean_bytes += seg.size();
            }
        }
        let total = dirty_bytes + clean_bytes;
        let max_lag = self.config.max_compaction_lag_ms;
        Some(Cleanable {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            dirty_bytes,
            clean_bytes,
            dirty_ratio: if total == 0 {
                0.0
            } else {
                dirty_bytes as f64 / total as f64
            },
            overdue: max_lag < i64::MAX
                && oldest_dirty.is_some_and(|ts| now_ms.saturating_sub(ts) > max_lag),
        })
    }

    /// Step 1 of a cleaning pass (see `cleaner.rs`): if the log should be cleaned now, a snapshot of the
    /// segments to clean. Cheap; call it under the lock that guards the log, then run the task with
    /// [`crate::Cleaner::run`] without the lock, then hand the result to [`Log::finish_clean`]. At most one pass
    /// per log at a time (a pass owns the log's `.cleaner/` scratch directory); the caller ensures it.
    pub fn begin_clean(&self, now_ms: i64, upper_bound: Option<i64>) -> Option<CleanTask> {
        let cleanable = self.cleanable(now_ms, upper_bound)?;
        if !cleanable.should_clean(&self.config) {
            return None;
        }
        let segments = self
            .segments
            .values()
            .filter(|s| s.base_offset() < cleanable.first_uncleanable_offset)
            .map(|s| {
                Ok(SegmentSnapshot {
                    base_offset: s.base_offset(),
                    next_offset: s.next_offset(),
                    size: s.size(),
                    file: s.file_handle()?,
                })
            })
            .collect::<crate::Result<Vec<_>>>();
        let segments = match segments {
            Ok(segments) => segments,
            Err(e) => {
                // Out of descriptors, most likely: the next pass tries again.
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot open the segments to clean; skipping this pass");
                return None;
            }
        };
        // An aborted transaction's marker (and so its index entry) may be in a later segment than its data,
        // even in the active one: every segment's entries are looked at (they are in memory).
        let mut aborted: Vec<AbortedTxn> = self
            .segments
            .values()
            .flat_map(|s| s.txn_index().entries().iter().copied())
            .filter(|e| e.first_offset < cleanable.first_uncleanable_offset)
            .collect();
        aborted.sort_by_key(|e| e.first_offset);
        let producers = self
            .producers
            .producers()
            .map(|e| {
                let last = cleaner::LastRecord {
                    last_data_offset: e.batches.back().map(|b| b.last_offset),
                    epoch: e.epoch,
                };
                (e.producer_id, last)
            })
            .collect();
        Some(CleanTask {
            dir: self.dir.clone(),
            config: self.config.clone(),
            now_ms,
            generation: self.generation,
            first_dirty: cleanable.first_dirty_offset,
            first_uncleanable: cleanable.first_uncleanable_offset,
            segments,
            aborted,
            producers,
        })
    }

    /// Step 3 of a cleaning pass: swaps the cleaned segments in (a few renames; see `cleaner::swap`), unless
    /// the log changed under the pass (then nothing changes and [`CleanOutcome::Abandoned`] says so).
    pub fn finish_clean(&mut self, cleaned: CleanedLog) -> crate::Result<CleanOutcome> {
        let active_base = self.active().base_offset();
        let unchanged = cleaned.generation == self.generation
            && cleaned
                .groups
                .iter()
                .flat_map(|g| &g.old)
                .all(|(base, size)| {
                    *base != active_base
                        && self.segments.get(base).is_some_and(|s| s.size() == *size)
                });
        if !unchanged {
            cleaner::remove_scratch(&self.dir.join(cleaner::SCRATCH_DIR))?;
            return Ok(CleanOutcome::Abandoned);
        }
        self.settle_roll_flush();
        let manifest = cleaner::swap::Manifest {
            old: cleaned
                .groups
                .iter()
                .flat_map(|g| g.old.iter().map(|(b, _)| *b))
                .collect(),
            new: cleaned.groups.iter().filter_map(|g| g.new).collect(),
        };
        cleaner::swap::write(&self.dir, &manifest)?;
        // The swap is decided: from here a failure leaves the in-memory log behind the files, so appends stop
        // until the log is reopened (which finishes the swap).
        let result = (|| {
            for base in &manifest.old {
                // Dropped, not deleted: the files go (or are replaced) in `complete`.
                self.segments.remove(base);
            }
            cleaner::swap::complete(&self.dir)?;
            for &base in &manifest.new {
                let (segment, _) = Segment::open(&self.dir, base, &self.config, false)?;
                self.segments.insert(base, segment);
            }
            Ok::<_, LogError>(())
        })();
        if let Err(e) = result {
            self.background_failure = Some((
                self.dir.clone(),
                std::io::ErrorKind::Other,
                format!(
                    "swapping cleaned segments in failed ({e}); reopen the log to finish the swap"
                ),
            ));
            return Err(e);
        }
        self.first_dirty_offset = cleaned.cleaned_up_to;
        cleaner::write_checkpoint(&self.dir, cleaned.cleaned_up_to)?;
        Ok(CleanOutcome::Swapped(cleaned.stats))
    }

    /// A whole cleaning pass under `&mut self` (for embedders without concurrency, and tests): begin, run,
    /// finish. `None` if the log did not need cleaning.
    pub fn clean(
        &mut self,
        cleaner: &crate::Cleaner,
        now_ms: i64,
        upper_bound: Option<i64>,
    ) -> crate::Result<Option<CleanOutcome>> {
        let Some(task) = self.begin_clean(now_ms, upper_bound) else {
            return Ok(None);
        };
        let cleaned = cleaner.run(task)?;
        self.finish_clean(cleaned).map(Some)
    }

    /// Advances the log start offset to `offset` (DeleteRecords) and deletes segments wholly below it.
    pub fn delete_records_before(&mut self, offset: i64) -> crate::Result<i64> {
        let log_end = self.log_end_offset();
        if offset > log_end || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end,
            });
        }
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        self.log_start_offset = offset;
        self.delete_segments_below_log_start()?;
        self.write_checkpoint(false)?;
        Ok(self.log_start_offset)
    }

    fn delete_segments_below_log_start(&mut self) -> crate::Result<u32> {
        let active_base = self.active().base_offset();
        let doomed: Vec<i64> = self
            .segments
            .values()
            .filter(|s| s.base_offset() != active_base && s.next_offset() <= self.log_start_offset)
            .map(Segment::base_offset)
            .collect();
        if !doomed.is_empty() {
            self.settle_roll_flush();
        }
        for base in &doomed {
            self.segments.remove(base).expect("listed").delete()?;
        }
        Ok(doomed.len() as u32)
    }

    /// Applies `retention.ms` and `retention.bytes`: deletes whole oldest segments and advances the log start
    /// offset. If every segment, the active one included, has expired by time, the log rolls first so that the
    /// expired data can go (as Kafka does); the new active segment is empty. Also forgets idle producers.
    pub fn apply_retention(&mut self, now_ms: i64) -> crate::Result<u32> {
        self.apply_retention_guarded(now_ms, None)
            .map(|outcome| outcome.deleted_segments)
    }

    /// [`Log::apply_retention`] with the retention guard (the broker's `retention.guard.groups`): segments that
    /// retention would delete but that hold offsets at or above `guard.keep_from` stay, as long as their bytes
    /// together are within `guard.max_bytes`; past it, the oldest of them go until the rest fit (so the guard
    /// holds at most `max_bytes` beyond what retention keeps).
    pub fn apply_retention_guarded(
        &mut self,
        now_ms: i64,
        guard: Option<RetentionGuard>,
    ) -> crate::Result<RetentionOutcome> {
        let mut expired_count = 0usize;
        if self.config.retention_ms >= 0 {
            for seg in self.segments.values() {
                match seg.max_timestamp() {
                    Some((ts, _)) if now_ms.saturating_sub(ts) > self.config.retention_ms => {
                        expired_count += 1
                    }
                    _ => break,
                }
            }
        }
        if expired_count == self.segments.len() && !self.active().is_empty() {
            self.roll()?;
        }
        let mut doomed: Vec<i64> = self.segments.keys().take(expired_count).copied().collect();
        if self.config.retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - self.config.retention_bytes;
            for seg in self.segments.values() {
                if excess < seg.size() as i64 || seg.base_offset() == self.active().base_offset() {
                    break;
                }
                excess -= seg.size() as i64;
                if !doomed.contains(&seg.base_offset()) {
                    doomed.push(seg.base_offset());
                }
            }
        }
        let held_bytes = match guard {
            Some(guard) => self.hold_for_guard(&mut doomed, guard),
            None => 0,
        };
        // Segments wholly below the log start (left by truncation or DeleteRecords) go too, as Kafka's
        // log-start-offset breach retention does.
        for seg in self.segments.values() {
            if seg.next_offset() <= self.log_start_offset && !doomed.contains(&seg.base_offset()) {
                doomed.push(seg.base_offset());
            }
        }
        let active_base = self.active().base_offset();
        doomed.retain(|b| *b != active_base);
        if !doomed.is_empty() {
            self.settle_roll_flush();
        }
        for base in &doomed {
            let seg = self.segments.remove(base).expect("listed");
            tracing::info!(dir = %self.dir.display(), base_offset = base, bytes = seg.size(), "retention deleted a segment");
            seg.delete()?;
        }
        let first_base = *self.segments.keys().next().expect("non-empty");
        if first_base > self.log_start_offset {
            self.log_start_offset = first_base;
        }
        self.producers
            .remove_expired(now_ms, self.config.producer_id_expiration_ms);
        if !doomed.is_empty() {
            self.write_checkpoint(false)?;
        }
        Ok(RetentionOutcome {
            deleted_segments: doomed.len() as u32,
            held_bytes,
        })
    }

    /// Takes out of `doomed` (the oldest segments, in offset order, that retention.ms / retention.bytes would
    /// delete) those the guard keeps; returns their bytes.
    fn hold_for_guard(&self, doomed: &mut Vec<i64>, guard: RetentionGuard) -> u64 {
        // Below the log start nothing can be consumed any more: there is nothing to guard.
        let keep_from = guard.keep_from.max(self.log_start_offset);
        let mut guarded: Vec<(i64, u64)> = doomed
            .iter()
            .filter_map(|base| self.segments.get(base))
            .filter(|s| s.next_offset() > keep_from)
            .map(|s| (s.base_offset(), s.size()))
            .collect();
        guarded.sort_unstable();
        let mut held: u64 = guarded.iter().map(|(_, size)| size).sum();
        let mut released = 0;
        if let Some(max) = guard.max_bytes {
            // Oldest first, as retention itself deletes.
            while held > max && released < guarded.len() {
                held -= guarded[released].1;
                released += 1;
            }
        }
        let kept: Vec<i64> = guarded[released..].iter().map(|(b, _)| *b).collect();
        doomed.retain(|b| !kept.contains(b));
        held
    }

    /// fsyncs everything appended so far (waiting for a roll's background fsync, if one is running).
    pub fn flush(&mut self) -> crate::Result<()> {
        self.finish_roll_flush(true)?;
        let target = self.log_end_offset();
        let recovery_point = self.recovery_point;
        let failed = self
            .segments
            .values_mut()
            .filter(|s| s.next_offset() > recovery_point)
            .find_map(|seg| seg.sync().err());
        if let Some(e) = failed {
            return Err(self.sync_error(e));
        }
        self.mark_flushed(target);
        Ok(())
    }

    /// An fsync of `path` (one of this log's files) failed. After a failed fsync Linux may have dropped the dirty
    /// pages and will report success to the next fsync, so nothing appended since the last good one can be called
    /// durable again: from now on every append and flush of this log fails (the recovery point never advances
    /// past the lost pages), and the directory's owner hears of it ([`crate::dir_failures`]) so it can stop and
    /// let recovery, at the next open, find out what the disk really holds. Returns the error to give the caller.
    pub fn fsync_failed(&mut self, path: &Path, error: &std::io::Error) -> LogError {
        if self.background_failure.is_none() {
            tracing::error!(path = %path.display(), %error, "fsync failed; appends and flushes of this log fail until it is reopened");
            self.background_failure = Some((path.to_path_buf(), error.kind(), error.to_string()));
            crate::dir_failures::report(path, error);
        }
        let (path, kind, message) = self.background_failure.as_ref().expect("recorded above");
        background_failure_error(path, *kind, message)
    }

    /// [`Log::fsync_failed`] for an engine error from a segment's or index's fsync; other errors pass through.
    fn sync_error(&mut self, e: LogError) -> LogError {
        match e {
            LogError::Io { path, source, .. } => self.fsync_failed(&path, &source),
            other => other,
        }
    }

    /// fsyncs if the oldest unflushed append is older than `flush.ms`.
    /// Also records a finished roll fsync in the checkpoint, so the broker's periodic call keeps the persisted
    /// recovery point close to the in-memory one.
    pub fn flush_if_due(&mut self, now_ms: i64) -> crate::Result<bool> {
        if self.finish_roll_flush(false)? {
            self.write_checkpoint(false)?;
        }
        match self.first_unflushed_ms {
            Some(first) if now_ms.saturating_sub(first) >= self.config.flush_ms => {
                self.flush().map(|()| true)
            }
            _ => Ok(false),
        }
    }

    /// What a group commit must fsync to make everything appended so far durable. Take it under the caller's
    /// lock, run [`SyncHandle::sync`] without it (many appends then share one fsync), then call
    /// [`Log::mark_flushed`] with [`SyncHandle::upto`].
    pub fn sync_handle(&self) -> SyncHandle {
        let files = self
            .segments
            .values()
            .filter(|s| s.next_offset() > self.recovery_point)
            .map(|s| Ok((s.file_handle()?, s.log_path().to_path_buf())))
            .collect::<crate::Result<Vec<_>>>();
        let (files, failed) = match files {
            Ok(files) => (files, None),
            // Reported by `sync`, where the caller expects an fsync's failure.
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        SyncHandle {
            files,
            failed,
            upto: self.log_end_offset(),
        }
    }

    /// Records that everything below `offset` is on stable storage.
    pub fn mark_flushed(&mut self, offset: i64) {
        if offset > self.recovery_point {
            self.recovery_point = offset.min(self.log_end_offset());
        }
        if self.recovery_point >= self.log_end_offset() {
            self.unflushed_records = 0;
            self.first_unflushed_ms = None;
        }
    }

    /// Flushes, snapshots producer state and marks a clean shutdown, so the next open skips recovery.
    pub fn close(self) -> crate::Result<()> {
        self.close_inner(true)
    }

    /// [`Log::close`] for a log opened with [`Log::open_with_marker`]: everything is flushed and checkpointed
    /// the same way, but the log's own flag stays false; the owner writes its marker once every log is closed.
    /// (So a binary that reads only the per-log flag recovers such a log rather than trusting it.)
    pub fn close_for_marker(self) -> crate::Result<()> {
        self.close_inner(false)
    }

    fn close_inner(mut self, clean_flag: bool) -> crate::Result<()> {
        self.flush()?;
        // Group commits (`mark_flushed`) advance the recovery point without touching the indexes: write and
        // sync the active segment's buffered index entries before the checkpoint calls the shutdown clean.
        if let Err(e) = self.active_mut().sync() {
            return Err(self.sync_error(e));
        }
        let log_end = self.log_end_offset();
        self.write_producer_snapshot(log_end)?;
        self.write_checkpoint(clean_flag)
    }

    /// Deletes the whole log directory.
    pub fn delete(self) -> crate::Result<()> {
        std::fs::remove_dir_all(&self.dir)
            .map_err(|e| LogError::io("delete log directory", &self.dir, e))
    }

    fn write_checkpoint(&self, clean_shutdown: bool) -> crate::Result<()> {
        Checkpoint {
            log_start_offset: self.log_start_offset,
            recovery_point: self.recovery_point,
            clean_shutdown,
        }
        .write(&self.dir)
    }
}

/// The transaction index entry of an aborted transaction, its LSO taken from `producers` as they stand right
/// after the marker.
fn aborted_entry(producers: &ProducerStateManager, txn: &CompletedTxn) -> AbortedTxn {
    AbortedTxn {
        producer_id: txn.producer_id,
        first_offset: txn.first_offset,
        last_offset: txn.last_offset,
        last_stable_offset: producers.last_stable_offset_after(txn),
    }
}

/// The transaction marker of the validated control batch `v` in `batches`: a control batch from the coordinator
/// must be one (Kafka refuses other control types outside the metadata log).
fn transaction_marker(batches: &[u8], v: &batch::ValidatedBatch) -> crate::Result<EndTxnMarker> {
    let bytes = &batches[v.position..v.position + v.header.size()];
    if v.header.producer_id < 0 {
        return Err(LogError::InvalidRecord {
            position: v.position,
            reason: "a transaction marker without a producer id".into(),
        });
    }
    match control::parse_marker(bytes) {
        Ok(Some(marker)) => Ok(marker),
        Ok(None) => Err(LogError::InvalidRecord {
            position: v.position,
            reason: "a control batch of a type other than COMMIT or ABORT".into(),
        }),
        Err(reason) => Err(LogError::InvalidRecord {
            position: v.position,
            reason: format!("a control batch that is not a transaction marker: {reason}"),
        }),
    }
}

/// Files to fsync for a group commit; see [`Log::sync_handle`].
#[derive(Debug, Clone)]
pub struct SyncHandle {
    files: Vec<(Arc<File>, PathBuf)>,
    /// A file could not be (re)opened when the handle was taken: `sync` fails with this.
    failed: Option<String>,
    upto: i64,
}

impl SyncHandle {
    /// Everything below this offset is durable once [`SyncHandle::sync`] returns.
    pub fn upto(&self) -> i64 {
        self.upto
    }

    /// fsyncs the files. A failed fsync's error names its file; the caller must tell the log
    /// ([`Log::fsync_failed`]), which then stops trusting itself.
    pub fn sync(&self) -> std::io::Result<()> {
        if let Some(reason) = &self.failed {
            return Err(std::io::Error::other(reason.clone()));
        }
        for (file, path) in &self.files {
            crate::fsync_stats::timed(|| crate::disk_faults::sync_data(file, path))
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            crate::page_cache::mark_durable(file);
        }
        Ok(())
    }
}

/// Lists the base offsets of segments and snapshots in `dir`, removing leftovers of interrupted operations
/// (temporary files, index files whose log is gone).
fn scan_directory(dir: &Path) -> crate::Result<(Vec<i64>, Vec<i64>)> {
    Ok(scan_listing(dir, &DirListing::read_or_create(dir)?))
}

/// [`scan_directory`] over a listing already made.
fn scan_listing(dir: &Path, listing: &DirListing) -> (Vec<i64>, Vec<i64>) {
    debug_assert!(
        listing.is_known(),
        "scan_listing needs the directory's names"
    );
    let mut logs = Vec::new();
    let mut snapshots = Vec::new();
    let mut indexes = Vec::new();
    for name in listing.names() {
        if name.ends_with(".tmp")
            || name.ends_with(".deleted")
            || name.ends_with(".swap")
            || name.ends_with(".cleaned")
        {
            let _ = std::fs::remove_file(dir.join(name));
            continue;
        }
        let Some((stem, suffix)) = name.split_once('.') else {
            continue;
        };
        if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(base) = stem.parse::<i64>() else {
            continue;
        };
        match suffix {
            "log" => logs.push(base),
            "snapshot" => snapshots.push(base),
            "index" | "timeindex" | "txnindex" | crate::key_index::SUFFIX => {
                indexes.push((base, dir.join(name)))
            }
            _ => {}
        }
    }
    logs.sort_unstable();
    snapshots.sort_unstable();
    for (base, path) in indexes {
        if logs.binary_search(&base).is_err() {
            let _ = std::fs::remove_file(path);
        }
    }
    (logs, snapshots)
}

fn background_failure_error(path: &Path, kind: std::io::ErrorKind, message: &str) -> LogError {
    LogError::io(
        "an earlier fsync (or segment swap) of this log failed, so durability can no longer be promised (fix the disk, then reopen the log so recovery revalidates it); it was of",
        path,
        std::io::Error::new(kind, message.to_string()),
    )
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Segments of 4 KiB hold three of these ~1.1 KiB batches, so the fourth append rolls.
    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        }
    }

    fn append_one(log: &mut Log) -> AppendInfo {
        let mut bytes =
            batch::build_uncompressed_batch(&[(None, Some(&[7u8; 1024][..]))], now_ms());
        log.append(&mut bytes, &AppendOptions::default()).unwrap()
    }

    #[test]
    fn a_follower_append_keeps_the_leaders_offsets_and_epochs() {
        let (leader_dir, follower_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = Log::open(leader_dir.path(), small_segments()).unwrap();
        for epoch in [3, 3, 7] {
            let mut bytes = batch::build_uncompressed_batch(&[(None, Some(&b"x"[..]))], now_ms());
            let opts = AppendOptions {
                leader_epoch: epoch,
                ..Default::default()
            };
            leader.append(&mut bytes, &opts).unwrap();
        }
        let copied = leader
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .unwrap();
        let mut follower = Log::open(follower_dir.path(), small_segments()).unwrap();
        let info = follower.append_as_follower(&copied, now_ms()).unwrap();
        assert_eq!((info.first_offset, info.last_offset), (0, 2));
        let back = follower
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .unwrap();
        assert_eq!(back, copied, "replicated bytes are stored unchanged");
        let third = BatchHeader::parse(&back[back.len() - copied.len() / 3..]).unwrap();
        assert_eq!(third.partition_leader_epoch, 7);
        // A batch that does not continue the log is refused, and nothing is written.
        assert!(follower.append_as_follower(&copied, now_ms()).is_err());
        assert_eq!(follower.log_end_offset(), 3);
        follower.truncate_fully_and_start_at(10).unwrap();
        assert_eq!(
            (follower.log_start_offset(), follower.log_end_offset()),
            (10, 10)
        );
    }

    /// Appends until the log rolls (the last append is the new segment's first batch); returns its base offset.
    fn append_until_roll(log: &mut Log) -> i64 {
        let segments = log.segments().len();
        while log.segments().len() == segments {
            append_one(log);
        }
        log.segments().last().unwrap().base_offset
    }

    fn wait_until_roll_flush_finished(log: &Log) {
        while log.roll_flush.as_ref().is_some_and(|f| !f.is_finished()) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn roll_returns_before_the_old_segment_is_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_segments()).unwrap();
        let gate = log.hold_roll_flushes();
        // With the fsync held back, an inline fsync would block here for ever.
        let rolled_at = append_until_roll(&mut log);
        assert!(
            log.flushed_offset() < rolled_at,
            "nothing fsynced the old segment yet"
        );
        let info = append_one(&mut log);
        // The append that rolled went to the new segment (offset `rolled_at`); this one follows it.
        assert_eq!(
            info.first_offset,
            rolled_at + 1,
            "appends go on while the fsync is pending"
        );
        assert!(log.flushed_offset() < rolled_at);

        gate.open();
        wait_until_roll_flush_finished(&log);
        append_one(&mut log);
        assert_eq!(
            log.flushed_offset(),
            rolled_at,
            "the next append takes the finished fsync's result"
        );
        log.flush().unwrap();
        assert_eq!(log.flushed_offset(), log.log_end_offset());
    }

    #[test]
    fn flush_waits_for_the_roll_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_segments()).unwrap();
        let gate = log.hold_roll_flushes();
        append_until_roll(&mut log);
        let (done_tx, done_rx) = mpsc::channel();
        let flusher = std::thread::spawn(move || {
            log.flush().unwrap();
            done_tx
                .send(log.flushed_offset() == log.log_end_offset())
                .unwrap();
            log
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "flush returned while the roll fsync was held back"
        );
        gate.open();
        assert!(done_rx.recv().unwrap());
        flusher.join().unwrap().close().unwrap();
    }

    #[test]
    fn a_second_roll_waits_for_the_first_roll_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_segments()).unwrap();
        let gate = log.hold_roll_flushes();
        let first = append_until_roll(&mut log);
        let (done_tx, done_rx) = mpsc::channel();
        let appender = std::thread::spawn(move || {
            let second = append_until_roll(&mut log);
            done_tx.send(second).unwrap();
            log
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a second roll started while the first roll's fsync was pending"
        );
        gate.open();
        let second = done_rx.recv().unwrap();
        let log = appender.join().unwrap();
        assert!(log.flushed_offset() >= first && second > first);
    }

    /// Files of this process's open descriptors under `dir` that were deleted.
    fn deleted_but_open(dir: &Path) -> Vec<String> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.display().to_string())
            .filter(|p| p.starts_with(&dir.display().to_string()) && p.ends_with(" (deleted)"))
            .collect()
    }

    #[test]
    fn retention_waits_for_the_roll_fsync_so_deleted_space_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_segments()).unwrap();
        let gate = log.hold_roll_flushes();
        append_until_roll(&mut log);
        log.set_config(LogConfig {
            retention_bytes: 1,
            ..small_segments()
        });
        let opener = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                gate.open();
            })
        };
        assert_eq!(
            log.apply_retention(now_ms()).unwrap(),
            1,
            "the rolled segment goes"
        );
        assert_eq!(
            deleted_but_open(dir.path()),
            Vec::<String>::new(),
            "the roll fsync still held deleted segment files open"
        );
        opener.join().unwrap();
    }

    #[test]
    fn a_truncation_during_the_roll_fsync_keeps_the_recovery_point() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_segments()).unwrap();
        let gate = log.hold_roll_flushes();
        let rolled_at = append_until_roll(&mut log);
        // Cut into the rolled segment: it is active again and its last offsets will be reused.
        log.truncate_to(rolled_at - 1).unwrap();
        let truncated_end = log.log_end_offset();
        assert!(truncated_end < rolled_at);
        append_one(&mut log);
        gate.open();
        wait_until_roll_flush_finished(&log);
        log.flush_if_due(0).unwrap(); // takes the finished fsync's outcome; nothing is due at time 0
        assert!(
            log.flushed_offset() <= truncated_end,
            "an fsync from before the truncation vouched for records appended after it (recovery point {}, truncated to {truncated_end})",
            log.flushed_offset()
        );
        log.flush().unwrap();
        assert_eq!(log.flushed_offset(), log.log_end_offset());
    }
}
