//! The key index against a full scan: rolls, reopening, corrupt and missing files, retention, truncation,
//! compaction, every codec, hash collisions, latest/time/paging queries, and a property test.

use std::collections::HashMap;
use std::path::Path;

use annal_log::batch::{Compression, KeyValue, ProducerFields};
use annal_log::key_index::{inspect_file, key_hash};
use annal_log::records::{build_compressed_batch, DecodedBatch};
use annal_log::{AppendOptions, Cleaner, CleanerConfig, KeyQuery, Log, LogConfig, LogError};
use proptest::prelude::*;

type Row = (i64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2000,
        key_index: true,
        ..LogConfig::default()
    }
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Every record from the log start (offset, timestamp, key, value), in order.
fn scan(log: &Log) -> Vec<Row> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        let Some(slice) = read.slice else { break };
        let bytes = slice.read_to_vec().unwrap();
        let mut position = 0;
        let mut next = offset;
        while position < bytes.len() {
            let decoded = DecodedBatch::new(&bytes[position..], 1 << 24).unwrap();
            position += decoded.header.size();
            next = decoded.header.next_offset();
            if decoded.header.is_control() {
                continue;
            }
            for r in decoded.collect_records().unwrap() {
                if r.offset >= offset {
                    out.push((
                        r.offset,
                        r.timestamp,
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

/// Every record with `key`, paging through `lookup_key` with small pages.
fn lookup_all(log: &mut Log, key: &[u8]) -> Vec<(i64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut query = KeyQuery {
        max_records: 3,
        ..KeyQuery::new(key)
    };
    loop {
        let page = log.lookup_key(&query).unwrap();
        out.extend(page.records.into_iter().map(|r| {
            assert_eq!(r.key.as_deref(), Some(key));
            (r.offset, r.value)
        }));
        match page.next_offset {
            Some(next) => query.from_offset = next,
            None => return out,
        }
    }
}

fn expected(log: &Log, key: &[u8]) -> Vec<(i64, Option<Vec<u8>>)> {
    scan(log)
        .into_iter()
        .filter(|r| r.2.as_deref() == Some(key))
        .map(|r| (r.0, r.3))
        .collect()
}

fn append(log: &mut Log, records: &[KeyValue<'_>], ts: i64, codec: Compression) {
    let timestamps = vec![ts; records.len()];
    let mut bytes = build_compressed_batch(records, &timestamps, codec, ProducerFields::default());
    log.append(
        &mut bytes,
        &AppendOptions {
            now_ms: ts,
            ..AppendOptions::default()
        },
    )
    .unwrap();
}

/// 10 keys, `n` records, batches of 3, codecs in turn.
fn fill(log: &mut Log, n: usize, ts0: i64) {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
    let keys: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("key-{}", i % 10).into_bytes())
        .collect();
    for (chunk, start) in (0..n).collect::<Vec<_>>().chunks(3).zip(0..) {
        let records: Vec<KeyValue<'_>> = chunk
            .iter()
            .map(|&i| {
                // Every seventh record has no key; they are never indexed.
                let key = (i % 7 != 6).then_some(keys[i].as_slice());
                (key, Some(values[i].as_slice()))
            })
            .collect();
        append(
            log,
            &records,
            ts0 + chunk[0] as i64,
            CODECS[start % CODECS.len()],
        );
    }
}

fn index_everything(log: &mut Log) {
    for _ in 0..1000 {
        if log.index_keys(1 << 20).unwrap().pending_segments == 0 {
            return;
        }
    }
    panic!("the key index did not finish");
}

fn key_index_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".keyindex"))
        .collect();
    names.sort();
    names
}

fn assert_exact(log: &mut Log) {
    for k in 0..10 {
        let key = format!("key-{k}").into_bytes();
        let want = expected(log, &key);
        assert!(!want.is_empty());
        assert_eq!(lookup_all(log, &key), want, "key-{k}");
    }
    assert!(lookup_all(log, b"no-such-key").is_empty());
}

#[test]
fn lookups_equal_a_scan_across_rolls_and_every_codec_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    fill(&mut log, 300, 1_700_000_000_000);
    assert!(log.segments().len() > 3, "the test needs several segments");
    // Without any background step the lookup indexes what it needs itself.
    assert_exact(&mut log);
    index_everything(&mut log);
    let files = key_index_files(dir.path());
    assert_eq!(
        files.len(),
        log.segments().len() - 1,
        "every sealed segment has its file: {files:?}"
    );
    for name in &files {
        let summary = inspect_file(&dir.path().join(name)).unwrap();
        assert!(summary.entry_count > 0);
    }
    log.close().unwrap();

    let mut log = Log::open(dir.path(), config()).unwrap();
    index_everything(&mut log);
    assert!(log
        .key_index_status()
        .iter()
        .rev()
        .skip(1)
        .all(|(_, state, complete, _)| *state == "file" && *complete));
    assert_exact(&mut log);
}

#[test]
fn stats_show_the_backlog_the_files_and_the_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    fill(&mut log, 300, 1_700_000_000_000);
    let before = log.key_index_stats();
    assert_eq!(
        before.unindexed_bytes,
        log.size_bytes(),
        "nothing indexed yet"
    );
    assert_eq!(before.file_bytes, 0);
    assert_eq!(before.pending_segments, log.segments().len() as u64);
    index_everything(&mut log);
    let after = log.key_index_stats();
    assert_eq!(after.unindexed_bytes, 0);
    assert_eq!(after.pending_segments, 0);
    let on_disk: u64 = key_index_files(dir.path())
        .iter()
        .map(|n| std::fs::metadata(dir.path().join(n)).unwrap().len())
        .sum();
    assert!(on_disk > 0);
    assert_eq!(after.file_bytes, on_disk);
    // The active segment's keyed records are in memory.
    let active = log.key_index_status().last().copied().unwrap();
    assert_eq!(Some(after.memory_entries as usize), active.3);
    assert!(after.memory_entries > 0);
    // Off: nothing.
    log.set_config(LogConfig {
        key_index: false,
        ..config()
    });
    assert_eq!(log.key_index_stats(), Default::default());
}

