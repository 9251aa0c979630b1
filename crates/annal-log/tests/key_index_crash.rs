//! Crash test of the key index: a child process appends keyed batches (every codec), builds the key index in
//! small steps, rolls, truncates (a follower's divergence), applies retention and compacts, in a loop, while
//! this process kills it with SIGKILL at random moments, many times over. Kills land while batches are indexed,
//! while sealed files are written (tmp + rename) and while files are deleted. After every kill the log is
//! reopened and every key's lookup (all records, paged; and the latest) must equal a full scan of the log;
//! then every `.keyindex` file on disk must match its segment exactly (the `annal dump-log` check). Files the
//! child left are either used after their checks or rebuilt: both must happen over the run.
//!
//! The child is this test binary itself, re-executed to run the ignored `key_index_crash_child` test. The check
//! needs nothing from the child: it compares the index with the log as it is.
//!
//! Keys and values have fixed lengths, so a batch of `n` uncompressed records always has the same size: a
//! truncation followed by new appends grows a segment back to the very size and end offset it had, with other
//! keys. A stale file of the old contents would pass the header's shape check then; the test catches it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use annal_log::batch::{Compression, ProducerFields};
use annal_log::key_index::verify_against_log;
use annal_log::records::{build_compressed_batch, DecodedBatch};
use annal_log::{AppendOptions, Cleaner, CleanerConfig, KeyQuery, Log, LogConfig};
use rand::{Rng, SeedableRng};

const LOG_DIR_ENV: &str = "ANNAL_KEY_INDEX_CRASH_LOG_DIR";
const SEED_ENV: &str = "ANNAL_KEY_INDEX_CRASH_SEED";
const KEYS: u64 = 40;
const NOW: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 3000,
        key_index: true,
        // Retention deletes whole segments (and their files) as the log grows.
        retention_bytes: 60_000,
        retention_ms: -1,
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 0,
        ..LogConfig::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("user-{k:04}").into_bytes()
}

/// The test's and the child's append: `count` records of random keys, fixed-length values.
fn append(log: &mut Log, rng: &mut impl Rng, count: usize, codec: Compression) {
    let keys: Vec<Option<Vec<u8>>> = (0..count)
        .map(|_| (rng.gen_range(0..10) != 0).then(|| key(rng.gen_range(0..KEYS))))
        .collect();
    let values: Vec<Vec<u8>> = (0..count)
        .map(|_| format!("v{:07}", rng.gen_range(0..10_000_000)).into_bytes())
        .collect();
    let records: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| (k.as_deref(), Some(v.as_slice())))
        .collect();
    let mut bytes = build_compressed_batch(
        &records,
        &vec![NOW; count],
        codec,
        ProducerFields::default(),
    );
    log.append(
        &mut bytes,
        &AppendOptions {
            now_ms: NOW,
            ..AppendOptions::default()
        },
    )
    .expect("append");
}

/// A record as a scan sees it: offset, key, value.
type Row = (i64, Option<Vec<u8>>, Option<Vec<u8>>);
/// A key's records: offset, value.
type KeyRecords = Vec<(i64, Option<Vec<u8>>)>;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
#[ignore = "child process of key_index_survives_sigkill_while_indexing"]
fn key_index_crash_child() {
    let Some(dir) = std::env::var_os(LOG_DIR_ENV) else {
        println!("not started by the crash test: nothing to do");
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut log = Log::open(Path::new(&dir), config()).expect("child opens the log");
    let cleaner = Cleaner::new(CleanerConfig::default());
    loop {
        let codec = if rng.gen_range(0..3) == 0 {
            CODECS[rng.gen_range(0..CODECS.len())]
        } else {
            Compression::None
        };
        let count = rng.gen_range(1..6);
        append(&mut log, &mut rng, count, codec);
        // Small steps: segments are often half indexed in memory when the kill comes.
        log.index_keys(rng.gen_range(64..2048)).expect("index_keys");
        match rng.gen_range(0..100) {
            0..=5 => {
                // A divergence: cut a few records off the end, then the same number of appends of the same
                // shape (other keys) grow the segment back.
                let end = log.log_end_offset();
                let cut = end - rng.gen_range(1..12);
                if cut > log.log_start_offset() {
                    log.truncate_to(cut).expect("truncate");
                }
            }
            6..=8 => log.roll().expect("roll"),
            9..=10 => {
                log.apply_retention(NOW).expect("retention");
            }
            11 => {
                log.clean(&cleaner, NOW, None).expect("clean");
            }
            _ => {}
        }
    }
}

/// Every record of the log from its start: (offset, key, value).
fn scan(log: &Log) -> Vec<Row> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let Some(slice) = log.read(offset, 1 << 20, None).expect("read").slice else {
            break;
        };
        let bytes = slice.read_to_vec().expect("read slice");
        let mut position = 0;
        let mut next = offset;
        while position < bytes.len() {
            let decoded = DecodedBatch::new(&bytes[position..], 1 << 24).expect("a valid batch");
            position += decoded.header.size();
            next = decoded.header.next_offset();
            for r in decoded.collect_records().expect("records") {
                if r.offset >= offset {
                    out.push((
                        r.offset,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ));
                }
            }
        }
        assert!(next > offset, "reads advance");
        offset = next;
    }
    out
}

