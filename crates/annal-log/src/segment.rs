//! One segment: a `.log` file of record batches with its offset and time indexes.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchHeader, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2};
use crate::config::LogConfig;
use crate::dir_listing::DirListing;
use crate::error::LogError;
use crate::file_handles::CachedFile;
use crate::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use crate::key_index::{self, Building, KeyIndex, SegmentShape};
use crate::slice::FileSlice;
use crate::txn_index::{AbortedTxn, TxnIndex};

/// `<base offset, 20 digits>.<suffix>`, as Kafka names segment files.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// Bytes of header needed to learn a batch's offsets and length when walking a segment.
const HEADER_PREFIX: usize = batch::field::LAST_OFFSET_DELTA + 4;

/// A segment of a partition's log.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    /// The `.log` file, reached through the process's open-file budget (`file_handles.rs`).
    file: CachedFile,
    /// Bytes of whole, valid batches; appends go here.
    size: u64,
    /// The offset after the last batch, or the base offset when empty.
    next_offset: i64,
    /// Largest batch max-timestamp in the segment, and the last offset of the batch that carried it.
    max_timestamp: Option<(i64, i64)>,
    /// Max timestamp of the first batch: `segment.ms` counts from it, as in Kafka.
    first_batch_timestamp: Option<i64>,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Aborted transactions whose ABORT marker is in this segment.
    txn_index: TxnIndex,
    bytes_since_last_index_entry: u64,
    index_interval_bytes: u32,
    /// The key index (`key.index.enable`); derived data, see `key_index.rs`.
    key_index: KeyIndex,
}

/// A control batch larger than this is not read as a transaction marker (a marker is ~80 bytes).
const MARKER_BATCH_BYTES_MAX: usize = 4096;

/// How a segment came back after opening it.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Bytes cut from a torn or corrupt tail.
    pub truncated_bytes: u64,
    /// Why the indexes were rebuilt, if they were.
    pub rebuilt_indexes: Option<String>,
}

impl Segment {
    pub fn create(dir: &Path, base_offset: i64, config: &LogConfig) -> crate::Result<Segment> {
        let handles = &config.file_handles;
        let log_path = dir.join(file_name(base_offset, "log"));
        let file = CachedFile::open(
            handles,
            "create segment",
            &log_path,
            OpenOptions::new().read(true).write(true).create_new(true),
        )?;
        if let Ok(f) = file.get() {
            crate::page_cache::mark_durable(&f);
        }
        let index_path = dir.join(file_name(base_offset, "index"));
        let time_path = dir.join(file_name(base_offset, "timeindex"));
        let indexes = OffsetIndex::create(handles, &index_path, config.segment_index_bytes)
            .and_then(|o| {
                TimeIndex::create(handles, &time_path, config.segment_index_bytes).map(|t| (o, t))
            });
        let (offset_index, time_index) = match indexes {
            Ok(indexes) => indexes,
            Err(e) => {
                // Out of inodes or space: leave nothing behind, or the next roll would find the segment file
                // already there and fail for good.
                for path in [&log_path, &index_path, &time_path] {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e);
            }
        };
        let txn_index = match TxnIndex::create(&TxnIndex::path_in(dir, base_offset), handles) {
            Ok(index) => index,
            Err(e) => {
                for path in [&log_path, &index_path, &time_path] {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e);
            }
        };
        let _ = key_index::remove(dir, base_offset);
        Ok(Segment {
            key_index: if config.key_index {
                KeyIndex::Building(Building::default())
            } else {
                KeyIndex::Off
            },
            base_offset,
            log_path,
            file,
            size: 0,
            next_offset: base_offset,
            max_timestamp: None,
            first_batch_timestamp: None,
            offset_index,
            time_index,
            txn_index,
            bytes_since_last_index_entry: 0,
            index_interval_bytes: config.index_interval_bytes,
        })
    }

