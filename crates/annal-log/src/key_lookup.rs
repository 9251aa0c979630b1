//! Finding records by key with the key index (`key_index.rs`): [`Log::index_keys`] builds the index in
//! bounded steps (the broker calls it off the produce path), [`Log::lookup_key`] answers queries.
//!
//! A lookup asks each segment's index for candidate offsets (records whose key hash matches), reads the batches
//! that hold them (each batch inflated only as far as its last candidate, and only once while its candidates are
//! resolved: `records::LazyRecords`; only the records returned are copied) and keeps the records
//! whose key is exactly the one asked for. Its work follows the records it returns: candidates are fetched in
//! small runs, a page stops at `max_records` or `max_bytes`, and candidates that turn out to be other keys or
//! fall outside the time range are bounded by [`REJECTED_CANDIDATES_MAX`] per call (the page then ends early
//! and says where to resume).

use crate::error::LogError;
use crate::key_index;
use crate::log::Log;
use crate::records::OwnedRecord;
use crate::txn_index::AbortedTxn;

/// Candidates fetched from one segment's index at a time.
const CANDIDATES_PER_RUN: usize = 256;
/// Candidates a call may read and reject (another key with the same hash, outside the time range, aborted)
/// before it ends the page early: the bound on a lookup's wasted work.
pub const REJECTED_CANDIDATES_MAX: u64 = 4096;
/// Log bytes a lookup indexes itself (the tail the background has not reached yet) before it gives up with
/// [`LogError::KeyIndexBuilding`].
pub const LOOKUP_CATCH_UP_BYTES_MAX: u64 = 16 << 20;

/// A query of [`Log::lookup_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyQuery {
    pub key: Vec<u8>,
    /// Only the newest matching record.
    pub latest: bool,
    /// The first offset considered (a page resumes at [`KeyLookup::next_offset`]); below the log start means
    /// the log start.
    pub from_offset: i64,
    /// Offsets at or past this are never considered: the high watermark, or the last stable offset for
    /// read_committed. `None`: the log end.
    pub upper_offset: Option<i64>,
    /// Records from the first offset whose timestamp is at least this (ListOffsets semantics), and whose own
    /// timestamp is at least this.
    pub since_ms: Option<i64>,
    /// Records whose timestamp is at most this.
    pub until_ms: Option<i64>,
    /// Page size in records (at least 1).
    pub max_records: usize,
    /// Page size in key + value + header bytes; the first record is returned whatever its size.
    pub max_bytes: usize,
    /// Leave out records of aborted transactions.
    pub read_committed: bool,
}

impl KeyQuery {
    /// All records with `key`, first page of 100 records or 1 MiB.
    pub fn new(key: &[u8]) -> KeyQuery {
        KeyQuery {
            key: key.to_vec(),
            latest: false,
            from_offset: 0,
            upper_offset: None,
            since_ms: None,
            until_ms: None,
            max_records: 100,
            max_bytes: 1 << 20,
            read_committed: false,
        }
    }
}

/// The answer of [`Log::lookup_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLookup {
    /// Matching records, ascending by offset (one, the newest, for `latest`).
    pub records: Vec<OwnedRecord>,
    /// Where the next page starts, when this one was cut short; `None` when there is nothing more.
    pub next_offset: Option<i64>,
    /// The upper bound the lookup used (exclusive).
    pub upper_offset: i64,
    /// Candidates read and rejected (hash collisions, time range, aborted transactions).
    pub rejected_candidates: u64,
    /// Batches read (each decompressed once).
    pub batches_read: u64,
}

/// How far [`Log::index_keys`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyIndexProgress {
    /// Bytes read by this call: log indexed, and index files checked.
    pub indexed_bytes: u64,
    /// Segments whose index still needs work: not complete, or complete in memory but not yet written out.
    pub pending_segments: usize,
}

/// What the key index of one log costs and how far behind it is (metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyIndexStats {
    /// Log bytes not covered by the index yet (the background's backlog; a lookup indexes it first).
    pub unindexed_bytes: u64,
    /// Bytes of the checked `.keyindex` files in use.
    pub file_bytes: u64,
    /// Entries of the in-memory indexes (the active segment's, and segments whose file is not written yet).
    pub memory_entries: u64,
    /// Segments whose index is not complete.
    pub pending_segments: u64,
}

