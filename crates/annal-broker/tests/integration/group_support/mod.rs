//! Shared helpers for the group coordinator tests: real kafka-protocol request structs, each encoded and decoded
//! at the API version under test (so a request a client could not send is never used), and each response
//! encoded at that version (so the coordinator never answers something the wire cannot carry).

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use annal_broker::group::{ClientInfo, GroupConfig, GroupCoordinator, TopicCatalog, TopicInfo};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

pub const NONE: i16 = 0;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

/// Stands in for the broker's topic registry (not part of the coordinator): every topic exists with
/// `REGISTRY_PARTITIONS` partitions, except names starting with `missing`.
pub struct Registry;

pub const REGISTRY_PARTITIONS: i32 = 64;

impl TopicCatalog for Registry {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        if name.starts_with("missing") {
            return None;
        }
        Some(TopicInfo {
            // A stable id per name (FNV-1a), as a registry would keep one.
            id: uuid::Uuid::from_u128(
                name.bytes()
                    .fold(0x6c62272e07bb014262b821756295c58d_u128, |h, b| {
                        (h ^ b as u128).wrapping_mul(0x0000000001000000000000000000013B)
                    }),
            ),
            partitions: REGISTRY_PARTITIONS,
        })
    }
    fn topic_name(&self, _id: uuid::Uuid) -> Option<String> {
        None
    }
}

/// Small timeouts so tests run in real time quickly.
pub fn fast_config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 150,
        min_session_timeout_ms: 10,
        ..GroupConfig::default()
    }
}

pub fn open(dir: &Path, config: GroupConfig) -> Arc<GroupCoordinator> {
    GroupCoordinator::open(dir, config).expect("coordinator opens")
}

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Encodes at `version` and decodes back: what the coordinator receives is what a client can send.
pub fn wire<T: Encodable + Decodable>(msg: T, version: i16) -> T {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .expect("request encodes at this version");
    let mut bytes = buf.freeze();
    let decoded = T::decode(&mut bytes, version).expect("request decodes");
    assert!(bytes.is_empty(), "request fully consumed");
    decoded
}

/// Asserts the response encodes at `version`, then hands it back decoded (as a client would see it).
pub fn answer<T: Encodable + Decodable>(msg: T, version: i16) -> T {
    wire(msg, version)
}

pub fn client(id: &str) -> ClientInfo {
    ClientInfo {
        client_id: id.to_string(),
        client_host: "/127.0.0.1".to_string(),
    }
}

/// Consumer-protocol subscription metadata (i16 version + `ConsumerProtocolSubscription`), as the Java client
/// sends it.
pub fn subscription(topics: &[&str]) -> Bytes {
    let sub =
        ConsumerProtocolSubscription::default().with_topics(topics.iter().map(|t| s(t)).collect());
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    sub.encode(&mut buf, 1).unwrap();
    buf.freeze()
}

pub fn assignment(parts: &[(&str, Vec<i32>)]) -> Bytes {
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
        parts
            .iter()
            .map(|(t, p)| {
                AssignedTopic::default()
                    .with_topic(s(t).into())
                    .with_partitions(p.clone())
            })
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    a.encode(&mut buf, 1).unwrap();
    buf.freeze()
}

pub fn decode_assignment(bytes: &Bytes) -> Vec<(String, Vec<i32>)> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let mut b = bytes.clone();
    let version = i16::from_be_bytes([b[0], b[1]]);
    let _ = bytes::Buf::get_i16(&mut b);
    let a = ConsumerProtocolAssignment::decode(&mut b, version).unwrap();
    a.assigned_partitions
        .into_iter()
        .map(|t| (t.topic.0.to_string(), t.partitions))
        .collect()
}

/// A JoinGroup request with consumer protocols `range` (and `roundrobin`).
pub fn join_request(
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    session_ms: i32,
    rebalance_ms: i32,
    topics: &[&str],
) -> JoinGroupRequest {
    let meta = subscription(topics);
    JoinGroupRequest::default()
        .with_group_id(s(group).into())
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(rebalance_ms)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(meta.clone()),
            JoinGroupRequestProtocol::default()
                .with_name(s("roundrobin"))
                .with_metadata(meta),
        ])
}

