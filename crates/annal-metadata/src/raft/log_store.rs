//! openraft's log storage ([`RaftLogStorage`]) on an `annal_log::Log`: one v2 batch per entry, partition
//! leader epoch = term. Kafka offsets count records and raft indexes count entries, so the store keeps a map
//! from raft index to the entry's base offset, rebuilt at open by reading the log (which is purged at every
//! snapshot, so it is at most `snapshot_every_entries` entries long). The vote, the committed log id and the
//! purge point live in the `quorum-state` file beside the segments.

// openraft's trait methods return its `StorageError` (over 200 bytes); the helpers share that type.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use annal_log::{Log, LogConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, RaftLogReader, StorageIOError, Vote};
use parking_lot::Mutex;

use super::entry_codec;
use super::state_file::QuorumState;
use super::types::{Entry, StorageError, TypeConfig};
use crate::env::DiskIo;

/// The metadata log and its small state file. Cloned into openraft (the store and its readers) and kept by
/// [`super::Quorum`] (status, and closing the log at shutdown).
#[derive(Clone)]
pub(crate) struct LogStore {
    shared: Arc<Shared>,
    /// Where appends and their fsync run (`env::DiskIo`).
    disk_io: DiskIo,
}

struct Shared {
    dir: PathBuf,
    /// `None` once closed at shutdown: a late call then fails instead of writing behind a new owner's back.
    log: Mutex<Option<Log>>,
    state: Mutex<QuorumState>,
    /// The last entry in the log, or the purge point when the log is empty.
    last_log_id: Mutex<Option<LogId<u64>>>,
    /// Raft index -> Kafka base offset of every entry in the log. Lock order: `log`, then `offsets`.
    offsets: Mutex<BTreeMap<u64, i64>>,
    /// A read for replication stops after this many bytes of batches (one entry always goes).
    read_bytes_max: usize,
}

fn io_err(context: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::error(format!("{context}: {e}"))).into()
}

fn read_err(context: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(openraft::AnyError::error(format!("{context}: {e}"))).into()
}

impl LogStore {
    /// Runs appends and their fsync per `disk_io` (the blocking pool unless a simulation says inline).
    pub fn with_disk_io(mut self, disk_io: DiskIo) -> LogStore {
        self.disk_io = disk_io;
        self
    }