    /// Opens an existing segment. With `recover`, every batch is validated (length, magic, CRC, offsets) and the
    /// file is cut at the first bad one; the indexes are rebuilt. Without it, the indexes are trusted if they pass
    /// their checks (else rebuilt from a validating scan) and only the tail after the last index entry is read.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        recover: bool,
    ) -> crate::Result<(Segment, OpenReport)> {
        Self::open_listed(dir, base_offset, config, recover, &DirListing::unknown())
    }

    /// [`Segment::open`] in a directory listed when its log was opened: files the listing lacks are not
    /// probed for.
    pub(crate) fn open_listed(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        recover: bool,
        listing: &DirListing,
    ) -> crate::Result<(Segment, OpenReport)> {
        let handles = &config.file_handles;
        let log_path = dir.join(file_name(base_offset, "log"));
        let cached = CachedFile::open(
            handles,
            "open segment",
            &log_path,
            OpenOptions::new().read(true).write(true),
        )?;
        let file = cached.get()?;
        let mut cached = Some(cached);
        let file_size = file
            .metadata()
            .map_err(|e| LogError::io("stat segment", &log_path, e))?
            .len();
        crate::page_cache::mark_durable(&file);
        let index_path = dir.join(file_name(base_offset, "index"));
        let time_path = dir.join(file_name(base_offset, "timeindex"));
        let mut report = OpenReport::default();

        let indexes_present = listing.contains(dir, &file_name(base_offset, "index"))
            && listing.contains(dir, &file_name(base_offset, "timeindex"));
        if !recover && file_size <= LogConfig::SEGMENT_BYTES_MAX {
            if let Some(segment) = Self::open_trusting_indexes(
                indexes_present,
                &log_path,
                &mut cached,
                &file,
                file_size,
                &index_path,
                &time_path,
                base_offset,
                config,
                &mut report,
            )? {
                let mut segment = segment;
                let txn_path = TxnIndex::path_in(dir, base_offset);
                segment.txn_index = if listing.may_contain(&file_name(base_offset, "txnindex")) {
                    TxnIndex::load(&txn_path, segment.next_offset, handles)?
                } else {
                    TxnIndex::detached(&txn_path, handles)
                };
                // With the key index off, a stale file is removed; no file, nothing to remove.
                if config.key_index
                    || listing.may_contain(&file_name(base_offset, crate::key_index::SUFFIX))
                {
                    segment.set_key_index(config.key_index)?;
                }
                segment.release_index_memory();
                return Ok((segment, report));
            }
        }
        let mut segment = Segment {
            base_offset,
            log_path: log_path.clone(),
            file: cached
                .take()
                .expect("taken only by a trusted open, which returned"),
            size: 0,
            next_offset: base_offset,
            max_timestamp: None,
            first_batch_timestamp: None,
            offset_index: OffsetIndex::create(handles, &index_path, config.segment_index_bytes)?,
            time_index: TimeIndex::create(handles, &time_path, config.segment_index_bytes)?,
            txn_index: TxnIndex::detached(&TxnIndex::path_in(dir, base_offset), handles),
            bytes_since_last_index_entry: 0,
            index_interval_bytes: config.index_interval_bytes,
            key_index: KeyIndex::Off,
        };
        if report.rebuilt_indexes.is_none() && recover {
            report.rebuilt_indexes = Some("recovering after an unclean shutdown".into());
        }
        let valid_size = segment.rebuild_from_log(file_size)?;
        // Entries for markers that survived stay; the log's producer-state replay re-adds any that are missing.
        segment.txn_index = TxnIndex::load(
            &TxnIndex::path_in(dir, base_offset),
            segment.next_offset,
            handles,
        )?;
        // Rebuilt indexes go to their files now, not only when more entries arrive.
        segment.offset_index.write_buffered()?;
        segment.time_index.write_buffered()?;
        if valid_size < file_size {
            report.truncated_bytes = file_size - valid_size;
            tracing::warn!(
                segment = %log_path.display(),
                valid_bytes = valid_size,
                dropped_bytes = file_size - valid_size,
                "truncating a torn or corrupt tail"
            );
            file.set_len(valid_size)
                .map_err(|e| LogError::io("truncate segment", &log_path, e))?;
            file.sync_all()
                .map_err(|e| LogError::io("fsync segment", &log_path, e))?;
            crate::page_cache::mark_durable(&file);
        }
        segment.set_key_index(config.key_index)?;
        segment.release_index_memory();
        Ok((segment, report))
    }

    #[allow(clippy::too_many_arguments)]
    fn open_trusting_indexes(
        indexes_present: bool,
        log_path: &Path,
        cached: &mut Option<CachedFile>,
        file: &File,
        file_size: u64,
        index_path: &Path,
        time_path: &Path,
        base_offset: i64,
        config: &LogConfig,
        report: &mut OpenReport,
    ) -> crate::Result<Option<Segment>> {
        if !indexes_present {
            report.rebuilt_indexes = Some("index files missing".into());
            return Ok(None);
        }
        let handles = &config.file_handles;
        let offset_index =
            match OffsetIndex::load(handles, index_path, config.segment_index_bytes, file_size)? {
                Ok(index) => index,
                Err(reason) => {
                    report.rebuilt_indexes = Some(format!("offset index: {reason}"));
                    return Ok(None);
                }
            };
        // Walk from the last offset index entry to the end: the tail that no entry covers.
        let last_entry = offset_index.last()?;
        let tail_start = last_entry.map_or(0, |e| u64::from(e.position));
        let mut walk = Walk {
            next_offset: base_offset,
            max_timestamp: None,
            bytes_after_tail_start: 0,
        };
        let mut ok = true;
        let mut position = tail_start;
        let mut first_header = None;
        while position < file_size {
            match read_valid_prefix(file, position, file_size)? {
                Some(header)
                    if header.base_offset >= walk.next_offset || position == tail_start =>
                {
                    if position == tail_start && tail_start > 0 {
                        // The entry says which batch starts here; it must agree.
                        let entry = last_entry.expect("tail_start > 0");
                        if header.last_offset() != base_offset + i64::from(entry.relative_offset) {
                            ok = false;
                            break;
                        }
                    }
                    if first_header.is_none() {
                        first_header = Some(header);
                    }
                    walk.next_offset = header.next_offset();
                    walk.observe_timestamp(&header);
                    walk.bytes_after_tail_start += header.size() as u64;
                    position += header.size() as u64;
                }
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            report.rebuilt_indexes = Some("log tail does not match the offset index".into());
            return Ok(None);
        }
        let next_relative = (walk.next_offset - base_offset).max(0) as u64;
        let time_index = match TimeIndex::load(
            handles,
            time_path,
            config.segment_index_bytes,
            next_relative,
        )? {
            Ok(index) => index,
            Err(reason) => {
                report.rebuilt_indexes = Some(format!("time index: {reason}"));
                return Ok(None);
            }
        };
        let mut max_timestamp = time_index
            .last()?
            .map(|e| (e.timestamp, base_offset + i64::from(e.relative_offset)));
        if let Some((ts, offset)) = walk.max_timestamp {
            if max_timestamp.is_none_or(|(m, _)| ts > m) {
                max_timestamp = Some((ts, offset));
            }
        }
        let first_batch_timestamp = if file_size == 0 {
            None
        } else if tail_start == 0 {
            first_header.map(|h| h.max_timestamp)
        } else {
            read_valid_prefix(file, 0, file_size)?.map(|h| h.max_timestamp)
        };
        Ok(Some(Segment {
            base_offset,
            log_path: log_path.to_path_buf(),
            file: cached.take().expect("the trusted open takes the file once"),
            size: file_size,
            next_offset: walk.next_offset,
            max_timestamp,
            first_batch_timestamp,
            offset_index,
            time_index,
            txn_index: TxnIndex::detached(&log_path.with_extension("txnindex"), handles),
            bytes_since_last_index_entry: walk.bytes_after_tail_start,
            index_interval_bytes: config.index_interval_bytes,
            key_index: KeyIndex::Off,
        }))
    }

    /// Scans the whole file, validating each batch and re-creating index entries. Returns the size of the valid
    /// prefix; state (`size`, `next_offset`, timestamps, indexes) describes exactly that prefix.
    fn rebuild_from_log(&mut self, file_size: u64) -> crate::Result<u64> {
        let file = self.log_file()?;
        let mut reader = BufReader::with_capacity(1 << 20, &*file);
        let mut position = 0u64;
        let mut buf = Vec::new();
        loop {
            let remaining = file_size - position;
            if remaining < HEADER_SIZE as u64 {
                break;
            }
            let mut head = [0u8; HEADER_SIZE];
            if reader.read_exact(&mut head).is_err() {
                break;
            }
            let Some(header) = BatchHeader::parse(&head) else {
                break;
            };
            if !self.plausible(&header, remaining) {
                break;
            }
            buf.clear();
            buf.extend_from_slice(&head);
            buf.resize(header.size(), 0);
            if reader.read_exact(&mut buf[HEADER_SIZE..]).is_err() {
                break;
            }
            // The CRC says the bytes are the ones written; the records must also fit their batch, as the write
            // path (and a follower, for a leader's cleaned batches) requires. See `read_valid_prefix`.
            if batch::compute_crc(&buf) != header.crc
                || batch::validate_replicated_batches(&buf, u32::MAX).is_err()
            {
                break;
            }
            self.index_batch(&header, position)?;
            position += header.size() as u64;
            self.size = position;
        }
        Ok(position)
    }

    /// Whether a header read from disk can start the next batch of this segment.
    fn plausible(&self, header: &BatchHeader, remaining: u64) -> bool {
        header.magic == MAGIC_V2
            && header.length >= (HEADER_SIZE - LOG_OVERHEAD) as i32
            && header.size() as u64 <= remaining
            && header.last_offset_delta >= 0
            && header.base_offset >= self.next_offset
            && header.last_offset() - self.base_offset <= i64::from(u32::MAX >> 1)
    }

    /// Folds a batch into the segment's timestamp bookkeeping: the first batch's timestamp (for `segment.ms`)
    /// and the largest timestamp with the batch that carried it.
    fn observe_timestamps(&mut self, header: &BatchHeader) {
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(header.max_timestamp);
        }
        if self
            .max_timestamp
            .is_none_or(|(ts, _)| header.max_timestamp > ts)
        {
            self.max_timestamp = Some((header.max_timestamp, header.last_offset()));
        }
    }

    /// Records a batch written at `position`: offsets, timestamps and (every `index.interval.bytes`) index entries.
    fn index_batch(&mut self, header: &BatchHeader, position: u64) -> crate::Result<()> {
        debug_assert!(header.base_offset >= self.next_offset);
        self.observe_timestamps(header);
        if self.bytes_since_last_index_entry > u64::from(self.index_interval_bytes) {
            let relative = self.relative(header.last_offset());
            self.offset_index.append(OffsetEntry {
                relative_offset: relative,
                position: position as u32,
            })?;
            if let Some((ts, offset)) = self.max_timestamp {
                self.time_index.maybe_append(TimeEntry {
                    timestamp: ts,
                    relative_offset: self.relative(offset),
                })?;
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += header.size() as u64;
        self.next_offset = header.next_offset();
        Ok(())
    }

    fn relative(&self, offset: i64) -> u32 {
        let relative = offset - self.base_offset;
        debug_assert!((0..=i64::from(u32::MAX)).contains(&relative));
        relative as u32
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.max_timestamp
    }

    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp
    }

    pub fn indexes_full(&self) -> bool {
        self.offset_index.is_full() || self.time_index.is_full()
    }

    /// Whether `last_offset` can still be expressed relative to this segment's base offset.
    pub fn can_hold_offset(&self, last_offset: i64) -> bool {
        last_offset - self.base_offset <= i64::from(i32::MAX)
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Appends batches that already carry their final offsets. On failure the file is cut back to its previous
    /// size, so the segment stays exactly as it was.
    pub fn append(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> crate::Result<()> {
        let start = self.size;
        let file = self.log_file()?;
        if let Err(e) = crate::disk_faults::write_all_at(&file, &self.log_path, bytes, start) {
            let _ = file.set_len(start);
            return Err(LogError::io("append to segment", &self.log_path, e));
        }
        let before = (
            self.next_offset,
            self.max_timestamp,
            self.first_batch_timestamp,
            self.bytes_since_last_index_entry,
        );
        let mut position = start;
        for header in headers {
            if let Err(e) = self.index_batch(header, position) {
                // An index write failed (disk full) after the batches were written: take them out again, or
                // recovery after a crash would bring back an append that was reported as failed.
                let _ = file.set_len(start);
                let _ = self.offset_index.truncate_to_position(start as u32);
                if let Some(first) = headers.first() {
                    let _ = self
                        .time_index
                        .truncate_to_offset(self.relative(first.base_offset));
                }
                (
                    self.next_offset,
                    self.max_timestamp,
                    self.first_batch_timestamp,
                    self.bytes_since_last_index_entry,
                ) = before;
                return Err(e);
            }
            position += header.size() as u64;
        }
        debug_assert_eq!(position, start + bytes.len() as u64);
        self.size = position;
        Ok(())
    }

    /// Reads the prefix of the batch header at `position` (offsets and length).
    fn header_at(&self, position: u64) -> crate::Result<BatchHeader> {
        let mut head = [0u8; HEADER_SIZE];
        let want = HEADER_SIZE.min((self.size - position) as usize);
        self.log_file()?
            .read_exact_at(&mut head[..want], position)
            .map_err(|e| LogError::io("read segment", &self.log_path, e))?;
        let header = BatchHeader::parse(&head)
            .filter(|h| want >= HEADER_PREFIX && h.size() as u64 <= self.size - position);
        header.ok_or_else(|| LogError::Unrecoverable {
            path: self.log_path.clone(),
            reason: format!(
                "no valid batch header at byte {position}; the segment changed under the engine"
            ),
        })
    }

    /// The first batch whose last offset is >= `offset`: its position and header.
    pub fn find_batch(&self, offset: i64) -> crate::Result<Option<(u64, BatchHeader)>> {
        if offset >= self.next_offset {
            return Ok(None);
        }
        let relative = (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let mut position = 0;
        if let Some(entry) = self.offset_index.lookup(relative)? {
            // The load checks cannot see an entry that is in order and in range but wrong (a damaged file);
            // the batch it points at must be the one it names, else scan from the segment start.
            match self.header_at(u64::from(entry.position)) {
                Ok(h) if h.last_offset() == self.base_offset + i64::from(entry.relative_offset) => {
                    position = u64::from(entry.position)
                }
                _ => tracing::warn!(
                    segment = %self.log_path.display(),
                    ?entry,
                    "offset index entry does not match the log; scanning the segment from its start (delete the .index file and restart to rebuild it)"
                ),
            }
        }
        while position < self.size {
            let header = self.header_at(position)?;
            if header.last_offset() >= offset {
                return Ok(Some((position, header)));
            }
            position += header.size() as u64;
        }
        Ok(None)
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one batch) and stopping before
    /// any batch whose base offset is at or past `upper_bound`. With the slice comes the offset it ends at: the
    /// base offset of the batch after it, or the segment's next offset (Kafka's `fetchUpperBoundOffset`).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
    ) -> crate::Result<Option<(FileSlice, i64)>> {
        let Some((start, first)) = self.find_batch(offset)? else {
            return Ok(None);
        };
        if first.base_offset >= upper_bound {
            return Ok(None);
        }
        let mut end = start + first.size() as u64;
        // The offset index knows where most batches start: jump to the last known boundary that keeps the slice
        // within bounds, then read headers one by one only for the few batches after it (one `pread` per batch
        // header made 16 KiB batch reads 23% slower than plain reads).
        let limit = start.saturating_add(max_bytes as u64);
        let mut known = None;
        if let Some((position, header)) = self.boundary_from_index(end, limit, upper_bound) {
            end = position;
            known = Some(header);
        }
        let mut ends_at = self.next_offset;
        while end < self.size {
            let header = match known.take() {
                Some(header) => header,
                None => self.header_at(end)?,
            };
            if header.base_offset >= upper_bound
                || (end - start) as usize + header.size() > max_bytes
            {
                ends_at = header.base_offset;
                break;
            }
            end += header.size() as u64;
        }
        let slice = FileSlice {
            file: self.log_file()?,
            position: start,
            len: (end - start) as usize,
        };
        Ok(Some((slice, ends_at)))
    }

    /// The farthest batch start in `[from, limit]` that the offset index knows of and before which every batch
    /// starts below `upper_bound`, with the header found there; `None` if there is none (or the entry does not
    /// match the log, which is then walked instead). Every batch before an entry's batch has a base offset below
    /// that batch's base offset, which is at most the entry's (last) offset: an entry whose offset is at most
    /// `upper_bound` is safe to stop at.
    fn boundary_from_index(
        &self,
        from: u64,
        limit: u64,
        upper_bound: i64,
    ) -> Option<(u64, BatchHeader)> {
        let index = &self.offset_index;
        let found = index
            .partition_point(|e| u64::from(e.position) <= limit)
            .and_then(|within_limit| {
                let within_bound = index.partition_point(|e| {
                    self.base_offset + i64::from(e.relative_offset) <= upper_bound
                })?;
                match within_limit.min(within_bound) {
                    0 => Ok(None),
                    n => index.get(n - 1).map(Some),
                }
            });
        let entry = match found {
            Ok(entry) => entry?,
            Err(e) => {
                // A hint only: the batch headers are walked instead.
                tracing::warn!(segment = %self.log_path.display(), error = %e, "cannot read the offset index; reading batch headers instead");
                return None;
            }
        };
        let position = u64::from(entry.position);
        if position < from || position >= self.size {
            return None;
        }
        match self.header_at(position) {
            Ok(h) if h.last_offset() == self.base_offset + i64::from(entry.relative_offset) => {
                Some((position, h))
            }
            _ => {
                tracing::warn!(
                    segment = %self.log_path.display(),
                    ?entry,
                    "offset index entry does not match the log; reading batch headers instead (delete the .index file and restart to rebuild it)"
                );
                None
            }
        }
    }

    /// The first record offset whose timestamp is >= `timestamp`, with that timestamp. Records are read in
    /// every codec (decompressing at most `limit` bytes a batch), so the answer is the record, as Kafka's is.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        from_offset: i64,
        limit: usize,
    ) -> crate::Result<Option<(i64, i64)>> {
        if self.max_timestamp.is_none_or(|(max, _)| max < timestamp) {
            return Ok(None);
        }
        let start_relative = self.time_index.lookup(timestamp)?.unwrap_or(0);
        let start_offset = (self.base_offset + i64::from(start_relative)).max(from_offset);
        let mut cursor = self.find_batch(start_offset)?;
        while let Some((position, header)) = cursor {
            if header.max_timestamp >= timestamp {
                let found = self.with_records(position, &header, limit, |records| {
                    records
                        .iter()
                        .find(|r| r.timestamp >= timestamp && r.offset >= from_offset)
                        .map(|r| (r.offset, r.timestamp))
                })?;
                match found {
                    Some(Some(found)) => return Ok(Some(found)),
                    // The later timestamps are all below the log start: look on, as Kafka does.
                    Some(None) => {}
                    None => {
                        let offset = header.base_offset.max(from_offset);
                        return Ok(Some((offset, header.max_timestamp)));
                    }
                }
            }
            let next = position + header.size() as u64;
            cursor = if next < self.size {
                Some((next, self.header_at(next)?))
            } else {
                None
            };
        }
        Ok(None)
    }

    /// Runs `visit` over the records of the batch at `position`; `None` (with a warning) if they cannot be read
    /// (a batch that expands past `limit`, or malformed records that recovery's CRC check let through).
    fn with_records<T>(
        &self,
        position: u64,
        header: &BatchHeader,
        limit: usize,
        visit: impl FnOnce(&[crate::records::Record<'_>]) -> T,
    ) -> crate::Result<Option<T>> {
        let mut bytes = vec![0u8; header.size()];
        self.log_file()?
            .read_exact_at(&mut bytes, position)
            .map_err(|e| LogError::io("read segment", &self.log_path, e))?;
        let records = crate::records::DecodedBatch::new(&bytes, limit)
            .and_then(|d| d.collect_records().map(|r| visit(&r)));
        match records {
            Ok(found) => Ok(Some(found)),
            Err(e) => {
                tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, error = %e,
                    "cannot read the records of a batch; answering with the batch's offsets");
                Ok(None)
            }
        }
    }

    /// The first record of the batch containing `offset` whose timestamp is `timestamp` (Kafka's
    /// `offsetOfMaxTimestamp`): exact in every codec, the base offset for `LogAppendTime` batches (every record
    /// has the batch's time), `None` if the records cannot be read.
    pub fn first_offset_with_timestamp(
        &self,
        offset: i64,
        timestamp: i64,
        limit: usize,
    ) -> crate::Result<Option<i64>> {
        let Some((position, header)) = self.find_batch(offset)? else {
            return Ok(None);
        };
        if header.is_log_append_time() {
            return Ok(Some(header.base_offset));
        }
        Ok(self
            .with_records(position, &header, limit, |records| {
                records
                    .iter()
                    .find(|r| r.timestamp == timestamp)
                    .map(|r| r.offset)
            })?
            .flatten())
    }

    /// Cuts the segment before the batch containing `offset`. Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> crate::Result<u64> {
        let Some((position, cut)) = self.find_batch(offset)? else {
            return Ok(0);
        };
        let removed = self.size - position;
        // The key index file goes before the log is cut: a crash between the two must not leave a file that
        // could match the segment again once new records (other keys) grow it back to the same size and end.
        self.truncate_key_index(self.relative(cut.base_offset), position)?;
        self.log_file()?
            .set_len(position)
            .map_err(|e| LogError::io("truncate segment", &self.log_path, e))?;
        self.offset_index.truncate_to_position(position as u32)?;
        self.time_index
            .truncate_to_offset(self.relative(offset.max(self.base_offset)))?;
        self.txn_index.truncate_to(cut.base_offset)?;
        // Recompute what the kept prefix says about offsets and timestamps.
        self.size = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = None;
        self.first_batch_timestamp = None;
        self.bytes_since_last_index_entry = 0;
        let mut walk_position = 0;
        let entries = self.offset_index.len();
        let time_entries = self.time_index.len();
        while walk_position < position {
            self.size = position; // header_at reads within size
            let header = self.header_at(walk_position)?;
            // Re-index without writing duplicate entries: only the bookkeeping is recomputed.
            self.observe_timestamps(&header);
            self.next_offset = header.next_offset();
            walk_position += header.size() as u64;
        }
        self.size = position;
        debug_assert_eq!(entries, self.offset_index.len());
        debug_assert_eq!(time_entries, self.time_index.len());
        self.bytes_since_last_index_entry = position
            - self
                .offset_index
                .last()?
                .map_or(0, |e| u64::from(e.position));
        Ok(removed)
    }

    /// Called when the segment stops being the active one: record its max timestamp in the time index, as Kafka
    /// does, so the next open finds it without reading the log.
    pub fn on_inactive(&mut self) -> crate::Result<()> {
        if let Some((ts, offset)) = self.max_timestamp {
            if !self.time_index.is_full() {
                self.time_index.maybe_append(TimeEntry {
                    timestamp: ts,
                    relative_offset: self.relative(offset),
                })?;
            }
        }
        self.release_index_memory();
        Ok(())
    }

    /// Drops the in-memory entries of the offset and time indexes: lookups read their files through the page
    /// cache until an append makes this the active segment again. A failed write (disk full) keeps them in
    /// memory, still exact; the next fsync reports the error.
    pub fn release_index_memory(&mut self) {
        if let Err(e) = self
            .offset_index
            .release_memory()
            .and_then(|()| self.time_index.release_memory())
        {
            tracing::warn!(segment = %self.log_path.display(), error = %e, "cannot write index entries; keeping them in memory");
        }
    }

    /// Whether the offset and time indexes are held in memory (the active segment) rather than read from
    /// their files (inspection and tests).
    pub fn indexes_in_memory(&self) -> bool {
        self.offset_index.is_in_memory() || self.time_index.is_in_memory()
    }

    /// The `.log` file's handle, reopened through the open-file budget if it was evicted.
    fn log_file(&self) -> crate::Result<Arc<File>> {
        self.file.get()
    }

    /// fsyncs the log file and its indexes.
    pub fn sync(&mut self) -> crate::Result<()> {
        let file = self.log_file()?;
        crate::fsync_stats::timed(|| crate::disk_faults::sync_data(&file, &self.log_path))
            .map_err(|e| LogError::io("fsync segment", &self.log_path, e))?;
        crate::page_cache::mark_durable(&file);
        self.offset_index.sync()?;
        self.time_index.sync()?;
        self.txn_index.sync()
    }

    /// The files that make this segment durable (log, offset index, time index) with their paths, for an fsync
    /// that runs without the segment (see `roll_flush.rs`). Buffered index entries are written first.
    pub fn durable_files(&mut self) -> crate::Result<Vec<(Arc<File>, PathBuf)>> {
        let mut files = vec![
            (self.log_file()?, self.log_path.clone()),
            self.offset_index.durable_handle()?,
            self.time_index.durable_handle()?,
        ];
        files.extend(self.txn_index.durable_handle()?);
        Ok(files)
    }

    /// The aborted transactions whose ABORT marker is in this segment.
    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }

    /// Records an aborted transaction whose marker was just appended here (or found by a rebuild).
    pub fn append_aborted_txn(&mut self, entry: AbortedTxn) -> crate::Result<()> {
        debug_assert!(
            entry.last_offset >= self.base_offset && entry.last_offset < self.next_offset
        );
        self.txn_index.append(entry)
    }

    /// A handle that can fsync (or read) the log file without holding the segment.
    pub fn file_handle(&self) -> crate::Result<Arc<File>> {
        self.log_file()
    }

    /// Removes the segment's files.
    pub fn delete(mut self) -> crate::Result<()> {
        self.offset_index.discard_buffered();
        self.time_index.discard_buffered();
        let dir = self
            .log_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for suffix in ["log", "index", "timeindex", "txnindex", key_index::SUFFIX] {
            let path = dir.join(file_name(self.base_offset, suffix));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io("delete segment file", &path, e)),
            }
        }
        Ok(())
    }

    /// Calls `visit` with each batch header from `from_offset` on, and for a control batch the transaction marker
    /// it holds (used to rebuild producer state). A control batch that cannot be read as a marker is passed with
    /// `None`, with a warning.
    pub fn for_each_header(
        &self,
        from_offset: i64,
        mut visit: impl FnMut(&BatchHeader, Option<&crate::control::EndTxnMarker>),
    ) -> crate::Result<()> {
        let mut cursor = self.find_batch(from_offset)?;
        while let Some((position, header)) = cursor {
            let marker = if header.is_control() {
                self.read_marker(position, &header)?
            } else {
                None
            };
            visit(&header, marker.as_ref());
            let next = position + header.size() as u64;
            cursor = if next < self.size {
                Some((next, self.header_at(next)?))
            } else {
                None
            };
        }
        Ok(())
    }
}