impl Log {
    /// Builds the key index for about `budget_bytes` of log (at least one batch when anything is pending):
    /// checks index files left on disk, indexes the segments not yet covered oldest first (the active one last),
    /// writes each sealed segment's file when it is complete, and rolls the log when the active segment's
    /// in-memory index is full. Does nothing when `key.index.enable` is off. Meant for a background task: each
    /// call holds the caller's log lock for a bounded time.
    pub fn index_keys(&mut self, budget_bytes: u64) -> crate::Result<KeyIndexProgress> {
        let mut progress = KeyIndexProgress::default();
        if !self.config.key_index {
            return Ok(progress);
        }
        if self.active().key_index_full() && !self.active().is_empty() {
            self.roll()?;
        }
        let limit = self.config.decompressed_batch_limit();
        let active_base = self.active().base_offset();
        for seg in self.segments.values_mut() {
            let sealed = seg.base_offset() != active_base;
            if !seg.key_index_needs_work(sealed) {
                continue;
            }
            if progress.indexed_bytes < budget_bytes {
                let left = budget_bytes - progress.indexed_bytes;
                progress.indexed_bytes += seg.key_index_step(left, limit, sealed)?;
                // An empty segment's unchecked index becomes an empty one in memory without indexing a byte.
                if !seg.key_index_complete() && seg.is_empty() {
                    seg.key_index_step(0, limit, sealed)?;
                }
            }
            if seg.key_index_needs_work(sealed) {
                progress.pending_segments += 1;
            }
        }
        Ok(progress)
    }

