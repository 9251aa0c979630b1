//! Crash test of the cleaner: a child process appends keyed records (flushing each append), rolls and cleans in
//! a loop, while this process kills it with SIGKILL at random moments, many times over. After every kill the log
//! reopens consistent: every record is the one written at its offset, offsets increase, the latest live record
//! of every key is there, nothing flushed is lost, and no swap is left half done.
//!
//! The child is this test binary itself, re-executed to run the ignored `cleaner_crash_child` test. Record
//! contents are a function of their offset, so the whole log can be checked without the child's help.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use annal_log::batch::{Compression, ProducerFields};
use annal_log::records::{build_compressed_batch, DecodedBatch};
use annal_log::{AppendOptions, Cleaner, CleanerConfig, Log, LogConfig};
use rand::Rng;

const LOG_DIR_ENV: &str = "ANNAL_CLEANER_CRASH_LOG_DIR";
const KEYS: i64 = 9;
const NOW: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 0,
        ..LogConfig::default()
    }
}

fn key(offset: i64) -> Vec<u8> {
    format!("key-{}", offset % KEYS).into_bytes()
}

/// Every 11th record is a tombstone.
fn value(offset: i64) -> Option<Vec<u8>> {
    (offset % 11 != 5).then(|| {
        format!("value-{offset}-")
            .repeat(1 + (offset % 4) as usize)
            .into_bytes()
    })
}

fn append_next(log: &mut Log) {
    let base = log.log_end_offset();
    let count = 1 + base % 4;
    let keys: Vec<Vec<u8>> = (base..base + count).map(key).collect();
    let values: Vec<Option<Vec<u8>>> = (base..base + count).map(value).collect();
    let records: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| (Some(k.as_slice()), v.as_deref()))
        .collect();
    let codec = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ][(base % 5) as usize];
    let mut bytes = build_compressed_batch(
        &records,
        &vec![NOW; records.len()],
        codec,
        ProducerFields::default(),
    );
    let info = log
        .append(
            &mut bytes,
            &AppendOptions {
                now_ms: NOW,
                ..AppendOptions::default()
            },
        )
        .unwrap();
    assert_eq!(info.first_offset, base);
}

#[test]
#[ignore = "child process of cleaner_survives_sigkill_at_any_moment"]
fn cleaner_crash_child() {
    let Some(dir) = std::env::var_os(LOG_DIR_ENV) else {
        println!("not started by the crash test: nothing to do");
        return;
    };
    let mut log = Log::open(Path::new(&dir), config()).expect("child opens the log");
    let cleaner = Cleaner::new(CleanerConfig::default());
    let mut now = NOW;
    loop {
        for _ in 0..5 {
            append_next(&mut log);
            log.flush().expect("flush");
        }
        log.roll().expect("roll");
        now += 10;
        log.clean(&cleaner, now, None).expect("clean");
    }
}

fn verify(log: &Log, iteration: usize) -> i64 {
    let end = log.log_end_offset();
    let mut present = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < end {
        let Some(slice) = log.read(offset, 1 << 20, None).unwrap().slice else {
            break;
        };
        let bytes = slice.read_to_vec().unwrap();
        let mut position = 0;
        while position < bytes.len() {
            let decoded = DecodedBatch::new(&bytes[position..], 1 << 24).unwrap();
            for r in decoded.collect_records().unwrap() {
                assert_eq!(
                    r.key,
                    Some(key(r.offset).as_slice()),
                    "iteration {iteration}: key at {}",
                    r.offset
                );
                assert_eq!(
                    r.value.map(<[u8]>::to_vec),
                    value(r.offset),
                    "iteration {iteration}: value at {}",
                    r.offset
                );
                if r.offset >= offset {
                    present.push(r.offset);
                }
            }
            offset = decoded.header.next_offset();
            position += decoded.header.size();
        }
    }
    assert!(
        present.windows(2).all(|w| w[0] < w[1]),
        "iteration {iteration}: offsets increase"
    );
    let mut latest: HashMap<i64, i64> = HashMap::new();
    for o in 0..end {
        latest.insert(o % KEYS, o);
    }
    for (_, o) in latest {
        if value(o).is_some() {
            assert!(
                present.binary_search(&o).is_ok(),
                "iteration {iteration}: latest record {o} of its key is gone"
            );
        }
    }
    assert!(
        !log.dir().join("cleaner.swap").exists(),
        "iteration {iteration}: a swap was left half done"
    );
    end
}

#[test]
fn cleaner_survives_sigkill_at_any_moment() {
    const ITERATIONS: usize = 30;
    const TIME_LIMIT: Duration = Duration::from_secs(40);
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("log");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let started = Instant::now();
    let mut iterations = 0;
    let mut last_end = 0;
    let mut grew = 0;
    while iterations < ITERATIONS && started.elapsed() < TIME_LIMIT {
        iterations += 1;
        let stderr_path = work.path().join("child.stderr");
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "cleaner_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(LOG_DIR_ENV, &log_dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("re-executing the test binary as the child");
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "iteration {iterations}: the child stopped by itself ({status}): {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let log = Log::open(&log_dir, config())
            .unwrap_or_else(|e| panic!("iteration {iterations}: reopen failed: {e}"));
        let end = verify(&log, iterations);
        // Every append was flushed before the next one: nothing below the previous end is lost.
        assert!(
            end >= last_end,
            "iteration {iterations}: the log end went back from {last_end} to {end}"
        );
        if end > last_end {
            grew += 1;
        }
        last_end = end;
        drop(log);
    }
    assert!(
        grew >= iterations / 2,
        "the child made progress in only {grew} of {iterations} runs"
    );
    // The log was compacted: far fewer records than offsets.
    let log = Log::open(&log_dir, config()).unwrap();
    let bytes: u64 = log.segments().iter().map(|s| s.size_bytes).sum();
    assert!(last_end > 200, "only {last_end} records written");
    assert!(
        bytes < (last_end as u64) * 20,
        "{bytes} bytes for {last_end} offsets: not compacted"
    );
}
