//! [`GroupConsumer`]: one member of a consumer group under the classic protocol (JoinGroup, SyncGroup,
//! Heartbeat, OffsetCommit, LeaveGroup), with Kafka's range assignor when it leads the group.
//!
//! It does the group's bookkeeping only; the caller fetches the assigned partitions with [`Client::fetch`] and
//! calls [`GroupConsumer::heartbeat_if_due`] between fetches (a fetch waits at most a second or so, well within
//! the heartbeat interval). When the coordinator signals a rebalance the caller commits what it has consumed,
//! calls [`GroupConsumer::rejoin`], and continues with the new assignment.
//!
//! Every exchange is bounded: each request by the connection's `request_timeout`, a join by `JOIN_ATTEMPTS`,
//! coordinator lookups by [`Client::find_coordinator`]'s own limit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

// tokio's clock: virtual in the deterministic simulator, the OS's monotonic clock otherwise.
use tokio::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    consumer_protocol_assignment::TopicPartition, join_group_request::JoinGroupRequestProtocol,
    join_group_response::JoinGroupResponseMember, leave_group_request::MemberIdentity,
    sync_group_request::SyncGroupRequestAssignment, ApiKey, ConsumerProtocolAssignment,
    ConsumerProtocolSubscription, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::assignment::decode_assignment;
use crate::client::{topic_name, Client};
use crate::connection::Connection;
use crate::errors::{describe, error_name};
use crate::groups::{
    group_error, offset_commit_request, Coordinator, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION, NOT_COORDINATOR, REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
};

mod versions {
    /// v1 added the rebalance timeout; v4 the KIP-394 member id round trip (MEMBER_ID_REQUIRED).
    pub const JOIN_GROUP: (i16, i16) = (1, 9);
    /// v5 must name the protocol type and name.
    pub const SYNC_GROUP: (i16, i16) = (0, 5);
    pub const HEARTBEAT: (i16, i16) = (0, 4);
    /// v3 leaves by a list of members.
    pub const LEAVE_GROUP: (i16, i16) = (0, 5);
    pub const OFFSET_COMMIT: (i16, i16) = (2, 9);
}

const PROTOCOL_TYPE: &str = "consumer";
/// Kafka's `RangeAssignor` name: Java, librdkafka and kcat members with the default assignor can share a group.
pub const RANGE_ASSIGNOR: &str = "range";
/// JoinGroup/SyncGroup rounds before giving up: a rebalance that another member keeps restarting ends here.
const JOIN_ATTEMPTS: u32 = 12;
/// Commit attempts while the coordinator moves.
const COMMIT_ATTEMPTS: u32 = 6;
/// Subscribed topics a leader accepts across all members' subscriptions (the metadata request names them all).
const MAX_SUBSCRIBED_TOPICS: usize = 10_000;

const MEMBER_ID_REQUIRED: i16 = 79;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const GROUP_MAX_SIZE_REACHED: i16 = 81;

/// Timing of a member, as a Kafka consumer's `session.timeout.ms`, `rebalance.timeout.ms` (the JoinGroup
/// timeout; `max.poll.interval.ms` in Java) and `heartbeat.interval.ms`.
#[derive(Debug, Clone)]
pub struct GroupConsumerOptions {
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub heartbeat_interval: Duration,
}

impl Default for GroupConsumerOptions {
    /// Short enough that a CLI killed without leaving frees its partitions within seconds, and above Kafka's
    /// `group.min.session.timeout.ms` (6 s).
    fn default() -> GroupConsumerOptions {
        GroupConsumerOptions {
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(3),
        }
    }
}

/// What the coordinator said about the member's place in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// The member holds its assignment.
    Current,
    /// The group is rebalancing (or forgot this member): commit, then [`GroupConsumer::rejoin`].
    RejoinNeeded,
}

/// One member of a classic consumer group. See the module docs for the calling pattern.
pub struct GroupConsumer {
    group: String,
    topics: Vec<String>,
    options: GroupConsumerOptions,
    /// The coordinator's connection; `None` after it moved or the connection failed (found again on next use).
    conn: Option<(Coordinator, Connection)>,
    member_id: String,
    generation: i32,
    /// Assigned partitions by topic, sorted.
    assignment: BTreeMap<String, Vec<i32>>,
    last_heartbeat: Instant,
}

