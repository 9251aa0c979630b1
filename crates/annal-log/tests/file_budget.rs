//! Many logs share one small open-file budget (`FileHandles`): every segment file is reopened on demand, the
//! cache never holds more than its limit, and reads, timestamp lookups, recovery and truncation answer as they
//! do with every file open. Indexes of sealed segments are read from their files, not held in memory.

use std::sync::Arc;

use annal_log::batch::build_uncompressed_batch;
use annal_log::{AppendOptions, FileHandles, Log, LogConfig};

const LOGS: usize = 60;
const BATCHES: i64 = 80;
const BUDGET: usize = 32;

fn config(handles: &Arc<FileHandles>) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        file_handles: Arc::clone(handles),
        ..LogConfig::default()
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Batch `i` of a log: one record, timestamp 10_000 + 10 * i.
fn batch(log: usize, i: i64) -> Vec<u8> {
    let value = format!("log {log} record {i} {}", "x".repeat(100));
    build_uncompressed_batch(&[(None, Some(value.as_bytes()))], 10_000 + 10 * i)
}

/// Every offset reads back its own batch and every timestamp finds its record.
fn check_all(logs: &[Log], written: &[Vec<Vec<u8>>]) {
    for (l, log) in logs.iter().enumerate() {
        assert_eq!(log.log_end_offset(), written[l].len() as i64);
        for (i, bytes) in written[l].iter().enumerate() {
            let read = log.read(i as i64, 1, None).unwrap();
            let got = read.slice.expect("a batch").read_to_vec().unwrap();
            assert_eq!(&got, bytes, "log {l} offset {i}");
            let ts = 10_000 + 10 * i as i64;
            assert_eq!(
                log.offset_for_timestamp(ts - 5).unwrap(),
                Some((i as i64, ts)),
                "log {l} timestamp {ts}"
            );
        }
        let segments = log.segments();
        assert!(segments.len() >= 3, "log {l} rolled: {}", segments.len());
        for s in &segments[..segments.len() - 1] {
            assert!(
                !s.indexes_in_memory,
                "a sealed segment's indexes are read from disk"
            );
        }
    }
}

#[test]
fn many_logs_share_a_small_budget_through_writes_reads_crashes_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let handles = FileHandles::new(BUDGET);
    let fds_before = open_fds();
    let mut logs: Vec<Log> = (0..LOGS)
        .map(|l| Log::open(&dir.path().join(format!("p-{l}")), config(&handles)).unwrap())
        .collect();
    let mut written: Vec<Vec<Vec<u8>>> = vec![Vec::new(); LOGS];
    // Round robin, so every append finds its files evicted by the other logs.
    for i in 0..BATCHES {
        for (l, log) in logs.iter_mut().enumerate() {
            let mut bytes = batch(l, i);
            log.append(
                &mut bytes,
                &AppendOptions {
                    now_ms: 20_000,
                    ..AppendOptions::default()
                },
            )
            .unwrap();
            written[l].push(bytes);
        }
        assert!(handles.stats().open <= BUDGET);
    }
    let files: usize = logs.iter().map(|l| l.segments().len() * 3).sum();
    assert!(
        files > 10 * BUDGET,
        "{files} files, far more than the budget"
    );
    check_all(&logs, &written);
    let stats = handles.stats();
    assert!(stats.open <= BUDGET && stats.evicted_total > 0, "{stats:?}");
    // The cache, not the number of files, bounds the descriptors (slack for other threads of the harness).
    assert!(
        open_fds() <= fds_before + BUDGET + 16,
        "{} descriptors open, {fds_before} before",
        open_fds()
    );

    // Half close cleanly, half are dropped as if killed (no clean-shutdown flag): reopen all, same answers.
    for (l, log) in logs.drain(..).enumerate() {
        if l % 2 == 0 {
            log.close().unwrap();
        } else {
            drop(log);
        }
    }
    assert_eq!(handles.stats().open, 0, "closed logs leave nothing cached");
    let mut logs: Vec<Log> = (0..LOGS)
        .map(|l| Log::open(&dir.path().join(format!("p-{l}")), config(&handles)).unwrap())
        .collect();
    assert!(handles.stats().open <= BUDGET);
    check_all(&logs, &written);

    // Truncate every log into an older segment, which becomes active again, and append after it.
    for (l, log) in logs.iter_mut().enumerate() {
        let keep = 10 + l as i64 % 7;
        log.truncate_to(keep).unwrap();
        written[l].truncate(keep as usize);
        for i in keep..BATCHES {
            let mut bytes = batch(l, i);
            log.append(
                &mut bytes,
                &AppendOptions {
                    now_ms: 20_000,
                    ..AppendOptions::default()
                },
            )
            .unwrap();
            written[l].push(bytes);
        }
    }
    check_all(&logs, &written);
    assert!(handles.stats().open <= BUDGET);
}
