//! Group commit: durable acknowledgements share fsyncs, and an fsync failure reaches every waiter.
//!
//! These run on the disk holding the build, where an fsync costs milliseconds: that cost is what group commit
//! amortises.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake};
use std::time::Duration;

use annal_log::batch::build_uncompressed_batch;
use annal_log::{AppendOptions, DurableError, DurableLog, GroupCommit, Log, LogConfig, SyncHandle};
use parking_lot::Mutex;

fn batch(i: usize) -> Vec<u8> {
    let value = format!("record {i}").into_bytes();
    // Current time: an old timestamp would make every append roll the segment (segment.ms), fsyncing it.
    let now = AppendOptions::default().now_ms;
    build_uncompressed_batch(&[(None, Some(value.as_slice()))], now)
}

/// A directory on the disk holding the build (not a tmpfs /tmp, where fsync costs nothing and nothing would
/// need sharing).
fn disk_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 64 * 1024,
        ..LogConfig::default()
    }
}

/// A log whose fsyncs are counted and can be made to fail (a real fsync error cannot be provoked on demand;
/// everything else is the real engine and real files).
struct Observed {
    log: Mutex<Log>,
    syncs: AtomicU64,
    fail: AtomicBool,
    /// Appends made while `fail` is set; a failing fsync waits for `pile_up` of them.
    failing_appends: AtomicU64,
    pile_up: AtomicU64,
}

impl DurableLog for Observed {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.log.lock())
    }

    fn sync(&self, handle: &SyncHandle) -> std::io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            // Let the other appenders pile up behind this fsync, as they would behind a slow failing disk: every
            // one of them appends before it fails (once it has, the log refuses appends). Bounded, in case one
            // never comes.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while self.failing_appends.load(Ordering::SeqCst) < self.pile_up.load(Ordering::SeqCst)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        handle.sync()
    }
}

fn observed(dir: &std::path::Path) -> Arc<Observed> {
    Arc::new(Observed {
        log: Mutex::new(Log::open(dir, small_segments()).unwrap()),
        syncs: AtomicU64::new(0),
        fail: AtomicBool::new(false),
        failing_appends: AtomicU64::new(0),
        pile_up: AtomicU64::new(0),
    })
}

#[test]
fn concurrent_durable_appends_share_fsyncs() {
    const THREADS: usize = 8;
    const APPENDS: usize = 40;
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = Arc::new(GroupCommit::start(Arc::clone(&log)));
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (log, commit, start) = (&log, &commit, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..APPENDS {
                    let info = log
                        .log
                        .lock()
                        .append(&mut batch(t * APPENDS + i), &AppendOptions::default())
                        .unwrap();
                    commit.wait_durable(info.last_offset).unwrap();
                    // Acknowledged means flushed: the engine's recovery point is past it.
                    assert!(log.log.lock().flushed_offset() > info.last_offset);
                    assert!(commit.durable_offset() > info.last_offset);
                }
            });
        }
    });
    let appends = (THREADS * APPENDS) as u64;
    let syncs = log.syncs.load(Ordering::SeqCst);
    println!("{appends} durable appends took {syncs} fsync rounds");
    assert_eq!(commit.sync_count(), syncs);
    assert!(
        syncs * 2 <= appends,
        "{appends} durable appends by {THREADS} threads needed {syncs} fsyncs: they are not being shared"
    );
    assert_eq!(log.log.lock().flushed_offset(), appends as i64);
}

