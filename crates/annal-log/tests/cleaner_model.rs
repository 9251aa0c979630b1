//! The cleaner against a model: many segments, every codec, tombstones, records without keys, reopenings.

use std::collections::HashMap;

use annal_log::batch::{Compression, ProducerFields};
use annal_log::records::{build_compressed_batch, DecodedBatch};
use annal_log::{AppendOptions, CleanOutcome, Cleaner, CleanerConfig, Log, LogConfig};
use proptest::prelude::*;

type Row = (i64, Option<Vec<u8>>, Option<Vec<u8>>);
type KeyValueRow = (Option<Vec<u8>>, Option<Vec<u8>>);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 1000,
        ..LogConfig::default()
    }
}

/// Every record in the log from its start, in order.
fn read_all(log: &Log) -> Vec<Row> {
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
            let size = decoded.header.size();
            for r in decoded.collect_records().unwrap() {
                if r.offset >= offset {
                    out.push((
                        r.offset,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ));
                }
            }
            next = decoded.header.next_offset();
            position += size;
        }
        assert!(next > offset, "reads advance");
        offset = next;
    }
    out
}

#[derive(Debug, Clone)]
enum Op {
    /// Records (key index or none, value or tombstone) in one batch of the codec.
    Append(Vec<(Option<u8>, bool)>, u8),
    Roll,
    /// Advance the clock by this many ms, then clean.
    Clean(u16),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::collection::vec((prop::option::weighted(0.9, 0u8..12), prop::bool::weighted(0.8)), 1..6), 0u8..5)
            .prop_map(|(r, c)| Op::Append(r, c)),
        1 => Just(Op::Roll),
        2 => (0u16..2000).prop_map(Op::Clean),
        1 => Just(Op::Reopen),
    ]
}

fn codec(i: u8) -> Compression {
    [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ][i as usize % 5]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn cleaner_keeps_the_latest_record_per_key(ops in prop::collection::vec(op(), 1..60), small_map in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        // A small key map cleans the dirty section in several passes.
        let cleaner = Cleaner::new(CleanerConfig {
            dedupe_buffer_bytes: if small_map { 25 * 8 } else { 1 << 20 },
            ..CleanerConfig::default()
        });
        let mut model: Vec<Row> = Vec::new();
        let mut now = 1_700_000_000_000i64;
        let mut value_counter = 0u32;
        for op in ops {
            match op {
                Op::Append(records, c) => {
                    let rows: Vec<KeyValueRow> = records.iter().map(|(k, live)| {
                        value_counter += 1;
                        (k.map(|k| vec![b'k', k]), live.then(|| format!("v{value_counter}").into_bytes()))
                    }).collect();
                    let kv: Vec<_> = rows.iter().map(|(k, v)| (k.as_deref(), v.as_deref())).collect();
                    let timestamps = vec![now; kv.len()];
                    let mut bytes = build_compressed_batch(&kv, &timestamps, codec(c), ProducerFields::default());
                    let info = log.append(&mut bytes, &AppendOptions { now_ms: now, ..AppendOptions::default() }).unwrap();
                    for (i, (k, v)) in rows.into_iter().enumerate() {
                        model.push((info.first_offset + i as i64, k, v));
                    }
                }
                Op::Roll => log.roll().unwrap(),
                Op::Clean(advance) => {
                    now += i64::from(advance);
                    let before = log.cleanable(now, None).unwrap();
                    if let Some(CleanOutcome::Swapped(_)) = log.clean(&cleaner, now, None).unwrap() {
                        let after = log.cleanable(now, None).unwrap();
                        let cleaned_up_to = after.first_dirty_offset;
                        prop_assert!(cleaned_up_to > before.first_dirty_offset);
                        let got = read_all(&log);
                        // Below the cleaned edge: only the latest record of each key (within the cleaned part).
                        let mut latest: HashMap<&Vec<u8>, i64> = HashMap::new();
                        for (o, k, _) in model.iter().filter(|r| r.0 < cleaned_up_to) {
                            if let Some(k) = k { latest.insert(k, *o); }
                        }
                        for (o, k, _) in got.iter().filter(|r| r.0 < cleaned_up_to) {
                            let k = k.as_ref().expect("records without a key are cleaned away");
                            prop_assert_eq!(latest.get(k), Some(o), "an older record of a key survived");
                        }
                        // Every model record at or past the edge is still there.
                        let tail: Vec<_> = model.iter().filter(|r| r.0 >= cleaned_up_to).cloned().collect();
                        let got_tail: Vec<_> = got.iter().filter(|r| r.0 >= cleaned_up_to).cloned().collect();
                        prop_assert_eq!(got_tail, tail);
                    }
                }
                Op::Reopen => {
                    log.close().unwrap();
                    log = Log::open(dir.path(), config()).unwrap();
                }
            }
            check(&log, &model)?;
        }
        log.close().unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        check(&log, &model)?;
    }
}

