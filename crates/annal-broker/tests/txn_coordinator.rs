//! The transaction coordinator over the wire: InitProducerId with a transactional id (epochs, fencing,
//! recovery), AddPartitionsToTxn, EndTxn, DescribeTransactions, ListTransactions, timeouts, replay after a
//! restart, and Kafka's error codes for bad sequences.

mod common;

use std::time::Duration;

use common::txn::*;
use common::*;
use kafka_protocol::messages::*;

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
    drop(c);
    broker.stop().await.unwrap();
}
