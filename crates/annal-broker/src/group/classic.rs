//! Kafka's classic group protocol: the group state machine (Empty, PreparingRebalance, CompletingRebalance,
//! Stable, Dead), JoinGroup / SyncGroup / Heartbeat / LeaveGroup, member expiry and the rebalance timers.
//! Behaviour follows Kafka's `GroupMetadataManager` / `ClassicGroup` (group-coordinator module); where this
//! differs it says so.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::records::{self, GroupValue, MemberValue, OffsetValue, RecordKey};
use super::store::Record;
use super::{code, ClientInfo, GroupConfig};
use crate::replica::Partition;
use annal_log::DurableWait;
use std::sync::Arc;

/// An answer now, or one that arrives when the rebalance gets there.
pub(super) enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's names, as DescribeGroups and ListGroups show them.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

pub(super) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// Supported protocols in preference order, with this member's metadata for each.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<(oneshot::Sender<JoinGroupResponse>, i16)>,
    sync_waiter: Option<oneshot::Sender<SyncGroupResponse>>,
    session_deadline: Instant,
}

impl Member {
    pub fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(name, _)| name == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// Kafka's `shouldKeepAlive`: a member whose join or sync is parked is not expired.
    fn is_parked(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }
}

#[derive(Debug, Clone)]
pub(super) struct OffsetEntry {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    pub expire_timestamp: Option<i64>,
}

/// The initial rebalance delay of a group that was empty (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    remaining_ms: u64,
    new_member_added: bool,
}

pub(super) struct Group {
    pub id: String,
    pub partition: u32,
    pub state: GroupState,
    /// Wall-clock ms when the group entered its current state (offsets of an empty group expire from here).
    pub state_timestamp_ms: i64,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: IndexMap<String, Member>,
    static_members: BTreeMap<String, String>,
    /// KIP-394: ids handed out with MEMBER_ID_REQUIRED, not yet joined; value = expiry.
    pending_members: BTreeMap<String, Instant>,
    /// Members that got the JoinGroup answer of this generation and have not sent SyncGroup yet.
    pending_sync: BTreeSet<String>,
    sync_deadline: Option<Instant>,
    join_deadline: Option<Instant>,
    initial_delay: Option<InitialDelay>,
    pub offsets: BTreeMap<(String, i32), OffsetEntry>,
    /// The group metadata value last written to the log (what a restart would load; a delete tombstones it
    /// only if there is one). `None`: none in the log.
    pub persisted_metadata: Option<Vec<u8>>,
    /// Set when the group uses the consumer protocol (KIP-848) instead of the classic one.
    pub consumer: Option<super::consumer::ConsumerGroup>,
    /// The consumer-protocol records last written to the log, encoded key to value (what a restart would load;
    /// [`Writer::persist_consumer`] writes what changed, and tombstones what is gone).
    pub persisted_consumer: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The generation whose leader's assignment is being written: its SyncGroup answers wait until that write
    /// is committed ([`State::complete_sync`]).
    persisting: Option<i32>,
}

impl Group {
    fn new(id: String, partition: u32, now_ms: i64) -> Group {
        Group {
            id,
            partition,
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            sync_deadline: None,
            join_deadline: None,
            initial_delay: None,
            offsets: BTreeMap::new(),
            persisted_metadata: None,
            consumer: None,
            persisted_consumer: BTreeMap::new(),
            persisting: None,
        }
    }

    pub fn new_pub(id: String, partition: u32) -> Group {
        Group::new(id, partition, wall_ms())
    }

    /// Whether anyone is in the group (classic or consumer-protocol members).
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
            || self
                .consumer
                .as_ref()
                .is_some_and(|c| !c.members.is_empty())
    }

    fn transition(&mut self, to: GroupState) {
        self.state = to;
        self.state_timestamp_ms = wall_ms();
    }

    /// Topics the members subscribe to, from consumer-protocol metadata of the selected protocol; `None` when
    /// unknown (not a consumer group, or undecodable metadata), which callers treat as "maybe subscribed".
    pub fn subscribed_topics(&self) -> Option<HashSet<String>> {
        if let Some(cg) = &self.consumer {
            return Some(cg.subscribed_topics());
        }
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for m in self.members.values() {
            topics.extend(decode_subscription(&m.metadata(Some(protocol)))?);
        }
        Some(topics)
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.supports(name)))
    }

    /// Kafka's `selectProtocol`: among protocols every member supports, each member votes for its most
    /// preferred; most votes wins (ties: the earlier in the first member's preference list).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| self.members.values().all(|m| m.supports(n)))
            .collect();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(&n.as_str()))
            {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for c in candidates {
            let v = votes.get(c).copied().unwrap_or(0);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((c, v));
            }
        }
        best.map(|(c, _)| c.to_string())
    }

    fn rebalance_timeout(&self) -> Duration {
        let ms = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms.max(0))
            .max()
            .unwrap_or(0);
        Duration::from_millis(ms as u64)
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    /// The members (with their metadata for the selected protocol) as the leader's JoinGroup answer lists them.
    fn member_list(&self, version: i16) -> Vec<JoinGroupResponseMember> {
        let protocol = self.protocol_name.as_deref();
        self.members
            .values()
            .map(|m| {
                JoinGroupResponseMember::default()
                    .with_member_id(s(&m.id))
                    .with_group_instance_id(if version >= 5 {
                        m.instance_id.as_deref().map(s)
                    } else {
                        None
                    })
                    .with_metadata(m.metadata(protocol))
            })
            .collect()
    }

    /// Kafka's `validateMember`: a static member must present the member id its instance id maps to.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        if let Some(inst) = instance_id {
            match self.static_members.get(inst) {
                Some(current) if current == member_id => Ok(()),
                Some(_) => Err(code::FENCED_INSTANCE_ID),
                None => Err(code::UNKNOWN_MEMBER_ID),
            }
        } else if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(code::UNKNOWN_MEMBER_ID)
        }
    }

    /// A sign of life from a member (e.g. an offset commit) postpones its session expiry.
    pub fn touch_member(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.session_deadline = now + ms(m.session_timeout_ms);
        }
    }

    pub fn has_member_or_offsets(&self) -> bool {
        self.has_members() || !self.pending_members.is_empty() || !self.offsets.is_empty()
    }

    /// The group's `GroupMetadataValue` record.
    pub fn metadata_record(&self) -> Record {
        let protocol = self.protocol_name.as_deref();
        let value = GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        Record {
            key: records::group_key(&self.id),
            value: Some(records::group_value(&value)),
        }
    }

    pub fn offset_record(&self, topic: &str, partition: i32, e: &OffsetEntry) -> Record {
        Record {
            key: records::offset_key(&self.id, topic, partition),
            value: Some(records::offset_value(&OffsetValue {
                offset: e.offset,
                leader_epoch: e.leader_epoch,
                metadata: e.metadata.clone(),
                commit_timestamp: e.commit_timestamp,
                expire_timestamp: e.expire_timestamp,
            })),
        }
    }
}

