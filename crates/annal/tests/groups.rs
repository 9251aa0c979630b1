//! End-to-end tests of `annal group ...` and `annal producers`: the real `annal` binary against a real broker.
//!
//! A live group member is played by this test over the raw Kafka protocol (JoinGroup + SyncGroup with a
//! consumer-protocol assignment), so the group is a real one with a real assignment for `describe` to decode.
//!
//! `ANNAL_TEST_BOOTSTRAP=HOST:PORT` runs these against an external broker (e.g. Apache Kafka); without it they
//! spawn `annal serve`, and need Annal's group coordinator (FindCoordinator, JoinGroup, OffsetCommit, ...).

mod support;

use annal_client::{Connection, ConnectionOptions};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    consumer_protocol_assignment::TopicPartition as AssignedTopic,
    delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic},
    join_group_request::JoinGroupRequestProtocol,
    leave_group_request::MemberIdentity,
    produce_request::{PartitionProduceData, TopicProduceData},
    sync_group_request::SyncGroupRequestAssignment,
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, DeleteRecordsRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ProduceRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use serde_json::Value;
use support::*;

const MEMBER_CLIENT_ID: &str = "annal-test-member";
const MEMBER_ID_REQUIRED: i16 = 79;

/// One blocking Kafka-protocol connection for the raw parts of a test: `annal_client`'s connection, driven by a
/// runtime of its own so the test stays synchronous.
struct Raw {
    runtime: tokio::runtime::Runtime,
    conn: Connection,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("test runtime");
        let options = ConnectionOptions {
            client_id: MEMBER_CLIENT_ID.to_string(),
            ..ConnectionOptions::default()
        };
        let conn = runtime
            .block_on(Connection::connect_with(addr, options))
            .expect("connect to broker");
        Raw { runtime, conn }
    }

    fn send<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        self.runtime
            .block_on(self.conn.send_version(request, version))
            .unwrap_or_else(|e| panic!("request failed: {e:#}"))
    }
}

fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_string()))
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// A classic-protocol consumer group member that holds `partitions` of `topic` until it leaves.
struct Member {
    conn: Raw,
    group: String,
    member_id: StrBytes,
}

impl Member {
    fn join(bootstrap: &str, group: &str, topic: &str, partitions: Vec<i32>) -> Member {
        let mut boot = Raw::connect(bootstrap);
        let found = boot.send(
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(group.to_string()))
                .with_key_type(0),
        );
        assert_eq!(found.error_code, 0, "FindCoordinator: {found:?}");
        let mut conn = Raw::connect(&format!("{}:{}", found.host.as_str(), found.port));
        let mut subscription = BytesMut::new();
        subscription.extend_from_slice(&0i16.to_be_bytes());
        ConsumerProtocolSubscription::default()
            .with_topics(vec![StrBytes::from_string(topic.to_string())])
            .encode(&mut subscription, 0)
            .unwrap();
        let mut member_id = StrBytes::from_static_str("");
        let joined = loop {
            let response = conn.send(
                5,
                &JoinGroupRequest::default()
                    .with_group_id(group_id(group))
                    .with_session_timeout_ms(30_000)
                    .with_rebalance_timeout_ms(30_000)
                    .with_member_id(member_id.clone())
                    .with_protocol_type(StrBytes::from_static_str("consumer"))
                    .with_protocols(vec![JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str("range"))
                        .with_metadata(subscription.clone().freeze())]),
            );
            match response.error_code {
                // KIP-394: the first join only hands out a member id.
                MEMBER_ID_REQUIRED => member_id = response.member_id.clone(),
                0 => break response,
                code => panic!("JoinGroup failed with error {code}"),
            }
        };
        assert_eq!(joined.leader, joined.member_id, "the only member leads");
        let mut assignment = BytesMut::new();
        assignment.extend_from_slice(&1i16.to_be_bytes());
        ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![AssignedTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(partitions)])
            .encode(&mut assignment, 1)
            .unwrap();
        let synced = conn.send(
            3,
            &SyncGroupRequest::default()
                .with_group_id(group_id(group))
                .with_generation_id(joined.generation_id)
                .with_member_id(joined.member_id.clone())
                .with_assignments(vec![SyncGroupRequestAssignment::default()
                    .with_member_id(joined.member_id.clone())
                    .with_assignment(assignment.freeze())]),
        );
        assert_eq!(synced.error_code, 0, "SyncGroup: {synced:?}");
        Member {
            conn,
            group: group.to_string(),
            member_id: joined.member_id,
        }
    }

    fn leave(mut self) {
        let response = self.conn.send(
            3,
            &LeaveGroupRequest::default()
                .with_group_id(group_id(&self.group))
                .with_members(vec![
                    MemberIdentity::default().with_member_id(self.member_id.clone())
                ]),
        );
        assert_eq!(response.error_code, 0, "LeaveGroup: {response:?}");
    }
}