/// Every record of `key` through `lookup_key`, in small pages.
fn lookup_all(log: &mut Log, key: &[u8], iteration: usize) -> KeyRecords {
    let mut out = Vec::new();
    let mut query = KeyQuery {
        max_records: 7,
        ..KeyQuery::new(key)
    };
    loop {
        let page = log
            .lookup_key(&query)
            .unwrap_or_else(|e| panic!("iteration {iteration}: lookup failed: {e}"));
        out.extend(page.records.into_iter().map(|r| (r.offset, r.value)));
        match page.next_offset {
            Some(next) => query.from_offset = next,
            None => return out,
        }
    }
}

fn key_index_files(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    std::fs::read_dir(dir)
        .expect("list the log directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".keyindex"))
        .map(|e| {
            let modified = e.metadata().and_then(|m| m.modified()).expect("mtime");
            (e.path(), modified)
        })
        .collect()
}

/// Lookups of every key equal the scan; returns the number of records checked.
fn assert_lookups_exact(log: &mut Log, iteration: usize) -> usize {
    let records = scan(log);
    let mut by_key: BTreeMap<Vec<u8>, KeyRecords> = BTreeMap::new();
    for (offset, k, v) in &records {
        if let Some(k) = k {
            by_key
                .entry(k.clone())
                .or_default()
                .push((*offset, v.clone()));
        }
    }
    for k in (0..KEYS).chain([KEYS + 1]) {
        let k = key(k);
        let expected = by_key.get(&k).cloned().unwrap_or_default();
        let found = lookup_all(log, &k, iteration);
        assert_eq!(
            found,
            expected,
            "iteration {iteration}: lookup of {} differs from a scan",
            String::from_utf8_lossy(&k)
        );
        let latest = log
            .lookup_key(&KeyQuery {
                latest: true,
                ..KeyQuery::new(&k)
            })
            .unwrap_or_else(|e| panic!("iteration {iteration}: latest lookup failed: {e}"));
        assert_eq!(
            latest.records.first().map(|r| r.offset),
            expected.last().map(|e| e.0),
            "iteration {iteration}: latest of {}",
            String::from_utf8_lossy(&k)
        );
    }
    records.len()
}

fn index_everything(log: &mut Log) {
    for _ in 0..10_000 {
        if log
            .index_keys(1 << 20)
            .expect("index_keys")
            .pending_segments
            == 0
        {
            return;
        }
    }
    panic!("the key index did not finish");
}

#[test]
fn key_index_survives_sigkill_while_indexing() {
    const ITERATIONS: usize = 40;
    const TIME_LIMIT: Duration = Duration::from_secs(60);
    let work = tempfile::tempdir().expect("tempdir");
    let log_dir = work.path().join("log");
    let exe = std::env::current_exe().expect("the test binary");
    let mut rng = rand::thread_rng();
    let started = Instant::now();
    let (mut iterations, mut reused, mut rebuilt, mut checked_records) = (0, 0, 0, 0);
    while iterations < ITERATIONS && started.elapsed() < TIME_LIMIT {
        iterations += 1;
        let stderr_path = work.path().join("child.stderr");
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "key_index_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(LOG_DIR_ENV, &log_dir)
            .env(SEED_ENV, rng.gen::<u64>().to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
            .spawn()
            .expect("re-executing the test binary as the child");
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..400)));
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "iteration {iterations}: the child stopped by itself ({status}): {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap the child");

        let left = key_index_files(&log_dir);
        let mut log = Log::open(&log_dir, config())
            .unwrap_or_else(|e| panic!("iteration {iterations}: reopen failed: {e}"));
        // Lookups first, on whatever the child left: they check or rebuild what they touch.
        checked_records += assert_lookups_exact(&mut log, iterations);
        index_everything(&mut log);
        assert_lookups_exact(&mut log, iterations);
        let now = key_index_files(&log_dir);
        for (path, modified) in &now {
            match left.get(path) {
                Some(before) if before == modified => reused += 1,
                _ => rebuilt += 1,
            }
            let log_path = path.with_extension("log");
            verify_against_log(path, &log_path, 1 << 24).unwrap_or_else(|e| {
                panic!(
                    "iteration {iterations}: {} does not match its segment: {e}",
                    path.display()
                )
            });
        }
        let stats = log.key_index_stats();
        assert_eq!(
            (stats.unindexed_bytes, stats.pending_segments),
            (0, 0),
            "iteration {iterations}: the index covers the whole log"
        );
        let on_disk: u64 = now
            .keys()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum();
        assert_eq!(stats.file_bytes, on_disk, "iteration {iterations}");
        // Every sealed segment has its file now; only the active one is in memory.
        let sealed = log.segments().len() - 1;
        assert_eq!(
            now.len(),
            sealed,
            "iteration {iterations}: {} key index files for {sealed} sealed segments",
            now.len()
        );
        // Appends by this process too, so the next child starts from a log this process changed.
        for _ in 0..3 {
            append(&mut log, &mut rng, 2, Compression::None);
        }
        drop(log);
    }
    println!(
        "{iterations} kills, {checked_records} records checked, {reused} files reused after their checks, {rebuilt} rebuilt"
    );
    assert!(iterations >= 10, "only {iterations} iterations");
    assert!(reused > 0, "no file the child wrote was ever reused");
    assert!(rebuilt > 0, "no file was ever rebuilt");
}