/// A `__consumer_offsets` partition as the coordinator holds it (Kafka's coordinator runtime: loading, then
/// active, until this broker stops leading it).
pub(super) enum Owned {
    /// This broker leads the partition and replays its log; requests for its groups get
    /// COORDINATOR_LOAD_IN_PROGRESS.
    Loading { leader_epoch: i32 },
    /// This broker coordinates the partition's groups; their records are appended to `part`.
    Active {
        part: Arc<Partition>,
        leader_epoch: i32,
        /// Records replayed plus appended since this broker took the partition (a statistic; the log itself
        /// is kept small by the engine's cleaner, `cleanup.policy=compact`).
        records: u64,
    },
}

impl Owned {
    pub fn leader_epoch(&self) -> i32 {
        match self {
            Owned::Loading { leader_epoch } | Owned::Active { leader_epoch, .. } => *leader_epoch,
        }
    }
}

/// An append whose answer waits until it is committed: the partition's high watermark passes `last_offset`.
/// A durable partition (`flush.messages=1`) also carries the wait for the group-commit fsync that moves the high
/// watermark; replication moves it when the ISR has the records.
pub struct CommitWait {
    pub part: Arc<Partition>,
    pub last_offset: i64,
    pub durable: Option<DurableWait>,
}

/// Appends to the `__consumer_offsets` partitions this broker leads; collects the commit waits to run once the
/// state lock is released.
pub(super) struct Writer {
    pub owned: BTreeMap<u32, Owned>,
    pub waits: Vec<CommitWait>,
    pub closed: bool,
    /// `__consumer_offsets`' partition count: the topic's once it exists, else `offsets.topic.num.partitions`.
    pub num_partitions: u32,
}

impl Writer {
    /// Appends `records` to `partition` through its leader; false (and logged) on failure, including when this
    /// broker no longer leads it.
    pub fn append(&mut self, partition: u32, records: &[Record]) -> bool {
        if self.closed {
            tracing::warn!(
                "the group coordinator is shut down; not writing to {}",
                super::store::TOPIC
            );
            return false;
        }
        if records.is_empty() {
            return true;
        }
        let Some(Owned::Active {
            part,
            records: count,
            ..
        }) = self.owned.get_mut(&partition)
        else {
            tracing::warn!(
                partition,
                "not the coordinator of {}-{partition} (any more); not writing",
                super::store::TOPIC
            );
            return false;
        };
        let now = wall_ms();
        let mut bytes = super::store::build(records, now);
        match part.append_records_to_leader(&mut bytes, -1, now) {
            Ok(appended) => {
                *count += records.len() as u64;
                self.waits.push(CommitWait {
                    part: part.clone(),
                    last_offset: appended.info.last_offset,
                    durable: appended.durable,
                });
                true
            }
            Err(e) => {
                tracing::error!(partition = %part.name(), error = %e, "cannot write group coordinator records");
                false
            }
        }
    }

    /// Makes the request's answer wait until everything in `partition`'s log so far is committed (as a write's
    /// answer waits for its own records): group state loaded from, or written to, the log is handed out only
    /// once no leader elected next can truncate it away. Kafka's coordinator runtime defers a response without
    /// records of its own the same way, until the writes before it are committed.
    pub fn wait_for_log_end(&mut self, partition: u32) {
        if let Some(Owned::Active { part, .. }) = self.owned.get(&partition) {
            let end = part.log_end_offset();
            if end > 0 {
                self.waits.push(CommitWait {
                    part: part.clone(),
                    last_offset: end - 1,
                    durable: None,
                });
            }
        }
    }

    /// Appends what changed in the group's consumer-protocol records since they were last written (new and
    /// changed values, tombstones for members gone, all of them once the group is no consumer group any more),
    /// in one batch, so a replay sees all of a change or none of it. False if the append was refused (the log
    /// then keeps the previous records, and the next change writes these again).
    pub fn persist_consumer(&mut self, group: &mut Group) -> bool {
        let wanted = group
            .consumer
            .as_ref()
            .map(|c| c.records(&group.id))
            .unwrap_or_default();
        let mut records: Vec<Record> = wanted
            .iter()
            .filter(|(k, v)| group.persisted_consumer.get(*k) != Some(*v))
            .map(|(k, v)| Record {
                key: k.clone(),
                value: Some(v.clone()),
            })
            .collect();
        records.extend(
            group
                .persisted_consumer
                .keys()
                .filter(|k| !wanted.contains_key(*k))
                .map(|k| Record {
                    key: k.clone(),
                    value: None,
                }),
        );
        if records.is_empty() {
            return true;
        }
        let appended = self.append(group.partition, &records);
        if appended {
            group.persisted_consumer = wanted;
        }
        appended
    }

    /// Appends the group's metadata; false if the append was refused (it is then not in the log).
    fn persist_group(&mut self, group: &mut Group) -> bool {
        let record = group.metadata_record();
        let appended = self.append(group.partition, std::slice::from_ref(&record));
        if appended {
            group.persisted_metadata = record.value;
        }
        appended
    }
}

pub(super) struct State {
    pub groups: BTreeMap<String, Group>,
    pub writer: Writer,
    pub config: GroupConfig,
    next_retention_check: Instant,
    /// Offsets of open transactions (TxnOffsetCommit), visible once their COMMIT marker arrives.
    pub txn_pending: super::txn_offsets::TxnPending,
    /// Where new member ids come from ([`GroupConfig::member_id_seed`]).
    pub member_ids: rand::rngs::StdRng,
}

/// What loading a partition's log produced, to install under the state lock.
pub(super) struct Loaded {
    pub groups: BTreeMap<String, Group>,
    pub records: u64,
    /// Transactional offsets whose transaction was still open at the log end.
    pub txn_pending: Vec<((u32, i64), super::txn_offsets::PendingOffsets)>,
}

