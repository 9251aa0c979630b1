//! Behaviour of the log through its public API: append, read, indexes, rolling, recovery, retention.

use annal_log::batch::{self, build_batch, build_uncompressed_batch, ProducerFields};
use annal_log::{AppendOptions, Log, LogConfig, LogError, RetentionGuard, TimestampType};

/// A (key, value) record for `build_batch`.
type Record<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

fn opts(now_ms: i64) -> AppendOptions {
    AppendOptions {
        now_ms,
        ..AppendOptions::default()
    }
}

fn batch_of(n: usize, value_len: usize, ts: i64) -> Vec<u8> {
    let value = vec![b'x'; value_len];
    let records: Vec<Record> = (0..n).map(|_| (None, Some(value.as_slice()))).collect();
    build_uncompressed_batch(&records, ts)
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

#[test]
fn offsets_are_assigned_in_order_and_reads_return_containing_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..50 {
        let info = log
            .append(&mut batch_of(3, 100, 1000 + i), &opts(2000))
            .unwrap();
        assert_eq!(info.first_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
    }
    assert_eq!(log.log_end_offset(), 150);
    assert!(log.segments().len() > 1, "4 KiB segments must have rolled");
    for offset in [0, 1, 2, 3, 4, 77, 149] {
        let read = log.read(offset, 1, None).unwrap();
        let bytes = read.slice.unwrap().read_to_vec().unwrap();
        let header = batch::BatchHeader::parse(&bytes).unwrap();
        assert_eq!(
            header.base_offset,
            offset / 3 * 3,
            "read at {offset} must start with its containing batch"
        );
        assert_eq!(
            bytes.len(),
            header.size(),
            "max_bytes=1 still returns exactly one whole batch"
        );
    }
    assert!(log.read(150, 1 << 20, None).unwrap().slice.is_none());
    assert!(matches!(
        log.read(151, 1 << 20, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // upper bound: nothing at or past it
    let read = log.read(0, 1 << 20, Some(6)).unwrap();
    let bytes = read.slice.unwrap().read_to_vec().unwrap();
    let validated = batch::validate_batches(&bytes, u32::MAX).unwrap();
    assert!(validated.iter().all(|v| v.header.base_offset < 6));
}

#[test]
fn invalid_batches_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            max_message_bytes: 500,
            ..LogConfig::default()
        },
    )
    .unwrap();
    log.append(&mut batch_of(1, 10, 1), &opts(1)).unwrap();
    let mut good_then_bad = batch_of(1, 10, 1);
    let mut bad = batch_of(1, 10, 1);
    let n = bad.len();
    bad[n - 3] ^= 0xff;
    good_then_bad.extend_from_slice(&bad);
    assert!(matches!(
        log.append(&mut good_then_bad, &opts(1)),
        Err(LogError::CorruptRecord { .. })
    ));
    assert!(matches!(
        log.append(&mut batch_of(1, 1000, 1), &opts(1)),
        Err(LogError::MessageTooLarge { .. })
    ));
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn timestamp_lookup_finds_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..40i64 {
        let values = [(None, Some(b"a".as_slice())), (None, Some(b"b".as_slice()))];
        let mut b = build_batch(&values, &[i * 10, i * 10 + 5], ProducerFields::default());
        log.append(&mut b, &opts(0)).unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0)));
    assert_eq!(log.offset_for_timestamp(101).unwrap(), Some((21, 105)));
    assert_eq!(log.offset_for_timestamp(105).unwrap(), Some((21, 105)));
    assert_eq!(log.offset_for_timestamp(106).unwrap(), Some((22, 110)));
    assert_eq!(log.offset_for_timestamp(396).unwrap(), None);
    assert_eq!(log.max_timestamp(), Some((395, 79)));
    // Out of order inside one batch: the first record carrying the maximum.
    let values = [
        (None, Some(b"a".as_slice())),
        (None, Some(b"b".as_slice())),
        (None, Some(b"c".as_slice())),
    ];
    log.append(
        &mut build_batch(&values, &[1000, 5000, 2000], ProducerFields::default()),
        &opts(0),
    )
    .unwrap();
    assert_eq!(log.max_timestamp(), Some((5000, 81)));
}

#[test]
fn clean_and_unclean_reopen_keep_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..30 {
        log.append(&mut batch_of(2, 50, i), &opts(0)).unwrap();
    }
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.log_end_offset(), 60);
    log.append(&mut batch_of(2, 50, 99), &opts(0)).unwrap();
    drop(log); // no close: unclean
    let log = Log::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.log_end_offset(), 62);
    assert!(log.read(61, 1, None).unwrap().slice.is_some());
}