fn unique_group(prefix: &str) -> String {
    unique_topic(prefix)
}

fn json(broker: &Broker, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "json"]);
    serde_json::from_str(&broker.ok(&all, "")).expect("one JSON document")
}

fn committed(describe: &Value, partition: i64) -> Value {
    describe["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["partition"] == partition)
        .unwrap_or_else(|| panic!("partition {partition} missing: {describe}"))["committed_offset"]
        .clone()
}

/// Ten records in each of the topic's three partitions.
fn topic_with_records(broker: &Broker, prefix: &str) -> String {
    let topic = unique_topic(prefix);
    broker.ok(&["topic", "create", &topic, "-p", "3"], "");
    for p in ["0", "1", "2"] {
        broker.ok(&["produce", &topic, "-p", p], &"r\n".repeat(10));
    }
    topic
}

#[test]
fn group_lifecycle_with_a_live_member() {
    let broker = Broker::start();
    let topic = topic_with_records(&broker, "grp");
    let group = unique_group("grp");

    // An administrator's commit to a group that does not exist yet creates it, empty.
    let plan = broker.ok(
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--to-offset",
            "4",
            "--execute",
        ],
        "",
    );
    assert_eq!(plan.lines().count(), 4, "header and 3 partitions:\n{plan}");
    let list = broker.ok(&["group", "list"], "");
    let row = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&group))
        .unwrap_or_else(|| panic!("{group} not listed:\n{list}"));
    assert!(row.contains("Empty"), "{row}");
    let empty_only: Value = json(&broker, &["group", "list", "--state", "empty"]);
    assert!(
        empty_only
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == group.as_str() && g["state"] == "Empty"),
        "{empty_only}"
    );
    let stable_only: Value = json(&broker, &["group", "list", "--state", "Stable"]);
    assert!(
        !stable_only
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == group.as_str()),
        "{stable_only}"
    );

    let d = json(&broker, &["group", "describe", &group]);
    assert_eq!(d["state"], "Empty");
    assert_eq!(d["total_lag"], 18, "{d}");
    for p in 0..3 {
        assert_eq!(committed(&d, p), 4);
    }
    let p0 = &d["partitions"][0];
    assert_eq!(
        (&p0["log_start_offset"], &p0["log_end_offset"], &p0["lag"]),
        (&Value::from(0), &Value::from(10), &Value::from(6)),
        "{d}"
    );

    // A dry run prints the plan and changes nothing.
    let dry = broker.ok(
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "-p",
            "1",
            "--to-earliest",
        ],
        "",
    );
    let rows: Vec<Vec<&str>> = dry
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![vec![group.as_str(), topic.as_str(), "1", "4", "0"]]
    );
    let d = json(&broker, &["group", "describe", &group]);
    assert_eq!(committed(&d, 1), 4, "a dry run must not commit");

    // With a live member: describe shows it and its decoded assignment; resets and deletion are refused.
    let member = Member::join(&broker.addr, &group, &topic, vec![0, 2]);
    let d = json(&broker, &["group", "describe", &group]);
    assert_eq!(d["state"], "Stable", "{d}");
    assert_eq!(d["protocol"], "range");
    let members = d["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{d}");
    assert_eq!(members[0]["client_id"], MEMBER_CLIENT_ID);
    assert_eq!(members[0]["assignment"][&topic], serde_json::json!([0, 2]));
    let owner = |p: usize| d["partitions"][p]["client_id"].clone();
    assert_eq!(
        (owner(0), owner(1), owner(2)),
        (
            Value::from(MEMBER_CLIENT_ID),
            Value::Null,
            Value::from(MEMBER_CLIENT_ID)
        )
    );
    let text = broker.ok(&["group", "describe", &group], "");
    assert!(text.contains(&format!("{topic}:0,2")), "{text}");

    let err = broker.fails(
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--to-latest",
            "--execute",
        ],
        "",
    );
    assert!(
        err.contains("active member") && err.contains("Stable"),
        "{err}"
    );
    let err = broker.fails(&["group", "delete", &group], "");
    assert!(err.contains("NON_EMPTY_GROUP"), "{err}");

    // Once it leaves, both work.
    member.leave();
    broker.ok(
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--to-latest",
            "--execute",
        ],
        "",
    );
    let d = json(&broker, &["group", "describe", &group]);
    assert_eq!(d["state"], "Empty");
    assert_eq!(d["total_lag"], 0, "{d}");
    let out = broker.ok(&["group", "delete", &group], "");
    assert!(out.contains(&format!("deleted group '{group}'")), "{out}");
    let err = broker.fails(&["group", "describe", &group], "");
    assert!(err.contains("does not exist"), "{err}");
    broker.delete_quietly(&topic);
}