impl GroupConsumer {
    /// Joins `group` subscribed to `topics` and waits for the first assignment.
    pub async fn join(
        client: &mut Client,
        group: &str,
        topics: &[String],
        options: GroupConsumerOptions,
    ) -> Result<GroupConsumer> {
        if group.is_empty() {
            bail!("the group id is empty; name a group, e.g. -G my-app");
        }
        if topics.is_empty() {
            bail!("a group member must subscribe to at least one topic");
        }
        let mut consumer = GroupConsumer {
            group: group.to_string(),
            topics: topics.to_vec(),
            options,
            conn: None,
            member_id: String::new(),
            generation: -1,
            assignment: BTreeMap::new(),
            last_heartbeat: Instant::now(),
        };
        consumer.rejoin(client).await?;
        Ok(consumer)
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// The partitions this member owns, by topic.
    pub fn assignment(&self) -> &BTreeMap<String, Vec<i32>> {
        &self.assignment
    }

    /// The coordinator's connection, found and opened when there is none.
    async fn coordinator(&mut self, client: &mut Client) -> Result<&mut Connection> {
        let usable = self.conn.as_ref().is_some_and(|(_, c)| !c.is_closed());
        if !usable {
            let coordinator = client.find_coordinator(&self.group).await?;
            let conn = Connection::connect_with(&coordinator.addr, client.options.clone())
                .await
                .with_context(|| {
                    format!(
                        "the coordinator of group '{}' (broker {}) advertises itself as {}; check its \
                         advertised listener",
                        self.group, coordinator.node_id, coordinator.addr
                    )
                })?;
            self.conn = Some((coordinator, conn));
        }
        Ok(&mut self.conn.as_mut().expect("set above").1)
    }

    /// The node id of the coordinator, for messages (-1 before it is known).
    fn coordinator_id(&self) -> i32 {
        self.conn.as_ref().map_or(-1, |(c, _)| c.node_id)
    }

    /// JoinGroup then SyncGroup until the member has a generation and an assignment.
    pub async fn rejoin(&mut self, client: &mut Client) -> Result<()> {
        let mut last_error = String::new();
        for attempt in 1..=JOIN_ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt.min(10)))).await;
            }
            match self.join_once(client).await? {
                Ok(()) => return Ok(()),
                Err(reason) => last_error = reason,
            }
        }
        bail!(
            "could not join group '{}' after {JOIN_ATTEMPTS} attempts (last: {last_error}); another member may \
             keep restarting the rebalance, see the group with `annal group describe {}`",
            self.group,
            self.group
        )
    }

    /// One JoinGroup + SyncGroup round. `Ok(Err(reason))`: retry; `Err`: give up.
    async fn join_once(&mut self, client: &mut Client) -> Result<Result<(), String>> {
        let subscription = encode_subscription(&self.topics)?;
        let group = self.group.clone();
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_session_timeout_ms(millis_i32(self.options.session_timeout))
            .with_rebalance_timeout_ms(millis_i32(self.options.rebalance_timeout))
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str(RANGE_ASSIGNOR))
                .with_metadata(subscription)]);
        let conn = self.coordinator(client).await?;
        let (joined, _) = conn.send(&request, versions::JOIN_GROUP).await?;
        match joined.error_code {
            0 => {}
            // KIP-394: the first join hands out a member id to join with.
            MEMBER_ID_REQUIRED => {
                self.member_id = joined.member_id.to_string();
                return Ok(Err("MEMBER_ID_REQUIRED".into()));
            }
            UNKNOWN_MEMBER_ID => {
                self.member_id.clear();
                return Ok(Err("UNKNOWN_MEMBER_ID".into()));
            }
            REBALANCE_IN_PROGRESS => return Ok(Err("REBALANCE_IN_PROGRESS".into())),
            code if coordinator_gone(code) => {
                self.conn = None;
                return Ok(Err(error_name(code)));
            }
            INCONSISTENT_GROUP_PROTOCOL => bail!(
                "group '{group}' is used by members of another protocol or assignor than Kafka's `range` \
                 consumer protocol (INCONSISTENT_GROUP_PROTOCOL); consume with another group id"
            ),
            INVALID_SESSION_TIMEOUT => bail!(
                "the broker refused a session timeout of {:?} for group '{group}' (INVALID_SESSION_TIMEOUT); \
                 check its group.min.session.timeout.ms and group.max.session.timeout.ms",
                self.options.session_timeout
            ),
            GROUP_MAX_SIZE_REACHED => bail!(
                "group '{group}' already has as many members as the broker allows (GROUP_MAX_SIZE_REACHED)"
            ),
            code => bail!(
                "cannot join group '{group}' at broker {}: {}",
                self.coordinator_id(),
                group_error(&group, code)
            ),
        }
        self.member_id = joined.member_id.to_string();
        self.generation = joined.generation_id;
        let protocol = joined
            .protocol_name
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| RANGE_ASSIGNOR.to_string());
        let assignments = if joined.leader == joined.member_id {
            self.assign(client, &joined.members).await?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
            .with_protocol_name(Some(StrBytes::from_string(protocol)))
            .with_assignments(assignments);
        let conn = self.coordinator(client).await?;
        let (synced, _) = conn.send(&request, versions::SYNC_GROUP).await?;
        match synced.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => {
                return Ok(Err(error_name(synced.error_code)))
            }
            UNKNOWN_MEMBER_ID => {
                self.member_id.clear();
                return Ok(Err("UNKNOWN_MEMBER_ID".into()));
            }
            code if coordinator_gone(code) => {
                self.conn = None;
                return Ok(Err(error_name(code)));
            }
            code => bail!(
                "cannot sync with group '{group}' at broker {}: {}",
                self.coordinator_id(),
                group_error(&group, code)
            ),
        }
        let assignment = decode_assignment(&synced.assignment).with_context(|| {
            format!("the assignment the leader of group '{group}' sent this member")
        })?;
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (topic, partitions) in assignment.partitions {
            by_topic.entry(topic).or_default().extend(partitions);
        }
        for partitions in by_topic.values_mut() {
            partitions.sort_unstable();
            partitions.dedup();
        }
        self.assignment = by_topic;
        self.last_heartbeat = Instant::now();
        Ok(Ok(()))
    }

    /// The leader's job: a range assignment of every member's subscription, encoded for SyncGroup.
    async fn assign(
        &mut self,
        client: &mut Client,
        members: &[JoinGroupResponseMember],
    ) -> Result<Vec<SyncGroupRequestAssignment>> {
        let mut subscriptions: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in members {
            // A member whose metadata does not parse gets nothing rather than failing the whole group.
            let topics = decode_subscription_topics(&m.metadata).unwrap_or_default();
            subscriptions.insert(m.member_id.to_string(), topics);
        }
        let all_topics: BTreeSet<&str> = subscriptions
            .values()
            .flatten()
            .map(String::as_str)
            .collect();
        if all_topics.len() > MAX_SUBSCRIBED_TOPICS {
            bail!(
                "the members of group '{}' subscribe to {} topics, more than the {MAX_SUBSCRIBED_TOPICS} this \
                 client assigns",
                self.group,
                all_topics.len()
            );
        }
        let names: Vec<&str> = all_topics.into_iter().collect();
        let mut partition_counts = BTreeMap::new();
        for (code, meta) in client.metadata(Some(&names)).await? {
            // Topics that do not exist (yet) get no partitions, as in Kafka's assignors.
            if code == 0 {
                partition_counts.insert(meta.name.clone(), meta.partitions.len() as i32);
            }
        }
        let plan = range_assign(&subscriptions, &partition_counts);
        let mut out = Vec::with_capacity(plan.len());
        for (member, topics) in plan {
            out.push(
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(member))
                    .with_assignment(encode_assignment(&topics)?),
            );
        }
        Ok(out)
    }

    /// Sends a heartbeat if the interval has passed since the last one; says whether the member must rejoin.
    pub async fn heartbeat_if_due(&mut self, client: &mut Client) -> Result<Membership> {
        if self.last_heartbeat.elapsed() < self.options.heartbeat_interval {
            return Ok(Membership::Current);
        }
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()));
        let conn = self.coordinator(client).await?;
        let (response, _) = conn.send(&request, versions::HEARTBEAT).await?;
        self.last_heartbeat = Instant::now();
        match response.error_code {
            0 => Ok(Membership::Current),
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => Ok(Membership::RejoinNeeded),
            UNKNOWN_MEMBER_ID => {
                self.member_id.clear();
                Ok(Membership::RejoinNeeded)
            }
            // The next heartbeat finds the coordinator again; the session timeout leaves time for that.
            code if coordinator_gone(code) => {
                self.conn = None;
                Ok(Membership::Current)
            }
            code => bail!(
                "heartbeat to group '{}' at broker {} failed: {}",
                self.group,
                self.coordinator_id(),
                group_error(&self.group, code)
            ),
        }
    }

    /// Commits `offsets` (the next offset to read, per partition of `topic`) as this member and generation.
    /// A rebalance under way is not an error: the commit is refused and `RejoinNeeded` returned.
    pub async fn commit(
        &mut self,
        client: &mut Client,
        topic: &str,
        offsets: &BTreeMap<i32, i64>,
    ) -> Result<Membership> {
        if offsets.is_empty() {
            return Ok(Membership::Current);
        }
        let request = offset_commit_request(
            &self.group,
            self.generation,
            &self.member_id,
            topic,
            offsets,
        );
        for attempt in 1..=COMMIT_ATTEMPTS {
            let conn = self.coordinator(client).await?;
            let (response, _) = conn.send(&request, versions::OFFSET_COMMIT).await?;
            let results: Vec<(i32, i16)> = response
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            if let Some(&(_, code)) = results.iter().find(|(_, c)| coordinator_gone(*c)) {
                self.conn = None;
                if attempt < COMMIT_ATTEMPTS {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    continue;
                }
                bail!(
                    "cannot commit offsets of group '{}' for topic '{topic}': {} (still, after {COMMIT_ATTEMPTS} \
                     attempts); is the group coordinator healthy?",
                    self.group,
                    error_name(code)
                );
            }
            for (partition, code) in results {
                match code {
                    0 => {}
                    REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => return Ok(Membership::RejoinNeeded),
                    UNKNOWN_MEMBER_ID => {
                        self.member_id.clear();
                        return Ok(Membership::RejoinNeeded);
                    }
                    code => bail!(
                        "cannot commit the offset of partition {partition} of topic '{topic}' for group '{}' at \
                         broker {}: {}",
                        self.group,
                        self.coordinator_id(),
                        describe(code, None)
                    ),
                }
            }
            return Ok(Membership::Current);
        }
        unreachable!("the last attempt returns")
    }

    /// Leaves the group so its partitions move to other members now rather than after the session timeout.
    pub async fn leave(mut self, client: &mut Client) -> Result<()> {
        if self.member_id.is_empty() {
            return Ok(());
        }
        let member_id = StrBytes::from_string(self.member_id.clone());
        let group = self.group.clone();
        let conn = self.coordinator(client).await?;
        let version = conn.pick_version(ApiKey::LeaveGroup, versions::LEAVE_GROUP)?;
        let mut request = LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())));
        // v3 replaced the single member id with a list of members.
        if version >= 3 {
            request.members = vec![MemberIdentity::default().with_member_id(member_id)];
        } else {
            request.member_id = member_id;
        }
        let response = conn
            .send_version(&request, version)
            .await
            .with_context(|| format!("cannot leave group '{group}'"))?;
        let member_code = response.members.first().map_or(0, |m| m.error_code);
        match (response.error_code, member_code) {
            (0, 0) | (UNKNOWN_MEMBER_ID, _) | (_, UNKNOWN_MEMBER_ID) => Ok(()),
            (0, code) | (code, _) => Err(anyhow!(
                "cannot leave group '{group}': {}; the coordinator removes the member after its session \
                 timeout",
                error_name(code)
            )),
        }
    }
}

