//! The partition side of transactions through the public API: open transactions and the first unstable offset,
//! markers, the aborted-transaction index (`.txnindex`, Kafka's bytes), restarts and truncation.

use annal_log::batch::{build_batch, ProducerFields};
use annal_log::control::{build_marker_batch, EndTxnMarker, TxnOutcome};
use annal_log::{AbortedTxn, AppendOptions, AppendOrigin, Log, LogConfig, LogError};

const TS: i64 = 1_700_000_000_000;

fn txn_batch(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Vec<u8> {
    let values: Vec<annal_log::batch::KeyValue> = vec![(None, Some(b"v".as_slice())); records];
    build_batch(
        &values,
        &vec![TS; records],
        ProducerFields {
            producer_id,
            producer_epoch: epoch,
            base_sequence: sequence,
            transactional: true,
        },
    )
}

fn client() -> AppendOptions {
    AppendOptions {
        now_ms: TS,
        ..AppendOptions::default()
    }
}

fn coordinator() -> AppendOptions {
    AppendOptions {
        now_ms: TS,
        origin: AppendOrigin::Coordinator,
        ..AppendOptions::default()
    }
}

fn marker(
    log: &mut Log,
    producer_id: i64,
    epoch: i16,
    outcome: TxnOutcome,
    coordinator_epoch: i32,
) -> Result<i64, LogError> {
    let mut bytes = build_marker_batch(
        producer_id,
        epoch,
        EndTxnMarker {
            outcome,
            coordinator_epoch,
        },
        TS,
    );
    log.append(&mut bytes, &coordinator())
        .map(|info| info.first_offset)
}

fn txnindex_path(dir: &std::path::Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}.txnindex"))
}

/// Producer 1's transaction at 0..=2, producer 2's at 3..=4, then ABORT 1 at 5 and COMMIT 2 at 6.
fn two_transactions(log: &mut Log) {
    assert_eq!(
        log.append(&mut txn_batch(1, 0, 0, 3), &client())
            .unwrap()
            .first_offset,
        0
    );
    assert_eq!(
        log.append(&mut txn_batch(2, 0, 0, 2), &client())
            .unwrap()
            .first_offset,
        3
    );
    assert_eq!(log.first_unstable_offset(i64::MAX), Some(0));
    assert_eq!(marker(log, 1, 0, TxnOutcome::Abort, 0).unwrap(), 5);
    assert_eq!(marker(log, 2, 0, TxnOutcome::Commit, 0).unwrap(), 6);
}

#[test]
fn the_first_unstable_offset_follows_open_transactions_and_unreplicated_markers() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut txn_batch(1, 0, 0, 3), &client()).unwrap();
    log.append(&mut txn_batch(2, 0, 0, 2), &client()).unwrap();
    assert_eq!(log.last_stable_offset(5), 0);
    assert_eq!(log.last_stable_offset(0), 0);
    marker(&mut log, 1, 0, TxnOutcome::Abort, 0).unwrap(); // at 5
                                                           // The high watermark has not passed the marker: a failover could bring transaction 1 back.
    assert_eq!(log.first_unstable_offset(5), Some(0));
    assert_eq!(log.first_unstable_offset(6), Some(3));
    log.on_high_watermark(6);
    assert_eq!(
        log.first_unstable_offset(5),
        Some(3),
        "forgotten once below the HW"
    );
    marker(&mut log, 2, 0, TxnOutcome::Commit, 0).unwrap(); // at 6
    assert_eq!(log.last_stable_offset(7), 7);
    assert_eq!(log.last_stable_offset(6), 3);
    assert_eq!(log.producer_state().ongoing_count(), 0);
}

#[test]
fn an_abort_is_indexed_in_kafkas_txnindex_format_and_queried_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    two_transactions(&mut log);
    // Producer 2's transaction (from 3) was still open when 1 aborted: the entry's LSO is 3.
    let expected = AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 5,
        last_stable_offset: 3,
    };
    assert_eq!(log.aborted_transaction_entries(), vec![expected]);
    let bytes = std::fs::read(txnindex_path(dir.path(), 0)).unwrap();
    let mut kafka = 0i16.to_be_bytes().to_vec();
    for v in [1i64, 0, 5, 3] {
        kafka.extend_from_slice(&v.to_be_bytes());
    }
    assert_eq!(bytes, kafka);
    assert_eq!(log.aborted_transactions(0, 7), vec![(1, 0)]);
    assert_eq!(log.aborted_transactions(4, 5), vec![(1, 0)]);
    assert_eq!(
        log.aborted_transactions(6, 7),
        vec![],
        "the marker is before 6"
    );
    // A commit writes no entry.
    assert_eq!(log.aborted_transaction_entries().len(), 1);
}