/// Replays `part` (partition `partition` of `__consumer_offsets`) into groups. The log is a compacted topic the
/// broker's log cleaner keeps small (decision 0002), so a replay reads about the live records. Blocking.
///
/// A consumer-protocol group's members get `consumer_session` from now before their session expires.
pub(super) fn load(
    part: &Partition,
    partition: u32,
    consumer_session: Duration,
) -> anyhow::Result<Loaded> {
    let now = super::clock_now();
    let groups = std::cell::RefCell::new(BTreeMap::new());
    let open: std::cell::RefCell<BTreeMap<i64, super::txn_offsets::PendingOffsets>> =
        Default::default();
    let stats = super::store::replay_with_markers(
        part,
        |producer, key, value| match producer {
            None => apply_record(&mut groups.borrow_mut(), partition, key, value, now),
            Some(pid) => stage_txn_record(open.borrow_mut().entry(pid).or_default(), key, value),
        },
        |pid, commit| {
            let Some(offsets) = open.borrow_mut().remove(&pid) else {
                return;
            };
            if !commit {
                return;
            }
            let mut groups = groups.borrow_mut();
            for ((group, topic, p), entry) in offsets {
                groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(group, partition, wall_ms()))
                    .offsets
                    .insert((topic, p), entry);
            }
        },
    )?;
    let mut groups = groups.into_inner();
    let txn_pending: Vec<_> =
        super::txn_offsets::open_at_end(partition, open.into_inner()).collect();
    let records = stats.records;
    // Groups loaded with members wait a full session timeout from now before expiring them (as Kafka does on
    // loading a partition).
    for g in groups.values_mut() {
        for m in g.members.values_mut() {
            m.session_deadline = now + ms(m.session_timeout_ms);
        }
        if !g.persisted_consumer.is_empty()
            && !annal_metadata::env::testing::planted(
                annal_metadata::env::testing::PlantedBug::ForgetConsumerGroupMembers,
            )
        {
            g.consumer = Some(super::consumer::ConsumerGroup::from_records(
                &g.id,
                &g.persisted_consumer,
                now,
                consumer_session,
            ));
            g.protocol_type = Some("consumer".to_string());
        }
    }
    Ok(Loaded {
        groups,
        records,
        txn_pending,
    })
}

/// A transactional offset record met while replaying: pending until its transaction's marker.
fn stage_txn_record(
    pending: &mut super::txn_offsets::PendingOffsets,
    key: &[u8],
    value: Option<&[u8]>,
) {
    let Some(RecordKey::Offset {
        group,
        topic,
        partition,
    }) = records::decode_key(key)
    else {
        return;
    };
    match value.and_then(records::decode_offset_value) {
        Some(v) => {
            pending.insert(
                (group, topic, partition),
                OffsetEntry {
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: v.metadata,
                    commit_timestamp: v.commit_timestamp,
                    expire_timestamp: v.expire_timestamp,
                },
            );
        }
        None => {
            pending.remove(&(group, topic, partition));
        }
    }
}

impl State {
    /// No partition owned yet: [`State::begin_load`] / [`State::install`] make this broker coordinator of one.
    pub fn new(config: GroupConfig) -> State {
        State {
            groups: BTreeMap::new(),
            writer: Writer {
                owned: BTreeMap::new(),
                waits: Vec::new(),
                closed: false,
                num_partitions: config.offsets_topic_num_partitions,
            },
            next_retention_check: super::clock_now()
                + Duration::from_millis(config.offsets_retention_check_interval_ms),
            member_ids: match config.member_id_seed {
                Some(seed) => rand::SeedableRng::seed_from_u64(seed),
                None => rand::SeedableRng::from_entropy(),
            },
            config,
            txn_pending: Default::default(),
        }
    }

    /// Why a request for `group` cannot be served here, or `None` if this broker coordinates it.
    pub fn coordinator_error(&self, group: &str) -> Option<i16> {
        if self.writer.closed {
            return Some(code::NOT_COORDINATOR);
        }
        match self.writer.owned.get(&self.partition_for_group(group)) {
            None => Some(code::NOT_COORDINATOR),
            Some(Owned::Loading { .. }) => Some(code::COORDINATOR_LOAD_IN_PROGRESS),
            Some(Owned::Active { .. }) => None,
        }
    }

    /// The leader epoch this broker coordinates (or loads) `partition` at, if it does.
    pub fn owned_epoch(&self, partition: u32) -> Option<i32> {
        self.writer.owned.get(&partition).map(Owned::leader_epoch)
    }

    pub fn owned_partitions(&self) -> Vec<u32> {
        self.writer.owned.keys().copied().collect()
    }

    /// This broker became leader of `partition` at `leader_epoch`: its groups are loading. Any state of an
    /// older epoch is dropped first.
    pub fn begin_load(&mut self, partition: u32, leader_epoch: i32) {
        self.unload(partition);
        self.writer
            .owned
            .insert(partition, Owned::Loading { leader_epoch });
    }

    /// Installs what loading `partition` at `leader_epoch` produced; false (nothing installed) if leadership
    /// changed meanwhile.
    pub fn install(
        &mut self,
        partition: u32,
        leader_epoch: i32,
        part: Arc<Partition>,
        loaded: Loaded,
    ) -> bool {
        let current = matches!(self.writer.owned.get(&partition),
            Some(Owned::Loading { leader_epoch: e }) if *e == leader_epoch);
        if !current || self.writer.closed {
            return false;
        }
        for (id, g) in loaded.groups {
            debug_assert_eq!(
                g.partition, partition,
                "a loaded group hashes to its partition"
            );
            self.groups.insert(id, g);
        }
        self.txn_pending.drop_partition(partition);
        self.txn_pending.by_producer.extend(loaded.txn_pending);
        self.writer.owned.insert(
            partition,
            Owned::Active {
                part,
                leader_epoch,
                records: loaded.records,
            },
        );
        true
    }

    /// This broker no longer leads `partition`: its groups go (parked JoinGroup/SyncGroup calls answer
    /// NOT_COORDINATOR as their senders drop) and their requests get NOT_COORDINATOR.
    pub fn unload(&mut self, partition: u32) {
        if self.writer.owned.remove(&partition).is_none() {
            return;
        }
        self.groups.retain(|_, g| g.partition != partition);
        self.txn_pending.drop_partition(partition);
        tracing::info!(
            partition,
            "no longer the coordinator of {}-{partition}",
            super::store::TOPIC
        );
    }

    /// Whether some owned partition is still being replayed.
    pub fn is_loading(&self) -> bool {
        self.writer
            .owned
            .values()
            .any(|o| matches!(o, Owned::Loading { .. }))
    }

    /// Appends a read barrier to `partition` (see `GroupCoordinator::read_barrier`): an offset tombstone of a
    /// group that never exists, which replays (here and in Kafka) as nothing. False if this broker does not lead
    /// the partition or the append failed.
    pub fn append_read_barrier(&mut self, partition: u32) -> bool {
        let barrier = Record {
            key: records::offset_key(records::READ_BARRIER_GROUP, "", 0),
            value: None,
        };
        self.writer
            .append(partition, std::slice::from_ref(&barrier))
    }

    pub fn take_waits(&mut self) -> Vec<CommitWait> {
        std::mem::take(&mut self.writer.waits)
    }

    pub fn is_closed(&self) -> bool {
        self.writer.closed
    }

    /// Stops coordinating: every group is unloaded (parked calls answer NOT_COORDINATOR) and the partitions are
    /// released to the replica manager, which closes them.
    pub fn shutdown(&mut self) {
        if self.writer.closed {
            return;
        }
        for partition in self.owned_partitions() {
            self.unload(partition);
        }
        self.groups.clear();
        self.writer.waits.clear();
        self.writer.closed = true;
    }

