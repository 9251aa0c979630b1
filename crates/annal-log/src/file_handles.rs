//! A bounded cache of open file handles, shared by every log of a process.
//!
//! A partition has a `.log`, `.index` and `.timeindex` file per segment (and a `.txnindex` after an ABORT).
//! Holding them all open costs three descriptors per segment: 10,000 partitions ran out of the process's
//! `RLIMIT_NOFILE`. Instead every segment file is a [`CachedFile`]: a path plus, while it is in use, an open
//! handle in this cache. At most [`FileHandles::limit`] handles are cached; the least recently used is closed
//! when another is opened. Busy partitions' files stay open because they are used; a cold partition's files are
//! reopened on its next read or write.
//!
//! An `Arc<File>` handed out (a `FileSlice` a fetch reads after the log lock is released, a background fsync)
//! keeps working after its handle is evicted: eviction only drops the cache's reference, so the descriptor
//! closes when the last holder lets go. The limit bounds what the cache holds, not those short-lived extras.
//!
//! fsync and eviction: `fsync` flushes the file (the inode), not one descriptor, so a write made through a
//! handle that was evicted is made durable by an `fsync` through a reopened one.
//!
//! Locking: the cache's one mutex is a leaf lock. It is taken after a `Log`'s lock (by whoever holds it) and
//! never held across `open(2)` or `close(2)`: files are opened before it is taken and evicted handles are
//! dropped after it is released.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::LogError;

/// The fewest handles a cache holds, whatever it is configured to: a log needs a few files at once.
pub const FILE_HANDLES_MIN: usize = 16;

/// Descriptors left to the rest of the process (sockets, checkpoints, snapshots) by [`FileHandles::default_limit`].
pub const NON_LOG_DESCRIPTORS_RESERVE: u64 = 1024;

/// The process's open-file budget for log segment files.
pub struct FileHandles {
    limit: AtomicUsize,
    next_id: AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<u64, Slot>,
    /// Last use (a tick of `clock`) to id: the first entry is the least recently used.
    by_use: BTreeMap<u64, u64>,
    clock: u64,
    opened_total: u64,
    evicted_total: u64,
}

struct Slot {
    file: Arc<File>,
    last_use: u64,
}

/// What a [`FileHandles`] cache holds and has done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHandleStats {
    /// Handles cached now.
    pub open: usize,
    /// The most it caches.
    pub limit: usize,
    /// Files opened (or reopened) since it was made.
    pub opened_total: u64,
    /// Handles closed to stay within the limit.
    pub evicted_total: u64,
}

impl std::fmt::Debug for FileHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandles")
            .field("limit", &self.limit())
            .finish_non_exhaustive()
    }
}

/// Two budgets are equal when they are the same cache (so `LogConfig` stays comparable).
impl PartialEq for FileHandles {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl FileHandles {
    /// A cache of at most `limit` open files (at least [`FILE_HANDLES_MIN`]).
    pub fn new(limit: usize) -> Arc<FileHandles> {
        Arc::new(FileHandles {
            limit: AtomicUsize::new(limit.max(FILE_HANDLES_MIN)),
            next_id: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        })
    }

    /// The cache every `LogConfig::default()` shares, sized by [`Self::default_limit`]. A process that wants
    /// another size calls [`Self::set_limit`] on it before opening logs (the broker's `log.open.files.max`).
    pub fn process_default() -> Arc<FileHandles> {
        static DEFAULT: OnceLock<Arc<FileHandles>> = OnceLock::new();
        Arc::clone(DEFAULT.get_or_init(|| FileHandles::new(Self::default_limit())))
    }

