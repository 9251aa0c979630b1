//! Consumer group administration: FindCoordinator, ListGroups, DescribeGroups (and ConsumerGroupDescribe for
//! KIP-848 groups), OffsetFetch, OffsetCommit, DeleteGroups; plus DescribeProducers, which goes to partition
//! leaders.
//!
//! Group requests must reach the group's coordinator (the leader of its `__consumer_offsets` partition), found
//! with FindCoordinator. A coordinator that is loading, moving or not yet created answers with a retriable error;
//! we then ask again where the coordinator is.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::messages::{
    describe_producers_request::TopicRequest,
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic},
    offset_fetch_request::OffsetFetchRequestGroup,
    ApiKey, ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest,
    DescribeProducersRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::assignment::{decode_assignment, Assignment};
use crate::client::{group_by_leader, topic_name, Client, TopicMetadata};
use crate::connection::Connection;
use crate::errors::{self, describe, error_name};

mod versions {
    pub const FIND_COORDINATOR: (i16, i16) = (0, 6);
    /// v4 added the state filter, v5 the type filter.
    pub const LIST_GROUPS: (i16, i16) = (0, 5);
    pub const LIST_GROUPS_STATES_FILTER: i16 = 4;
    pub const LIST_GROUPS_TYPES_FILTER: i16 = 5;
    pub const DESCRIBE_GROUPS: (i16, i16) = (0, 6);
    pub const CONSUMER_GROUP_DESCRIBE: (i16, i16) = (0, 1);
    /// v2+: a null topic list means "all topics"; v8+ batches groups. v10 names topics by id only.
    pub const OFFSET_FETCH: (i16, i16) = (2, 9);
    /// v10 names topics by id only.
    pub const OFFSET_COMMIT: (i16, i16) = (2, 9);
    pub const DELETE_GROUPS: (i16, i16) = (0, 2);
    pub const DESCRIBE_PRODUCERS: (i16, i16) = (0, 0);
    pub const OFFSET_DELETE: (i16, i16) = (0, 0);
}

/// FindCoordinator key type of a consumer group.
const KEY_TYPE_GROUP: i8 = 0;
/// Coordinator lookups before giving up (about 10 s with the delays used).
const COORDINATOR_ATTEMPTS: u32 = 12;

pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

/// The coordinator is somewhere else or not ready yet: find it again and retry.
fn coordinator_moved(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub node_id: i32,
    pub addr: String,
}

#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    /// None from brokers older than ListGroups v4.
    pub state: Option<String>,
    /// "consumer" for Kafka consumers (both protocols), "connect" for Connect workers, "" for others.
    pub protocol_type: String,
    /// "classic" or "consumer" (KIP-848); None from brokers older than ListGroups v5.
    pub group_type: Option<String>,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    /// The chosen assignor (classic groups) or the server-side assignor (KIP-848 groups).
    pub protocol: String,
    /// "classic" or "consumer" (KIP-848).
    pub group_type: String,
    pub coordinator: Coordinator,
    pub members: Vec<GroupMember>,
}

impl GroupDescription {
    /// Kafka lets offsets be reset (and groups be deleted) only when no member is active.
    pub fn is_inactive(&self) -> bool {
        matches!(self.state.as_str(), "Empty" | "Dead")
    }
}

#[derive(Debug, Clone)]
pub struct GroupMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignment: MemberAssignment,
}

#[derive(Debug, Clone)]
pub enum MemberAssignment {
    Decoded(Assignment),
    /// The group's protocol is not Kafka's consumer protocol (e.g. Connect): only the size is known.
    Opaque(usize),
    /// Claimed to be a consumer assignment but did not decode; the reason.
    Malformed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Per topic, per partition: the committed offset, or the per-partition error the broker gave.
pub type GroupOffsets = BTreeMap<String, BTreeMap<i32, Result<CommittedOffset, i16>>>;

#[derive(Debug, Clone)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// -1 when the producer has no open transaction on this partition.
    pub current_txn_start_offset: i64,
}

