//! Hostile and broken input: the broker answers or closes that one connection, allocates nothing from declared
//! sizes or counts, and keeps serving everyone else.

#[path = "integration/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use kafka_protocol::messages::*;
use tokio::io::AsyncWriteExt;

/// The tests that measure this process's memory take this exclusively; every other test shares it. Tests run in
/// parallel threads of one process, and another test's broker starting meanwhile would count in the measurement.
static MEMORY_MEASURED: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test that measures the process's memory: no other test of this file runs meanwhile.
fn measuring_memory() -> std::sync::RwLockWriteGuard<'static, ()> {
    MEMORY_MEASURED.write().unwrap_or_else(|e| e.into_inner())
}

/// Held by every other test.
fn not_measuring_memory() -> std::sync::RwLockReadGuard<'static, ()> {
    MEMORY_MEASURED.read().unwrap_or_else(|e| e.into_inner())
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A fresh connection still gets ApiVersions answered.
async fn still_serving(broker: &TestBroker) {
    let mut c = broker.client().await;
    let resp = c.call(&ApiVersionsRequest::default(), 3).await;
    assert_eq!(resp.error_code, 0);
}

async fn send_raw_expect_close(broker: &TestBroker, bytes: &[u8], what: &str) {
    let mut c = broker.client().await;
    c.stream.write_all(bytes).await.unwrap();
    assert!(
        c.is_closed(Duration::from_secs(5)).await,
        "{what}: connection should be closed"
    );
    still_serving(broker).await;
}

/// Frame with a raw request header (v1: key, version, correlation, client id) and `body`.
fn raw_request(key: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    f.extend_from_slice(body);
    let mut out = (f.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&f);
    out
}

