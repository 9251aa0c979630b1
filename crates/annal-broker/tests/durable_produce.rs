//! Durable acknowledgements (`flush.messages=1`) over the raw protocol: acks=1/all responses wait for an fsync,
//! concurrent producers share fsyncs (group commit), acks=0 still works, topics without the setting never fsync.
//!
//! Consumers see a durable partition only up to its flushed offset (the high watermark), also after a crash.
//!
//! One test function: the fsync counter is per process, so nothing else may produce meanwhile.

#[path = "integration/common/mod.rs"]
mod common;

use annal_broker::durable_sync_count;
use common::*;

const PRODUCERS: usize = 32;
const PRODUCES_EACH: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_produce_waits_for_shared_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "durable", 1, &[("flush.messages", "1")]).await;
    create_topic(&mut c, "lazy", 1, &[]).await;

    // A topic without flush.messages=1 acknowledges without any fsync.
    let before = durable_sync_count();
    for i in 0..5 {
        let (err, base) = produce(&mut c, "lazy", 0, batch(&["x"], 1_700_000_000_000), 1, 9).await;
        assert_eq!((err, base), (0, i));
    }
    assert_eq!(
        durable_sync_count(),
        before,
        "a non-durable topic ran group-commit fsyncs"
    );

    // acks=1 and acks=all on the durable topic: each answer comes after an fsync that covered it.
    for (i, acks) in [1i16, -1].into_iter().enumerate() {
        let before = durable_sync_count();
        let (err, base) = produce(
            &mut c,
            "durable",
            0,
            batch(&["d"], 1_700_000_000_000),
            acks,
            9,
        )
        .await;
        assert_eq!((err, base), (0, i as i64));
        assert!(
            durable_sync_count() > before,
            "acks={acks} was answered before any fsync ran"
        );
    }

    // acks=0: no response, the record is appended (and fsynced in the background).
    let before = durable_sync_count();
    {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::ProduceRequest;
        let req = ProduceRequest::default()
            .with_acks(0)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("durable"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(bytes::Bytes::from(batch(
                        &["zero"],
                        1_700_000_000_000,
                    ))))])]);
        c.send(&req, 9).await;
    }
    let (err, base) = produce(
        &mut c,
        "durable",
        0,
        batch(&["after"], 1_700_000_000_000),
        1,
        9,
    )
    .await;
    assert_eq!((err, base), (0, 3), "the acks=0 record took offset 2");
    assert!(durable_sync_count() > before);
    let p = fetch(&mut c, "durable", 0, 0, 12, 100).await;
    let got: Vec<String> = values(&p.records.unwrap())
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(got, ["d", "d", "zero", "after"]);

    // Many producers at once: every produce is acknowledged, and they share fsyncs.
    let before = durable_sync_count();
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let addr = broker.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            for i in 0..PRODUCES_EACH {
                let value = format!("p{p}-{i}");
                let acks = if i % 2 == 0 { 1 } else { -1 };
                let (err, base) = produce(
                    &mut c,
                    "durable",
                    0,
                    batch(&[&value], 1_700_000_000_000),
                    acks,
                    9,
                )
                .await;
                assert_eq!(err, 0, "{value}");
                assert!(base >= 4);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let appends = (PRODUCERS * PRODUCES_EACH) as u64;
    let syncs = durable_sync_count() - before;
    eprintln!("{appends} concurrent durable produces took {syncs} fsyncs");
    assert!(syncs >= 1);
    assert!(
        syncs * 2 <= appends,
        "{appends} concurrent durable produces took {syncs} fsyncs: they should share them"
    );
    let p = fetch(&mut c, "durable", 0, 0, 12, 100).await;
    assert_eq!(p.high_watermark, 4 + appends as i64);

    visible_only_when_flushed(&broker).await;

    // A crash leaves an unflushed tail (appended, never fsynced): reopening must flush it rather than keep the
    // high watermark below the log end forever.
    broker.stop().await.unwrap();
    let end = 4 + appends as i64;
    {
        use annal_log::{AppendOptions, Log, LogConfig};
        let mut log = Log::open(&dir.path().join("durable-0"), LogConfig::default()).unwrap();
        let mut b = batch(&["tail1", "tail2"], 1_700_000_000_000);
        log.append(&mut b, &AppendOptions::default()).unwrap();
        assert_eq!(log.log_end_offset(), end + 2);
        assert_eq!(log.flushed_offset(), end, "the tail must be unflushed");
        // Dropped without close: like kill -9, the checkpoint is not marked clean.
    }
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    let p = fetch(&mut c, "durable", 0, end, 12, 100).await;
    assert_eq!(p.error_code, 0);
    assert_eq!(
        p.high_watermark,
        end + 2,
        "the high watermark of a reopened durable partition is stuck below its log end"
    );
    let got: Vec<String> = values(&p.records.unwrap())
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(got, ["tail1", "tail2"]);
    assert_eq!(list_latest(&mut c, "durable").await, end + 2);
    broker.stop().await.unwrap();
}