#[test]
fn a_corrupt_or_missing_file_is_rebuilt_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    fill(&mut log, 200, 1_700_000_000_000);
    index_everything(&mut log);
    log.close().unwrap();
    let files = key_index_files(dir.path());
    assert!(files.len() >= 3);
    // One file with a flipped entry byte, one cut short, one gone, one with a huge entry count.
    let corrupt = dir.path().join(&files[0]);
    let mut bytes = std::fs::read(&corrupt).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&corrupt, &bytes).unwrap();
    assert!(inspect_file(&corrupt).is_err());
    let short = dir.path().join(&files[1]);
    let bytes = std::fs::read(&short).unwrap();
    std::fs::write(&short, &bytes[..bytes.len() - 3]).unwrap();
    std::fs::remove_file(dir.path().join(&files[2])).unwrap();
    if let Some(name) = files.get(3) {
        let huge = dir.path().join(name);
        let mut bytes = std::fs::read(&huge).unwrap();
        bytes[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(&huge, &bytes).unwrap();
        assert!(inspect_file(&huge).is_err());
    }

    let mut log = Log::open(dir.path(), config()).unwrap();
    assert_exact(&mut log);
    index_everything(&mut log);
    for name in &files {
        inspect_file(&dir.path().join(name)).unwrap_or_else(|e| panic!("{name} not rebuilt: {e}"));
    }
    assert_exact(&mut log);
}