    pub fn partition_for_group(&self, group: &str) -> u32 {
        records::partition_for(group, self.writer.num_partitions)
    }

    pub fn group_mut_or_create(&mut self, group_id: &str) -> &mut Group {
        let partition = self.partition_for_group(group_id);
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id.to_string(), partition, wall_ms()))
    }

    // ---- JoinGroup ----

    pub fn join_group(
        &mut self,
        req: JoinGroupRequest,
        version: i16,
        client: &ClientInfo,
        now: Instant,
    ) -> Reply<JoinGroupResponse> {
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let err =
            |code: i16| Reply::Now(join_error(code, version).with_member_id(req.member_id.clone()));
        if group_id.is_empty() {
            return err(code::INVALID_GROUP_ID);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return err(code::INVALID_SESSION_TIMEOUT);
        }
        // JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout.
        let rebalance_timeout_ms = if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        };
        let exists = self.groups.contains_key(&group_id);
        if !exists && !member_id.is_empty() {
            return err(code::UNKNOWN_MEMBER_ID);
        }
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        let protocol_type = req.protocol_type.to_string();
        let instance_id = req.group_instance_id.as_ref().map(|i| i.to_string());
        let max_size = self.config.max_size as usize;
        let State {
            groups,
            writer,
            config,
            member_ids,
            ..
        } = self;
        let partition = records::partition_for(&group_id, writer.num_partitions);
        let group = groups
            .entry(group_id.clone())
            .or_insert_with(|| Group::new(group_id.clone(), partition, wall_ms()));
        let join = Join {
            instance_id,
            client_id: client.client_id.clone(),
            client_host: client.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            version,
        };
        if group
            .consumer
            .as_ref()
            .is_some_and(|c| !c.members.is_empty())
        {
            // Kafka would migrate the group between protocols; Annal does not (yet).
            return err(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        // An empty consumer-protocol group becomes a classic one again; its records go first.
        if let Some(consumer) = group.consumer.take() {
            if !writer.persist_consumer(group) {
                group.consumer = Some(consumer);
                return err(code::COORDINATOR_NOT_AVAILABLE);
            }
        }
        let reply = if group.state == GroupState::Dead {
            err(code::COORDINATOR_NOT_AVAILABLE)
        } else if !group.supports_protocols(&join.protocol_type, &join.protocols) {
            err(code::INCONSISTENT_GROUP_PROTOCOL)
        } else if member_id.is_empty() {
            let uuid = uuid::Uuid::from_u128(rand::Rng::gen(member_ids));
            join_unknown_member(group, writer, config, join, uuid, max_size, now)
        } else {
            join_known_member(group, writer, config, member_id, join, now)
        };
        // A group created only to be refused leaves nothing behind.
        if !exists && !group.has_member_or_offsets() && group.generation == 0 {
            groups.remove(&group_id);
        }
        reply
    }

    // ---- SyncGroup ----

    pub fn sync_group(
        &mut self,
        req: SyncGroupRequest,
        version: i16,
        now: Instant,
    ) -> (Reply<SyncGroupResponse>, Option<i32>) {
        let State {
            groups,
            writer,
            config,
            ..
        } = self;
        let Some(group) = groups.get_mut(req.group_id.0.as_str()) else {
            return (Reply::Now(sync_error(code::UNKNOWN_MEMBER_ID)), None);
        };
        let member_id = req.member_id.to_string();
        if group.state == GroupState::Dead {
            return (
                Reply::Now(sync_error(code::COORDINATOR_NOT_AVAILABLE)),
                None,
            );
        }
        if let Err(e) = group.validate_member(&member_id, req.group_instance_id.as_deref()) {
            return (Reply::Now(sync_error(e)), None);
        }
        if req.generation_id != group.generation {
            return (Reply::Now(sync_error(code::ILLEGAL_GENERATION)), None);
        }
        if version >= 5 {
            let type_ok = req
                .protocol_type
                .as_ref()
                .is_none_or(|t| group.protocol_type.as_deref() == Some(t.as_str()));
            let name_ok = req
                .protocol_name
                .as_ref()
                .is_none_or(|n| group.protocol_name.as_deref() == Some(n.as_str()));
            if !type_ok || !name_ok {
                return (
                    Reply::Now(sync_error(code::INCONSISTENT_GROUP_PROTOCOL)),
                    None,
                );
            }
        }
        let reply = match group.state {
            GroupState::Empty | GroupState::Dead => Reply::Now(sync_error(code::UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => Reply::Now(sync_error(code::REBALANCE_IN_PROGRESS)),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                let is_leader = group.leader.as_deref() == Some(member_id.as_str());
                {
                    let member = group.members.get_mut(&member_id).expect("validated");
                    member.sync_waiter = Some(tx);
                    member.session_deadline = now + ms(member.session_timeout_ms);
                }
                group.pending_sync.remove(&member_id);
                if is_leader {
                    let mut given: BTreeMap<String, Bytes> = BTreeMap::new();
                    for a in req.assignments {
                        given.insert(a.member_id.to_string(), a.assignment);
                    }
                    // Every member gets an assignment; one the leader left out gets an empty one.
                    for m in group.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    // Kafka's order: the generation and its assignment go to the log first, and the members hear
                    // of them only once that write is committed (`complete_sync`). Answered at once, a coordinator
                    // that then lost its partition would leave a generation in the members' hands that the next
                    // coordinator never heard of: it would hand out the same generation number again, with other
                    // owners, and accept the old members' commits.
                    if writer.persist_group(group) {
                        group.persisting = Some(group.generation);
                        return (Reply::Later(rx), Some(group.generation));
                    }
                    fail_assignment(group, code::COORDINATOR_NOT_AVAILABLE);
                    prepare_rebalance(group, writer, config, now);
                }
                Reply::Later(rx)
            }
            GroupState::Stable => {
                group.pending_sync.remove(&member_id);
                if group.pending_sync.is_empty() {
                    group.sync_deadline = None;
                }
                let member = group.members.get_mut(&member_id).expect("validated");
                member.session_deadline = now + ms(member.session_timeout_ms);
                // The assignment may come from records this coordinator loaded but that are not committed yet
                // (it became leader with a tail the old leader wrote): answered only once they are, or a leader
                // elected next could truncate them away and hand the generation out again (simulator seed 1099).
                writer.wait_for_log_end(group.partition);
                Reply::Now(sync_ok(
                    &group.protocol_type,
                    &group.protocol_name,
                    member.assignment.clone(),
                ))
            }
        };
        (reply, None)
    }

    /// The leader's assignment of `generation` was written (`committed`: and committed, within
    /// offsets.commit.timeout.ms). Committed: the group is stable and every member waiting in SyncGroup gets its
    /// assignment. Not committed: nobody gets one, and the group rebalances (Kafka's
    /// `resetAndPropagateAssignmentError` and `maybePrepareRebalance`). Nothing to do if the group moved on
    /// meanwhile (a rebalance answered the waiters itself).
    pub fn complete_sync(
        &mut self,
        group_id: &str,
        generation: i32,
        committed: bool,
        now: Instant,
    ) {
        let State {
            groups,
            writer,
            config,
            ..
        } = self;
        let Some(group) = groups.get_mut(group_id) else {
            return;
        };
        if group.state != GroupState::CompletingRebalance
            || group.generation != generation
            || group.persisting != Some(generation)
        {
            return;
        }
        group.persisting = None;
        if !committed {
            tracing::warn!(group = %group.id, generation, "the group's assignment was not committed; the group rebalances");
            fail_assignment(group, code::COORDINATOR_NOT_AVAILABLE);
            prepare_rebalance(group, writer, config, now);
            return;
        }
        group.transition(GroupState::Stable);
        let protocol_type = group.protocol_type.clone();
        let protocol_name = group.protocol_name.clone();
        for m in group.members.values_mut() {
            if let Some(tx) = m.sync_waiter.take() {
                let _ = tx.send(sync_ok(
                    &protocol_type,
                    &protocol_name,
                    m.assignment.clone(),
                ));
            }
        }
        if group.pending_sync.is_empty() {
            group.sync_deadline = None;
        }
    }

    // ---- Heartbeat ----

    pub fn heartbeat(&mut self, req: &HeartbeatRequest, now: Instant) -> i16 {
        let Some(group) = self.groups.get_mut(req.group_id.0.as_str()) else {
            return code::UNKNOWN_MEMBER_ID;
        };
        if group.state == GroupState::Dead {
            return code::COORDINATOR_NOT_AVAILABLE;
        }
        if let Err(e) = group.validate_member(&req.member_id, req.group_instance_id.as_deref()) {
            return e;
        }
        if req.generation_id != group.generation {
            return code::ILLEGAL_GENERATION;
        }
        if group.state == GroupState::Empty {
            return code::UNKNOWN_MEMBER_ID;
        }
        let member = group
            .members
            .get_mut(req.member_id.as_str())
            .expect("validated");
        member.session_deadline = now + ms(member.session_timeout_ms);
        if group.state == GroupState::PreparingRebalance {
            return code::REBALANCE_IN_PROGRESS;
        }
        code::NONE
    }

    // ---- LeaveGroup ----

    pub fn leave_group(
        &mut self,
        req: LeaveGroupRequest,
        version: i16,
        now: Instant,
    ) -> LeaveGroupResponse {
        let identities: Vec<(String, Option<String>)> = if version <= 2 {
            vec![(req.member_id.to_string(), None)]
        } else {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        };
        let State {
            groups,
            writer,
            config,
            ..
        } = self;
        let mut results: Vec<(String, Option<String>, i16)> = Vec::new();
        let mut top = code::NONE;
        match groups.get_mut(req.group_id.0.as_str()) {
            None => {
                results = identities
                    .into_iter()
                    .map(|(m, i)| (m, i, code::UNKNOWN_MEMBER_ID))
                    .collect();
            }
            Some(group) if group.state == GroupState::Dead => top = code::COORDINATOR_NOT_AVAILABLE,
            Some(group) => {
                for (member_id, instance_id) in identities {
                    let outcome = if member_id.is_empty() {
                        // KIP-345: a static member may leave by instance id alone.
                        match instance_id
                            .as_ref()
                            .and_then(|i| group.static_members.get(i))
                            .cloned()
                        {
                            Some(id) => Ok(id),
                            None => Err(code::UNKNOWN_MEMBER_ID),
                        }
                    } else if group.pending_members.remove(&member_id).is_some() {
                        Err(code::NONE)
                    } else {
                        group
                            .validate_member(&member_id, instance_id.as_deref())
                            .map(|()| member_id.clone())
                    };
                    let error = match outcome {
                        Ok(id) => {
                            remove_member_and_update(group, writer, config, &id, now);
                            code::NONE
                        }
                        Err(e) => e,
                    };
                    results.push((member_id, instance_id, error));
                }
                if group.state == GroupState::PreparingRebalance {
                    maybe_complete_join(group, writer, now);
                }
            }
        }
        let mut resp = LeaveGroupResponse::default();
        if version <= 2 {
            resp.error_code = if top != code::NONE {
                top
            } else {
                results.first().map_or(code::NONE, |r| r.2)
            };
        } else {
            resp.error_code = top;
            resp.members = results
                .into_iter()
                .map(|(m, i, e)| {
                    MemberResponse::default()
                        .with_member_id(StrBytes::from_string(m))
                        .with_group_instance_id(i.map(StrBytes::from_string))
                        .with_error_code(e)
                })
                .collect();
        }
        resp
    }

    // ---- timers ----

    /// Fires every deadline that is due; returns the next one.
    pub fn on_timer(&mut self, now: Instant) -> Option<Instant> {
        if self.writer.closed {
            return None;
        }
        let State {
            groups,
            writer,
            config,
            ..
        } = self;
        for group in groups.values_mut() {
            group_timers(group, writer, config, now);
        }
        if now >= self.next_retention_check {
            self.expire_offsets(super::wall_ms_now());
            self.next_retention_check =
                now + Duration::from_millis(self.config.offsets_retention_check_interval_ms);
        }
        let mut next = Some(self.next_retention_check);
        for g in self.groups.values() {
            let candidates = g
                .members
                .values()
                .filter(|m| !m.is_parked())
                .map(|m| m.session_deadline)
                .chain(g.pending_members.values().copied())
                .chain(g.join_deadline)
                .chain(g.sync_deadline)
                .chain(g.consumer.as_ref().and_then(|c| c.next_deadline()));
            for c in candidates {
                next = Some(next.map_or(c, |n: Instant| n.min(c)));
            }
        }
        next
    }
}

/// The parts of a JoinGroup request the state machine needs.
struct Join {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    version: i16,
}

fn join_unknown_member(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    join: Join,
    uuid: uuid::Uuid,
    max_size: usize,
    now: Instant,
) -> Reply<JoinGroupResponse> {
    let prefix = join.instance_id.as_deref().unwrap_or(&join.client_id);
    let new_id = format!("{prefix}-{uuid}");
    let version = join.version;
    if let Some(old_id) = join
        .instance_id
        .as_ref()
        .and_then(|i| group.static_members.get(i))
        .cloned()
    {
        return update_static_member(group, writer, config, old_id, new_id, join, now);
    }
    if group.members.len() + group.pending_members.len() >= max_size {
        return Reply::Now(join_error(code::GROUP_MAX_SIZE_REACHED, version));
    }
    if join.instance_id.is_none() && version >= 4 {
        // KIP-394: hand out the id, expect a second JoinGroup carrying it.
        group
            .pending_members
            .insert(new_id.clone(), now + ms(join.session_timeout_ms));
        return Reply::Now(
            join_error(code::MEMBER_ID_REQUIRED, version).with_member_id(s(&new_id)),
        );
    }
    add_member_and_rebalance(group, writer, config, new_id, join, now)
}

fn join_known_member(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    member_id: String,
    join: Join,
    now: Instant,
) -> Reply<JoinGroupResponse> {
    let version = join.version;
    let err = |c: i16| Reply::Now(join_error(c, version).with_member_id(s(&member_id)));
    if group.pending_members.remove(&member_id).is_some() {
        return add_member_and_rebalance(group, writer, config, member_id, join, now);
    }
    if let Err(e) = group.validate_member(&member_id, join.instance_id.as_deref()) {
        return err(e);
    }
    let member = group.members.get_mut(&member_id).expect("validated");
    member.session_deadline = now + ms(member.session_timeout_ms);
    let same = member.same_protocols(&join.protocols);
    let is_leader = group.leader.as_deref() == Some(member_id.as_str());
    match group.state {
        GroupState::Empty | GroupState::Dead => err(code::UNKNOWN_MEMBER_ID),
        GroupState::PreparingRebalance => {
            update_member_and_rebalance(group, writer, config, &member_id, join, now)
        }
        GroupState::CompletingRebalance if same => {
            // A resent JoinGroup (e.g. the answer was lost): answer with this generation again.
            let members = if is_leader {
                group.member_list(version)
            } else {
                Vec::new()
            };
            Reply::Now(join_ok(group, &member_id, members, false, version))
        }
        GroupState::Stable if same && !is_leader => {
            Reply::Now(join_ok(group, &member_id, Vec::new(), false, version))
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            update_member_and_rebalance(group, writer, config, &member_id, join, now)
        }
    }
}

fn add_member_and_rebalance(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    member_id: String,
    join: Join,
    now: Instant,
) -> Reply<JoinGroupResponse> {
    let (tx, rx) = oneshot::channel();
    if group.members.is_empty() {
        group.protocol_type = Some(join.protocol_type.clone());
    }
    if group.leader.is_none() {
        group.leader = Some(member_id.clone());
    }
    if let Some(inst) = &join.instance_id {
        group.static_members.insert(inst.clone(), member_id.clone());
    }
    if let Some(delay) = group.initial_delay.as_mut() {
        delay.new_member_added = true;
    }
    group.members.insert(
        member_id.clone(),
        Member {
            id: member_id,
            instance_id: join.instance_id,
            client_id: join.client_id,
            client_host: join.client_host,
            session_timeout_ms: join.session_timeout_ms,
            rebalance_timeout_ms: join.rebalance_timeout_ms,
            protocols: join.protocols,
            assignment: Bytes::new(),
            join_waiter: Some((tx, join.version)),
            sync_waiter: None,
            session_deadline: now + ms(join.session_timeout_ms),
        },
    );
    maybe_prepare_rebalance(group, writer, config, now);
    Reply::Later(rx)
}

fn update_member_and_rebalance(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    member_id: &str,
    join: Join,
    now: Instant,
) -> Reply<JoinGroupResponse> {
    let (tx, rx) = oneshot::channel();
    let member = group.members.get_mut(member_id).expect("caller checked");
    update_member(member, join, tx, now);
    maybe_prepare_rebalance(group, writer, config, now);
    Reply::Later(rx)
}

fn update_member(
    member: &mut Member,
    join: Join,
    tx: oneshot::Sender<JoinGroupResponse>,
    now: Instant,
) {
    if let Some((old, v)) = member.join_waiter.take() {
        // A second JoinGroup while the first is parked: the first is superseded.
        let _ = old.send(join_error(code::REBALANCE_IN_PROGRESS, v).with_member_id(s(&member.id)));
    }
    member.protocols = join.protocols;
    member.session_timeout_ms = join.session_timeout_ms;
    member.rebalance_timeout_ms = join.rebalance_timeout_ms;
    member.client_id = join.client_id;
    member.client_host = join.client_host;
    member.join_waiter = Some((tx, join.version));
    member.session_deadline = now + ms(join.session_timeout_ms);
}

/// KIP-345: a known `group.instance.id` joins with an unknown member id (a restarted static member). It takes
/// over the old member's place and assignment; the old member id is fenced. In a Stable group whose protocol
/// would not change, no rebalance happens.
fn update_static_member(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    old_id: String,
    new_id: String,
    join: Join,
    now: Instant,
) -> Reply<JoinGroupResponse> {
    let version = join.version;
    let old_leader = group.leader.clone();
    let was_leader = old_leader.as_deref() == Some(old_id.as_str());
    let Some(mut member) = group.members.shift_remove(&old_id) else {
        return Reply::Now(join_error(code::UNKNOWN_MEMBER_ID, version));
    };
    if let Some((tx, v)) = member.join_waiter.take() {
        let _ = tx.send(join_error(code::FENCED_INSTANCE_ID, v).with_member_id(s(&old_id)));
    }
    if let Some(tx) = member.sync_waiter.take() {
        let _ = tx.send(sync_error(code::FENCED_INSTANCE_ID));
    }
    member.id = new_id.clone();
    if let Some(inst) = &join.instance_id {
        group.static_members.insert(inst.clone(), new_id.clone());
    }
    if was_leader {
        group.leader = Some(new_id.clone());
    }
    if group.pending_sync.remove(&old_id) {
        group.pending_sync.insert(new_id.clone());
    }
    let (tx, rx) = oneshot::channel();
    update_member(&mut member, join, tx, now);
    group.members.insert(new_id.clone(), member);
    match group.state {
        GroupState::Stable if group.select_protocol() == group.protocol_name => {
            let member = group.members.get_mut(&new_id).expect("inserted");
            member.join_waiter = None;
            writer.persist_group(group);
            // The old leader id is returned unless the client can skip the assignment (KIP-814, v9+), so a
            // restarted leader does not compute an assignment a Stable group would never send out.
            let (leader, members, skip) = if was_leader && version >= 9 {
                (Some(new_id.clone()), group.member_list(version), true)
            } else {
                (old_leader, Vec::new(), false)
            };
            let mut resp = join_ok(group, &new_id, members, skip, version);
            resp.leader = s(leader.as_deref().unwrap_or(""));
            Reply::Now(resp)
        }
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, writer, config, now);
            Reply::Later(rx)
        }
        GroupState::PreparingRebalance => {
            maybe_complete_join(group, writer, now);
            Reply::Later(rx)
        }
        GroupState::Empty | GroupState::Dead => {
            maybe_prepare_rebalance(group, writer, config, now);
            Reply::Later(rx)
        }
    }
}

