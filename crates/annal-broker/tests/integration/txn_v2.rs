//! Transaction version 2 (KIP-890 part 2) over the wire: the `transaction.version` feature in ApiVersions, the
//! implicit partition add of Produce v12 and TxnOffsetCommit v5, EndTxn v5's epoch bump and its retries, Kafka's
//! error codes for stale epochs and for an implicit add after fencing, version 1 beside it on the same id, and the
//! version-2 state replayed after a restart.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::txn::*;
use common::*;
use kafka_protocol::messages::*;

const NOT_ENOUGH_REPLICAS: i16 = 19;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;

const OVERRIDES: &[&str] = &[
    "transaction.state.log.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
];

/// One transactional batch at Produce `version` (12: a transaction-version-2 client, no AddPartitionsToTxn).
#[allow(clippy::too_many_arguments)]
async fn produce_at(
    c: &mut Client,
    version: i16,
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
                .with_records(Some(Bytes::from(batch)))])]);
    c.call(&req, version).await.responses[0].partition_responses[0].error_code
}

/// Produce v12, retried while the coordinator is still writing the previous transaction's markers (the
/// implicit add answers CONCURRENT_TRANSACTIONS, which a produce gets as NOT_ENOUGH_REPLICAS).
#[allow(clippy::too_many_arguments)]
async fn produce_v12(
    c: &mut Client,
    id: &str,
    topic: &str,
    partition: i32,
    pid: i64,
    epoch: i16,
    sequence: i32,
    values: &[&str],
) -> i16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = produce_at(c, 12, id, topic, partition, pid, epoch, sequence, values).await;
        if e != NOT_ENOUGH_REPLICAS || Instant::now() > deadline {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn txn_offset_commit_at(
    c: &mut Client,
    version: i16,
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
    // Retried as a client does while the group's coordinator loads (FindCoordinator is skipped here).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = c.call(&req, version).await.topics[0].partitions[0].error_code;
        if ![14, 15, 16].contains(&e) || Instant::now() > deadline {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn committed_offset(c: &mut Client, group: &str, topic: &str) -> i64 {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![0]),
        ]));
    c.call(&req, 7).await.topics[0].partitions[0].committed_offset
}

