//! OffsetCommit, OffsetFetch, OffsetDelete, and the expiry of old offsets (`offsets.retention.minutes`).

use std::time::Instant;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;

use super::classic::{s, wall_ms, GroupState, OffsetEntry, State};
use super::records;
use super::store::Record;
use super::{code, CommittedOffset, TopicCatalog};

/// A partition's answer in an OffsetFetch.
struct Fetched {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: String,
    error: i16,
}

impl State {
    pub fn offset_commit(
        &mut self,
        req: OffsetCommitRequest,
        version: i16,
        topics: &dyn TopicCatalog,
        now: Instant,
    ) -> OffsetCommitResponse {
        let group_id = req.group_id.0.to_string();
        // As Kafka, partitions of topics that do not exist are refused before the group is looked at; a commit
        // of only such partitions leaves no trace.
        let exists = |topic: &str, p: i32| topics.has_partition(topic, p);
        let any_known = req.topics.iter().any(|t| {
            t.partitions
                .iter()
                .any(|p| exists(t.name.0.as_str(), p.partition_index))
        });
        let error = if any_known {
            self.validate_commit(&req, version, now)
        } else {
            code::NONE
        };
        let now_ms = wall_ms();
        let mut resp = OffsetCommitResponse::default();
        let mut to_write: Vec<(String, i32, OffsetEntry)> = Vec::new();
        for topic in &req.topics {
            let mut t = OffsetCommitResponseTopic::default().with_name(topic.name.clone());
            for p in &topic.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or("");
                let e = if !exists(topic.name.0.as_str(), p.partition_index) {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                } else if error != code::NONE {
                    error
                } else if metadata.len() > self.config.offset_metadata_max_bytes {
                    code::OFFSET_METADATA_TOO_LARGE
                } else {
                    to_write.push((
                        topic.name.0.to_string(),
                        p.partition_index,
                        OffsetEntry {
                            offset: p.committed_offset,
                            leader_epoch: if version >= 6 {
                                p.committed_leader_epoch
                            } else {
                                -1
                            },
                            metadata: metadata.to_string(),
                            commit_timestamp: now_ms,
                            // v2-v4 carry a retention time; -1 means the broker's default.
                            expire_timestamp: (version <= 4 && req.retention_time_ms >= 0)
                                .then(|| now_ms.saturating_add(req.retention_time_ms)),
                        },
                    ));
                    code::NONE
                };
                t.partitions.push(
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(e),
                );
            }
            resp.topics.push(t);
        }
        if to_write.is_empty() {
            return resp;
        }
        let group = self.group_mut_or_create(&group_id);
        let records: Vec<Record> = to_write
            .iter()
            .map(|(t, p, e)| group.offset_record(t, *p, e))
            .collect();
        let partition = group.partition;
        // The commit is in the log before it is visible (and before the answer); a failed write changes nothing.
        if self.writer.append(partition, &records) {
            let group = self.groups.get_mut(&group_id).expect("created above");
            for (t, p, e) in to_write {
                group.offsets.insert((t, p), e);
            }
        } else {
            fail_commit(&mut resp, code::COORDINATOR_NOT_AVAILABLE);
            if let Some(g) = self.groups.get(&group_id) {
                if g.state == GroupState::Empty
                    && g.persisted_metadata.is_none()
                    && g.persisted_consumer.is_empty()
                    && g.offsets.is_empty()
                    && g.members.is_empty()
                {
                    self.groups.remove(&group_id);
                }
            }
        }
        resp
    }

    /// Kafka's `ClassicGroup.validateOffsetCommit`; NONE when the commit may proceed.
    pub(super) fn validate_commit(
        &mut self,
        req: &OffsetCommitRequest,
        version: i16,
        now: Instant,
    ) -> i16 {
        if req.group_id.0.is_empty() {
            return code::INVALID_GROUP_ID;
        }
        let generation = req.generation_id_or_member_epoch;
        let member_id = req.member_id.as_str();
        let instance_id = req.group_instance_id.as_deref();
        let Some(group) = self.groups.get_mut(req.group_id.0.as_str()) else {
            // Standalone consumers and admin tools commit with generation -1: the group is created (empty).
            return if generation < 0 {
                code::NONE
            } else if version >= 9 {
                code::GROUP_ID_NOT_FOUND
            } else {
                code::ILLEGAL_GENERATION
            };
        };
        if group.state == GroupState::Dead {
            return code::COORDINATOR_NOT_AVAILABLE;
        }
        if let Some(cg) = &group.consumer {
            return super::consumer::validate_member_epoch(cg, member_id, generation);
        }
        if generation < 0 && group.state == GroupState::Empty {
            return code::NONE;
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            if let Some(inst) = instance_id {
                match group
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(inst))
                {
                    None => return code::UNKNOWN_MEMBER_ID,
                    Some(m) if m.id != member_id => return code::FENCED_INSTANCE_ID,
                    Some(_) => {}
                }
            } else if !group.members.contains_key(member_id) {
                return code::UNKNOWN_MEMBER_ID;
            }
            if generation != group.generation {
                return code::ILLEGAL_GENERATION;
            }
        } else {
            // No member id and no generation: only allowed while the group is empty.
            return code::UNKNOWN_MEMBER_ID;
        }
        if group.state == GroupState::CompletingRebalance {
            return code::REBALANCE_IN_PROGRESS;
        }
        // A commit from a member counts as a sign of life, as in Kafka.
        group.touch_member(member_id, now);
        code::NONE
    }

    pub fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default();
        if version >= 8 {
            for g in &req.groups {
                let requested: Option<Vec<(String, Vec<i32>)>> = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let (mut error, mut topics) = self.fetch_group(g.group_id.0.as_str(), requested);
                // v9+: a consumer-protocol member fetching must be a member with its current epoch.
                if let (Some(member), Some(cg)) = (
                    g.member_id.as_ref().filter(|_| g.member_epoch >= 0),
                    self.groups
                        .get(g.group_id.0.as_str())
                        .and_then(|x| x.consumer.as_ref()),
                ) {
                    let e =
                        super::consumer::validate_member_epoch(cg, member.as_str(), g.member_epoch);
                    if e != code::NONE {
                        error = e;
                        topics.clear();
                    }
                }
                resp.groups.push(
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(error)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(name, parts)| {
                                    OffsetFetchResponseTopics::default()
                                        .with_name(s(&name).into())
                                        .with_partitions(
                                            parts
                                                .into_iter()
                                                .map(|f| {
                                                    OffsetFetchResponsePartitions::default()
                                                        .with_partition_index(f.partition)
                                                        .with_committed_offset(f.offset)
                                                        .with_committed_leader_epoch(f.leader_epoch)
                                                        .with_metadata(Some(s(&f.metadata)))
                                                        .with_error_code(f.error)
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        ),
                );
            }
        } else {
            let requested: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let (error, topics) = self.fetch_group(req.group_id.0.as_str(), requested);
            if version >= 2 {
                resp.error_code = error;
            }
            resp.topics = topics
                .into_iter()
                .map(|(name, parts)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(s(&name).into())
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|f| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(f.partition)
                                        .with_committed_offset(f.offset)
                                        .with_committed_leader_epoch(if version >= 5 {
                                            f.leader_epoch
                                        } else {
                                            -1
                                        })
                                        .with_metadata(Some(s(&f.metadata)))
                                        .with_error_code(f.error)
                                })
                                .collect(),
                        )
                })
                .collect();
        }
        resp
    }

    /// Offsets of one group: the requested partitions (-1 where none is committed), or all when `requested` is
    /// `None`.
    fn fetch_group(
        &self,
        group_id: &str,
        requested: Option<Vec<(String, Vec<i32>)>>,
    ) -> (i16, Vec<(String, Vec<Fetched>)>) {
        if group_id.is_empty() {
            return (code::INVALID_GROUP_ID, Vec::new());
        }
        let group = self
            .groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead);
        let found = |topic: &str, partition: i32| -> Fetched {
            match group.and_then(|g| g.offsets.get(&(topic.to_string(), partition))) {
                Some(e) => Fetched {
                    partition,
                    offset: e.offset,
                    leader_epoch: e.leader_epoch,
                    metadata: e.metadata.clone(),
                    error: code::NONE,
                },
                None => Fetched {
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    error: code::NONE,
                },
            }
        };
        let topics = match requested {
            Some(list) => list
                .into_iter()
                .map(|(topic, parts)| {
                    let fetched = parts.iter().map(|&p| found(&topic, p)).collect();
                    (topic, fetched)
                })
                .collect(),
            None => {
                let mut out: Vec<(String, Vec<Fetched>)> = Vec::new();
                if let Some(g) = group {
                    for ((topic, partition), _) in g.offsets.iter() {
                        if out.last().is_none_or(|(t, _)| t != topic) {
                            out.push((topic.clone(), Vec::new()));
                        }
                        out.last_mut()
                            .expect("pushed")
                            .1
                            .push(found(topic, *partition));
                    }
                }
                out
            }
        };
        (code::NONE, topics)
    }

    pub fn offset_delete(
        &mut self,
        req: OffsetDeleteRequest,
        topics: &dyn TopicCatalog,
    ) -> OffsetDeleteResponse {
        let exists = |topic: &str, p: i32| topics.has_partition(topic, p);
        let mut resp = OffsetDeleteResponse::default();
        let group_id = req.group_id.0.to_string();
        let Some(group) = self
            .groups
            .get(&group_id)
            .filter(|g| g.state != GroupState::Dead)
        else {
            resp.error_code = code::GROUP_ID_NOT_FOUND;
            return resp;
        };
        // A group with members may only lose offsets of topics it does not subscribe to (consumer groups whose
        // subscriptions we can read); other non-empty groups not at all.
        let subscribed = group.subscribed_topics();
        let active = group.state != GroupState::Empty || group.has_members();
        if active && subscribed.is_none() && group.protocol_type.as_deref() != Some("consumer") {
            resp.error_code = code::NON_EMPTY_GROUP;
            return resp;
        }
        let mut tombstones = Vec::new();
        let mut deleted = Vec::new();
        for topic in &req.topics {
            let name = topic.name.0.to_string();
            let blocked = active && subscribed.as_ref().is_none_or(|set| set.contains(&name));
            let mut t = OffsetDeleteResponseTopic::default().with_name(topic.name.clone());
            for p in &topic.partitions {
                let e = if !exists(&name, p.partition_index) {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                } else if blocked {
                    code::GROUP_SUBSCRIBED_TO_TOPIC
                } else {
                    if group
                        .offsets
                        .contains_key(&(name.clone(), p.partition_index))
                    {
                        tombstones.push(Record {
                            key: records::offset_key(&group_id, &name, p.partition_index),
                            value: None,
                        });
                        deleted.push((name.clone(), p.partition_index));
                    }
                    code::NONE
                };
                t.partitions.push(
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(e),
                );
            }
            resp.topics.push(t);
        }
        let partition = group.partition;
        if self.writer.append(partition, &tombstones) {
            let group = self.groups.get_mut(&group_id).expect("checked above");
            for k in deleted {
                group.offsets.remove(&k);
            }
        } else {
            resp.error_code = code::COORDINATOR_NOT_AVAILABLE;
            resp.topics.clear();
        }
        resp
    }

    pub fn committed_offsets(&self, group: &str) -> Vec<CommittedOffset> {
        self.committed_offsets_where(group, |_| true)
    }

    /// The group's committed offsets on the topics `topic` accepts.
    pub fn committed_offsets_where(
        &self,
        group: &str,
        topic: impl Fn(&str) -> bool,
    ) -> Vec<CommittedOffset> {
        let Some(g) = self.groups.get(group) else {
            return Vec::new();
        };
        g.offsets
            .iter()
            .filter(|((t, _), _)| topic(t))
            .map(|((topic, partition), e)| CommittedOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: e.offset,
                leader_epoch: e.leader_epoch,
                metadata: e.metadata.clone(),
                commit_timestamp_ms: e.commit_timestamp,
            })
            .collect()
    }

    /// Kafka's offset expiry (KIP-211): an empty group's offsets expire `offsets.retention.minutes` after the
    /// group became empty; a standalone (no protocol) group's offsets that long after their commit; a Stable
    /// consumer group's offsets of topics it no longer subscribes to, that long after their commit. An empty
    /// group with no offsets left is deleted.
    pub fn expire_offsets(&mut self, now_ms: i64) {
        let retention = self.config.offsets_retention_ms;
        let mut writes: Vec<(u32, Vec<Record>)> = Vec::new();
        let mut dead_groups = Vec::new();
        for g in self.groups.values_mut() {
            // Where each offset's retention period starts: its commit, or when the group became empty.
            let empty_since: Option<i64> = match (&g.protocol_type, g.state) {
                (_, _) if g.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) => None,
                (None, _) => None,
                (Some(_), GroupState::Empty) => Some(g.state_timestamp_ms),
                (Some(t), GroupState::Stable) if t == "consumer" => None,
                _ => continue,
            };
            let base = |e: &OffsetEntry| empty_since.unwrap_or(e.commit_timestamp);
            let keep_subscribed = if g.state == GroupState::Stable || g.has_members() {
                match g.subscribed_topics() {
                    Some(t) => Some(t),
                    None => continue,
                }
            } else {
                None
            };
            let expired: Vec<(String, i32)> = g
                .offsets
                .iter()
                .filter(|((topic, _), e)| {
                    if keep_subscribed.as_ref().is_some_and(|t| t.contains(topic)) {
                        return false;
                    }
                    let deadline = e
                        .expire_timestamp
                        .unwrap_or_else(|| base(e).saturating_add(retention));
                    now_ms >= deadline
                })
                .map(|(k, _)| k.clone())
                .collect();
            let mut records: Vec<Record> = expired
                .iter()
                .map(|(t, p)| Record {
                    key: records::offset_key(&g.id, t, *p),
                    value: None,
                })
                .collect();
            for k in &expired {
                g.offsets.remove(k);
            }
            if !expired.is_empty() {
                tracing::info!(group = %g.id, partitions = expired.len(), "expired committed offsets");
            }
            if g.state == GroupState::Empty && !g.has_member_or_offsets() {
                if g.persisted_metadata.is_some() {
                    records.push(Record {
                        key: records::group_key(&g.id),
                        value: None,
                    });
                }
                records.extend(g.persisted_consumer.keys().map(|k| Record {
                    key: k.clone(),
                    value: None,
                }));
                dead_groups.push(g.id.clone());
            }
            if !records.is_empty() {
                writes.push((g.partition, records));
            }
        }
        for (partition, records) in writes {
            self.writer.append(partition, &records);
        }
        for id in dead_groups {
            self.groups.remove(&id);
        }
    }
}

