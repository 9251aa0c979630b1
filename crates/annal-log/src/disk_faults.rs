//! Simulated disk faults for the deterministic simulator (`annal-sim`), per directory: a full disk, failing
//! fsyncs and slow fsyncs.
//!
//! The simulator runs every node's logs on one real filesystem, which never fills up, never fails an fsync and
//! is fast, so while a node's disk has a fault this module makes the engine's data files under that node's
//! directory behave as the faulty disk would (subdirectories can be kept out of it: `writable`):
//! - **full** ([`fill`]): a segment append writes part of its bytes, then fails with `ENOSPC` (the engine must
//!   take the partial batch out again), and an index write fails the same way;
//! - **failing fsync** ([`fail_fsyncs`]): every fsync of a segment, index or transaction index fails with `EIO`.
//!   After a failed fsync Linux may have dropped the dirty pages (and reports success to the next fsync), so the
//!   engine stops trusting the log ([`crate::dir_failures`]); the simulator cuts the files whose fsync failed back
//!   to their durable length when the node halts ([`take_failed_fsyncs`], [`crate::page_cache`]);
//! - **slow fsync** ([`slow_fsyncs`]): [`fsync_delay`] tells async callers that wait for an fsync (the metadata
//!   log's appends, a durable produce's group commit) how long to wait first, in the caller's (simulated) time.
//!
//! See docs/decisions/0011-simulation.md. Off (one relaxed load per write or fsync) in every other process.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

static ANY: AtomicBool = AtomicBool::new(false);

/// What is wrong with a directory's disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Full,
    FailingFsync,
    SlowFsync(Duration),
}

/// A faulty directory: the subdirectories spared, and how many operations the fault has hit.
struct Faulty {
    dir: PathBuf,
    kind: Kind,
    spared: Vec<PathBuf>,
    hits: u64,
}

/// The faulty directories. A handful at most (a fault or two per node).
static FAULTY: Mutex<Vec<Faulty>> = Mutex::new(Vec::new());
const FAULTY_DIRS_MAX: usize = 64;
/// Files whose fsync failed, for the simulator to cut back ([`take_failed_fsyncs`]). Bounded: past this many,
/// the oldest are forgotten (the simulator takes them at every halt).
static FAILED_FSYNCS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
const FAILED_FSYNCS_MAX: usize = 4096;

fn add(dir: &Path, kind: Kind, spared: Vec<PathBuf>) {
    let mut faulty = FAULTY.lock();
    faulty.retain(|f| {
        !(f.dir == dir && std::mem::discriminant(&f.kind) == std::mem::discriminant(&kind))
    });
    assert!(
        faulty.len() < FAULTY_DIRS_MAX,
        "too many faulty directories"
    );
    faulty.push(Faulty {
        dir: dir.to_path_buf(),
        kind,
        spared,
        hits: 0,
    });
    ANY.store(true, Ordering::Relaxed);
}

/// Makes writes to files under `dir` fail as on a full disk, except under the `writable` directories.
pub fn fill(dir: &Path, writable: Vec<PathBuf>) {
    add(dir, Kind::Full, writable);
}

/// Makes fsyncs of data files under `dir` fail with `EIO`, except under the `spared` directories.
pub fn fail_fsyncs(dir: &Path, spared: Vec<PathBuf>) {
    add(dir, Kind::FailingFsync, spared);
}

/// Makes fsyncs under `dir` take `delay` (see [`fsync_delay`]), except under the `spared` directories.
pub fn slow_fsyncs(dir: &Path, delay: Duration, spared: Vec<PathBuf>) {
    add(dir, Kind::SlowFsync(delay), spared);
}

/// Ends every fault of `dir`; returns how many operations they hit (writes refused, fsyncs failed or slowed).
pub fn free(dir: &Path) -> u64 {
    let mut faulty = FAULTY.lock();
    let hits = faulty.iter().filter(|f| f.dir == dir).map(|f| f.hits).sum();
    faulty.retain(|f| f.dir != dir);
    ANY.store(!faulty.is_empty(), Ordering::Relaxed);
    hits
}

/// Ends every fault and forgets the failed fsyncs (the simulator, after a seed).
pub fn free_all() {
    FAULTY.lock().clear();
    FAILED_FSYNCS.lock().clear();
    ANY.store(false, Ordering::Relaxed);
}

/// The fault of `kind`'s variant that covers `path`, counted as a hit.
fn hit(path: &Path, matches: impl Fn(Kind) -> bool) -> Option<Kind> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    let mut faulty = FAULTY.lock();
    let f = faulty.iter_mut().find(|f| {
        matches(f.kind) && path.starts_with(&f.dir) && !f.spared.iter().any(|s| path.starts_with(s))
    })?;
    f.hits += 1;
    Some(f.kind)
}