/// The key index (see `key_index.rs`): built by bounded steps off the produce path, searched by lookups.
impl Segment {
    fn dir(&self) -> PathBuf {
        self.log_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// What the segment is now, which a key index file must match.
    pub fn shape(&self) -> SegmentShape {
        SegmentShape {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            log_bytes: self.size,
        }
    }

    /// Turns the key index on (a file on disk is checked before use) or off (its file is deleted: derived data
    /// that stopped following the log).
    pub fn set_key_index(&mut self, on: bool) -> crate::Result<()> {
        match (on, &self.key_index) {
            (true, KeyIndex::Off) => self.key_index = KeyIndex::Unverified,
            (false, KeyIndex::Off) => {
                let path = key_index::path_in(&self.dir(), self.base_offset);
                key_index::remove(&self.dir(), self.base_offset)
                    .map_err(|e| LogError::io("delete key index", &path, e))?;
            }
            (false, _) => {
                self.key_index = KeyIndex::Off;
                return self.set_key_index(false);
            }
            (true, _) => {}
        }
        Ok(())
    }

    /// Whether the key index covers every record of the segment and can answer (true when it is off: nothing
    /// to wait for). An unchecked file is not ready.
    pub fn key_index_complete(&self) -> bool {
        match &self.key_index {
            KeyIndex::Off | KeyIndex::Sealed(_) => true,
            KeyIndex::Unverified => false,
            KeyIndex::Building(b) => b.position == self.size,
        }
    }

    /// Whether `index_keys` has work here: a file to check, records to index, or (for a `sealed` segment) a
    /// complete in-memory index to write out and drop, so only the active segment's index stays in memory.
    pub fn key_index_needs_work(&self, sealed: bool) -> bool {
        match &self.key_index {
            KeyIndex::Off | KeyIndex::Sealed(_) => false,
            KeyIndex::Unverified => true,
            KeyIndex::Building(b) => sealed || b.position < self.size,
        }
    }

    /// The in-memory index holds [`key_index::ACTIVE_ENTRIES_MAX`] entries: the log rolls.
    pub fn key_index_full(&self) -> bool {
        matches!(&self.key_index, KeyIndex::Building(b) if b.is_full())
    }

    /// One bounded step of building the key index: checks a file left on disk, or indexes batches from where
    /// the index stops, about `budget_bytes` of log (at least one batch), decompressing each batch once. A
    /// `sealed` (no longer active) segment's index is written to its file once complete. Returns the bytes read
    /// (log indexed, or index file checked), which callers count against their budget.
    pub fn key_index_step(
        &mut self,
        budget_bytes: u64,
        limit: usize,
        sealed: bool,
    ) -> crate::Result<u64> {
        let dir = self.dir();
        let mut building = match std::mem::replace(&mut self.key_index, KeyIndex::Off) {
            KeyIndex::Off => return Ok(0),
            KeyIndex::Sealed(s) => {
                self.key_index = KeyIndex::Sealed(s);
                return Ok(0);
            }
            KeyIndex::Unverified => {
                if sealed {
                    match key_index::load(&dir, &self.shape(), self.file.handles()) {
                        Ok(file) => {
                            // Checking read the whole file: that is this step's work.
                            let checked = file.file_bytes();
                            self.key_index = KeyIndex::Sealed(file);
                            return Ok(checked);
                        }
                        Err(reason) => {
                            tracing::info!(segment = %self.log_path.display(), %reason, "rebuilding the key index from the log")
                        }
                    }
                }
                // An active segment's index lives in memory; any file is stale.
                let path = key_index::path_in(&dir, self.base_offset);
                key_index::remove(&dir, self.base_offset)
                    .map_err(|e| LogError::io("delete key index", &path, e))?;
                Building::default()
            }
            KeyIndex::Building(b) => b,
        };
        let result = self.index_keys_from(&mut building, budget_bytes, limit, sealed);
        if result.is_ok() && sealed && building.position == self.size {
            match key_index::write_file(&dir, &self.shape(), &building, self.file.handles()) {
                Ok(file) => {
                    self.key_index = KeyIndex::Sealed(file);
                    return result;
                }
                // Kept in memory: still exact, and the next open rebuilds the file.
                Err(e) => {
                    tracing::warn!(segment = %self.log_path.display(), error = %e, "cannot write the key index file; keeping it in memory")
                }
            }
        }
        self.key_index = KeyIndex::Building(building);
        result
    }

    fn index_keys_from(
        &self,
        building: &mut Building,
        budget_bytes: u64,
        limit: usize,
        sealed: bool,
    ) -> crate::Result<u64> {
        let start = building.position;
        let mut bytes = Vec::new();
        while building.position < self.size
            && (building.position == start || building.position - start < budget_bytes)
            && (sealed || !building.is_full())
        {
            let position = building.position;
            let header = self.header_at(position)?;
            if key_index::indexable(&header) {
                bytes.resize(header.size(), 0);
                self.log_file()?
                    .read_exact_at(&mut bytes, position)
                    .map_err(|e| LogError::io("read segment", &self.log_path, e))?;
                match crate::records::DecodedBatch::new(&bytes, limit) {
                    Ok(decoded) => {
                        for record in decoded.records() {
                            match record {
                                Ok(r) => {
                                    if let Some(key) = r.key {
                                        building
                                            .add(key_index::key_hash(key), self.relative(r.offset));
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, error = %e, "a record that does not parse; the key index skips the rest of its batch");
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, error = %e, "a batch whose records cannot be read; the key index skips it")
                    }
                }
            }
            building.position = position + header.size() as u64;
        }
        Ok(building.position - start)
    }

    /// A truncation cut the segment before `relative_offset` (at byte `position`): the index keeps what is
    /// below it. A sealed file is read back into memory (this segment becomes the active one) and deleted.
    fn truncate_key_index(&mut self, relative_offset: u32, position: u64) -> crate::Result<()> {
        let dir = self.dir();
        let path = key_index::path_in(&dir, self.base_offset);
        match std::mem::replace(&mut self.key_index, KeyIndex::Off) {
            KeyIndex::Off => return Ok(()),
            KeyIndex::Building(mut b) => {
                b.truncate(relative_offset, position);
                self.key_index = KeyIndex::Building(b);
            }
            KeyIndex::Sealed(sealed) => {
                let restored = Building::from_sealed(&sealed, relative_offset, position);
                drop(sealed);
                self.key_index = match restored {
                    Ok(b) => KeyIndex::Building(b),
                    Err(e) => {
                        tracing::warn!(segment = %self.log_path.display(), error = %e, "cannot read the key index back after a truncation; rebuilding it");
                        KeyIndex::Building(Building::default())
                    }
                };
            }
            KeyIndex::Unverified => self.key_index = KeyIndex::Unverified,
        }
        key_index::remove(&dir, self.base_offset)
            .map_err(|e| LogError::io("delete key index", &path, e))
    }

    /// Offsets of records whose key may hash to `hash` (the index's candidates) in `[from, to)`, at most
    /// `max`, ascending or (with `reverse`) descending. The records must still be read: hashes collide.
    pub fn key_candidates(
        &self,
        hash: u32,
        from: i64,
        to: i64,
        reverse: bool,
        max: usize,
    ) -> crate::Result<Vec<i64>> {
        let clamp = |o: i64| (o - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let (from_rel, to_rel) = (clamp(from), clamp(to));
        let relative = match &self.key_index {
            KeyIndex::Building(b) => b.candidates(hash, from_rel, to_rel, reverse, max),
            KeyIndex::Sealed(s) => s
                .candidates(hash, from_rel, to_rel, reverse, max)
                .map_err(|e| LogError::io("read key index", s.path(), e))?,
            KeyIndex::Off | KeyIndex::Unverified => Vec::new(),
        };
        Ok(relative
            .into_iter()
            .map(|r| self.base_offset + i64::from(r))
            .collect())
    }

    /// A short description of the key index state (inspection and tests).
    pub fn key_index_state(&self) -> &'static str {
        match &self.key_index {
            KeyIndex::Off => "off",
            KeyIndex::Unverified => "unverified",
            KeyIndex::Building(_) => "in memory",
            KeyIndex::Sealed(_) => "file",
        }
    }

    /// Bytes of this segment the key index does not cover yet (0 when it is off or complete; the whole
    /// segment while a file left on disk is still unchecked).
    pub fn key_index_unindexed_bytes(&self) -> u64 {
        match &self.key_index {
            KeyIndex::Off | KeyIndex::Sealed(_) => 0,
            KeyIndex::Unverified => self.size,
            KeyIndex::Building(b) => self.size.saturating_sub(b.position),
        }
    }

    /// Bytes of the checked key index file in use, if any.
    pub fn key_index_file_bytes(&self) -> u64 {
        match &self.key_index {
            KeyIndex::Sealed(s) => s.file_bytes(),
            _ => 0,
        }
    }

    /// Entries in the in-memory index, if it is in memory.
    pub fn key_index_memory_entries(&self) -> Option<usize> {
        match &self.key_index {
            KeyIndex::Building(b) => Some(b.entries()),
            _ => None,
        }
    }

    /// The batch holding `offset` (or the next one, if compaction removed it), its records read on demand (for
    /// key lookups, which keep one batch while they resolve the candidates inside it). `None` with a warning if
    /// the batch cannot be read.
    pub fn read_batch_records(
        &self,
        offset: i64,
        limit: usize,
    ) -> crate::Result<Option<crate::records::LazyRecords>> {
        let Some((position, header)) = self.find_batch(offset)? else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; header.size()];
        self.log_file()?
            .read_exact_at(&mut bytes, position)
            .map_err(|e| LogError::io("read segment", &self.log_path, e))?;
        match crate::records::LazyRecords::new(bytes, limit) {
            Ok(records) => Ok(Some(records)),
            Err(e) => {
                tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, error = %e,
                    "cannot read the records of a batch; answering with the batch's offsets");
                Ok(None)
            }
        }
    }
}

impl Segment {
    /// The transaction marker of the control batch at `position`, `None` (with a warning) if it is not one.
    fn read_marker(
        &self,
        position: u64,
        header: &BatchHeader,
    ) -> crate::Result<Option<crate::control::EndTxnMarker>> {
        if header.size() > MARKER_BATCH_BYTES_MAX {
            tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, size = header.size(),
                "a control batch too large to be a transaction marker; ignoring it");
            return Ok(None);
        }
        let mut bytes = vec![0u8; header.size()];
        self.log_file()?
            .read_exact_at(&mut bytes, position)
            .map_err(|e| LogError::io("read segment", &self.log_path, e))?;
        match crate::control::parse_marker(&bytes) {
            Ok(marker) => Ok(marker),
            Err(reason) => {
                tracing::warn!(segment = %self.log_path.display(), base_offset = header.base_offset, %reason,
                    "a control batch that is not a readable transaction marker; ignoring it");
                Ok(None)
            }
        }
    }
}

