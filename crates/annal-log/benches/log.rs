//! Append and sequential-read throughput of the partition log, each beside a plain file doing the same I/O.
//!
//! Every measured pair runs in the same process and moves the same bytes with the same syscall pattern, so the
//! ratio `log / plain` is what the engine costs on top of the file system (validation, CRC-32C, offset
//! assignment, indexes, rolling). `benches/ratios.py` prints the ratio table from `target/criterion`.
//!
//! Groups (one criterion iteration = the whole data set, so every sample has the same shape):
//! - `append_1KiB_records/{log,plain}/{16KiB,1MiB}_batches`: `ANNAL_BENCH_MIB` (default 1280) MiB of batches of
//!   1 KiB records appended to a fresh log with the default config (1 GiB segments: one roll per sample), no
//!   fsync; the plain writer `pwrite`s the same batches to a file and also starts a new file at 1 GiB (no fsync,
//!   the default flush policy leaves data to the page cache).
//! - `append_fsync_every_64MiB/{log,plain}/1MiB_batches`: `ANNAL_BENCH_FSYNC_MIB` (default 256) MiB, the log with
//!   `flush.messages` = the records of 64 MiB, the plain writer with `fdatasync` every 64 MiB.
//! - `read_sequential/{log,plain}/{16KiB,1MiB}_batches`: the whole log read front to back, `Log::read` +
//!   `FileSlice::read_into` with 1 MiB `max_bytes`, beside plain 1 MiB `read`s of the same segment files (page
//!   cache warm for both).
//!
//! Files live in `ANNAL_BENCH_DIR` (default: the system temp dir) and are deleted after every sample, which
//! also drops their dirty pages before most of them reach the disk.
//!
//! Paired mode (more robust ratios on a shared machine): `ANNAL_BENCH_PAIRED=1 cargo bench -p annal-log --bench log`.
//!
//! Run: `cargo bench -p annal-log --bench log` then `python3 crates/annal-log/benches/ratios.py`. On a busy machine
//! also run with `ANNAL_BENCH_CLOCK=cpu CRITERION_HOME=$PWD/target/criterion-cpu` (thread CPU time instead of wall
//! time) and `python3 crates/annal-log/benches/ratios.py target/criterion-cpu`.

use std::cell::{RefCell, RefMut};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use annal_log::batch::{self, BatchHeader};
use annal_log::{AppendOptions, Log, LogConfig};
use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;
const RECORD_VALUE_BYTES: usize = KIB;
const SEGMENT_BYTES: u64 = 1 << 30;
const READ_MAX_BYTES: usize = MIB;
const FSYNC_EVERY_BYTES: u64 = 64 * MIB as u64;