/// An owner's clean-shutdown marker (`open_with_marker` / `close_for_marker`): a clean reopen writes nothing;
/// without the marker the log is recovered; a log last closed with its own flag is clean either way, and the
/// flag is cleared at open.
#[test]
fn an_owners_marker_decides_recovery_and_a_clean_reopen_writes_nothing() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("annal.checkpoint");
    let seg = dir.path().join(format!("{:020}.log", 0));
    let mut log = Log::open_with_marker(dir.path(), LogConfig::default(), false).unwrap();
    for i in 0..10 {
        log.append(&mut batch_of(2, 50, i), &opts(0)).unwrap();
    }
    log.close_for_marker().unwrap();
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    assert!(text.contains("clean_shutdown=false"), "{text}");
    let inode = std::fs::metadata(&checkpoint).unwrap().ino();
    let log = Log::open_with_marker(dir.path(), LogConfig::default(), true).unwrap();
    assert_eq!(log.log_end_offset(), 20);
    assert_eq!(
        std::fs::metadata(&checkpoint).unwrap().ino(),
        inode,
        "a clean reopen rewrote the checkpoint"
    );
    log.close_for_marker().unwrap();
    // No marker (a crash): a torn tail is found and cut.
    let good_len = std::fs::metadata(&seg).unwrap().len();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&batch_of(1, 60, 5)[..40]);
    std::fs::write(&seg, &bytes).unwrap();
    let mut log = Log::open_with_marker(dir.path(), LogConfig::default(), false).unwrap();
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), good_len);
    assert_eq!(log.log_end_offset(), 20);
    log.append(&mut batch_of(2, 50, 99), &opts(0)).unwrap();
    // Closed with its own flag: clean without a marker, and the flag is cleared before anything changes.
    log.close().unwrap();
    let log = Log::open_with_marker(dir.path(), LogConfig::default(), false).unwrap();
    assert_eq!(log.log_end_offset(), 22);
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    assert!(text.contains("clean_shutdown=false"), "{text}");
}

#[test]
fn torn_tail_and_garbage_are_cut_and_lost_indexes_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            index_interval_bytes: 128,
            ..LogConfig::default()
        },
    )
    .unwrap();
    for i in 0..20 {
        log.append(&mut batch_of(1, 60, i), &opts(0)).unwrap();
    }
    drop(log);
    let seg = dir.path().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let good_len = bytes.len();
    bytes.extend_from_slice(&batch_of(1, 60, 5)[..40]); // torn batch
    bytes.extend_from_slice(b"garbage garbage garbage garbage garbage garbage garbage garbage");
    std::fs::write(&seg, &bytes).unwrap();
    std::fs::remove_file(dir.path().join(format!("{:020}.index", 0))).unwrap();
    std::fs::write(
        dir.path().join(format!("{:020}.timeindex", 0)),
        b"nonsense, not 12-byte aligned",
    )
    .unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            index_interval_bytes: 128,
            ..LogConfig::default()
        },
    )
    .unwrap();
    assert_eq!(log.log_end_offset(), 20);
    assert_eq!(std::fs::metadata(&seg).unwrap().len() as usize, good_len);
    assert!(
        std::fs::metadata(dir.path().join(format!("{:020}.index", 0)))
            .unwrap()
            .len()
            > 0
    );
    let info = log.append(&mut batch_of(1, 60, 5), &opts(0)).unwrap();
    assert_eq!(info.first_offset, 20);
}

#[test]
fn retention_by_size_and_time_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..100 {
        log.append(&mut batch_of(1, 200, 1_000 + i), &opts(0))
            .unwrap();
    }
    let segments_before = log.segments().len();
    log.set_config(LogConfig {
        retention_bytes: 10_000,
        ..small_segments()
    });
    let deleted = log.apply_retention(2_000).unwrap();
    assert!(deleted > 0 && log.segments().len() < segments_before);
    assert!(log.size_bytes() <= 10_000 + 4096);
    assert_eq!(log.log_start_offset(), log.segments()[0].base_offset);
    assert!(matches!(
        log.read(0, 100, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));

    let start = log.delete_records_before(90).unwrap();
    assert_eq!(start, 90);
    assert!(log.read(90, 1, None).unwrap().slice.is_some());
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    assert_eq!(
        log.log_start_offset(),
        90,
        "log start offset survives a restart"
    );

    log.set_config(LogConfig {
        retention_ms: 1_000,
        ..small_segments()
    });
    log.apply_retention(1_000_000).unwrap();
    assert_eq!(log.log_start_offset(), 100);
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(
        log.append(&mut batch_of(1, 10, 5), &opts(0))
            .unwrap()
            .first_offset,
        100
    );
}

