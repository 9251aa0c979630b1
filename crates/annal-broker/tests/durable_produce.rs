//! Durable acknowledgements (`flush.messages=1`) over the raw protocol: acks=1/all responses wait for an fsync,
//! concurrent producers share fsyncs (group commit), acks=0 still works, topics without the setting never fsync.
//!
//! One test function: the fsync counter is per process, so nothing else may produce meanwhile.

mod common;

use annal_broker::topics::durable_sync_count;
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

    broker.stop().await.unwrap();
}