#[test]
fn retention_and_truncation_delete_the_files_and_lookups_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let old = 1_600_000_000_000;
    fill(&mut log, 150, old);
    let first_new = log.log_end_offset();
    fill(&mut log, 150, now());
    index_everything(&mut log);
    let before = key_index_files(dir.path());
    log.set_config(LogConfig {
        retention_ms: 24 * 3600 * 1000,
        ..config()
    });
    assert!(log.apply_retention(now()).unwrap() > 0);
    assert!(log.log_start_offset() > 0 && log.log_start_offset() <= first_new);
    let after = key_index_files(dir.path());
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");
    for name in &after {
        let base = name.trim_end_matches(".keyindex");
        assert!(
            dir.path().join(format!("{base}.log")).exists(),
            "{name} outlived its segment"
        );
    }
    assert_exact(&mut log);

    // A follower's divergence truncation: the cut segment keeps its index (in memory), later ones go.
    let cut = log.log_end_offset() - 40;
    log.truncate_to(cut).unwrap();
    assert!(log.log_end_offset() <= cut);
    for name in key_index_files(dir.path()) {
        let base: i64 = name.trim_end_matches(".keyindex").parse().unwrap();
        assert!(base < log.log_end_offset(), "{name} past the truncation");
    }
    assert_exact_some(&mut log);
    fill(&mut log, 60, now());
    assert_exact(&mut log);
}

/// Like `assert_exact`, for logs where some keys may have no records left.
fn assert_exact_some(log: &mut Log) {
    for k in 0..10 {
        let key = format!("key-{k}").into_bytes();
        assert_eq!(lookup_all(log, &key), expected(log, &key), "key-{k}");
    }
}

#[test]
fn compaction_rebuilds_the_index_of_cleaned_segments() {
    let dir = tempfile::tempdir().unwrap();
    let compacted = LogConfig {
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        ..config()
    };
    let mut log = Log::open(dir.path(), compacted).unwrap();
    fill(&mut log, 300, 1_700_000_000_000);
    log.roll().unwrap();
    index_everything(&mut log);
    let cleaner = Cleaner::new(CleanerConfig::default());
    let outcome = log.clean(&cleaner, 1_700_000_100_000, None).unwrap();
    assert!(outcome.is_some(), "the log should have been cleaned");
    // Compaction keeps the newest record per key: one per key, and the index must agree.
    for k in 0..10 {
        let key = format!("key-{k}").into_bytes();
        let want = expected(&log, &key);
        assert_eq!(want.len(), 1, "key-{k}: {want:?}");
        assert_eq!(lookup_all(&mut log, &key), want);
    }
    index_everything(&mut log);
    for name in key_index_files(dir.path()) {
        inspect_file(&dir.path().join(&name)).unwrap();
    }
}

/// Two different keys with the same CRC-32C (found by brute force over a small space; birthday bound).
fn colliding_keys() -> (Vec<u8>, Vec<u8>) {
    let mut seen: HashMap<u32, Vec<u8>> = HashMap::new();
    for i in 0u64.. {
        let key = format!("user-{i}").into_bytes();
        if let Some(other) = seen.insert(key_hash(&key), key.clone()) {
            return (other, key);
        }
    }
    unreachable!()
}

#[test]
fn hash_collisions_never_reach_an_answer() {
    let (a, b) = colliding_keys();
    assert_ne!(a, b);
    assert_eq!(key_hash(&a), key_hash(&b));
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    for i in 0..60 {
        let key = if i % 3 == 0 { &a } else { &b };
        let value = format!("v{i}").into_bytes();
        append(
            &mut log,
            &[(Some(key), Some(&value))],
            1_700_000_000_000 + i,
            CODECS[i as usize % 5],
        );
    }
    for key in [&a, &b] {
        assert_eq!(lookup_all(&mut log, key), expected(&log, key));
    }
    index_everything(&mut log);
    let page = log.lookup_key(&KeyQuery::new(&a)).unwrap();
    assert_eq!(page.records.len(), 20);
    assert!(
        page.rejected_candidates >= 40,
        "the colliding key's records were read and rejected"
    );
    let latest = log
        .lookup_key(&KeyQuery {
            latest: true,
            ..KeyQuery::new(&b)
        })
        .unwrap();
    assert_eq!(latest.records.len(), 1);
    assert_eq!(latest.records[0].offset, 59);
}

