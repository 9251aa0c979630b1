//! The group coordinator: consumer groups (Kafka's classic protocol) and committed offsets.
//!
//! A dispatcher decodes a request, calls the matching method of [`GroupCoordinator`] with the request's API
//! version (and, for JoinGroup, the client's id and host), and encodes the returned response with that same
//! version. Responses are already shaped for the version (fields a version lacks are left at their defaults).
//!
//! State lives in memory ([`classic`]) and every change a restart must see is first appended to the
//! `__consumer_offsets` topic in Kafka's record schemas ([`records`], [`store`]). That topic is an ordinary topic
//! of the [`ReplicaManager`], created on first use (by a [`OffsetsTopicCreator`]: the local log manager on a single
//! node, the controller in a cluster). As in Kafka, this broker coordinates the groups of the partitions it leads:
//! [`GroupCoordinator::reconcile`] loads (replays) a partition when this broker becomes its leader and unloads it
//! when it stops leading it. See docs/decisions/0002-group-coordinator.md.
//!
//! Timers (session and rebalance timeouts, the initial rebalance delay, offsets retention) are deadlines kept in
//! the state; one tokio task sleeps until the earliest and then fires what is due.
//!
//! Wiring into a dispatcher:
//! - At start: `GroupCoordinator::start(replica_manager, creator, config, single_node)` inside the runtime (or
//!   `GroupCoordinator::open(data_dir, config)`, which opens a replica manager of its own); after every change of
//!   partition leadership: `reconcile()`; at shutdown: `shutdown().await`.
//! - Route every API key for which [`GroupCoordinator::handles`] is true here; advertise exactly
//!   [`GroupCoordinator::api_versions`] for them in ApiVersions.
//! - JoinGroup needs the header's client id and the peer address ([`ClientInfo`], host as `/127.0.0.1`);
//!   FindCoordinator needs this node ([`NodeInfo`], the advertised host and port); OffsetCommit, OffsetDelete and
//!   the KIP-848 APIs need the topic registry as a [`TopicCatalog`].
//! - JoinGroup and SyncGroup may take up to the rebalance timeout to answer: run each request as its own task
//!   (responses still go out in request order per connection) rather than blocking the connection's reader.

mod admin;
mod classic;
mod consumer;
pub mod consumer_records;
mod offsets;
pub mod records;
pub(crate) mod store;
mod txn_offsets;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use parking_lot::Mutex;
use tokio::sync::Notify;

use classic::{CommitWait, State};
pub use store::TOPIC as OFFSETS_TOPIC;

use crate::ops::lag_health::{CommitSample, CommitWindows};
use crate::replica::{Partition, ReplicaManager};

/// Kafka error codes the coordinator answers with.
pub mod code {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const INVALID_COMMIT_OFFSET_SIZE: i16 = 28;
    pub const INVALID_REQUEST: i16 = 42;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub const FENCED_INSTANCE_ID: i16 = 82;
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    pub const FENCED_MEMBER_EPOCH: i16 = 110;
    pub const UNRELEASED_INSTANCE_ID: i16 = 111;
    pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
    pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
    pub const STALE_MEMBER_EPOCH: i16 = 113;
}

