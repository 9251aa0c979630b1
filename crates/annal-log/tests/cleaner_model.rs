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

/// A compacted log rolls its active segment once it is older than `max.compaction.lag.ms` (when that is below
/// `segment.ms`), so the cleaner, which never touches the active segment, can meet the promised lag; a log that is
/// not compacted keeps rolling by `segment.ms` alone.
#[test]
fn max_compaction_lag_rolls_the_active_segment_of_a_compacted_log() {
    let append_at = |log: &mut Log, timestamp: i64| {
        let mut bytes = build_compressed_batch(
            &[(Some(b"a".as_slice()), Some(b"v".as_slice()))],
            &[timestamp],
            Compression::None,
            ProducerFields::default(),
        );
        log.append(&mut bytes, &AppendOptions::default()).unwrap();
    };
    let lagged = LogConfig {
        segment_bytes: 1 << 20,
        segment_ms: 7 * 24 * 3600 * 1000,
        max_compaction_lag_ms: 60_000,
        ..config()
    };
    for (compact, segments_expected) in [(true, 2), (false, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogConfig {
                compact,
                ..lagged.clone()
            },
        )
        .unwrap();
        append_at(&mut log, 1_000);
        append_at(&mut log, 1_000 + 60_000); // exactly the lag: not past it
        assert_eq!(log.segments().len(), 1, "compact={compact}");
        append_at(&mut log, 1_000 + 60_001);
        assert_eq!(log.segments().len(), segments_expected, "compact={compact}");
    }
}

// ---- Transactions: aborted data goes, markers outlive their data, read_committed sees the latest committed value.

mod txn_model {
    use std::collections::{BTreeMap, HashMap, HashSet};

    use annal_log::batch::{BatchHeader, Compression, ProducerFields};
    use annal_log::control::{build_marker_batch, parse_marker, EndTxnMarker, TxnOutcome};
    use annal_log::records::{build_compressed_batch, DecodedBatch};
    use annal_log::{AppendOptions, AppendOrigin, CleanOutcome, Cleaner, CleanerConfig, Log};
    use proptest::prelude::*;

    use super::{codec, config};

    /// Producers 1..=PRODUCERS are transactional; plain appends have no producer id.
    const PRODUCERS: i64 = 3;

    /// A data record of the model and what it belongs to.
    #[derive(Debug, Clone, PartialEq)]
    struct Rec {
        offset: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        /// The transaction (index into `Model::outcomes`), if transactional.
        txn: Option<usize>,
    }

    #[derive(Debug, Default)]
    struct Model {
        records: Vec<Rec>,
        /// Per transaction: `None` while open.
        outcomes: Vec<Option<TxnOutcome>>,
        log_end: i64,
        /// Per producer: next sequence and open transaction.
        producers: HashMap<i64, (i32, Option<usize>)>,
    }

    impl Model {
        fn outcome(&self, rec: &Rec) -> Option<TxnOutcome> {
            match rec.txn {
                None => Some(TxnOutcome::Commit),
                Some(t) => self.outcomes[t],
            }
        }
        fn committed(&self, rec: &Rec) -> bool {
            self.outcome(rec) == Some(TxnOutcome::Commit)
        }
        fn aborted(&self, rec: &Rec) -> bool {
            self.outcome(rec) == Some(TxnOutcome::Abort)
        }
        /// The latest committed record of each key below `below`.
        fn latest_committed(&self, below: i64) -> HashMap<&Vec<u8>, &Rec> {
            let mut latest = HashMap::new();
            for rec in self.records.iter().filter(|r| r.offset < below) {
                if let (Some(k), true) = (&rec.key, self.committed(rec)) {
                    latest.insert(k, rec);
                }
            }
            latest
        }
    }

    type Row = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

