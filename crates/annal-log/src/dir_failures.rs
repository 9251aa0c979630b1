//! Log directory failures: Kafka's `LogDirFailureChannel`. When an fsync of a log's data fails, the log stops
//! trusting itself (every later append and flush fails until it is reopened) and reports the failure here; the
//! owner of the directory (the broker) watches it and stops, because after a failed fsync Linux may have dropped
//! the dirty pages and report success to the next fsync: nothing written since the last good fsync can be called
//! durable, and only recovery from the disk (a restart) knows what is really there.
//!
//! The registry is process-wide (a log does not know its owner) and keyed by directory, so several brokers in one
//! process (the simulator) each hear only about their own. It holds one entry per watched directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

/// Called with the failed file's path and the error, on the thread that saw the failure. Keep it short.
pub type OnFailure = Arc<dyn Fn(&Path, &std::io::Error) + Send + Sync>;

struct Watcher {
    id: u64,
    dir: PathBuf,
    on_failure: OnFailure,
}

struct Registry {
    next_id: u64,
    watchers: Vec<Watcher>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_id: 0,
    watchers: Vec::new(),
});
/// One per broker (or embedding) in the process; a leak past this is a bug, not a workload.
const WATCHERS_MAX: usize = 1024;

/// Watches `dir`: `on_failure` hears of every failed fsync of a log under it until the returned guard drops.
#[must_use = "dropping the guard stops the watch"]
pub fn watch(dir: &Path, on_failure: OnFailure) -> WatchGuard {
    let mut registry = REGISTRY.lock();
    assert!(
        registry.watchers.len() < WATCHERS_MAX,
        "too many log directory watchers"
    );
    registry.next_id += 1;
    let id = registry.next_id;
    registry.watchers.push(Watcher {
        id,
        dir: dir.to_path_buf(),
        on_failure,
    });
    WatchGuard(id)
}

/// Ends a [`watch`] when dropped.
pub struct WatchGuard(u64);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        REGISTRY.lock().watchers.retain(|w| w.id != self.0);
    }
}

/// Tells the watchers of every directory holding `path` that an fsync of it failed.
pub(crate) fn report(path: &Path, error: &std::io::Error) {
    let callbacks: Vec<OnFailure> = REGISTRY
        .lock()
        .watchers
        .iter()
        .filter(|w| path.starts_with(&w.dir))
        .map(|w| Arc::clone(&w.on_failure))
        .collect();
    // Outside the lock: a callback may watch or unwatch.
    for on_failure in callbacks {
        on_failure(path, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_failure_reaches_the_watchers_of_its_directory_only_while_watched() {
        let heard = Arc::new(AtomicUsize::new(0));
        let h = heard.clone();
        let guard = watch(
            Path::new("/sim/n1"),
            Arc::new(move |_, _| {
                h.fetch_add(1, Ordering::Relaxed);
            }),
        );
        let error = std::io::Error::from_raw_os_error(5);
        report(Path::new("/sim/n2/t-0/0.log"), &error);
        assert_eq!(heard.load(Ordering::Relaxed), 0);
        report(Path::new("/sim/n1/t-0/0.log"), &error);
        assert_eq!(heard.load(Ordering::Relaxed), 1);
        drop(guard);
        report(Path::new("/sim/n1/t-0/0.log"), &error);
        assert_eq!(heard.load(Ordering::Relaxed), 1);
    }
}