#[test]
fn aborts_in_later_segments_are_found_and_deleted_with_their_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut txn_batch(1, 0, 0, 2), &client()).unwrap(); // 0..=1
    log.roll().unwrap();
    marker(&mut log, 1, 0, TxnOutcome::Abort, 0).unwrap(); // 2, in segment 2
    log.roll().unwrap();
    log.append(&mut txn_batch(1, 0, 2, 1), &client()).unwrap(); // 3
    marker(&mut log, 1, 0, TxnOutcome::Abort, 0).unwrap(); // 4, in segment 3
    assert!(!txnindex_path(dir.path(), 0).exists());
    assert!(txnindex_path(dir.path(), 2).exists());
    assert_eq!(log.aborted_transactions(0, 5), vec![(1, 0), (1, 3)]);
    assert_eq!(log.aborted_transactions(3, 5), vec![(1, 3)]);
    log.delete_records_before(3).unwrap();
    assert!(
        !txnindex_path(dir.path(), 2).exists(),
        "gone with its segment"
    );
    assert_eq!(log.aborted_transactions(3, 5), vec![(1, 3)]);
}

#[test]
fn markers_are_checked_against_producer_and_coordinator_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut txn_batch(1, 3, 0, 1), &client()).unwrap();
    assert!(matches!(
        marker(&mut log, 1, 2, TxnOutcome::Commit, 5),
        Err(LogError::InvalidProducerEpoch { current: 3, .. })
    ));
    // A marker may bump the epoch (the coordinator aborts for a new producer instance).
    marker(&mut log, 1, 4, TxnOutcome::Abort, 5).unwrap();
    assert!(matches!(
        marker(&mut log, 1, 4, TxnOutcome::Abort, 4),
        Err(LogError::TransactionCoordinatorFenced { current: 5, .. })
    ));
    // The fenced instance's late data is refused.
    assert!(matches!(
        log.append(&mut txn_batch(1, 3, 1, 1), &client()),
        Err(LogError::InvalidProducerEpoch { current: 4, .. })
    ));
    // Clients cannot write markers; a producer with an open transaction cannot write outside it.
    let mut bytes = build_marker_batch(
        1,
        4,
        EndTxnMarker {
            outcome: TxnOutcome::Commit,
            coordinator_epoch: 5,
        },
        TS,
    );
    assert!(matches!(
        log.append(&mut bytes, &client()),
        Err(LogError::InvalidRecord { .. })
    ));
    log.append(&mut txn_batch(1, 4, 0, 1), &client()).unwrap();
    let mut plain = build_batch(
        &[(None, Some(b"x".as_slice()))],
        &[TS],
        ProducerFields {
            producer_id: 1,
            producer_epoch: 4,
            base_sequence: 1,
            transactional: false,
        },
    );
    assert!(matches!(
        log.append(&mut plain, &client()),
        Err(LogError::InvalidTxnState { .. })
    ));
    // A marker for a producer this partition never saw is accepted (and ends nothing).
    marker(&mut log, 99, 0, TxnOutcome::Commit, 5).unwrap();
}

#[test]
fn an_open_transaction_and_the_index_survive_a_clean_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        two_transactions(&mut log);
        log.append(&mut txn_batch(3, 0, 0, 2), &client()).unwrap(); // 7..=8, left open
        log.close().unwrap();
    }
    {
        // Clean: the snapshot at the log end carries producer 3's open transaction.
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.first_unstable_offset(i64::MAX), Some(7));
        assert_eq!(
            log.producer_state()
                .get(3)
                .unwrap()
                .current_txn_first_offset,
            Some(7)
        );
        assert_eq!(log.aborted_transactions(0, 9), vec![(1, 0)]);
        log.roll().unwrap(); // a snapshot at 9 with the open transaction
        log.append(&mut txn_batch(4, 0, 0, 1), &client()).unwrap(); // 9
        marker(&mut log, 4, 0, TxnOutcome::Abort, 0).unwrap(); // 10
        log.flush().unwrap();
        // Dropped without close: the next open is unclean.
    }
    // Lose the active segment's index: recovery rebuilds it from the markers.
    std::fs::remove_file(txnindex_path(dir.path(), 9)).unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.first_unstable_offset(i64::MAX), Some(7));
    assert_eq!(log.aborted_transactions(0, 11), vec![(1, 0), (4, 9)]);
    assert_eq!(
        log.aborted_transaction_entries()[1].last_stable_offset,
        7,
        "producer 3 was still open when 4 aborted"
    );
    // The markers still work after the restart.
    marker(&mut log, 3, 0, TxnOutcome::Commit, 0).unwrap();
    assert_eq!(log.first_unstable_offset(i64::MAX), None);
}

