//! Sparse offset and time indexes, in Kafka's file formats.
//!
//! `.index`: 8-byte entries (relative offset u32, file position u32), one per `index.interval.bytes` of log. The
//! offset is the *last* offset of the batch starting at the position, as Kafka writes it.
//! `.timeindex`: 12-byte entries (timestamp i64, relative offset u32): the largest timestamp seen so far in the
//! segment and the offset of the batch that carried it; timestamps never decrease.
//!
//! The active segment's entries are kept in memory (a 1 GiB segment at the default interval needs ~2 MiB) and
//! appended to the file as they are made. A sealed segment's index ([`OffsetIndex::release_memory`], at roll and
//! after every open) keeps only its entry count: lookups binary-search the file with positioned reads, so the
//! page cache, not the heap, holds the indexes of retained data (decision 0019). Files are never preallocated,
//! so a crash leaves at most a torn last entry, which [`OffsetIndex::load`] and [`TimeIndex::load`] drop. Any
//! other inconsistency is reported so the segment rebuilds its indexes from the log; a file is checked in full
//! before its entries are trusted, whether they then stay in memory or not.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::LogError;
use crate::file_handles::{CachedFile, FileHandles};

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

/// An entry's fixed-size big-endian encoding.
trait IndexEntry: Copy + std::fmt::Debug {
    const SIZE: usize;
    fn decode(bytes: &[u8]) -> Self;
    fn encode(&self, out: &mut Vec<u8>);
}

