//! The background log cleaner: `log.cleaner.threads` loops that compact the dirtiest compacted partition,
//! driven the way retention is (a housekeeping task per thread; the pass itself runs on a blocking thread).
//!
//! Each loop picks, among the partitions (leaders and followers) whose `cleanup.policy` has `compact`, the one with the highest dirty
//! ratio that should be cleaned now (`min.cleanable.dirty.ratio`, or `max.compaction.lag.ms` overdue) and that no
//! other loop is cleaning, and runs one pass (`Partition::clean`: the log lock is held only to snapshot and to
//! swap). With nothing to clean it sleeps `log.cleaner.backoff.ms`. Shutdown stops passes in flight (their
//! output is discarded, the logs untouched) and waits for the loops, so partitions close cleanly.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use annal_log::{CleanOutcome, Cleaner, CleanerConfig};
use parking_lot::Mutex;

use crate::config::CleanerSettings;
use crate::replica::ReplicaManager;

/// The running cleaner loops.
pub(crate) struct LogCleaner {
    cleaner: Cleaner,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

impl LogCleaner {
    /// Starts `settings.threads` loops (none when 0).
    pub(crate) fn start(settings: &CleanerSettings, replicas: Arc<ReplicaManager>) -> LogCleaner {
        let threads = settings.threads;
        let cleaner = Cleaner::new(CleanerConfig {
            dedupe_buffer_bytes: (settings.dedupe_buffer_size / threads.max(1) as u64)
                .min(usize::MAX as u64) as usize,
            io_max_bytes_per_second: settings.io_max_bytes_per_second,
        });
        let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
        let backoff = Duration::from_millis(settings.backoff_ms.clamp(0, 3_600_000) as u64);
        let loops = (0..threads)
            .map(|_| {
                tokio::spawn(cleaner_loop(
                    cleaner.clone(),
                    replicas.clone(),
                    busy.clone(),
                    backoff,
                ))
            })
            .collect();
        LogCleaner { cleaner, loops }
    }

    /// Stops the loops and waits for them (a pass in flight ends at its next batch).
    pub(crate) async fn shutdown(self) {
        self.cleaner.stop();
        for handle in self.loops {
            let _ = handle.await;
        }
    }
}

async fn cleaner_loop(
    cleaner: Cleaner,
    replicas: Arc<ReplicaManager>,
    busy: Arc<Mutex<HashSet<String>>>,
    backoff: Duration,
) {
    while !cleaner.is_stopped() {
        let (c, r, b) = (cleaner.clone(), replicas.clone(), busy.clone());
        let cleaned = crate::blocking_caught(move || clean_dirtiest(&c, &r, &b))
            .await
            .unwrap_or(false);
        if !cleaned {
            // Sleep in short steps so that shutdown is not held up by the backoff.
            let mut slept = Duration::ZERO;
            while slept < backoff && !cleaner.is_stopped() {
                let step = Duration::from_millis(100).min(backoff - slept);
                tokio::time::sleep(step).await;
                slept += step;
            }
        }
    }
}

/// Runs one pass on the dirtiest partition that needs one; false if none did. Blocking.
fn clean_dirtiest(
    cleaner: &Cleaner,
    replicas: &ReplicaManager,
    busy: &Mutex<HashSet<String>>,
) -> bool {
    let now = crate::now_ms();
    let mut candidates: Vec<_> = replicas
        .all_partitions()
        .into_iter()
        // Followers too, as Kafka does: each replica compacts its own log below its high watermark, so a
        // replica that becomes leader (of `__consumer_offsets`, say) has a small log to replay.
        .filter_map(|p| Some((p.cleanable(now)?.dirty_ratio, p)))
        .collect();
    candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, partition) in candidates {
        let name = partition.name();
        if !busy.lock().insert(name.clone()) {
            continue;
        }
        let result = partition.clean(cleaner, now);
        busy.lock().remove(&name);
        match result {
            Ok(Some(CleanOutcome::Swapped(stats))) => {
                tracing::info!(partition = %name, read = stats.bytes_read, written = stats.bytes_written,
                    removed = stats.records_removed, tombstones_removed = stats.tombstones_removed,
                    segments_before = stats.segments_before, segments_after = stats.segments_after,
                    "cleaned a compacted log");
                return true;
            }
            Ok(Some(CleanOutcome::Abandoned)) => {
                tracing::debug!(partition = %name, "the log changed during cleaning; it is cleaned again later");
                return true;
            }
            Ok(None) => {}
            Err(e) if cleaner.is_stopped() => {
                tracing::debug!(partition = %name, error = %e, "cleaning stopped at shutdown");
                return false;
            }
            Err(e) => {
                tracing::warn!(partition = %name, error = %e, "cleaning failed; the log is unchanged and is retried after log.cleaner.backoff.ms");
            }
        }
    }
    false
}
