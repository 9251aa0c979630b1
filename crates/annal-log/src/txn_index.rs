//! The aborted-transaction index of one segment, `<base offset>.txnindex`, in Kafka's format
//! (`TransactionIndex`): 34-byte entries `version i16 (0), producer id i64, first offset i64, last offset i64,
//! last stable offset i64`, big-endian, one per ABORT marker written into the segment, in marker order.
//!
//! A read_committed fetch asks which aborted transactions overlap the range it serves; the consumer drops their
//! records. The file is created with its first entry (most segments never have one) and is written at once, not
//! buffered: aborts are rare. Entries are also kept in memory (32 bytes each), so a query reads no file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch;
use crate::error::LogError;
use crate::file_handles::{CachedFile, FileHandles};

/// Bytes of one entry on disk.
pub const ENTRY_SIZE: usize = 34;
/// The only entry version Kafka writes.
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction: the producer's records in `[first_offset, last_offset]` (the last is the ABORT
/// marker) are to be skipped by read_committed consumers. `last_stable_offset` is the partition's first unstable
/// offset once this transaction ended; a query stops at the first entry whose LSO is past its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        out[0..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    /// Decodes one entry; `None` if it cannot be one (unknown version, offsets out of order or negative).
    fn decode(bytes: &[u8]) -> Option<AbortedTxn> {
        if bytes.len() != ENTRY_SIZE || batch::read_i16(bytes, 0) != ENTRY_VERSION {
            return None;
        }
        let entry = AbortedTxn {
            producer_id: batch::read_i64(bytes, 2),
            first_offset: batch::read_i64(bytes, 10),
            last_offset: batch::read_i64(bytes, 18),
            last_stable_offset: batch::read_i64(bytes, 26),
        };
        let sane = entry.producer_id >= 0
            && entry.first_offset >= 0
            && entry.first_offset <= entry.last_offset
            && entry.last_stable_offset >= 0;
        sane.then_some(entry)
    }
}

/// The aborted-transaction index of one segment.
#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    /// Created with the first entry; reached through the open-file budget.
    file: Option<CachedFile>,
    handles: Arc<FileHandles>,
    /// In file order: `last_offset` strictly increasing.
    entries: Vec<AbortedTxn>,
}

impl TxnIndex {
    pub fn path_in(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(crate::segment::file_name(base_offset, "txnindex"))
    }

    /// An index with no entries and no file yet (a new segment). A stale file at the path is removed.
    pub fn create(path: &Path, handles: &Arc<FileHandles>) -> crate::Result<TxnIndex> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("remove stale transaction index", path, e)),
        }
        Ok(TxnIndex {
            path: path.to_path_buf(),
            file: None,
            handles: Arc::clone(handles),
            entries: Vec::new(),
        })
    }

    /// A placeholder that touches no file, replaced by [`Self::load`] once the segment's end is known.
    pub fn detached(path: &Path, handles: &Arc<FileHandles>) -> TxnIndex {
        TxnIndex {
            path: path.to_path_buf(),
            file: None,
            handles: Arc::clone(handles),
            entries: Vec::new(),
        }
    }

    /// Loads the index at `path` (none: empty), keeping only entries that are whole, well-formed, in order and
    /// below `next_offset` (the segment's end); the file is cut after the last one kept, as Kafka's sanity check
    /// asks for, so a torn or corrupt tail never reaches a consumer. Never fails on the contents.
    pub fn load(
        path: &Path,
        next_offset: i64,
        handles: &Arc<FileHandles>,
    ) -> crate::Result<TxnIndex> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TxnIndex {
                    path: path.to_path_buf(),
                    file: None,
                    handles: Arc::clone(handles),
                    entries: Vec::new(),
                })
            }
            Err(e) => return Err(LogError::io("read transaction index", path, e)),
        };
        let entries = valid_prefix(&bytes, next_offset);
        let file = CachedFile::closed(handles, path);
        let keep = (entries.len() * ENTRY_SIZE) as u64;
        if keep != bytes.len() as u64 {
            let file = file.get()?;
            tracing::warn!(index = %path.display(), entries = entries.len(), dropped_bytes = bytes.len() as u64 - keep,
                "cutting a torn or corrupt transaction index after its last valid entry");
            file.set_len(keep)
                .map_err(|e| LogError::io("truncate transaction index", path, e))?;
        }
        Ok(TxnIndex {
            path: path.to_path_buf(),
            file: Some(file),
            handles: Arc::clone(handles),
            entries,
        })
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Appends an entry for an ABORT marker at `entry.last_offset`, which must follow every entry here.
    pub fn append(&mut self, entry: AbortedTxn) -> crate::Result<()> {
        assert!(
            entry.first_offset <= entry.last_offset,
            "an aborted transaction ends at or after its start"
        );
        assert!(
            self.entries
                .last()
                .is_none_or(|prev| entry.last_offset > prev.last_offset),
            "transaction index entries are appended in marker order"
        );
        let file = match &self.file {
            Some(file) => file.get()?,
            None => {
                let file = CachedFile::open(
                    &self.handles,
                    "create transaction index",
                    &self.path,
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true),
                )?;
                let handle = file.get()?;
                self.file = Some(file);
                handle
            }
        };
        let at = (self.entries.len() * ENTRY_SIZE) as u64;
        if let Err(e) = file.write_all_at(&entry.encode(), at) {
            let _ = file.set_len(at);
            return Err(LogError::io("append to transaction index", &self.path, e));
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The last marker offset indexed here, if any (rebuilding skips markers already indexed).
    pub fn last_marker_offset(&self) -> Option<i64> {
        self.entries.last().map(|e| e.last_offset)
    }

    /// Removes entries whose marker is at or after `offset` (the segment is truncated there).
    pub fn truncate_to(&mut self, offset: i64) -> crate::Result<()> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        if let Some(file) = &self.file {
            file.get()?
                .set_len((keep * ENTRY_SIZE) as u64)
                .map_err(|e| LogError::io("truncate transaction index", &self.path, e))?;
        }
        Ok(())
    }

    /// Adds to `out` the entries overlapping `[from_offset, upper_offset)` (Kafka's `collectAbortedTxns`).
    /// Returns true when no later segment can hold more: an entry's last stable offset passed the range.
    pub fn collect(&self, from_offset: i64, upper_offset: i64, out: &mut Vec<AbortedTxn>) -> bool {
        let start = self
            .entries
            .partition_point(|e| e.last_offset < from_offset);
        for entry in &self.entries[start..] {
            if entry.first_offset < upper_offset {
                out.push(*entry);
            }
            if entry.last_stable_offset > upper_offset {
                return true;
            }
        }
        false
    }

    pub fn sync(&self) -> crate::Result<()> {
        match &self.file {
            Some(file) => crate::disk_faults::sync_data(&*file.get()?, &self.path)
                .map_err(|e| LogError::io("fsync transaction index", &self.path, e)),
            None => Ok(()),
        }
    }

    /// The file and its path for an fsync elsewhere (see `roll_flush.rs`), if there is a file.
    pub fn durable_handle(&self) -> crate::Result<Option<(Arc<File>, PathBuf)>> {
        match &self.file {
            Some(f) => Ok(Some((f.get()?, self.path.clone()))),
            None => Ok(None),
        }
    }
}