impl IndexEntry for OffsetEntry {
    const SIZE: usize = OFFSET_ENTRY_SIZE;
    fn decode(b: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
}

impl IndexEntry for TimeEntry {
    const SIZE: usize = TIME_ENTRY_SIZE;
    fn decode(b: &[u8]) -> Self {
        TimeEntry {
            timestamp: i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            relative_offset: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
}

/// Writes entries to an index file. Entries are buffered and written [`PENDING_MAX`] bytes at a time (and at
/// every sync, truncation, release and drop): one small `write` per entry cost ~7% of the append throughput
/// with 16 KiB batches. Entries not yet written are harmless after a crash: recovery rebuilds the indexes of
/// every segment from the recovery point on, and older segments had theirs written and fsynced when they rolled.
#[derive(Debug)]
struct IndexFile {
    /// Reached through the process's open-file budget (`file_handles.rs`).
    file: CachedFile,
    /// Bytes in the file; `pending` follows them.
    written: u64,
    pending: Vec<u8>,
}

/// Index bytes buffered before they are written.
const PENDING_MAX: usize = 4096;

impl IndexFile {
    fn create_empty(handles: &Arc<FileHandles>, path: &Path) -> crate::Result<IndexFile> {
        let file = CachedFile::open(
            handles,
            "create index",
            path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true),
        )?;
        Ok(IndexFile {
            file,
            written: 0,
            pending: Vec::new(),
        })
    }

    /// The file's bytes (read through a short-lived descriptor) and the index over it, not opened until used.
    fn open_existing(
        handles: &Arc<FileHandles>,
        path: &Path,
    ) -> crate::Result<(IndexFile, Vec<u8>)> {
        let bytes = std::fs::read(path).map_err(|e| LogError::io("read index", path, e))?;
        Ok((
            IndexFile {
                file: CachedFile::closed(handles, path),
                // New entries go after the existing ones (positional writes: no cursor to get wrong).
                written: bytes.len() as u64,
                pending: Vec::new(),
            },
            bytes,
        ))
    }

    fn path(&self) -> &Path {
        self.file.path()
    }

    fn handle(&self) -> crate::Result<Arc<File>> {
        self.file.get()
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
        let file = self.handle()?;
        if let Err(e) =
            crate::disk_faults::write_all_at(&file, self.path(), &self.pending, self.written)
        {
            // A partial entry (disk full) would shift every later entry: cut it off. The entries stay buffered
            // and are written by the next attempt.
            let _ = file.set_len(self.written);
            return Err(LogError::io("append to index", self.path(), e));
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
        self.handle()?
            .set_len(len)
            .map_err(|e| LogError::io("truncate index", self.path(), e))?;
        self.written = len;
        Ok(())
    }

    /// Reads `out.len()` bytes at `at`, which must be written already (not pending).
    fn read_at(&self, out: &mut [u8], at: u64) -> crate::Result<()> {
        debug_assert!(at + out.len() as u64 <= self.written);
        self.handle()?
            .read_exact_at(out, at)
            .map_err(|e| LogError::io("read index", self.path(), e))
    }

    fn sync(&mut self) -> crate::Result<()> {
        self.write_pending()?;
        crate::disk_faults::sync_data(&*self.handle()?, self.path())
            .map_err(|e| LogError::io("fsync index", self.path(), e))
    }

    /// Writes buffered entries and returns the file and its path, for an fsync that runs elsewhere.
    fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.write_pending()?;
        Ok((self.handle()?, self.path().to_path_buf()))
    }

    /// Forgets buffered entries (the segment's files are being deleted).
    fn discard_pending(&mut self) {
        self.pending.clear();
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

/// Where an index's entries are: in memory (the active segment) or only in the file (a sealed one).
#[derive(Debug)]
enum Resident<E> {
    Memory(Vec<E>),
    /// Every entry is written (nothing pending); `count` of them.
    OnDisk {
        count: usize,
    },
}

/// The part the offset and time indexes share: entries in memory or read from the file on demand.
#[derive(Debug)]
struct SparseIndex<E> {
    file: IndexFile,
    resident: Resident<E>,
    max_entries: usize,
}

impl<E: IndexEntry> SparseIndex<E> {
    fn create(handles: &Arc<FileHandles>, path: &Path, max_bytes: u32) -> crate::Result<Self> {
        Ok(SparseIndex {
            file: IndexFile::create_empty(handles, path)?,
            resident: Resident::Memory(Vec::new()),
            max_entries: max_entries(max_bytes, E::SIZE),
        })
    }

    /// Reads the file, decoding whole entries and checking each against the previous one with `check`
    /// (`Err(reason)`: rebuild). A torn last entry is cut off.
    fn load(
        handles: &Arc<FileHandles>,
        path: &Path,
        max_bytes: u32,
        check: impl Fn(Option<&E>, &E) -> Result<(), String>,
    ) -> crate::Result<Result<Self, String>> {
        let (mut file, bytes) = IndexFile::open_existing(handles, path)?;
        let whole = bytes.len() / E::SIZE * E::SIZE;
        let mut entries: Vec<E> = Vec::with_capacity(whole / E::SIZE);
        for chunk in bytes[..whole].chunks_exact(E::SIZE) {
            let entry = E::decode(chunk);
            if let Err(reason) = check(entries.last(), &entry) {
                return Ok(Err(reason));
            }
            entries.push(entry);
        }
        if whole != bytes.len() {
            file.truncate_to(whole as u64)?;
        }
        Ok(Ok(SparseIndex {
            file,
            resident: Resident::Memory(entries),
            max_entries: max_entries(max_bytes, E::SIZE),
        }))
    }

    fn len(&self) -> usize {
        match &self.resident {
            Resident::Memory(entries) => entries.len(),
            Resident::OnDisk { count } => *count,
        }
    }

    fn is_full(&self) -> bool {
        self.len() >= self.max_entries
    }

    fn is_in_memory(&self) -> bool {
        matches!(self.resident, Resident::Memory(_))
    }

    fn read_entry(file: &File, path: &Path, i: usize) -> crate::Result<E> {
        let mut buf = [0u8; 16];
        let buf = &mut buf[..E::SIZE];
        file.read_exact_at(buf, (i * E::SIZE) as u64)
            .map_err(|e| LogError::io("read index", path, e))?;
        Ok(E::decode(buf))
    }

    fn get(&self, i: usize) -> crate::Result<E> {
        assert!(i < self.len(), "index entry {i} of {}", self.len());
        match &self.resident {
            Resident::Memory(entries) => Ok(entries[i]),
            Resident::OnDisk { .. } => {
                let mut buf = [0u8; 16];
                self.file
                    .read_at(&mut buf[..E::SIZE], (i * E::SIZE) as u64)?;
                Ok(E::decode(&buf[..E::SIZE]))
            }
        }
    }

    fn last(&self) -> crate::Result<Option<E>> {
        match self.len() {
            0 => Ok(None),
            n => self.get(n - 1).map(Some),
        }
    }

    /// The number of leading entries for which `pred` holds (entries are sorted so it holds for a prefix):
    /// `Vec::partition_point` in memory, the same binary search with one positioned read per probe on disk.
    fn partition_point(&self, pred: impl Fn(&E) -> bool) -> crate::Result<usize> {
        match &self.resident {
            Resident::Memory(entries) => Ok(entries.partition_point(pred)),
            Resident::OnDisk { count } => {
                if *count == 0 {
                    return Ok(0);
                }
                let file = self.file.handle()?;
                let (mut low, mut high) = (0usize, *count);
                while low < high {
                    let mid = low + (high - low) / 2;
                    if pred(&Self::read_entry(&file, self.file.path(), mid)?) {
                        low = mid + 1;
                    } else {
                        high = mid;
                    }
                }
                Ok(low)
            }
        }
    }

    /// The entries in memory, reading them back from the file if they were released (an append or a
    /// truncation made a sealed segment the active one again).
    fn in_memory(&mut self) -> crate::Result<&mut Vec<E>> {
        if let Resident::OnDisk { count } = self.resident {
            let mut bytes = vec![0u8; count * E::SIZE];
            if count > 0 {
                self.file.read_at(&mut bytes, 0)?;
            }
            let entries = bytes.chunks_exact(E::SIZE).map(E::decode).collect();
            self.resident = Resident::Memory(entries);
        }
        match &mut self.resident {
            Resident::Memory(entries) => Ok(entries),
            Resident::OnDisk { .. } => unreachable!("made resident above"),
        }
    }

    fn push(&mut self, entry: E) -> crate::Result<()> {
        self.in_memory()?;
        let mut bytes = Vec::with_capacity(E::SIZE);
        entry.encode(&mut bytes);
        self.file.append(&bytes)?;
        self.in_memory()?.push(entry);
        Ok(())
    }

    /// Keeps the first `keep` entries.
    fn truncate(&mut self, keep: usize) -> crate::Result<()> {
        if keep >= self.len() {
            return Ok(());
        }
        self.file.truncate_to((keep * E::SIZE) as u64)?;
        match &mut self.resident {
            Resident::Memory(entries) => entries.truncate(keep),
            Resident::OnDisk { count } => *count = keep,
        }
        Ok(())
    }

    /// Writes every entry to the file and drops the in-memory copy; lookups read the file from now on. If the
    /// write fails the entries stay in memory (still exact) and the error is returned.
    fn release_memory(&mut self) -> crate::Result<()> {
        if let Resident::Memory(entries) = &self.resident {
            let count = entries.len();
            self.file.write_pending()?;
            debug_assert_eq!(self.file.written, (count * E::SIZE) as u64);
            self.resident = Resident::OnDisk { count };
        }
        Ok(())
    }
}

/// The offset index of one segment.
#[derive(Debug)]
pub struct OffsetIndex {
    index: SparseIndex<OffsetEntry>,
}

impl OffsetIndex {
    pub fn create(
        handles: &Arc<FileHandles>,
        path: &Path,
        max_bytes: u32,
    ) -> crate::Result<OffsetIndex> {
        Ok(OffsetIndex {
            index: SparseIndex::create(handles, path, max_bytes)?,
        })
    }

    /// Loads an index written earlier, checking it against the segment's size: entries must increase in both
    /// offset and position and point inside the log. `Err(reason)` means: rebuild it.
    pub fn load(
        handles: &Arc<FileHandles>,
        path: &Path,
        max_bytes: u32,
        log_size: u64,
    ) -> crate::Result<Result<OffsetIndex, String>> {
        let index = SparseIndex::load(handles, path, max_bytes, |last, entry: &OffsetEntry| {
            if let Some(last) = last {
                if entry.relative_offset <= last.relative_offset || entry.position <= last.position
                {
                    return Err(format!("entries out of order at {entry:?} after {last:?}"));
                }
            }
            if u64::from(entry.position) >= log_size {
                return Err(format!(
                    "entry {entry:?} points past the log's {log_size} bytes"
                ));
            }
            Ok(())
        })?;
        Ok(index.map(|index| OffsetIndex { index }))
    }

    pub fn is_full(&self) -> bool {
        self.index.is_full()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn last(&self) -> crate::Result<Option<OffsetEntry>> {
        self.index.last()
    }

    pub fn get(&self, i: usize) -> crate::Result<OffsetEntry> {
        self.index.get(i)
    }

    /// The number of leading entries for which `pred` holds (see [`slice::partition_point`]).
    pub fn partition_point(&self, pred: impl Fn(&OffsetEntry) -> bool) -> crate::Result<usize> {
        self.index.partition_point(pred)
    }

    pub fn is_in_memory(&self) -> bool {
        self.index.is_in_memory()
    }

    pub fn append(&mut self, entry: OffsetEntry) -> crate::Result<()> {
        debug_assert!(self.last().ok().flatten().is_none_or(|l| l.relative_offset
            < entry.relative_offset
            && l.position < entry.position));
        self.index.push(entry)
    }

    /// Where to start scanning for `relative_offset`: the entry with the largest offset at or below it, or
    /// `None` (scan from the segment start).
    pub fn lookup(&self, relative_offset: u32) -> crate::Result<Option<OffsetEntry>> {
        let count = self
            .index
            .partition_point(|e| e.relative_offset <= relative_offset)?;
        count.checked_sub(1).map(|i| self.index.get(i)).transpose()
    }

    /// Drops entries for batches at or past `position` (the log was truncated there).
    pub fn truncate_to_position(&mut self, position: u32) -> crate::Result<()> {
        let keep = self.index.partition_point(|e| e.position < position)?;
        self.index.truncate(keep)
    }

    /// Drops the in-memory entries of a sealed segment; lookups read the file (see the module doc).
    pub fn release_memory(&mut self) -> crate::Result<()> {
        self.index.release_memory()
    }

    pub fn sync(&mut self) -> crate::Result<()> {
        self.index.file.sync()
    }

    /// Writes buffered entries to the file (no fsync).
    pub fn write_buffered(&mut self) -> crate::Result<()> {
        self.index.file.write_pending()
    }

    /// Writes buffered entries; returns the file to fsync (without the segment) and its path.
    pub fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.index.file.durable_handle()
    }

    /// Forgets buffered entries: the files are about to be deleted.
    pub fn discard_buffered(&mut self) {
        self.index.file.discard_pending()
    }
}

/// The time index of one segment.
#[derive(Debug)]
pub struct TimeIndex {
    index: SparseIndex<TimeEntry>,
}

impl TimeIndex {
    pub fn create(
        handles: &Arc<FileHandles>,
        path: &Path,
        max_bytes: u32,
    ) -> crate::Result<TimeIndex> {
        Ok(TimeIndex {
            index: SparseIndex::create(handles, path, max_bytes)?,
        })
    }

    /// Loads a time index written earlier; entries must not decrease and must stay below `next_relative_offset`.
    pub fn load(
        handles: &Arc<FileHandles>,
        path: &Path,
        max_bytes: u32,
        next_relative_offset: u64,
    ) -> crate::Result<Result<TimeIndex, String>> {
        let index = SparseIndex::load(handles, path, max_bytes, |last, entry: &TimeEntry| {
            if let Some(last) = last {
                if entry.timestamp < last.timestamp || entry.relative_offset < last.relative_offset
                {
                    return Err(format!("entries out of order at {entry:?} after {last:?}"));
                }
            }
            if u64::from(entry.relative_offset) >= next_relative_offset.max(1) {
                return Err(format!(
                    "entry {entry:?} points past the segment's last offset"
                ));
            }
            Ok(())
        })?;
        Ok(index.map(|index| TimeIndex { index }))
    }

    pub fn is_full(&self) -> bool {
        self.index.is_full()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn last(&self) -> crate::Result<Option<TimeEntry>> {
        self.index.last()
    }

    pub fn is_in_memory(&self) -> bool {
        self.index.is_in_memory()
    }

    /// Appends an entry unless it would add nothing (same or older timestamp than the last entry).
    pub fn maybe_append(&mut self, entry: TimeEntry) -> crate::Result<()> {
        if let Some(last) = self.last()? {
            if entry.timestamp <= last.timestamp || entry.relative_offset < last.relative_offset {
                return Ok(());
            }
        }
        self.index.push(entry)
    }

    /// The relative offset to start scanning from when looking for the first timestamp >= `timestamp`: the
    /// offset of the last entry whose timestamp is below it (earlier batches all have smaller timestamps).
    pub fn lookup(&self, timestamp: i64) -> crate::Result<Option<u32>> {
        let count = self.index.partition_point(|e| e.timestamp < timestamp)?;
        match count {
            0 => Ok(None),
            n => Ok(Some(self.index.get(n - 1)?.relative_offset)),
        }
    }

    /// Drops entries at or past `relative_offset`.
    pub fn truncate_to_offset(&mut self, relative_offset: u32) -> crate::Result<()> {
        let keep = self
            .index
            .partition_point(|e| e.relative_offset < relative_offset)?;
        self.index.truncate(keep)
    }

    /// Drops the in-memory entries of a sealed segment; lookups read the file (see the module doc).
    pub fn release_memory(&mut self) -> crate::Result<()> {
        self.index.release_memory()
    }

    pub fn sync(&mut self) -> crate::Result<()> {
        self.index.file.sync()
    }

    /// Writes buffered entries to the file (no fsync).
    pub fn write_buffered(&mut self) -> crate::Result<()> {
        self.index.file.write_pending()
    }

    /// Writes buffered entries; returns the file to fsync (without the segment) and its path.
    pub fn durable_handle(&mut self) -> crate::Result<(Arc<File>, PathBuf)> {
        self.index.file.durable_handle()
    }

    /// Forgets buffered entries: the files are about to be deleted.
    pub fn discard_buffered(&mut self) {
        self.index.file.discard_pending()
    }
}

fn max_entries(max_bytes: u32, entry_size: usize) -> usize {
    (max_bytes as usize / entry_size).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Append an entry this far past the previous one (offset, position, timestamp steps).
        Append(u32, u32, i64),
        /// Truncate at this fraction (in 1/256ths) of the entries.
        Truncate(u8),
        /// Seal: drop the in-memory entries of the lazy pair.
        Release,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (1u32..50, 1u32..5000, 0i64..3).prop_map(|(o, p, t)| Op::Append(o, p, t)),
            1 => any::<u8>().prop_map(Op::Truncate),
            2 => Just(Op::Release),
        ]
    }

    /// An offset and a time index in the same state, one kept in memory, one released after every change.
    struct Pair {
        offsets: OffsetIndex,
        times: TimeIndex,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn lazily_read_indexes_answer_as_the_in_memory_ones(ops in proptest::collection::vec(op(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            let handles = FileHandles::new(FILE_HANDLES_MIN_FOR_TEST);
            let make = |name: &str| Pair {
                offsets: OffsetIndex::create(&handles, &dir.path().join(format!("{name}.index")), 1 << 20).unwrap(),
                times: TimeIndex::create(&handles, &dir.path().join(format!("{name}.timeindex")), 1 << 20).unwrap(),
            };
            let (mut eager, mut lazy) = (make("eager"), make("lazy"));
            let (mut offset, mut position, mut timestamp) = (0u32, 0u32, 1_000i64);
            for op in ops {
                match op {
                    Op::Append(o, p, t) => {
                        offset += o;
                        position += p;
                        timestamp += t;
                        for pair in [&mut eager, &mut lazy] {
                            pair.offsets.append(OffsetEntry { relative_offset: offset, position }).unwrap();
                            pair.times.maybe_append(TimeEntry { timestamp, relative_offset: offset }).unwrap();
                        }
                    }
                    Op::Truncate(at) => {
                        let n = eager.offsets.len();
                        let cut = n * usize::from(at) / 256;
                        if cut < n {
                            let entry = eager.offsets.get(cut).unwrap();
                            for pair in [&mut eager, &mut lazy] {
                                pair.offsets.truncate_to_position(entry.position).unwrap();
                                pair.times.truncate_to_offset(entry.relative_offset).unwrap();
                            }
                            offset = eager.offsets.last().unwrap().map_or(0, |e| e.relative_offset);
                            position = eager.offsets.last().unwrap().map_or(0, |e| e.position);
                            timestamp = eager.times.last().unwrap().map_or(timestamp, |e| e.timestamp);
                        }
                    }
                    Op::Release => {
                        lazy.offsets.release_memory().unwrap();
                        lazy.times.release_memory().unwrap();
                        prop_assert!(!lazy.offsets.is_in_memory() && !lazy.times.is_in_memory());
                    }
                }
                prop_assert!(eager.offsets.is_in_memory());
                prop_assert_eq!(eager.offsets.len(), lazy.offsets.len());
                prop_assert_eq!(eager.times.len(), lazy.times.len());
                prop_assert_eq!(eager.offsets.last().unwrap(), lazy.offsets.last().unwrap());
                prop_assert_eq!(eager.times.last().unwrap(), lazy.times.last().unwrap());
                for q in (0..offset.saturating_add(3)).step_by(7) {
                    prop_assert_eq!(eager.offsets.lookup(q).unwrap(), lazy.offsets.lookup(q).unwrap());
                }
                for t in 990..timestamp + 3 {
                    prop_assert_eq!(eager.times.lookup(t).unwrap(), lazy.times.lookup(t).unwrap());
                }
            }
            // What the lazy index wrote is what a load reads back.
            lazy.offsets.write_buffered().unwrap();
            let loaded = OffsetIndex::load(&handles, &dir.path().join("lazy.index"), 1 << 20, u64::MAX).unwrap().unwrap();
            prop_assert_eq!(loaded.len(), eager.offsets.len());
            for i in 0..loaded.len() {
                prop_assert_eq!(loaded.get(i).unwrap(), eager.offsets.get(i).unwrap());
            }
        }
    }

    const FILE_HANDLES_MIN_FOR_TEST: usize = crate::file_handles::FILE_HANDLES_MIN;
}