/// Coordinator settings, named after Kafka's broker configs.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `offsets.topic.num.partitions` (50): the partition count `__consumer_offsets` is created with. Once the
    /// topic exists its own count decides where a group lives.
    pub offsets_topic_num_partitions: u32,
    /// `offsets.topic.replication.factor` (3), capped at the live brokers when the topic is created.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes` (104857600).
    pub offsets_topic_segment_bytes: i64,
    /// `offsets.commit.timeout.ms` (5000): how long a write waits to be committed before its request fails.
    pub offsets_commit_timeout_ms: u64,
    /// `group.initial.rebalance.delay.ms` (3000): how long an empty group waits for more members to join.
    pub initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms` (6000).
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (1800000).
    pub max_session_timeout_ms: i32,
    /// `group.max.size` (unbounded in Kafka; `i32::MAX`).
    pub max_size: u32,
    /// `offsets.retention.minutes` (7 days) in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000).
    pub offsets_retention_check_interval_ms: u64,
    /// `offset.metadata.max.bytes` (4096).
    pub offset_metadata_max_bytes: usize,
    /// Create `__consumer_offsets` with `flush.messages=1`: its high watermark is then the fsynced offset, so a
    /// write is answered only after its fsync (the partition's group commit; concurrent requests share one).
    /// Commits survive kill -9 either way (the page cache outlives the process); this adds power-loss
    /// durability.
    pub sync_writes: bool,
    /// `group.consumer.session.timeout.ms` (45000): KIP-848 members are fenced after this without a heartbeat.
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (5000): told to KIP-848 members.
    pub consumer_heartbeat_interval_ms: i32,
    /// `lag.window.commits` (10): commits kept per group and partition for lag health (`ops::lag_health`).
    pub lag_window_commits: usize,
    /// Seeds the member ids the coordinator hands out (`BrokerEnv::seed`, the simulator's): `None` draws them
    /// from the operating system's randomness, as Kafka's UUIDs.
    pub member_id_seed: Option<u64>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            offsets_topic_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            offsets_topic_segment_bytes: 100 * 1024 * 1024,
            offsets_commit_timeout_ms: 5000,
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as u32,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            sync_writes: true,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            lag_window_commits: 10,
            member_id_seed: None,
        }
    }
}

/// Who sent a request (from the request header and the connection), shown by DescribeGroups.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub client_id: String,
    /// As Kafka shows it: `/127.0.0.1`.
    pub client_host: String,
}

/// This broker, as FindCoordinator answers it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// What the KIP-848 server-side assignors need to know about a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub partitions: i32,
}

/// The broker's topics, as the consumer group protocol (KIP-848) needs them: its assignments name topics by id.
pub trait TopicCatalog: Send + Sync {
    /// An existing topic by name; `None` if there is no such topic (yet).
    fn topic(&self, name: &str) -> Option<TopicInfo>;
    /// A topic's name by id (for ConsumerGroupDescribe); `None` if unknown.
    fn topic_name(&self, id: uuid::Uuid) -> Option<String>;
    /// Whether `topic` exists and has a partition `partition`: what an offset commit may name.
    fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.topic(topic)
            .is_some_and(|t| partition >= 0 && partition < t.partitions)
    }
}

/// One committed offset, for lag views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One group as the operations views (HTTP `/v1/groups`, metrics) show it.
#[derive(Debug, Clone)]
pub struct GroupOverview {
    pub group: String,
    /// Kafka's state name (classic: Empty, Stable, ...; consumer protocol: Empty, Assigning, ...).
    pub state: &'static str,
    /// "classic" or "consumer".
    pub kind: &'static str,
    pub members: usize,
    pub offsets: Vec<CommittedOffset>,
}

/// A boxed future, for the object-safe [`OffsetsTopicCreator`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What `__consumer_offsets` is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsTopicSpec {
    /// The internal topic: `__consumer_offsets`, or `__transaction_state` for the transaction coordinator.
    pub name: &'static str,
    pub partitions: i32,
    /// `offsets.topic.replication.factor`; the creator caps it at the live brokers.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// Creates `__consumer_offsets` through the broker's normal topic-creation path. Returns once the topic is in
/// this broker's replica manager (or failed).
pub trait OffsetsTopicCreator: Send + Sync {
    fn create(&self, spec: OffsetsTopicSpec) -> BoxFuture<'_, anyhow::Result<()>>;
}

/// A single node: the local log manager creates the topic, and this broker leads every partition.
pub struct LocalOffsetsTopic(pub Arc<ReplicaManager>);

impl OffsetsTopicCreator for LocalOffsetsTopic {
    fn create(&self, spec: OffsetsTopicSpec) -> BoxFuture<'_, anyhow::Result<()>> {
        let rm = self.0.clone();
        Box::pin(async move {
            crate::blocking(move || rm.create_topic(spec.name, spec.partitions, spec.configs))
                .await
                .map(|_| ())
        })
    }
}

/// The consumer-group coordinator. `Send + Sync`; use it behind the `Arc` that [`GroupCoordinator::start`]
/// returns. Needs a tokio runtime (for its timer task).
pub struct GroupCoordinator {
    shared: Arc<Shared>,
    timer: tokio::task::JoinHandle<()>,
    /// Set when [`GroupCoordinator::open`] opened the replica manager itself: it closes it at shutdown.
    standalone: Option<tokio::sync::watch::Sender<bool>>,
}

impl Drop for GroupCoordinator {
    fn drop(&mut self) {
        // The timer task holds the state while it sleeps; stop it so the logs are released promptly.
        self.timer.abort();
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Wakes the timer task when a new deadline may be earlier than the one it sleeps on.
    wake: Notify,
    config: GroupConfig,
    replicas: Arc<ReplicaManager>,
    creator: Arc<dyn OffsetsTopicCreator>,
    /// One creation of `__consumer_offsets` at a time.
    creating: tokio::sync::Mutex<()>,
    /// The last commits of each group and partition, for lag health (its own lock, not the state's).
    commit_windows: Arc<CommitWindows>,
}

/// The APIs and versions the coordinator implements (and its tests cover): what ApiVersions should advertise
/// for them. `(api key, min, max)`.
const API_VERSIONS: &[(i16, i16, i16)] = &[
    (8, 2, 9),  // OffsetCommit (v0-1 removed in Kafka 4)
    (9, 1, 9),  // OffsetFetch (v0 removed in Kafka 4)
    (10, 0, 6), // FindCoordinator
    (11, 0, 9), // JoinGroup
    (12, 0, 4), // Heartbeat
    (13, 0, 5), // LeaveGroup
    (14, 0, 5), // SyncGroup
    (15, 0, 6), // DescribeGroups
    (16, 0, 5), // ListGroups
    (42, 0, 2), // DeleteGroups
    (47, 0, 0), // OffsetDelete
    (68, 0, 1), // ConsumerGroupHeartbeat (KIP-848)
    (69, 0, 1), // ConsumerGroupDescribe (KIP-848)
];

impl GroupCoordinator {
    /// A standalone single-node coordinator on `data_dir` (tests and tools): opens a replica manager of its own
    /// on that directory and closes it at [`GroupCoordinator::shutdown`]. Must be called inside a tokio runtime.
    pub fn open(data_dir: &Path, config: GroupConfig) -> anyhow::Result<Arc<Self>> {
        let broker = crate::BrokerConfig::load(None, &[], Some(data_dir.to_path_buf()), None)?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let replicas = Arc::new(ReplicaManager::open_standalone(&broker, stop_rx)?);
        let creator = Arc::new(LocalOffsetsTopic(replicas.clone()));
        let mut coordinator = Self::build(replicas, creator, config, true)?;
        coordinator.standalone = Some(stop_tx);
        Ok(Arc::new(coordinator))
    }

    /// The broker's coordinator over its replica manager. On a single node (`single_node`) a data directory
    /// written when the coordinator kept its own logs is adopted first (its `__consumer_offsets-<n>/`
    /// directories already have a partition's layout: the topic is registered over them, nothing is copied),
    /// and the partitions are loaded before this returns, as the broker led them all at open. In a cluster the
    /// partitions load as the metadata makes this broker their leader ([`GroupCoordinator::reconcile`]).
    /// Must be called inside a tokio runtime.
    pub fn start(
        replicas: Arc<ReplicaManager>,
        creator: Arc<dyn OffsetsTopicCreator>,
        config: GroupConfig,
        single_node: bool,
    ) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self::build(
            replicas,
            creator,
            config,
            single_node,
        )?))
    }

    fn build(
        replicas: Arc<ReplicaManager>,
        creator: Arc<dyn OffsetsTopicCreator>,
        config: GroupConfig,
        single_node: bool,
    ) -> anyhow::Result<GroupCoordinator> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the group coordinator needs a tokio runtime"))?;
        anyhow::ensure!(
            config.offsets_topic_num_partitions >= 1,
            "offsets.topic.num.partitions must be at least 1"
        );
        if single_node && replicas.topic(OFFSETS_TOPIC).is_none() {
            adopt_legacy_partitions(&replicas, &config)?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(config.clone())),
            wake: Notify::new(),
            creator,
            replicas,
            creating: tokio::sync::Mutex::new(()),
            commit_windows: Arc::new(CommitWindows::new(config.lag_window_commits)),
            config,
        });
        if single_node {
            // As before the topic existed: the groups are in memory when the broker starts serving.
            for (partition, leader_epoch, part) in begin_loads(&shared) {
                load_partition(&shared, partition, leader_epoch, part);
            }
            let groups = shared.state.lock().groups.len();
            tracing::info!(groups, "group coordinator loaded");
        }
        let timer = runtime.spawn(timer_task(Arc::downgrade(&shared)));
        Ok(GroupCoordinator {
            shared,
            timer,
            standalone: None,
        })
    }

    /// Makes the coordinated partitions match the partitions of `__consumer_offsets` this broker leads: loads
    /// (in the background) each one it has become leader of, unloads each one it no longer leads. Idempotent;
    /// call it after every change of partition leadership (the timer task also calls it every second).
    pub fn reconcile(&self) {
        reconcile(&self.shared);
    }

    /// Creates `__consumer_offsets` if it does not exist yet and loads the partitions this broker leads.
    /// COORDINATOR_NOT_AVAILABLE if the topic could not be created (clients retry).
    pub async fn ensure_offsets_topic(&self) -> Result<(), i16> {
        let shared = &self.shared;
        if shared.replicas.topic(OFFSETS_TOPIC).is_some() {
            return Ok(());
        }
        let _one = shared.creating.lock().await;
        if shared.replicas.topic(OFFSETS_TOPIC).is_none() {
            let spec = offsets_topic_spec(&shared.config);
            if let Err(e) = shared.creator.create(spec).await {
                tracing::warn!(error = %format!("{e:#}"), "cannot create {OFFSETS_TOPIC}");
                return Err(code::COORDINATOR_NOT_AVAILABLE);
            }
            tracing::info!("created {OFFSETS_TOPIC}");
        }
        for handle in reconcile(shared) {
            let _ = handle.await;
        }
        // The timer's reconcile may have started some of the loads (then there is no handle to await here):
        // wait for those too, so the request that created the topic is served rather than told to retry.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while shared.state.lock().is_loading() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Whether this broker serves requests for `group` now: creates `__consumer_offsets` on first use, then
    /// NOT_COORDINATOR if this broker does not lead the group's partition, COORDINATOR_LOAD_IN_PROGRESS while
    /// it loads it. An empty group id passes (the APIs answer INVALID_GROUP_ID themselves).
    async fn ready(&self, group: &str) -> Result<(), i16> {
        if group.is_empty() {
            return Ok(());
        }
        self.ensure_offsets_topic().await?;
        match self.shared.state.lock().coordinator_error(group) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// [`GroupCoordinator::ready`] for several groups: each one's error, `None` where it is served here.
    async fn errors_of(&self, groups: &[String]) -> Vec<Option<i16>> {
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            out.push(self.ready(g).await.err());
        }
        out
    }

    /// The replica manager whose `__consumer_offsets` partitions this coordinator writes to.
    pub fn replica_manager(&self) -> &Arc<ReplicaManager> {
        &self.shared.replicas
    }

    /// The partition of `__consumer_offsets` that holds `group`.
    pub fn partition_for(&self, group: &str) -> u32 {
        self.shared.state.lock().partition_for_group(group)
    }

    /// `(api key, min version, max version)` for every API this coordinator serves.
    pub fn api_versions() -> &'static [(i16, i16, i16)] {
        API_VERSIONS
    }

    /// Whether the coordinator serves `api_key` (a dispatcher can route on this).
    pub fn handles(api_key: i16) -> bool {
        API_VERSIONS.iter().any(|(k, _, _)| *k == api_key)
    }

    pub fn config(&self) -> &GroupConfig {
        &self.shared.config
    }

    /// JoinGroup. Long-polls: returns when the rebalance completes (or at once for errors and KIP-394's
    /// MEMBER_ID_REQUIRED).
    pub async fn join_group(
        &self,
        req: JoinGroupRequest,
        api_version: i16,
        client: &ClientInfo,
    ) -> JoinGroupResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return classic::join_error(error, api_version).with_member_id(req.member_id);
        }
        let (outcome, syncs) = {
            let mut state = self.shared.state.lock();
            let outcome = state.join_group(req, api_version, client, clock_now());
            (outcome, state.take_waits())
        };
        self.after_change(syncs).await;
        match outcome {
            classic::Reply::Now(resp) => resp,
            classic::Reply::Later(rx) => rx
                .await
                .unwrap_or_else(|_| classic::join_error(code::NOT_COORDINATOR, api_version)),
        }
    }

    /// SyncGroup. Long-polls until the leader's assignment arrives.
    pub async fn sync_group(&self, req: SyncGroupRequest, api_version: i16) -> SyncGroupResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return classic::sync_error(error);
        }
        let group_id = req.group_id.0.to_string();
        let (outcome, persisting, syncs) = {
            let mut state = self.shared.state.lock();
            let (outcome, persisting) = state.sync_group(req, api_version, clock_now());
            (outcome, persisting, state.take_waits())
        };
        let committed = self.after_change(syncs).await;
        if let Some(generation) = persisting {
            // The leader's assignment: the members hear of it only now that it is committed (or not).
            let waits = {
                let mut state = self.shared.state.lock();
                state.complete_sync(&group_id, generation, committed, clock_now());
                state.take_waits()
            };
            self.after_change(waits).await;
        }
        match outcome {
            // An assignment handed out at once (a stable group) waited for the log it came from to be committed.
            classic::Reply::Now(resp) if resp.error_code == code::NONE && !committed => {
                classic::sync_error(code::COORDINATOR_NOT_AVAILABLE)
            }
            classic::Reply::Now(resp) => resp,
            classic::Reply::Later(rx) => rx
                .await
                .unwrap_or_else(|_| classic::sync_error(code::NOT_COORDINATOR)),
        }
    }

    pub async fn heartbeat(&self, req: HeartbeatRequest, _api_version: i16) -> HeartbeatResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return HeartbeatResponse::default().with_error_code(error);
        }
        let (error, syncs) = {
            let mut state = self.shared.state.lock();
            let error = state.heartbeat(&req, clock_now());
            (error, state.take_waits())
        };
        self.after_change(syncs).await;
        HeartbeatResponse::default().with_error_code(error)
    }

    pub async fn leave_group(
        &self,
        req: LeaveGroupRequest,
        api_version: i16,
    ) -> LeaveGroupResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return LeaveGroupResponse::default().with_error_code(error);
        }
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.leave_group(req, api_version, clock_now());
            (resp, state.take_waits())
        };
        self.after_change(syncs).await;
        resp
    }

    /// OffsetCommit: answers once the commit is in the log (and fsynced when `sync_writes`). Partitions of
    /// topics `topics` does not know get UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers.
    pub async fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> OffsetCommitResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return offsets::commit_error(&req, error);
        }
        let group = req.group_id.0.to_string();
        let offsets: Vec<(String, i32, i64)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.committed_offset))
            })
            .collect();
        let (mut resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.offset_commit(req, api_version, topics, clock_now());
            (resp, state.take_waits())
        };
        if !self.after_change(syncs).await {
            offsets::fail_commit(&mut resp, code::COORDINATOR_NOT_AVAILABLE);
        } else {
            self.record_commits(&group, offsets, &resp);
        }
        resp
    }

    /// Adds each accepted commit to its lag-health window, with the partition's lag at this moment.
    fn record_commits(
        &self,
        group: &str,
        offsets: Vec<(String, i32, i64)>,
        resp: &OffsetCommitResponse,
    ) {
        let accepted = |topic: &str, partition: i32| {
            resp.topics.iter().any(|t| {
                t.name.0.as_str() == topic
                    && t.partitions
                        .iter()
                        .any(|p| p.partition_index == partition && p.error_code == code::NONE)
            })
        };
        let now = wall_ms_now();
        let samples: Vec<(String, i32, CommitSample)> = offsets
            .into_iter()
            .filter(|(t, p, _)| accepted(t, *p))
            .map(|(topic, partition, offset)| {
                let hw = self
                    .shared
                    .replicas
                    .partition(&topic, partition)
                    .map_or(offset, |p| p.high_watermark());
                let sample = CommitSample {
                    offset,
                    timestamp_ms: now,
                    lag: (hw - offset).max(0),
                };
                (topic, partition, sample)
            })
            .collect();
        self.shared.commit_windows.record(group, samples);
    }

    /// The lag-health windows of this coordinator's groups.
    pub fn commit_windows(&self) -> &Arc<CommitWindows> {
        &self.shared.commit_windows
    }

    /// Every group this broker coordinates: state, members and committed offsets (the operations views).
    pub fn overview(&self) -> Vec<GroupOverview> {
        self.shared.state.lock().overview()
    }

    /// The overviews of the named groups only (those this broker coordinates).
    pub fn overview_of(&self, groups: &HashSet<String>) -> Vec<GroupOverview> {
        self.shared
            .state
            .lock()
            .overview_where(|g| groups.contains(g), |_| true, false)
    }

    /// The groups with committed offsets on one of `topics`, each with those offsets only.
    pub fn overview_on_topics(&self, topics: &HashSet<&str>) -> Vec<GroupOverview> {
        self.shared
            .state
            .lock()
            .overview_where(|_| true, |t| topics.contains(t), true)
    }

    /// A read barrier before committed offsets are read (OffsetFetch): proves that this broker still leads the
    /// `__consumer_offsets` partition holding `group`, so that no newer commit was acknowledged elsewhere. A broker
    /// cut off while its leadership moved goes on believing it leads until its metadata catches up, and its cache
    /// would answer offsets older than commits the new leader acknowledged (a consumer starting from them would
    /// process records again; found by annal-sim, decision 0011). The barrier appends a record that replays as
    /// nothing and waits until it is committed: its partition's high watermark can pass it only after the in-sync
    /// followers fetched it from this leader at its leader epoch, after this request arrived, and a newer leader
    /// cannot have acknowledged a commit before that without one of them already following it (min.insync.replicas
    /// at least 2, as `__consumer_offsets`' default; with 1 the barrier proves nothing, as acks=all then promises
    /// little). Kafka answers from its cache without one. COORDINATOR_NOT_AVAILABLE when the barrier does not
    /// commit within `offsets.commit.timeout.ms`: the client finds the coordinator again and retries.
    async fn read_barrier(&self, group: &str) -> Result<(), i16> {
        if group.is_empty() {
            return Ok(());
        }
        let waits = {
            let mut state = self.shared.state.lock();
            let partition = state.partition_for_group(group);
            if !state.append_read_barrier(partition) {
                return Err(state
                    .coordinator_error(group)
                    .unwrap_or(code::COORDINATOR_NOT_AVAILABLE));
            }
            state.take_waits()
        };
        if run_waits(&self.shared, waits).await {
            Ok(())
        } else {
            Err(code::COORDINATOR_NOT_AVAILABLE)
        }
    }

    /// [`GroupCoordinator::ready`] then [`GroupCoordinator::read_barrier`], for the groups of one OffsetFetch:
    /// one barrier per `__consumer_offsets` partition.
    async fn readable(&self, groups: &[String]) -> Vec<Option<i16>> {
        let mut errors = self.errors_of(groups).await;
        let mut barriers: BTreeMap<u32, Option<i16>> = BTreeMap::new();
        for (group, error) in groups.iter().zip(errors.iter_mut()) {
            if error.is_some() || group.is_empty() {
                continue;
            }
            let partition = self.partition_for(group);
            if let Some(outcome) = barriers.get(&partition) {
                *error = *outcome;
                continue;
            }
            let outcome = self.read_barrier(group).await.err();
            barriers.insert(partition, outcome);
            *error = outcome;
        }
        errors
    }

    pub async fn offset_fetch(
        &self,
        req: OffsetFetchRequest,
        api_version: i16,
    ) -> OffsetFetchResponse {
        if api_version < 8 {
            let group = req.group_id.0.to_string();
            let error = self
                .readable(std::slice::from_ref(&group))
                .await
                .pop()
                .flatten();
            if let Some(error) = error {
                return offsets::fetch_error(&req, api_version, error);
            }
            let require_stable = api_version >= 7 && req.require_stable;
            let group = req.group_id.0.to_string();
            let state = self.shared.state.lock();
            let mut resp = state.offset_fetch(req, api_version);
            if require_stable {
                for t in &mut resp.topics {
                    for p in &mut t.partitions {
                        if state.has_pending_txn_offset(
                            &group,
                            t.name.0.as_str(),
                            p.partition_index,
                        ) {
                            p.error_code = code::UNSTABLE_OFFSET_COMMIT;
                        }
                    }
                }
            }
            return resp;
        }
        let require_stable = req.require_stable;
        let ids: Vec<String> = req
            .groups
            .iter()
            .map(|g| g.group_id.0.to_string())
            .collect();
        let errors = self.readable(&ids).await;
        let (mut served, mut refused) = (req.clone(), Vec::new());
        served.groups.clear();
        for (g, error) in req.groups.into_iter().zip(errors) {
            match error {
                None => served.groups.push(g),
                Some(e) => refused.push(
                    offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(e),
                ),
            }
        }
        let state = self.shared.state.lock();
        let mut resp = state.offset_fetch(served, api_version);
        if require_stable {
            // KIP-447: an offset a transaction may still change is not answered; the client retries.
            for g in &mut resp.groups {
                for t in &mut g.topics {
                    for p in &mut t.partitions {
                        if state.has_pending_txn_offset(
                            &g.group_id.0,
                            t.name.0.as_str(),
                            p.partition_index,
                        ) {
                            p.error_code = code::UNSTABLE_OFFSET_COMMIT;
                        }
                    }
                }
            }
        }
        drop(state);
        resp.groups.extend(refused);
        resp
    }

    /// OffsetDelete. Partitions of topics `topics` does not know get UNKNOWN_TOPIC_OR_PARTITION, as Kafka.
    pub async fn offset_delete(
        &self,
        req: OffsetDeleteRequest,
        _api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> OffsetDeleteResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return OffsetDeleteResponse::default().with_error_code(error);
        }
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.offset_delete(req, topics);
            (resp, state.take_waits())
        };
        self.after_change(syncs).await;
        resp
    }

    pub async fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        api_version: i16,
    ) -> DescribeGroupsResponse {
        let ids: Vec<String> = req.groups.iter().map(|g| g.0.to_string()).collect();
        let errors = self.errors_of(&ids).await;
        let (mut served, mut refused) = (req.clone(), Vec::new());
        served.groups.clear();
        for (g, error) in req.groups.into_iter().zip(errors) {
            match error {
                None => served.groups.push(g),
                Some(e) => refused.push(
                    describe_groups_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(e),
                ),
            }
        }
        let mut resp = self
            .shared
            .state
            .lock()
            .describe_groups(served, api_version);
        resp.groups.extend(refused);
        resp
    }

    pub async fn list_groups(
        &self,
        req: ListGroupsRequest,
        api_version: i16,
    ) -> ListGroupsResponse {
        self.shared.state.lock().list_groups(req, api_version)
    }

    pub async fn delete_groups(
        &self,
        req: DeleteGroupsRequest,
        _api_version: i16,
    ) -> DeleteGroupsResponse {
        let ids: Vec<String> = req.groups_names.iter().map(|g| g.0.to_string()).collect();
        let errors = self.errors_of(&ids).await;
        let (mut served, mut refused) = (req.clone(), Vec::new());
        served.groups_names.clear();
        for (g, error) in req.groups_names.into_iter().zip(errors) {
            match error {
                None => served.groups_names.push(g),
                Some(e) => refused.push(
                    delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(e),
                ),
            }
        }
        let (mut resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.delete_groups(served);
            (resp, state.take_waits())
        };
        self.after_change(syncs).await;
        resp.results.extend(refused);
        resp
    }

    /// FindCoordinator for group keys (key type 0): this node. Transaction keys (key type 1) get
    /// COORDINATOR_NOT_AVAILABLE here; a broker with a transaction coordinator answers those itself.
    pub fn find_coordinator(
        &self,
        req: FindCoordinatorRequest,
        api_version: i16,
        node: &NodeInfo,
    ) -> FindCoordinatorResponse {
        admin::find_coordinator(req, api_version, node)
    }

    /// ConsumerGroupHeartbeat (KIP-848). `topics` resolves subscribed topic names to ids and partition counts.
    pub async fn consumer_group_heartbeat(
        &self,
        req: ConsumerGroupHeartbeatRequest,
        api_version: i16,
        client: &ClientInfo,
        topics: &dyn TopicCatalog,
    ) -> ConsumerGroupHeartbeatResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(error)
                .with_member_id(Some(req.member_id));
        }
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.consumer_heartbeat(req, api_version, client, topics, clock_now());
            (resp, state.take_waits())
        };
        // The member hears of its epoch and partitions only once the log holds them.
        if !self.after_change(syncs).await && resp.error_code == code::NONE {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code::COORDINATOR_NOT_AVAILABLE)
                .with_error_message(Some(
                    "The group's new state was not committed to its __consumer_offsets partition in time; retry."
                        .into(),
                ))
                .with_member_id(resp.member_id);
        }
        resp
    }

    /// ConsumerGroupDescribe (KIP-848).
    pub async fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
        _api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> ConsumerGroupDescribeResponse {
        let ids: Vec<String> = req.group_ids.iter().map(|g| g.0.to_string()).collect();
        let errors = self.errors_of(&ids).await;
        let (mut served, mut refused) = (req.clone(), Vec::new());
        served.group_ids.clear();
        for (g, error) in req.group_ids.into_iter().zip(errors) {
            match error {
                None => served.group_ids.push(g),
                Some(e) => refused.push(
                    consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(e),
                ),
            }
        }
        let mut resp = self
            .shared
            .state
            .lock()
            .consumer_group_describe(served, topics);
        resp.groups.extend(refused);
        resp
    }

    /// TxnOffsetCommit: the offsets are written as the producer's transactional batch and become the group's
    /// only when the transaction commits ([`GroupCoordinator::complete_transaction`]).
    pub async fn txn_offset_commit(
        &self,
        req: TxnOffsetCommitRequest,
        _api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> TxnOffsetCommitResponse {
        if let Err(error) = self.ready(req.group_id.0.as_str()).await {
            return txn_commit_error(&req, error);
        }
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.txn_offset_commit(req.clone(), topics, clock_now());
            (resp, state.take_waits())
        };
        if !self.after_change(syncs).await {
            return txn_commit_error(&req, code::COORDINATOR_NOT_AVAILABLE);
        }
        resp
    }

    /// A transaction marker of `producer_id` (at `producer_epoch`) was written to partition `partition` of
    /// `__consumer_offsets` (Kafka's `GroupCoordinator.completeTransaction`; the WriteTxnMarkers handler calls
    /// this): the producer's pending transactional offsets there become the groups' committed offsets (`commit`)
    /// or are dropped. Returns the number of offsets made visible.
    pub fn complete_transaction(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> usize {
        tracing::debug!(
            partition,
            producer_id,
            producer_epoch,
            commit,
            "transaction marker written to {OFFSETS_TOPIC}"
        );
        let Ok(partition) = u32::try_from(partition) else {
            return 0;
        };
        self.shared
            .state
            .lock()
            .complete_transaction(partition, producer_id, commit)
    }

    /// Committed offsets of `group` (empty if it has none), sorted by topic and partition.
    pub fn committed_offsets(&self, group: &str) -> Vec<CommittedOffset> {
        self.shared.state.lock().committed_offsets(group)
    }

    /// Stops coordinating: pending JoinGroup/SyncGroup calls answer NOT_COORDINATOR, later calls get
    /// NOT_COORDINATOR, and the partitions are released to the replica manager (which closes them; a standalone
    /// coordinator closes its own).
    pub async fn shutdown(&self) {
        self.shared.state.lock().shutdown();
        self.shared.wake.notify_one();
        if self.standalone.is_some() {
            let _ = self.standalone.as_ref().map(|s| s.send(true));
            let rm = self.shared.replicas.clone();
            crate::blocking(move || rm.close_all()).await;
        }
    }

    /// Waits until a change's writes are committed (outside the lock) and wakes the timer task for new
    /// deadlines. Returns false when a write did not commit in time.
    async fn after_change(&self, waits: Vec<CommitWait>) -> bool {
        self.shared.wake.notify_one();
        run_waits(&self.shared, waits).await
    }
}

/// Waits for each write to be committed: its partition's high watermark past it (after the group-commit fsync
/// for a durable partition), within `offsets.commit.timeout.ms`. False if one did not make it.
async fn run_waits(shared: &Arc<Shared>, waits: Vec<CommitWait>) -> bool {
    if waits.is_empty() {
        return true;
    }
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(shared.config.offsets_commit_timeout_ms);
    let mut ok = true;
    for w in waits {
        if let Some(durable) = w.durable {
            match durable.await {
                Ok(()) => w.part.high_watermark_moved(),
                Err(e) => {
                    tracing::error!(partition = %w.part.name(), error = %e, "fsync of a group coordinator write failed");
                    ok = false;
                    continue;
                }
            }
        }
        if !wait_for_high_watermark(&w.part, w.last_offset + 1, deadline).await {
            tracing::warn!(partition = %w.part.name(), offset = w.last_offset, "a group coordinator write was not committed in time");
            ok = false;
        }
    }
    ok
}

/// How often a commit wait looks at the high watermark when the partition has no room for another watcher.
const HIGH_WATERMARK_POLL: Duration = Duration::from_millis(10);

/// Waits until `part`'s high watermark reaches `target`, woken by the partition's high-watermark moves. False at
/// `deadline` or once this broker no longer leads the partition.
async fn wait_for_high_watermark(
    part: &Partition,
    target: i64,
    deadline: tokio::time::Instant,
) -> bool {
    let waiter = Arc::new(Notify::new());
    loop {
        // Watch before looking, so a move between the look and the wait still wakes us.
        let watching = part.watchers().watch(&waiter);
        let reached = part.high_watermark() >= target;
        if reached || !part.is_leader() || tokio::time::Instant::now() >= deadline {
            part.watchers().unwatch(&waiter);
            return reached;
        }
        let until = if watching {
            deadline
        } else {
            (tokio::time::Instant::now() + HIGH_WATERMARK_POLL).min(deadline)
        };
        tokio::select! {
            biased;
            _ = waiter.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        part.watchers().unwatch(&waiter);
    }
}

/// The configs `__consumer_offsets` is created with, as Kafka's (`cleanup.policy=compact`,
/// `offsets.topic.segment.bytes`), plus a message size that fits a commit of many partitions and, with
/// `sync_writes`, `flush.messages=1`.
fn offsets_topic_spec(config: &GroupConfig) -> OffsetsTopicSpec {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert(
        "segment.bytes".to_string(),
        config.offsets_topic_segment_bytes.to_string(),
    );
    configs.insert(
        "max.message.bytes".to_string(),
        OFFSETS_MAX_MESSAGE_BYTES.to_string(),
    );
    if config.sync_writes {
        configs.insert("flush.messages".to_string(), "1".to_string());
    }
    OffsetsTopicSpec {
        name: OFFSETS_TOPIC,
        partitions: i32::try_from(config.offsets_topic_num_partitions).unwrap_or(i32::MAX),
        replication_factor: config.offsets_topic_replication_factor,
        configs,
    }
}

/// The largest coordinator batch `__consumer_offsets` accepts (a commit of many partitions is one batch).
const OFFSETS_MAX_MESSAGE_BYTES: i64 = 100 * 1024 * 1024;

/// `__consumer_offsets` not registered yet: if the data directory holds the partitions the
/// coordinator used to keep as its own logs, registers the topic over them (same directories, same files).
pub fn adopt_legacy_partitions(
    replicas: &ReplicaManager,
    config: &GroupConfig,
) -> anyhow::Result<()> {
    let dir = replicas.log_manager().data_dir().to_path_buf();
    let present = store::prepare_legacy_dir(&dir, config.offsets_topic_num_partitions)?;
    if present.is_empty() {
        return Ok(());
    }
    let spec = offsets_topic_spec(config);
    replicas.create_topic(OFFSETS_TOPIC, spec.partitions, spec.configs)?;
    tracing::info!(
        partitions = present.len(),
        "registered the existing {OFFSETS_TOPIC} partitions as a topic"
    );
    Ok(())
}

/// Marks the partitions this broker newly leads as loading and unloads those it no longer leads; returns the
/// ones to load.
fn begin_loads(shared: &Arc<Shared>) -> Vec<(u32, i32, Arc<Partition>)> {
    let parts = shared.replicas.partitions_of(OFFSETS_TOPIC);
    let mut state = shared.state.lock();
    if state.is_closed() {
        return Vec::new();
    }
    if !parts.is_empty() {
        state.writer.num_partitions = parts.len() as u32;
    }
    let mut led = std::collections::HashSet::new();
    let mut to_load = Vec::new();
    for part in parts {
        if !part.is_leader() {
            continue;
        }
        let Ok(partition) = u32::try_from(part.index()) else {
            continue;
        };
        led.insert(partition);
        let leader_epoch = part.leader_epoch();
        if state.owned_epoch(partition) != Some(leader_epoch) {
            tracing::info!(partition = %part.name(), leader_epoch, "becoming the coordinator: loading");
            state.begin_load(partition, leader_epoch);
            to_load.push((partition, leader_epoch, part));
        }
    }
    for partition in state.owned_partitions() {
        if !led.contains(&partition) {
            state.unload(partition);
        }
    }
    to_load
}

/// See [`GroupCoordinator::reconcile`]; returns the load tasks started.
fn reconcile(shared: &Arc<Shared>) -> Vec<tokio::task::JoinHandle<()>> {
    begin_loads(shared)
        .into_iter()
        .map(|(partition, leader_epoch, part)| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let loaded = crate::blocking_caught(move || {
                    load_partition(&shared, partition, leader_epoch, part)
                })
                .await;
                if let Err(e) = loaded {
                    tracing::error!(partition, error = %e, "loading a __consumer_offsets partition failed");
                }
            })
        })
        .collect()
}

/// Replays one partition and installs its groups, unless leadership moved meanwhile. Blocking.
fn load_partition(shared: &Arc<Shared>, partition: u32, leader_epoch: i32, part: Arc<Partition>) {
    let started = clock_now();
    let consumer_session =
        Duration::from_millis(shared.config.consumer_session_timeout_ms.max(1) as u64);
    match classic::load(&part, partition, consumer_session) {
        Ok(loaded) => {
            let groups = loaded.groups.len();
            if shared
                .state
                .lock()
                .install(partition, leader_epoch, part.clone(), loaded)
            {
                tracing::debug!(partition = %part.name(), groups, took_ms = started.elapsed().as_millis() as u64, "coordinator loaded");
            }
        }
        Err(e) => {
            // Forget the attempt; the next reconcile (at most a second away) tries again if still leader.
            tracing::error!(partition = %part.name(), error = %format!("{e:#}"), "cannot load the coordinator's partition");
            let mut state = shared.state.lock();
            if state.owned_epoch(partition) == Some(leader_epoch) {
                state.unload(partition);
            }
        }
    }
    shared.wake.notify_one();
}

/// Sleeps until the earliest deadline (or a wake-up), fires what is due, repeats; ends when the coordinator is
/// dropped or shut down.
async fn timer_task(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        // A backstop for leadership changes nobody told us about (a deleted topic, a missed hook).
        drop(reconcile(&strong));
        let (next, syncs, closed) = {
            let mut state = strong.state.lock();
            let next = state.on_timer(clock_now());
            (next, state.take_waits(), state.is_closed())
        };
        if closed {
            return;
        }
        if !syncs.is_empty() {
            let s = strong.clone();
            tokio::spawn(async move { run_waits(&s, syncs).await });
        }
        let sleep_for = next
            .map(|n| n.saturating_duration_since(clock_now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        let notified = strong.wake.notified();
        tokio::select! {
            biased;
            _ = tokio::time::sleep(sleep_for) => {}
            _ = notified => {}
        }
    }
}

/// `error` for every partition of a TxnOffsetCommit.
pub(crate) fn txn_commit_error(
    req: &TxnOffsetCommitRequest,
    error: i16,
) -> TxnOffsetCommitResponse {
    use txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    TxnOffsetCommitResponse::default().with_topics(
        req.topics
            .iter()
            .map(|t| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(error)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// Milliseconds since the Unix epoch (commit timestamps, retention).
pub(crate) fn wall_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The monotonic clock: tokio's, so a paused (simulated) runtime controls it; the OS's otherwise.
pub(crate) fn clock_now() -> Instant {
    tokio::time::Instant::now().into_std()
}