/// The entries of `bytes` up to the first that is torn, malformed, out of order or at/after `next_offset`.
fn valid_prefix(bytes: &[u8], next_offset: i64) -> Vec<AbortedTxn> {
    let mut entries: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
    for chunk in bytes.chunks_exact(ENTRY_SIZE) {
        let Some(entry) = AbortedTxn::decode(chunk) else {
            break;
        };
        let in_order = entries
            .last()
            .is_none_or(|prev| entry.last_offset > prev.last_offset);
        if !in_order || entry.last_offset >= next_offset {
            break;
        }
        entries.push(entry);
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handles() -> Arc<FileHandles> {
        FileHandles::process_default()
    }

    fn entry(producer_id: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = TxnIndex::path_in(dir.path(), 0);
        let mut index = TxnIndex::create(&path, &handles()).unwrap();
        assert!(!path.exists(), "the file comes with the first entry");
        index.append(entry(7, 3, 9, 10)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut expected = vec![0u8, 0];
        for v in [7i64, 3, 9, 10] {
            expected.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(bytes, expected);
        assert_eq!(
            path.file_name().unwrap().to_str().unwrap(),
            "00000000000000000000.txnindex"
        );
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_cut_at_the_last_whole_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = TxnIndex::path_in(dir.path(), 0);
        let mut index = TxnIndex::create(&path, &handles()).unwrap();
        index.append(entry(1, 0, 4, 5)).unwrap();
        index.append(entry(2, 2, 8, 9)).unwrap();
        drop(index);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 1]); // torn
        std::fs::write(&path, &bytes).unwrap();
        let index = TxnIndex::load(&path, 100, &handles()).unwrap();
        assert_eq!(index.entries().len(), 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 68);

        // A second entry with a bad version, and one past the segment end: cut there.
        let mut bad = bytes[..68].to_vec();
        bad[34] = 9;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(
            TxnIndex::load(&path, 100, &handles())
                .unwrap()
                .entries()
                .len(),
            1
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 34);
        std::fs::write(&path, &bytes[..68]).unwrap();
        assert_eq!(
            TxnIndex::load(&path, 8, &handles())
                .unwrap()
                .entries()
                .len(),
            1
        );
        // Garbage of any length never panics.
        for len in 0..200 {
            std::fs::write(&path, vec![0xA5u8; len]).unwrap();
            assert!(TxnIndex::load(&path, 1 << 40, &handles())
                .unwrap()
                .entries()
                .is_empty());
        }
    }

    #[test]
    fn collect_and_truncate_follow_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TxnIndex::create(&TxnIndex::path_in(dir.path(), 0), &handles()).unwrap();
        index.append(entry(1, 0, 4, 2)).unwrap(); // another txn from 2 was still open
        index.append(entry(2, 2, 8, 9)).unwrap();
        index.append(entry(3, 20, 25, 26)).unwrap();
        let mut out = Vec::new();
        assert!(
            index.collect(5, 8, &mut out),
            "the second entry's LSO 9 > 8 ends the search"
        );
        assert_eq!(out, vec![entry(2, 2, 8, 9)]);
        out.clear();
        assert!(!index.collect(0, 100, &mut out));
        assert_eq!(out.len(), 3);
        out.clear();
        index.collect(9, 20, &mut out);
        assert!(out.is_empty(), "the third starts at the upper bound");
        index.truncate_to(8).unwrap();
        assert_eq!(index.entries().len(), 1);
        assert_eq!(
            std::fs::metadata(TxnIndex::path_in(dir.path(), 0))
                .unwrap()
                .len(),
            34
        );
    }
}