#[test]
fn an_fsync_error_reaches_every_waiter_and_every_later_one() {
    const THREADS: usize = 6;
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = Arc::new(GroupCommit::start(Arc::clone(&log)));
    // One good round first.
    let info = log
        .log
        .lock()
        .append(&mut batch(0), &AppendOptions::default())
        .unwrap();
    commit.wait_durable(info.last_offset).unwrap();
    let durable_before = log.log.lock().flushed_offset();

    log.pile_up.store(THREADS as u64, Ordering::SeqCst);
    log.fail.store(true, Ordering::SeqCst);
    let start = Barrier::new(THREADS);
    let errors: Vec<DurableError> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (log, commit, start) = (&log, &commit, &start);
                s.spawn(move || {
                    start.wait();
                    let info = log
                        .log
                        .lock()
                        .append(&mut batch(t + 1), &AppendOptions::default())
                        .unwrap();
                    log.failing_appends.fetch_add(1, Ordering::SeqCst);
                    commit.wait_durable(info.last_offset).unwrap_err()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(
            matches!(e, DurableError::SyncFailed(io) if io.raw_os_error() == Some(libc::EIO)),
            "{e}"
        );
        assert!(e.to_string().contains("reopen"), "actionable message: {e}");
    }
    assert!(
        log.syncs.load(Ordering::SeqCst) <= 3,
        "waiters behind a failing fsync share it"
    );
    assert_eq!(
        log.log.lock().flushed_offset(),
        durable_before,
        "a failed fsync marks nothing flushed"
    );
    // Poisoned for good: even with the disk healthy again, no durability is promised without a reopen, and
    // the log itself refuses appends and flushes (annal_log::dir_failures).
    log.fail.store(false, Ordering::SeqCst);
    let end = log.log.lock().log_end_offset();
    assert!(log
        .log
        .lock()
        .append(&mut batch(99), &AppendOptions::default())
        .is_err());
    assert!(log.log.lock().flush().is_err());
    assert!(matches!(
        commit.wait_durable(end - 1),
        Err(DurableError::SyncFailed(_))
    ));
    // Offsets that were durable before the failure stay acknowledged.
    commit.wait_durable(0).unwrap();
}

/// Minimal executor: polls a future on this thread, parking between wake-ups (no async runtime needed).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn async_waiters_resolve_without_blocking_threads() {
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = GroupCommit::start(Arc::clone(&log));
    let mut waits = Vec::new();
    for i in 0..20 {
        let info = log
            .log
            .lock()
            .append(&mut batch(i), &AppendOptions::default())
            .unwrap();
        // Registered now, awaited later: all 20 can share one or two fsyncs.
        waits.push(commit.durable(info.last_offset));
    }
    for wait in waits {
        block_on(wait).unwrap();
    }
    assert_eq!(log.log.lock().flushed_offset(), 20);
    let syncs = log.syncs.load(Ordering::SeqCst);
    assert!(syncs < 20, "20 registered waits took {syncs} fsyncs");
    // A dropped wait is withdrawn cleanly and does not hold up others.
    let info = log
        .log
        .lock()
        .append(&mut batch(20), &AppendOptions::default())
        .unwrap();
    drop(commit.durable(info.last_offset));
    block_on(commit.durable(info.last_offset)).unwrap();
}

#[test]
fn truncation_fails_waiters_for_removed_offsets() {
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = GroupCommit::start(Arc::clone(&log));
    // Slow failing-free fsyncs are not needed: register, truncate under the log's lock, then check.
    let (pending, kept) = {
        let mut l = log.log.lock();
        for i in 0..5 {
            l.append(&mut batch(i), &AppendOptions::default()).unwrap();
        }
        // Registered under the lock of the appends; holding it keeps the flusher from syncing until the
        // truncation is reported.
        let wait = commit.durable(4);
        let kept = commit.durable(2);
        l.truncate_to(3).unwrap();
        commit.truncated(l.log_end_offset());
        (wait, kept)
    };
    kept.wait().unwrap();
    assert!(matches!(
        block_on(pending),
        Err(DurableError::Truncated {
            offset: 4,
            log_end: 3
        })
    ));
    commit.wait_durable(2).unwrap();
    assert_eq!(log.log.lock().flushed_offset(), 3);
}

#[test]
fn waiting_for_an_offset_never_appended_is_an_error_not_a_hang() {
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = GroupCommit::start(Arc::clone(&log));
    log.log
        .lock()
        .append(&mut batch(0), &AppendOptions::default())
        .unwrap();
    assert!(matches!(
        commit.wait_durable(10),
        Err(DurableError::NotAppended {
            offset: 10,
            log_end: 1
        })
    ));
    drop(commit);
}

#[test]
fn inline_waiters_fsync_in_the_first_poll_and_share_the_round() {
    let dir = disk_dir();
    let log = observed(dir.path());
    let commit = GroupCommit::start_inline(Arc::clone(&log));
    let mut waits = Vec::new();
    for i in 0..5 {
        let info = log
            .log
            .lock()
            .append(&mut batch(i), &AppendOptions::default())
            .unwrap();
        waits.push(commit.durable(info.last_offset));
    }
    assert_eq!(
        log.syncs.load(Ordering::SeqCst),
        0,
        "no fsync before a wait"
    );
    // No flusher thread: the first poll runs the round, which answers every waiter registered before it.
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    for wait in &mut waits {
        assert!(matches!(pin!(wait).poll(&mut cx), Poll::Ready(Ok(()))));
    }
    assert_eq!(
        log.syncs.load(Ordering::SeqCst),
        1,
        "one round for all five"
    );
    assert_eq!(log.log.lock().flushed_offset(), 5);
    let info = log
        .log
        .lock()
        .append(&mut batch(5), &AppendOptions::default())
        .unwrap();
    commit.wait_durable(info.last_offset).unwrap();
    assert_eq!(log.syncs.load(Ordering::SeqCst), 2);
    // Dropping the group commit answers a pending waiter instead of leaving it hanging.
    let info = log
        .log
        .lock()
        .append(&mut batch(6), &AppendOptions::default())
        .unwrap();
    let pending = commit.durable(info.last_offset);
    drop(commit);
    assert!(matches!(
        block_on(pending),
        Err(DurableError::Stopped { .. })
    ));
}