#[test]
fn describe_warns_when_retention_deleted_or_is_about_to_delete_unread_records() {
    let broker = Broker::start();
    let topic = topic_with_records(&broker, "ret");
    let group = unique_group("ret");
    for (partition, offset) in [("0", "2"), ("1", "5"), ("2", "8")] {
        broker.ok(
            &[
                "group",
                "reset-offsets",
                &group,
                "--topic",
                &topic,
                "-p",
                partition,
                "--to-offset",
                offset,
                "--execute",
            ],
            "",
        );
    }
    // Partitions 0 and 1 lose their first 5 records: 0 (committed 2) fell off the retention window, 1
    // (committed 5, the new log start, 5 records retained) is at risk, 2 is fine.
    let mut conn = Raw::connect(&broker.addr);
    let deleted = conn.send(
        1,
        &DeleteRecordsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(topic_name(&topic))
                .with_partitions(
                    [0, 1]
                        .into_iter()
                        .map(|p| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(p)
                                .with_offset(5)
                        })
                        .collect(),
                )]),
    );
    for p in deleted.topics.iter().flat_map(|t| &t.partitions) {
        assert_eq!(
            (p.error_code, p.low_watermark),
            (0, 5),
            "DeleteRecords: {deleted:?}"
        );
    }

    let out = broker.run(&["group", "describe", &group], "");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let retention: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| l.starts_with(&topic))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[1].to_string(), cols[6].to_string())
        })
        .collect();
    assert_eq!(
        retention,
        vec![
            ("0".into(), "LOST".into()),
            ("1".into(), "AT-RISK".into()),
            ("2".into(), "ok".into())
        ],
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("fell off the retention window of {topic}-0"))
            && stderr.contains("3 record(s) were deleted before it read them"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("at risk of losing records in {topic}-1")),
        "{stderr}"
    );
    assert!(!stderr.contains(&format!("{topic}-2")), "{stderr}");

    let d = json(&broker, &["group", "describe", &group]);
    let p0 = &d["partitions"][0];
    assert_eq!(p0["retention"], "lost");
    assert_eq!(p0["unread_deleted"], 3);
    assert_eq!(p0["log_start_offset"], 5);
    assert_eq!(d["warnings"].as_array().unwrap().len(), 2, "{d}");

    // Where retention never deletes, nothing is at risk; what is already gone is still reported.
    broker.ok(
        &[
            "topic",
            "alter",
            &topic,
            "-c",
            "retention.ms=-1",
            "-c",
            "retention.bytes=-1",
        ],
        "",
    );
    let d = json(&broker, &["group", "describe", &group]);
    let states: Vec<&Value> = d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["retention"])
        .collect();
    assert_eq!(states, ["lost", "ok", "ok"], "{d}");

    broker.ok(&["group", "delete", &group], "");
    broker.delete_quietly(&topic);
}