fn coordinator_gone(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
    )
}

fn millis_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Kafka's `RangeAssignor`: for each topic, its members sorted by member id share the partitions in contiguous
/// ranges; the first `partitions % members` get one extra. Members with nothing assigned are still listed (they
/// must receive an empty assignment).
pub fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
    let mut plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for (topic, &count) in partition_counts {
        // BTreeMap keys are sorted: members in member id order, as Kafka sorts them.
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if members.is_empty() || count <= 0 {
            continue;
        }
        let n = members.len() as i32;
        let (per_member, extra) = (count / n, count % n);
        for (i, member) in members.into_iter().enumerate() {
            let i = i as i32;
            let start = per_member * i + i.min(extra);
            let len = per_member + i32::from(i < extra);
            if len > 0 {
                plan.entry(member.clone())
                    .or_default()
                    .insert(topic.clone(), (start..start + len).collect());
            }
        }
    }
    plan
}

/// ConsumerProtocolSubscription v0 (topics only), with its version prefix.
fn encode_subscription(topics: &[String]) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&0i16.to_be_bytes());
    ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .encode(&mut buf, 0)
        .context("encoding the group subscription")?;
    Ok(buf.freeze())
}

/// ConsumerProtocolAssignment v0, with its version prefix.
fn encode_assignment(topics: &BTreeMap<String, Vec<i32>>) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&0i16.to_be_bytes());
    ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            topics
                .iter()
                .map(|(t, ps)| {
                    TopicPartition::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps.clone())
                })
                .collect(),
        )
        .encode(&mut buf, 0)
        .context("encoding a group assignment")?;
    Ok(buf.freeze())
}

