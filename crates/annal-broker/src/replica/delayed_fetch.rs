//! The delayed-fetch purgatory, keyed by partition: a long-polling fetch registers one [`Notify`] with every
//! partition it reads ([`FetchWatchers::watch`]), and a partition wakes only its own watchers when its high
//! watermark moves. An append to partition B never wakes a fetch that waits on partition A.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Most fetches that may wait on one partition at once. Connections are bounded by the server, so this is a
/// backstop: a fetch that finds the set full answers at once instead of waiting (the client fetches again).
pub const WATCHERS_PER_PARTITION_MAX: usize = 4096;

/// The fetches waiting for one partition's high watermark to move.
#[derive(Default)]
pub struct FetchWatchers {
    waiting: Mutex<Vec<Arc<Notify>>>,
}

impl FetchWatchers {
    /// Registers `waiter`; false if the set is full. `Notify` keeps a permit, so a wake between this call and
    /// the wait is not lost (register before reading, wait after).
    pub fn watch(&self, waiter: &Arc<Notify>) -> bool {
        let mut waiting = self.waiting.lock();
        if waiting.iter().any(|w| Arc::ptr_eq(w, waiter)) {
            return true;
        }
        if waiting.len() >= WATCHERS_PER_PARTITION_MAX {
            return false;
        }
        waiting.push(Arc::clone(waiter));
        true
    }

    /// Removes `waiter` (the fetch answered).
    pub fn unwatch(&self, waiter: &Arc<Notify>) {
        self.waiting.lock().retain(|w| !Arc::ptr_eq(w, waiter));
    }

    /// Wakes every fetch waiting on this partition; they re-read and either answer or watch again.
    pub fn wake_all(&self) {
        for w in self.waiting.lock().drain(..) {
            w.notify_one();
        }
    }

    /// How many fetches wait on this partition.
    pub fn len(&self) -> usize {
        self.waiting.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_before_the_wait_is_kept_and_only_watchers_wake() {
        let (a, b) = (FetchWatchers::default(), FetchWatchers::default());
        let waiter = Arc::new(Notify::new());
        assert!(a.watch(&waiter));
        assert!(a.watch(&waiter), "registering twice is a no-op");
        assert_eq!(a.len(), 1);
        b.wake_all();
        let woken =
            tokio::time::timeout(std::time::Duration::from_millis(20), waiter.notified()).await;
        assert!(
            woken.is_err(),
            "a wake of another partition reached the waiter"
        );
        a.wake_all();
        assert_eq!(a.len(), 0);
        // The permit was stored by wake_all before anyone waited.
        waiter.notified().await;
    }

    #[test]
    fn the_set_is_bounded() {
        let w = FetchWatchers::default();
        let all: Vec<_> = (0..WATCHERS_PER_PARTITION_MAX)
            .map(|_| Arc::new(Notify::new()))
            .collect();
        assert!(all.iter().all(|n| w.watch(n)));
        assert!(!w.watch(&Arc::new(Notify::new())));
        w.unwatch(&all[0]);
        assert_eq!(w.len(), WATCHERS_PER_PARTITION_MAX - 1);
    }
}
