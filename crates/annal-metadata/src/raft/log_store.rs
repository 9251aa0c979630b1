//! openraft's log storage ([`RaftLogStorage`]) on an `annal_log::Log`: one v2 batch per entry, base offset =
//! raft index (openraft's first index is 0, as is a Kafka log's), partition leader epoch = term. The vote,
//! the committed log id and the purge point live in the `quorum-state` file beside the segments.

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

/// The metadata log and its small state file. Cloned into openraft (the store and its readers) and kept by
/// [`super::Quorum`] (status, and closing the log at shutdown).
#[derive(Clone)]
pub(crate) struct LogStore {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    /// `None` once closed at shutdown: a late call then fails instead of writing behind a new owner's back.
    log: Mutex<Option<Log>>,
    state: Mutex<QuorumState>,
    /// The last entry in the log, or the purge point when the log is empty.
    last_log_id: Mutex<Option<LogId<u64>>>,
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
                read_bytes_max: max_entry_bytes.max(1),
            }),
        };
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
        state.vote.is_none() && state.last_purged.is_none() && self.shared.last_log_id.lock().is_none()
    }

    /// Flushes and closes the log cleanly; later calls fail.
    pub fn close(&self) {
        if let Some(log) = self.shared.log.lock().take() {
            if let Err(e) = log.close() {
                tracing::warn!(error = %e, "closing the metadata log failed; the next start recovers it");
            }
        }
    }

    fn with_log<T>(&self, f: impl FnOnce(&mut Log) -> Result<T, StorageError>) -> Result<T, StorageError> {
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
        let (start, end) = self.with_log(|log| Ok((log.log_start_offset(), log.log_end_offset())))?;
        if end <= start {
            return Ok(purged);
        }
        let last = self.read_entries((end - 1) as u64, end as u64, usize::MAX)?;
        Ok(last.last().map(|e| e.log_id).or(purged))
    }

    /// Entries in `[start, end)` that the log holds, stopping after `bytes_max` bytes (at least one entry).
    fn read_entries(&self, start: u64, end: u64, bytes_max: usize) -> Result<Vec<Entry>, StorageError> {
        self.with_log(|log| {
            let from = (start.min(i64::MAX as u64) as i64).max(log.log_start_offset());
            let to = (end.min(i64::MAX as u64) as i64).min(log.log_end_offset());
            let mut entries = Vec::new();
            let mut next = from;
            let mut bytes_read = 0usize;
            while next < to && bytes_read < bytes_max {
                let chunk = (bytes_max - bytes_read).clamp(64 * 1024, 4 << 20);
                let read = log.read(next, chunk, Some(to)).map_err(|e| read_err("read the metadata log", e))?;
                let Some(slice) = read.slice else { break };
                let bytes = slice.read_to_vec().map_err(|e| read_err("read the metadata log", e))?;
                let mut at = 0;
                while at < bytes.len() {
                    let (entry, used) = entry_codec::decode(&bytes[at..])
                        .map_err(|e| read_err(&format!("decode the entry at offset {next}"), e))?;
                    at += used;
                    if entry.log_id.index as i64 >= next && (entry.log_id.index as i64) < to {
                        assert_eq!(entry.log_id.index as i64, next, "the metadata log has a hole");
                        next += 1;
                        entries.push(entry);
                    }
                }
                bytes_read += bytes.len();
            }
            Ok(entries)
        })
    }

    /// Removes every entry up to `purged` (inclusive) from the segments. If the log does not reach that far (a
    /// snapshot installed past its end), the log is restarted empty at `purged + 1`.
    fn purge_files(&self, purged: LogId<u64>) -> Result<(), StorageError> {
        let new_start = i64::try_from(purged.index.saturating_add(1)).map_err(|e| io_err("purge", e))?;
        let dir = self.shared.dir.clone();
        let mut guard = self.shared.log.lock();
        let log = guard.as_mut().ok_or_else(|| io_err("metadata log", "closed"))?;
        if new_start <= log.log_end_offset() {
            log.delete_records_before(new_start).map_err(|e| io_err("purge the metadata log", e))?;
            return Ok(());
        }
        let config = log.config().clone();
        let old = guard.take().expect("checked above");
        old.close().map_err(|e| io_err("close the metadata log", e))?;
        restart_log_files_at(&dir, new_start).map_err(|e| io_err("restart the metadata log", e))?;
        let reopened = Log::open(&dir, config).map_err(|e| io_err("reopen the metadata log", e))?;
        assert_eq!(reopened.log_start_offset(), new_start);
        *guard = Some(reopened);
        Ok(())
    }
}

/// Deletes annal-log's files in `dir` (segments, indexes, producer snapshots, its checkpoint) and leaves one
/// empty segment whose base offset is `base`, which `Log::open` takes as the log start. The quorum's own files
/// (`quorum-state`, `*.checkpoint` snapshots) stay.
fn restart_log_files_at(dir: &Path, base: i64) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let annal_log_file = name == "annal.checkpoint"
            || name.split_once('.').is_some_and(|(stem, suffix)| {
                stem.len() == 20
                    && stem.bytes().all(|b| b.is_ascii_digit())
                    && matches!(suffix, "log" | "index" | "timeindex" | "snapshot")
            });
        if annal_log_file {
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::File::create(dir.join(format!("{base:020}.log")))?.sync_all()?;
    super::state_file::sync_dir(dir)
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

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
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

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let store = self.clone();
        // Appending and fsyncing block: off the runtime's worker threads.
        let result = tokio::task::spawn_blocking(move || store.append_durably(&entries))
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
        let index = i64::try_from(log_id.index).map_err(|e| io_err("truncate", e))?;
        self.with_log(|log| {
            log.truncate_to(index).map_err(|e| io_err("truncate the metadata log", e))?;
            log.flush().map_err(|e| io_err("flush the metadata log", e))
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
        if last.map_or(true, |l| l.index < log_id.index) {
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
            for entry in entries {
                let mut bytes = entry_codec::encode(entry).map_err(|e| io_err("encode an entry", e))?;
                let expected = log.log_end_offset();
                if entry.log_id.index as i64 != expected {
                    return Err(io_err(
                        "append",
                        format!("entry index {} but the log ends at {expected}", entry.log_id.index),
                    ));
                }
                let opts = annal_log::AppendOptions {
                    leader_epoch: entry.log_id.leader_id.term as i32,
                    origin: annal_log::AppendOrigin::Coordinator,
                    ..annal_log::AppendOptions::default()
                };
                let info = log.append(&mut bytes, &opts).map_err(|e| io_err("append to the metadata log", e))?;
                assert_eq!(info.first_offset, expected, "base offset = raft index");
            }
            // openraft requires appended entries to be durable before the callback.
            log.flush().map_err(|e| io_err("flush the metadata log", e))
        })?;
        *self.shared.last_log_id.lock() = Some(last);
        Ok(())
    }
}
