//! Records by key through a real broker: keyed records produced over the Kafka protocol (annal-client) to a
//! topic with `key.index.enable=true`, then found over real HTTP (`/v1/topics/{topic}/records?key=`): exact
//! answers, the key's murmur2 partition by default, `partition=all`, `latest`, paging, and the errors.

use std::net::SocketAddr;
use std::time::Duration;

use annal_broker::BrokerConfig;
use annal_client::partitioner::partition_for_key;
use annal_client::{encode_batch, Client, OutgoingRecord};
use kafka_protocol::records::Compression;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = get_text(addr, path).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// The value of the metric line that starts with `series` (name and labels), if any.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn get_text(addr: SocketAddr, path: &str) -> (u16, String) {
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
        .map(|(_, b)| b)
        .unwrap_or_default();
    (status, body.to_string())
}

fn offsets_and_values(partition: &serde_json::Value) -> Vec<(i64, String)> {
    partition["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().unwrap(),
                r["value"]["data"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_by_key_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::load(
        None,
        &[
            "http.listen=127.0.0.1:0".into(),
            "offsets.topic.num.partitions=1".into(),
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

    let mut client = Client::connect(&kafka.to_string()).await.unwrap();
    let indexed = [
        ("key.index.enable".to_string(), "true".to_string()),
        ("segment.bytes".to_string(), "4096".to_string()),
    ];
    client
        .create_topic("users", Some(4), None, &indexed)
        .await
        .unwrap();
    let topic = client.created_topic("users").await.unwrap();
    client
        .create_topic("plain", Some(1), None, &[])
        .await
        .unwrap();

    // 40 keys, 400 records, each key in its murmur2 partition, batches of 10 compressed with zstd and lz4.
    let now = annal_broker::now_ms();
    let mut expected: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for round in 0..10 {
        let mut per_partition: std::collections::BTreeMap<i32, Vec<OutgoingRecord>> =
            Default::default();
        for k in 0..40 {
            let key = format!("user-{k}");
            let value = format!("event-{round}-{k}");
            expected.entry(key.clone()).or_default().push(value.clone());
            let p = partition_for_key(key.as_bytes(), 4) as i32;
            per_partition.entry(p).or_default().push(OutgoingRecord {
                key: Some(key.into_bytes().into()),
                value: Some(value.into_bytes().into()),
                headers: vec![("h".to_string(), Some(b"x".to_vec().into()))],
                timestamp: now + round,
            });
        }
        let codec = if round % 2 == 0 {
            Compression::Zstd
        } else {
            Compression::Lz4
        };
        let batches = per_partition
            .into_iter()
            .map(|(p, records)| (p, encode_batch(&records, codec).unwrap()))
            .collect();
        client.produce(&topic, batches, -1, 5000).await.unwrap();
    }

    // Default partition: the key's murmur2 partition; all of a key's records, oldest first.
    for k in [0, 7, 39] {
        let key = format!("user-{k}");
        let (status, body) = get(http, &format!("/v1/topics/users/records?key={key}")).await;
        assert_eq!(status, 200, "{body}");
        let partitions = body["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 1);
        assert_eq!(
            partitions[0]["partition"],
            partition_for_key(key.as_bytes(), 4) as i64
        );
        let values: Vec<String> = offsets_and_values(&partitions[0])
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(values, expected[&key], "{body}");
        let record = &partitions[0]["records"][0];
        assert_eq!(record["key"]["data"], key.as_str());
        assert_eq!(record["headers"][0]["key"], "h");
    }

    // latest=true, partition=all (every partition searched, only the key's has it).
    let (status, body) = get(
        http,
        "/v1/topics/users/records?key=user-5&latest=true&partition=all",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let found: Vec<(i64, String)> = body["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(offsets_and_values)
        .collect();
    assert_eq!(found.len(), 1, "{body}");
    assert_eq!(found[0].1, "event-9-5");

    // Paging: limit=3 and from=next_offset walk the same records.
    let mut values = Vec::new();
    let mut from = 0;
    loop {
        let (status, body) = get(
            http,
            &format!("/v1/topics/users/records?key=user-11&limit=3&from={from}"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let p = &body["partitions"][0];
        let page = offsets_and_values(p);
        assert!(page.len() <= 3);
        values.extend(page.into_iter().map(|(_, v)| v));
        match p["next_offset"].as_i64() {
            Some(next) => from = next,
            None => break,
        }
    }
    assert_eq!(values, expected["user-11"]);

    // A key nobody wrote: an empty answer, not an error.
    let (status, body) = get(http, "/v1/topics/users/records?key=nobody").await;
    assert_eq!(status, 200);
    assert!(body["partitions"][0]["records"]
        .as_array()
        .unwrap()
        .is_empty());

    // Errors say what to do.
    let (status, body) = get(http, "/v1/topics/plain/records?key=a").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("key.index.enable=true"),
        "{body}"
    );
    let (status, body) = get(http, "/v1/topics/nope/records?key=a").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = get(http, "/v1/topics/users/records?key=a&partition=9").await;
    assert_eq!(status, 404);
    let (status, body) = get(http, "/v1/topics/users/records").await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("key"));

    // Turning the index on for an existing topic: its records are indexed (by the lookup itself here).
    client
        .alter_topic_configs(
            "plain",
            &[("key.index.enable".to_string(), "true".to_string())],
            &[],
        )
        .await
        .unwrap();
    let plain = client.created_topic("plain").await.unwrap();
    let batch = encode_batch(
        &[OutgoingRecord {
            key: Some(b"a".to_vec().into()),
            value: Some(b"first".to_vec().into()),
            headers: Vec::new(),
            timestamp: now,
        }],
        Compression::None,
    )
    .unwrap();
    client
        .produce(&plain, vec![(0, batch)], -1, 5000)
        .await
        .unwrap();
    let mut ok = false;
    for _ in 0..50 {
        let (status, body) = get(http, "/v1/topics/plain/records?key=a").await;
        if status == 200 {
            assert_eq!(
                offsets_and_values(&body["partitions"][0]),
                vec![(0, "first".to_string())]
            );
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the topic config change did not turn the index on");

    // Metrics: every answer above counted by outcome and timed; the index's backlog, files and memory per
    // topic. `users` is fully indexed (the lookups with partition=all caught every partition up).
    let (status, text) = get_text(http, "/metrics").await;
    assert_eq!(status, 200);
    let count = |outcome: &str| {
        metric(
            &text,
            &format!("annal_key_lookups_total{{outcome=\"{outcome}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(count("ok") >= 8.0, "{text}");
    // At least the one above (the retry loop may meet another before the config change applies).
    assert!(count("no_key_index") >= 1.0, "{text}");
    assert_eq!(count("not_found"), 2.0, "{text}");
    assert_eq!(count("bad_request"), 1.0, "{text}");
    let answered: f64 = [
        "ok",
        "bad_request",
        "not_found",
        "no_key_index",
        "not_in_sync",
        "building",
        "error",
    ]
    .iter()
    .map(|o| count(o))
    .sum();
    assert_eq!(
        metric(&text, "annal_key_lookup_duration_seconds_count"),
        Some(answered),
        "every answer is timed: {text}"
    );
    let users = |name: &str| metric(&text, &format!("{name}{{topic=\"users\"}}"));
    assert_eq!(
        users("annal_key_index_unindexed_bytes"),
        Some(0.0),
        "{text}"
    );
    // 400 compressed records fit each partition's first segment: all in memory, no file yet (files and their
    // bytes: annal-log's key_index tests and the interop cluster test).
    assert_eq!(users("annal_key_index_file_bytes"), Some(0.0), "{text}");
    assert_eq!(
        users("annal_key_index_memory_entries"),
        Some(400.0),
        "every keyed record of the active segments is in memory: {text}"
    );
    assert!(
        metric(
            &text,
            "annal_key_index_file_bytes{topic=\"__consumer_offsets\"}"
        )
        .is_none(),
        "topics without the index have no series"
    );

    let _ = stop_tx.send(());
    let _ = served.await;
}
