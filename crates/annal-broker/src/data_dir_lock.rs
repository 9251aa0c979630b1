//! One process per data directory: an exclusive lock on `<data dir>/.lock`, held while the node runs.
//!
//! Two `annal serve` processes on one directory would both append to the same segments and both rewrite the
//! same checkpoints: the logs interleave and the second start "recovers" a log the first is still writing.
//! Kafka guards its log directories the same way (a `.lock` file it `flock`s; "A Kafka instance in another
//! process or thread is using this directory"). The lock is advisory and released by the kernel when the
//! process dies, so kill -9 never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

/// The lock file's name inside the data directory (Kafka's name).
pub const LOCK_FILE: &str = ".lock";

/// Held for as long as the node owns its data directory; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock, or fails naming the directory when another process (or another node in this process)
    /// holds it.
    pub fn acquire(data_dir: &Path) -> anyhow::Result<DataDirLock> {
        let path = data_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open the lock file {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(anyhow::anyhow!(
                "data directory {} is in use by another annal process (it holds {}); stop that process, or \
                 give this one its own directory (--data-dir or log.dirs)",
                data_dir.display(),
                path.display()
            )),
            Err(TryLockError::Error(e)) => Err(anyhow::anyhow!(
                "cannot lock {}: {e}",
                path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(err.contains("in use by another annal process"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
