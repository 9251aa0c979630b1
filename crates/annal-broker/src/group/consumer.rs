//! Kafka's consumer group protocol (KIP-848): `ConsumerGroupHeartbeat` with server-side assignors (`uniform`,
//! `range`) and `ConsumerGroupDescribe`. Follows Kafka's `GroupMetadataManager.consumerGroupHeartbeat` and its
//! `CurrentAssignmentBuilder` reconciliation: a member first gives up (revokes) partitions it keeps no more,
//! then gets the new ones once their previous owners have released them.
//!
//! The group's state is logged as Kafka logs it ([`super::consumer_records`], record types 3-8: group epoch,
//! subscribed topics, members, target assignment, each member's current assignment) before an answer that
//! depends on it, and a coordinator that takes the group over (a restart, a failover) replays it: members carry
//! on in their epochs with their partitions, and no partition is handed to a newcomer before its previous owner
//! has released it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_describe_response as cgd;
use kafka_protocol::messages::consumer_group_heartbeat_response as cgh;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::classic::{s, wall_ms, Group, GroupState, State};
use super::consumer_records::{self as rec, Key};
use super::{code, ClientInfo, TopicCatalog};

/// Partitions by topic id.
pub(super) type Parts = rec::Parts;

/// Server-side assignors, as Kafka names them; the first is the default (`group.consumer.assignors`).
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

pub(super) struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    rebalance_timeout_ms: i32,
    pub subscribed: BTreeSet<String>,
    assignor: Option<String>,
    pub assigned: Parts,
    pending_revocation: Parts,
    session_deadline: Instant,
    revocation_deadline: Option<Instant>,
    /// A static member that left with epoch -2: its place (and assignment) wait for its instance to return.
    left_static: bool,
}

#[derive(Default)]
pub(super) struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    target: BTreeMap<String, Parts>,
    assignor: String,
    /// Topic name → (id, partition count) of every subscribed topic, as of the last epoch bump.
    subscription_metadata: BTreeMap<String, (Uuid, i32)>,
}

impl ConsumerGroup {
    /// The records that describe this group in `__consumer_offsets`, encoded key to encoded value: what a
    /// coordinator replaying the log rebuilds it from ([`ConsumerGroup::from_records`]).
    pub(super) fn records(&self, group: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let group = group.to_string();
        let mut out = BTreeMap::new();
        out.insert(
            Key::Metadata {
                group: group.clone(),
            }
            .encode(),
            rec::epoch_value(self.group_epoch),
        );
        out.insert(
            Key::PartitionMetadata {
                group: group.clone(),
            }
            .encode(),
            rec::partition_metadata_value(&self.subscription_metadata),
        );
        out.insert(
            Key::TargetMetadata {
                group: group.clone(),
            }
            .encode(),
            rec::epoch_value(self.assignment_epoch),
        );
        for m in self.members.values() {
            let (g, id) = (&group, &m.id);
            out.insert(
                Key::Member {
                    group: g.clone(),
                    member: id.clone(),
                }
                .encode(),
                rec::member_value(&rec::MemberMetadata {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: m.assignor.clone(),
                }),
            );
            if let Some(target) = self.target.get(id) {
                out.insert(
                    Key::TargetMember {
                        group: g.clone(),
                        member: id.clone(),
                    }
                    .encode(),
                    rec::target_value(target),
                );
            }
            out.insert(
                Key::Current {
                    group: g.clone(),
                    member: id.clone(),
                }
                .encode(),
                rec::current_value(&rec::CurrentAssignment {
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    state: match m.state {
                        MemberState::Stable => rec::STATE_STABLE,
                        MemberState::UnrevokedPartitions => rec::STATE_UNREVOKED_PARTITIONS,
                        MemberState::UnreleasedPartitions => rec::STATE_UNRELEASED_PARTITIONS,
                    },
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                }),
            );
        }
        out
    }