    /// Opens (or creates) the metadata log in `dir` and settles a purge that a crash interrupted.
    pub fn open(dir: &Path, max_entry_bytes: usize) -> Result<LogStore, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let state = QuorumState::read(dir)?;
        let config = LogConfig {
            max_message_bytes: u32::try_from(max_entry_bytes).unwrap_or(u32::MAX),
            // Raft decides what is kept: no time or size retention on the metadata log.
            retention_ms: -1,
            retention_bytes: -1,
            ..LogConfig::default()
        };
        let log = Log::open(dir, config).map_err(|e| format!("open the metadata log: {e}"))?;
        let store = LogStore {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                log: Mutex::new(Some(log)),
                state: Mutex::new(state.clone()),
                last_log_id: Mutex::new(None),
                offsets: Mutex::new(BTreeMap::new()),
                read_bytes_max: max_entry_bytes.max(1),
            }),
            disk_io: DiskIo::default(),
        };
        store.build_offsets().map_err(|e| e.to_string())?;
        if let Some(purged) = state.last_purged {
            store.purge_files(purged).map_err(|e| e.to_string())?;
        }
        let last = store.read_last_log_id().map_err(|e| e.to_string())?;
        *store.shared.last_log_id.lock() = last;
        Ok(store)
    }

    /// The saved state (vote, committed, purge point).
    pub fn state(&self) -> QuorumState {
        self.shared.state.lock().clone()
    }

    /// True when this node has never taken part in a quorum (no vote, no entry, no snapshot).
    pub fn is_pristine(&self) -> bool {
        let state = self.shared.state.lock();
        state.vote.is_none()
            && state.last_purged.is_none()
            && self.shared.last_log_id.lock().is_none()
    }

    /// Flushes and closes the log cleanly; later calls fail.
    pub fn close(&self) {
        if let Some(log) = self.shared.log.lock().take() {
            if let Err(e) = log.close() {
                tracing::warn!(error = %e, "closing the metadata log failed; the next start recovers it");
            }
        }
    }

    fn with_log<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut guard = self.shared.log.lock();
        let log = guard
            .as_mut()
            .ok_or_else(|| io_err("metadata log", "closed (the quorum is shutting down)"))?;
        f(log)
    }

    fn update_state(&self, f: impl FnOnce(&mut QuorumState)) -> Result<(), StorageError> {
        let mut state = self.shared.state.lock();
        let mut next = state.clone();
        f(&mut next);
        next.write(&self.shared.dir)
            .map_err(|e| io_err("write quorum-state", e))?;
        *state = next;
        Ok(())
    }

    fn read_last_log_id(&self) -> Result<Option<LogId<u64>>, StorageError> {
        let purged = self.shared.state.lock().last_purged;
        let Some(last_index) = self.shared.offsets.lock().keys().next_back().copied() else {
            return Ok(purged);
        };
        let last = self.read_entries(last_index, last_index + 1, usize::MAX)?;
        Ok(last.last().map(|e| e.log_id).or(purged))
    }

    /// Reads the whole log once to learn each entry's base offset.
    fn build_offsets(&self) -> Result<(), StorageError> {
        let mut offsets = BTreeMap::new();
        self.scan(None, |entry, offset| {
            if let Some((&prev, _)) = offsets.iter().next_back() {
                if entry.log_id.index != prev + 1 {
                    return Err(read_err(
                        "open the metadata log",
                        format!(
                            "entry {} follows entry {prev}: the log has a hole",
                            entry.log_id.index
                        ),
                    ));
                }
            }
            offsets.insert(entry.log_id.index, offset);
            Ok(true)
        })?;
        *self.shared.offsets.lock() = offsets;
        Ok(())
    }

    /// Calls `f(entry, base offset)` for each entry from Kafka offset `from` (the log start when `None`)
    /// until it returns false or the log ends.
    fn scan(
        &self,
        from: Option<i64>,
        mut f: impl FnMut(Entry, i64) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        self.with_log(|log| {
            let end = log.log_end_offset();
            let mut next = from
                .unwrap_or(log.log_start_offset())
                .max(log.log_start_offset());
            while next < end {
                let read = log
                    .read(next, SCAN_CHUNK_BYTES, None)
                    .map_err(|e| read_err("read the metadata log", e))?;
                let Some(slice) = read.slice else { break };
                let bytes = slice
                    .read_to_vec()
                    .map_err(|e| read_err("read the metadata log", e))?;
                let mut at = 0;
                while at < bytes.len() {
                    let header = annal_log::batch::BatchHeader::parse(&bytes[at..])
                        .ok_or_else(|| read_err("read the metadata log", "truncated batch"))?;
                    let (entry, used) = entry_codec::decode(&bytes[at..]).map_err(|e| {
                        read_err(
                            &format!("decode the entry at offset {}", header.base_offset),
                            e,
                        )
                    })?;
                    at += used;
                    if header.next_offset() <= next {
                        continue; // the read began inside an earlier batch
                    }
                    next = header.next_offset();
                    if !f(entry, header.base_offset)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }

    /// Entries in `[start, end)` that the log holds, stopping after `bytes_max` bytes (at least one entry).
    fn read_entries(
        &self,
        start: u64,
        end: u64,
        bytes_max: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        // An empty or inverted range holds nothing (BTreeMap::range would panic on start > end). openraft asks
        // for one in release builds when a voter's state went backwards under it: found by the simulator with a
        // voter restarting on a wiped disk (`annal-sim --plant-wipe-disk`, docs/decisions/0011-simulation.md).
        if start >= end {
            return Ok(Vec::new());
        }
        let from = self
            .shared
            .offsets
            .lock()
            .range(start..end)
            .next()
            .map(|(_, o)| *o);
        let Some(from) = from else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::new();
        let mut bytes_read = 0usize;
        let mut previous: Option<u64> = None;
        self.scan(Some(from), |entry, _| {
            let index = entry.log_id.index;
            if index >= end {
                return Ok(false);
            }
            if index < start {
                return Ok(true);
            }
            if previous.is_some_and(|p| index != p + 1) {
                return Err(read_err(
                    "read the metadata log",
                    format!("entry {index} follows entry {previous:?}: the log has a hole"),
                ));
            }
            previous = Some(index);
            bytes_read += entry_bytes(&entry);
            entries.push(entry);
            Ok(bytes_read < bytes_max)
        })?;
        Ok(entries)
    }

    /// Removes every entry up to `purged` (inclusive) from the segments (all of them when the log does not
    /// reach past it, as after installing a snapshot).
    fn purge_files(&self, purged: LogId<u64>) -> Result<(), StorageError> {
        let mut guard = self.shared.log.lock();
        let log = guard
            .as_mut()
            .ok_or_else(|| io_err("metadata log", "closed"))?;
        let mut offsets = self.shared.offsets.lock();
        let new_start = offsets
            .range(purged.index.saturating_add(1)..)
            .next()
            .map_or(log.log_end_offset(), |(_, o)| *o);
        log.delete_records_before(new_start)
            .map_err(|e| io_err("purge the metadata log", e))?;
        offsets.retain(|&index, _| index > purged.index);
        Ok(())
    }
}

/// Bytes read from the log at a time when scanning.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// About the bytes an entry takes on the wire (for bounding reads).
fn entry_bytes(entry: &Entry) -> usize {
    match &entry.payload {
        openraft::EntryPayload::Normal(records) => {
            records.iter().map(|r| r.len() + 8).sum::<usize>() + 128
        }
        _ => 512,
    }
}

fn range_to_bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = range_to_bounds(&range);
        self.read_entries(start, end, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        // Bounded so one AppendEntries fits a transport frame.
        self.read_entries(start, end, self.shared.read_bytes_max)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState {
            last_purged_log_id: self.shared.state.lock().last_purged,
            last_log_id: *self.shared.last_log_id.lock(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let vote = *vote;
        self.update_state(|s| s.vote = Some(vote))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        Ok(self.shared.state.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        self.update_state(|s| s.committed = committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        Ok(self.shared.state.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let store = self.clone();
        // A simulated slow disk (annal-sim): the append's fsync takes that long, in this runtime's time.
        if annal_log::disk_faults::any() {
            if let Some(delay) = annal_log::disk_faults::fsync_delay(&self.shared.dir) {
                tokio::time::sleep(delay).await;
            }
        }
        // Appending and fsyncing block: off the runtime's worker threads.
        let result = self
            .disk_io
            .run(move || store.append_durably(&entries))
            .await
            .map_err(|e| io_err("append task", e))
            .and_then(|r| r);
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let offset = self.shared.offsets.lock().get(&log_id.index).copied();
        let Some(offset) = offset else {
            return Ok(()); // nothing at or after that index
        };
        self.with_log(|log| {
            log.truncate_to(offset)
                .map_err(|e| io_err("truncate the metadata log", e))?;
            log.flush()
                .map_err(|e| io_err("flush the metadata log", e))?;
            self.shared
                .offsets
                .lock()
                .retain(|&index, _| index < log_id.index);
            Ok(())
        })?;
        let last = self.read_last_log_id()?;
        *self.shared.last_log_id.lock() = last;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        // The purge point is saved first: after a crash in between, open() finishes the deletion.
        self.update_state(|s| s.last_purged = Some(log_id))?;
        self.purge_files(log_id)?;
        let mut last = self.shared.last_log_id.lock();
        if !matches!(*last, Some(l) if l.index >= log_id.index) {
            *last = Some(log_id);
        }
        Ok(())
    }
}

impl LogStore {
    fn append_durably(&self, entries: &[Entry]) -> Result<(), StorageError> {
        let Some(last) = entries.last().map(|e| e.log_id) else {
            return Ok(());
        };
        self.with_log(|log| {
            let mut offsets = self.shared.offsets.lock();
            for entry in entries {
                let mut bytes =
                    entry_codec::encode(entry).map_err(|e| io_err("encode an entry", e))?;
                if let Some((&last, _)) = offsets.iter().next_back() {
                    if entry.log_id.index != last + 1 {
                        return Err(io_err(
                            "append",
                            format!(
                                "entry {} after entry {last} would leave a hole",
                                entry.log_id.index
                            ),
                        ));
                    }
                }
                let expected = log.log_end_offset();
                let opts = annal_log::AppendOptions {
                    leader_epoch: entry.log_id.leader_id.term as i32,
                    origin: annal_log::AppendOrigin::Coordinator,
                    ..annal_log::AppendOptions::default()
                };
                let info = log
                    .append(&mut bytes, &opts)
                    .map_err(|e| io_err("append to the metadata log", e))?;
                assert_eq!(
                    info.first_offset, expected,
                    "the log assigns the next offset"
                );
                offsets.insert(entry.log_id.index, info.first_offset);
            }
            // openraft requires appended entries to be durable before the callback.
            log.flush().map_err(|e| io_err("flush the metadata log", e))
        })?;
        *self.shared.last_log_id.lock() = Some(last);
        Ok(())
    }
}
