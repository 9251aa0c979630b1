//! The transaction coordinator over the wire: InitProducerId with a transactional id (epochs, fencing,
//! recovery), AddPartitionsToTxn, EndTxn, DescribeTransactions, ListTransactions, timeouts, replay after a
//! restart, and Kafka's error codes for bad sequences.

use crate::common;

use std::time::Duration;

use common::txn::*;
use common::*;
use kafka_protocol::messages::*;

/// Kafka's answer to a produce its coordinator cannot verify yet (retriable).
const NOT_ENOUGH_REPLICAS: i16 = 19;

const OVERRIDES: &[&str] = &[
    "transaction.state.log.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_bumps_the_epoch_and_fences_older_producers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-a", 2, &[]).await;
    let node = find_txn_coordinator(&mut c, "tx-1", 3).await;
    assert_eq!(
        find_txn_coordinator(&mut c, "tx-1", 4).await,
        node,
        "v4 (batched) agrees with v3"
    );

    let (e, pid, epoch) = init(&mut c, "tx-1", 60_000, 4).await;
    assert_eq!((e, epoch), (NONE, 0));
    assert!(pid >= 0);
    let (e, pid2, epoch2) = init(&mut c, "tx-1", 60_000, 4).await;
    assert_eq!(
        (e, pid2, epoch2),
        (NONE, pid, 1),
        "a new producer of the id bumps the epoch"
    );

    // The zombie (epoch 0) is fenced; the current producer adds partitions.
    let zombie = add_partitions(&mut c, "tx-1", pid, 0, &[("txn-a", 0)], 3).await;
    assert_eq!(zombie, vec![PRODUCER_FENCED]);
    let added = add_partitions(&mut c, "tx-1", pid, 1, &[("txn-a", 0), ("txn-a", 1)], 3).await;
    assert_eq!(added, vec![NONE, NONE]);
    let d = describe(&mut c, "tx-1").await;
    assert_eq!(d.error_code, NONE);
    assert_eq!(d.transaction_state.as_str(), "Ongoing");
    assert_eq!((d.producer_id.0, d.producer_epoch), (pid, 1));
    assert_eq!(d.transaction_timeout_ms, 60_000);
    assert!(d.transaction_start_time_ms > 0);
    let expected: std::collections::BTreeSet<(String, i32)> =
        [("txn-a".to_string(), 0), ("txn-a".to_string(), 1)].into();
    assert_eq!(partitions_of(&d), expected);

    // Another producer id for the same transactional id is not this transaction's.
    let other = add_partitions(&mut c, "tx-1", pid + 1000, 1, &[("txn-a", 0)], 3).await;
    assert_eq!(other, vec![INVALID_PRODUCER_ID_MAPPING]);
    // KIP-360: a producer that claims an older epoch is fenced.
    let (e, _, _) = init_expecting(&mut c, "tx-1", 60_000, Some((pid, 0)), 4).await;
    assert_eq!(e, PRODUCER_FENCED);

    // A new producer while the transaction is open: the old one's transaction is aborted at a bumped epoch
    // and the new one is told to retry.
    let (e, _, _) = init(&mut c, "tx-1", 60_000, 4).await;
    assert_eq!(e, CONCURRENT_TRANSACTIONS);
    let d = describe(&mut c, "tx-1").await;
    assert!(
        ["PrepareAbort", "CompleteAbort"].contains(&d.transaction_state.as_str()),
        "{}",
        d.transaction_state.as_str()
    );
    assert_eq!(d.producer_epoch, 2, "the fence bumped the epoch");
    let fenced = add_partitions(&mut c, "tx-1", pid, 1, &[("txn-a", 0)], 3).await;
    assert_eq!(fenced, vec![PRODUCER_FENCED]);
    drop(c);
    broker.stop().await.unwrap();
}