fn maybe_prepare_rebalance(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    now: Instant,
) {
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty => {
            prepare_rebalance(group, writer, config, now)
        }
        GroupState::PreparingRebalance => maybe_complete_join(group, writer, now),
        GroupState::Dead => {}
    }
}

/// Takes the assignment back from every member and answers those waiting in SyncGroup with `error`.
fn fail_assignment(group: &mut Group, error: i16) {
    for m in group.members.values_mut() {
        m.assignment = Bytes::new();
        if let Some(tx) = m.sync_waiter.take() {
            let _ = tx.send(sync_error(error));
        }
    }
}

fn prepare_rebalance(group: &mut Group, writer: &mut Writer, config: &GroupConfig, now: Instant) {
    if group.state == GroupState::CompletingRebalance {
        // The assignment of the aborted generation never reaches anyone.
        for m in group.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some(tx) = m.sync_waiter.take() {
                let _ = tx.send(sync_error(code::REBALANCE_IN_PROGRESS));
            }
        }
    }
    group.pending_sync.clear();
    group.sync_deadline = None;
    group.persisting = None;
    let was_empty = group.state == GroupState::Empty;
    group.transition(GroupState::PreparingRebalance);
    let rebalance_ms = group.rebalance_timeout().as_millis() as u64;
    if was_empty {
        let delay = config.initial_rebalance_delay_ms.min(rebalance_ms);
        group.initial_delay = Some(InitialDelay {
            remaining_ms: rebalance_ms - delay,
            new_member_added: false,
        });
        group.join_deadline = Some(now + Duration::from_millis(delay));
    } else {
        group.initial_delay = None;
        group.join_deadline = Some(now + Duration::from_millis(rebalance_ms));
        maybe_complete_join(group, writer, now);
    }
}

