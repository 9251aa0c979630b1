//! End-to-end tests of `annal cluster describe|health`: the real `annal` binary against a real broker
//! (`annal serve`, or the one named by `ANNAL_TEST_BOOTSTRAP`, e.g. Apache Kafka, which also answers
//! DescribeQuorum).

mod support;

use serde_json::Value;
use support::*;

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn describe_shows_the_broker_and_a_created_topics_partitions() {
    let broker = Broker::start();
    let topic = unique_topic("cluster");
    broker.ok(&["topic", "create", &topic, "-p", "3"], "");

    let d = json(&broker.ok(&["cluster", "describe", "--format", "json"], ""));
    let brokers = d["brokers"].as_array().expect("brokers array");
    assert!(
        brokers
            .iter()
            .any(|b| format!("{}:{}", b["host"].as_str().unwrap_or(""), b["port"]) == broker.addr),
        "the broker we talk to is listed: {d}"
    );
    assert!(
        d["cluster_id"].as_str().is_some_and(|c| !c.is_empty()),
        "{d}"
    );
    let t = d["topics"]
        .as_array()
        .expect("topics array")
        .iter()
        .find(|t| t["name"] == topic.as_str())
        .unwrap_or_else(|| panic!("{topic} missing: {d}"));
    assert_eq!(t["partitions"], 3, "{t}");
    assert_eq!(t["under_replicated_partitions"], 0, "{t}");
    assert_eq!(t["offline_partitions"], 0, "{t}");
    match &d["quorum"] {
        Value::Null => {}
        q => {
            assert!(q["leader_id"].as_i64().is_some_and(|l| l >= 0), "{q}");
            assert!(!q["voters"].as_array().expect("voters").is_empty(), "{q}");
        }
    }

    let text = broker.ok(&["cluster", "describe"], "");
    assert!(text.contains(&broker.addr), "{text}");
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(topic.as_str()))
        .unwrap_or_else(|| panic!("no row for {topic}:\n{text}"))
        .split_whitespace()
        .collect();
    // TOPIC PARTITIONS REPLICAS UNDER-REPLICATED OFFLINE
    assert_eq!((row[1], row[3], row[4]), ("3", "0", "0"), "{text}");
    if d["quorum"].is_null() {
        assert!(
            text.contains("quorum: not reported by this broker"),
            "{text}"
        );
    } else {
        assert!(text.contains("quorum: leader "), "{text}");
    }
    broker.delete_quietly(&topic);
}

#[test]
fn health_exits_zero_on_a_healthy_node_and_one_when_unreachable() {
    let broker = Broker::start();
    let out = broker.ok(&["cluster", "health"], "");
    assert!(out.contains("healthy:                     true"), "{out}");
    let h = json(&broker.ok(&["cluster", "health", "--format", "json"], ""));
    assert_eq!(h["healthy"], true, "{h}");
    assert_eq!(h["leaderless_partitions"], serde_json::json!([]), "{h}");
    assert!(!h["brokers"].as_array().expect("brokers").is_empty(), "{h}");
    broker.ok(
        &[
            "cluster",
            "health",
            "--exit-when-healthy",
            "--timeout",
            "30",
        ],
        "",
    );

    // Nothing listens there: unhealthy, exit 1, and the reason names the address.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let out = std::process::Command::new(ANNAL)
        .args(["cluster", "health", "--exit-when-healthy", "--timeout", "1"])
        .args(["--interval-ms", "200", "-b", &nowhere])
        .output()
        .expect("run annal");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("healthy:                     false"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("cannot reach broker at {nowhere}")),
        "{stderr}"
    );
}
