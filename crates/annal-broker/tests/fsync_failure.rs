//! A failed fsync of a partition's data stops the broker, as Kafka halts when its only log directory fails:
//! the producer gets KAFKA_STORAGE_ERROR, the broker stops by itself without flushing or writing the
//! clean-shutdown file, and a restart recovers the log and serves it again. The failures come from
//! `annal_log::disk_faults` (a real fsync error cannot be provoked on demand); the broker is the real one.

#[path = "integration/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;

const KAFKA_STORAGE_ERROR: i16 = 56;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_broker_and_a_restart_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "durable", 1, &[("flush.messages", "1")]).await;
    let ts = 1_700_000_000_000;
    assert_eq!(
        produce(&mut c, "durable", 0, batch(&["kept"], ts), -1, 9).await,
        (0, 0)
    );

    // The partitions' disk fails its fsyncs; the metadata log's is spared, so the stop must come from the data.
    let metadata = dir.path().join(annal_metadata::raft::METADATA_LOG_DIR);
    annal_log::disk_faults::fail_fsyncs(dir.path(), vec![metadata]);
    let (error, _) = produce(&mut c, "durable", 0, batch(&["lost?"], ts), -1, 9).await;
    assert_eq!(
        error, KAFKA_STORAGE_ERROR,
        "a produce whose fsync failed is not acknowledged"
    );

    // The broker stops by itself: its listener closes.
    let addr = broker.addr;
    let stopped = tokio::time::timeout(Duration::from_secs(20), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    annal_log::disk_faults::free(dir.path());
    assert!(
        stopped.is_ok(),
        "the broker kept serving after a failed fsync"
    );
    let result = broker.stop().await;
    let error = format!(
        "{:#}",
        result.expect_err("the broker stopped on a failed fsync")
    );
    assert!(error.starts_with(annal_broker::STORAGE_FAILED), "{error}");
    assert!(
        error.contains("durable-0"),
        "the error names the file: {error}"
    );
    assert!(
        !dir.path().join(".kafka_cleanshutdown").exists(),
        "a stop after a failed fsync must count as unclean"
    );

    // Started again, it recovers the log from the disk and serves it.
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    let mut served = None;
    for _ in 0..100 {
        let data = fetch(&mut c, "durable", 0, 0, 12, 100).await;
        if data.error_code == 0 {
            served = Some(data);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let data = served.expect("the partition is served again after the restart");
    let records = values(data.records.as_ref().expect("records"));
    assert_eq!(records.first(), Some(&(0, "kept".to_string())));
    let (error, offset) = produce(&mut c, "durable", 0, batch(&["after"], ts), -1, 9).await;
    assert_eq!(error, 0);
    assert!(offset >= 1);
    broker.stop().await.unwrap();
}