fn env_mib(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench_root() -> PathBuf {
    std::env::var_os("ANNAL_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

/// One batch of `records` 1 KiB records.
fn one_batch(records: usize) -> Vec<u8> {
    let value: Vec<u8> = (0..RECORD_VALUE_BYTES)
        .map(|i| (i * 131 % 251) as u8)
        .collect();
    let recs = vec![(None, Some(value.as_slice())); records];
    batch::build_uncompressed_batch(&recs, annal_log_now_ms())
}

/// The most 1 KiB records a batch of at most `batch_target` bytes holds, and that batch's size.
fn batch_shape(batch_target: usize) -> (usize, usize) {
    // Binary search: the largest count whose batch fits (sizes grow with the count).
    let (mut fits, mut too_many) = (1usize, batch_target / RECORD_VALUE_BYTES + 1);
    while too_many - fits > 1 {
        let mid = (fits + too_many) / 2;
        if one_batch(mid).len() <= batch_target {
            fits = mid;
        } else {
            too_many = mid;
        }
    }
    (fits, one_batch(fits).len())
}

/// Total bytes of the data set [`build_batches`] returns.
fn batches_bytes(batch_target: usize, total_bytes: usize) -> u64 {
    let (_, size) = batch_shape(batch_target);
    (total_bytes.div_ceil(size) * size) as u64
}

/// Batches of 1 KiB records, each as close to `batch_target` bytes as whole records allow, totalling at least
/// `total_bytes`. Built once; the log rewrites only base offsets and leader epochs in place, which keeps the CRC
/// valid, so the same buffers can be appended again and again.
fn build_batches(batch_target: usize, total_bytes: usize) -> Vec<Vec<u8>> {
    let (records, size) = batch_shape(batch_target);
    let template = one_batch(records);
    vec![template; total_bytes.div_ceil(size)]
}

/// Wall-clock time by default; with `ANNAL_BENCH_CLOCK=cpu`, the CPU time (user + system) of this thread, which
/// other processes on a busy machine do not inflate. The fsync group always uses wall-clock time (waiting for the
/// disk costs no CPU).
#[derive(Clone, Copy)]
enum Stopwatch {
    Wall(Instant),
    Cpu(Duration),
}

impl Stopwatch {
    fn start(allow_cpu: bool) -> Stopwatch {
        if allow_cpu && std::env::var("ANNAL_BENCH_CLOCK").is_ok_and(|v| v == "cpu") {
            Stopwatch::Cpu(thread_cpu_time())
        } else {
            Stopwatch::Wall(Instant::now())
        }
    }

    fn elapsed(self) -> Duration {
        match self {
            Stopwatch::Wall(start) => start.elapsed(),
            Stopwatch::Cpu(start) => thread_cpu_time().saturating_sub(start),
        }
    }
}

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn annal_log_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn records_in(batches: &[Vec<u8>]) -> u64 {
    batches
        .iter()
        .map(|b| BatchHeader::parse(b).map_or(0, |h| h.records_count as u64))
        .sum()
}

/// Appends every batch to a fresh log in a fresh directory; returns the time spent appending only.
fn log_append_once(batches: &mut [Vec<u8>], config: &LogConfig) -> Duration {
    let allow_cpu_clock = config.flush_messages == u64::MAX;
    let dir = tempfile::tempdir_in(bench_root()).expect("bench temp dir");
    let mut log = Log::open(dir.path(), config.clone()).expect("open log");
    let opts = AppendOptions::default();
    let start = Stopwatch::start(allow_cpu_clock);
    let mut slowest = Duration::ZERO;
    for b in batches.iter_mut() {
        let one = Instant::now();
        log.append(b, &opts).expect("append");
        slowest = slowest.max(one.elapsed());
    }
    let elapsed = start.elapsed();
    SLOWEST_APPEND_NS.fetch_max(
        slowest.as_nanos() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    drop(log);
    drop(dir);
    elapsed
}

/// The slowest single `append` (wall clock) since the last reset: with a roll, the roll's fsync of the full old
/// segment. Printed by the paired mode.
static SLOWEST_APPEND_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The baseline writer: `pwrite`s each batch at the end of a file, starting a new file at `segment_bytes` (as the
/// log rolls), with `fdatasync` every `fsync_every` bytes if given.
fn plain_write_once(batches: &[Vec<u8>], fsync_every: Option<u64>) -> Duration {
    let dir = tempfile::tempdir_in(bench_root()).expect("bench temp dir");
    let open = |n: usize| -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join(format!("{n:020}.plain")))
            .expect("create plain file")
    };
    let start = Stopwatch::start(fsync_every.is_none());
    let mut files = 0;
    let mut file = open(files);
    let mut position = 0u64;
    let mut unsynced = 0u64;
    for b in batches {
        if position > 0 && position + b.len() as u64 > SEGMENT_BYTES {
            files += 1;
            file = open(files);
            position = 0;
        }
        file.write_all_at(b, position).expect("plain write");
        position += b.len() as u64;
        unsynced += b.len() as u64;
        if fsync_every.is_some_and(|every| unsynced >= every) {
            file.sync_data().expect("plain fdatasync");
            unsynced = 0;
        }
    }
    let elapsed = start.elapsed();
    drop(file);
    drop(dir);
    elapsed
}

/// Reads the whole log front to back as a consumer would: `Log::read` at the next offset, then the bytes.
fn log_read_all(log: &Log, buf: &mut Vec<u8>) -> u64 {
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut total = 0u64;
    while offset < end {
        let read = log.read(offset, READ_MAX_BYTES, None).expect("read");
        let slice = read.slice.expect("data below the log end");
        buf.clear();
        slice.read_into(buf).expect("read slice");
        total += buf.len() as u64;
        offset = next_offset_after(buf);
    }
    total
}

/// The offset after the last batch in `bytes` (whole batches), found by walking the length fields.
fn next_offset_after(bytes: &[u8]) -> i64 {
    let mut position = 0;
    let mut next = 0;
    while let Some(header) = BatchHeader::parse(&bytes[position..]) {
        next = header.next_offset();
        position += header.size();
    }
    next
}

/// Reads the same segment files with plain 1 MiB `read`s.
fn plain_read_all(files: &[PathBuf], buf: &mut [u8]) -> u64 {
    let mut total = 0u64;
    for path in files {
        let mut file = File::open(path).expect("open segment");
        loop {
            let n = file.read(buf).expect("plain read");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    total
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list log dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    // One iteration is a whole data set (hundreds of MB): ten flat samples of one iteration each.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));
}

const BATCH_SHAPES: [(&str, usize); 2] = [("16KiB_batches", 16 * KIB), ("1MiB_batches", MIB)];

fn append(c: &mut Criterion) {
    let total = env_mib("ANNAL_BENCH_MIB", 1280) * MIB;
    let mut group = c.benchmark_group("append_1KiB_records");
    configure(&mut group);
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    for (name, target) in BATCH_SHAPES {
        // Built on first use, so benchmarks filtered out on the command line cost nothing.
        let batches = RefCell::new(None);
        let batches = || {
            RefMut::map(batches.borrow_mut(), |b| {
                b.get_or_insert_with(|| build_batches(target, total))
            })
        };
        group.throughput(Throughput::Bytes(batches_bytes(target, total)));
        group.bench_function(BenchmarkId::new("plain", name), |b| {
            let batches = batches();
            b.iter_custom(|iters| (0..iters).map(|_| plain_write_once(&batches, None)).sum())
        });
        group.bench_function(BenchmarkId::new("log", name), |b| {
            let mut batches = batches();
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| log_append_once(&mut batches, &config))
                    .sum()
            })
        });
    }
    group.finish();
}

fn append_fsync(c: &mut Criterion) {
    let total = env_mib("ANNAL_BENCH_FSYNC_MIB", 256) * MIB;
    let mut group = c.benchmark_group("append_fsync_every_64MiB");
    configure(&mut group);
    let bytes = batches_bytes(MIB, total);
    let batches = RefCell::new(None);
    let batches = || {
        RefMut::map(batches.borrow_mut(), |b| {
            b.get_or_insert_with(|| build_batches(MIB, total))
        })
    };
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function(BenchmarkId::new("plain", "1MiB_batches"), |b| {
        let batches = batches();
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| plain_write_once(&batches, Some(FSYNC_EVERY_BYTES)))
                .sum()
        })
    });
    group.bench_function(BenchmarkId::new("log", "1MiB_batches"), |b| {
        let mut batches = batches();
        let config = LogConfig {
            flush_messages: records_in(&batches) * FSYNC_EVERY_BYTES / bytes,
            ..LogConfig::default()
        };
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| log_append_once(&mut batches, &config))
                .sum()
        })
    });
    group.finish();
}