#[test]
fn producers_lists_an_idempotent_producer() {
    let broker = Broker::start();
    let topic = unique_topic("prod");
    broker.ok(&["topic", "create", &topic, "-p", "2"], "");
    let mut conn = Raw::connect(&broker.addr);
    let init = conn.send(
        1,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(-1),
    );
    assert_eq!(init.error_code, 0, "InitProducerId: {init:?}");
    let (producer_id, epoch) = (init.producer_id.0, init.producer_epoch);
    let now = now_ms();
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: now,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    let produced = conn.send(
        8,
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(&topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(1)
                    .with_records(Some(batch.freeze()))])]),
    );
    let p = &produced.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "Produce: {produced:?}");

    let listed = json(&broker, &["producers", &topic]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let s = &listed[0];
    assert_eq!(s["partition"], 1);
    assert_eq!(s["producer_id"], producer_id);
    assert_eq!(s["producer_epoch"], i64::from(epoch));
    assert_eq!(s["last_sequence"], 2);
    assert_eq!(s["last_timestamp"], now);
    assert_eq!(s["current_txn_start_offset"], -1);

    let text = broker.ok(&["producers", &topic, "-p", "1"], "");
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..4],
        ["1", &producer_id.to_string(), &epoch.to_string(), "2"],
        "{text}"
    );
    let out = broker.run(&["producers", &topic, "-p", "0"], "");
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no active producers on partition 0"));
    broker.delete_quietly(&topic);
}

#[test]
fn group_errors_say_what_to_do() {
    let broker = Broker::start();
    let group = unique_group("missing");
    let err = broker.fails(&["group", "describe", &group], "");
    assert!(
        err.contains("does not exist") && err.contains("annal group list"),
        "{err}"
    );
    let err = broker.fails(&["group", "delete", &group], "");
    assert!(err.contains("GROUP_ID_NOT_FOUND"), "{err}");
    let err = broker.fails(
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            "no-such-topic-here",
            "--to-earliest",
        ],
        "",
    );
    assert!(err.contains("does not exist"), "{err}");
    let err = broker.fails(&["group", "list", "--state", "Running"], "");
    assert!(err.contains("use one of"), "{err}");
}

/// `group health` and the STATUS column of `group describe` read the broker's lag health (Burrow's rules over
/// the commit window) from its HTTP listener. Annal only: Kafka has neither.
#[test]
fn group_health_reports_burrow_status_and_fails_on_lagging_groups() {
    let broker = Broker::start();
    if broker.http.is_none() {
        return; // an external broker without Annal's HTTP listener
    }
    let topic = unique_topic("health");
    broker.ok(&["topic", "create", &topic], "");
    broker.ok(&["produce", &topic], "a\nb\nc\nd\n");
    let stuck = format!("{topic}-stuck");
    let caught_up = format!("{topic}-caught-up");
    for _ in 0..2 {
        for (group, offset) in [(&stuck, "1"), (&caught_up, "4")] {
            broker.ok(
                &[
                    "group",
                    "reset-offsets",
                    group,
                    "--topic",
                    &topic,
                    "--to-offset",
                    offset,
                    "--execute",
                ],
                "",
            );
        }
    }
    // The same offset committed while lagging: STALL, or STOP once longer than the window spans has passed.
    let out = broker.run(&["group", "health", &stuck, "--format", "json"], "");
    assert!(
        !out.status.success(),
        "a lagging stuck group must fail the check"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report[0]["status"], "ERR", "{report}");
    assert_eq!(report[0]["lag"], 3, "{report}");
    let status = report[0]["unhealthy_partitions"][0]["status"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(status == "STALL" || status == "STOP", "{report}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&stuck));

    // No lag: OK, and the check passes for that group.
    let text = broker.ok(&["group", "health", &caught_up], "");
    assert!(text.contains(&caught_up) && text.contains("OK"), "{text}");

    let d = json(&broker, &["group", "describe", &stuck]);
    assert_eq!(d["status"], "ERR", "{d}");
    let now = d["partitions"][0]["status"].as_str().unwrap_or_default();
    assert!(now == "STALL" || now == "STOP", "{d}");
    let text = broker.ok(&["group", "describe", &stuck], "");
    assert!(
        text.contains("STATUS") && text.contains("TIME-LAG"),
        "{text}"
    );

    // Without a reachable HTTP listener the command says what to do.
    let out = std::process::Command::new(ANNAL)
        .args(["group", "health", "--http", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("http.listen"));
}