/// Completes the join phase early when every member has rejoined (not during the initial delay, as Kafka).
fn maybe_complete_join(group: &mut Group, writer: &mut Writer, now: Instant) {
    if group.state == GroupState::PreparingRebalance
        && group.initial_delay.is_none()
        && group.all_members_joined()
    {
        complete_join(group, writer, now);
    }
}

fn complete_join(group: &mut Group, writer: &mut Writer, now: Instant) {
    // Dynamic members that did not rejoin in time are out; static ones keep their place (they expire by
    // session timeout).
    let gone: Vec<String> = group
        .members
        .values()
        .filter(|m| m.join_waiter.is_none() && m.instance_id.is_none())
        .map(|m| m.id.clone())
        .collect();
    for id in gone {
        remove_member(group, &id);
    }
    let joined: Vec<String> = group
        .members
        .values()
        .filter(|m| m.join_waiter.is_some())
        .map(|m| m.id.clone())
        .collect();
    if !group.members.is_empty() && joined.is_empty() {
        // Only static members that have not rejoined: wait another rebalance timeout for them.
        group.join_deadline = Some(now + group.rebalance_timeout());
        return;
    }
    if let Some(leader) = &group.leader {
        if !joined.contains(leader) {
            group.leader = joined.first().cloned();
        }
    }
    group.generation = group.generation.wrapping_add(1).max(1);
    group.join_deadline = None;
    group.initial_delay = None;
    if group.members.is_empty() {
        group.protocol_name = None;
        group.leader = None;
        group.transition(GroupState::Empty);
        writer.persist_group(group);
        return;
    }
    group.protocol_name = group.select_protocol();
    group.transition(GroupState::CompletingRebalance);
    let ids: Vec<String> = group.members.keys().cloned().collect();
    for id in ids {
        let is_leader = group.leader.as_deref() == Some(id.as_str());
        let waiter = group
            .members
            .get_mut(&id)
            .and_then(|m| m.join_waiter.take());
        if let Some((tx, version)) = waiter {
            let members = if is_leader {
                group.member_list(version)
            } else {
                Vec::new()
            };
            let _ = tx.send(join_ok(group, &id, members, false, version));
        }
        if let Some(m) = group.members.get_mut(&id) {
            m.session_deadline = now + ms(m.session_timeout_ms);
        }
        group.pending_sync.insert(id);
    }
    group.sync_deadline = Some(now + group.rebalance_timeout());
}