impl Client {
    /// The connection to a broker address, opened on first use.
    async fn connection_to(&mut self, addr: &str) -> Result<&mut Connection> {
        if !self.connections.contains_key(addr) {
            let conn = Connection::connect_with(addr, self.options.clone())
                .await
                .with_context(|| {
                    format!(
                        "the group coordinator advertises itself as {addr} (bootstrap was {}); \
                     check its advertised listener",
                        self.bootstrap
                    )
                })?;
            self.connections.insert(addr.to_string(), conn);
        }
        Ok(self.connections.get_mut(addr).expect("inserted above"))
    }

    /// Where the group's coordinator is, waiting while it is not available yet (e.g. `__consumer_offsets` is
    /// being created on a fresh cluster).
    pub async fn find_coordinator(&mut self, group: &str) -> Result<Coordinator> {
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=COORDINATOR_ATTEMPTS {
            let conn = self.bootstrap_conn();
            let version = conn.pick_version(ApiKey::FindCoordinator, versions::FIND_COORDINATOR)?;
            let mut request = FindCoordinatorRequest::default().with_key_type(KEY_TYPE_GROUP);
            if version >= 4 {
                request.coordinator_keys = vec![StrBytes::from_string(group.to_string())];
            } else {
                request.key = StrBytes::from_string(group.to_string());
            }
            let response = conn.send_version(&request, version).await?;
            let (code, message, node_id, host, port) = if version >= 4 {
                let c = response.coordinators.into_iter().next().ok_or_else(|| {
                    anyhow!(
                        "broker answered FindCoordinator without a coordinator for group '{group}'"
                    )
                })?;
                (c.error_code, c.error_message, c.node_id.0, c.host, c.port)
            } else {
                (
                    response.error_code,
                    response.error_message,
                    response.node_id.0,
                    response.host,
                    response.port,
                )
            };
            match code {
                0 => {
                    return Ok(Coordinator {
                        node_id,
                        addr: format!("{}:{port}", host.as_str()),
                    })
                }
                code if coordinator_moved(code) && attempt < COORDINATOR_ATTEMPTS => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                INVALID_GROUP_ID => bail!("'{group}' is not a valid group id"),
                code => bail!(
                    "cannot find the coordinator of group '{group}': {}{}",
                    describe(code, message.as_deref()),
                    if coordinator_moved(code) {
                        "; the broker's group coordinator is not ready, try again shortly"
                    } else {
                        ""
                    }
                ),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The coordinator's connection, and the coordinator.
    async fn coordinator_conn(&mut self, group: &str) -> Result<(&mut Connection, Coordinator)> {
        let coordinator = self.find_coordinator(group).await?;
        let conn = self.connection_to(&coordinator.addr).await?;
        Ok((conn, coordinator))
    }

    /// Lists the groups of every broker (each lists the groups it coordinates), optionally filtered by state
    /// (e.g. "Stable", "Empty") and type ("classic", "consumer"). Filters need ListGroups v4 / v5.
    pub async fn list_groups(
        &mut self,
        states: &[String],
        types: &[String],
    ) -> Result<Vec<ListedGroup>> {
        self.refresh_brokers().await?;
        let mut nodes: Vec<i32> = self.brokers.keys().copied().collect();
        nodes.sort_unstable();
        let mut groups = BTreeMap::new();
        for node_id in nodes {
            let conn = self.node(node_id).await?;
            let version = conn.pick_version(ApiKey::ListGroups, versions::LIST_GROUPS)?;
            if !states.is_empty() && version < versions::LIST_GROUPS_STATES_FILTER {
                bail!(
                    "broker {node_id} speaks ListGroups up to v{version}; filtering by state needs v{} \
                     (Kafka 2.6+); list without --state",
                    versions::LIST_GROUPS_STATES_FILTER
                );
            }
            if !types.is_empty() && version < versions::LIST_GROUPS_TYPES_FILTER {
                bail!(
                    "broker {node_id} speaks ListGroups up to v{version}; filtering by type needs v{} \
                     (Kafka 3.8+); list without --type",
                    versions::LIST_GROUPS_TYPES_FILTER
                );
            }
            let request = ListGroupsRequest::default()
                .with_states_filter(
                    states
                        .iter()
                        .map(|s| StrBytes::from_string(s.clone()))
                        .collect(),
                )
                .with_types_filter(
                    types
                        .iter()
                        .map(|s| StrBytes::from_string(s.clone()))
                        .collect(),
                );
            let response = conn.send_version(&request, version).await?;
            match response.error_code {
                0 => {}
                code if coordinator_moved(code) => bail!(
                    "broker {node_id} cannot list its groups yet ({}); try again shortly",
                    error_name(code)
                ),
                code => bail!("broker {node_id} refused ListGroups: {}", error_name(code)),
            }
            for g in response.groups {
                let id = g.group_id.0.to_string();
                groups.insert(
                    id.clone(),
                    ListedGroup {
                        group_id: id,
                        state: (version >= 4).then(|| g.group_state.to_string()),
                        protocol_type: g.protocol_type.to_string(),
                        group_type: (version >= 5).then(|| g.group_type.to_string()),
                    },
                );
            }
        }
        Ok(groups.into_values().collect())
    }

    /// Describes a group: state, protocol and members with their decoded assignments. A group that does not
    /// exist comes back in state "Dead" with no members, as Kafka reports it.
    pub async fn describe_group(&mut self, group: &str) -> Result<GroupDescription> {
        for attempt in 1..=COORDINATOR_ATTEMPTS {
            let (conn, coordinator) = self.coordinator_conn(group).await?;
            let request = DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
            let (response, _) = conn.send(&request, versions::DESCRIBE_GROUPS).await?;
            let g =
                response.groups.into_iter().next().ok_or_else(|| {
                    anyhow!("broker answered DescribeGroups without group '{group}'")
                })?;
            match g.error_code {
                0 => {}
                code if coordinator_moved(code) && attempt < COORDINATOR_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    continue;
                }
                GROUP_ID_NOT_FOUND => {
                    // Kafka 4's coordinator answers this for a KIP-848 group ("not a classic group") and for
                    // a group it does not know.
                    return self.describe_consumer_group(group, coordinator).await;
                }
                GROUP_AUTHORIZATION_FAILED => {
                    bail!("not authorized to describe group '{group}' (GROUP_AUTHORIZATION_FAILED)")
                }
                code => bail!(
                    "cannot describe group '{group}': {}",
                    describe(code, g.error_message.as_deref())
                ),
            }
            let consumer_protocol = g.protocol_type.as_str() == "consumer";
            let members = g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    instance_id: m.group_instance_id.map(|s| s.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: if consumer_protocol {
                        match decode_assignment(&m.member_assignment) {
                            Ok(a) => MemberAssignment::Decoded(a),
                            Err(e) => MemberAssignment::Malformed(format!("{e:#}")),
                        }
                    } else {
                        MemberAssignment::Opaque(m.member_assignment.len())
                    },
                })
                .collect();
            return Ok(GroupDescription {
                group_id: group.to_string(),
                state: g.group_state.to_string(),
                protocol_type: g.protocol_type.to_string(),
                protocol: g.protocol_data.to_string(),
                group_type: "classic".into(),
                coordinator,
                members,
            });
        }
        unreachable!("the last attempt returns")
    }

    /// ConsumerGroupDescribe (KIP-848 groups). A group unknown to it too is reported as Dead, like Kafka's tools.
    async fn describe_consumer_group(
        &mut self,
        group: &str,
        coordinator: Coordinator,
    ) -> Result<GroupDescription> {
        let dead = GroupDescription {
            group_id: group.to_string(),
            state: "Dead".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            group_type: "classic".into(),
            coordinator: coordinator.clone(),
            members: Vec::new(),
        };
        let conn = self.connection_to(&coordinator.addr).await?;
        if conn
            .pick_version(
                ApiKey::ConsumerGroupDescribe,
                versions::CONSUMER_GROUP_DESCRIBE,
            )
            .is_err()
        {
            return Ok(dead);
        }
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_string()))]);
        let (response, _) = conn
            .send(&request, versions::CONSUMER_GROUP_DESCRIBE)
            .await?;
        let g = response.groups.into_iter().next().ok_or_else(|| {
            anyhow!("broker answered ConsumerGroupDescribe without group '{group}'")
        })?;
        match g.error_code {
            0 => {}
            GROUP_ID_NOT_FOUND => return Ok(dead),
            code => bail!(
                "cannot describe group '{group}': {}",
                describe(code, g.error_message.as_deref())
            ),
        }
        let members = g
            .members
            .into_iter()
            .map(|m| GroupMember {
                member_id: m.member_id.to_string(),
                instance_id: m.instance_id.map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment: MemberAssignment::Decoded(Assignment {
                    version: 0,
                    partitions: m
                        .assignment
                        .topic_partitions
                        .into_iter()
                        .map(|tp| (tp.topic_name.0.to_string(), tp.partitions))
                        .collect(),
                    user_data_len: 0,
                }),
            })
            .collect();
        Ok(GroupDescription {
            group_id: group.to_string(),
            state: capitalize_state(g.group_state.as_str()),
            protocol_type: "consumer".into(),
            protocol: g.assignor_name.to_string(),
            group_type: "consumer".into(),
            coordinator,
            members,
        })
    }

    /// The group's committed offsets for every topic it has committed to.
    pub async fn fetch_offsets(&mut self, group: &str) -> Result<GroupOffsets> {
        for attempt in 1..=COORDINATOR_ATTEMPTS {
            let (conn, _) = self.coordinator_conn(group).await?;
            let version = conn.pick_version(ApiKey::OffsetFetch, versions::OFFSET_FETCH)?;
            let group_id = GroupId(StrBytes::from_string(group.to_string()));
            let mut request = OffsetFetchRequest::default().with_require_stable(false);
            if version >= 8 {
                request.groups = vec![OffsetFetchRequestGroup::default()
                    .with_group_id(group_id)
                    .with_member_epoch(-1)
                    .with_topics(None)];
            } else {
                request.group_id = group_id;
                request.topics = None;
            }
            let response = conn.send_version(&request, version).await?;
            let (code, topics): (i16, Vec<(String, Vec<_>)>) = if version >= 8 {
                let g = response.groups.into_iter().next().ok_or_else(|| {
                    anyhow!("broker answered OffsetFetch without group '{group}'")
                })?;
                let topics = g
                    .topics
                    .into_iter()
                    .map(|t| {
                        let parts = t
                            .partitions
                            .into_iter()
                            .map(|p| {
                                (
                                    p.partition_index,
                                    p.error_code,
                                    p.committed_offset,
                                    p.committed_leader_epoch,
                                    p.metadata,
                                )
                            })
                            .collect();
                        (t.name.0.to_string(), parts)
                    })
                    .collect();
                (g.error_code, topics)
            } else {
                let topics = response
                    .topics
                    .into_iter()
                    .map(|t| {
                        let parts = t
                            .partitions
                            .into_iter()
                            .map(|p| {
                                (
                                    p.partition_index,
                                    p.error_code,
                                    p.committed_offset,
                                    p.committed_leader_epoch,
                                    p.metadata,
                                )
                            })
                            .collect();
                        (t.name.0.to_string(), parts)
                    })
                    .collect();
                (response.error_code, topics)
            };
            match code {
                0 => {}
                code if coordinator_moved(code) && attempt < COORDINATOR_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    continue;
                }
                GROUP_ID_NOT_FOUND => return Ok(GroupOffsets::new()),
                code => bail!(
                    "cannot fetch the committed offsets of group '{group}': {}",
                    error_name(code)
                ),
            }
            let mut out = GroupOffsets::new();
            for (topic, parts) in topics {
                let entry = out.entry(topic).or_default();
                for (partition, code, offset, leader_epoch, metadata) in parts {
                    let value = if code != 0 {
                        Err(code)
                    } else {
                        Ok(CommittedOffset {
                            offset,
                            leader_epoch,
                            metadata: metadata.map(|m| m.to_string()),
                        })
                    };
                    entry.insert(partition, value);
                }
            }
            return Ok(out);
        }
        unreachable!("the last attempt returns")
    }

    /// Commits offsets as an administrator (generation -1, no member id), which the coordinator accepts only
    /// while the group has no active members. Returns the per-partition error codes (0 = committed).
    pub async fn commit_offsets(
        &mut self,
        group: &str,
        topic: &str,
        offsets: &BTreeMap<i32, i64>,
    ) -> Result<BTreeMap<i32, i16>> {
        for attempt in 1..=COORDINATOR_ATTEMPTS {
            let (conn, _) = self.coordinator_conn(group).await?;
            let request = offset_commit_request(group, -1, "", topic, offsets);
            let (response, _) = conn.send(&request, versions::OFFSET_COMMIT).await?;
            let results: BTreeMap<i32, i16> = response
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            if attempt < COORDINATOR_ATTEMPTS && results.values().any(|&c| coordinator_moved(c)) {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                continue;
            }
            return Ok(results);
        }
        unreachable!("the last attempt returns")
    }

    /// Deletes groups, each at its coordinator. Returns each group's error code (0 = deleted).
    pub async fn delete_groups(&mut self, groups: &[String]) -> Result<Vec<(String, i16)>> {
        let mut out = Vec::new();
        for group in groups {
            let mut result = None;
            for attempt in 1..=COORDINATOR_ATTEMPTS {
                let (conn, _) = self.coordinator_conn(group).await?;
                let request = DeleteGroupsRequest::default()
                    .with_groups_names(vec![GroupId(StrBytes::from_string(group.clone()))]);
                let (response, _) = conn.send(&request, versions::DELETE_GROUPS).await?;
                let code = response
                    .results
                    .into_iter()
                    .find(|r| r.group_id.0.as_str() == group)
                    .map(|r| r.error_code)
                    .ok_or_else(|| {
                        anyhow!("broker answered DeleteGroups without a result for '{group}'")
                    })?;
                if coordinator_moved(code) && attempt < COORDINATOR_ATTEMPTS {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    continue;
                }
                result = Some(code);
                break;
            }
            out.push((group.clone(), result.expect("the last attempt sets it")));
        }
        Ok(out)
    }

    /// OffsetDelete: removes the group's committed offsets for these partitions of `topic`. Kafka refuses it
    /// (GROUP_SUBSCRIBED_TO_TOPIC per partition) while an active member is subscribed to the topic. Returns the
    /// group-level error code (0 = none) and each partition's error code (0 = deleted).
    pub async fn delete_offsets(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<(i16, BTreeMap<i32, i16>)> {
        for attempt in 1..=COORDINATOR_ATTEMPTS {
            let (conn, coordinator) = self.coordinator_conn(group).await?;
            if conn
                .pick_version(ApiKey::OffsetDelete, versions::OFFSET_DELETE)
                .is_err()
            {
                bail!(
                    "the coordinator of group '{group}' (broker {}) does not support OffsetDelete (Kafka 2.4+, \
                     KIP-496); delete the whole group with `annal group delete {group}` instead",
                    coordinator.node_id
                );
            }
            let request = OffsetDeleteRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
                .with_topics(vec![OffsetDeleteRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&p| {
                                OffsetDeleteRequestPartition::default().with_partition_index(p)
                            })
                            .collect(),
                    )]);
            let (response, _) = conn.send(&request, versions::OFFSET_DELETE).await?;
            if coordinator_moved(response.error_code) && attempt < COORDINATOR_ATTEMPTS {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                continue;
            }
            let results = response
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            return Ok((response.error_code, results));
        }
        unreachable!("the last attempt returns")
    }

    /// DescribeProducers for the given partitions, asking each partition's leader (only the leader keeps the
    /// producer state). Per partition: the active producers, or the broker's error.
    pub async fn describe_producers(
        &mut self,
        topic: &TopicMetadata,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Result<Vec<ProducerInfo>, String>>> {
        let mut out = BTreeMap::new();
        for (leader, parts) in group_by_leader(topic, partitions)? {
            let request =
                DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                    .with_name(topic_name(&topic.name))
                    .with_partition_indexes(parts.iter().map(|p| p.index).collect())]);
            let conn = self.node(leader).await?;
            if conn
                .pick_version(ApiKey::DescribeProducers, versions::DESCRIBE_PRODUCERS)
                .is_err()
            {
                bail!(
                    "broker {leader} does not support DescribeProducers (Kafka 2.8+ / KIP-664); \
                     it cannot list producers"
                );
            }
            let (response, _) = conn.send(&request, versions::DESCRIBE_PRODUCERS).await?;
            for p in response.topics.into_iter().flat_map(|t| t.partitions) {
                let value = match p.error_code {
                    0 => Ok(p
                        .active_producers
                        .into_iter()
                        .map(|s| ProducerInfo {
                            producer_id: s.producer_id.0,
                            epoch: s.producer_epoch,
                            last_sequence: s.last_sequence,
                            last_timestamp: s.last_timestamp,
                            coordinator_epoch: s.coordinator_epoch,
                            current_txn_start_offset: s.current_txn_start_offset,
                        })
                        .collect()),
                    code => Err(describe(code, p.error_message.as_deref())),
                };
                out.insert(p.partition_index, value);
            }
        }
        for p in partitions {
            if !out.contains_key(p) {
                bail!(
                    "broker did not describe the producers of partition {p} of topic '{}'",
                    topic.name
                );
            }
        }
        Ok(out)
    }
}