#[test]
fn truncation_reopens_a_transaction_and_drops_its_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut txn_batch(1, 0, 0, 3), &client()).unwrap(); // 0..=2
    log.roll().unwrap();
    marker(&mut log, 1, 0, TxnOutcome::Abort, 0).unwrap(); // 3
    log.append(&mut txn_batch(2, 0, 0, 1), &client()).unwrap(); // 4
    assert_eq!(log.aborted_transactions(0, 5), vec![(1, 0)]);
    log.truncate_to(3).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert!(log.aborted_transaction_entries().is_empty());
    assert_eq!(
        std::fs::metadata(txnindex_path(dir.path(), 3))
            .map(|m| m.len())
            .unwrap_or(0),
        0
    );
    assert_eq!(
        log.first_unstable_offset(i64::MAX),
        Some(0),
        "1 is open again"
    );
    assert!(log.producer_state().get(2).is_none());
    // The follower then gets the leader's version: a commit this time.
    marker(&mut log, 1, 0, TxnOutcome::Commit, 0).unwrap();
    assert_eq!(log.first_unstable_offset(i64::MAX), None);
    assert!(log.aborted_transactions(0, 10).is_empty());
}

#[test]
fn a_corrupt_txnindex_is_cut_to_its_valid_entries_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        two_transactions(&mut log);
        log.close().unwrap();
    }
    let path = txnindex_path(dir.path(), 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0xFF; 20]);
    std::fs::write(&path, &bytes).unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.aborted_transactions(0, 7), vec![(1, 0)]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 34);
    drop(log);
    // An entry claiming a marker past the segment's end is dropped too.
    let mut bad = bytes[..34].to_vec();
    bad[18..26].copy_from_slice(&1000i64.to_be_bytes());
    std::fs::write(&path, &bad).unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    // Unclean open (dropped without close) replays from the log and restores the real entry.
    assert_eq!(log.aborted_transactions(0, 7), vec![(1, 0)]);
}

/// Regression (fuzz target `log_recovery`, corpus `regression-txnindex-marker-before-first-offset`): a segment
/// below the recovery point is trusted, not validated, so a damaged one can hold an ABORT marker at an offset
/// before its transaction's first batch. Rebuilding the `.txnindex` from it panicked on the index's ordering
/// assertion; now the entry is skipped (and logged) and the log opens with both batches readable.
#[test]
fn a_trusted_segment_with_a_marker_before_its_transaction_opens_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = |base: i64, suffix: &str| dir.path().join(format!("{base:020}.{suffix}"));
    let plain = |offset: i64, value: &[u8]| {
        let mut b = annal_log::batch::build_uncompressed_batch(&[(None, Some(value))], TS);
        annal_log::batch::assign_offset(&mut b, offset, 0);
        b
    };
    // Segment 0, damaged: producer 7's transactional batch at offset 2, its ABORT marker at offset 1, then a
    // plain batch at 3 that the offset index points at. Opening trusts the index and walks only the tail after
    // its last entry, so the out-of-order pair before it is not seen until producer state is rebuilt.
    let mut txn = txn_batch(7, 0, 0, 1);
    annal_log::batch::assign_offset(&mut txn, 2, 0);
    let mut abort = build_marker_batch(
        7,
        0,
        EndTxnMarker {
            outcome: TxnOutcome::Abort,
            coordinator_epoch: 0,
        },
        TS,
    );
    annal_log::batch::assign_offset(&mut abort, 1, 0);
    let tail_position = (txn.len() + abort.len()) as u32;
    let segment: Vec<u8> = [txn, abort, plain(3, b"c")].concat();
    std::fs::write(file(0, "log"), &segment).unwrap();
    let entry: Vec<u8> = [3u32.to_be_bytes(), tail_position.to_be_bytes()].concat();
    std::fs::write(file(0, "index"), entry).unwrap();
    std::fs::write(file(0, "timeindex"), b"").unwrap();
    // Segment 4, after it; the recovery point (4) makes segment 0 trusted and segment 4 recovered.
    std::fs::write(file(4, "log"), plain(4, b"later")).unwrap();
    std::fs::write(
        dir.path().join("annal.checkpoint"),
        "annal-checkpoint 1\nlog_start_offset=0\nrecovery_point=4\nclean_shutdown=false\n",
    )
    .unwrap();

    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert!(
        log.aborted_transaction_entries().is_empty(),
        "an aborted transaction whose marker precedes its first batch was indexed: {:?}",
        log.aborted_transaction_entries()
    );
    assert_eq!(log.log_end_offset(), 5);
    let read = log
        .read(4, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .read_to_vec()
        .unwrap();
    assert_eq!(
        read,
        plain(4, b"later"),
        "the segment after the damaged one reads back"
    );
}