/// Removes a member from the group's maps (no state transition).
fn remove_member(group: &mut Group, member_id: &str) {
    let Some(member) = group.members.shift_remove(member_id) else {
        return;
    };
    if let Some((tx, v)) = member.join_waiter {
        let _ = tx.send(join_error(code::UNKNOWN_MEMBER_ID, v).with_member_id(s(member_id)));
    }
    if let Some(tx) = member.sync_waiter {
        let _ = tx.send(sync_error(code::UNKNOWN_MEMBER_ID));
    }
    if let Some(inst) = &member.instance_id {
        if group.static_members.get(inst).map(String::as_str) == Some(member_id) {
            group.static_members.remove(inst);
        }
    }
    group.pending_sync.remove(member_id);
    if group.leader.as_deref() == Some(member_id) {
        group.leader = group.members.keys().next().cloned();
    }
}

/// A member left or expired: Kafka's `removeMemberAndUpdateGroup`.
fn remove_member_and_update(
    group: &mut Group,
    writer: &mut Writer,
    config: &GroupConfig,
    member_id: &str,
    now: Instant,
) {
    remove_member(group, member_id);
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, writer, config, now)
        }
        GroupState::PreparingRebalance => maybe_complete_join(group, writer, now),
        GroupState::Empty | GroupState::Dead => {}
    }
}

fn group_timers(group: &mut Group, writer: &mut Writer, config: &GroupConfig, now: Instant) {
    if super::consumer::consumer_timers(group, now) {
        // Members fenced: the log says so before anyone is given their partitions.
        writer.persist_consumer(group);
    }
    // KIP-394 ids never used.
    let before = group.pending_members.len();
    group.pending_members.retain(|_, deadline| *deadline > now);
    if group.pending_members.len() != before {
        maybe_complete_join(group, writer, now);
    }
    // Session timeouts.
    let expired: Vec<String> = group
        .members
        .values()
        .filter(|m| !m.is_parked() && m.session_deadline <= now)
        .map(|m| m.id.clone())
        .collect();
    for id in expired {
        tracing::info!(group = %group.id, member = %id, "member expired after its session timeout");
        remove_member_and_update(group, writer, config, &id, now);
    }
    // Join phase deadline (initial delay or rebalance timeout).
    if group.state == GroupState::PreparingRebalance
        && group.join_deadline.is_some_and(|d| d <= now)
    {
        match group.initial_delay {
            Some(d) if d.new_member_added && d.remaining_ms > 0 => {
                let delay = config.initial_rebalance_delay_ms.min(d.remaining_ms);
                group.initial_delay = Some(InitialDelay {
                    remaining_ms: d.remaining_ms - delay,
                    new_member_added: false,
                });
                group.join_deadline = Some(now + Duration::from_millis(delay));
            }
            _ => complete_join(group, writer, now),
        }
    }
    // Members that got this generation's JoinGroup answer but never sent SyncGroup.
    if group.sync_deadline.is_some_and(|d| d <= now) {
        group.sync_deadline = None;
        if matches!(
            group.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) && !group.pending_sync.is_empty()
        {
            let late: Vec<String> = group.pending_sync.iter().cloned().collect();
            tracing::info!(group = %group.id, members = ?late, "removing members that did not sync in time");
            for id in late {
                remove_member(group, &id);
            }
            prepare_rebalance(group, writer, config, now);
        }
    }
}

