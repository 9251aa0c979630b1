//! Zero-copy Fetch: responses carry record bytes sent straight from the segment files (`sendfile`). A large
//! multi-partition response (several MiB) must hold exactly the bytes of the partitions' log files, with correct
//! length prefixes and frame size, for non-flexible and flexible versions, also when pipelined.

#[path = "integration/common/mod.rs"]
mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;

const PARTITIONS: i32 = 5;
/// Partitions 0..DATA_PARTITIONS get data; the last one stays empty.
const DATA_PARTITIONS: i32 = 4;
const BATCHES: usize = 24;
const RECORD: usize = 100 * 1024;

fn request(topic: &str, id: uuid::Uuid, version: i16) -> FetchRequest {
    let partitions = (0..PARTITIONS)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(8 << 20)
        })
        .collect();
    let mut ft = FetchTopic::default().with_partitions(partitions);
    if version >= 13 {
        ft.topic_id = id;
    } else {
        ft.topic = name(topic);
    }
    FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(64 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![ft])
}

fn check(resp: &kafka_protocol::messages::FetchResponse, files: &[Vec<u8>], version: i16) {
    assert_eq!(resp.error_code, 0);
    let parts = &resp.responses[0].partitions;
    assert_eq!(parts.len(), PARTITIONS as usize);
    let mut total = 0;
    for (p, pd) in parts.iter().enumerate() {
        assert_eq!(pd.partition_index, p as i32);
        assert_eq!(pd.error_code, 0, "v{version} partition {p}");
        let records = pd.records.clone().unwrap_or_default();
        assert!(
            records.as_ref() == files[p].as_slice(),
            "v{version} partition {p}: records ({} bytes) differ from the log file ({} bytes)",
            records.len(),
            files[p].len()
        );
        total += records.len();
        let expected_hw = if (p as i32) < DATA_PARTITIONS {
            BATCHES as i64
        } else {
            0
        };
        assert_eq!(pd.high_watermark, expected_hw);
        if !records.is_empty() {
            let vals = values(&records);
            assert_eq!(vals.len(), BATCHES);
            assert_eq!(vals[3].0, 3);
            assert!(vals[3].1.starts_with(&format!("p{p}-b3-")));
        }
    }
    assert!(total > 8 << 20, "only {total} bytes fetched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_multi_partition_fetch_is_the_log_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "big", PARTITIONS, &[]).await;
    for p in 0..DATA_PARTITIONS {
        for b in 0..BATCHES {
            // Incompressible-looking values, different per partition and batch.
            let mut value = format!("p{p}-b{b}-");
            let mut x = (p as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(b as u64);
            while value.len() < RECORD {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                value.push((b'a' + (x % 26) as u8) as char);
            }
            let (err, base) =
                produce(&mut c, "big", p, batch(&[&value], 1_700_000_000_000), 1, 9).await;
            assert_eq!((err, base), (0, b as i64));
        }
    }
    let files: Vec<Vec<u8>> = (0..PARTITIONS)
        .map(|p| {
            std::fs::read(dir.path().join(format!("big-{p}/00000000000000000000.log"))).unwrap()
        })
        .collect();
    assert!(files[0].len() > 2 << 20);
    assert!(files[PARTITIONS as usize - 1].is_empty());
    let id = topic_id(&mut c, "big").await;

    let (zero_copy_before, copied_before) = annal_broker::zero_copy_counts();
    // Non-flexible (i32 length prefixes) and flexible (varint) versions, by name and by topic id.
    for version in [4i16, 11, 12, 13, 17] {
        let resp = c.call(&request("big", id, version), version).await;
        check(&resp, &files, version);
    }

    // Pipelined: responses come back whole and in order.
    let first = c.send(&request("big", id, 11), 11).await;
    let second = c.send(&request("big", id, 16), 16).await;
    let (got, resp) = c.recv::<FetchRequest>(11).await;
    assert_eq!(got, first);
    check(&resp, &files, 11);
    let (got, resp) = c.recv::<FetchRequest>(16).await;
    assert_eq!(got, second);
    check(&resp, &files, 16);

    // Mid-log fetch on one partition: the batch containing the offset first, bytes as in the file.
    let p = fetch(&mut c, "big", 1, 5, 12, 0).await;
    let records: Bytes = p.records.unwrap();
    assert_eq!(values(&records)[0].0, 5);
    // Every batch has the same size (one record of the same length).
    let batch_len = files[1].len() / BATCHES;
    assert_eq!(files[1].len() % BATCHES, 0);
    let from = 5 * batch_len;
    assert!(records.len() >= batch_len);
    assert!(
        records.as_ref() == &files[1][from..from + records.len()],
        "mid-log fetch: records differ from the log file"
    );

    let (zero_copy, copied) = annal_broker::zero_copy_counts();
    assert_eq!(copied, copied_before, "a fetch fell back to copying");
    assert!(
        zero_copy >= zero_copy_before + 8,
        "fetches were not sent zero-copy"
    );

    broker.stop().await.unwrap();
}
