//! The partition side of transactions over the wire, on a real broker: transactional produce, WriteTxnMarkers,
//! read_committed fetch (stops at the last stable offset, reports aborted transactions), ListOffsets by
//! isolation level, long polls woken by a marker, and the markers' epoch checks.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;

const T: &str = "txn-topic";
/// These tests play the transaction coordinator's part themselves (WriteTxnMarkers by hand), so no coordinator
/// knows their transactions: KIP-890 verification, which would refuse their batches, is off.
const NO_VERIFICATION: &str = "transaction.partition.verification.enable=false";

fn txn_batch(values: &[&str], producer_id: i64, epoch: i16, sequence: i32) -> Vec<u8> {
    let records: Vec<annal_log::batch::KeyValue> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    let ts = vec![1_700_000_000_000; values.len()];
    annal_log::batch::build_batch(
        &records,
        &ts,
        annal_log::batch::ProducerFields {
            producer_id,
            producer_epoch: epoch,
            base_sequence: sequence,
            transactional: true,
        },
    )
}

/// A transactional produce (transactional id set, as a real transactional producer sends it).
async fn produce_txn(c: &mut Client, partition: i32, records: Vec<u8>) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s("app-1"))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(T))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(Bytes::from(records)))])]);
    let resp = c.call(&req, 11).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// WriteTxnMarkers v1 for one producer on `partitions` of T; the error code per partition.
async fn write_marker(
    c: &mut Client,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    topic: &str,
    partitions: &[i32],
) -> Vec<i16> {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(name(topic))
            .with_partition_indexes(partitions.to_vec())])]);
    let resp = c.call(&req, 1).await;
    assert_eq!(resp.markers.len(), 1);
    assert_eq!(resp.markers[0].producer_id.0, producer_id);
    resp.markers[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

fn fetch_request(partition: i32, offset: i64, isolation: i8, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_isolation_level(isolation)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(T))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

async fn fetch_isolated(
    c: &mut Client,
    partition: i32,
    offset: i64,
    isolation: i8,
) -> fetch_response::PartitionData {
    let resp = c
        .call(&fetch_request(partition, offset, isolation, 0), 12)
        .await;
    resp.responses[0].partitions[0].clone()
}

async fn latest(c: &mut Client, partition: i32, isolation: i8) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(T))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    let resp = c.call(&req, 9).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

