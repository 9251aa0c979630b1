//! Transaction API helpers for the raw-protocol tests (and the version sweep of `versions.rs`).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;

use super::{name, s, Client};

pub const NONE: i16 = 0;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_REQUEST: i16 = 42;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
pub const PRODUCER_FENCED: i16 = 90;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// FindCoordinator(TRANSACTION) until it answers (the first call creates `__transaction_state`).
pub async fn find_txn_coordinator(c: &mut Client, id: &str, version: i16) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let req = if version >= 4 {
            FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s(id)])
        } else {
            FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_key(s(id))
        };
        let resp = c.call(&req, version).await;
        let (error, node) = if version >= 4 {
            let c0 = &resp.coordinators[0];
            (c0.error_code, c0.node_id.0)
        } else {
            (resp.error_code, resp.node_id.0)
        };
        if error == NONE {
            return node;
        }
        assert!(
            Instant::now() < deadline,
            "FindCoordinator(TRANSACTION) kept answering {error}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// InitProducerId for `id`; retries COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE (the topic is being loaded).
pub async fn init(c: &mut Client, id: &str, timeout_ms: i32, version: i16) -> (i16, i64, i16) {
    init_expecting(c, id, timeout_ms, None, version).await
}

pub async fn init_expecting(
    c: &mut Client,
    id: &str,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
    version: i16,
) -> (i16, i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (pid, epoch) = current.unwrap_or((-1, -1));
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch);
        let resp = c.call(&req, version).await;
        // Loading, not yet created, or this broker's leadership of the partition not applied yet: retry, as
        // clients do (after finding the coordinator again).
        if matches!(resp.error_code, 14..=16) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        return (resp.error_code, resp.producer_id.0, resp.producer_epoch);
    }
}

/// A new producer's InitProducerId retried while the coordinator aborts the transaction its first try fenced
/// (CONCURRENT_TRANSACTIONS, and nothing else, until then): the producer id and epoch it finally gets.
pub async fn init_once_the_fence_completes(c: &mut Client, id: &str) -> (i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (e, pid, epoch) = init(c, id, 60_000, 4).await;
        if e == 0 {
            return (pid, epoch);
        }
        assert_eq!(
            e, 51,
            "only CONCURRENT_TRANSACTIONS while the fence completes"
        );
        assert!(
            Instant::now() < deadline,
            "the fenced transaction never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// AddPartitionsToTxn v0-3: each partition's error code, in request order.
pub async fn add_partitions(
    c: &mut Client,
    id: &str,
    pid: i64,
    epoch: i16,
    partitions: &[(&str, i32)],
    version: i16,
) -> Vec<i16> {
    let mut topics: Vec<add_partitions_to_txn_request::AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in partitions {
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(*p),
            None => topics.push(
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(name(t))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    let resp = if version >= 4 {
        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_topics(topics),
        ]);
        let resp = c.call(&req, version).await;
        resp.results_by_transaction
            .into_iter()
            .flat_map(|t| t.topic_results)
            .collect::<Vec<_>>()
    } else {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(topics);
        c.call(&req, version).await.results_by_topic_v3_and_below
    };
    partitions
        .iter()
        .map(|(t, p)| {
            resp.iter()
                .find(|r| r.name.0.as_str() == *t)
                .and_then(|r| {
                    r.results_by_partition
                        .iter()
                        .find(|x| x.partition_index == *p)
                })
                .map(|x| x.partition_error_code)
                .expect("every partition answered")
        })
        .collect()
}

pub async fn end_txn(
    c: &mut Client,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    version: i16,
) -> i16 {
    end_txn_full(c, id, pid, epoch, commit, version).await.0
}

/// EndTxn: the error and (v5) the producer id and epoch to continue with.
pub async fn end_txn_full(
    c: &mut Client,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    version: i16,
) -> (i16, i64, i16) {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let resp = c.call(&req, version).await;
    (resp.error_code, resp.producer_id.0, resp.producer_epoch)
}

pub async fn describe(
    c: &mut Client,
    id: &str,
) -> describe_transactions_response::TransactionState {
    let req =
        DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(id))]);
    c.call(&req, 0).await.transaction_states.remove(0)
}

/// Waits until `id` is in `state` (markers are written in the background).
pub async fn wait_state(
    c: &mut Client,
    id: &str,
    state: &str,
) -> describe_transactions_response::TransactionState {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = describe(c, id).await;
        if d.transaction_state.as_str() == state {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "{id} stayed {} instead of {state}",
            d.transaction_state.as_str()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `(topic, partition)`s DescribeTransactions lists.
pub fn partitions_of(
    d: &describe_transactions_response::TransactionState,
) -> BTreeSet<(String, i32)> {
    d.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
        .collect()
}

/// Exercises every advertised version of the transaction APIs (part of `versions.rs`' exact-set check): one
/// transaction per version, through AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn at that
/// version, then DescribeTransactions and ListTransactions.
pub async fn exercise_txn_apis(c: &mut Client, topic: &str, tested: &mut BTreeSet<(i16, i16)>) {
    find_txn_coordinator(c, "vtx-0", 4).await;
    // v5 (and AddOffsetsToTxn v4) are transaction version 2's: AddPartitionsToTxn v5 is the implicit add a
    // partition leader sends, and EndTxn v5 bumps the epoch.
    for v in 0..=5i16 {
        let id = format!("vtx-{v}");
        let (e, pid, epoch) = init(c, &id, 60_000, 4).await;
        assert_eq!(e, NONE, "init {id}");
        let add = add_partitions(c, &id, pid, epoch, &[(topic, 0)], v).await;
        assert_eq!(add, vec![NONE], "add partitions v{v}");
        tested.insert((ApiKey::AddPartitionsToTxn as i16, v));
        let offsets_v = v.min(4);
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(&id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(s("vtx-group")));
        assert_eq!(
            c.call(&req, offsets_v).await.error_code,
            NONE,
            "add offsets v{offsets_v}"
        );
        tested.insert((ApiKey::AddOffsetsToTxn as i16, offsets_v));
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(&id)))
            .with_group_id(GroupId(s("vtx-group")))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(1 + i64::from(v))
                            .with_committed_leader_epoch(-1),
                    ]),
            ]);
        let resp = c.call(&req, v).await;
        assert_eq!(
            resp.topics[0].partitions[0].error_code, NONE,
            "txn offset commit v{v}"
        );
        tested.insert((ApiKey::TxnOffsetCommit as i16, v));
        let (e, next_pid, next_epoch) = end_txn_full(c, &id, pid, epoch, true, v).await;
        assert_eq!(e, NONE, "end txn v{v}");
        if v >= 5 {
            assert_eq!(
                (next_pid, next_epoch),
                (pid, epoch + 1),
                "v5 bumps the epoch"
            );
        }
        tested.insert((ApiKey::EndTxn as i16, v));
    }
    let d = describe(c, "vtx-4").await;
    assert_eq!(d.error_code, NONE);
    tested.insert((ApiKey::DescribeTransactions as i16, 0));
    for v in 0..=1 {
        let resp = c
            .call(
                &ListTransactionsRequest::default().with_duration_filter(-1),
                v,
            )
            .await;
        assert_eq!(resp.error_code, NONE);
        assert!(resp.transaction_states.len() >= 5, "list transactions v{v}");
        tested.insert((ApiKey::ListTransactions as i16, v));
    }
}