/// KIP-360's retry rule (an InitProducerId claiming the epoch just before the current one is a retry whose answer
/// was lost) holds only for the producer that made the bump: once a new producer of the id, or a fence, took the
/// epoch, a zombie claiming its old epoch is fenced and never handed the new producer's epoch. franz-go re-inits
/// this way after INVALID_PRODUCER_EPOCH on a produce; before the fix its zombie committed a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_claiming_its_old_epoch_is_fenced_not_handed_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-z", 1, &[]).await;
    find_txn_coordinator(&mut c, "tx-z", 4).await;

    // Producer A: epoch 0, then its own KIP-360 bump to 1, whose answer it "lost" and asks for again.
    let (e, pid, epoch) = init(&mut c, "tx-z", 60_000, 4).await;
    assert_eq!((e, epoch), (NONE, 0));
    let bumped = init_expecting(&mut c, "tx-z", 60_000, Some((pid, 0)), 4).await;
    assert_eq!(bumped, (NONE, pid, 1), "the producer's own bump");
    let retried = init_expecting(&mut c, "tx-z", 60_000, Some((pid, 0)), 4).await;
    assert_eq!(
        retried,
        (NONE, pid, 1),
        "a retried bump is answered, not bumped again"
    );

    // Producer B, a new producer of the id, takes epoch 2. A, at 1 (or 0), is a zombie from now on.
    let (e, pid_b, epoch_b) = init(&mut c, "tx-z", 60_000, 4).await;
    assert_eq!((e, pid_b, epoch_b), (NONE, pid, 2));
    for old in [1, 0] {
        let (e, _, _) = init_expecting(&mut c, "tx-z", 60_000, Some((pid, old)), 4).await;
        assert_eq!(
            e, PRODUCER_FENCED,
            "a zombie at epoch {old} after a new producer"
        );
    }
    // Also after B committed a transaction (the flaky interop failure's shape: a state that reads as complete).
    assert_eq!(
        add_partitions(&mut c, "tx-z", pid, 2, &[("txn-z", 0)], 3).await,
        vec![NONE]
    );
    assert_eq!(end_txn(&mut c, "tx-z", pid, 2, true, 3).await, NONE);
    wait_state(&mut c, "tx-z", "CompleteCommit").await;
    let (e, _, _) = init_expecting(&mut c, "tx-z", 60_000, Some((pid, 1)), 4).await;
    assert_eq!(
        e, PRODUCER_FENCED,
        "a zombie after the new producer's commit"
    );

    // A fence: B's transaction is open when producer C starts; the abort at a bumped epoch (3) fences B, and C's
    // retry gets 4. B claiming its epoch, or the fence's, is fenced.
    assert_eq!(
        add_partitions(&mut c, "tx-z", pid, 2, &[("txn-z", 0)], 3).await,
        vec![NONE]
    );
    assert_eq!(
        init(&mut c, "tx-z", 60_000, 4).await.0,
        CONCURRENT_TRANSACTIONS
    );
    let (_, epoch_c) = init_once_the_fence_completes(&mut c, "tx-z").await;
    assert_eq!(epoch_c, 4);
    for old in [2, 3] {
        let (e, _, _) = init_expecting(&mut c, "tx-z", 60_000, Some((pid, old)), 4).await;
        assert_eq!(
            e, PRODUCER_FENCED,
            "the fenced producer claiming epoch {old}"
        );
    }
    assert_eq!(
        describe(&mut c, "tx-z").await.producer_epoch,
        4,
        "no zombie moved the epoch"
    );
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sequences_get_kafkas_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-b", 1, &[]).await;
    find_txn_coordinator(&mut c, "tx-bad", 4).await;

    // EndTxn and AddPartitionsToTxn for an id that never called InitProducerId.
    assert_eq!(
        end_txn(&mut c, "tx-never", 5, 0, true, 3).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    let add = add_partitions(&mut c, "tx-never", 5, 0, &[("txn-b", 0)], 3).await;
    assert_eq!(add, vec![INVALID_PRODUCER_ID_MAPPING]);
    assert_eq!(
        describe(&mut c, "tx-never").await.error_code,
        TRANSACTIONAL_ID_NOT_FOUND
    );

    // Timeouts outside (0, transaction.max.timeout.ms].
    assert_eq!(
        init(&mut c, "tx-bad", 0, 4).await.0,
        INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(
        init(&mut c, "tx-bad", 900_001, 4).await.0,
        INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(init(&mut c, "", 1000, 4).await.0, INVALID_REQUEST);

    let (e, pid, epoch) = init(&mut c, "tx-bad", 10_000, 4).await;
    assert_eq!(e, NONE);
    // EndTxn with nothing in the transaction.
    assert_eq!(
        end_txn(&mut c, "tx-bad", pid, epoch, true, 3).await,
        INVALID_TXN_STATE
    );
    assert_eq!(
        end_txn(&mut c, "tx-bad", pid, epoch + 1, true, 3).await,
        PRODUCER_FENCED
    );
    // An unknown partition fails alone; the others are not attempted.
    let add = add_partitions(
        &mut c,
        "tx-bad",
        pid,
        epoch,
        &[("txn-b", 0), ("txn-b", 7), ("nope", 0)],
        3,
    )
    .await;
    assert_eq!(
        add,
        vec![
            OPERATION_NOT_ATTEMPTED,
            UNKNOWN_TOPIC_OR_PARTITION,
            UNKNOWN_TOPIC_OR_PARTITION
        ]
    );
    assert_eq!(
        describe(&mut c, "tx-bad").await.transaction_state.as_str(),
        "Empty"
    );

    // Commit, then the sequences Kafka refuses while the markers go out or after.
    let add = add_partitions(&mut c, "tx-bad", pid, epoch, &[("txn-b", 0)], 4).await;
    assert_eq!(add, vec![NONE]);
    assert_eq!(end_txn(&mut c, "tx-bad", pid, epoch, true, 4).await, NONE);
    // While the markers and the CompleteCommit record are still being written, Kafka answers an abort with
    // CONCURRENT_TRANSACTIONS (a transition is pending); once the commit is complete, with INVALID_TXN_STATE.
    // Wait for the second, so the answer does not depend on how fast the machine is.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while describe(&mut c, "tx-bad").await.transaction_state.as_str() != "CompleteCommit" {
        assert!(
            std::time::Instant::now() < deadline,
            "the commit did not complete within 20 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let abort = end_txn(&mut c, "tx-bad", pid, epoch, false, 4).await;
    assert_eq!(abort, INVALID_TXN_STATE, "abort after commit");
    let again = end_txn(&mut c, "tx-bad", pid, epoch, true, 4).await;
    assert!(
        [NONE, CONCURRENT_TRANSACTIONS].contains(&again),
        "a retried commit: {again}"
    );

    // The connection and the broker still serve.
    let resp = c.call(&ApiVersionsRequest::default(), 3).await;
    assert_eq!(resp.error_code, 0);
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_transactions_filters_by_state_and_producer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-l", 1, &[]).await;
    find_txn_coordinator(&mut c, "tx-l1", 4).await;
    let (_, p1, e1) = init(&mut c, "tx-l1", 60_000, 4).await;
    let (_, p2, _) = init(&mut c, "tx-l2", 60_000, 4).await;
    assert_eq!(
        add_partitions(&mut c, "tx-l1", p1, e1, &[("txn-l", 0)], 3).await,
        vec![NONE]
    );

    let list = |states: &[&str], pids: &[i64], duration: i64| {
        ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|x| s(x)).collect())
            .with_producer_id_filters(pids.iter().map(|p| ProducerId(*p)).collect())
            .with_duration_filter(duration)
    };
    let ids = |r: &ListTransactionsResponse| {
        let mut v: Vec<String> = r
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.0.to_string())
            .collect();
        v.sort();
        v
    };
    let all = c.call(&list(&[], &[], -1), 0).await;
    assert_eq!(ids(&all), vec!["tx-l1", "tx-l2"]);
    let ongoing = c.call(&list(&["Ongoing"], &[], -1), 1).await;
    assert_eq!(ids(&ongoing), vec!["tx-l1"]);
    assert_eq!(
        ongoing.transaction_states[0].transaction_state.as_str(),
        "Ongoing"
    );
    let by_pid = c.call(&list(&[], &[p2], -1), 1).await;
    assert_eq!(ids(&by_pid), vec!["tx-l2"]);
    let unknown = c.call(&list(&["Bogus"], &[], -1), 0).await;
    assert_eq!(
        unknown
            .unknown_state_filters
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>(),
        vec!["Bogus"]
    );
    // KIP-994: only transactions running longer than the filter.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ids(&c.call(&list(&[], &[], 100), 1).await), vec!["tx-l1"]);
    assert!(ids(&c.call(&list(&[], &[], 600_000), 1).await).is_empty());
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_only_reports_which_partitions_are_in_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-v", 2, &[]).await;
    find_txn_coordinator(&mut c, "tx-v", 4).await;
    let (_, pid, epoch) = init(&mut c, "tx-v", 60_000, 4).await;
    assert_eq!(
        add_partitions(&mut c, "tx-v", pid, epoch, &[("txn-v", 0)], 4).await,
        vec![NONE]
    );
    let verify = |epoch: i16| {
        AddPartitionsToTxnRequest::default().with_transactions(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(s("tx-v")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_verify_only(true)
                .with_topics(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(name("txn-v"))
                        .with_partitions(vec![0, 1]),
                ]),
        ])
    };
    let resp = c.call(&verify(epoch), 4).await;
    let codes: Vec<i16> = resp.results_by_transaction[0].topic_results[0]
        .results_by_partition
        .iter()
        .map(|p| p.partition_error_code)
        .collect();
    assert_eq!(codes, vec![NONE, INVALID_TXN_STATE]);
    let resp = c.call(&verify(epoch + 1), 4).await;
    assert!(resp.results_by_transaction[0].topic_results[0]
        .results_by_partition
        .iter()
        .all(|p| p.partition_error_code == PRODUCER_FENCED));
    // Verification added nothing.
    assert_eq!(partitions_of(&describe(&mut c, "tx-v").await).len(), 1);
    drop(c);
    broker.stop().await.unwrap();
}