    /// Rebuilds a group from its replayed records (what [`ConsumerGroup::records`] wrote). Undecodable records are
    /// skipped (logged); a member needs its metadata record, and starts with nothing assigned at epoch 0 if its
    /// assignment record is missing. Session timeouts start now, and a revocation in progress gets its member's
    /// rebalance timeout from now, as Kafka does when it loads a group.
    pub(super) fn from_records(
        group: &str,
        records: &BTreeMap<Vec<u8>, Vec<u8>>,
        now: Instant,
        session: Duration,
    ) -> ConsumerGroup {
        let mut cg = ConsumerGroup::default();
        let mut currents = BTreeMap::new();
        for (key, value) in records {
            let Some(key) = Key::decode(key) else {
                continue;
            };
            let decoded = match &key {
                Key::Metadata { .. } => rec::decode_epoch_value(value)
                    .map(|e| cg.group_epoch = e)
                    .is_some(),
                Key::PartitionMetadata { .. } => rec::decode_partition_metadata_value(value)
                    .map(|t| cg.subscription_metadata = t)
                    .is_some(),
                Key::TargetMetadata { .. } => rec::decode_epoch_value(value)
                    .map(|e| cg.assignment_epoch = e)
                    .is_some(),
                Key::TargetMember { member, .. } => rec::decode_target_value(value)
                    .map(|t| cg.target.insert(member.clone(), t))
                    .is_some(),
                Key::Current { member, .. } => rec::decode_current_value(value)
                    .map(|c| currents.insert(member.clone(), c))
                    .is_some(),
                Key::Member { member, .. } => rec::decode_member_value(value)
                    .map(|m| {
                        cg.members.insert(
                            member.clone(),
                            ConsumerMember {
                                id: member.clone(),
                                instance_id: m.instance_id,
                                rack_id: m.rack_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                                epoch: 0,
                                previous_epoch: -1,
                                state: MemberState::Stable,
                                rebalance_timeout_ms: m.rebalance_timeout_ms,
                                subscribed: m.subscribed,
                                assignor: m.server_assignor,
                                assigned: Parts::new(),
                                pending_revocation: Parts::new(),
                                session_deadline: now + session,
                                revocation_deadline: None,
                                left_static: false,
                            },
                        )
                    })
                    .is_some(),
            };
            if !decoded {
                tracing::warn!(%group, ?key, "skipping an undecodable consumer group record");
            }
        }
        for (id, c) in currents {
            let Some(m) = cg.members.get_mut(&id) else {
                continue;
            };
            m.epoch = c.epoch;
            m.previous_epoch = c.previous_epoch;
            m.left_static = c.epoch == -2;
            m.state = match c.state {
                rec::STATE_UNREVOKED_PARTITIONS => MemberState::UnrevokedPartitions,
                rec::STATE_UNRELEASED_PARTITIONS => MemberState::UnreleasedPartitions,
                _ => MemberState::Stable,
            };
            m.assigned = c.assigned;
            m.pending_revocation = c.pending_revocation;
            if m.state == MemberState::UnrevokedPartitions {
                m.revocation_deadline =
                    Some(now + Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64));
            }
        }
        cg.target.retain(|id, _| cg.members.contains_key(id));
        cg.assignor = cg
            .members
            .values()
            .filter_map(|m| m.assignor.clone())
            .next()
            .unwrap_or_else(|| ASSIGNORS[0].to_string());
        cg
    }

    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch != self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub fn subscribed_topics(&self) -> HashSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| std::iter::once(m.session_deadline).chain(m.revocation_deadline))
            .min()
    }

    /// The epoch (any non-negative value) of the member currently holding a partition, assigned or pending
    /// revocation; `None` when free.
    fn owner_of(&self, topic: &Uuid, partition: i32, except: &str) -> Option<&str> {
        self.members
            .values()
            .filter(|m| m.id != except)
            .find(|m| {
                m.assigned
                    .get(topic)
                    .is_some_and(|p| p.contains(&partition))
                    || m.pending_revocation
                        .get(topic)
                        .is_some_and(|p| p.contains(&partition))
            })
            .map(|m| m.id.as_str())
    }

    fn remove_member(&mut self, id: &str) {
        self.members.remove(id);
        self.target.remove(id);
        self.group_epoch += 1;
    }

    /// Recomputes the target assignment when the group epoch moved past it.
    fn maybe_compute_target(&mut self) {
        if self.assignment_epoch == self.group_epoch {
            return;
        }
        let preferred = self
            .members
            .values()
            .filter_map(|m| m.assignor.clone())
            .next()
            .unwrap_or_else(|| ASSIGNORS[0].to_string());
        self.assignor = preferred;
        let subs: BTreeMap<String, BTreeSet<Uuid>> = self
            .members
            .values()
            .map(|m| {
                let ids = m
                    .subscribed
                    .iter()
                    .filter_map(|t| self.subscription_metadata.get(t).map(|(id, _)| *id))
                    .collect();
                (m.id.clone(), ids)
            })
            .collect();
        let partitions: BTreeMap<Uuid, i32> = self
            .subscription_metadata
            .values()
            .map(|(id, n)| (*id, *n))
            .collect();
        self.target = if self.assignor == "range" {
            range_assign(&subs, &partitions)
        } else {
            uniform_assign(&subs, &partitions, &self.target)
        };
        self.assignment_epoch = self.group_epoch;
    }

    /// Kafka's `CurrentAssignmentBuilder.build` for one member.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Parts>, now: Instant) {
        let target_epoch = self.assignment_epoch;
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let Some(member) = self.members.get(member_id) else {
            return;
        };
        match member.state {
            MemberState::Stable if member.epoch == target_epoch => return,
            MemberState::UnrevokedPartitions if owns_any(owned, &member.pending_revocation) => {
                return
            }
            _ => {}
        }
        let (assigned_now, epoch_now, pending_now) = (
            member.assigned.clone(),
            member.epoch,
            member.pending_revocation.clone(),
        );
        let mut new_assigned = Parts::new();
        let mut revoke = Parts::new();
        let mut to_assign = Parts::new();
        let mut unreleased = false;
        let topics: BTreeSet<Uuid> = target.keys().chain(assigned_now.keys()).copied().collect();
        for topic in topics {
            let t = target.get(&topic).cloned().unwrap_or_default();
            let cur = assigned_now.get(&topic).cloned().unwrap_or_default();
            let keep: BTreeSet<i32> = cur.intersection(&t).copied().collect();
            let gone: BTreeSet<i32> = cur.difference(&keep).copied().collect();
            let mut add: BTreeSet<i32> = t.difference(&keep).copied().collect();
            let before = add.len();
            add.retain(|p| {
                self.owner_of(&topic, *p, member_id).is_none()
                    || pending_now.get(&topic).is_some_and(|s| s.contains(p))
            });
            unreleased |= add.len() != before;
            if !keep.is_empty() {
                new_assigned.insert(topic, keep);
            }
            if !gone.is_empty() {
                revoke.insert(topic, gone);
            }
            if !add.is_empty() {
                to_assign.insert(topic, add);
            }
        }
        let member = self.members.get_mut(member_id).expect("checked above");
        if !revoke.is_empty() && owns_any(owned, &revoke) {
            member.state = MemberState::UnrevokedPartitions;
            member.assigned = new_assigned;
            member.pending_revocation = revoke;
            member.revocation_deadline =
                Some(now + Duration::from_millis(member.rebalance_timeout_ms.max(0) as u64));
            set_epoch(member, epoch_now);
            return;
        }
        for (topic, parts) in to_assign {
            new_assigned.entry(topic).or_default().extend(parts);
        }
        member.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        member.assigned = new_assigned;
        member.pending_revocation = Parts::new();
        member.revocation_deadline = None;
        set_epoch(member, target_epoch);
    }
}