    /// Every batch of the log from its start: header, marker outcome for a control batch, records.
    fn read_batches(log: &Log) -> Vec<(BatchHeader, Option<TxnOutcome>, Vec<Row>)> {
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
                let marker = if decoded.header.is_control() && decoded.header.records_count > 0 {
                    parse_marker(&bytes[position..position + size])
                        .unwrap()
                        .map(|m| m.outcome)
                } else {
                    None
                };
                let rows = decoded
                    .collect_records()
                    .unwrap()
                    .into_iter()
                    .filter(|r| !decoded.header.is_control() && r.offset >= offset)
                    .map(|r| {
                        (
                            r.offset,
                            r.key.map(<[u8]>::to_vec),
                            r.value.map(<[u8]>::to_vec),
                        )
                    })
                    .collect();
                if decoded.header.last_offset() >= offset {
                    out.push((decoded.header, marker, rows));
                }
                next = decoded.header.next_offset();
                position += size;
            }
            assert!(next > offset, "reads advance");
            offset = next;
        }
        out
    }

    /// What a read_committed consumer sees below the last stable offset, as Kafka's fetcher decides it: the
    /// fetch's aborted transactions make their producers' batches skipped until the producer's ABORT marker.
    fn read_committed(log: &Log) -> Vec<Row> {
        let lso = log.last_stable_offset(log.log_end_offset());
        let mut aborted: Vec<(i64, i64)> = log.aborted_transactions(log.log_start_offset(), lso);
        aborted.sort_by_key(|(_, first)| *first);
        let mut aborted = aborted.into_iter().peekable();
        let mut aborted_producers = HashSet::new();
        let mut out = Vec::new();
        for (header, marker, rows) in read_batches(log) {
            if header.base_offset >= lso {
                break;
            }
            if header.has_producer_id() {
                while let Some((producer, _)) =
                    aborted.next_if(|(_, first)| *first <= header.last_offset())
                {
                    aborted_producers.insert(producer);
                }
                if marker == Some(TxnOutcome::Abort) {
                    aborted_producers.remove(&header.producer_id);
                } else if header.is_transactional()
                    && aborted_producers.contains(&header.producer_id)
                {
                    continue;
                }
            }
            if header.is_control() {
                continue;
            }
            out.extend(rows.into_iter().filter(|r| r.0 < lso));
        }
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Records (key index or none, value or tombstone) in one batch of the codec; producer 0: no producer id.
        Append(i64, Vec<(Option<u8>, bool)>, u8),
        /// Producer's marker (commit or abort) if it has a transaction open.
        End(i64, bool),
        Roll,
        /// Advance the clock by this many ms, then clean.
        Clean(u16),
        /// Reopen; with true, without producer snapshots, so producer state is rebuilt from the cleaned log.
        Reopen(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        let records = prop::collection::vec(
            (
                prop::option::weighted(0.95, 0u8..8),
                prop::bool::weighted(0.8),
            ),
            1..5,
        );
        prop_oneof![
            6 => (0..=PRODUCERS, records, 0u8..5).prop_map(|(p, r, c)| Op::Append(p, r, c)),
            3 => (1..=PRODUCERS, prop::bool::weighted(0.6)).prop_map(|(p, c)| Op::End(p, c)),
            1 => Just(Op::Roll),
            2 => (0u16..2000).prop_map(Op::Clean),
            1 => any::<bool>().prop_map(Op::Reopen),
        ]
    }

    fn opts(now: i64, origin: AppendOrigin) -> AppendOptions {
        AppendOptions {
            now_ms: now,
            origin,
            ..AppendOptions::default()
        }
    }

    fn remove_snapshots(dir: &std::path::Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "snapshot") {
                std::fs::remove_file(path).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn cleaner_cleans_transactions_as_kafka_does(ops in prop::collection::vec(op(), 1..70), small_map in any::<bool>()) {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), config()).unwrap();
            let cleaner = Cleaner::new(CleanerConfig {
                dedupe_buffer_bytes: if small_map { 25 * 8 } else { 1 << 20 },
                ..CleanerConfig::default()
            });
            let mut model = Model::default();
            let mut now = 1_700_000_000_000i64;
            let mut value_counter = 0u32;
            for op in ops {
                match op {
                    Op::Append(producer, records, c) => {
                        let rows: Vec<super::KeyValueRow> = records.iter().map(|(k, live)| {
                            value_counter += 1;
                            (k.map(|k| vec![b'k', k]), live.then(|| format!("v{value_counter}").into_bytes()))
                        }).collect();
                        let kv: Vec<_> = rows.iter().map(|(k, v)| (k.as_deref(), v.as_deref())).collect();
                        let fields = if producer == 0 {
                            ProducerFields::default()
                        } else {
                            let next_txn = model.outcomes.len();
                            let (sequence, open) = model.producers.entry(producer).or_insert((0, None));
                            let fields = ProducerFields {
                                producer_id: producer,
                                producer_epoch: 0,
                                base_sequence: *sequence,
                                transactional: true,
                            };
                            *sequence += kv.len() as i32;
                            if open.is_none() {
                                *open = Some(next_txn);
                                model.outcomes.push(None);
                            }
                            fields
                        };
                        let txn = model.producers.get(&producer).and_then(|p| p.1).filter(|_| producer != 0);
                        let mut bytes = build_compressed_batch(&kv, &vec![now; kv.len()], codec(c), fields);
                        // An idempotent producer's sequence must still be known, even after a rebuild from the
                        // cleaned log.
                        let info = log.append(&mut bytes, &opts(now, AppendOrigin::Client)).unwrap();
                        prop_assert_eq!(info.first_offset, model.log_end);
                        for (i, (key, value)) in rows.into_iter().enumerate() {
                            model.records.push(Rec { offset: info.first_offset + i as i64, key, value, txn });
                        }
                        model.log_end = info.last_offset + 1;
                    }
                    Op::End(producer, commit) => {
                        let Some((_, open)) = model.producers.get_mut(&producer) else { continue };
                        let Some(txn) = open.take() else { continue };
                        let outcome = if commit { TxnOutcome::Commit } else { TxnOutcome::Abort };
                        let mut bytes = build_marker_batch(producer, 0, EndTxnMarker { outcome, coordinator_epoch: 0 }, now);
                        let info = log.append(&mut bytes, &opts(now, AppendOrigin::Coordinator)).unwrap();
                        prop_assert_eq!(info.first_offset, model.log_end);
                        model.outcomes[txn] = Some(outcome);
                        model.log_end += 1;
                    }
                    Op::Roll => log.roll().unwrap(),
                    Op::Clean(advance) => {
                        now += i64::from(advance);
                        let before = log.cleanable(now, None).unwrap();
                        let lso = log.last_stable_offset(log.log_end_offset());
                        prop_assert!(before.first_uncleanable_offset <= lso, "nothing unstable is cleaned");
                        if let Some(CleanOutcome::Swapped(_)) = log.clean(&cleaner, now, None).unwrap() {
                            let cleaned_up_to = log.cleanable(now, None).unwrap().first_dirty_offset;
                            prop_assert!(cleaned_up_to > before.first_dirty_offset);
                            prop_assert!(cleaned_up_to <= before.first_uncleanable_offset);
                            let by_offset: HashMap<i64, &Rec> = model.records.iter().map(|r| (r.offset, r)).collect();
                            // No aborted record survives a pass that covered it.
                            for (o, _, _) in read_batches(&log).into_iter().flat_map(|b| b.2) {
                                if o < cleaned_up_to {
                                    prop_assert!(!model.aborted(by_offset[&o]), "aborted record {} survived", o);
                                }
                            }
                            // Below the edge a read_committed reader sees only the latest committed record of a key.
                            let latest = model.latest_committed(cleaned_up_to);
                            for (o, k, _) in read_committed(&log).iter().filter(|r| r.0 < cleaned_up_to) {
                                let k = k.as_ref().expect("records without a key are cleaned away");
                                prop_assert_eq!(latest.get(k).map(|r| r.offset), Some(*o), "an older record of a key survived");
                            }
                            // Past the edge, everything not aborted is still there.
                            let got: HashSet<i64> = read_batches(&log).into_iter().flat_map(|b| b.2).map(|r| r.0).collect();
                            for rec in model.records.iter().filter(|r| r.offset >= cleaned_up_to && !model.aborted(r)) {
                                prop_assert!(got.contains(&rec.offset), "record {} past the edge went", rec.offset);
                            }
                        }
                    }
                    Op::Reopen(without_snapshots) => {
                        log.close().unwrap();
                        if without_snapshots {
                            remove_snapshots(dir.path());
                        }
                        log = Log::open(dir.path(), config()).unwrap();
                    }
                }
                check(&log, &model)?;
            }
            // Commit or abort everything still open, then clean long after every horizon, twice: what is left is
            // exactly the latest committed live value of every key, and markers whose data went are gone too.
            for producer in 1..=PRODUCERS {
                let Some((_, Some(txn))) = model.producers.get(&producer).copied() else { continue };
                let mut bytes = build_marker_batch(producer, 0, EndTxnMarker { outcome: TxnOutcome::Commit, coordinator_epoch: 0 }, now);
                log.append(&mut bytes, &opts(now, AppendOrigin::Coordinator)).unwrap();
                model.outcomes[txn] = Some(TxnOutcome::Commit);
                model.log_end += 1;
            }
            log.roll().unwrap();
            for _ in 0..3 {
                now += 10_000;
                log.clean(&cleaner, now, None).unwrap();
                // An empty dirty section does not clean: append one keyless record so the next pass runs.
                let mut bytes = build_compressed_batch(&[(None, Some(b"x".as_slice()))], &[now], Compression::None, ProducerFields::default());
                let info = log.append(&mut bytes, &opts(now, AppendOrigin::Client)).unwrap();
                model.records.push(Rec { offset: info.first_offset, key: None, value: Some(b"x".to_vec()), txn: None });
                model.log_end += 1;
                log.roll().unwrap();
            }
            check(&log, &model)?;
            if !small_map {
                let edge = log.cleanable(now, None).unwrap().first_dirty_offset;
                let live: BTreeMap<i64, &Rec> = model.latest_committed(edge).into_values()
                    .filter(|r| r.value.is_some()).map(|r| (r.offset, r)).collect();
                let seen: Vec<i64> = read_committed(&log).iter().filter(|r| r.0 < edge).map(|r| r.0).collect();
                prop_assert_eq!(seen, live.keys().copied().collect::<Vec<_>>(), "exactly the latest committed live values");
            }
            log.close().unwrap();
            let log = Log::open(dir.path(), config()).unwrap();
            check(&log, &model)?;
        }
    }

    /// What holds at every step: the log is a subsequence of the model (offsets never change), a read_committed
    /// reader sees no aborted or open record and the latest committed live value of every key below the LSO.
    fn check(log: &Log, model: &Model) -> Result<(), TestCaseError> {
        prop_assert_eq!(log.log_end_offset(), model.log_end, "offsets never change");
        let by_offset: HashMap<i64, &Rec> = model.records.iter().map(|r| (r.offset, r)).collect();
        let mut last = -1;
        for (o, k, v) in read_batches(log).into_iter().flat_map(|b| b.2) {
            prop_assert!(o > last, "offsets increase");
            last = o;
            let rec = by_offset.get(&o).copied();
            prop_assert_eq!(
                rec.map(|r| (&r.key, &r.value)),
                Some((&k, &v)),
                "a record changed at {}",
                o
            );
        }
        let lso = log.last_stable_offset(log.log_end_offset());
        let seen = read_committed(log);
        let present: HashSet<i64> = seen.iter().map(|r| r.0).collect();
        for (o, _, _) in &seen {
            prop_assert!(
                model.committed(by_offset[o]),
                "read_committed saw record {} that is not committed",
                o
            );
        }
        for rec in model.latest_committed(lso).values() {
            if rec.value.is_some() {
                prop_assert!(
                    present.contains(&rec.offset),
                    "the latest committed value of a key is gone: {:?}",
                    rec
                );
            }
        }
        Ok(())
    }
}