#[test]
fn latest_time_ranges_upper_bounds_and_byte_pages() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let ts0 = 1_700_000_000_000;
    fill(&mut log, 300, ts0);
    let all = expected(&log, b"key-4");
    let latest = log
        .lookup_key(&KeyQuery {
            latest: true,
            ..KeyQuery::new(b"key-4")
        })
        .unwrap();
    assert_eq!(latest.records.len(), 1);
    assert_eq!(latest.records[0].offset, all.last().unwrap().0);
    // An upper bound (the high watermark) hides what is above it.
    let hw = all[all.len() - 3].0;
    let below = log
        .lookup_key(&KeyQuery {
            latest: true,
            upper_offset: Some(hw),
            ..KeyQuery::new(b"key-4")
        })
        .unwrap();
    assert_eq!(below.records[0].offset, all[all.len() - 4].0);
    // Time range: records stamped ts0 + (first offset of their batch).
    let since = ts0 + 150;
    let until = ts0 + 210;
    let ranged = log
        .lookup_key(&KeyQuery {
            since_ms: Some(since),
            until_ms: Some(until),
            max_records: 1000,
            ..KeyQuery::new(b"key-4")
        })
        .unwrap();
    let want: Vec<i64> = scan(&log)
        .into_iter()
        .filter(|r| r.2.as_deref() == Some(b"key-4".as_slice()) && r.1 >= since && r.1 <= until)
        .map(|r| r.0)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(
        ranged.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        want
    );
    // Byte pages: each value is ~9 bytes, key 5; 20 bytes holds one record.
    let page = log
        .lookup_key(&KeyQuery {
            max_bytes: 20,
            ..KeyQuery::new(b"key-4")
        })
        .unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.next_offset, Some(all[1].0));
}

#[test]
fn off_by_default_and_turning_it_off_deletes_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    fill(&mut log, 30, 1_700_000_000_000);
    assert!(matches!(
        log.lookup_key(&KeyQuery::new(b"key-1")),
        Err(LogError::KeyIndexDisabled { .. })
    ));
    log.set_config(config());
    log.roll().unwrap();
    index_everything(&mut log);
    assert_eq!(key_index_files(dir.path()).len(), 1);
    assert_exact(&mut log);
    log.set_config(LogConfig::default());
    assert!(key_index_files(dir.path()).is_empty());
}

#[test]
fn the_active_segments_memory_is_capped_by_rolling() {
    let dir = tempfile::tempdir().unwrap();
    let big = LogConfig {
        segment_bytes: 1 << 30,
        ..config()
    };
    let mut log = Log::open(dir.path(), big).unwrap();
    let keys: Vec<Vec<u8>> = (0..1000).map(|i| format!("k{i}").into_bytes()).collect();
    let per_batch = 1000;
    let batches = annal_log::key_index::ACTIVE_ENTRIES_MAX / per_batch + 2;
    for b in 0..batches {
        let records: Vec<KeyValue<'_>> = keys.iter().map(|k| (Some(k.as_slice()), None)).collect();
        append(
            &mut log,
            &records,
            1_700_000_000_000 + b as i64,
            Compression::Lz4,
        );
        log.index_keys(1 << 20).unwrap();
    }
    assert!(
        log.segments().len() >= 2,
        "a full in-memory index rolls the log"
    );
    for (_, _, _, entries) in log.key_index_status() {
        assert!(entries.unwrap_or(0) <= annal_log::key_index::ACTIVE_ENTRIES_MAX + per_batch);
    }
    index_everything(&mut log);
    let status = log.key_index_status();
    let (active, sealed) = status.split_last().unwrap();
    assert!(
        sealed.iter().all(|s| s.1 == "file"),
        "sealed segments keep nothing in memory: {status:?}"
    );
    assert_eq!(active.1, "in memory");
    let found = log
        .lookup_key(&KeyQuery {
            max_records: 10_000,
            ..KeyQuery::new(b"k7")
        })
        .unwrap();
    assert_eq!(found.records.len(), batches);
}

