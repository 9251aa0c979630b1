//! Simulated disk faults for the deterministic simulator (`annal-sim`): a full disk, per directory.
//!
//! The simulator runs every node's logs on one real filesystem, which never fills up, so while a node's disk is
//! "full" this module makes the engine's data writes under that node's directory fail as a full disk does: a
//! segment append writes part of its bytes, then fails with `ENOSPC` (the engine must take the partial batch
//! out again), and an index write fails the same way. Subdirectories can be kept writable (`fill`'s
//! `writable`); see docs/decisions/0011-simulation.md.
//!
//! Off (one relaxed load per write) in every other process.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

static ANY: AtomicBool = AtomicBool::new(false);
/// A full directory: the subdirectories that stay writable, and how many writes it has refused.
struct Full {
    dir: PathBuf,
    writable: Vec<PathBuf>,
    refused: u64,
}

/// The full directories. A handful at most (one per node).
static FULL: Mutex<Vec<Full>> = Mutex::new(Vec::new());
const FULL_DIRS_MAX: usize = 64;

/// Makes writes to files under `dir` fail as on a full disk, except under the `writable` directories.
pub fn fill(dir: &Path, writable: Vec<PathBuf>) {
    let mut full = FULL.lock();
    full.retain(|f| f.dir != dir);
    assert!(full.len() < FULL_DIRS_MAX, "too many full directories");
    full.push(Full {
        dir: dir.to_path_buf(),
        writable,
        refused: 0,
    });
    ANY.store(true, Ordering::Relaxed);
}

/// Frees the disk under `dir` again; returns how many writes it refused while it was full.
pub fn free(dir: &Path) -> u64 {
    let mut full = FULL.lock();
    let refused = full
        .iter()
        .filter(|f| f.dir == dir)
        .map(|f| f.refused)
        .sum();
    full.retain(|f| f.dir != dir);
    ANY.store(!full.is_empty(), Ordering::Relaxed);
    refused
}

/// Frees every directory (the simulator, after a seed).
pub fn free_all() {
    FULL.lock().clear();
    ANY.store(false, Ordering::Relaxed);
}

/// Whether a write to `path` finds the disk full (and counts it if so).
fn is_full(path: &Path) -> bool {
    if !ANY.load(Ordering::Relaxed) {
        return false;
    }
    let mut full = FULL.lock();
    let hit = full
        .iter_mut()
        .find(|f| path.starts_with(&f.dir) && !f.writable.iter().any(|w| path.starts_with(w)));
    match hit {
        Some(f) => {
            f.refused += 1;
            true
        }
        None => false,
    }
}

/// `file.write_all_at(bytes, at)`, unless the disk under `path` is full: then the first half of `bytes` is
/// written (a real full disk often takes part of a write) and the call fails with `ENOSPC`.
pub(crate) fn write_all_at(file: &File, path: &Path, bytes: &[u8], at: u64) -> std::io::Result<()> {
    if is_full(path) {
        file.write_all_at(&bytes[..bytes.len() / 2], at)?;
        return Err(std::io::Error::from_raw_os_error(libc_enospc()));
    }
    file.write_all_at(bytes, at)
}

/// `ENOSPC` on Linux (and every other Unix this engine runs on), without a libc dependency for one constant.
const fn libc_enospc() -> i32 {
    28
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test only: the state is process-wide, and tests in this binary run in parallel.
    #[test]
    fn a_full_directory_takes_half_a_write_and_fails_with_enospc() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("__cluster_metadata-0");
        std::fs::create_dir(&kept).unwrap();
        let data = dir.path().join("t-0.log");
        let meta = kept.join("m.log");
        let (f, m) = (File::create(&data).unwrap(), File::create(&meta).unwrap());
        fill(dir.path(), vec![kept.clone()]);
        let err = write_all_at(&f, &data, b"12345678", 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(std::fs::read(&data).unwrap(), b"1234");
        write_all_at(&m, &meta, b"ok", 0).unwrap();
        assert_eq!(free(dir.path()), 1, "one write refused");
        write_all_at(&f, &data, b"12345678", 0).unwrap();
        assert_eq!(std::fs::read(&data).unwrap(), b"12345678");
        fill(dir.path(), Vec::new());
        free_all();
        write_all_at(&m, &meta, b"ok again", 0).unwrap();
    }
}
