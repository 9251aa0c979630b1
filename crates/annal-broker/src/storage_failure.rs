//! This broker's log directory failed: an fsync of a partition's data (or of the metadata log) failed.
//!
//! After a failed fsync Linux may have dropped the dirty pages and will report success to the next fsync, so
//! nothing the broker wrote since its last good fsync can be called durable, and the log that failed refuses
//! every later append (`annal_log::Log::fsync_failed`). Kafka marks the directory offline and, with its only
//! directory gone, halts; so does Annal (one data directory per broker): [`crate::Started::serve`] stops without
//! flushing or marking anything clean, so that the next start recovers every log from what the disk really holds,
//! and the controller counts the stop as unclean (KIP-966). The other replicas keep serving meanwhile.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

/// Hears of failed fsyncs under the data directory, for as long as it lives.
pub struct StorageFailure {
    state: Arc<State>,
    _watch: annal_log::dir_failures::WatchGuard,
}

/// A `Notify` rather than a `watch` channel: tokio's watch picks one of its notifiers at random per waiter, and
/// the simulator's runs must not draw from an unseeded generator.
#[derive(Default)]
struct State {
    reason: Mutex<Option<String>>,
    notify: tokio::sync::Notify,
}

impl StorageFailure {
    /// Watches every log under `data_dir` (partitions and the metadata log).
    pub fn watch(data_dir: &Path) -> StorageFailure {
        let state = Arc::new(State::default());
        let watch = annal_log::dir_failures::watch(data_dir, {
            let state = state.clone();
            Arc::new(move |path: &Path, error: &std::io::Error| {
                let mut reason = state.reason.lock();
                // The first failure is the one to report; later ones follow from it.
                if reason.is_none() {
                    *reason = Some(format!("fsync of {} failed: {error}", path.display()));
                    drop(reason);
                    state.notify.notify_waiters();
                }
            })
        });
        StorageFailure {
            state,
            _watch: watch,
        }
    }

    /// Why the directory failed, if it has.
    pub fn reason(&self) -> Option<String> {
        self.state.reason.lock().clone()
    }

    /// Resolves with the reason once an fsync under the directory fails.
    pub async fn failed(&self) -> String {
        loop {
            // Registered before the check, so a failure between the two still wakes this.
            let notified = self.state.notify.notified();
            if let Some(reason) = self.reason() {
                return reason;
            }
            notified.await;
        }
    }
}