/// ListOffsets LATEST (-1) of partition 0.
async fn list_latest(c: &mut Client, topic: &str) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::ListOffsetsRequest;
    let req = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let resp = c.call(&req, 7).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// The high watermark of a durable partition is its flushed offset: a long-polling consumer never gets a record
/// at or past it, and sees each record once its produce is acknowledged.
async fn visible_only_when_flushed(broker: &TestBroker) {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    const RECORDS: i64 = 200;

    // The engine's side: an appended record is not below the flushed offset until its fsync, and the broker's
    // high watermark of a durable partition is that flushed offset.
    {
        use annal_broker::high_watermark;
        use annal_log::{AppendOptions, Log, LogConfig};
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let mut b = batch(&["a"], 1_700_000_000_000);
        log.append(&mut b, &AppendOptions::default()).unwrap();
        assert_eq!(high_watermark(&log, false), 1);
        assert_eq!(high_watermark(&log, true), 0);
        log.flush().unwrap();
        assert_eq!(high_watermark(&log, true), 1);
    }

    let mut c = broker.client().await;
    create_topic(&mut c, "watched", 1, &[("flush.messages", "1")]).await;
    let acked = Arc::new(AtomicI64::new(-1));
    let flushes_before = durable_sync_count();
    let consumer = {
        let (addr, acked) = (broker.addr, acked.clone());
        tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            let (mut next, mut last_hw) = (0i64, 0i64);
            while next < RECORDS {
                // Long poll: it must wake when the durable point moves.
                let p = fetch(&mut c, "watched", 0, next, 12, 5_000).await;
                assert_eq!(p.error_code, 0);
                let acked_then = acked.load(Ordering::SeqCst);
                assert!(p.high_watermark >= last_hw, "the high watermark went back");
                // At most one produce is in flight: the durable point is at most one past the last ack.
                assert!(
                    p.high_watermark <= acked_then + 2,
                    "high watermark {} while only offsets up to {acked_then} were acknowledged",
                    p.high_watermark
                );
                last_hw = p.high_watermark;
                for (offset, value) in values(&p.records.unwrap()) {
                    assert!(
                        offset < p.high_watermark,
                        "offset {offset} returned at or past the high watermark {}",
                        p.high_watermark
                    );
                    assert_eq!(offset, next);
                    assert_eq!(value, format!("w{offset}"));
                    next += 1;
                }
            }
        })
    };
    let mut check = broker.client().await;
    for i in 0..RECORDS {
        let (err, base) = produce(
            &mut c,
            "watched",
            0,
            batch(&[&format!("w{i}")], 1_700_000_000_000),
            1,
            9,
        )
        .await;
        assert_eq!((err, base), (0, i));
        acked.store(i, Ordering::SeqCst);
        // Acknowledged means fsynced means visible, at once.
        let p = fetch(&mut check, "watched", 0, i, 12, 0).await;
        assert!(p.high_watermark > i);
        assert_eq!(values(&p.records.unwrap())[0], (i, format!("w{i}")));
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), consumer)
        .await
        .expect("the long-polling consumer did not see every acknowledged record")
        .unwrap();
    assert!(durable_sync_count() > flushes_before);
    assert_eq!(list_latest(&mut c, "watched").await, RECORDS);
}