pub async fn join(
    c: &GroupCoordinator,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
) -> JoinGroupResponse {
    let req = wire(req, version);
    answer(
        c.join_group(req, version, &client(client_id)).await,
        version,
    )
}

/// A dynamic member's join as a Kafka 4 client does it (KIP-394): an empty member id first, then the id the
/// coordinator handed out.
pub async fn join_v9(
    c: &GroupCoordinator,
    group: &str,
    member_id: &str,
    session_ms: i32,
    rebalance_ms: i32,
    topics: &[&str],
) -> JoinGroupResponse {
    let mut id = member_id.to_string();
    if id.is_empty() {
        let first = join(
            c,
            join_request(group, "", None, session_ms, rebalance_ms, topics),
            9,
            "client",
        )
        .await;
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
        assert!(
            first.member_id.starts_with("client-"),
            "member id is client id + uuid: {}",
            first.member_id.as_str()
        );
        id = first.member_id.to_string();
    }
    join(
        c,
        join_request(group, &id, None, session_ms, rebalance_ms, topics),
        9,
        "client",
    )
    .await
}

pub async fn sync(
    c: &GroupCoordinator,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
    assignments: Vec<(String, Bytes)>,
    version: i16,
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(s(group).into())
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(if version >= 5 {
            Some(s("consumer"))
        } else {
            None
        })
        .with_protocol_name(if version >= 5 { Some(s("range")) } else { None })
        .with_assignments(
            assignments
                .into_iter()
                .map(|(m, a)| {
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s(&m))
                        .with_assignment(a)
                })
                .collect(),
        );
    let req = wire(req, version);
    answer(c.sync_group(req, version).await, version)
}

pub async fn heartbeat(
    c: &GroupCoordinator,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(s(group).into())
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s));
    let req = wire(req, 4);
    answer(c.heartbeat(req, 4).await, 4).error_code
}

pub async fn describe(
    c: &GroupCoordinator,
    group: &str,
) -> describe_groups_response::DescribedGroup {
    let req = wire(
        DescribeGroupsRequest::default().with_groups(vec![s(group).into()]),
        5,
    );
    let mut resp = answer(c.describe_groups(req, 5).await, 5);
    resp.groups.remove(0)
}

pub async fn commit(
    c: &GroupCoordinator,
    group: &str,
    generation: i32,
    member_id: &str,
    offsets: &[(&str, i32, i64, Option<&str>)],
    version: i16,
) -> Vec<(String, i32, i16)> {
    let mut topics: Vec<offset_commit_request::OffsetCommitRequestTopic> = Vec::new();
    for (t, p, o, meta) in offsets {
        let part = offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(*p)
            .with_committed_offset(*o)
            .with_committed_leader_epoch(if version >= 6 { 3 } else { -1 })
            .with_committed_metadata(meta.map(s));
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(part),
            None => topics.push(
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(s(t).into())
                    .with_partitions(vec![part]),
            ),
        }
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(s(group).into())
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member_id))
        .with_topics(topics);
    let req = wire(req, version);
    let resp = answer(c.offset_commit(req, version, &Registry).await, version);
    resp.topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions
                .into_iter()
                .map(move |p| (name.clone(), p.partition_index, p.error_code))
        })
        .collect()
}

/// OffsetFetch v7 (single group): `(topic, partition, offset, metadata, error)`.
pub async fn fetch(
    c: &GroupCoordinator,
    group: &str,
    topics: Option<&[(&str, Vec<i32>)]>,
) -> Vec<(String, i32, i64, String)> {
    let req = OffsetFetchRequest::default()
        .with_group_id(s(group).into())
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, p)| {
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(s(t).into())
                        .with_partition_indexes(p.clone())
                })
                .collect()
        }));
    let req = wire(req, 7);
    let resp = answer(c.offset_fetch(req, 7).await, 7);
    assert_eq!(resp.error_code, NONE);
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            assert_eq!(p.error_code, NONE);
            out.push((
                t.name.0.to_string(),
                p.partition_index,
                p.committed_offset,
                p.metadata.map(|m| m.to_string()).unwrap_or_default(),
            ));
        }
    }
    out
}

/// Waits (polling with real time) until `f` is true or `timeout` passes.
pub async fn eventually<F: std::future::Future<Output = bool>>(
    timeout: Duration,
    mut f: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