/// Applies one replayed record to the in-memory state.
fn apply_record(
    groups: &mut BTreeMap<String, Group>,
    partition: u32,
    key: &[u8],
    value: Option<&[u8]>,
    now: Instant,
) {
    let key_bytes = key;
    let Some(key) = records::decode_key(key) else {
        return;
    };
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition: p,
        } => match value {
            Some(v) => {
                let Some(v) = records::decode_offset_value(v) else {
                    tracing::warn!(%group, %topic, partition = p, "skipping an undecodable offset record");
                    return;
                };
                let g = groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(group, partition, wall_ms()));
                g.offsets.insert(
                    (topic, p),
                    OffsetEntry {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_timestamp: v.commit_timestamp,
                        expire_timestamp: v.expire_timestamp,
                    },
                );
            }
            None => {
                if let Some(g) = groups.get_mut(&group) {
                    g.offsets.remove(&(topic, p));
                    if g.persisted_metadata.is_none()
                        && g.persisted_consumer.is_empty()
                        && g.offsets.is_empty()
                    {
                        groups.remove(&group);
                    }
                }
            }
        },
        RecordKey::Group { group } => match value {
            Some(raw) => {
                let Some(v) = records::decode_group_value(raw) else {
                    tracing::warn!(%group, "skipping an undecodable group metadata record");
                    return;
                };
                let g = groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(group, partition, wall_ms()));
                g.generation = v.generation;
                g.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type);
                g.protocol_name = v.protocol;
                g.leader = v.leader;
                g.state_timestamp_ms = if v.current_state_timestamp > 0 {
                    v.current_state_timestamp
                } else {
                    wall_ms()
                };
                g.persisted_metadata = Some(raw.to_vec());
                g.members.clear();
                g.static_members.clear();
                for m in v.members {
                    if let Some(inst) = &m.instance_id {
                        g.static_members.insert(inst.clone(), m.member_id.clone());
                    }
                    let protocols = g
                        .protocol_name
                        .clone()
                        .map(|p| vec![(p, m.subscription.clone())])
                        .unwrap_or_default();
                    g.members.insert(
                        m.member_id.clone(),
                        Member {
                            id: m.member_id,
                            instance_id: m.instance_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            session_timeout_ms: m.session_timeout_ms,
                            rebalance_timeout_ms: m.rebalance_timeout_ms,
                            protocols,
                            assignment: m.assignment,
                            join_waiter: None,
                            sync_waiter: None,
                            session_deadline: now,
                        },
                    );
                }
                g.state = if g.members.is_empty() {
                    GroupState::Empty
                } else {
                    GroupState::Stable
                };
                if g.leader
                    .as_ref()
                    .is_some_and(|l| !g.members.contains_key(l))
                {
                    g.leader = g.members.keys().next().cloned();
                }
            }
            None => {
                if let Some(g) = groups.get_mut(&group) {
                    if g.offsets.is_empty() && g.persisted_consumer.is_empty() {
                        groups.remove(&group);
                    } else {
                        let offsets = std::mem::take(&mut g.offsets);
                        let consumer = std::mem::take(&mut g.persisted_consumer);
                        *g = Group::new(group, partition, wall_ms());
                        g.offsets = offsets;
                        g.persisted_consumer = consumer;
                    }
                }
            }
        },
        RecordKey::Consumer { group } => match value {
            Some(v) => {
                groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(group, partition, wall_ms()))
                    .persisted_consumer
                    .insert(key_bytes.to_vec(), v.to_vec());
            }
            None => {
                if let Some(g) = groups.get_mut(&group) {
                    g.persisted_consumer.remove(key_bytes);
                    if g.persisted_metadata.is_none()
                        && g.persisted_consumer.is_empty()
                        && g.offsets.is_empty()
                    {
                        groups.remove(&group);
                    }
                }
            }
        },
    }
}

/// Topics of a consumer-protocol subscription (`ConsumerProtocolSubscription`: i16 version, then the topics
/// array). `None` when it cannot be decoded.
pub(super) fn decode_subscription(metadata: &[u8]) -> Option<Vec<String>> {
    // All versions (0-3) start with a non-flexible `topics: [string]` after the i16 version.
    let mut r = metadata.get(2..)?;
    let count = i32::from_be_bytes(r.get(..4)?.try_into().ok()?);
    r = &r[4..];
    if count < 0 || count as usize > r.len() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(r.get(..2)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        topics.push(String::from_utf8_lossy(r.get(2..2 + len)?).into_owned());
        r = &r[2 + len..];
    }
    Some(topics)
}

// ---- response builders ----

pub(super) fn join_error(error: i16, version: i16) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default()
        .with_error_code(error)
        .with_generation_id(-1);
    if version < 7 {
        r.protocol_name = Some(StrBytes::default());
    }
    r
}

fn join_ok(
    group: &Group,
    member_id: &str,
    members: Vec<JoinGroupResponseMember>,
    skip: bool,
    version: i16,
) -> JoinGroupResponse {
    let protocol_name = match &group.protocol_name {
        Some(p) => Some(s(p)),
        None if version < 7 => Some(StrBytes::default()),
        None => None,
    };
    JoinGroupResponse::default()
        .with_error_code(code::NONE)
        .with_generation_id(group.generation)
        .with_protocol_type(group.protocol_type.as_deref().map(s))
        .with_protocol_name(protocol_name)
        .with_leader(s(group.leader.as_deref().unwrap_or("")))
        .with_skip_assignment(skip && version >= 9)
        .with_member_id(s(member_id))
        .with_members(members)
}

pub(super) fn sync_error(error: i16) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(error)
}

fn sync_ok(
    protocol_type: &Option<String>,
    protocol_name: &Option<String>,
    assignment: Bytes,
) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_protocol_type(protocol_type.as_deref().map(s))
        .with_protocol_name(protocol_name.as_deref().map(s))
        .with_assignment(assignment)
}

pub(super) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn ms(v: i32) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

pub(super) fn wall_ms() -> i64 {
    super::wall_ms_now()
}
