//! Sparse offset and time indexes, in Kafka's file formats.
//!
//! `.index`: 8-byte entries (relative offset u32, file position u32), one per `index.interval.bytes` of log. The
//! offset is the *last* offset of the batch starting at the position, as Kafka writes it.
//! `.timeindex`: 12-byte entries (timestamp i64, relative offset u32): the largest timestamp seen so far in the
//! segment and the offset of the batch that carried it; timestamps never decrease.
//!
//! Entries are kept in memory (a 1 GiB segment at the default interval needs ~2 MiB) and appended to the file as
//! they are made. Files are never preallocated, so a crash leaves at most a torn last entry, which
//! [`OffsetIndex::load`] and [`TimeIndex::load`] drop. Any other inconsistency is reported so the segment
//! rebuilds its indexes from the log.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::LogError;

pub const OFFSET_ENTRY_SIZE: usize = 8;
pub const TIME_ENTRY_SIZE: usize = 12;

/// An offset index entry: the last offset of the batch at `position`, relative to the segment's base offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// A time index entry: the segment's largest timestamp so far and the relative offset that carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

/// Writes entries to an index file. Entries are buffered and written [`PENDING_MAX`] bytes at a time (and at
/// every sync, truncation and drop): one small `write` per entry cost ~7% of the append throughput with 16 KiB
/// batches. Entries not yet written are harmless after a crash: recovery rebuilds the indexes of every segment
/// from the recovery point on, and older segments had theirs written and fsynced when they rolled.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    /// Shared with a background fsync after the segment rolls (see `roll_flush.rs`).
    file: Arc<File>,
    /// Bytes in the file; `pending` follows them.
    written: u64,
    pending: Vec<u8>,
}

/// Index bytes buffered before they are written.
const PENDING_MAX: usize = 4096;

impl IndexFile {
    fn create_empty(path: &Path) -> crate::Result<IndexFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| LogError::io("create index", path, e))?;
        Ok(IndexFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            written: 0,
            pending: Vec::new(),
        })
    }

    fn open_existing(path: &Path) -> crate::Result<(IndexFile, Vec<u8>)> {
        let bytes = std::fs::read(path).map_err(|e| LogError::io("read index", path, e))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| LogError::io("open index", path, e))?;
        Ok((
            IndexFile {
                path: path.to_path_buf(),
                file: Arc::new(file),
                // New entries go after the existing ones (positional writes: no cursor to get wrong).
                written: bytes.len() as u64,
                pending: Vec::new(),
            },
            bytes,
        ))
    }

    fn append(&mut self, bytes: &[u8]) -> crate::Result<()> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= PENDING_MAX {
            if let Err(e) = self.write_pending() {
                // The caller does not record this entry: keep the buffer to the entries it does record.
                self.pending.truncate(self.pending.len() - bytes.len());
                return Err(e);
            }
        }
        Ok(())
    }

    fn write_pending(&mut self) -> crate::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        use std::os::unix::fs::FileExt;
        if let Err(e) = self.file.write_all_at(&self.pending, self.written) {
            // A partial entry (disk full) would shift every later entry: cut it off. The entries stay buffered
            // and are written by the next attempt.
            let _ = self.file.set_len(self.written);
            return Err(LogError::io("append to index", &self.path, e));
        }
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    fn truncate_to(&mut self, len: u64) -> crate::Result<()> {
        if len >= self.written {
            let keep = (len - self.written).min(self.pending.len() as u64);
            self.pending.truncate(keep as usize);
            return Ok(());
        }
        self.pending.clear();
        self.file
            .set_len(len)
            .map_err(|e| LogError::io("truncate index", &self.path, e))?;
        self.written = len;
        Ok(())
    }

    fn sync(&mut self) -> crate::Result<()> {
        self.write_pending()?;
        self.file
            .sync_data()
            .map_err(|e| LogError::io("fsync index", &self.path, e))
    }

    /// Writes buffered entries and returns the file and its path, for an fsync that runs elsewhere.
    fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.write_pending()?;
        Ok((Arc::clone(&self.file), self.path.clone()))
    }
}

