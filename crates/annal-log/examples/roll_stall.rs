//! How long the append that rolls a segment blocks: appends 1 MiB batches of 1 KiB records across segment
//! rolls and prints the slowest appends, the rolling ones and the overall rate.
//!
//! `cargo run --release -p annal-log --example roll_stall -- [total MiB, default 2560] [segment MiB, default 1024]`
//! (the log goes to `ANNAL_BENCH_DIR` or the temporary directory and is deleted afterwards).

use std::time::{Duration, Instant};

use annal_log::{batch, AppendOptions, Log, LogConfig};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number of MiB"));
    let total_mib = args.next().unwrap_or(2560);
    let segment_mib = args.next().unwrap_or(1024);
    let base = std::env::var_os("ANNAL_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(base).expect("temporary directory");
    let config = LogConfig {
        segment_bytes: segment_mib << 20,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config).expect("open log");
    let value = vec![b'x'; 1024 - 10];
    let records: Vec<_> = (0..1000)
        .map(|_| (None::<&[u8]>, Some(value.as_slice())))
        .collect();
    let mut bytes = batch::build_uncompressed_batch(&records, 1_700_000_000_000);
    let opts = AppendOptions {
        now_ms: 1_700_000_000_000,
        ..AppendOptions::default()
    };

    let appends = (total_mib << 20) / bytes.len() as u64;
    let mut latencies = Vec::with_capacity(appends as usize);
    let mut rolls = Vec::new();
    let start = Instant::now();
    for _ in 0..appends {
        let segments = log.segments().len();
        let t = Instant::now();
        log.append(&mut bytes, &opts).expect("append");
        let took = t.elapsed();
        latencies.push(took);
        if log.segments().len() != segments {
            rolls.push(took);
        }
    }
    let elapsed = start.elapsed();
    let t = Instant::now();
    log.close().expect("close");
    let close = t.elapsed();
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{appends} appends of {} KiB, {} rolls: {:.0} MiB/s; append p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; rolling appends {:?} ms; close {:.0} ms",
        bytes.len() >> 10,
        rolls.len(),
        (appends * bytes.len() as u64) as f64 / (1u64 << 20) as f64 / elapsed.as_secs_f64(),
        ms(pct(0.5)),
        ms(pct(0.99)),
        ms(*latencies.last().unwrap()),
        rolls.iter().map(|d| (ms(*d) * 10.0).round() / 10.0).collect::<Vec<_>>(),
        ms(close),
    );
}