/// ConsumerGroupDescribe states are lower-case ("stable"); DescribeGroups and Kafka's tools say "Stable".
/// An OffsetCommit of `offsets` (partition -> next offset to consume) of one topic, with no leader epoch or
/// metadata and the broker's retention: as an administrator (generation -1, no member id) or as a group member.
pub(crate) fn offset_commit_request(
    group: &str,
    generation: i32,
    member_id: &str,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(&partition, &offset)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(partition)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1)
                            .with_committed_metadata(Some(StrBytes::from_static_str("")))
                    })
                    .collect(),
            )])
}

fn capitalize_state(state: &str) -> String {
    let mut chars = state.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The error codes a group command explains rather than just names.
pub fn group_error(group: &str, code: i16) -> String {
    match code {
        NON_EMPTY_GROUP => format!(
            "group '{group}' still has active members (NON_EMPTY_GROUP); stop its consumers first \
             (see them with `annal group describe {group}`)"
        ),
        GROUP_ID_NOT_FOUND => format!(
            "group '{group}' does not exist (GROUP_ID_NOT_FOUND); list groups with `annal group list`"
        ),
        GROUP_AUTHORIZATION_FAILED => {
            format!("not authorized for group '{group}' (GROUP_AUTHORIZATION_FAILED)")
        }
        INVALID_GROUP_ID => format!("'{group}' is not a valid group id (INVALID_GROUP_ID)"),
        UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS => format!(
            "group '{group}' has active members ({}); offsets can only be changed while the group is empty: \
             stop its consumers first",
            error_name(code)
        ),
        GROUP_SUBSCRIBED_TO_TOPIC => format!(
            "an active member of group '{group}' is subscribed to the topic (GROUP_SUBSCRIBED_TO_TOPIC); \
             stop its consumers first (see them with `annal group describe {group}`)"
        ),
        errors::UNKNOWN_TOPIC_OR_PARTITION => {
            "the topic or partition does not exist (UNKNOWN_TOPIC_OR_PARTITION)".to_string()
        }
        code => error_name(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_like_kafka_tools() {
        assert_eq!(capitalize_state("stable"), "Stable");
        assert_eq!(capitalize_state("Empty"), "Empty");
        assert_eq!(capitalize_state(""), "");
    }

    #[test]
    fn group_errors_say_what_to_do() {
        assert!(group_error("g", NON_EMPTY_GROUP).contains("stop its consumers"));
        assert!(group_error("g", GROUP_ID_NOT_FOUND).contains("annal group list"));
        assert_eq!(group_error("g", 7), "REQUEST_TIMED_OUT");
    }
}