/// Reads a partition read_committed from offset 0 to its last stable offset, as a consumer does (one fetch
/// returns one segment's batches): the committed values in order, and the producer ids of the aborted
/// transactions the broker named.
async fn read_committed(c: &mut Client, topic: &str, partition: i32) -> (Vec<String>, Vec<i64>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let mut aborted: Vec<(i64, i64)> = Vec::new();
    let mut records = Vec::new();
    let mut offset = 0;
    loop {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let resp = c.call(&req, 12).await;
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, NONE);
        aborted.extend(
            p.aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id.0, a.first_offset)),
        );
        let Some(bytes) = p.records.as_ref().filter(|b| !b.is_empty()) else {
            break;
        };
        let mut buf = bytes.clone();
        for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf)
            .expect("records decode")
        {
            records.extend(set.records);
        }
        let Some(last) = records.last() else { break };
        offset = last.offset + 1;
        if offset >= p.last_stable_offset {
            break;
        }
    }
    aborted.sort_by_key(|a| a.1);
    aborted.dedup();
    // The consumer's filter: a producer's records are aborted from its aborted transaction's first offset to
    // its next control record.
    let mut out = Vec::new();
    let mut open_aborted: Vec<i64> = Vec::new();
    let mut next = 0;
    for r in records {
        while next < aborted.len() && aborted[next].1 <= r.offset {
            open_aborted.push(aborted[next].0);
            next += 1;
        }
        if r.control {
            open_aborted.retain(|id| *id != r.producer_id);
            continue;
        }
        if r.transactional && open_aborted.contains(&r.producer_id) {
            continue;
        }
        if let Some(v) = r.value {
            out.push(String::from_utf8_lossy(&v).to_string());
        }
    }
    (out, aborted.into_iter().map(|a| a.0).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_finalize_the_configured_transaction_version() {
    for (config, finalized) in [
        (None, Some(2)),
        (Some("transaction.version=1"), Some(1)),
        (Some("transaction.version=0"), None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut overrides = vec![];
        overrides.extend(config);
        let broker = TestBroker::start(dir.path(), &overrides).await;
        let mut c = broker.client().await;
        let resp = c
            .call(
                &ApiVersionsRequest::default()
                    .with_client_software_name(s("t"))
                    .with_client_software_version(s("1")),
                3,
            )
            .await;
        let supported: Vec<(String, i16, i16)> = resp
            .supported_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version, f.max_version))
            .collect();
        assert_eq!(
            supported,
            vec![("transaction.version".to_string(), 0, 2)],
            "{config:?}"
        );
        let levels: Vec<(String, i16, i16)> = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
            .collect();
        assert_eq!(
            levels,
            finalized
                .map(|l| vec![("transaction.version".to_string(), l, l)])
                .unwrap_or_default(),
            "{config:?}"
        );
        assert!(
            resp.finalized_features_epoch >= 0,
            "clients ignore finalized features at epoch -1"
        );
        let max = |key: i16| {
            resp.api_keys
                .iter()
                .find(|k| k.api_key == key)
                .map(|k| k.max_version)
        };
        // AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, Produce: what Kafka 4.x advertises.
        assert_eq!(
            [max(24), max(25), max(26), max(28), max(0)],
            [Some(5), Some(4), Some(5), Some(5), Some(12)]
        );
        drop(c);
        broker.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_adds_partitions_and_every_end_txn_bumps_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "tv2-a", 1, &[]).await;
    create_topic(&mut c, "tv2-b", 1, &[]).await;
    find_txn_coordinator(&mut c, "tv2", 4).await;
    let (e, pid, epoch) = init(&mut c, "tv2", 60_000, 5).await;
    assert_eq!((e, epoch), (NONE, 0));

    // Transaction 1, committed: two topics and the group's offset, with no AddPartitionsToTxn or
    // AddOffsetsToTxn from the client.
    assert_eq!(
        produce_v12(&mut c, "tv2", "tv2-a", 0, pid, 0, 0, &["a1", "a2"]).await,
        NONE
    );
    assert_eq!(
        produce_v12(&mut c, "tv2", "tv2-b", 0, pid, 0, 0, &["b1"]).await,
        NONE
    );
    assert_eq!(
        txn_offset_commit_at(&mut c, 5, "tv2", "g-tv2", pid, 0, "tv2-a", 2).await,
        NONE
    );
    let d = describe(&mut c, "tv2").await;
    assert_eq!(d.transaction_state.as_str(), "Ongoing");
    let parts = partitions_of(&d);
    assert!(parts.contains(&("tv2-a".to_string(), 0)));
    assert!(parts.contains(&("tv2-b".to_string(), 0)));
    assert!(
        parts.iter().any(|(t, _)| t == "__consumer_offsets"),
        "TxnOffsetCommit v5 added the group's partition: {parts:?}"
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2", pid, 0, true, 5).await,
        (NONE, pid, 1),
        "EndTxn v5 answers the bumped epoch"
    );
    let d = wait_state(&mut c, "tv2", "CompleteCommit").await;
    assert_eq!(d.producer_epoch, 1);
    // A retry of the EndTxn (the producer never saw the answer) succeeds with the current epoch; the other
    // outcome at the old epoch is INVALID_TXN_STATE.
    assert_eq!(
        end_txn_full(&mut c, "tv2", pid, 0, true, 5).await,
        (NONE, pid, 1)
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2", pid, 0, false, 5).await.0,
        INVALID_TXN_STATE
    );
    assert_eq!(committed_offset(&mut c, "g-tv2", "tv2-a").await, 2);

    // Transaction 2, aborted, at the bumped epoch: sequences start over at 0.
    assert_eq!(
        produce_v12(&mut c, "tv2", "tv2-a", 0, pid, 1, 0, &["x1"]).await,
        NONE
    );
    assert_eq!(
        produce_v12(&mut c, "tv2", "tv2-b", 0, pid, 1, 0, &["x2"]).await,
        NONE
    );
    // A late batch of transaction 1 (epoch 0) is refused: the commit markers carried epoch 1.
    assert_eq!(
        produce_at(&mut c, 12, "tv2", "tv2-a", 0, pid, 0, 1, &["late"]).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2", pid, 1, false, 5).await,
        (NONE, pid, 2)
    );
    wait_state(&mut c, "tv2", "CompleteAbort").await;
    for (topic, committed) in [("tv2-a", vec!["a1", "a2"]), ("tv2-b", vec!["b1"])] {
        let (values, aborted) = read_committed(&mut c, topic, 0).await;
        assert_eq!(values, committed, "read_committed {topic}");
        assert_eq!(
            aborted,
            vec![pid],
            "the aborted transaction is named in {topic}"
        );
    }

    // Transaction 3, committed after the abort, in the same partitions.
    assert_eq!(
        produce_v12(&mut c, "tv2", "tv2-a", 0, pid, 2, 0, &["c1"]).await,
        NONE
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2", pid, 2, true, 5).await,
        (NONE, pid, 3)
    );
    wait_state(&mut c, "tv2", "CompleteCommit").await;
    let (values, _) = read_committed(&mut c, "tv2-a", 0).await;
    assert_eq!(
        values,
        vec!["a1", "a2", "c1"],
        "committed records only, in order"
    );
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_epochs_and_implicit_adds_after_fencing_get_kafkas_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "tv2-f", 1, &[]).await;
    find_txn_coordinator(&mut c, "tv2-f", 4).await;

    // No InitProducerId yet: Kafka's INVALID_PRODUCER_ID_MAPPING with -1/-1 (once the coordinator loaded).
    let deadline = Instant::now() + Duration::from_secs(20);
    let unknown = loop {
        let r = end_txn_full(&mut c, "tv2-f", 77, 0, true, 5).await;
        if r.0 != 14 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(unknown, (INVALID_PRODUCER_ID_MAPPING, -1, -1));
    let (_, pid, _) = init(&mut c, "tv2-f", 60_000, 5).await;
    // Empty: a commit is INVALID_TXN_STATE, an abort is allowed (the client cannot know whether its produce
    // requests added anything) and bumps the epoch.
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 0, true, 5).await.0,
        INVALID_TXN_STATE
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 0, false, 5).await,
        (NONE, pid, 1)
    );
    wait_state(&mut c, "tv2-f", "CompleteAbort").await;
    // Its retry is answered with the current epoch; a wrong producer id is INVALID_PRODUCER_ID_MAPPING.
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 0, false, 5).await,
        (NONE, pid, 1)
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid + 1, 1, false, 5).await.0,
        INVALID_PRODUCER_ID_MAPPING
    );
    // A transaction at epoch 1, committed: epoch 2. Then an EndTxn at epoch 0 (two behind) is fenced.
    assert_eq!(
        produce_v12(&mut c, "tv2-f", "tv2-f", 0, pid, 1, 0, &["one"]).await,
        NONE
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 1, true, 5).await,
        (NONE, pid, 2)
    );
    wait_state(&mut c, "tv2-f", "CompleteCommit").await;
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 0, true, 5).await,
        (PRODUCER_FENCED, -1, -1),
        "an epoch two behind is no retry"
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 5, true, 5).await.0,
        PRODUCER_FENCED,
        "an epoch ahead of the coordinator's"
    );

    // A new producer of the id (epoch 3) fences the one at epoch 2: its implicit adds are refused, as the
    // produce error Kafka's producers expect (INVALID_PRODUCER_EPOCH) and AddPartitionsToTxn's PRODUCER_FENCED.
    let (e, pid3, epoch3) = init(&mut c, "tv2-f", 60_000, 5).await;
    assert_eq!((e, pid3, epoch3), (NONE, pid, 3));
    assert_eq!(
        produce_at(&mut c, 12, "tv2-f", "tv2-f", 0, pid, 2, 0, &["zombie"]).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        txn_offset_commit_at(&mut c, 5, "tv2-f", "g-tv2-f", pid, 2, "tv2-f", 1).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        add_partitions(&mut c, "tv2-f", pid, 2, &[("tv2-f", 0)], 5).await,
        vec![PRODUCER_FENCED]
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-f", pid, 2, false, 5).await.0,
        PRODUCER_FENCED
    );
    let d = describe(&mut c, "tv2-f").await;
    assert_eq!(
        (d.transaction_state.as_str(), d.producer_epoch),
        ("Empty", 3),
        "nothing the zombie sent opened a transaction"
    );

    // Version 1 beside it, on the same id: explicit AddPartitionsToTxn, EndTxn v4, no bump.
    assert_eq!(
        add_partitions(&mut c, "tv2-f", pid, 3, &[("tv2-f", 0)], 3).await,
        vec![NONE]
    );
    assert_eq!(
        produce_at(&mut c, 11, "tv2-f", "tv2-f", 0, pid, 3, 0, &["v1"]).await,
        NONE
    );
    assert_eq!(end_txn(&mut c, "tv2-f", pid, 3, true, 4).await, NONE);
    let d = wait_state(&mut c, "tv2-f", "CompleteCommit").await;
    assert_eq!(d.producer_epoch, 3, "version 1 keeps the epoch");
    // Produce v11 is a version-1 client: without AddPartitionsToTxn its batch is refused (KIP-890 part 1).
    assert_eq!(
        produce_at(&mut c, 11, "tv2-f", "tv2-f", 0, pid, 3, 1, &["stray"]).await,
        INVALID_TXN_STATE
    );
    let (values, _) = read_committed(&mut c, "tv2-f", 0).await;
    assert_eq!(values, vec!["one", "v1"]);
    drop(c);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_state_is_replayed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let pid = {
        let broker = TestBroker::start(dir.path(), OVERRIDES).await;
        let mut c = broker.client().await;
        create_topic(&mut c, "tv2-r", 1, &[]).await;
        find_txn_coordinator(&mut c, "tv2-r", 4).await;
        let (_, pid, _) = init(&mut c, "tv2-r", 60_000, 5).await;
        assert_eq!(
            produce_v12(&mut c, "tv2-r", "tv2-r", 0, pid, 0, 0, &["r"]).await,
            NONE
        );
        assert_eq!(
            end_txn_full(&mut c, "tv2-r", pid, 0, true, 5).await,
            (NONE, pid, 1)
        );
        wait_state(&mut c, "tv2-r", "CompleteCommit").await;
        drop(c);
        broker.stop().await.unwrap();
        pid
    };
    let broker = TestBroker::start(dir.path(), OVERRIDES).await;
    let mut c = broker.client().await;
    find_txn_coordinator(&mut c, "tv2-r", 4).await;
    let d = wait_state(&mut c, "tv2-r", "CompleteCommit").await;
    assert_eq!((d.producer_id.0, d.producer_epoch), (pid, 1));
    // The replayed record kept the client's transaction version: the lost-answer retry is still recognised.
    assert_eq!(
        end_txn_full(&mut c, "tv2-r", pid, 0, true, 5).await,
        (NONE, pid, 1)
    );
    assert_eq!(
        produce_v12(&mut c, "tv2-r", "tv2-r", 0, pid, 1, 0, &["after"]).await,
        NONE
    );
    assert_eq!(
        end_txn_full(&mut c, "tv2-r", pid, 1, true, 5).await,
        (NONE, pid, 2)
    );
    wait_state(&mut c, "tv2-r", "CompleteCommit").await;
    let (values, _) = read_committed(&mut c, "tv2-r", 0).await;
    assert_eq!(values, vec!["r", "after"]);
    drop(c);
    broker.stop().await.unwrap();
}