mod txn_cases {
    use annal_log::batch::{Compression, ProducerFields};
    use annal_log::control::{build_marker_batch, EndTxnMarker, TxnOutcome};
    use annal_log::records::build_compressed_batch;
    use annal_log::{
        AppendOptions, AppendOrigin, CleanOutcome, CleanStats, Cleaner, CleanerConfig, Log,
        LogConfig,
    };

    use super::{config, read_all};

    const NOW: i64 = 1_700_000_000_000;

    fn data(log: &mut Log, producer_id: i64, sequence: i32, key: &[u8], now: i64) -> i64 {
        let fields = if producer_id < 0 {
            ProducerFields::default()
        } else {
            ProducerFields {
                producer_id,
                producer_epoch: 0,
                base_sequence: sequence,
                transactional: true,
            }
        };
        let mut bytes = build_compressed_batch(
            &[(Some(key), Some(b"v".as_slice()))],
            &[now],
            Compression::Lz4,
            fields,
        );
        let opts = AppendOptions {
            now_ms: now,
            ..AppendOptions::default()
        };
        log.append(&mut bytes, &opts).unwrap().first_offset
    }

    fn end(log: &mut Log, producer_id: i64, outcome: TxnOutcome, now: i64) -> i64 {
        let mut bytes = build_marker_batch(
            producer_id,
            0,
            EndTxnMarker {
                outcome,
                coordinator_epoch: 0,
            },
            now,
        );
        let opts = AppendOptions {
            now_ms: now,
            origin: AppendOrigin::Coordinator,
            ..AppendOptions::default()
        };
        log.append(&mut bytes, &opts).unwrap().first_offset
    }