/// `file.write_all_at(bytes, at)`, unless the disk under `path` is full: then the first half of `bytes` is
/// written (a real full disk often takes part of a write) and the call fails with `ENOSPC`.
pub(crate) fn write_all_at(file: &File, path: &Path, bytes: &[u8], at: u64) -> std::io::Result<()> {
    if hit(path, |k| k == Kind::Full).is_some() {
        file.write_all_at(&bytes[..bytes.len() / 2], at)?;
        return Err(std::io::Error::from_raw_os_error(ENOSPC));
    }
    file.write_all_at(bytes, at)
}

/// `file.sync_data()`, unless fsyncs under `path` fail: then `EIO`, and `path` is remembered for
/// [`take_failed_fsyncs`].
pub(crate) fn sync_data(file: &File, path: &Path) -> std::io::Result<()> {
    if hit(path, |k| k == Kind::FailingFsync).is_some() {
        let mut failed = FAILED_FSYNCS.lock();
        if failed.len() >= FAILED_FSYNCS_MAX {
            failed.remove(0);
        }
        failed.push(path.to_path_buf());
        return Err(std::io::Error::from_raw_os_error(EIO));
    }
    file.sync_data()
}

/// Whether `dir`'s disk is full or fails fsyncs now (a slow disk is not faulty: it only waits).
pub fn refuses(dir: &Path) -> bool {
    ANY.load(Ordering::Relaxed)
        && FAULTY
            .lock()
            .iter()
            .any(|f| f.dir == dir && matches!(f.kind, Kind::Full | Kind::FailingFsync))
}

/// Whether any directory has a fault (one relaxed load): callers check it before working out a path.
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// How long an fsync of a file under `path` takes on a slow disk; `None` on a healthy one. Async callers that
/// wait for an fsync sleep this long first, so the slowness is in their runtime's (simulated) time.
pub fn fsync_delay(path: &Path) -> Option<Duration> {
    match hit(path, |k| matches!(k, Kind::SlowFsync(_)))? {
        Kind::SlowFsync(delay) => Some(delay),
        Kind::Full | Kind::FailingFsync => None,
    }
}

/// The files under `dir` whose fsync failed since the last call, each once, in name order; forgets them.
pub fn take_failed_fsyncs(dir: &Path) -> Vec<PathBuf> {
    let mut failed = FAILED_FSYNCS.lock();
    let mut taken: Vec<PathBuf> = failed
        .iter()
        .filter(|p| p.starts_with(dir))
        .cloned()
        .collect();
    failed.retain(|p| !p.starts_with(dir));
    taken.sort();
    taken.dedup();
    taken
}

/// `ENOSPC` and `EIO` on Linux (and every other Unix this engine runs on), without a libc dependency for two
/// constants.
const ENOSPC: i32 = 28;
const EIO: i32 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    /// One test only: the state is process-wide, and tests in this binary run in parallel.
    #[test]
    fn faults_hit_only_their_directory_and_end_when_freed() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("__cluster_metadata-0");
        std::fs::create_dir(&kept).unwrap();
        let data = dir.path().join("t-0.log");
        let meta = kept.join("m.log");
        let (f, m) = (File::create(&data).unwrap(), File::create(&meta).unwrap());

        // A full disk takes half a write and fails with ENOSPC.
        fill(dir.path(), vec![kept.clone()]);
        let err = write_all_at(&f, &data, b"12345678", 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(std::fs::read(&data).unwrap(), b"1234");
        write_all_at(&m, &meta, b"ok", 0).unwrap();
        sync_data(&f, &data).unwrap();
        assert_eq!(free(dir.path()), 1, "one write refused");
        write_all_at(&f, &data, b"12345678", 0).unwrap();
        assert_eq!(std::fs::read(&data).unwrap(), b"12345678");

        // Failing fsyncs fail with EIO and are remembered, once per file; writes still work.
        fail_fsyncs(dir.path(), vec![kept.clone()]);
        assert_eq!(sync_data(&f, &data).unwrap_err().raw_os_error(), Some(5));
        assert!(sync_data(&f, &data).is_err());
        sync_data(&m, &meta).unwrap();
        write_all_at(&f, &data, b"abc", 0).unwrap();
        assert_eq!(take_failed_fsyncs(dir.path()), vec![data.clone()]);
        assert!(take_failed_fsyncs(dir.path()).is_empty());
        assert_eq!(free(dir.path()), 2);
        sync_data(&f, &data).unwrap();

        // A slow disk names its delay, for files under it only.
        slow_fsyncs(dir.path(), Duration::from_millis(300), vec![kept.clone()]);
        assert_eq!(fsync_delay(&data), Some(Duration::from_millis(300)));
        assert_eq!(fsync_delay(&meta), None);
        free_all();
        assert_eq!(fsync_delay(&data), None);
        write_all_at(&m, &meta, b"ok again", 0).unwrap();
    }
}
