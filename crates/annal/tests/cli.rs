//! End-to-end tests of the client commands: a real `annal serve` process driven by the real `annal` binary.
//!
//! Set `ANNAL_TEST_BOOTSTRAP=HOST:PORT` to run the same flows against an already running broker instead
//! (e.g. Apache Kafka, to check that the CLI behaves the same there). Topic names are unique per run, so a shared
//! broker is fine.

use std::collections::{BTreeMap, BTreeSet};
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

/// Two processes on one data directory would interleave their appends in the same segments; the second is
/// refused at start-up with the directory named, and the first goes on serving.
#[test]
fn a_second_serve_on_a_data_directory_in_use_is_refused() {
    let broker = Broker::start();
    let Some(data_dir) = broker.data_dir() else {
        return; // an external broker's directory is not ours to test
    };
    let topic = unique_topic("locked");
    broker.ok(&["topic", "create", &topic], "");
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["serve", "--listen", &listen, "--override", "http.listen="];
    let second = Command::new(ANNAL)
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_timeout(second, Duration::from_secs(30), &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second serve started: {err}");
    assert!(
        err.contains("is in use by another annal process")
            && err.contains(&data_dir.display().to_string()),
        "{err}"
    );
    let listed = broker.ok(&["topic", "list"], "");
    assert!(listed.contains(&topic), "{listed}");
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

/// Lines of a command's stdout, sorted (partitions are read in no fixed order relative to each other).
fn sorted_lines(out: &str) -> Vec<String> {
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .expect("valid time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[test]
fn consume_templates_last_n_and_end_positions() {
    let broker = Broker::start();
    let topic = unique_topic("tmpl");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");
    let p0: String = (0..10).map(|i| format!("k{i}|v{i}\n")).collect();
    broker.ok(
        &[
            "produce",
            &topic,
            "-p",
            "0",
            "--key-separator",
            "|",
            "-H",
            "src=test",
        ],
        &p0,
    );
    broker.ok(&["produce", &topic, "-p", "1"], "a\nb\nc\nd\n");

    // -o -3: exactly the last three records of each partition, in the template's shape.
    let out = broker.ok(
        &["consume", &topic, "-o", "-3", "--format", "%p:%o %k=%v\\n"],
        "",
    );
    assert_eq!(
        sorted_lines(&out),
        [
            "0:7 k7=v7",
            "0:8 k8=v8",
            "0:9 k9=v9",
            "1:1 =b",
            "1:2 =c",
            "1:3 =d"
        ],
        "{out}"
    );
    let out = broker.ok(
        &[
            "consume",
            &topic,
            "-p",
            "0",
            "--offset=-3",
            "--format",
            "value",
        ],
        "",
    );
    assert_eq!(out, "v7\nv8\nv9\n");
    // More than there is: the whole partition.
    let out = broker.ok(
        &[
            "consume", &topic, "-p", "1", "-o", "-100", "--format", "value",
        ],
        "",
    );
    assert_eq!(out, "a\nb\nc\nd\n");

    // Every directive and escape: topic, headers, lengths, both timestamps, tab, literal percent.
    let out = broker.ok(
        &[
            "consume",
            &topic,
            "-p",
            "0",
            "-o",
            "9",
            "--format",
            "%t\\t%h\\t%K/%S/%H\\t%T %d 100%%\\n",
        ],
        "",
    );
    let fields: Vec<&str> = out.trim_end_matches('\n').split('\t').collect();
    assert_eq!(fields.len(), 4, "{out:?}");
    assert_eq!(fields[0], topic);
    assert_eq!(fields[1], "src=test");
    assert_eq!(fields[2], "2/2/1");
    let (ms, rest) = fields[3].split_once(' ').expect("timestamp then date");
    let ms: i64 = ms.parse().expect("%T is milliseconds");
    assert_eq!(rest, format!("{} 100%", rfc3339(ms)), "{out:?}");
    // A null key prints nothing and has length -1.
    let out = broker.ok(
        &[
            "consume",
            &topic,
            "-p",
            "1",
            "-o",
            "0",
            "-n",
            "1",
            "--format",
            "[%k]%K\\n",
        ],
        "",
    );
    assert_eq!(out, "[]-1\n");

    let err = broker.fails(&["consume", &topic, "--format", "%k %q"], "");
    assert!(
        err.contains("unknown directive %q") && err.contains("%v"),
        "{err}"
    );
    let err = broker.fails(&["consume", &topic, "--format", "yaml"], "");
    assert!(err.contains("template"), "{err}");

    // --end-offset stops before it, in each partition read.
    let out = broker.ok(
        &[
            "consume",
            &topic,
            "--from-beginning",
            "--end-offset",
            "2",
            "--format",
            "%p:%o\\n",
        ],
        "",
    );
    assert_eq!(sorted_lines(&out), ["0:0", "0:1", "1:0", "1:1"], "{out}");
    broker.delete_quietly(&topic);
}

#[test]
fn consume_between_times_rfc3339_and_relative() {
    let broker = Broker::start();
    let topic = unique_topic("times");
    broker.ok(&["topic", "create", &topic, "-p", "1"], "");
    broker.ok(&["produce", &topic], "early-0\nearly-1\n");
    std::thread::sleep(Duration::from_millis(50));
    let cut = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    broker.ok(&["produce", &topic], "late-0\nlate-1\nlate-2\n");

    let values = |args: &[&str]| {
        let mut all = vec!["consume", topic.as_str()];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--format", "value"]);
        broker.ok(&all, "")
    };
    // The end time stops at the first record at or after it, which is not printed.
    assert_eq!(
        values(&["--from-beginning", "--end-time", &cut.to_string()]),
        "early-0\nearly-1\n"
    );
    assert_eq!(
        values(&["--from-beginning", "--end-time", &rfc3339(cut)]),
        "early-0\nearly-1\n"
    );
    // RFC 3339 start, as --timestamp and as -o @TIME.
    assert_eq!(
        values(&["--timestamp", &rfc3339(cut)]),
        "late-0\nlate-1\nlate-2\n"
    );
    assert_eq!(
        values(&["-o", &format!("@{}", rfc3339(cut))]),
        "late-0\nlate-1\nlate-2\n"
    );
    // Relative: an hour ago is before everything; an hour from now is after everything.
    assert_eq!(values(&["--timestamp", "-1h"]).lines().count(), 5);
    assert_eq!(
        values(&["-o", "@-1h", "--end-time", "+1h"]).lines().count(),
        5
    );
    assert_eq!(values(&["--timestamp", "+1h"]), "");
    let err = broker.fails(&["consume", &topic, "--timestamp", "-1year"], "");
    assert!(err.contains("-30m"), "{err}");
    broker.delete_quietly(&topic);
}

#[test]
fn consume_as_a_group_commits_what_it_printed() {
    let broker = Broker::start();
    let topic = unique_topic("grpconsume");
    let group = unique_topic("g");
    broker.ok(&["topic", "create", &topic, "-p", "3"], "");
    for p in ["0", "1", "2"] {
        broker.ok(&["produce", &topic, "-p", p], &format!("{p}-a\n{p}-b\n"));
    }
    let out = broker.run(
        &[
            "consume",
            &topic,
            "-G",
            &group,
            "--from-beginning",
            "--format",
            "value",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "group '{group}' assigned this member partitions 0, 1, 2"
        )),
        "{stderr}"
    );
    assert_eq!(
        sorted_lines(&String::from_utf8_lossy(&out.stdout)),
        ["0-a", "0-b", "1-a", "1-b", "2-a", "2-b"]
    );

    let describe = |broker: &Broker| -> Value {
        serde_json::from_str(&broker.ok(&["group", "describe", &group, "--format", "json"], ""))
            .expect("group describe --format json is JSON")
    };
    let d = describe(&broker);
    assert_eq!(d["state"], "Empty", "the member left: {d}");
    for p in 0..3 {
        let row = d["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["partition"] == p)
            .unwrap_or_else(|| panic!("partition {p} missing: {d}"));
        assert_eq!(row["committed_offset"], 2, "{d}");
        assert_eq!(row["lag"], 0, "{d}");
    }

    // The committed offsets win over --from-beginning: nothing new, nothing printed.
    let again = broker.ok(
        &[
            "consume",
            &topic,
            "-G",
            &group,
            "--from-beginning",
            "--format",
            "value",
        ],
        "",
    );
    assert_eq!(again, "");
    broker.ok(&["produce", &topic, "-p", "1"], "1-c\n");
    let newer = broker.ok(&["consume", &topic, "-G", &group, "--format", "value"], "");
    assert_eq!(newer, "1-c\n");
    let d = describe(&broker);
    let p1 = d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["partition"] == 1)
        .expect("partition 1");
    assert_eq!(p1["committed_offset"], 3, "{d}");

    // -G reads what the group assigns, so it cannot be combined with -p.
    let err = broker.fails(&["consume", &topic, "-G", &group, "-p", "0"], "");
    assert!(err.contains("--partition") || err.contains("-p"), "{err}");
    broker.delete_quietly(&topic);
}

/// Two members of one group share the partitions by Kafka's range assignor, each printing only its own.
#[test]
fn two_group_members_split_the_partitions() {
    let broker = Broker::start();
    let topic = unique_topic("split");
    let group = unique_topic("g");
    broker.ok(&["topic", "create", &topic, "-p", "4"], "");
    let spawn = || {
        Command::new(ANNAL)
            .args([
                "consume",
                &topic,
                "-G",
                &group,
                "--follow",
                "--format",
                "%p\\n",
                "-b",
                &broker.addr,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a group member")
    };
    // Each member's stdout (the partitions of the records it printed), line by line.
    let lines_of = |child: &mut std::process::Child| {
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    };
    let mut first = spawn();
    let first_lines = lines_of(&mut first);
    // Wait until the first member owns everything (a record it prints proves it), then add the second.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen_first = Vec::new();
    while seen_first.is_empty() && Instant::now() < deadline {
        broker.ok(&["produce", &topic, "-p", "3"], "warm-up\n");
        if let Ok(line) = first_lines.recv_timeout(Duration::from_millis(500)) {
            seen_first.push(line);
        }
    }
    assert_eq!(seen_first, ["3"], "the first member did not start reading");
    let mut second = spawn();
    let second_lines = lines_of(&mut second);

    // After the rebalance, members sorted by member id get partitions 0-1 and 2-3. Produce to every partition
    // until each member has printed something, then check that no partition was printed by both.
    let deadline = Instant::now() + Duration::from_secs(40);
    let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
    while (a.len() < 2 || b.len() < 2) && Instant::now() < deadline {
        for p in ["0", "1", "2", "3"] {
            broker.ok(&["produce", &topic, "-p", p], "x\n");
        }
        std::thread::sleep(Duration::from_millis(300));
        while let Ok(line) = first_lines.try_recv() {
            a.insert(line);
        }
        while let Ok(line) = second_lines.try_recv() {
            b.insert(line);
        }
    }
    for child in [&mut first, &mut second] {
        let _ = child.kill();
    }
    let errs: Vec<String> = [first, second]
        .into_iter()
        .map(|c| String::from_utf8_lossy(&c.wait_with_output().unwrap().stderr).into_owned())
        .collect();
    assert!(
        !b.is_empty() && a.len() + b.len() >= 4,
        "first printed {a:?}, second {b:?}; stderr: {errs:?}"
    );
    // The first member may have printed partitions 2-3 before the rebalance; after it, each has two.
    assert!(
        errs[1].contains("assigned this member partitions 0, 1")
            || errs[1].contains("assigned this member partitions 2, 3"),
        "{errs:?}"
    );
    assert!(
        errs[0].contains("assigned this member partitions 0, 1, 2, 3"),
        "{errs:?}"
    );
    broker.delete_quietly(&topic);
}

#[test]
fn topic_add_partitions_trim_and_json() {
    let broker = Broker::start();
    let topic = unique_topic("grow");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");
    let out = broker.ok(&["topic", "add-partitions", &topic, "--to", "5"], "");
    assert!(out.contains("now has 5 partitions (was 2)"), "{out}");
    let describe = |broker: &Broker| -> Value {
        serde_json::from_str(&broker.ok(&["topic", "describe", &topic, "--format", "json"], ""))
            .expect("topic describe --format json is JSON")
    };
    let d = describe(&broker);
    assert_eq!(d["name"], topic.as_str());
    assert_eq!(d["partitions"].as_array().map(Vec::len), Some(5), "{d}");
    assert!(
        d["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["leader"].is_i64()),
        "{d}"
    );
    assert!(
        d["configs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "retention.ms"),
        "{d}"
    );
    let list: Value = serde_json::from_str(&broker.ok(&["topic", "list", "--format", "json"], ""))
        .expect("topic list --format json is JSON");
    let entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == topic.as_str())
        .unwrap_or_else(|| panic!("{topic} missing: {list}"));
    assert_eq!(
        (entry["partitions"].as_i64(), entry["internal"].as_bool()),
        (Some(5), Some(false))
    );
    // The new partitions take records.
    broker.ok(&["produce", &topic, "-p", "4"], "in-new-partition\n");
    let err = broker.fails(&["topic", "add-partitions", &topic, "--to", "3"], "");
    assert!(
        err.contains("already has 5 partitions") && err.contains("above 5"),
        "{err}"
    );

    // Trim partition 0 to offset 4: four records removed, and ListOffsets (describe's EARLIEST) shows it.
    broker.ok(&["produce", &topic, "-p", "0"], &"r\n".repeat(10));
    let out = broker.ok(&["topic", "trim", &topic, "-p", "0", "--offset", "4"], "");
    assert!(
        out.contains(&format!("removed 4 records from topic '{topic}'")),
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with('0'))
        .expect("partition 0 row")
        .split_whitespace()
        .collect();
    assert_eq!(row, ["0", "0", "4", "4"], "{out}");
    assert_eq!(describe(&broker)["partitions"][0]["earliest"], 4);
    let first = broker.consume_json(&[&topic, "-p", "0", "--from-beginning", "-n", "1"]);
    assert_eq!(first[0]["offset"], 4);
    let err = broker.fails(&["topic", "trim", &topic, "-p", "0", "--offset", "11"], "");
    assert!(
        err.contains("ends at offset 10") && err.contains("--offset end"),
        "{err}"
    );

    // --before a time: records older than it go, per partition, reported as JSON.
    broker.ok(&["produce", &topic, "-p", "1"], "old\nold\nold\n");
    std::thread::sleep(Duration::from_millis(50));
    let cut = rfc3339(now_ms());
    std::thread::sleep(Duration::from_millis(50));
    broker.ok(&["produce", &topic, "-p", "1"], "new\nnew\n");
    let dry: Value = serde_json::from_str(&broker.ok(
        &[
            "topic",
            "trim",
            &topic,
            "-p",
            "1",
            "--before",
            &cut,
            "--dry-run",
            "--format",
            "json",
        ],
        "",
    ))
    .expect("JSON");
    assert_eq!(
        (dry["dry_run"].as_bool(), dry["removed"].as_i64()),
        (Some(true), Some(3)),
        "{dry}"
    );
    assert_eq!(
        describe(&broker)["partitions"][1]["earliest"],
        0,
        "a dry run changes nothing"
    );
    let done: Value = serde_json::from_str(&broker.ok(
        &[
            "topic", "trim", &topic, "-p", "1", "--before", &cut, "--format", "json",
        ],
        "",
    ))
    .expect("JSON");
    assert_eq!(done["partitions"][0]["log_start_after"], 3, "{done}");
    assert_eq!(done["partitions"][0]["removed"], 3, "{done}");
    let values = broker.ok(
        &[
            "consume",
            &topic,
            "-p",
            "1",
            "--from-beginning",
            "--format",
            "value",
        ],
        "",
    );
    assert_eq!(values, "new\nnew\n");

    // --offset end empties every partition; the topic stays.
    let out = broker.ok(&["topic", "trim", &topic, "--offset", "end"], "");
    assert!(out.contains("removed 9 records"), "6 + 2 + 1 left: {out}");
    let d = describe(&broker);
    for p in d["partitions"].as_array().unwrap() {
        assert_eq!(p["earliest"], p["latest"], "{d}");
    }
    let err = broker.fails(&["topic", "trim", &topic, "-p", "7", "--offset", "0"], "");
    assert!(err.contains("has no partition 7"), "{err}");
    let err = broker.fails(&["topic", "trim", &topic], "");
    assert!(
        err.contains("--offset") && err.contains("--before"),
        "{err}"
    );
    let missing = unique_topic("missing");
    let err = broker.fails(&["topic", "add-partitions", &missing, "--to", "3"], "");
    assert!(err.contains("does not exist"), "{err}");
    broker.delete_quietly(&topic);
}

#[test]
fn group_delete_offsets_per_partition_and_topic() {
    let broker = Broker::start();
    let topic = unique_topic("deloff");
    let group = unique_topic("g");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");
    broker.ok(&["produce", &topic, "-p", "0"], "a\nb\n");
    broker.ok(&["produce", &topic, "-p", "1"], "c\n");
    broker.ok(&["consume", &topic, "-G", &group, "--from-beginning"], "");
    let committed = |broker: &Broker| -> Vec<(i64, Value)> {
        let d: Value = serde_json::from_str(
            &broker.ok(&["group", "describe", &group, "--format", "json"], ""),
        )
        .expect("JSON");
        d["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["topic"] == topic.as_str() && !r["committed_offset"].is_null())
            .map(|r| {
                (
                    r["partition"].as_i64().unwrap(),
                    r["committed_offset"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        committed(&broker),
        [(0, Value::from(2)), (1, Value::from(1))]
    );

    let out = broker.ok(
        &[
            "group",
            "delete-offsets",
            &group,
            "--topic",
            &topic,
            "--partition",
            "0",
        ],
        "",
    );
    assert!(out.contains("partition 0"), "{out}");
    assert_eq!(committed(&broker), [(1, Value::from(1))]);
    let out = broker.ok(&["group", "delete-offsets", &group, "--topic", &topic], "");
    assert!(out.contains("partition 1"), "{out}");
    assert!(committed(&broker).is_empty());
    let err = broker.fails(&["group", "delete-offsets", &group, "--topic", &topic], "");
    assert!(
        err.contains("has no committed offsets") && err.contains("annal group describe"),
        "{err}"
    );
    broker.delete_quietly(&topic);
}

#[test]
fn progress_shows_on_stderr_when_asked() {
    let broker = Broker::start();
    let topic = unique_topic("progress");
    broker.ok(&["topic", "create", &topic, "-p", "1"], "");
    broker.ok(&["produce", &topic], &"r\n".repeat(10));
    let out = broker.run_env(
        &["consume", &topic, "--from-beginning", "--format", "value"],
        "",
        &[("ANNAL_PROGRESS", "always")],
    );
    assert!(out.status.success());
    assert_eq!(
        out.stdout,
        "r\n".repeat(10).as_bytes(),
        "progress never goes to stdout"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("consumed 10 records of '{topic}'")),
        "{err}"
    );
    // Not a terminal and not asked for: stderr stays clean.
    let out = broker.run(
        &["consume", &topic, "--from-beginning", "--format", "value"],
        "",
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    broker.delete_quietly(&topic);
}

/// `consume -G` joins a group next to librdkafka (kcat's balanced consumer): both offer Kafka's `range`
/// assignor, so they share the partitions two and two, whichever of them leads. A missing kcat fails the test
/// (test.sh installs it from Debian) unless `ANNAL_SKIP_KCAT=1` says to skip it, which test.sh sets, loudly, only
/// when apt could not install it: a missing tool never turns this test into one that cannot fail.
#[test]
fn group_member_shares_a_group_with_kcat() {
    if Command::new("kcat").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("ANNAL_SKIP_KCAT").is_some_and(|v| v == "1"),
            "kcat is not installed: install it (Debian: apt-get install kcat) or set ANNAL_SKIP_KCAT=1 to skip this test"
        );
        eprintln!("kcat is not installed and ANNAL_SKIP_KCAT=1: skipping");
        return;
    }
    let broker = Broker::start();
    let topic = unique_topic("withkcat");
    let group = unique_topic("g");
    broker.ok(&["topic", "create", &topic, "-p", "4"], "");
    // Null until the group exists (describe fails for a group nobody has joined yet).
    let describe = || -> Value {
        let out = broker.run(&["group", "describe", &group, "--format", "json"], "");
        if !out.status.success() {
            return Value::Null;
        }
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    // Each member's assignment of the topic, by client id, once the group is stable with `members` members.
    let wait_for_members = |members: usize| -> BTreeMap<String, Vec<i64>> {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let d = describe();
            let assignments: BTreeMap<String, Vec<i64>> = d["members"]
                .as_array()
                .map(|ms| {
                    ms.iter()
                        .map(|m| {
                            let parts = m["assignment"][topic.as_str()]
                                .as_array()
                                .map(|ps| ps.iter().filter_map(Value::as_i64).collect())
                                .unwrap_or_default();
                            (
                                m["client_id"].as_str().unwrap_or_default().to_string(),
                                parts,
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let total: usize = assignments.values().map(Vec::len).sum();
            if d["state"] == "Stable" && assignments.len() == members && total == 4 {
                return assignments;
            }
            assert!(
                Instant::now() < deadline,
                "the group did not settle with {members} members: {d}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let mut kcat = Command::new("kcat")
        .args([
            "-q",
            "-b",
            &broker.addr,
            "-G",
            &group,
            &topic,
            "-f",
            "%p\\n",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kcat");
    let alone = wait_for_members(1);
    assert_eq!(alone.get("rdkafka").map(Vec::len), Some(4), "{alone:?}");
    let mut annal = Command::new(ANNAL)
        .args([
            "consume",
            &topic,
            "-G",
            &group,
            "--follow",
            "-b",
            &broker.addr,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn annal consume -G");
    let shared = wait_for_members(2);
    for child in [&mut kcat, &mut annal] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut all: Vec<i64> = shared.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3], "{shared:?}");
    assert_eq!(shared.get("annal-cli").map(Vec::len), Some(2), "{shared:?}");
    assert_eq!(shared.get("rdkafka").map(Vec::len), Some(2), "{shared:?}");
    broker.delete_quietly(&topic);
}