/// Bookkeeping while walking a segment's tail.
struct Walk {
    next_offset: i64,
    max_timestamp: Option<(i64, i64)>,
    bytes_after_tail_start: u64,
}

impl Walk {
    fn observe_timestamp(&mut self, header: &BatchHeader) {
        if self
            .max_timestamp
            .is_none_or(|(ts, _)| header.max_timestamp > ts)
        {
            self.max_timestamp = Some((header.max_timestamp, header.last_offset()));
        }
    }
}

/// Reads and fully validates (CRC included) the batch at `position`; `None` if it is not a valid batch.
fn read_valid_prefix(
    file: &File,
    position: u64,
    file_size: u64,
) -> crate::Result<Option<BatchHeader>> {
    let remaining = file_size - position;
    if remaining < HEADER_SIZE as u64 {
        return Ok(None);
    }
    let mut head = [0u8; HEADER_SIZE];
    if file.read_exact_at(&mut head, position).is_err() {
        return Ok(None);
    }
    let Some(header) = BatchHeader::parse(&head) else {
        return Ok(None);
    };
    if header.magic != MAGIC_V2
        || header.length < (HEADER_SIZE - LOG_OVERHEAD) as i32
        || header.size() as u64 > remaining
        || header.last_offset_delta < 0
    {
        return Ok(None);
    }
    let mut bytes = vec![0u8; header.size()];
    if file.read_exact_at(&mut bytes, position).is_err() || batch::compute_crc(&bytes) != header.crc
    {
        return Ok(None);
    }
    // A CRC only says the bytes are the ones written; what the write path would refuse (records that do not fit
    // their batch: a crafted or buggy writer's) must not be served either. The same check a follower applies to
    // a leader's batches (cleaned batches allowed); it walks an uncompressed batch's record varints only.
    if batch::validate_replicated_batches(&bytes, u32::MAX).is_err() {
        return Ok(None);
    }
    Ok(Some(header))
}