#[test]
fn a_follower_replays_markers_and_indexes_aborts() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut leader = Log::open(leader_dir.path(), LogConfig::default()).unwrap();
    two_transactions(&mut leader);
    let all = leader
        .read(0, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .read_to_vec()
        .unwrap();
    let mut follower = Log::open(follower_dir.path(), LogConfig::default()).unwrap();
    follower.append_as_follower(&all, TS).unwrap();
    assert_eq!(
        follower.aborted_transaction_entries(),
        leader.aborted_transaction_entries()
    );
    assert_eq!(follower.first_unstable_offset(7), None);
    assert_eq!(
        std::fs::read(txnindex_path(follower_dir.path(), 0)).unwrap(),
        std::fs::read(txnindex_path(leader_dir.path(), 0)).unwrap()
    );
}

#[test]
fn cleaning_carries_the_aborted_transaction_index_into_the_cleaned_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config.clone()).unwrap();
    let keyed = |producer_id: i64, sequence: i32| {
        build_batch(
            &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
            &[TS],
            ProducerFields {
                producer_id,
                producer_epoch: 0,
                base_sequence: sequence,
                transactional: true,
            },
        )
    };
    // Segment 0: producer 1 aborts. Segment 2: producer 2 aborts. Then an active segment.
    log.append(&mut keyed(1, 0), &client()).unwrap(); // 0
    marker(&mut log, 1, 0, TxnOutcome::Abort, 0).unwrap(); // 1
    log.roll().unwrap();
    log.append(&mut keyed(2, 0), &client()).unwrap(); // 2
    marker(&mut log, 2, 0, TxnOutcome::Abort, 0).unwrap(); // 3
    log.roll().unwrap();
    log.append(&mut keyed(3, 0), &client()).unwrap(); // 4, active
    let before = log.aborted_transaction_entries();
    assert_eq!(before.len(), 2);
    let cleaner = annal_log::Cleaner::new(annal_log::CleanerConfig::default());
    assert!(matches!(
        log.clean(&cleaner, TS, None).unwrap(),
        Some(annal_log::CleanOutcome::Swapped(_))
    ));
    // The two cleaned segments merged into one at base 0, which holds both entries; 2's index went with it.
    assert_eq!(log.aborted_transaction_entries(), before);
    assert!(txnindex_path(dir.path(), 0).exists());
    assert!(!txnindex_path(dir.path(), 2).exists());
    assert_eq!(
        std::fs::metadata(txnindex_path(dir.path(), 0))
            .unwrap()
            .len(),
        68
    );
    assert_eq!(log.aborted_transactions(0, 5), vec![(1, 0), (2, 2)]);
    drop(log);
    let log = Log::open(dir.path(), config).unwrap();
    assert_eq!(log.aborted_transaction_entries(), before);
}

#[test]
fn a_read_reports_where_its_slice_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut txn_batch(1, 0, 0, 2), &client()).unwrap(); // 0..=1
    log.append(&mut txn_batch(1, 0, 2, 3), &client()).unwrap(); // 2..=4
    let read = log.read(0, 1, None).unwrap();
    assert_eq!(
        read.slice_end_offset,
        Some(2),
        "one batch: the next starts at 2"
    );
    assert_eq!(
        log.read(0, 1 << 20, None).unwrap().slice_end_offset,
        Some(5)
    );
    assert_eq!(
        log.read(0, 1 << 20, Some(2)).unwrap().slice_end_offset,
        Some(2)
    );
    assert_eq!(log.read(5, 1 << 20, None).unwrap().slice_end_offset, None);
}
