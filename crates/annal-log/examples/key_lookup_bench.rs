//! Key lookup with the key index versus a full scan of the same partition (issue 15). Not a test.
//!
//! `cargo run --release -p annal-log --example key_lookup_bench -- [records] [keys] [record bytes] [codec]`
//! (defaults 1000000, 10000, 1024, lz4). Writes one partition of `records` records over `keys` keys (round
//! robin, batches of 100, 128 MiB segments), builds the index, then times, for random keys:
//! - `lookup_key` (every record of the key, and `latest`): p50 and p99 over 200 lookups;
//! - a full scan of the partition that reads, decompresses and filters every batch (what a consumer would do
//!   without the index, minus the network): 3 runs, median;
//! - the ratio scan / lookup; the index size as a fraction of the log; append throughput with the index on
//!   and off, and the time the background indexing took per MiB of log.
//!
//! Everything runs in one process on a warm page cache, so the scan is the best case for the scan.

use std::time::{Duration, Instant};

use annal_log::batch::{Compression, ProducerFields};
use annal_log::records::{build_compressed_batch, DecodedBatch};
use annal_log::{AppendOptions, KeyQuery, Log, LogConfig};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Values like JSON events: a text frame around random hex (about 2:1 compressible).
fn values(count: usize, record_bytes: usize) -> Vec<Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..count)
        .map(|_| {
            let mut v = b"{\"event\":\"page_view\",\"payload\":\"".to_vec();
            while v.len() + 2 < record_bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                v.extend_from_slice(format!("{state:016x}").as_bytes());
            }
            v.truncate(record_bytes.saturating_sub(2));
            v.extend_from_slice(b"\"}");
            v
        })
        .collect()
}

fn write(
    log: &mut Log,
    records: u64,
    keys: &[Vec<u8>],
    values: &[Vec<u8>],
    codec: Compression,
) -> Duration {
    let now = 1_700_000_000_000;
    let started = Instant::now();
    let mut n = 0u64;
    while n < records {
        let batch: Vec<_> = (0..100)
            .map(|i| {
                (
                    Some(keys[((n + i) % keys.len() as u64) as usize].as_slice()),
                    Some(values[((n + i) % values.len() as u64) as usize].as_slice()),
                )
            })
            .collect();
        let mut bytes =
            build_compressed_batch(&batch, &[now; 100], codec, ProducerFields::default());
        log.append(
            &mut bytes,
            &AppendOptions {
                now_ms: now,
                ..AppendOptions::default()
            },
        )
        .expect("append");
        n += 100;
    }
    started.elapsed()
}

/// Every record of `key`, the way a consumer finds them without an index.
fn scan(log: &Log, key: &[u8]) -> usize {
    let mut found = 0;
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 4 << 20, None).expect("read");
        let Some(slice) = read.slice else { break };
        let bytes = slice.read_to_vec().expect("read slice");
        let mut position = 0;
        while position < bytes.len() {
            let decoded = DecodedBatch::new(&bytes[position..], 1 << 26).expect("batch");
            position += decoded.header.size();
            offset = decoded.header.next_offset();
            found += decoded
                .records()
                .filter_map(Result::ok)
                .filter(|r| r.key == Some(key))
                .count();
        }
    }
    found
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let records: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let key_count: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let record_bytes: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let codec = args
        .get(3)
        .and_then(|a| Compression::from_name(a))
        .unwrap_or(Compression::Lz4);
    let keys: Vec<Vec<u8>> = (0..key_count)
        .map(|k| format!("user-{k:08}").into_bytes())
        .collect();
    // 4099 distinct values (prime, so a key does not keep meeting the same value).
    let value = values(4099, record_bytes);
    let base = LogConfig {
        segment_bytes: 128 << 20,
        ..LogConfig::default()
    };

    let off_dir = tempfile::tempdir().expect("temporary directory");
    let mut off = Log::open(off_dir.path(), base.clone()).expect("open");
    let append_off = write(&mut off, records, &keys, &value, codec);
    drop(off);

    let dir = tempfile::tempdir().expect("temporary directory");
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            key_index: true,
            ..base
        },
    )
    .expect("open");
    let append_on = write(&mut log, records, &keys, &value, codec);
    let started = Instant::now();
    while log.index_keys(256 << 10).expect("index").pending_segments > 0 {}
    let indexing = started.elapsed();
    let log_bytes = log.size_bytes();
    let index_bytes: u64 = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".keyindex"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    // The active segment's index is in memory: count it at the file's 8 bytes an entry.
    let memory_entries: usize = log.key_index_status().iter().filter_map(|s| s.3).sum();
    let index_bytes = index_bytes + memory_entries as u64 * 8;

    let mut rng_state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_key = || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        &keys[(rng_state % key_count) as usize]
    };
    let per_key = (records / key_count) as usize;
    let (mut all, mut latest) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let key = next_key();
        let t = Instant::now();
        let page = log
            .lookup_key(&KeyQuery {
                max_records: per_key + 1,
                max_bytes: 64 << 20,
                ..KeyQuery::new(key)
            })
            .expect("lookup");
        all.push(t.elapsed());
        assert_eq!(page.records.len(), per_key, "every record of the key");
        let t = Instant::now();
        let page = log
            .lookup_key(&KeyQuery {
                latest: true,
                ..KeyQuery::new(key)
            })
            .expect("lookup");
        latest.push(t.elapsed());
        assert_eq!(page.records.len(), 1);
    }
    all.sort();
    latest.sort();
    let mut scans: Vec<Duration> = (0..3)
        .map(|_| {
            let key = next_key();
            let t = Instant::now();
            assert_eq!(scan(&log, key), per_key);
            t.elapsed()
        })
        .collect();
    scans.sort();
    let scan_time = scans[1];
    let mib = log_bytes as f64 / (1 << 20) as f64;
    println!(
        "records {records}, keys {key_count}, record bytes {record_bytes}, codec {codec:?}, log {mib:.0} MiB in {} segments",
        log.segments().len()
    );
    println!(
        "lookup all ({per_key} records): p50 {:?} p99 {:?}; latest: p50 {:?} p99 {:?}",
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        percentile(&latest, 0.5),
        percentile(&latest, 0.99)
    );
    println!("full scan of the partition: {scan_time:?} (median of 3)");
    println!(
        "scan / lookup: all p50 {:.0}x, p99 {:.0}x; latest p50 {:.0}x, p99 {:.0}x",
        scan_time.as_secs_f64() / percentile(&all, 0.5).as_secs_f64(),
        scan_time.as_secs_f64() / percentile(&all, 0.99).as_secs_f64(),
        scan_time.as_secs_f64() / percentile(&latest, 0.5).as_secs_f64(),
        scan_time.as_secs_f64() / percentile(&latest, 0.99).as_secs_f64()
    );
    println!(
        "index size: {} bytes, {:.2}% of the log",
        index_bytes,
        100.0 * index_bytes as f64 / log_bytes as f64
    );
    println!(
        "append: index off {:.0} MiB/s, on {:.0} MiB/s (the index is built off the append path); background indexing {:.1} ms per MiB of log",
        mib / append_off.as_secs_f64(),
        mib / append_on.as_secs_f64(),
        indexing.as_secs_f64() * 1000.0 / mib
    );
}