/// KIP-890 part 1: the first transactional batch of a transaction on a partition is appended only if the
/// coordinator confirms the partition was added; a stray batch (never added, or from a fenced epoch) is refused
/// and leaves no open transaction behind (the last stable offset stays at the log end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_a_partition_outside_the_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-890", 2, &[]).await;
    // No coordinator state for this id yet (no __transaction_state): retriable, never appended.
    assert_eq!(
        produce_txn(&mut c, "tx-890", "txn-890", 0, 4242, 0, 0, &["early"]).await,
        NOT_ENOUGH_REPLICAS
    );
    find_txn_coordinator(&mut c, "tx-890", 4).await;
    let (_, pid, epoch) = init(&mut c, "tx-890", 60_000, 4).await;
    assert_eq!(
        add_partitions(&mut c, "tx-890", pid, epoch, &[("txn-890", 0)], 3).await,
        vec![NONE]
    );
    assert_eq!(
        produce_txn(&mut c, "tx-890", "txn-890", 0, pid, epoch, 0, &["in"]).await,
        NONE
    );
    // Later batches of the open transaction need no new verification.
    assert_eq!(
        produce_txn(&mut c, "tx-890", "txn-890", 0, pid, epoch, 1, &["in-2"]).await,
        NONE
    );
    assert_eq!(
        produce_txn(&mut c, "tx-890", "txn-890", 1, pid, epoch, 0, &["stray"]).await,
        INVALID_TXN_STATE,
        "partition 1 was never added to the transaction"
    );
    let offsets = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("txn-890"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(1)
                    .with_timestamp(-1),
            ])]);
    let resp = c.call(&offsets, 7).await;
    assert_eq!(
        resp.topics[0].partitions[0].offset, 0,
        "the refused batch left partition 1 empty, with no open transaction"
    );
    assert_eq!(end_txn(&mut c, "tx-890", pid, epoch, true, 3).await, NONE);
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_state_is_replayed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, epoch) = {
        let broker = TestBroker::start(dir.path(), OVERRIDES).await;
        let mut c = broker.client().await;
        create_topic(&mut c, "txn-r", 1, &[]).await;
        find_txn_coordinator(&mut c, "tx-r", 4).await;
        init(&mut c, "tx-r", 60_000, 4).await;
        let (e, pid, epoch) = init(&mut c, "tx-r", 45_000, 4).await;
        assert_eq!((e, epoch), (NONE, 1));
        assert_eq!(
            add_partitions(&mut c, "tx-r", pid, epoch, &[("txn-r", 0)], 3).await,
            vec![NONE]
        );
        drop(c);
        broker.stop().await.unwrap();
        (pid, epoch)
    };
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    find_txn_coordinator(&mut c, "tx-r", 4).await;
    let d = loop {
        let d = describe(&mut c, "tx-r").await;
        if d.error_code != 14 && d.error_code != 16 {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(d.error_code, NONE);
    assert_eq!(d.transaction_state.as_str(), "Ongoing");
    assert_eq!(
        (d.producer_id.0, d.producer_epoch, d.transaction_timeout_ms),
        (pid, epoch, 45_000)
    );
    assert_eq!(partitions_of(&d).len(), 1);
    // The producer restarted too: its InitProducerId aborts the transaction left open.
    let (e, _, _) = init_expecting(&mut c, "tx-r", 45_000, Some((pid, epoch)), 4).await;
    assert_eq!(e, CONCURRENT_TRANSACTIONS);
    assert_eq!(describe(&mut c, "tx-r").await.producer_epoch, epoch + 1);
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut overrides = OVERRIDES.to_vec();
    overrides.push("transaction.abort.timed.out.transaction.cleanup.interval.ms=100");
    let broker = TestBroker::start(dir.path(), &overrides).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-t", 1, &[]).await;
    find_txn_coordinator(&mut c, "tx-t", 4).await;
    let (_, pid, epoch) = init(&mut c, "tx-t", 500, 4).await;
    assert_eq!(
        add_partitions(&mut c, "tx-t", pid, epoch, &[("txn-t", 0)], 3).await,
        vec![NONE]
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let d = loop {
        let d = describe(&mut c, "tx-t").await;
        if d.transaction_state.as_str() != "Ongoing" {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the transaction was never aborted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(["PrepareAbort", "CompleteAbort"].contains(&d.transaction_state.as_str()));
    assert_eq!(d.producer_epoch, epoch + 1);
    assert_eq!(
        end_txn(&mut c, "tx-t", pid, epoch, true, 3).await,
        PRODUCER_FENCED
    );
    // Kafka's timeout abort fences the epoch: the producer cannot re-init with it (KIP-588 is not implemented).
    wait_state(&mut c, "tx-t", "CompleteAbort").await;
    let (e, _, _) = init_expecting(&mut c, "tx-t", 500, Some((pid, epoch)), 4).await;
    assert_eq!(e, PRODUCER_FENCED);
    drop(c);
    broker.stop().await.unwrap();
}

/// A transactional produce of `values` to `topic`-`partition` (sequence from 0 at each new epoch).
#[allow(clippy::too_many_arguments)] // each argument is a field of the request the test varies
async fn produce_txn(
    c: &mut Client,
    id: &str,
    topic: &str,
    partition: i32,
    pid: i64,
    epoch: i16,
    sequence: i32,
    values: &[&str],
) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let records: Vec<annal_log::batch::KeyValue> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    let batch = annal_log::batch::build_batch(
        &records,
        &vec![1_700_000_000_000; values.len()],
        annal_log::batch::ProducerFields {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: sequence,
            transactional: true,
        },
    );
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(bytes::Bytes::from(batch)))])]);
    c.call(&req, 9).await.responses[0].partition_responses[0].error_code
}