#[test]
fn retention_guard_keeps_unconsumed_segments_up_to_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..100 {
        log.append(&mut batch_of(1, 200, 1_000 + i), &opts(0))
            .unwrap();
    }
    log.set_config(LogConfig {
        retention_ms: 1_000,
        ..small_segments()
    });
    let segments = log.segments();
    assert!(segments.len() >= 4, "{segments:?}");
    // A consumer at the start of the third segment: the first two may go, the rest are guarded.
    let keep_from = segments[2].base_offset;
    let guarded_bytes: u64 = segments[2..].iter().map(|s| s.size_bytes).sum();
    let unlimited = RetentionGuard {
        keep_from,
        max_bytes: None,
    };
    let outcome = log
        .apply_retention_guarded(1_000_000, Some(unlimited))
        .unwrap();
    assert_eq!(outcome.deleted_segments, 2);
    assert_eq!(log.log_start_offset(), keep_from);
    assert_eq!(outcome.held_bytes, guarded_bytes);
    assert!(log.read(keep_from, 1, None).unwrap().slice.is_some());

    // A cap one segment short of what is held: the oldest guarded segment goes, the rest stay.
    let first_guarded = segments[2].size_bytes;
    let capped = RetentionGuard {
        keep_from,
        max_bytes: Some(guarded_bytes - first_guarded),
    };
    let outcome = log
        .apply_retention_guarded(1_000_000, Some(capped))
        .unwrap();
    assert_eq!(outcome.deleted_segments, 1);
    assert_eq!(outcome.held_bytes, guarded_bytes - first_guarded);
    assert_eq!(log.log_start_offset(), segments[3].base_offset);

    // A guard below the log start guards what is left; without a guard retention empties the log.
    let behind = RetentionGuard {
        keep_from: 0,
        max_bytes: None,
    };
    let outcome = log
        .apply_retention_guarded(1_000_000, Some(behind))
        .unwrap();
    assert_eq!(outcome.deleted_segments, 0);
    log.apply_retention(1_000_000).unwrap();
    assert_eq!(log.log_start_offset(), 100);
}

#[test]
fn truncate_removes_from_the_containing_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    for i in 0..60 {
        log.append(&mut batch_of(2, 100, i), &opts(0)).unwrap();
    }
    log.truncate_to(51).unwrap();
    assert_eq!(log.log_end_offset(), 50);
    assert_eq!(
        log.append(&mut batch_of(2, 100, 0), &opts(0))
            .unwrap()
            .first_offset,
        50
    );
    log.truncate_to(0).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    drop(log);
    assert_eq!(
        Log::open(dir.path(), small_segments())
            .unwrap()
            .log_end_offset(),
        0
    );
}

#[test]
fn log_append_time_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let o = AppendOptions {
        timestamp_type: TimestampType::LogAppendTime,
        now_ms: 777,
        ..AppendOptions::default()
    };
    let info = log.append(&mut batch_of(2, 10, 1), &o).unwrap();
    assert_eq!(info.log_append_time_ms, Some(777));
    let bytes = log
        .read(0, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .read_to_vec()
        .unwrap();
    let header = batch::validate_batches(&bytes, u32::MAX).unwrap()[0].header;
    assert!(header.is_log_append_time());
    assert_eq!(header.max_timestamp, 777);
}

#[test]
fn idempotent_retry_returns_original_offsets_even_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    let producer = |seq| ProducerFields {
        producer_id: 42,
        producer_epoch: 0,
        base_sequence: seq,
        transactional: false,
    };
    let values = [(None, Some(b"v".as_slice())), (None, Some(b"w".as_slice()))];
    log.append(&mut build_uncompressed_batch(&values, 0), &opts(0))
        .unwrap(); // offsets 0-1, no producer
    let first = log
        .append(&mut build_batch(&values, &[5, 5], producer(0)), &opts(0))
        .unwrap();
    assert_eq!((first.first_offset, first.duplicate), (2, false));
    let retry = log
        .append(&mut build_batch(&values, &[5, 5], producer(0)), &opts(0))
        .unwrap();
    assert_eq!(
        (retry.first_offset, retry.last_offset, retry.duplicate),
        (2, 3, true)
    );
    assert_eq!(log.log_end_offset(), 4);
    drop(log); // crash: state rebuilt from the log
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    let retry = log
        .append(&mut build_batch(&values, &[5, 5], producer(0)), &opts(0))
        .unwrap();
    assert!(retry.duplicate);
    assert!(matches!(
        log.append(&mut build_batch(&values, &[5, 5], producer(7)), &opts(0)),
        Err(LogError::OutOfOrderSequence { expected: 2, .. })
    ));
    let next = log
        .append(&mut build_batch(&values, &[5, 5], producer(2)), &opts(0))
        .unwrap();
    assert_eq!(next.first_offset, 4);
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    assert!(
        log.append(&mut build_batch(&values, &[5, 5], producer(2)), &opts(0))
            .unwrap()
            .duplicate
    );
}

