//! Cleaner throughput and peak memory: writes a compacted log of keyed updates, then times one full pass.
//!
//! `cargo run --release -p annal-log --example cleaner_bench -- [MiB of dirty log] [distinct keys] [codec]`
//! (defaults 256, 100000, none). Prints dirty MiB cleaned per second, the pass's CPU time (its thread's schedstat)
//! and the process's peak RSS (VmHWM), which is mostly the key map (`log.cleaner.dedupe.buffer.size` bounds it)
//! plus the batch buffers.

use std::time::Instant;

use annal_log::batch::{Compression, ProducerFields};
use annal_log::records::build_compressed_batch;
use annal_log::{AppendOptions, CleanOutcome, Cleaner, CleanerConfig, Log, LogConfig};

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time of the calling thread so far, in seconds (the scheduler's nanosecond account; 0 if unreadable).
fn thread_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(256);
    let keys: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let codec = args
        .get(2)
        .and_then(|a| Compression::from_name(a))
        .unwrap_or(Compression::None);
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = LogConfig {
        segment_bytes: 64 << 20,
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config.clone()).expect("open");
    let value = vec![b'x'; 200];
    let key_strings: Vec<Vec<u8>> = (0..keys)
        .map(|k| format!("key-{k:012}").into_bytes())
        .collect();
    let mut n = 0u64;
    let now = 1_700_000_000_000;
    while log.size_bytes() < mib << 20 {
        let records: Vec<_> = (0..100)
            .map(|i| {
                (
                    Some(key_strings[((n + i) % keys) as usize].as_slice()),
                    Some(value.as_slice()),
                )
            })
            .collect();
        n += 100;
        let mut bytes =
            build_compressed_batch(&records, &[now; 100], codec, ProducerFields::default());
        log.append(
            &mut bytes,
            &AppendOptions {
                now_ms: now,
                ..AppendOptions::default()
            },
        )
        .expect("append");
    }
    log.roll().expect("roll");
    log.flush().expect("flush");
    let dirty = log.size_bytes();
    let rss_before = peak_rss_kib();
    let cleaner = Cleaner::new(CleanerConfig::default());
    let started = Instant::now();
    let cpu_before = thread_cpu_s();
    let outcome = log.clean(&cleaner, now, None).expect("clean");
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu_before;
    let Some(CleanOutcome::Swapped(stats)) = outcome else {
        panic!("nothing was cleaned: {outcome:?}");
    };
    println!(
        "cleaner: {codec:?} {:.1} MiB dirty ({n} records, {keys} keys) cleaned in {elapsed:.3} s = {:.1} MiB/s (CPU {cpu:.3} s); \
         {:.1} MiB left; peak RSS {} MiB (before the pass {} MiB); key map {} of {} entries",
        dirty as f64 / 1048576.0,
        dirty as f64 / 1048576.0 / elapsed,
        log.size_bytes() as f64 / 1048576.0,
        peak_rss_kib() / 1024,
        rss_before / 1024,
        stats.keys,
        stats.key_capacity,
    );
}