fn record_count(records: &Option<Bytes>) -> usize {
    records.as_ref().map_or(0, |r| values(r).len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_the_lso_and_learns_aborted_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[NO_VERIFICATION]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, T, 2, &[]).await;

    // Producer 1000 writes to both partitions; 2000 opens a transaction on partition 0 after it.
    assert_eq!(
        produce_txn(&mut c, 0, txn_batch(&["a0", "a1"], 1000, 0, 0)).await,
        (0, 0)
    );
    assert_eq!(
        produce_txn(&mut c, 1, txn_batch(&["b0"], 1000, 0, 0)).await,
        (0, 0)
    );
    assert_eq!(
        produce_txn(&mut c, 0, txn_batch(&["c0"], 2000, 0, 0)).await,
        (0, 2)
    );

    // Open: read_committed sees nothing, read_uncommitted everything; the LSO is the oldest open start.
    let open = fetch_isolated(&mut c, 0, 0, 1).await;
    assert_eq!(open.error_code, 0);
    assert_eq!((open.high_watermark, open.last_stable_offset), (3, 0));
    assert_eq!(record_count(&open.records), 0);
    assert_eq!(open.aborted_transactions, Some(vec![]));
    let all = fetch_isolated(&mut c, 0, 0, 0).await;
    assert_eq!(record_count(&all.records), 3);
    assert_eq!(all.aborted_transactions, None);
    assert_eq!(latest(&mut c, 0, 1).await, 0);
    assert_eq!(latest(&mut c, 0, 0).await, 3);

    // Commit 1000 on both partitions: partition 0's LSO moves to 2000's start.
    assert_eq!(
        write_marker(&mut c, 1000, 0, true, 0, T, &[0, 1]).await,
        vec![0, 0]
    );
    let committed = fetch_isolated(&mut c, 0, 0, 1).await;
    assert_eq!(committed.last_stable_offset, 2);
    assert_eq!(
        values(committed.records.as_ref().unwrap()),
        vec![(0, "a0".to_string()), (1, "a1".to_string())]
    );
    assert_eq!(latest(&mut c, 1, 1).await, 2, "b0 and its marker");

    // Abort 2000: everything is stable, and a read_committed fetch learns the aborted range.
    assert_eq!(
        write_marker(&mut c, 2000, 0, false, 0, T, &[0]).await,
        vec![0]
    );
    let done = fetch_isolated(&mut c, 0, 0, 1).await;
    assert_eq!((done.high_watermark, done.last_stable_offset), (5, 5));
    let aborted = done.aborted_transactions.unwrap();
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (aborted[0].producer_id.0, aborted[0].first_offset),
        (2000, 2)
    );
    assert_eq!(latest(&mut c, 0, 1).await, 5);
    // From past the aborted range, nothing to report.
    let after = fetch_isolated(&mut c, 0, 5, 1).await;
    assert_eq!(after.aborted_transactions, Some(vec![]));

    // DescribeProducers: no transaction open any more.
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(name(T))
            .with_partition_indexes(vec![0]),
    ]);
    let resp = c.call(&req, 0).await;
    let states = &resp.topics[0].partitions[0].active_producers;
    assert!(states.iter().all(|p| p.current_txn_start_offset == -1));
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_are_fenced_by_epochs_and_refused_for_unknown_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[NO_VERIFICATION]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, T, 1, &[]).await;
    assert_eq!(
        produce_txn(&mut c, 0, txn_batch(&["x"], 7, 2, 0)).await.0,
        0
    );
    // DescribeProducers shows the open transaction's start.
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(name(T))
            .with_partition_indexes(vec![0]),
    ]);
    let resp = c.call(&req, 0).await;
    let p = &resp.topics[0].partitions[0].active_producers[0];
    assert_eq!((p.producer_id.0, p.current_txn_start_offset), (7, 0));

    const INVALID_PRODUCER_EPOCH: i16 = 47;
    const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    assert_eq!(
        write_marker(&mut c, 7, 1, true, 0, T, &[0]).await,
        vec![INVALID_PRODUCER_EPOCH]
    );
    // An abort from a coordinator at epoch 4 that bumped the producer (a new instance fenced the old one).
    assert_eq!(write_marker(&mut c, 7, 3, false, 4, T, &[0]).await, vec![0]);
    assert_eq!(
        write_marker(&mut c, 7, 3, false, 3, T, &[0]).await,
        vec![TRANSACTION_COORDINATOR_FENCED]
    );
    // The old instance's late data is refused with INVALID_PRODUCER_EPOCH.
    assert_eq!(
        produce_txn(&mut c, 0, txn_batch(&["late"], 7, 2, 1))
            .await
            .0,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        write_marker(&mut c, 7, 3, true, 4, T, &[0, 9]).await,
        vec![0, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(
        write_marker(&mut c, 7, 3, true, 4, "no-such-topic", &[0]).await,
        vec![UNKNOWN_TOPIC_OR_PARTITION]
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_polling_read_committed_fetch_wakes_when_the_marker_lands() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[NO_VERIFICATION]).await;
    let mut c = broker.client().await;
    let mut poller = broker.client().await;
    create_topic(&mut c, T, 1, &[]).await;
    assert_eq!(
        produce_txn(&mut c, 0, txn_batch(&["p", "q"], 11, 0, 0))
            .await
            .0,
        0
    );
    let started = Instant::now();
    let poll = tokio::spawn(async move {
        let resp = poller.call(&fetch_request(0, 0, 1, 10_000), 12).await;
        resp.responses[0].partitions[0].clone()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "nothing is committed yet");
    assert_eq!(write_marker(&mut c, 11, 0, true, 0, T, &[0]).await, vec![0]);
    let answered = poll.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the marker"
    );
    assert_eq!(answered.last_stable_offset, 3);
    assert_eq!(record_count(&answered.records), 2);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_pins_the_lso_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = TestBroker::start(dir.path(), &[NO_VERIFICATION]).await;
        let mut c = broker.client().await;
        create_topic(&mut c, T, 1, &[]).await;
        produce_txn(&mut c, 0, txn_batch(&["open"], 21, 0, 0)).await;
        produce(&mut c, T, 0, batch(&["plain"], 1_700_000_000_000), -1, 9).await;
        assert_eq!(latest(&mut c, 0, 1).await, 0);
        broker.stop().await.unwrap();
    }
    let broker = TestBroker::start(dir.path(), &[NO_VERIFICATION]).await;
    let mut c = broker.client().await;
    assert_eq!(
        latest(&mut c, 0, 1).await,
        0,
        "still open after the restart"
    );
    assert_eq!(latest(&mut c, 0, 0).await, 2);
    assert_eq!(
        write_marker(&mut c, 21, 0, false, 0, T, &[0]).await,
        vec![0]
    );
    assert_eq!(latest(&mut c, 0, 1).await, 3);
    let done = fetch_isolated(&mut c, 0, 0, 1).await;
    let aborted = done.aborted_transactions.unwrap();
    assert_eq!((aborted[0].producer_id.0, aborted[0].first_offset), (21, 0));
    broker.stop().await.unwrap();
}