impl Drop for IndexFile {
    fn drop(&mut self) {
        // Best effort: a clean close has synced already; after a failure recovery rebuilds the index.
        if let Err(e) = self.write_pending() {
            tracing::warn!(error = %e, "could not write buffered index entries");
        }
    }
}

/// The offset index of one segment.
#[derive(Debug)]
pub struct OffsetIndex {
    file: IndexFile,
    entries: Vec<OffsetEntry>,
    max_entries: usize,
}

impl OffsetIndex {
    pub fn create(path: &Path, max_bytes: u32) -> crate::Result<OffsetIndex> {
        Ok(OffsetIndex {
            file: IndexFile::create_empty(path)?,
            entries: Vec::new(),
            max_entries: max_entries(max_bytes, OFFSET_ENTRY_SIZE),
        })
    }

    /// Loads an index written earlier, checking it against the segment's size: entries must increase in both
    /// offset and position and point inside the log. `Err(reason)` means: rebuild it.
    pub fn load(
        path: &Path,
        max_bytes: u32,
        log_size: u64,
    ) -> crate::Result<Result<OffsetIndex, String>> {
        let (mut file, bytes) = IndexFile::open_existing(path)?;
        let whole = bytes.len() / OFFSET_ENTRY_SIZE * OFFSET_ENTRY_SIZE;
        let mut entries = Vec::with_capacity(whole / OFFSET_ENTRY_SIZE);
        for chunk in bytes[..whole].chunks_exact(OFFSET_ENTRY_SIZE) {
            let entry = OffsetEntry {
                relative_offset: u32::from_be_bytes(chunk[0..4].try_into().expect("4")),
                position: u32::from_be_bytes(chunk[4..8].try_into().expect("4")),
            };
            if let Some(last) = entries.last() {
                let last: &OffsetEntry = last;
                if entry.relative_offset <= last.relative_offset || entry.position <= last.position
                {
                    return Ok(Err(format!(
                        "entries out of order at {:?} after {:?}",
                        entry, last
                    )));
                }
            }
            if u64::from(entry.position) >= log_size {
                return Ok(Err(format!(
                    "entry {:?} points past the log's {log_size} bytes",
                    entry
                )));
            }
            entries.push(entry);
        }
        if whole != bytes.len() {
            file.truncate_to(whole as u64)?;
        }
        Ok(Ok(OffsetIndex {
            file,
            entries,
            max_entries: max_entries(max_bytes, OFFSET_ENTRY_SIZE),
        }))
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn entries(&self) -> &[OffsetEntry] {
        &self.entries
    }

    pub fn append(&mut self, entry: OffsetEntry) -> crate::Result<()> {
        debug_assert!(self.entries.last().is_none_or(|l| l.relative_offset
            < entry.relative_offset
            && l.position < entry.position));
        let mut bytes = [0u8; OFFSET_ENTRY_SIZE];
        bytes[0..4].copy_from_slice(&entry.relative_offset.to_be_bytes());
        bytes[4..8].copy_from_slice(&entry.position.to_be_bytes());
        self.file.append(&bytes)?;
        self.entries.push(entry);
        Ok(())
    }

    /// Where to start scanning for `relative_offset`: the entry with the largest offset at or below it, or
    /// `None` (scan from the segment start).
    pub fn lookup(&self, relative_offset: u32) -> Option<OffsetEntry> {
        let count = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        count.checked_sub(1).map(|i| self.entries[i])
    }

    /// Drops entries for batches at or past `position` (the log was truncated there).
    pub fn truncate_to_position(&mut self, position: u32) -> crate::Result<()> {
        let keep = self.entries.partition_point(|e| e.position < position);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.file.truncate_to((keep * OFFSET_ENTRY_SIZE) as u64)?;
        }
        Ok(())
    }

    pub fn sync(&mut self) -> crate::Result<()> {
        self.file.sync()
    }

    /// Writes buffered entries to the file (no fsync).
    pub fn write_buffered(&mut self) -> crate::Result<()> {
        self.file.write_pending()
    }