/// Fuzz finding (record_batch, 2026-12-05, `fuzz/corpus/record_batch/regression-duplicate-within-one-request`):
/// a request whose second batch repeated its first (same producer, epoch and sequences) was answered as a
/// duplicate, so the append reported success while writing none of the request. Kafka checks duplicates against
/// the state before the request only; a repeat inside one request is out of sequence, and nothing is written.
#[test]
fn a_batch_repeated_within_one_request_is_out_of_sequence_not_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_segments()).unwrap();
    let producer = |seq| ProducerFields {
        producer_id: 4000,
        producer_epoch: 0,
        base_sequence: seq,
        transactional: false,
    };
    let values = [(None, Some(b"v".as_slice())), (None, Some(b"w".as_slice()))];
    let mut request = build_batch(&values, &[5, 5], producer(0));
    request.extend(build_batch(&values, &[5, 5], producer(0)));
    assert!(matches!(
        log.append(&mut request, &opts(0)),
        Err(LogError::OutOfOrderSequence {
            expected: 2,
            sequence: 0,
            ..
        })
    ));
    assert_eq!(
        log.log_end_offset(),
        0,
        "nothing of a refused request is written"
    );
    // The same batch alone appends; sent again on its own, it is a duplicate of what is in the log.
    let first = log
        .append(&mut build_batch(&values, &[5, 5], producer(0)), &opts(0))
        .unwrap();
    assert_eq!((first.first_offset, first.duplicate), (0, false));
    let mut retry = build_batch(&values, &[5, 5], producer(0));
    assert!(log.append(&mut retry, &opts(0)).unwrap().duplicate);
    assert_eq!(log.log_end_offset(), 2);
}

/// A follower takes a leader's gaps (a cleaned log), even one wider than a segment's 32-bit relative offsets:
/// the batch after it starts a new segment at its own offset, as Kafka rolls. An offset past i64 is refused
/// whole, with the offsets named.
#[test]
fn a_follower_append_past_what_one_segment_holds_starts_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = annal_log::LogConfig::default;
    let mut log = annal_log::Log::open(dir.path(), config()).unwrap();
    let batch_at = |base: i64, value: &[u8]| {
        let mut b =
            annal_log::batch::build_uncompressed_batch(&[(None, Some(value))], 1_700_000_000_000);
        annal_log::batch::assign_offset(&mut b, base, 0);
        b
    };
    // A gap of 10 offsets, as a cleaned leader log has: accepted in the segment at 0.
    log.append_as_follower(&batch_at(10, b"a"), 1_700_000_000_000)
        .unwrap();
    assert_eq!(log.log_end_offset(), 11);
    let err = log
        .append_as_follower(&batch_at(i64::MAX, b"x"), 1_700_000_000_000)
        .unwrap_err();
    assert!(err.to_string().contains(&i64::MAX.to_string()), "{err}");
    assert_eq!(log.log_end_offset(), 11, "nothing appended");

    // One fetch answer spanning more than 2^31 offsets: the largest span the segment at 0 can take, then a
    // batch past it, which goes into a new segment at its own offset.
    let fits = i64::from(i32::MAX) - 1;
    let far = 12 + i64::from(i32::MAX) * 2;
    let mut answer = batch_at(fits, b"b");
    answer.extend_from_slice(&batch_at(far, b"c"));
    let info = log.append_as_follower(&answer, 1_700_000_000_000).unwrap();
    assert_eq!(
        (info.first_offset, info.last_offset, info.records_count),
        (11, far, 2)
    );
    assert_eq!(log.log_end_offset(), far + 1);
    let bases: Vec<i64> = log.segments().iter().map(|s| s.base_offset).collect();
    assert_eq!(bases, vec![0, far]);

    // Every record reads back at its offset, before and after a reopen.
    let offsets_of = |log: &annal_log::Log| -> Vec<i64> {
        let mut found = Vec::new();
        for from in [0, fits, far] {
            let read = log.read(from, 1 << 20, None).unwrap();
            let bytes = read
                .slice
                .expect("a batch at or after the offset")
                .read_to_vec()
                .unwrap();
            for v in annal_log::batch::validate_batches(&bytes, u32::MAX).unwrap() {
                if v.header.base_offset >= from && !found.contains(&v.header.base_offset) {
                    found.push(v.header.base_offset);
                }
            }
        }
        found
    };
    assert_eq!(offsets_of(&log), vec![10, fits, far]);
    log.close().unwrap();
    let log = annal_log::Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_end_offset(), far + 1);
    assert_eq!(offsets_of(&log), vec![10, fits, far]);
}