/// What holds at every step: the log is a subsequence of the model, and the latest live value of every key
/// is there.
fn check(log: &Log, model: &[Row]) -> Result<(), TestCaseError> {
    let got = read_all(log);
    let by_offset: HashMap<i64, &Row> = model.iter().map(|r| (r.0, r)).collect();
    let mut last = -1;
    for row in &got {
        prop_assert!(row.0 > last, "offsets increase");
        last = row.0;
        prop_assert_eq!(
            by_offset.get(&row.0).copied(),
            Some(row),
            "a record changed"
        );
    }
    let mut latest: HashMap<&Vec<u8>, &Row> = HashMap::new();
    for row in model {
        if let Some(k) = &row.1 {
            latest.insert(k, row);
        }
    }
    let present: std::collections::HashSet<i64> = got.iter().map(|r| r.0).collect();
    for row in latest.values() {
        if row.2.is_some() {
            prop_assert!(
                present.contains(&row.0),
                "the latest value of a key is gone: {:?}",
                row
            );
        }
    }
    prop_assert_eq!(
        log.log_end_offset(),
        model.len() as i64,
        "offsets never change"
    );
    Ok(())
}

#[test]
fn tombstones_go_after_delete_retention_and_small_segments_merge() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let cleaner = Cleaner::new(CleanerConfig::default());
    let now = 1_700_000_000_000i64;
    for round in 0..20 {
        let value = format!("value-{round}");
        let live = round % 5 != 4;
        let v = live.then_some(value.as_bytes());
        let mut bytes = build_compressed_batch(
            &[
                (Some(b"a".as_slice()), v),
                (Some(b"b".as_slice()), Some(b"x".as_slice())),
            ],
            &[now, now],
            Compression::Zstd,
            ProducerFields::default(),
        );
        log.append(
            &mut bytes,
            &AppendOptions {
                now_ms: now,
                ..AppendOptions::default()
            },
        )
        .unwrap();
        log.roll().unwrap();
    }
    let segments_before = log.segments().len();
    assert!(matches!(
        log.clean(&cleaner, now, None).unwrap(),
        Some(CleanOutcome::Swapped(_))
    ));
    // "a" was deleted last (round 19), "b" holds its latest value; the tombstone stays for delete.retention.ms.
    let rows = read_all(&log);
    assert_eq!(
        rows,
        vec![
            (38, Some(b"a".to_vec()), None),
            (39, Some(b"b".to_vec()), Some(b"x".to_vec()))
        ]
    );
    assert!(
        log.segments().len() < segments_before,
        "small cleaned segments are grouped"
    );
    // New dirty data, then a pass after the horizon: the tombstone goes.
    let mut bytes = build_compressed_batch(
        &[(Some(b"c".as_slice()), Some(b"1".as_slice()))],
        &[now],
        Compression::None,
        ProducerFields::default(),
    );
    log.append(
        &mut bytes,
        &AppendOptions {
            now_ms: now,
            ..AppendOptions::default()
        },
    )
    .unwrap();
    log.roll().unwrap();
    assert!(matches!(
        log.clean(&cleaner, now + 1001, None).unwrap(),
        Some(CleanOutcome::Swapped(_))
    ));
    let rows = read_all(&log);
    assert_eq!(
        rows,
        vec![
            (39, Some(b"b".to_vec()), Some(b"x".to_vec())),
            (40, Some(b"c".to_vec()), Some(b"1".to_vec()))
        ]
    );
    // ListOffsets by time and reads across the gaps.
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((39, now)));
    assert_eq!(log.log_end_offset(), 41);
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(read_all(&log).len(), 2);
}

#[test]
fn nothing_is_cleaned_below_the_ratio_or_past_the_upper_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            min_cleanable_dirty_ratio: 0.5,
            ..config()
        },
    )
    .unwrap();
    let cleaner = Cleaner::new(CleanerConfig::default());
    for _ in 0..4 {
        let mut bytes = build_compressed_batch(
            &[(Some(b"a".as_slice()), Some(b"v".as_slice()))],
            &[1],
            Compression::None,
            ProducerFields::default(),
        );
        log.append(&mut bytes, &AppendOptions::default()).unwrap();
        log.roll().unwrap();
    }
    // The high watermark at 1: only the first segment is cleanable, and it holds the latest... nothing to gain
    // below the bound, so records past it stay.
    assert!(matches!(
        log.clean(&cleaner, 10, Some(2)).unwrap(),
        Some(CleanOutcome::Swapped(_))
    ));
    assert_eq!(
        read_all(&log).len(),
        3,
        "offsets 2 and 3 are past the bound"
    );
    assert_eq!(log.cleanable(10, Some(2)).unwrap().dirty_bytes, 0);
    assert!(log.clean(&cleaner, 10, Some(2)).unwrap().is_none());
    let c = log.cleanable(10, None).unwrap();
    assert!(c.dirty_ratio > 0.5, "{c:?}");
    assert!(matches!(
        log.clean(&cleaner, 10, None).unwrap(),
        Some(CleanOutcome::Swapped(_))
    ));
    assert_eq!(
        read_all(&log),
        vec![(3, Some(b"a".to_vec()), Some(b"v".to_vec()))]
    );
}