/// A log holding the data set, and its segment files, for the read benchmarks.
struct ReadFixture {
    log: Log,
    files: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

fn read_fixture(target: usize, total: usize) -> ReadFixture {
    let dir = tempfile::tempdir_in(bench_root()).expect("bench temp dir");
    let mut log = Log::open(dir.path(), LogConfig::default()).expect("open log");
    let mut batches = build_batches(target, total);
    let opts = AppendOptions::default();
    for b in batches.iter_mut() {
        log.append(b, &opts).expect("append");
    }
    let files = segment_files(dir.path());
    // Both readers must see exactly the bytes that were appended.
    let bytes = batches_bytes(target, total);
    assert_eq!(log_read_all(&log, &mut Vec::new()), bytes);
    assert_eq!(
        plain_read_all(&files, &mut vec![0u8; READ_MAX_BYTES]),
        bytes
    );
    ReadFixture {
        log,
        files,
        _dir: dir,
    }
}

fn read(c: &mut Criterion) {
    let total = env_mib("ANNAL_BENCH_MIB", 1280) * MIB;
    let mut group = c.benchmark_group("read_sequential");
    configure(&mut group);
    for (name, target) in BATCH_SHAPES {
        let fixture = RefCell::new(None);
        let fixture = || {
            RefMut::map(fixture.borrow_mut(), |f| {
                f.get_or_insert_with(|| read_fixture(target, total))
            })
        };
        group.throughput(Throughput::Bytes(batches_bytes(target, total)));
        group.bench_function(BenchmarkId::new("plain", name), |b| {
            let fixture = fixture();
            let mut buf = vec![0u8; READ_MAX_BYTES];
            b.iter_custom(|iters| {
                let start = Stopwatch::start(true);
                for _ in 0..iters {
                    criterion::black_box(plain_read_all(&fixture.files, &mut buf));
                }
                start.elapsed()
            })
        });
        group.bench_function(BenchmarkId::new("log", name), |b| {
            let fixture = fixture();
            let mut buf = Vec::with_capacity(2 * READ_MAX_BYTES);
            b.iter_custom(|iters| {
                let start = Stopwatch::start(true);
                for _ in 0..iters {
                    criterion::black_box(log_read_all(&fixture.log, &mut buf));
                }
                start.elapsed()
            })
        });
        // The fixture (and its files) is dropped here, before the next shape is built.
    }
    group.finish();
}

/// `ANNAL_BENCH_PAIRED=1`: instead of criterion, alternate plain and log runs (ABBA order) `ANNAL_BENCH_ROUNDS`
/// times (default 6) and print the median of the per-round ratios. On a machine shared with other work, load
/// drifts between criterion's benchmark functions (which run one after the other for tens of seconds); pairing
/// each log run with a plain run moments apart cancels most of that drift.
fn paired() {
    let total = env_mib("ANNAL_BENCH_MIB", 1280) * MIB;
    let rounds = env_mib("ANNAL_BENCH_ROUNDS", 6).max(1);
    let config = LogConfig::default();
    println!(
        "paired runs: {rounds} rounds, {} MiB per run, clock: {}",
        total / MIB,
        std::env::var("ANNAL_BENCH_CLOCK").unwrap_or_else(|_| "wall".into())
    );
    println!(
        "{:<22} {:<8} {:>12} {:>10} {:>16} {:>22}",
        "benchmark",
        "batches",
        "plain MiB/s",
        "log MiB/s",
        "log/plain median",
        "per-round log/plain"
    );
    for (name, target) in BATCH_SHAPES {
        let mut batches = build_batches(target, total);
        let bytes = batches_bytes(target, total);
        let mut runs = Vec::new();
        for round in 0..rounds {
            let (plain, log) = if round % 2 == 0 {
                let p = plain_write_once(&batches, None);
                (p, log_append_once(&mut batches, &config))
            } else {
                let l = log_append_once(&mut batches, &config);
                (plain_write_once(&batches, None), l)
            };
            runs.push((plain, log));
        }
        print_paired("append_1KiB_records", name, bytes, &runs);
        println!(
            "{:<22} {:<8} slowest single append (wall): {:.1} ms{}",
            "",
            name.trim_end_matches("_batches"),
            SLOWEST_APPEND_NS.swap(0, std::sync::atomic::Ordering::Relaxed) as f64 / 1e6,
            if bytes > LogConfig::default().segment_bytes {
                " (includes the roll: fsync of the full 1 GiB segment)"
            } else {
                ""
            }
        );
        drop(batches);

        let fixture = read_fixture(target, total);
        let mut buf = Vec::with_capacity(2 * READ_MAX_BYTES);
        let mut plain_buf = vec![0u8; READ_MAX_BYTES];
        let mut runs = Vec::new();
        for round in 0..rounds {
            let time_plain = |buf: &mut [u8]| {
                let start = Stopwatch::start(true);
                criterion::black_box(plain_read_all(&fixture.files, buf));
                start.elapsed()
            };
            let time_log = |buf: &mut Vec<u8>| {
                let start = Stopwatch::start(true);
                criterion::black_box(log_read_all(&fixture.log, buf));
                start.elapsed()
            };
            let (plain, log) = if round % 2 == 0 {
                let p = time_plain(&mut plain_buf);
                (p, time_log(&mut buf))
            } else {
                let l = time_log(&mut buf);
                (time_plain(&mut plain_buf), l)
            };
            runs.push((plain, log));
        }
        print_paired("read_sequential", name, bytes, &runs);
    }
}

fn print_paired(group: &str, shape: &str, bytes: u64, runs: &[(Duration, Duration)]) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / MIB as f64;
    let ratios: Vec<f64> = runs
        .iter()
        .map(|(p, l)| p.as_secs_f64() / l.as_secs_f64())
        .collect();
    let listed: Vec<String> = ratios
        .iter()
        .map(|r| format!("{:.0}%", r * 100.0))
        .collect();
    println!(
        "{group:<22} {:<8} {:>12.0} {:>10.0} {:>15.1}% {:>22}",
        shape.trim_end_matches("_batches"),
        median(runs.iter().map(|(p, _)| rate(*p)).collect()),
        median(runs.iter().map(|(_, l)| rate(*l)).collect()),
        median(ratios) * 100.0,
        listed.join(" ")
    );
}

criterion_group!(benches, append, append_fsync, read);

fn main() {
    if std::env::var("ANNAL_BENCH_PAIRED").is_ok_and(|v| v == "1") {
        paired();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