fn set_epoch(member: &mut ConsumerMember, epoch: i32) {
    if member.epoch != epoch {
        member.previous_epoch = member.epoch;
        member.epoch = epoch;
    }
}

/// Whether the client still reports any of `parts` as owned; an absent list means "unchanged", so yes.
fn owns_any(owned: Option<&Parts>, parts: &Parts) -> bool {
    let Some(owned) = owned else { return true };
    parts.iter().any(|(t, ps)| {
        owned
            .get(t)
            .is_some_and(|o| ps.iter().any(|p| o.contains(p)))
    })
}

/// Server-side `range`: per topic, the subscribed members in member-id order get contiguous ranges, the first
/// ones one extra partition.
fn range_assign(
    subs: &BTreeMap<String, BTreeSet<Uuid>>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Parts> {
    let mut out: BTreeMap<String, Parts> = subs.keys().map(|m| (m.clone(), Parts::new())).collect();
    for (topic, &count) in partitions {
        let members: Vec<&String> = subs
            .iter()
            .filter(|(_, t)| t.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if members.is_empty() {
            continue;
        }
        let (per, extra) = (
            count.max(0) as usize / members.len(),
            count.max(0) as usize % members.len(),
        );
        let mut next = 0i32;
        for (i, m) in members.iter().enumerate() {
            let n = per + usize::from(i < extra);
            let parts: BTreeSet<i32> = (next..next + n as i32).collect();
            next += n as i32;
            if !parts.is_empty() {
                out.get_mut(*m).expect("every member").insert(*topic, parts);
            }
        }
    }
    out
}

/// Server-side `uniform`: balanced and sticky. Members keep what they had (if still subscribed), free
/// partitions go to the least loaded subscribed member, then partitions move from the most to the least loaded
/// (among members subscribed to that topic) until counts differ by at most one where subscriptions allow.
fn uniform_assign(
    subs: &BTreeMap<String, BTreeSet<Uuid>>,
    partitions: &BTreeMap<Uuid, i32>,
    previous: &BTreeMap<String, Parts>,
) -> BTreeMap<String, Parts> {
    let mut owner: BTreeMap<(Uuid, i32), String> = BTreeMap::new();
    let mut load: BTreeMap<String, usize> = subs.keys().map(|m| (m.clone(), 0)).collect();
    for (m, parts) in previous {
        let Some(topics) = subs.get(m) else { continue };
        for (t, ps) in parts {
            let Some(&count) = partitions.get(t) else {
                continue;
            };
            if !topics.contains(t) {
                continue;
            }
            for &p in ps {
                if p < count && !owner.contains_key(&(*t, p)) {
                    owner.insert((*t, p), m.clone());
                    *load.get_mut(m).expect("subscribed member") += 1;
                }
            }
        }
    }
    for (t, &count) in partitions {
        for p in 0..count {
            if owner.contains_key(&(*t, p)) {
                continue;
            }
            let least = subs
                .iter()
                .filter(|(_, ts)| ts.contains(t))
                .map(|(m, _)| m)
                .min_by_key(|m| (load[*m], (*m).clone()));
            if let Some(m) = least {
                owner.insert((*t, p), m.clone());
                *load.get_mut(m).expect("member") += 1;
            }
        }
    }
    // Rebalance: move one partition at a time from the most to the least loaded eligible member.
    let total: usize = load.values().sum();
    for _ in 0..=total {
        let mut moved = false;
        let mut by_load: Vec<(String, usize)> = load.iter().map(|(m, l)| (m.clone(), *l)).collect();
        by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        'outer: for (heavy, hl) in &by_load {
            for (light, ll) in by_load.iter().rev() {
                if hl <= &(ll + 1) {
                    break;
                }
                let candidate = owner
                    .iter()
                    .rev()
                    .find(|((t, _), m)| *m == heavy && subs[light].contains(t))
                    .map(|(k, _)| *k);
                if let Some(k) = candidate {
                    owner.insert(k, light.clone());
                    *load.get_mut(heavy).expect("member") -= 1;
                    *load.get_mut(light).expect("member") += 1;
                    moved = true;
                    break 'outer;
                }
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Parts> = subs.keys().map(|m| (m.clone(), Parts::new())).collect();
    for ((t, p), m) in owner {
        out.get_mut(&m)
            .expect("member")
            .entry(t)
            .or_default()
            .insert(p);
    }
    out
}

fn to_parts(list: &[consumer_group_heartbeat_request::TopicPartitions]) -> Parts {
    let mut out = Parts::new();
    for tp in list {
        out.entry(tp.topic_id)
            .or_default()
            .extend(tp.partitions.iter().copied());
    }
    out
}

fn response_assignment(parts: &Parts) -> cgh::Assignment {
    cgh::Assignment::default().with_topic_partitions(
        parts
            .iter()
            .map(|(t, ps)| {
                cgh::TopicPartitions::default()
                    .with_topic_id(*t)
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

fn hb_error(error: i16, message: &str) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(error)
        .with_error_message(Some(s(message)))
}

impl State {
    /// A heartbeat, its changes to the group appended to the log before the answer (which the caller sends only
    /// once they are committed). A refused append answers COORDINATOR_NOT_AVAILABLE: the member retries, at the
    /// coordinator it finds then.
    pub fn consumer_heartbeat(
        &mut self,
        req: ConsumerGroupHeartbeatRequest,
        version: i16,
        client: &ClientInfo,
        catalog: &dyn TopicCatalog,
        now: Instant,
    ) -> ConsumerGroupHeartbeatResponse {
        let group_id = req.group_id.0.to_string();
        let resp = self.consumer_heartbeat_in_memory(req, version, client, catalog, now);
        let Some(group) = self.groups.get_mut(&group_id) else {
            return resp;
        };
        if !self.writer.persist_consumer(group) {
            return hb_error(
                code::COORDINATOR_NOT_AVAILABLE,
                "The group's new state could not be written to its __consumer_offsets partition; retry.",
            );
        }
        // An answer from state loaded from the log (no write of its own) also waits until that state is
        // committed: a leader elected next could not take it back.
        self.writer.wait_for_log_end(group.partition);
        resp
    }

    fn consumer_heartbeat_in_memory(
        &mut self,
        req: ConsumerGroupHeartbeatRequest,
        version: i16,
        client: &ClientInfo,
        catalog: &dyn TopicCatalog,
        now: Instant,
    ) -> ConsumerGroupHeartbeatResponse {
        let group_id = req.group_id.0.to_string();
        let epoch = req.member_epoch;
        let mut member_id = req.member_id.to_string();
        // Request validation (Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid).
        if group_id.is_empty() {
            return hb_error(code::INVALID_REQUEST, "GroupId can't be empty.");
        }
        if req
            .subscribed_topic_regex
            .as_ref()
            .is_some_and(|r| !r.is_empty())
        {
            return hb_error(code::INVALID_REQUEST, "Annal does not support regular expression subscriptions yet; subscribe to topic names.");
        }
        if let Some(a) = &req.server_assignor {
            if !ASSIGNORS.contains(&a.as_str()) {
                return hb_error(
                    code::UNSUPPORTED_ASSIGNOR,
                    &format!(
                        "Assignor {} is not supported; use one of {ASSIGNORS:?}.",
                        a.as_str()
                    ),
                );
            }
        }
        if epoch == 0 {
            if req.rebalance_timeout_ms == -1 {
                return hb_error(
                    code::INVALID_REQUEST,
                    "RebalanceTimeoutMs must be provided in first request.",
                );
            }
            if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
                return hb_error(
                    code::INVALID_REQUEST,
                    "TopicPartitions must be empty when (re-)joining.",
                );
            }
            if req.subscribed_topic_names.is_none() {
                return hb_error(
                    code::INVALID_REQUEST,
                    "SubscribedTopicNames must be set in first request.",
                );
            }
            if member_id.is_empty() {
                if version >= 1 {
                    return hb_error(code::INVALID_REQUEST, "MemberId can't be empty.");
                }
                member_id = Uuid::from_u128(rand::Rng::gen(&mut self.member_ids)).to_string();
            }
        } else if member_id.is_empty() {
            return hb_error(code::INVALID_REQUEST, "MemberId can't be empty.");
        } else if epoch == -2 && req.instance_id.is_none() {
            return hb_error(
                code::INVALID_REQUEST,
                "InstanceId can't be null when leaving with epoch -2.",
            );
        }
        let session = Duration::from_millis(self.config.consumer_session_timeout_ms.max(1) as u64);
        let interval = self.config.consumer_heartbeat_interval_ms;
        let max_size = self.config.max_size as usize;
        let partition = self.partition_for_group(&group_id);
        // The group: created on a join; an empty classic group converts, a classic one with members refuses.
        let group = match self.groups.get_mut(&group_id) {
            Some(g) => g,
            None if epoch == 0 => {
                self.groups.insert(
                    group_id.clone(),
                    Group::new_pub(group_id.clone(), partition),
                );
                self.groups.get_mut(&group_id).expect("inserted")
            }
            None => {
                return hb_error(
                    code::GROUP_ID_NOT_FOUND,
                    &format!("Group {group_id} not found."),
                )
            }
        };
        if group.consumer.is_none() {
            if !group.members.is_empty() || group.state != GroupState::Empty {
                return hb_error(
                    code::GROUP_ID_NOT_FOUND,
                    &format!("Group {group_id} is not a consumer group."),
                );
            }
            group.consumer = Some(ConsumerGroup::default());
            group.protocol_type = Some("consumer".to_string());
        }
        let cg = group.consumer.as_mut().expect("set above");

        // Leaving.
        if epoch == -1 || epoch == -2 {
            let Some(m) = cg.members.get_mut(&member_id) else {
                return hb_error(code::UNKNOWN_MEMBER_ID, "The member is not in the group.");
            };
            if epoch == -2 {
                // A static member leaves temporarily: its assignment waits for its instance (until the session
                // timeout).
                m.left_static = true;
                m.previous_epoch = m.epoch;
                m.epoch = -2;
                m.session_deadline = now + session;
            } else {
                cg.remove_member(&member_id);
                cg.maybe_compute_target();
                if cg.members.is_empty() {
                    group.state_timestamp_ms = wall_ms();
                }
            }
            return ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(s(&member_id)))
                .with_member_epoch(epoch)
                .with_heartbeat_interval_ms(0);
        }

        let owned = req.topic_partitions.as_ref().map(|t| to_parts(t));
        // One epoch bump covers a join together with its subscription.
        let mut joined = false;
        if epoch == 0 {
            let static_old = req
                .instance_id
                .as_ref()
                .and_then(|i| {
                    cg.members
                        .values()
                        .find(|m| m.instance_id.as_deref() == Some(i.as_str()))
                })
                .map(|m| (m.id.clone(), m.left_static));
            match static_old {
                Some((old, false)) if old != member_id => {
                    return hb_error(
                        code::UNRELEASED_INSTANCE_ID,
                        "The instance id is in use by another member; it must leave first.",
                    );
                }
                Some((old, _)) if old != member_id => {
                    // The static member is back under a new member id: it takes over its place and assignment.
                    let mut m = cg.members.remove(&old).expect("found above");
                    if let Some(t) = cg.target.remove(&old) {
                        cg.target.insert(member_id.clone(), t);
                    }
                    m.id = member_id.clone();
                    m.left_static = false;
                    m.epoch = m.previous_epoch.max(0);
                    cg.members.insert(member_id.clone(), m);
                }
                _ => {}
            }
            match cg.members.get_mut(&member_id) {
                Some(m) if !m.left_static && m.instance_id.is_none() => {
                    // A member rejoining from scratch gives up what it had.
                    m.assigned.clear();
                    m.pending_revocation.clear();
                    m.epoch = 0;
                    m.state = MemberState::Stable;
                }
                Some(_) => {}
                None => {
                    if cg.members.len() >= max_size {
                        return hb_error(
                            code::GROUP_MAX_SIZE_REACHED,
                            "The consumer group has reached its maximum size.",
                        );
                    }
                    cg.members.insert(
                        member_id.clone(),
                        ConsumerMember {
                            id: member_id.clone(),
                            instance_id: req.instance_id.as_ref().map(|i| i.to_string()),
                            rack_id: None,
                            client_id: client.client_id.clone(),
                            client_host: client.client_host.clone(),
                            epoch: 0,
                            previous_epoch: -1,
                            state: MemberState::Stable,
                            rebalance_timeout_ms: req.rebalance_timeout_ms,
                            subscribed: BTreeSet::new(),
                            assignor: None,
                            assigned: Parts::new(),
                            pending_revocation: Parts::new(),
                            session_deadline: now + session,
                            revocation_deadline: None,
                            left_static: false,
                        },
                    );
                    joined = true;
                }
            }
        } else {
            let Some(m) = cg.members.get(&member_id) else {
                return hb_error(
                    code::UNKNOWN_MEMBER_ID,
                    "The member is not in the group; rejoin with epoch 0.",
                );
            };
            // Kafka's throwIfMemberEpochIsInvalid: a lost response is tolerated (previous epoch, owning a subset).
            let lost_response = epoch == m.previous_epoch
                && owned.as_ref().is_some_and(|o| {
                    o.iter()
                        .all(|(t, ps)| m.assigned.get(t).is_some_and(|a| ps.is_subset(a)))
                });
            if epoch > m.epoch || (epoch < m.epoch && !lost_response) {
                return hb_error(
                    code::FENCED_MEMBER_EPOCH,
                    "The member epoch is fenced; rejoin with epoch 0.",
                );
            }
        }

        // Update the member from the request; a changed subscription bumps the group epoch.
        let m = cg.members.get_mut(&member_id).expect("present");
        m.session_deadline = now + session;
        m.client_id = client.client_id.clone();
        m.client_host = client.client_host.clone();
        if req.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if let Some(r) = &req.rack_id {
            m.rack_id = Some(r.to_string());
        }
        if let Some(a) = &req.server_assignor {
            m.assignor = Some(a.to_string());
        }
        let before = m.assigned.clone();
        let mut bump = joined;
        if let Some(names) = &req.subscribed_topic_names {
            let subs: BTreeSet<String> = names.iter().map(|n| n.0.to_string()).collect();
            if subs != m.subscribed {
                m.subscribed = subs;
                bump = true;
            }
        }
        // Topic metadata of every subscribed topic: a new topic or more partitions also bump the epoch.
        let metadata: BTreeMap<String, (Uuid, i32)> = cg
            .subscribed_topics()
            .into_iter()
            .filter_map(|t| {
                catalog
                    .topic(&t)
                    .map(|info| (t, (info.id, info.partitions)))
            })
            .collect();
        if metadata != cg.subscription_metadata {
            cg.subscription_metadata = metadata;
            bump = true;
        }
        if bump {
            cg.group_epoch += 1;
        }
        cg.maybe_compute_target();
        cg.reconcile(&member_id, owned.as_ref(), now);
        let m = cg.members.get(&member_id).expect("present");
        let full = req.rebalance_timeout_ms != -1
            && req.subscribed_topic_names.is_some()
            && req.topic_partitions.is_some();
        let mut resp = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&member_id)))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(interval);
        if epoch == 0 || full || before != m.assigned {
            resp.assignment = Some(response_assignment(&m.assigned));
        }
        resp
    }

    pub fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
        catalog: &dyn TopicCatalog,
    ) -> ConsumerGroupDescribeResponse {
        let mut resp = ConsumerGroupDescribeResponse::default();
        for id in req.group_ids {
            let mut d = cgd::DescribedGroup::default().with_group_id(id.clone());
            match self
                .groups
                .get(id.0.as_str())
                .and_then(|g| g.consumer.as_ref().map(|c| (g, c)))
            {
                None => {
                    d.error_code = code::GROUP_ID_NOT_FOUND;
                    d.error_message = Some(s(&format!(
                        "Group {} not found or not a consumer group.",
                        id.0.as_str()
                    )));
                    d.group_state = StrBytes::from_static_str("Dead");
                }
                Some((_, cg)) => {
                    let names: HashMap<Uuid, String> = cg
                        .subscription_metadata
                        .iter()
                        .map(|(n, (id, _))| (*id, n.clone()))
                        .collect();
                    let describe_parts = |p: &Parts| {
                        cgd::Assignment::default().with_topic_partitions(
                            p.iter()
                                .map(|(t, ps)| {
                                    let name = names
                                        .get(t)
                                        .cloned()
                                        .or_else(|| catalog.topic_name(*t))
                                        .unwrap_or_default();
                                    cgd::TopicPartitions::default()
                                        .with_topic_id(*t)
                                        .with_topic_name(s(&name).into())
                                        .with_partitions(ps.iter().copied().collect())
                                })
                                .collect(),
                        )
                    };
                    d.group_state = StrBytes::from_static_str(cg.state_name());
                    d.group_epoch = cg.group_epoch;
                    d.assignment_epoch = cg.assignment_epoch;
                    d.assignor_name = s(if cg.assignor.is_empty() {
                        ASSIGNORS[0]
                    } else {
                        &cg.assignor
                    });
                    d.members = cg
                        .members
                        .values()
                        .map(|m| {
                            cgd::Member::default()
                                .with_member_id(s(&m.id))
                                .with_instance_id(m.instance_id.as_deref().map(s))
                                .with_rack_id(m.rack_id.as_deref().map(s))
                                .with_member_epoch(m.epoch)
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_subscribed_topic_names(
                                    m.subscribed.iter().map(|t| s(t).into()).collect(),
                                )
                                .with_assignment(describe_parts(&m.assigned))
                                .with_target_assignment(describe_parts(
                                    &cg.target.get(&m.id).cloned().unwrap_or_default(),
                                ))
                                .with_member_type(1)
                        })
                        .collect();
                }
            }
            resp.groups.push(d);
        }
        resp
    }
}

/// Fires a consumer group's session and revocation timeouts. Returns true when members were removed.
pub(super) fn consumer_timers(group: &mut Group, now: Instant) -> bool {
    let Some(cg) = group.consumer.as_mut() else {
        return false;
    };
    let expired: Vec<String> = cg
        .members
        .values()
        .filter(|m| m.session_deadline <= now || m.revocation_deadline.is_some_and(|d| d <= now))
        .map(|m| m.id.clone())
        .collect();
    for id in &expired {
        tracing::info!(group = %group.id, member = %id, "consumer group member fenced (session or rebalance timeout)");
        cg.remove_member(id);
    }
    if !expired.is_empty() {
        cg.maybe_compute_target();
        if cg.members.is_empty() {
            group.state_timestamp_ms = wall_ms();
        }
    }
    !expired.is_empty()
}

/// Validates a commit or fetch from a consumer-protocol member (Kafka's `ConsumerGroup.validateOffsetCommit`):
/// admin / standalone commits (negative epoch) only while the group has no members.
pub(super) fn validate_member_epoch(cg: &ConsumerGroup, member_id: &str, epoch: i32) -> i16 {
    if epoch < 0 && cg.members.is_empty() {
        return code::NONE;
    }
    let Some(m) = cg.members.get(member_id) else {
        return code::UNKNOWN_MEMBER_ID;
    };
    if epoch > m.epoch {
        code::FENCED_MEMBER_EPOCH
    } else if epoch < m.epoch {
        code::STALE_MEMBER_EPOCH
    } else {
        code::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(list: &[(&str, &[Uuid])]) -> BTreeMap<String, BTreeSet<Uuid>> {
        list.iter()
            .map(|(m, t)| (m.to_string(), t.iter().copied().collect()))
            .collect()
    }

    fn count(a: &BTreeMap<String, Parts>, m: &str) -> usize {
        a[m].values().map(|p| p.len()).sum()
    }

    #[test]
    fn uniform_is_balanced_and_sticky() {
        let t = Uuid::new_v4();
        let parts = BTreeMap::from([(t, 6)]);
        let a = uniform_assign(
            &subs(&[("a", &[t]), ("b", &[t]), ("c", &[t])]),
            &parts,
            &BTreeMap::new(),
        );
        assert!(["a", "b", "c"].iter().all(|m| count(&a, m) == 2), "{a:?}");
        // A fourth member: only the partitions that must move move.
        let b = uniform_assign(
            &subs(&[("a", &[t]), ("b", &[t]), ("c", &[t]), ("d", &[t])]),
            &parts,
            &a,
        );
        let moved: usize = ["a", "b", "c"]
            .iter()
            .map(|m| {
                a[*m][&t]
                    .difference(b[*m].get(&t).unwrap_or(&BTreeSet::new()))
                    .count()
            })
            .sum();
        assert_eq!(moved, count(&b, "d"));
        assert!(count(&b, "d") >= 1 && ["a", "b", "c", "d"].iter().all(|m| count(&b, m) <= 2));
    }

    #[test]
    fn range_gives_contiguous_ranges() {
        let t = Uuid::new_v4();
        let a = range_assign(
            &subs(&[("a", &[t]), ("b", &[t])]),
            &BTreeMap::from([(t, 5)]),
        );
        assert_eq!(a["a"][&t], BTreeSet::from([0, 1, 2]));
        assert_eq!(a["b"][&t], BTreeSet::from([3, 4]));
    }

    #[test]
    fn heterogeneous_subscriptions_only_get_their_topics() {
        let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
        let parts = BTreeMap::from([(t1, 4), (t2, 2)]);
        let a = uniform_assign(
            &subs(&[("a", &[t1]), ("b", &[t1, t2])]),
            &parts,
            &BTreeMap::new(),
        );
        assert!(!a["a"].contains_key(&t2));
        assert_eq!(count(&a, "a") + count(&a, "b"), 6);
        assert_eq!(count(&a, "a"), 3);
    }
}
