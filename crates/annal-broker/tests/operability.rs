//! The HTTP listener of a real broker: produce and commit through the Kafka protocol (annal-client), then read
//! `/metrics`, `/readyz` and `/v1/groups` over real HTTP and check the numbers moved as they should.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use annal_broker::BrokerConfig;
use annal_client::Client;
use annal_client::{encode_batch, OutgoingRecord};
use kafka_protocol::records::Compression;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path`; (status, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: annal\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("HTTP answer in time")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    // Chunked bodies (axum streams JSON with a length, metrics too; chunked only if the length is unknown).
    (status, body)
}

/// The value of the first sample line of `name` whose labels contain every `labels` pair.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.starts_with(name)
                && l[name.len()..].starts_with(['{', ' '])
                && labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_group_health_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::load(
        None,
        &[
            "http.listen=127.0.0.1:0".into(),
            "group.initial.rebalance.delay.ms=0".into(),
            "offsets.topic.num.partitions=1".into(),
            "offsets.topic.replication.factor=1".into(),
        ],
        Some(dir.path().to_path_buf()),
        Some("127.0.0.1:0".into()),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kafka = listener.local_addr().unwrap();
    let started = annal_broker::start(config, listener).await.unwrap();
    let http = started.http_addr().expect("the HTTP listener is bound");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(started.serve(async move {
        let _ = stop_rx.await;
    }));

    let (status, body) = get(http, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let mut ready = false;
    for _ in 0..100 {
        let (status, _) = get(http, "/readyz").await;
        if status == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "/readyz never answered 200");

    let mut client = Client::connect(&kafka.to_string()).await.unwrap();
    client
        .create_topic("ops", Some(1), None, &[])
        .await
        .unwrap();
    let topic = client.created_topic("ops").await.unwrap();
    let now = annal_broker::now_ms();
    let records: Vec<OutgoingRecord> = (0..10)
        .map(|i| OutgoingRecord {
            key: None,
            value: Some(format!("v{i}").into_bytes().into()),
            headers: Vec::new(),
            timestamp: now - 60_000 + i,
        })
        .collect();
    let batch = encode_batch(&records, Compression::None).unwrap();
    client
        .produce(&topic, vec![(0, batch)], -1, 5000)
        .await
        .unwrap();

    // flush.messages=1: acknowledged only once fsynced, so the fsync histogram has seen at least this one.
    client
        .create_topic(
            "ops-durable",
            Some(1),
            None,
            &[("flush.messages".to_string(), "1".to_string())],
        )
        .await
        .unwrap();
    let durable = client.created_topic("ops-durable").await.unwrap();
    let batch = encode_batch(&records[..1], Compression::None).unwrap();
    client
        .produce(&durable, vec![(0, batch)], -1, 5000)
        .await
        .unwrap();

    // The same offset committed three times with lag: STALL (Burrow's rule 4), group ERR.
    for _ in 0..3 {
        let codes = client
            .commit_offsets("stalled", "ops", &BTreeMap::from([(0, 4)]))
            .await
            .unwrap();
        assert_eq!(codes.get(&0), Some(&0));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let (status, body) = get(http, "/v1/groups/stalled").await;
    assert_eq!(status, 200, "{body}");
    let g: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(g["status"], "ERR", "{g}");
    let p = &g["partitions"][0];
    assert_eq!(p["status"], "STALL", "{g}");
    assert_eq!(p["lag"], 6, "{g}");
    assert_eq!(p["window"].as_array().unwrap().len(), 3, "{g}");
    // The first unconsumed record (offset 4) was stamped a minute ago.
    let time_lag = p["time_lag_ms"].as_i64().unwrap();
    assert!((59_000..120_000).contains(&time_lag), "{g}");
    let (status, _) = get(http, "/v1/groups/nobody").await;
    assert_eq!(status, 404);

    let (status, text) = get(http, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(
            &text,
            "annal_topic_records_produced_total",
            &[("topic", "ops")]
        ),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "annal_partition_high_watermark", &[("topic", "ops")]),
        Some(10.0)
    );
    assert_eq!(
        sample(
            &text,
            "annal_group_lag_records_sum",
            &[("group", "stalled")]
        ),
        Some(6.0)
    );
    assert_eq!(
        sample(&text, "annal_group_status", &[("group", "stalled")]),
        Some(2.0)
    );
    assert!(sample(&text, "annal_requests_total", &[("api", "Produce")]).unwrap() >= 1.0);
    assert!(
        sample(
            &text,
            "annal_request_duration_seconds_count",
            &[("api", "OffsetCommit")]
        )
        .unwrap()
            >= 3.0
    );
    assert_eq!(sample(&text, "annal_active_controller", &[]), Some(1.0));
    assert!(
        sample(&text, "annal_log_fsync_duration_seconds_count", &[]).unwrap() >= 1.0,
        "{text}"
    );
    // The last bucket in the exposition's own spelling (Prometheus refuses le="inf").
    assert!(
        text.contains("annal_log_fsync_duration_seconds_bucket{le=\"+Inf\"}"),
        "{text}"
    );
    assert!(sample(&text, "annal_data_dir_total_bytes", &[]).unwrap() > 0.0);
    assert!(sample(&text, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );

    let (status, body) = get(http, "/v1/topics").await;
    assert_eq!(status, 200);
    let topics: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ops = topics
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ops")
        .expect("topic ops listed");
    assert_eq!(ops["partitions"][0]["high_watermark"], 10);

    drop(client);
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("broker stops")
        .unwrap()
        .unwrap();
}