/// Flexible request header (v2): key, version, correlation, client id, empty tagged fields.
fn raw_flexible_request(key: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8]; // header tagged fields
    b.extend_from_slice(body);
    raw_request(key, version, &b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_connection() {
    let _memory = measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let before = rss_kib();

    // Garbage: a "size" that is not a plausible frame.
    send_raw_expect_close(
        &broker,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP request",
    )
    .await;
    // Random bodies behind a valid length prefix, for every API key we serve and a few we do not: answered or
    // closed, never a crash.
    for seed in 0..40u32 {
        let key = (seed % 70) as i16;
        let body: Vec<u8> = (0..512u32)
            .map(|i| ((i ^ seed).wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut c = broker.client().await;
        c.stream
            .write_all(&raw_request(key, (seed % 13) as i16, &body))
            .await
            .unwrap();
        let _ = c.is_closed(Duration::from_millis(200)).await;
    }
    still_serving(&broker).await;
    // 2 GiB and negative declared lengths: refused without allocating.
    send_raw_expect_close(&broker, &0x7fff_ffffu32.to_be_bytes(), "2 GiB length").await;
    send_raw_expect_close(&broker, &0x8000_0000u32.to_be_bytes(), "negative length").await;
    // Just over socket.request.max.bytes.
    send_raw_expect_close(
        &broker,
        &(104_857_601u32).to_be_bytes(),
        "over socket.request.max.bytes",
    )
    .await;
    // Shorter than a request header.
    send_raw_expect_close(&broker, &[0, 0, 0, 3, 0, 18, 0], "tiny frame").await;
    // Unknown API key and unsupported versions.
    send_raw_expect_close(&broker, &raw_request(999, 0, &[]), "unknown API key").await;
    send_raw_expect_close(&broker, &raw_request(-1, 0, &[]), "negative API key").await;
    send_raw_expect_close(&broker, &raw_request(3, 99, &[]), "Metadata v99").await;
    send_raw_expect_close(&broker, &raw_request(0, 2, &[0, 1]), "truncated Produce v2").await;
    // A known key with an undecodable body.
    send_raw_expect_close(
        &broker,
        &raw_request(3, 1, &[0xff, 0xff]),
        "truncated Metadata body",
    )
    .await;

    // Truncated frame: declared 100 bytes, 50 sent, then the client half-closes.
    {
        let mut c = broker.client().await;
        let mut f = 100u32.to_be_bytes().to_vec();
        f.extend_from_slice(&[0u8; 50]);
        c.stream.write_all(&f).await.unwrap();
        c.stream.shutdown().await.unwrap();
        assert!(c.is_closed(Duration::from_secs(5)).await);
        still_serving(&broker).await;
    }

    // Many declared-but-unsent 100 MiB frames at once: memory follows the bytes received, not the declarations.
    let mut holders = Vec::new();
    for _ in 0..20 {
        let mut c = broker.client().await;
        c.stream
            .write_all(&104_857_600u32.to_be_bytes())
            .await
            .unwrap();
        c.stream.write_all(&[0u8; 100]).await.unwrap();
        holders.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    still_serving(&broker).await;
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 200, "RSS grew by {grown_mib} MiB");
    drop(holders);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_counts_inside_valid_frames_are_refused() {
    let _memory = measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let before = rss_kib();

    // Metadata v1: topics array count i32::MAX, nothing after it.
    send_raw_expect_close(
        &broker,
        &raw_request(3, 1, &0x7fff_ffffi32.to_be_bytes()),
        "Metadata count",
    )
    .await;
    // Metadata v12 (flexible): compact array count as a huge unsigned varint.
    send_raw_expect_close(
        &broker,
        &raw_flexible_request(3, 12, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        "compact count",
    )
    .await;
    // Produce v3: transactional id null, acks 1, timeout, topic count huge.
    let mut body = (-1i16).to_be_bytes().to_vec();
    body.extend_from_slice(&1i16.to_be_bytes());
    body.extend_from_slice(&1000i32.to_be_bytes());
    body.extend_from_slice(&0x7fff_fff0i32.to_be_bytes());
    send_raw_expect_close(&broker, &raw_request(0, 3, &body), "Produce topic count").await;
    // Produce v3 with one topic "t" whose partition count is huge.
    let mut body = (-1i16).to_be_bytes().to_vec();
    body.extend_from_slice(&1i16.to_be_bytes());
    body.extend_from_slice(&1000i32.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&1i16.to_be_bytes());
    body.push(b't');
    body.extend_from_slice(&0x7fff_fff0i32.to_be_bytes());
    send_raw_expect_close(
        &broker,
        &raw_request(0, 3, &body),
        "Produce partition count",
    )
    .await;
    // CreateTopics v4: topic count huge.
    send_raw_expect_close(
        &broker,
        &raw_request(19, 4, &0x4000_0000i32.to_be_bytes()),
        "CreateTopics count",
    )
    .await;
    // Fetch v4: replica, max wait, min bytes, max bytes, isolation, then topic count huge.
    let mut body = (-1i32).to_be_bytes().to_vec();
    body.extend_from_slice(&500i32.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&1_000_000i32.to_be_bytes());
    body.push(0);
    body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    send_raw_expect_close(&broker, &raw_request(1, 4, &body), "Fetch count").await;

    // Record batches are never decoded by kafka-protocol: a batch claiming 2^31 records is just corrupt.
    let mut c = broker.client().await;
    create_topic(&mut c, "counts", 1, &[]).await;
    let mut b = batch(&["x"], 1_700_000_000_000);
    b[57..61].copy_from_slice(&i32::MAX.to_be_bytes()); // records count
    let (err, _) = produce(&mut c, "counts", 0, b, 1, 9).await;
    assert!(err == 2 || err == 87, "huge record count: error {err}");

    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 100, "RSS grew by {grown_mib} MiB");
    still_serving(&broker).await;
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_always_answers() {
    let _memory = not_measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    // KIP-511: ApiVersions v99 gets a v0 response with UNSUPPORTED_VERSION and our ranges.
    let mut c = broker.client().await;
    c.stream
        .write_all(&raw_flexible_request(18, 99, &[0, 0, 0]))
        .await
        .unwrap();
    let mut frame = c.read_frame().await.expect("answered");
    let header = ResponseHeader::decode(&mut frame, 0).unwrap();
    assert_eq!(header.correlation_id, 7);
    let resp = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(resp.error_code, 35);
    let av = resp.api_keys.iter().find(|k| k.api_key == 18).unwrap();
    assert_eq!((av.min_version, av.max_version), (0, 4));
    // The connection stays usable.
    let resp = c.call(&ApiVersionsRequest::default(), 3).await;
    assert_eq!(resp.error_code, 0);
    broker.stop().await.unwrap();
}

use kafka_protocol::protocol::Decodable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let _memory = not_measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "pipe", 1, &[]).await;
    // One write carrying 30 requests of different kinds, including acks=0 produces (no response).
    let mut all = Vec::new();
    let mut expected = Vec::new();
    for i in 0..30 {
        let corr = 100 + i;
        if i % 3 == 0 {
            let req = ProduceRequest::default()
                .with_acks(0)
                .with_timeout_ms(1000)
                .with_topic_data(vec![produce_request::TopicProduceData::default()
                    .with_name(name("pipe"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(
                                batch(&[&format!("r{i}")], 1_700_000_000_000).into(),
                            )),
                    ])]);
            all.extend_from_slice(&Client::frame(&req, 9, corr));
        } else {
            all.extend_from_slice(&Client::frame(&ApiVersionsRequest::default(), 3, corr));
            expected.push(corr);
        }
    }
    c.stream.write_all(&all).await.unwrap();
    for corr in expected {
        let (got, _) = c.recv::<ApiVersionsRequest>(3).await;
        assert_eq!(got, corr);
    }
    // The acks=0 records were appended in order.
    let p = fetch(&mut c, "pipe", 0, 0, 12, 100).await;
    let vals: Vec<String> = values(p.records.as_ref().unwrap())
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        vals,
        (0..30)
            .filter(|i| i % 3 == 0)
            .map(|i| format!("r{i}"))
            .collect::<Vec<_>>()
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let _memory = not_measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["connections.max.idle.ms=300"]).await;
    let mut idle = broker.client().await;
    let mut partial = broker.client().await;
    partial
        .stream
        .write_all(&100u32.to_be_bytes())
        .await
        .unwrap(); // a frame that never completes
    assert!(
        idle.is_closed(Duration::from_secs(3)).await,
        "idle connection"
    );
    assert!(
        partial.is_closed(Duration::from_secs(3)).await,
        "stalled frame"
    );
    still_serving(&broker).await;
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_clients() {
    let _memory = not_measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "many", 4, &[]).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let addr = broker.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            for j in 0..10 {
                let (err, _) = produce(
                    &mut c,
                    "many",
                    i % 4,
                    batch(&[&format!("{i}-{j}")], 1_700_000_000_000),
                    1,
                    9,
                )
                .await;
                assert_eq!(err, 0);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut total = 0;
    for p in 0..4 {
        total += values(
            fetch(&mut c, "many", p, 0, 12, 100)
                .await
                .records
                .as_ref()
                .unwrap(),
        )
        .len();
    }
    assert_eq!(total, 640);
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_acks_zero_produce_closes_the_connection() {
    let _memory = not_measuring_memory();
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    let req = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(1000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name("missing"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(&["x"], 1_700_000_000_000).into())),
            ])]);
    c.send(&req, 9).await;
    assert!(
        c.is_closed(Duration::from_secs(5)).await,
        "no response can carry the error, so the broker closes"
    );
    still_serving(&broker).await;
    broker.stop().await.unwrap();
}