    /// The process's soft `RLIMIT_NOFILE` less [`NON_LOG_DESCRIPTORS_RESERVE`] for everything else (half the
    /// limit when it is too small for that reserve).
    pub fn default_limit() -> usize {
        let soft = nofile_soft_limit().unwrap_or(1024);
        let budget = if soft > 2 * NON_LOG_DESCRIPTORS_RESERVE {
            soft - NON_LOG_DESCRIPTORS_RESERVE
        } else {
            soft / 2
        };
        usize::try_from(budget)
            .unwrap_or(usize::MAX)
            .max(FILE_HANDLES_MIN)
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the limit; handles over a lower one are closed now.
    pub fn set_limit(&self, limit: usize) {
        self.limit
            .store(limit.max(FILE_HANDLES_MIN), Ordering::Relaxed);
        let evicted = {
            let mut state = self.lock();
            state.evict_over(self.limit())
        };
        drop(evicted);
    }

    pub fn stats(&self) -> FileHandleStats {
        let state = self.lock();
        FileHandleStats {
            open: state.open.len(),
            limit: self.limit(),
            opened_total: state.opened_total,
            evicted_total: state.evicted_total,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing in the cache can be left half-changed by a panic that matters: recover the guard.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Caches `file` as `id`'s handle, closing the least recently used ones over the limit (after the lock).
    fn insert(&self, id: u64, file: Arc<File>) {
        let evicted = {
            let mut state = self.lock();
            state.opened_total += 1;
            state.clock += 1;
            let tick = state.clock;
            // Two users of one file that both found it evicted both open it: keep the later handle.
            let replaced = state.open.insert(
                id,
                Slot {
                    file,
                    last_use: tick,
                },
            );
            if let Some(old) = &replaced {
                state.by_use.remove(&old.last_use);
            }
            state.by_use.insert(tick, id);
            // The handle just inserted is the most recent: it is never the one evicted.
            let mut evicted = state.evict_over(self.limit());
            evicted.extend(replaced);
            evicted
        };
        drop(evicted);
    }

    fn cached(&self, id: u64) -> Option<Arc<File>> {
        let mut state = self.lock();
        state.clock += 1;
        let tick = state.clock;
        let slot = state.open.get_mut(&id)?;
        let previous = std::mem::replace(&mut slot.last_use, tick);
        let file = Arc::clone(&slot.file);
        state.by_use.remove(&previous);
        state.by_use.insert(tick, id);
        Some(file)
    }

    fn remove(&self, id: u64) {
        let removed = {
            let mut state = self.lock();
            let removed = state.open.remove(&id);
            if let Some(slot) = &removed {
                state.by_use.remove(&slot.last_use);
            }
            removed
        };
        drop(removed);
    }

    /// Closes about half the cached handles (the least recently used): the process ran out of descriptors.
    fn shed(&self) -> usize {
        let evicted = {
            let mut state = self.lock();
            let keep = state.open.len() / 2;
            state.evict_over(keep)
        };
        evicted.len()
    }

    /// Opens `path` with `options`; out of descriptors, sheds half the cache and tries once more, then fails
    /// with [`LogError::TooManyOpenFiles`].
    fn open_file(
        &self,
        op: &'static str,
        path: &Path,
        options: &OpenOptions,
    ) -> crate::Result<File> {
        self.open_file_io(path, options)
            .map_err(|e| LogError::io(op, path, e))
    }

    fn open_file_io(&self, path: &Path, options: &OpenOptions) -> std::io::Result<File> {
        match options.open(path) {
            Err(e) if is_out_of_descriptors(&e) && self.shed() > 0 => options.open(path),
            other => other,
        }
    }
}

impl State {
    /// Takes the least recently used slots out until at most `keep` remain; the caller drops them unlocked.
    fn evict_over(&mut self, keep: usize) -> Vec<Slot> {
        let mut evicted = Vec::new();
        while self.open.len() > keep {
            let Some((_, id)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(slot) = self.open.remove(&id) {
                evicted.push(slot);
            }
        }
        self.evicted_total += evicted.len() as u64;
        evicted
    }
}

/// A segment file reached through a [`FileHandles`] cache: opened on demand, closed when evicted or dropped.
pub struct CachedFile {
    id: u64,
    path: PathBuf,
    handles: Arc<FileHandles>,
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl CachedFile {
    /// Opens (or creates, as `options` say) `path` now and caches the handle.
    pub(crate) fn open(
        handles: &Arc<FileHandles>,
        op: &'static str,
        path: &Path,
        options: &OpenOptions,
    ) -> crate::Result<CachedFile> {
        let file = handles.open_file(op, path, options)?;
        let cached = Self::closed(handles, path);
        handles.insert(cached.id, Arc::new(file));
        Ok(cached)
    }

    /// An existing file that is opened only when first used.
    pub(crate) fn closed(handles: &Arc<FileHandles>, path: &Path) -> CachedFile {
        CachedFile {
            id: handles.next_id.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            handles: Arc::clone(handles),
        }
    }

    /// The open handle, reopening the file (read-write, never created) if it was evicted.
    pub(crate) fn get(&self) -> crate::Result<Arc<File>> {
        self.get_io()
            .map_err(|e| LogError::io("reopen", &self.path, e))
    }

    /// [`Self::get`] for callers that speak `std::io`.
    pub(crate) fn get_io(&self) -> std::io::Result<Arc<File>> {
        if let Some(file) = self.handles.cached(self.id) {
            return Ok(file);
        }
        let file = Arc::new(
            self.handles
                .open_file_io(&self.path, OpenOptions::new().read(true).write(true))?,
        );
        self.handles.insert(self.id, Arc::clone(&file));
        Ok(file)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The budget this file is counted in.
    pub(crate) fn handles(&self) -> &Arc<FileHandles> {
        &self.handles
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        self.handles.remove(self.id);
    }
}

/// EMFILE (this process) or ENFILE (the whole system) is out of descriptors.
pub(crate) fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The process's soft `RLIMIT_NOFILE`, if it can be read (`None` for "unlimited" too).
pub fn nofile_soft_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given, which lives for the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(limit.rlim_cur)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (what Kafka's start scripts expect an operator to do);
/// returns the soft limit in force afterwards.
pub fn raise_nofile_soft_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as in `nofile_soft_limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given, which lives for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn files(dir: &Path, n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let path = dir.join(format!("{i}.log"));
                std::fs::File::create(&path)
                    .unwrap()
                    .write_all(format!("file {i}").as_bytes())
                    .unwrap();
                path
            })
            .collect()
    }

    #[test]
    fn holds_at_most_the_limit_and_reopens_evicted_files() {
        let dir = tempfile::tempdir().unwrap();
        let handles = FileHandles::new(FILE_HANDLES_MIN);
        let cached: Vec<_> = files(dir.path(), 50)
            .iter()
            .map(|p| CachedFile::closed(&handles, p))
            .collect();
        for (i, file) in cached.iter().enumerate() {
            let mut text = String::new();
            use std::io::Read;
            (&*file.get().unwrap()).read_to_string(&mut text).unwrap();
            assert_eq!(text, format!("file {i}"));
            assert!(handles.stats().open <= FILE_HANDLES_MIN);
        }
        let stats = handles.stats();
        assert_eq!(stats.open, FILE_HANDLES_MIN);
        assert_eq!(stats.opened_total, 50);
        assert_eq!(stats.evicted_total, 50 - FILE_HANDLES_MIN as u64);
        // The first file was evicted long ago: it is reopened and reads the same.
        let mut buf = [0u8; 6];
        use std::os::unix::fs::FileExt;
        cached[0].get().unwrap().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"file 0");
        drop(cached);
        assert_eq!(handles.stats().open, 0);
    }

    #[test]
    fn a_handle_in_use_survives_its_eviction_and_recent_use_keeps_a_file_open() {
        let dir = tempfile::tempdir().unwrap();
        let handles = FileHandles::new(FILE_HANDLES_MIN);
        let paths = files(dir.path(), 40);
        let hot = CachedFile::closed(&handles, &paths[0]);
        let held = hot.get().unwrap();
        let others: Vec<_> = paths[1..]
            .iter()
            .map(|p| CachedFile::closed(&handles, p))
            .collect();
        for (i, other) in others.iter().enumerate() {
            other.get().unwrap();
            if i % 4 == 0 {
                hot.get().unwrap(); // used often: stays cached
            }
        }
        let opened = handles.stats().opened_total;
        hot.get().unwrap();
        assert_eq!(
            handles.stats().opened_total,
            opened,
            "the hot file stayed open"
        );
        // Evict everything: the handle already handed out still reads.
        handles.set_limit(0);
        drop(others);
        drop(hot);
        let mut buf = [0u8; 6];
        use std::os::unix::fs::FileExt;
        held.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"file 0");
    }
}