/// The topics of a member's ConsumerProtocolSubscription (any version: they come first after the version).
/// The bytes come from another client through the broker, so every count and length is checked against the bytes
/// present before anything is allocated.
fn decode_subscription_topics(bytes: &[u8]) -> Result<Vec<String>> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<std::ops::Range<usize>> {
        if n > bytes.len() - at {
            bail!(
                "subscription truncated: needs {n} bytes, {} left",
                bytes.len() - at
            );
        }
        at += n;
        Ok(at - n..at)
    };
    let r = take(2)?;
    let version = i16::from_be_bytes([bytes[r.start], bytes[r.start + 1]]);
    if version < 0 {
        bail!("subscription version {version}");
    }
    let r = take(4)?;
    let count = i32::from_be_bytes([
        bytes[r.start],
        bytes[r.start + 1],
        bytes[r.start + 2],
        bytes[r.start + 3],
    ]);
    let count = usize::try_from(count).map_err(|_| anyhow!("subscription topic count {count}"))?;
    // Each topic takes at least its 2-byte length.
    if count > bytes.len() / 2 {
        bail!(
            "subscription claims {count} topics in {} bytes",
            bytes.len()
        );
    }
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let r = take(2)?;
        let len = i16::from_be_bytes([bytes[r.start], bytes[r.start + 1]]);
        let len =
            usize::try_from(len).map_err(|_| anyhow!("subscription topic name length {len}"))?;
        let name = std::str::from_utf8(&bytes[take(len)?])
            .context("subscription topic name is not UTF-8")?;
        topics.push(name.to_string());
    }
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        entries
            .iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn counts(entries: &[(&str, i32)]) -> BTreeMap<String, i32> {
        entries.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    #[test]
    fn range_assignor_matches_kafka() {
        // Kafka's RangeAssignor javadoc: two consumers, two topics of three partitions each.
        let plan = range_assign(
            &subs(&[("C0", &["t0", "t1"]), ("C1", &["t0", "t1"])]),
            &counts(&[("t0", 3), ("t1", 3)]),
        );
        assert_eq!(plan["C0"]["t0"], vec![0, 1]);
        assert_eq!(plan["C0"]["t1"], vec![0, 1]);
        assert_eq!(plan["C1"]["t0"], vec![2]);
        assert_eq!(plan["C1"]["t1"], vec![2]);
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        let plan = range_assign(
            &subs(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]),
            &counts(&[("t", 2)]),
        );
        assert_eq!(plan["a"]["t"], vec![0]);
        assert_eq!(plan["b"]["t"], vec![1]);
        assert!(plan["c"].is_empty(), "c is listed with nothing");
        // A topic nobody subscribes to, or that does not exist, is not assigned.
        let plan = range_assign(&subs(&[("a", &["gone"])]), &counts(&[("other", 4)]));
        assert!(plan["a"].is_empty());
    }

    #[test]
    fn every_partition_is_assigned_exactly_once() {
        for members in 1..6 {
            for partitions in 0..12 {
                let s: BTreeMap<String, Vec<String>> = (0..members)
                    .map(|m| (format!("m{m}"), vec!["t".to_string()]))
                    .collect();
                let plan = range_assign(&s, &counts(&[("t", partitions)]));
                let mut all: Vec<i32> = plan
                    .values()
                    .flat_map(|ts| ts.get("t").cloned().unwrap_or_default())
                    .collect();
                all.sort_unstable();
                assert_eq!(all, (0..partitions).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn subscriptions_round_trip_and_hostile_ones_are_refused() {
        let topics = vec!["orders".to_string(), "audit".to_string()];
        let bytes = encode_subscription(&topics).unwrap();
        assert_eq!(decode_subscription_topics(&bytes).unwrap(), topics);
        // Only the topics are read: every cut before the 4-byte user data length that follows them fails.
        for len in 0..bytes.len() - 4 {
            assert!(decode_subscription_topics(&bytes[..len]).is_err(), "{len}");
        }
        // Version 0 claiming 2^31-1 topics.
        assert!(decode_subscription_topics(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        // A negative name length.
        assert!(decode_subscription_topics(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]).is_err());
    }

    #[test]
    fn assignments_decode_with_the_crates_decoder() {
        let mut topics = BTreeMap::new();
        topics.insert("orders".to_string(), vec![0, 2]);
        let bytes = encode_assignment(&topics).unwrap();
        let a = decode_assignment(&bytes).unwrap();
        assert_eq!(a.partitions, vec![("orders".to_string(), vec![0, 2])]);
    }
}
