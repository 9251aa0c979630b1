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

    // The same offset committed three times with lag: STALL (Burrow's rule 4), group ERR; or STOP (rule 3), also
    // ERR, once longer than the window spans has passed since the last commit (a slow GET on a loaded machine).
    for i in 0..3 {
        let codes = client
            .commit_offsets("stalled", "ops", &BTreeMap::from([(0, 4)]))
            .await
            .unwrap();
        assert_eq!(codes.get(&0), Some(&0));
        if i < 2 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    let (status, body) = get(http, "/v1/groups/stalled").await;
    assert_eq!(status, 200, "{body}");
    let g: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(g["status"], "ERR", "{g}");
    let p = &g["partitions"][0];
    assert!(p["status"] == "STALL" || p["status"] == "STOP", "{g}");
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
    // Per-partition lag series are opt in (lag.metrics.per.partition).
    assert!(
        !text.contains("annal_group_partition_lag_records"),
        "{text}"
    );
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

/// Starts a broker with the HTTP listener on a free port and retention checked every 100 ms; (Kafka address,
/// HTTP address, stop sender, serve task).
async fn start_broker(
    dir: &std::path::Path,
    extra: &[&str],
) -> (
    SocketAddr,
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let mut overrides: Vec<String> = vec![
        "http.listen=127.0.0.1:0".into(),
        "group.initial.rebalance.delay.ms=0".into(),
        "offsets.topic.num.partitions=1".into(),
        "offsets.topic.replication.factor=1".into(),
        "log.retention.check.interval.ms=100".into(),
    ];
    overrides.extend(extra.iter().map(|s| s.to_string()));
    let config = BrokerConfig::load(
        None,
        &overrides,
        Some(dir.to_path_buf()),
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
    (kafka, http, stop_tx, served)
}

/// Polls `/metrics` until `done` holds for its text (or fails after 20 s); returns that text.
async fn metrics_until(http: SocketAddr, what: &str, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..200 {
        text = get(http, "/metrics").await.1;
        if done(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} never showed in /metrics:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_guard_holds_a_lagging_group_up_to_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (kafka, http, stop_tx, served) = start_broker(dir.path(), &[]).await;
    let mut client = Client::connect(&kafka.to_string()).await.unwrap();
    // One batch per segment (segment.bytes is smaller than two batches), no time limit yet.
    let set = |k: &str, v: &str| (k.to_string(), v.to_string());
    client
        .create_topic(
            "guarded",
            Some(1),
            None,
            &[
                set("segment.bytes", "100"),
                set("retention.ms", "-1"),
                set("retention.guard.groups", "slow, other"),
            ],
        )
        .await
        .unwrap();
    let topic = client.created_topic("guarded").await.unwrap();
    let old = annal_broker::now_ms() - 600_000;
    let mut batch_bytes = 0;
    for i in 0..10 {
        let record = OutgoingRecord {
            key: None,
            value: Some(format!("v{i:03}").into_bytes().into()),
            headers: Vec::new(),
            timestamp: old + i,
        };
        let batch = encode_batch(&[record], Compression::None).unwrap();
        batch_bytes = batch.len() as u64;
        client
            .produce(&topic, vec![(0, batch)], -1, 5000)
            .await
            .unwrap();
    }
    // `slow` (guarded) has consumed offsets 0 and 1, `careless` (not guarded) only offset 0; `other` is listed
    // but has no offset here, so it guards nothing.
    for (group, offset) in [("slow", 2), ("careless", 1)] {
        let codes = client
            .commit_offsets(group, "guarded", &BTreeMap::from([(0, offset)]))
            .await
            .unwrap();
        assert_eq!(codes.get(&0), Some(&0), "commit of {group}");
    }

    // DescribeConfigs shows the guard with Annal's documentation.
    let configs = client.describe_topic_configs("guarded").await.unwrap();
    let groups = configs
        .iter()
        .find(|c| c.name == "retention.guard.groups")
        .expect("retention.guard.groups described");
    assert_eq!(groups.value.as_deref(), Some("slow,other"));
    let cap = configs
        .iter()
        .find(|c| c.name == "retention.guard.max.bytes")
        .expect("retention.guard.max.bytes described");
    assert_eq!(cap.value.as_deref(), Some("1073741824"));
    let documented = raw_config_documentation(kafka, "guarded", "retention.guard.groups").await;
    assert!(
        documented
            .as_deref()
            .is_some_and(|d| d.contains("unconsumed")),
        "{documented:?}"
    );
    // Bad values are refused, naming the config.
    let err = client
        .alter_topic_configs("guarded", &[set("retention.guard.groups", "a,,b")], &[])
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("retention.guard.groups"),
        "{err:#}"
    );
    let err = client
        .alter_topic_configs("guarded", &[set("retention.guard.max.bytes", "-2")], &[])
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("retention.guard.max.bytes"),
        "{err:#}"
    );

    // Every record is now past retention.ms: only what `slow` has consumed may go.
    client
        .alter_topic_configs("guarded", &[set("retention.ms", "1000")], &[])
        .await
        .unwrap();
    let lost = |text: &str, group: &str| {
        sample(
            text,
            "annal_group_records_lost_to_retention_total",
            &[("group", group), ("topic", "guarded")],
        )
    };
    let start = |text: &str| {
        sample(
            text,
            "annal_partition_log_start_offset",
            &[("topic", "guarded"), ("partition", "0")],
        )
    };
    // (The log start moves, then the loss is counted: wait for both.)
    metrics_until(http, "log start 2", |t| {
        start(t) == Some(2.0) && lost(t, "careless") == Some(1.0)
    })
    .await;
    // Several more retention passes change nothing: the guard holds offsets 2..=9 (eight segments).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, text) = get(http, "/metrics").await;
    assert_eq!(start(&text), Some(2.0), "{text}");
    assert_eq!(lost(&text, "careless"), Some(1.0), "{text}");
    assert_eq!(lost(&text, "slow"), None, "{text}");
    assert_eq!(
        sample(
            &text,
            "annal_partition_retention_guard_held_bytes",
            &[("topic", "guarded"), ("partition", "0")]
        ),
        Some((8 * batch_bytes) as f64),
        "{text}"
    );

    // A cap of five segments: the three oldest held ones go, and `slow` loses exactly offsets 2..=4.
    client
        .alter_topic_configs(
            "guarded",
            &[set(
                "retention.guard.max.bytes",
                &(5 * batch_bytes).to_string(),
            )],
            &[],
        )
        .await
        .unwrap();
    metrics_until(http, "log start 5", |t| {
        start(t) == Some(5.0) && lost(t, "slow") == Some(3.0) && lost(t, "careless") == Some(4.0)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, text) = get(http, "/metrics").await;
    assert_eq!(
        start(&text),
        Some(5.0),
        "the cap holds five segments: {text}"
    );
    assert_eq!(lost(&text, "slow"), Some(3.0), "{text}");
    let (_, body) = get(http, "/v1/groups/slow").await;
    let g: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(g["records_lost_to_retention"], 3, "{g}");

    // Without the guard, retention takes everything.
    client
        .alter_topic_configs("guarded", &[], &["retention.guard.groups".to_string()])
        .await
        .unwrap();
    metrics_until(http, "log start 10", |t| {
        start(t) == Some(10.0) && lost(t, "slow") == Some(8.0) && lost(t, "careless") == Some(9.0)
    })
    .await;

    drop(client);
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("broker stops")
        .unwrap()
        .unwrap();
}

/// The documentation DescribeConfigs (v4) gives for one topic config.
async fn raw_config_documentation(kafka: SocketAddr, topic: &str, name: &str) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    use kafka_protocol::protocol::StrBytes;
    let mut conn = annal_client::Connection::connect(&kafka.to_string())
        .await
        .unwrap();
    let request = DescribeConfigsRequest::default()
        .with_include_documentation(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(
                name.to_string(),
            )]))]);
    let response = conn.send_version(&request, 4).await.unwrap();
    let result = response.results.into_iter().next()?;
    let entry = result
        .configs
        .into_iter()
        .find(|c| c.name.as_str() == name)?;
    entry.documentation.map(|d| d.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_partition_lag_series_when_opted_in() {
    let dir = tempfile::tempdir().unwrap();
    let (kafka, http, stop_tx, served) =
        start_broker(dir.path(), &["lag.metrics.per.partition=true"]).await;
    let mut client = Client::connect(&kafka.to_string()).await.unwrap();
    client
        .create_topic("lagging", Some(2), None, &[])
        .await
        .unwrap();
    let topic = client.created_topic("lagging").await.unwrap();
    let minute_ago = annal_broker::now_ms() - 60_000;
    for partition in 0..2 {
        let records: Vec<OutgoingRecord> = (0..10)
            .map(|i| OutgoingRecord {
                key: None,
                value: Some(format!("v{i}").into_bytes().into()),
                headers: Vec::new(),
                timestamp: minute_ago + i,
            })
            .collect();
        let batch = encode_batch(&records, Compression::None).unwrap();
        client
            .produce(&topic, vec![(partition, batch)], -1, 5000)
            .await
            .unwrap();
    }
    let codes = client
        .commit_offsets("reader", "lagging", &BTreeMap::from([(0, 3), (1, 10)]))
        .await
        .unwrap();
    assert_eq!(codes.len(), 2);
    assert!(codes.values().all(|c| *c == 0), "{codes:?}");

    let (status, text) = get(http, "/metrics").await;
    assert_eq!(status, 200);
    let lag = |partition: &str| {
        sample(
            &text,
            "annal_group_partition_lag_records",
            &[
                ("group", "reader"),
                ("topic", "lagging"),
                ("partition", partition),
            ],
        )
    };
    let seconds = |partition: &str| {
        sample(
            &text,
            "annal_group_partition_lag_seconds",
            &[
                ("group", "reader"),
                ("topic", "lagging"),
                ("partition", partition),
            ],
        )
    };
    assert_eq!(lag("0"), Some(7.0), "{text}");
    assert_eq!(lag("1"), Some(0.0), "{text}");
    // Offset 3 of partition 0 was stamped a minute ago; partition 1 is caught up.
    assert!(
        seconds("0").is_some_and(|s| (59.0..120.0).contains(&s)),
        "{text}"
    );
    assert_eq!(seconds("1"), Some(0.0), "{text}");
    // The per-group series are still there, summing the partitions.
    assert_eq!(
        sample(&text, "annal_group_lag_records_sum", &[("group", "reader")]),
        Some(7.0)
    );

    drop(client);
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("broker stops")
        .unwrap()
        .unwrap();
}