/// Turns every partition of a commit answer into `error` (the write failed).
pub(super) fn fail_commit(resp: &mut OffsetCommitResponse, error: i16) {
    for t in &mut resp.topics {
        for p in &mut t.partitions {
            if p.error_code == code::NONE {
                p.error_code = error;
            }
        }
    }
}

/// An OffsetCommit answer that refuses every partition with `error` (NOT_COORDINATOR and the like).
pub(super) fn commit_error(req: &OffsetCommitRequest, error: i16) -> OffsetCommitResponse {
    let mut resp = OffsetCommitResponse::default();
    for topic in &req.topics {
        let mut t = OffsetCommitResponseTopic::default().with_name(topic.name.clone());
        for p in &topic.partitions {
            t.partitions.push(
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(error),
            );
        }
        resp.topics.push(t);
    }
    resp
}

/// An OffsetFetch answer (v0-7, one group) that refuses the group with `error`: the top-level code from v2, and
/// on every requested partition (where v0-1 carry it), as Kafka answers.
pub(super) fn fetch_error(
    req: &OffsetFetchRequest,
    version: i16,
    error: i16,
) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if version >= 2 {
        resp.error_code = error;
    }
    for topic in req.topics.iter().flatten() {
        resp.topics.push(
            OffsetFetchResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(
                    topic
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_error_code(error)
                        })
                        .collect(),
                ),
        );
    }
    resp
}