    fn clean(log: &mut Log, cleaner: &Cleaner, now: i64) -> CleanStats {
        match log.clean(cleaner, now, None).unwrap() {
            Some(CleanOutcome::Swapped(stats)) => stats,
            other => panic!("expected a pass, got {other:?}"),
        }
    }

    /// Offsets of the control batches in the log.
    fn markers(log: &Log) -> Vec<i64> {
        let read = log.read(log.log_start_offset(), 1 << 20, None).unwrap();
        let bytes = read.slice.unwrap().read_to_vec().unwrap();
        let mut out = Vec::new();
        let mut position = 0;
        while position < bytes.len() {
            let header = annal_log::batch::BatchHeader::parse(&bytes[position..]).unwrap();
            if header.is_control() && header.records_count > 0 {
                out.push(header.base_offset);
            }
            position += header.size();
        }
        out
    }

    #[test]
    fn markers_outlive_their_data_then_go_after_the_delete_horizon() {
        let dir = tempfile::tempdir().unwrap();
        let config = || LogConfig {
            segment_bytes: 1 << 20,
            ..config()
        };
        let mut log = Log::open(dir.path(), config()).unwrap();
        let cleaner = Cleaner::new(CleanerConfig::default());
        // Producer 1 aborts "a" at 0, producer 2 commits "a" at 2; both then write again so neither batch holds
        // its producer's state; a plain "a" at 8 supersedes the committed one.
        assert_eq!(data(&mut log, 1, 0, b"a", NOW), 0);
        assert_eq!(end(&mut log, 1, TxnOutcome::Abort, NOW), 1);
        assert_eq!(data(&mut log, 2, 0, b"a", NOW), 2);
        assert_eq!(end(&mut log, 2, TxnOutcome::Commit, NOW), 3);
        assert_eq!(data(&mut log, 1, 1, b"b", NOW), 4);
        assert_eq!(end(&mut log, 1, TxnOutcome::Commit, NOW), 5);
        assert_eq!(data(&mut log, 2, 1, b"c", NOW), 6);
        assert_eq!(end(&mut log, 2, TxnOutcome::Commit, NOW), 7);
        assert_eq!(data(&mut log, -1, 0, b"a", NOW), 8);
        // Producer 3's transaction is open: nothing from its first offset on is cleaned.
        assert_eq!(data(&mut log, 3, 0, b"b", NOW), 9);
        log.roll().unwrap();
        assert_eq!(
            log.cleanable(NOW, None).unwrap().first_uncleanable_offset,
            0
        );
        assert!(log.clean(&cleaner, NOW, None).unwrap().is_none());
        assert_eq!(end(&mut log, 3, TxnOutcome::Commit, NOW), 10);
        log.roll().unwrap();
        assert_eq!(log.aborted_transaction_entries().len(), 1);

        // Pass 1: the aborted record and the superseded committed one go; their markers stay (their data was
        // there when the pass read them), and so does the aborted transaction's index entry.
        let stats = clean(&mut log, &cleaner, NOW);
        assert_eq!(
            (stats.aborted_records_removed, stats.markers_removed),
            (1, 0)
        );
        let marker_offsets = markers(&log);
        let offsets: Vec<i64> = read_all(&log)
            .iter()
            .map(|r| r.0)
            .filter(|o| !marker_offsets.contains(o))
            .collect();
        assert_eq!(offsets, vec![6, 8, 9], "4 (\"b\") is superseded by 9");
        assert_eq!(markers(&log), vec![1, 3, 5, 7, 10]);
        assert_eq!(log.aborted_transaction_entries().len(), 1);

        // Pass 2 (new dirty data so a pass runs): markers 1, 3 and 5 guard nothing any more, so they get a delete
        // horizon; the aborted transaction is no longer indexed. 4 was producer 1's last data batch: kept empty.
        data(&mut log, -1, 0, b"z", NOW);
        log.roll().unwrap();
        let stats = clean(&mut log, &cleaner, NOW + 10);
        assert_eq!(stats.markers_removed, 0);
        assert!(log.aborted_transaction_entries().is_empty());
        assert_eq!(markers(&log), vec![1, 3, 5, 7, 10]);

        // Pass 3, before the horizon (delete.retention.ms = 1000): all stay. Pass 4, after: 1 and 3 go; 5 stays
        // because producer 1's emptied last batch at 4 is still its transaction's data; 7 and 10 end
        // transactions whose data is there.
        data(&mut log, -1, 0, b"z", NOW);
        log.roll().unwrap();
        clean(&mut log, &cleaner, NOW + 500);
        assert_eq!(markers(&log), vec![1, 3, 5, 7, 10]);
        data(&mut log, -1, 0, b"z", NOW);
        log.roll().unwrap();
        let stats = clean(&mut log, &cleaner, NOW + 2000);
        assert_eq!(stats.markers_removed, 2);
        assert_eq!(markers(&log), vec![5, 7, 10]);
        assert_eq!(log.log_end_offset(), 14, "offsets never change");

        // A rebuild of producer state from the cleaned log still knows every producer's last sequence.
        log.close().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "snapshot") {
                std::fs::remove_file(path).unwrap();
            }
        }
        let mut log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.last_stable_offset(log.log_end_offset()), 14);

        // A follower replicating the cleaned log from its start takes its gaps and emptied batches.
        let follower_dir = tempfile::tempdir().unwrap();
        let mut follower = Log::open(follower_dir.path(), config()).unwrap();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let read = log.read(offset, 300, None).unwrap();
            let bytes = read.slice.unwrap().read_to_vec().unwrap();
            let info = follower.append_as_follower(&bytes, NOW).unwrap();
            offset = info.last_offset + 1;
        }
        assert_eq!(read_all(&follower), read_all(&log));
        assert_eq!(follower.log_end_offset(), 14);
        assert_eq!(
            follower.producer_state().get(1).unwrap().last_sequence(),
            Some(1)
        );

        for (producer, sequence) in [(1, 2), (2, 2), (3, 1)] {
            let state = log.producer_state().get(producer).unwrap();
            assert_eq!(
                state.last_sequence(),
                Some(sequence - 1),
                "producer {producer}"
            );
            data(&mut log, producer, sequence, b"q", NOW);
            end(&mut log, producer, TxnOutcome::Commit, NOW);
        }
    }
}
