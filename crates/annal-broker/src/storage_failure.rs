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

/// Hears of failed fsyncs under the data directory, for as long as it lives.
pub struct StorageFailure {
    failed: tokio::sync::watch::Receiver<Option<String>>,
    _watch: annal_log::dir_failures::WatchGuard,
}

impl StorageFailure {
    /// Watches every log under `data_dir` (partitions and the metadata log).
    pub fn watch(data_dir: &Path) -> StorageFailure {
        let (tx, failed) = tokio::sync::watch::channel(None);
        let watch = annal_log::dir_failures::watch(
            data_dir,
            Arc::new(move |path: &Path, error: &std::io::Error| {
                let reason = format!("fsync of {} failed: {error}", path.display());
                // The first failure is the one to report; later ones follow from it.
                tx.send_if_modified(|r| {
                    if r.is_none() {
                        *r = Some(reason);
                        true
                    } else {
                        false
                    }
                });
            }),
        );
        StorageFailure {
            failed,
            _watch: watch,
        }
    }

    /// Why the directory failed, if it has.
    pub fn reason(&self) -> Option<String> {
        self.failed.borrow().clone()
    }

    /// Resolves with the reason once an fsync under the directory fails.
    pub async fn failed(&self) -> String {
        let mut failed = self.failed.clone();
        let reason = match failed.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The sender lives in the watch this struct holds: it cannot be dropped first.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }
}
