//! A failed fsync: the log stops trusting itself (appends and flushes fail, the recovery point does not move)
//! and its directory's watcher hears of it; a reopen recovers. The fsync failures come from
//! `annal_log::disk_faults` (a real fsync error cannot be provoked on demand); everything else is the real engine
//! on real files. Each test uses its own directory, so the process-wide fault table is shared safely.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use annal_log::batch::build_uncompressed_batch;
use annal_log::{
    dir_failures, disk_faults, AppendOptions, DurableError, GroupCommit, Log, LogConfig,
};
use parking_lot::Mutex;

fn batch(i: usize) -> Vec<u8> {
    let value = format!("record {i}").into_bytes();
    build_uncompressed_batch(
        &[(None, Some(value.as_slice()))],
        AppendOptions::default().now_ms,
    )
}

/// Watches `dir` and collects the failed paths it hears of.
fn heard(dir: &Path) -> (Arc<Mutex<Vec<PathBuf>>>, dir_failures::WatchGuard) {
    let heard: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let h = heard.clone();
    let guard = dir_failures::watch(
        dir,
        Arc::new(move |path, _| h.lock().push(path.to_path_buf())),
    );
    (heard, guard)
}

#[test]
fn a_failed_flush_stops_the_log_until_it_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let (heard, _watch) = heard(dir.path());
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    for i in 0..3 {
        log.append(&mut batch(i), &AppendOptions::default())
            .unwrap();
    }
    log.flush().unwrap();
    assert_eq!(log.flushed_offset(), 3);
    log.append(&mut batch(3), &AppendOptions::default())
        .unwrap();

    disk_faults::fail_fsyncs(dir.path(), Vec::new());
    let err = log.flush().unwrap_err();
    assert!(
        err.to_string()
            .contains("durability can no longer be promised"),
        "{err}"
    );
    assert_eq!(
        heard.lock().len(),
        1,
        "the directory's watcher hears of it once"
    );
    assert_eq!(disk_faults::take_failed_fsyncs(dir.path()).len(), 1);

    // The disk is fine again, and an fsync would now succeed: the log still refuses, because the pages the
    // failed fsync was about may be gone and a successful fsync would call them durable.
    disk_faults::free(dir.path());
    assert!(log.flush().is_err());
    assert!(log
        .append(&mut batch(4), &AppendOptions::default())
        .is_err());
    assert_eq!(
        log.flushed_offset(),
        3,
        "the recovery point stays where the last good fsync put it"
    );
    assert_eq!(heard.lock().len(), 1, "reported once, not at every refusal");
    drop(log);

    // Reopening recovers from the disk (here the real filesystem kept everything) and works again.
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 4);
    log.append(&mut batch(4), &AppendOptions::default())
        .unwrap();
    log.flush().unwrap();
    assert_eq!(log.flushed_offset(), 5);
}

#[test]
fn a_failed_group_commit_fails_its_waiters_and_stops_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (heard, _watch) = heard(dir.path());
    let log = Arc::new(Mutex::new(
        Log::open(dir.path(), LogConfig::default()).unwrap(),
    ));
    let commit = GroupCommit::start_inline(Arc::clone(&log));
    let first = log
        .lock()
        .append(&mut batch(0), &AppendOptions::default())
        .unwrap();
    commit.durable(first.last_offset).wait().unwrap();

    disk_faults::fail_fsyncs(dir.path(), Vec::new());
    let second = log
        .lock()
        .append(&mut batch(1), &AppendOptions::default())
        .unwrap();
    let err = commit.durable(second.last_offset).wait().unwrap_err();
    assert!(matches!(err, DurableError::SyncFailed(_)), "{err}");
    disk_faults::free(dir.path());
    assert_eq!(heard.lock().len(), 1);

    // Without the log stopping too, this flush would succeed and mark offset 1 durable.
    assert!(log.lock().flush().is_err());
    assert_eq!(log.lock().flushed_offset(), 1);
    assert!(matches!(
        commit.durable(second.last_offset).wait(),
        Err(DurableError::SyncFailed(_))
    ));
}

#[test]
fn a_failed_roll_fsync_stops_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (heard, _watch) = heard(dir.path());
    let config = LogConfig {
        segment_bytes: 1024,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    disk_faults::fail_fsyncs(dir.path(), Vec::new());
    // Appends roll segments; the rolled segments' fsyncs fail (in the background); a later append or flush
    // takes the failure.
    let mut refused = false;
    for i in 0..200 {
        if log
            .append(&mut batch(i), &AppendOptions::default())
            .is_err()
        {
            refused = true;
            break;
        }
    }
    if !refused {
        assert!(log.flush().is_err());
    }
    disk_faults::free(dir.path());
    assert!(log.flush().is_err());
    assert_eq!(heard.lock().len(), 1);
}