#[derive(Debug, Clone)]
enum Op {
    /// Records with keys from a small space (None: no key), one batch of the codec.
    Append(Vec<Option<u8>>, u8),
    Roll,
    Index,
    Reopen,
    /// Truncate this many offsets off the end.
    Truncate(u8),
    /// Move the log start forward by this many offsets (DeleteRecords), deleting whole segments.
    DeleteBefore(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (proptest::collection::vec(proptest::option::weighted(0.9, 0u8..12), 1..8), 0u8..5)
            .prop_map(|(keys, codec)| Op::Append(keys, codec)),
        1 => Just(Op::Roll),
        2 => Just(Op::Index),
        1 => Just(Op::Reopen),
        1 => (1u8..20).prop_map(Op::Truncate),
        1 => (1u8..30).prop_map(Op::DeleteBefore),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn index_lookups_equal_a_full_scan(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes: 500, ..config() };
        let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
        let mut ts = 1_700_000_000_000;
        for op in ops {
            match op {
                Op::Append(keys, codec) => {
                    let keys: Vec<Option<Vec<u8>>> =
                        keys.iter().map(|k| k.map(|k| format!("key-{k}").into_bytes())).collect();
                    let records: Vec<KeyValue<'_>> =
                        keys.iter().map(|k| (k.as_deref(), Some(b"v".as_slice()))).collect();
                    ts += 1;
                    append(&mut log, &records, ts, CODECS[codec as usize]);
                }
                Op::Roll => log.roll().unwrap(),
                Op::Index => { log.index_keys(700).unwrap(); }
                Op::Reopen => {
                    log.close().unwrap();
                    log = Log::open(dir.path(), cfg.clone()).unwrap();
                }
                Op::Truncate(n) => {
                    let to = (log.log_end_offset() - i64::from(n)).max(0);
                    log.truncate_to(to).unwrap();
                }
                Op::DeleteBefore(n) => {
                    let to = (log.log_start_offset() + i64::from(n)).min(log.log_end_offset());
                    log.delete_records_before(to).unwrap();
                }
            }
            for k in 0..12u8 {
                let key = format!("key-{k}").into_bytes();
                prop_assert_eq!(lookup_all(&mut log, &key), expected(&log, &key));
            }
        }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// read_committed lookups leave out aborted transactions' records; control batches (markers carry keys of
/// their own) are never indexed.
#[test]
fn read_committed_leaves_out_aborted_records_and_markers_are_not_indexed() {
    use annal_log::batch::build_batch;
    use annal_log::control::{build_marker_batch, EndTxnMarker, TxnOutcome};
    use annal_log::AppendOrigin;
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let ts = 1_700_000_000_000;
    let txn = |pid: i64, value: &'static [u8]| {
        build_batch(
            &[(Some(b"order-1".as_slice()), Some(value))],
            &[ts],
            ProducerFields {
                producer_id: pid,
                producer_epoch: 0,
                base_sequence: 0,
                transactional: true,
            },
        )
    };
    let opts = AppendOptions {
        now_ms: ts,
        ..AppendOptions::default()
    };
    let coordinator = AppendOptions {
        origin: AppendOrigin::Coordinator,
        ..opts
    };
    log.append(&mut txn(1, b"aborted"), &opts).unwrap();
    log.append(&mut txn(2, b"committed"), &opts).unwrap();
    for (pid, outcome) in [(1, TxnOutcome::Abort), (2, TxnOutcome::Commit)] {
        let mut marker = build_marker_batch(
            pid,
            0,
            EndTxnMarker {
                outcome,
                coordinator_epoch: 0,
            },
            ts,
        );
        log.append(&mut marker, &coordinator).unwrap();
    }
    let values = |read_committed: bool, log: &mut Log| -> Vec<Vec<u8>> {
        log.lookup_key(&KeyQuery {
            read_committed,
            ..KeyQuery::new(b"order-1")
        })
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| r.value)
        .collect()
    };
    assert_eq!(
        values(false, &mut log),
        vec![b"aborted".to_vec(), b"committed".to_vec()]
    );
    assert_eq!(values(true, &mut log), vec![b"committed".to_vec()]);
    // Only the two data records are in the index: the markers' keys (version, type) are not.
    log.roll().unwrap();
    index_everything(&mut log);
    let files = key_index_files(dir.path());
    let summary = inspect_file(&dir.path().join(&files[0])).unwrap();
    assert_eq!(summary.entry_count, 2);
}