    /// Writes buffered entries; returns the file to fsync (without the segment) and its path.
    pub fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.file.durable_handle()
    }
}

/// The time index of one segment.
#[derive(Debug)]
pub struct TimeIndex {
    file: IndexFile,
    entries: Vec<TimeEntry>,
    max_entries: usize,
}

impl TimeIndex {
    pub fn create(path: &Path, max_bytes: u32) -> crate::Result<TimeIndex> {
        Ok(TimeIndex {
            file: IndexFile::create_empty(path)?,
            entries: Vec::new(),
            max_entries: max_entries(max_bytes, TIME_ENTRY_SIZE),
        })
    }

    /// Loads a time index written earlier; entries must not decrease and must stay below `next_relative_offset`.
    pub fn load(
        path: &Path,
        max_bytes: u32,
        next_relative_offset: u64,
    ) -> crate::Result<Result<TimeIndex, String>> {
        let (mut file, bytes) = IndexFile::open_existing(path)?;
        let whole = bytes.len() / TIME_ENTRY_SIZE * TIME_ENTRY_SIZE;
        let mut entries: Vec<TimeEntry> = Vec::with_capacity(whole / TIME_ENTRY_SIZE);
        for chunk in bytes[..whole].chunks_exact(TIME_ENTRY_SIZE) {
            let entry = TimeEntry {
                timestamp: i64::from_be_bytes(chunk[0..8].try_into().expect("8")),
                relative_offset: u32::from_be_bytes(chunk[8..12].try_into().expect("4")),
            };
            if let Some(last) = entries.last() {
                if entry.timestamp < last.timestamp || entry.relative_offset < last.relative_offset
                {
                    return Ok(Err(format!(
                        "entries out of order at {:?} after {:?}",
                        entry, last
                    )));
                }
            }
            if u64::from(entry.relative_offset) >= next_relative_offset.max(1) {
                return Ok(Err(format!(
                    "entry {:?} points past the segment's last offset",
                    entry
                )));
            }
            entries.push(entry);
        }
        if whole != bytes.len() {
            file.truncate_to(whole as u64)?;
        }
        Ok(Ok(TimeIndex {
            file,
            entries,
            max_entries: max_entries(max_bytes, TIME_ENTRY_SIZE),
        }))
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn entries(&self) -> &[TimeEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Appends an entry unless it would add nothing (same or older timestamp than the last entry).
    pub fn maybe_append(&mut self, entry: TimeEntry) -> crate::Result<()> {
        if let Some(last) = self.entries.last() {
            if entry.timestamp <= last.timestamp || entry.relative_offset < last.relative_offset {
                return Ok(());
            }
        }
        let mut bytes = [0u8; TIME_ENTRY_SIZE];
        bytes[0..8].copy_from_slice(&entry.timestamp.to_be_bytes());
        bytes[8..12].copy_from_slice(&entry.relative_offset.to_be_bytes());
        self.file.append(&bytes)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The relative offset to start scanning from when looking for the first timestamp >= `timestamp`: the
    /// offset of the last entry whose timestamp is below it (earlier batches all have smaller timestamps).
    pub fn lookup(&self, timestamp: i64) -> Option<u32> {
        let count = self.entries.partition_point(|e| e.timestamp < timestamp);
        if count == 0 {
            None
        } else {
            Some(self.entries[count - 1].relative_offset)
        }
    }

    /// Drops entries at or past `relative_offset`.
    pub fn truncate_to_offset(&mut self, relative_offset: u32) -> crate::Result<()> {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.file.truncate_to((keep * TIME_ENTRY_SIZE) as u64)?;
        }
        Ok(())
    }

    pub fn sync(&mut self) -> crate::Result<()> {
        self.file.sync()
    }

    /// Writes buffered entries to the file (no fsync).
    pub fn write_buffered(&mut self) -> crate::Result<()> {
        self.file.write_pending()
    }

    /// Writes buffered entries; returns the file to fsync (without the segment) and its path.
    pub fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.file.durable_handle()
    }
}

fn max_entries(max_bytes: u32, entry_size: usize) -> usize {
    (max_bytes as usize / entry_size).max(1)
}
