//! Produce, Fetch, ListOffsets, DeleteRecords and idempotent producers over the raw protocol.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_fetch_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "data", 2, &[]).await;

    let (err, base) = produce(
        &mut c,
        "data",
        0,
        batch(&["a", "b", "c"], 1_700_000_000_000),
        1,
        9,
    )
    .await;
    assert_eq!((err, base), (0, 0));
    let (err, base) = produce(
        &mut c,
        "data",
        0,
        batch(&["d", "e"], 1_700_000_001_000),
        -1,
        9,
    )
    .await;
    assert_eq!((err, base), (0, 3));

    // A fetch in the middle of a batch returns the whole batch (the client skips the earlier records).
    let p = fetch(&mut c, "data", 0, 1, 12, 100).await;
    assert_eq!(p.high_watermark, 5);
    let vals = values(p.records.as_ref().unwrap());
    assert_eq!(vals.first().unwrap(), &(0, "a".to_string()));
    assert_eq!(vals.len(), 5);
    // At the end: empty, no error. Past the end or below the start: OFFSET_OUT_OF_RANGE.
    let p = fetch(&mut c, "data", 0, 5, 12, 10).await;
    assert_eq!(
        (p.error_code, p.records.as_ref().map_or(0, |r| r.len())),
        (0, 0)
    );
    assert_eq!(fetch(&mut c, "data", 0, 6, 12, 10).await.error_code, 1);
    assert_eq!(fetch(&mut c, "data", 0, -5, 12, 10).await.error_code, 1);
    // Unknown topic / partition.
    assert_eq!(
        produce(&mut c, "nope", 0, batch(&["x"], 1), 1, 9).await.0,
        3
    );
    assert_eq!(
        produce(&mut c, "data", 7, batch(&["x"], 1), 1, 9).await.0,
        3
    );
    // Corrupt CRC: CORRUPT_MESSAGE, nothing appended.
    let mut bad = batch(&["x"], 1_700_000_000_000);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(produce(&mut c, "data", 0, bad, 1, 9).await.0, 2);
    // Invalid acks.
    assert_eq!(
        produce(&mut c, "data", 0, batch(&["x"], 1), 2, 9).await.0,
        21
    );
    assert_eq!(fetch(&mut c, "data", 0, 0, 12, 10).await.high_watermark, 5);

    // Long polling: a fetch waiting at the end returns as soon as a record arrives.
    let addr = broker.addr;
    let waiter = tokio::spawn(async move {
        let mut c2 = Client::connect(addr).await;
        let started = Instant::now();
        let p = fetch(&mut c2, "data", 1, 0, 12, 10_000).await;
        (started.elapsed(), values(p.records.as_ref().unwrap()))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        produce(&mut c, "data", 1, batch(&["late"], 1_700_000_000_000), 1, 9)
            .await
            .0,
        0
    );
    let (waited, vals) = waiter.await.unwrap();
    // The record, well before the fetch's 10 s max wait (had it waited in vain, it would have come back empty).
    assert_eq!(vals, vec![(0, "late".to_string())]);
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    // And with nothing arriving it returns empty after max_wait_ms.
    let started = Instant::now();
    let p = fetch(&mut c, "data", 1, 1, 12, 300).await;
    assert!(started.elapsed() >= Duration::from_millis(280));
    assert_eq!(p.records.as_ref().map_or(0, |r| r.len()), 0);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_size_and_timestamp_type() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "small", 1, &[("max.message.bytes", "200")]).await;
    let big = "x".repeat(500);
    assert_eq!(
        produce(&mut c, "small", 0, batch(&[&big], 1_700_000_000_000), 1, 9)
            .await
            .0,
        10
    );
    assert_eq!(
        produce(&mut c, "small", 0, batch(&["ok"], 1_700_000_000_000), 1, 9)
            .await
            .0,
        0
    );

    create_topic(
        &mut c,
        "lat",
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await;
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name("lat"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(&["t"], 1_000).into())),
            ])]);
    let resp = c.call(&req, 9).await;
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    let now = annal_broker::now_ms();
    assert!(
        (p.log_append_time_ms - now).abs() < 10_000,
        "log append time {}",
        p.log_append_time_ms
    );
    let fetched = fetch(&mut c, "lat", 0, 0, 12, 10).await;
    // The batch says LogAppendTime (attributes bit 3) and carries the broker's time as its max timestamp, which
    // clients report as every record's timestamp.
    let raw = fetched.records.clone().unwrap();
    let attributes = i16::from_be_bytes([raw[21], raw[22]]);
    assert_ne!(attributes & 0x08, 0, "LogAppendTime attribute");
    let max_ts = i64::from_be_bytes(raw[35..43].try_into().unwrap());
    assert_eq!(max_ts, p.log_append_time_ms);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "lo", 1, &[]).await;
    for (i, ts) in [1000i64, 3000, 2000, 5000].iter().enumerate() {
        let (err, base) = produce(&mut c, "lo", 0, batch(&[&format!("m{i}")], *ts), 1, 9).await;
        assert_eq!((err, base), (0, i as i64));
    }
    let list = |ts: i64| {
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("lo"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(ts),
                ])])
    };
    let get = |r: ListOffsetsResponse| {
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(get(c.call(&list(-2), 9).await), (0, 0, -1));
    assert_eq!(get(c.call(&list(-1), 9).await), (0, 4, -1));
    assert_eq!(get(c.call(&list(-3), 9).await), (0, 3, 5000));
    // First offset whose timestamp >= the target.
    assert_eq!(get(c.call(&list(2500), 9).await), (0, 1, 3000));
    assert_eq!(get(c.call(&list(500), 9).await), (0, 0, 1000));
    assert_eq!(get(c.call(&list(9000), 9).await), (0, -1, -1));

    let del = |offset: i64| {
        DeleteRecordsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                .with_name(name("lo"))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ])])
    };
    let resp = c.call(&del(2), 2).await;
    assert_eq!(
        (
            resp.topics[0].partitions[0].error_code,
            resp.topics[0].partitions[0].low_watermark
        ),
        (0, 2)
    );
    assert_eq!(get(c.call(&list(-2), 9).await), (0, 2, -1));
    assert_eq!(
        fetch(&mut c, "lo", 0, 1, 12, 10).await.error_code,
        1,
        "below the log start"
    );
    assert_eq!(
        c.call(&del(99), 2).await.topics[0].partitions[0].error_code,
        1
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_dedup_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "idem", 1, &[]).await;
    let init = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = c.call(&init, 4).await;
    assert_eq!(r.error_code, 0);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    let r2 = c.call(&init, 4).await;
    assert_ne!(r2.producer_id.0, pid, "producer ids are unique");

    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["a", "b"], pid, epoch, 0),
            -1,
            9
        )
        .await,
        (0, 0)
    );
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["c"], pid, epoch, 2),
            -1,
            9
        )
        .await,
        (0, 2)
    );
    // A retry of the first batch: not appended again, original offset returned.
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["a", "b"], pid, epoch, 0),
            -1,
            9
        )
        .await,
        (0, 0)
    );
    // A gap: OUT_OF_ORDER_SEQUENCE_NUMBER.
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["z"], pid, epoch, 7),
            -1,
            9
        )
        .await
        .0,
        45
    );
    // A newer epoch starting at 0 fences the old one; the old epoch is then refused.
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["n"], pid, epoch + 1, 0),
            -1,
            9
        )
        .await,
        (0, 3)
    );
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            idempotent_batch(&["o"], pid, epoch, 3),
            -1,
            9
        )
        .await
        .0,
        47
    );
    let p = fetch(&mut c, "idem", 0, 0, 12, 10).await;
    let vals: Vec<String> = values(p.records.as_ref().unwrap())
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(vals, ["a", "b", "c", "n"]);

    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(name("idem"))
            .with_partition_indexes(vec![0]),
    ]);
    let resp = c.call(&req, 0).await;
    let producers = &resp.topics[0].partitions[0].active_producers;
    assert_eq!(producers.len(), 1);
    assert_eq!(
        (
            producers[0].producer_id.0,
            producers[0].producer_epoch,
            producers[0].last_sequence
        ),
        (pid, epoch as i32 + 1, 0)
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sessions_limits_and_topic_ids() {
    use fetch_request::{FetchPartition, FetchTopic};
    let dir = tempfile::tempdir().unwrap();
    // With no session slots, session requests are refused the way Kafka refuses them when its cache is full.
    let broker =
        TestBroker::start(dir.path(), &["max.incremental.fetch.session.cache.slots=0"]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "fs", 2, &[]).await;
    let id = topic_id(&mut c, "fs").await;
    for i in 0..10 {
        let v = format!("{i:0>300}");
        assert_eq!(
            produce(&mut c, "fs", i % 2, batch(&[&v], 1_700_000_000_000), 1, 9)
                .await
                .0,
            0
        );
    }
    let req =
        |session_id: i32, epoch: i32, max_bytes: i32, partition_max: i32, topic_id: uuid::Uuid| {
            FetchRequest::default()
                .with_max_wait_ms(10)
                .with_min_bytes(1)
                .with_max_bytes(max_bytes)
                .with_session_id(session_id)
                .with_session_epoch(epoch)
                .with_topics(vec![FetchTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(
                        (0..2)
                            .map(|p| {
                                FetchPartition::default()
                                    .with_partition(p)
                                    .with_fetch_offset(0)
                                    .with_partition_max_bytes(partition_max)
                            })
                            .collect(),
                    )])
        };
    // A request for a new session (id 0, epoch 0) is served sessionless: session id 0 in the answer.
    let r = c.call(&req(0, 0, 1 << 20, 1 << 20, id), 13).await;
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(
        values(r.responses[0].partitions[0].records.as_ref().unwrap()).len(),
        5
    );
    // A session we never handed out.
    assert_eq!(
        c.call(&req(1234, 1, 1 << 20, 1 << 20, id), 13)
            .await
            .error_code,
        70
    );
    assert_eq!(
        c.call(&req(0, 5, 1 << 20, 1 << 20, id), 13)
            .await
            .error_code,
        71
    );
    // Unknown topic id.
    let r = c
        .call(&req(0, -1, 1 << 20, 1 << 20, uuid::Uuid::new_v4()), 13)
        .await;
    assert_eq!(r.responses[0].partitions[0].error_code, 100);
    // partition_max_bytes: one batch per partition at least for the first, limits respected after it.
    let r = c.call(&req(0, -1, 1 << 20, 1, id), 13).await;
    let first = values(r.responses[0].partitions[0].records.as_ref().unwrap()).len();
    let second = r.responses[0].partitions[1]
        .records
        .as_ref()
        .map_or(0, |b| b.len());
    assert_eq!(
        (first, second),
        (1, 0),
        "first partition gets one batch past the limit, the next none"
    );
    // max_bytes across partitions.
    let r = c.call(&req(0, -1, 700, 1 << 20, id), 13).await;
    let total: usize = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .sum();
    assert!(total <= 1400 && total > 0, "total {total}");
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_runs_per_topic_config() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["log.retention.check.interval.ms=200"]).await;
    let mut c = broker.client().await;
    create_topic(
        &mut c,
        "ret",
        1,
        &[("segment.bytes", "1024"), ("retention.bytes", "2048")],
    )
    .await;
    create_topic(&mut c, "keep", 1, &[("segment.bytes", "1024")]).await;
    let v = "y".repeat(400);
    for _ in 0..30 {
        assert_eq!(
            produce(&mut c, "ret", 0, batch(&[&v], annal_broker::now_ms()), 1, 9)
                .await
                .0,
            0
        );
        assert_eq!(
            produce(
                &mut c,
                "keep",
                0,
                batch(&[&v], annal_broker::now_ms()),
                1,
                9
            )
            .await
            .0,
            0
        );
    }
    let started = Instant::now();
    loop {
        let p = fetch(&mut c, "ret", 0, 29, 12, 10).await;
        if p.log_start_offset > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "retention never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        fetch(&mut c, "keep", 0, 0, 12, 10).await.log_start_offset,
        0
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_long_polls_and_closes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, handle) = TestBroker::start_with_handle(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "sd", 1, &[]).await;
    assert_eq!(
        produce(&mut c, "sd", 0, batch(&["x"], 1_700_000_000_000), 1, 9)
            .await
            .0,
        0
    );
    let addr = broker.addr;
    let poll = tokio::spawn(async move {
        let mut c2 = Client::connect(addr).await;
        fetch(&mut c2, "sd", 0, 1, 12, 30_000).await
    });
    // Stop once the long poll waits (a stop before it connects would refuse its connection instead).
    let part = handle.replica_manager().partition("sd", 0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while part.waiting_fetches() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(part.waiting_fetches(), 1, "the long poll waits");
    drop((part, handle));
    let started = Instant::now();
    broker.stop().await.unwrap();
    // Well before the poll's 30 s max wait: shutdown answers it rather than waiting it out.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "shutdown took {:?}",
        started.elapsed()
    );
    let p = poll.await.unwrap();
    // Answered at once: a controlled shutdown first moves the partition's leadership away (here, with one
    // broker, to nobody), so the long poll ends NOT_LEADER_OR_FOLLOWER (6) as a Kafka broker's would, or with
    // the record if it was answered before the leadership moved.
    assert!(
        matches!((p.error_code, p.high_watermark), (0, 1) | (6, _)),
        "long poll at shutdown: error {} high watermark {}",
        p.error_code,
        p.high_watermark
    );
    // Clean shutdown, then a restart finds the record.
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    assert_eq!(
        values(
            fetch(&mut c, "sd", 0, 0, 12, 10)
                .await
                .records
                .as_ref()
                .unwrap()
        )
        .len(),
        1
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_fetch_max_bytes_caps_responses() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["fetch.max.bytes=1000"]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "cap", 1, &[]).await;
    let v = "z".repeat(400);
    for _ in 0..10 {
        assert_eq!(
            produce(&mut c, "cap", 0, batch(&[&v], 1_700_000_000_000), 1, 9)
                .await
                .0,
            0
        );
    }
    // The client asks for 50 MiB; the broker's fetch.max.bytes wins (whole batches, at least one).
    let p = fetch(&mut c, "cap", 0, 0, 12, 10).await;
    let n = values(p.records.as_ref().unwrap()).len();
    assert!((1..=2).contains(&n), "{n} batches");
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetch_sessions() {
    use fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "inc", 3, &[]).await;
    let id = topic_id(&mut c, "inc").await;
    for p in 0..3 {
        assert_eq!(
            produce(
                &mut c,
                "inc",
                p,
                batch(&[&format!("p{p}-0")], 1_700_000_000_000),
                1,
                12
            )
            .await
            .0,
            0
        );
    }
    let part = |p: i32, offset: i64| {
        FetchPartition::default()
            .with_partition(p)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20)
    };
    let req = |session_id: i32, epoch: i32, parts: Vec<FetchPartition>, forgotten: Vec<i32>| {
        let mut r = FetchRequest::default()
            .with_max_wait_ms(50)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_id(session_id)
            .with_session_epoch(epoch);
        if !parts.is_empty() {
            r.topics = vec![FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(parts)];
        }
        if !forgotten.is_empty() {
            r.forgotten_topics_data = vec![ForgottenTopic::default()
                .with_topic_id(id)
                .with_partitions(forgotten)];
        }
        r
    };
    let seen = |r: &FetchResponse| -> Vec<(i32, usize)> {
        r.responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, values(p.records.as_ref().unwrap()).len()))
            })
            .collect()
    };
    // Full fetch that opens a session: every partition answered.
    let r = c
        .call(
            &req(0, 0, vec![part(0, 0), part(1, 0), part(2, 0)], vec![]),
            13,
        )
        .await;
    assert_eq!(r.error_code, 0);
    let session = r.session_id;
    assert_ne!(session, 0, "a session is granted");
    assert_eq!(seen(&r), vec![(0, 1), (1, 1), (2, 1)]);
    // Incremental: the client moves its offsets; nothing new anywhere, so nothing is answered.
    let r = c
        .call(
            &req(session, 1, vec![part(0, 1), part(1, 1), part(2, 1)], vec![]),
            13,
        )
        .await;
    assert_eq!((r.error_code, r.session_id), (0, session));
    assert_eq!(seen(&r), vec![]);
    // New data on partition 1 only: only partition 1 comes back, though the request names no partition.
    assert_eq!(
        produce(&mut c, "inc", 1, batch(&["p1-1"], 1_700_000_000_000), 1, 12)
            .await
            .0,
        0
    );
    let r = c.call(&req(session, 2, vec![], vec![]), 13).await;
    assert_eq!(seen(&r), vec![(1, 1)]);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 2);
    // Forget partition 0; new data there is then not sent.
    assert_eq!(
        produce(&mut c, "inc", 0, batch(&["p0-1"], 1_700_000_000_000), 1, 12)
            .await
            .0,
        0
    );
    let r = c
        .call(&req(session, 3, vec![part(1, 2)], vec![0]), 13)
        .await;
    assert_eq!(seen(&r), vec![]);
    // Wrong epoch, unknown session.
    assert_eq!(
        c.call(&req(session, 9, vec![], vec![]), 13)
            .await
            .error_code,
        71
    );
    assert_eq!(
        c.call(&req(session + 1000, 1, vec![], vec![]), 13)
            .await
            .error_code,
        70
    );
    // Closing (FINAL_EPOCH) then a full sessionless fetch.
    let r = c
        .call(&req(session, -1, vec![part(0, 0)], vec![]), 13)
        .await;
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(seen(&r), vec![(0, 2)]);
    assert_eq!(
        c.call(&req(session, 4, vec![], vec![]), 13)
            .await
            .error_code,
        70
    );
    broker.stop().await.unwrap();
}
