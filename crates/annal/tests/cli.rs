//! End-to-end tests of the client commands: a real `annal serve` process driven by the real `annal` binary.
//!
//! Set `ANNAL_TEST_BOOTSTRAP=HOST:PORT` to run the same flows against an already running broker instead
//! (e.g. Apache Kafka, to check that the CLI behaves the same there). Topic names are unique per run, so a shared
//! broker is fine.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::*;

#[test]
fn topic_create_list_describe_alter_delete() {
    let broker = Broker::start();
    let topic = unique_topic("admin");
    let out = broker.ok(
        &[
            "topic",
            "create",
            &topic,
            "-p",
            "3",
            "-c",
            "retention.ms=7200000",
        ],
        "",
    );
    assert!(
        out.contains(&format!("created topic '{topic}' with 3 partitions")),
        "{out}"
    );

    let list = broker.ok(&["topic", "list"], "");
    assert!(
        list.lines().any(|l| l == topic),
        "{topic} missing from list:\n{list}"
    );

    let err = broker.fails(&["topic", "create", &topic], "");
    assert!(err.contains("already exists"), "{err}");

    broker.ok(&["produce", &topic, "-p", "1"], "a\nb\n");
    let describe = broker.ok(&["topic", "describe", &topic], "");
    assert!(describe.contains("Partitions: 3"), "{describe}");
    let rows: Vec<Vec<&str>> = describe
        .lines()
        .skip_while(|l| !l.starts_with("PARTITION"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{describe}");
    // PARTITION LEADER REPLICAS ISR EARLIEST LATEST
    assert_eq!(
        (rows[1][0], rows[1][4], rows[1][5]),
        ("1", "0", "2"),
        "{describe}"
    );
    assert_eq!((rows[0][4], rows[0][5]), ("0", "0"), "{describe}");
    let retention = describe
        .lines()
        .find(|l| l.starts_with("retention.ms "))
        .expect("retention.ms listed");
    assert!(
        retention.contains("7200000") && retention.contains("topic"),
        "{retention}"
    );

    let out = broker.ok(
        &[
            "topic",
            "alter",
            &topic,
            "-c",
            "retention.ms=3600000",
            "-c",
            "segment.ms=600000",
        ],
        "",
    );
    assert!(out.contains("retention.ms=3600000"), "{out}");
    let describe = broker.ok(&["topic", "describe", &topic], "");
    assert!(
        describe
            .lines()
            .any(|l| l.starts_with("retention.ms ") && l.contains("3600000")),
        "{describe}"
    );
    assert!(
        describe
            .lines()
            .any(|l| l.starts_with("segment.ms ") && l.contains("600000")),
        "{describe}"
    );

    broker.ok(
        &["topic", "alter", &topic, "--delete-config", "segment.ms"],
        "",
    );
    let describe = broker.ok(&["topic", "describe", &topic], "");
    let segment_ms = describe
        .lines()
        .find(|l| l.starts_with("segment.ms "))
        .expect("segment.ms listed");
    assert!(
        !segment_ms.contains(" topic"),
        "override should be gone: {segment_ms}"
    );

    let err = broker.fails(&["topic", "alter", &topic, "-c", "no.such.config=1"], "");
    assert!(err.contains("INVALID_CONFIG"), "{err}");

    let out = broker.ok(&["topic", "delete", &topic], "");
    assert!(out.contains("deleted"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker
        .ok(&["topic", "list"], "")
        .lines()
        .any(|l| l == topic)
    {
        assert!(
            Instant::now() < deadline,
            "{topic} still listed 10s after delete"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = broker.fails(&["topic", "describe", &topic], "");
    assert!(
        err.contains(&format!(
            "topic '{topic}' does not exist; create it with `annal topic create {topic}`"
        )),
        "{err}"
    );
}

/// Keys land where Kafka's default partitioner puts them. The hashes are the murmur2 values from Apache Kafka's
/// UtilsTest; the expected partition is computed from them exactly as Kafka does.
#[test]
fn keyed_records_with_headers_in_every_codec() {
    let broker = Broker::start();
    let topic = unique_topic("keyed");
    let partitions = 5;
    broker.ok(
        &["topic", "create", &topic, "-p", &partitions.to_string()],
        "",
    );
    let kafka_hashes: [(&str, i32); 5] = [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("abc", 479470107),
    ];
    let before = now_ms();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let input: String = kafka_hashes
            .iter()
            .map(|(k, _)| format!("{k}|{codec} value for {k}\n"))
            .collect();
        let codec_header = format!("codec={codec}");
        let args = [
            "produce",
            &topic,
            "--key-separator",
            "|",
            "-H",
            &codec_header,
            "-H",
            "trace=t-1",
            "--compression",
            codec,
        ];
        let out = broker.run(&args, &input);
        assert!(
            out.status.success(),
            "produce {codec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("produced 5 records"));
    }
    let after = now_ms();
    let records = broker.consume_json(&[&topic, "--from-beginning"]);
    assert_eq!(records.len(), 25);
    for r in &records {
        let key = r["key"].as_str().expect("key");
        let hash = kafka_hashes
            .iter()
            .find(|(k, _)| *k == key)
            .expect("known key")
            .1;
        let expected = (hash & 0x7fff_ffff) % partitions;
        assert_eq!(
            r["partition"].as_i64().unwrap(),
            i64::from(expected),
            "partition of key {key}"
        );
        let codec = r["headers"]["codec"].as_str().expect("codec header");
        assert_eq!(
            r["value"].as_str().unwrap(),
            format!("{codec} value for {key}")
        );
        assert_eq!(r["headers"]["trace"], "t-1");
        assert_eq!(r["topic"], topic.as_str());
        assert_eq!(r["timestamp_type"], "CreateTime");
        let ts = r["timestamp"].as_i64().unwrap();
        assert!(
            ts >= before - 1000 && ts <= after + 1000,
            "timestamp {ts} outside {before}..{after}"
        );
    }
    // Within a partition, records of one key keep their produce order (none, gzip, ..., zstd).
    for (key, _) in kafka_hashes {
        let codecs: Vec<&str> = records
            .iter()
            .filter(|r| r["key"] == key)
            .map(|r| r["headers"]["codec"].as_str().unwrap())
            .collect();
        assert_eq!(
            codecs,
            ["none", "gzip", "snappy", "lz4", "zstd"],
            "order for key {key}"
        );
    }

    let err = broker.fails(
        &["produce", &topic, "--key-separator", "|"],
        "k|v\nno separator here\n",
    );
    assert!(err.contains("line 2 has no key separator"), "{err}");
}

#[test]
fn consume_from_beginning_offset_timestamp_and_count() {
    let broker = Broker::start();
    let topic = unique_topic("positions");
    broker.ok(&["topic", "create", &topic, "-p", "1"], "");
    let first: String = (0..5).map(|i| format!("early-{i}\n")).collect();
    broker.ok(&["produce", &topic], &first);
    std::thread::sleep(Duration::from_millis(50));
    let cut = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    let second: String = (0..5).map(|i| format!("late-{i}\n")).collect();
    broker.ok(&["produce", &topic, "--acks", "1"], &second);

    let all = broker.consume_json(&[&topic, "--from-beginning"]);
    let offsets: Vec<i64> = all.iter().map(|r| r["offset"].as_i64().unwrap()).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    assert_eq!(all[0]["value"], "early-0");
    assert_eq!(all[0]["key"], Value::Null);
    assert_eq!(all[9]["value"], "late-4");

    // --offset inside the second batch: the fetch returns the whole batch, the CLI skips the earlier records.
    let some = broker.consume_json(&[&topic, "--offset", "7", "-n", "2"]);
    let values: Vec<&str> = some.iter().map(|r| r["value"].as_str().unwrap()).collect();
    assert_eq!(values, ["late-2", "late-3"]);

    let since = broker.consume_json(&[&topic, "--timestamp", &cut.to_string()]);
    let values: Vec<&str> = since.iter().map(|r| r["value"].as_str().unwrap()).collect();
    assert_eq!(values, ["late-0", "late-1", "late-2", "late-3", "late-4"]);

    // A timestamp after every record: nothing, and no waiting.
    assert!(broker
        .consume_json(&[&topic, "--timestamp", &(now_ms() + 3_600_000).to_string()])
        .is_empty());

    // The default starts at the end: nothing printed, and a hint on stderr.
    let out = broker.run(&["consume", &topic], "");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from-beginning"));

    // The readable format: one line per record with partition, offset and value.
    let text = broker.ok(&["consume", &topic, "--offset", "5", "-n", "1"], "");
    assert!(
        text.starts_with("[0:5 ") && text.trim_end().ends_with("] late-0"),
        "{text}"
    );
    let values = broker.ok(
        &[
            "consume",
            &topic,
            "--from-beginning",
            "-n",
            "3",
            "--format",
            "value",
        ],
        "",
    );
    assert_eq!(values, "early-0\nearly-1\nearly-2\n");
    broker.delete_quietly(&topic);
}

#[test]
fn acks_settings_and_follow() {
    let broker = Broker::start();
    let topic = unique_topic("follow");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");

    // --offset 0 reads whatever was produced before the follower got going, so there is no start-up race; what
    // makes it a test of --follow is the record produced after the first three were seen.
    let mut follower = Command::new(ANNAL)
        .args([
            "consume",
            &topic,
            "--follow",
            "--offset",
            "0",
            "--format",
            "value",
            "-b",
            &broker.addr,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn consume --follow");
    broker.ok(&["produce", &topic, "--acks", "0"], "acks-0\n");
    broker.ok(&["produce", &topic, "--acks", "1"], "acks-1\n");
    broker.ok(&["produce", &topic, "--acks", "all"], "acks-all\n");

    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |n: usize, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < n && Instant::now() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                seen.push(line);
            }
        }
    };
    let mut seen = Vec::new();
    wait_for(3, &mut seen);
    let mut first_three = seen.clone();
    first_three.sort();
    if first_three != ["acks-0", "acks-1", "acks-all"] {
        let _ = follower.kill();
        let out = follower.wait_with_output().expect("follower output");
        panic!(
            "the follower saw {seen:?}; its stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    broker.ok(&["produce", &topic], "later\n");
    wait_for(4, &mut seen);
    let still_running = follower.try_wait().expect("poll follower").is_none();
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(
        seen.get(3).map(String::as_str),
        Some("later"),
        "the follower saw {seen:?}"
    );
    assert!(still_running, "consume --follow exited on its own");
    broker.delete_quietly(&topic);
}

#[test]
fn errors_say_what_to_do() {
    let broker = Broker::start();
    let missing = unique_topic("missing");
    let err = broker.fails(&["consume", &missing, "--from-beginning"], "");
    assert!(
        err.contains(&format!("create it with `annal topic create {missing}`")),
        "{err}"
    );
    let err = broker.fails(&["produce", &missing], "x\n");
    assert!(err.contains("does not exist"), "{err}");

    let topic = unique_topic("errors");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");
    let err = broker.fails(&["consume", &topic, "-p", "5"], "");
    assert!(err.contains("has no partition 5"), "{err}");
    let err = broker.fails(&["topic", "create", "bad name"], "");
    assert!(err.contains("use only letters"), "{err}");
    broker.delete_quietly(&topic);

    let closed = format!("127.0.0.1:{}", free_port());
    let out = Command::new(ANNAL)
        .args(["topic", "list", "-b", &closed])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach broker at {closed}")) && err.contains("annal serve"),
        "{err}"
    );
}