    /// The records whose key is exactly `query.key`, using the key index (see the module docs). Indexes the
    /// tail the background has not reached yet first (at most [`LOOKUP_CATCH_UP_BYTES_MAX`]), so the answer
    /// covers everything below the upper bound.
    ///
    /// Errors: [`LogError::KeyIndexDisabled`] without `key.index.enable`, [`LogError::KeyIndexBuilding`] while
    /// the index of the range is still being built.
    pub fn lookup_key(&mut self, query: &KeyQuery) -> crate::Result<KeyLookup> {
        if !self.config.key_index {
            return Err(LogError::KeyIndexDisabled {
                dir: self.dir.clone(),
            });
        }
        let log_end = self.log_end_offset();
        let mut from = query.from_offset.max(self.log_start_offset());
        let mut upper = query.upper_offset.unwrap_or(log_end).min(log_end);
        let mut answer = KeyLookup {
            records: Vec::new(),
            next_offset: None,
            upper_offset: upper,
            rejected_candidates: 0,
            batches_read: 0,
        };
        if let Some(since) = query.since_ms {
            match self.offset_for_timestamp(since)? {
                Some((offset, _)) => from = from.max(offset),
                None => return Ok(answer),
            }
        }
        if let Some(until) = query.until_ms {
            if let Some((offset, _)) = self.offset_for_timestamp(until.saturating_add(1))? {
                upper = upper.min(offset);
            }
        }
        if from >= upper {
            return Ok(answer);
        }
        self.catch_up_key_index(from, upper)?;

        let hash = key_index::key_hash(&query.key);
        let limit = self.config.decompressed_batch_limit();
        let mut aborted: Option<Vec<AbortedTxn>> = None;
        let mut held: Option<crate::records::LazyRecords> = None;
        let mut bytes = 0usize;
        let max_records = query.max_records.max(1);
        let bases: Vec<i64> = {
            let first = self
                .segments
                .range(..=from)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b);
            let mut b: Vec<i64> = self.segments.range(first..upper).map(|(b, _)| *b).collect();
            if query.latest {
                b.reverse();
            }
            b
        };
        for base in bases {
            let seg = &self.segments[&base];
            let (mut lo, mut hi) = (from.max(base), upper.min(seg.next_offset()));
            while lo < hi {
                let candidates =
                    seg.key_candidates(hash, lo, hi, query.latest, CANDIDATES_PER_RUN)?;
                let Some(&last) = candidates.last() else {
                    break;
                };
                if query.latest {
                    hi = last;
                } else {
                    lo = last + 1;
                }
                for offset in candidates {
                    if answer.rejected_candidates >= REJECTED_CANDIDATES_MAX {
                        // Bounded waste: the page ends here and says where to go on.
                        answer.next_offset = (!query.latest).then_some(offset);
                        return Ok(answer);
                    }
                    let covered = held.as_ref().is_some_and(|h| {
                        h.header().base_offset <= offset && offset <= h.header().last_offset()
                    });
                    if !covered {
                        held = seg.read_batch_records(offset, limit)?;
                        answer.batches_read += 1;
                    }
                    let Some(batch) = held.as_mut() else {
                        answer.rejected_candidates += 1;
                        continue;
                    };
                    let header = *batch.header();
                    let found = match batch.record_at(offset) {
                        Ok(found) => found,
                        Err(e) => {
                            tracing::warn!(segment_base_offset = base, offset, error = %e,
                                "cannot read a record the key index points at; skipping it");
                            None
                        }
                    };
                    let Some(record) = found.filter(|r| {
                        r.key == Some(query.key.as_slice())
                            && query.since_ms.is_none_or(|s| r.timestamp >= s)
                            && query.until_ms.is_none_or(|u| r.timestamp <= u)
                    }) else {
                        answer.rejected_candidates += 1;
                        continue;
                    };
                    let record = OwnedRecord::from(&record);
                    if query.read_committed && header.is_transactional() {
                        let entries =
                            aborted.get_or_insert_with(|| self.aborted_transaction_entries());
                        let pid = header.producer_id;
                        if entries.iter().any(|t| {
                            t.producer_id == pid
                                && t.first_offset <= offset
                                && offset <= t.last_offset
                        }) {
                            answer.rejected_candidates += 1;
                            continue;
                        }
                    }
                    let size = record.key.as_ref().map_or(0, Vec::len)
                        + record.value.as_ref().map_or(0, Vec::len)
                        + record.headers.len();
                    if !answer.records.is_empty() && bytes + size > query.max_bytes {
                        answer.next_offset = Some(offset);
                        return Ok(answer);
                    }
                    bytes += size;
                    answer.records.push(record);
                    if query.latest {
                        return Ok(answer);
                    }
                    if answer.records.len() >= max_records {
                        answer.next_offset = Some(offset + 1).filter(|&n| n < upper);
                        return Ok(answer);
                    }
                }
            }
        }
        Ok(answer)
    }

    /// Makes sure every segment overlapping `[from, upper)` has a complete key index, indexing at most
    /// [`LOOKUP_CATCH_UP_BYTES_MAX`] of log here.
    fn catch_up_key_index(&mut self, from: i64, upper: i64) -> crate::Result<()> {
        let pending = |log: &Log| {
            log.segments
                .values()
                .filter(|s| s.next_offset() > from && s.base_offset() < upper)
                .filter(|s| !s.key_index_complete())
                .count()
        };
        let mut spent = 0u64;
        while pending(self) > 0 && spent < LOOKUP_CATCH_UP_BYTES_MAX {
            let progress = self.index_keys(LOOKUP_CATCH_UP_BYTES_MAX - spent)?;
            if progress.indexed_bytes == 0 && pending(self) > 0 {
                // A file check or a full active index made no progress in bytes; one more pass settles it.
                let again = self.index_keys(LOOKUP_CATCH_UP_BYTES_MAX - spent)?;
                if again.indexed_bytes == 0 {
                    break;
                }
                spent += again.indexed_bytes;
            }
            spent += progress.indexed_bytes;
        }
        let left = pending(self);
        if left > 0 {
            return Err(LogError::KeyIndexBuilding {
                dir: self.dir.clone(),
                pending_segments: left,
                segments: self.segments.len(),
            });
        }
        Ok(())
    }

    /// The key index's backlog and size, summed over the segments (all zero when `key.index.enable` is off).
    pub fn key_index_stats(&self) -> KeyIndexStats {
        let mut stats = KeyIndexStats::default();
        for s in self.segments.values() {
            stats.unindexed_bytes += s.key_index_unindexed_bytes();
            stats.file_bytes += s.key_index_file_bytes();
            stats.memory_entries += s.key_index_memory_entries().unwrap_or(0) as u64;
            stats.pending_segments += u64::from(!s.key_index_complete());
        }
        stats
    }

    /// Each segment's key index: base offset, state (`off`, `unverified`, `in memory`, `file`), whether it
    /// covers the whole segment, and in-memory entries.
    pub fn key_index_status(&self) -> Vec<(i64, &'static str, bool, Option<usize>)> {
        self.segments
            .values()
            .map(|s| {
                (
                    s.base_offset(),
                    s.key_index_state(),
                    s.key_index_complete(),
                    s.key_index_memory_entries(),
                )
            })
            .collect()
    }
}