async fn committed_offset(c: &mut Client, group: &str, topic: &str, partition: i32) -> i64 {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![partition]),
        ]));
    c.call(&req, 7).await.topics[0].partitions[0].committed_offset
}

async fn txn_offset_commit(
    c: &mut Client,
    id: &str,
    group: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    offset: i64,
) -> i16 {
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1),
                ]),
        ]);
    // The group's partition may have been created a moment ago: retry NOT_COORDINATOR and loading, as clients do.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let error = c.call(&req, 3).await.topics[0].partitions[0].error_code;
        if !(14..=16).contains(&error) || std::time::Instant::now() > deadline {
            return error;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn add_offsets(c: &mut Client, id: &str, group: &str, pid: i64, epoch: i16) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(s(group)));
    c.call(&req, 3).await.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_txn_sends_markers_and_offsets_follow_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "txn-e", 2, &[]).await;
    find_txn_coordinator(&mut c, "tx-e", 4).await;
    let (_, pid, epoch) = init(&mut c, "tx-e", 60_000, 4).await;

    // Commit: data in two partitions and the group's offset.
    assert_eq!(
        add_partitions(&mut c, "tx-e", pid, epoch, &[("txn-e", 0), ("txn-e", 1)], 3).await,
        vec![NONE, NONE]
    );
    assert_eq!(
        produce_txn(&mut c, "tx-e", "txn-e", 0, pid, epoch, 0, &["a", "b"]).await,
        NONE
    );
    assert_eq!(
        produce_txn(&mut c, "tx-e", "txn-e", 1, pid, epoch, 0, &["c"]).await,
        NONE
    );
    assert_eq!(add_offsets(&mut c, "tx-e", "g-e", pid, epoch).await, NONE);
    assert_eq!(
        txn_offset_commit(&mut c, "tx-e", "g-e", pid, epoch, "txn-e", 2).await,
        NONE
    );
    assert_eq!(
        committed_offset(&mut c, "g-e", "txn-e", 0).await,
        -1,
        "not before the commit"
    );
    assert_eq!(end_txn(&mut c, "tx-e", pid, epoch, true, 3).await, NONE);
    let d = wait_state(&mut c, "tx-e", "CompleteCommit").await;
    assert!(partitions_of(&d).is_empty());
    assert_eq!(committed_offset(&mut c, "g-e", "txn-e", 0).await, 2);
    // Both partitions got their marker: each one's last stable offset is past it (records + marker).
    for (p, end) in [(0, 3), (1, 2)] {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(1)
            .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("txn-e"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(p)
                        .with_timestamp(-1),
                ])]);
        let resp = c.call(&req, 4).await;
        assert_eq!(
            resp.topics[0].partitions[0].offset, end,
            "read_committed end of txn-e-{p}"
        );
    }
    // A retried EndTxn of the finished transaction succeeds; the opposite outcome does not.
    assert_eq!(end_txn(&mut c, "tx-e", pid, epoch, true, 3).await, NONE);
    assert_eq!(
        end_txn(&mut c, "tx-e", pid, epoch, false, 3).await,
        INVALID_TXN_STATE
    );

    // Abort: the offset stays where the commit put it.
    assert_eq!(add_offsets(&mut c, "tx-e", "g-e", pid, epoch).await, NONE);
    assert_eq!(
        txn_offset_commit(&mut c, "tx-e", "g-e", pid, epoch, "txn-e", 9).await,
        NONE
    );
    assert_eq!(end_txn(&mut c, "tx-e", pid, epoch, false, 3).await, NONE);
    wait_state(&mut c, "tx-e", "CompleteAbort").await;
    assert_eq!(committed_offset(&mut c, "g-e", "txn-e", 0).await, 2);

    // A new producer of the id while a transaction is open: the old one is fenced by the abort markers and
    // the new one's retry succeeds with the epoch after the fence.
    assert_eq!(
        add_partitions(&mut c, "tx-e", pid, epoch, &[("txn-e", 0)], 3).await,
        vec![NONE]
    );
    assert_eq!(
        produce_txn(&mut c, "tx-e", "txn-e", 0, pid, epoch, 2, &["zombie"]).await,
        NONE
    );
    assert_eq!(
        init(&mut c, "tx-e", 60_000, 4).await.0,
        CONCURRENT_TRANSACTIONS
    );
    let (pid2, epoch2) = init_once_the_fence_completes(&mut c, "tx-e").await;
    assert_eq!(
        (pid2, epoch2),
        (pid, epoch + 2),
        "one bump for the fence, one for the new producer"
    );
    assert_eq!(
        describe(&mut c, "tx-e").await.transaction_state.as_str(),
        "Empty"
    );
    // The zombie cannot write any more: the marker carried the fenced epoch.
    let zombie = produce_txn(&mut c, "tx-e", "txn-e", 0, pid, epoch, 3, &["late"]).await;
    assert_ne!(zombie, NONE);
    drop(c);
    broker.stop().await.unwrap();
}
