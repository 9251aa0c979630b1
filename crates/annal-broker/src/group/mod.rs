//! The group coordinator: consumer groups (Kafka's classic protocol) and committed offsets.
//!
//! A dispatcher decodes a request, calls the matching method of [`GroupCoordinator`] with the request's API
//! version (and, for JoinGroup, the client's id and host), and encodes the returned response with that same
//! version. Responses are already shaped for the version (fields a version lacks are left at their defaults).
//!
//! State lives in memory ([`classic`]) and every change a restart must see is first appended to the
//! `__consumer_offsets` partitions ([`store`]) in Kafka's record schemas ([`records`]); [`GroupCoordinator::open`]
//! replays them. See docs/decisions/0002-group-coordinator.md.
//!
//! Timers (session and rebalance timeouts, the initial rebalance delay, offsets retention) are deadlines kept in
//! the state; one tokio task sleeps until the earliest and then fires what is due.
//!
//! Wiring into a dispatcher:
//! - At start: `GroupCoordinator::open(data_dir, config)` inside the runtime; at shutdown: `shutdown().await`.
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
mod offsets;
pub mod records;
mod store;

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use parking_lot::Mutex;
use tokio::sync::Notify;

use classic::State;
pub use store::TOPIC as OFFSETS_TOPIC;

/// Kafka error codes the coordinator answers with.
pub mod code {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
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
    pub const STALE_MEMBER_EPOCH: i16 = 113;
}

/// Coordinator settings, named after Kafka's broker configs.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `offsets.topic.num.partitions` (50). Partitions are opened lazily, so a high count costs nothing at boot.
    pub offsets_topic_num_partitions: u32,
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
    /// fsync the coordinator log before answering a request that wrote to it. Commits survive kill -9 either
    /// way (the page cache outlives the process); this adds power-loss durability at ~1 fsync per request
    /// (concurrent requests share one).
    pub sync_writes: bool,
    /// On open, a partition holding more than this many records, and more than twice its live records, is
    /// rewritten with only the live ones (the engine has no compaction yet).
    pub rewrite_min_records: u64,
    /// `group.consumer.session.timeout.ms` (45000): KIP-848 members are fenced after this without a heartbeat.
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (5000): told to KIP-848 members.
    pub consumer_heartbeat_interval_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            offsets_topic_num_partitions: 50,
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as u32,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            sync_writes: true,
            rewrite_min_records: 10_000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
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

/// The consumer-group coordinator. `Send + Sync`; use it behind the `Arc` that [`GroupCoordinator::open`]
/// returns. Needs a tokio runtime (for its timer task).
pub struct GroupCoordinator {
    shared: Arc<Shared>,
    timer: tokio::task::JoinHandle<()>,
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
    /// Opens (creating if needed) the coordinator's log under `data_dir` (`<data_dir>/__consumer_offsets-<n>/`),
    /// replays it, and starts the timer task. Must be called inside a tokio runtime.
    pub fn open(data_dir: &Path, config: GroupConfig) -> anyhow::Result<Arc<Self>> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the group coordinator needs a tokio runtime"))?;
        anyhow::ensure!(
            config.offsets_topic_num_partitions >= 1,
            "offsets.topic.num.partitions must be at least 1"
        );
        let state = State::open(data_dir, config.clone())?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            wake: Notify::new(),
            config,
        });
        let timer = runtime.spawn(timer_task(Arc::downgrade(&shared)));
        Ok(Arc::new(GroupCoordinator { shared, timer }))
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
        let (outcome, syncs) = {
            let mut state = self.shared.state.lock();
            let outcome = state.join_group(req, api_version, client, Instant::now());
            (outcome, state.take_syncs())
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
        let (outcome, syncs) = {
            let mut state = self.shared.state.lock();
            let outcome = state.sync_group(req, api_version, Instant::now());
            (outcome, state.take_syncs())
        };
        self.after_change(syncs).await;
        match outcome {
            classic::Reply::Now(resp) => resp,
            classic::Reply::Later(rx) => rx
                .await
                .unwrap_or_else(|_| classic::sync_error(code::NOT_COORDINATOR)),
        }
    }

    pub async fn heartbeat(&self, req: HeartbeatRequest, _api_version: i16) -> HeartbeatResponse {
        let (error, syncs) = {
            let mut state = self.shared.state.lock();
            let error = state.heartbeat(&req, Instant::now());
            (error, state.take_syncs())
        };
        self.after_change(syncs).await;
        HeartbeatResponse::default().with_error_code(error)
    }

    pub async fn leave_group(
        &self,
        req: LeaveGroupRequest,
        api_version: i16,
    ) -> LeaveGroupResponse {
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.leave_group(req, api_version, Instant::now());
            (resp, state.take_syncs())
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
        let (mut resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.offset_commit(req, api_version, topics, Instant::now());
            (resp, state.take_syncs())
        };
        if !self.after_change(syncs).await {
            offsets::fail_commit(&mut resp, code::COORDINATOR_NOT_AVAILABLE);
        }
        resp
    }

    pub async fn offset_fetch(
        &self,
        req: OffsetFetchRequest,
        api_version: i16,
    ) -> OffsetFetchResponse {
        self.shared.state.lock().offset_fetch(req, api_version)
    }

    /// OffsetDelete. Partitions of topics `topics` does not know get UNKNOWN_TOPIC_OR_PARTITION, as Kafka.
    pub async fn offset_delete(
        &self,
        req: OffsetDeleteRequest,
        _api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> OffsetDeleteResponse {
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.offset_delete(req, topics);
            (resp, state.take_syncs())
        };
        self.after_change(syncs).await;
        resp
    }

    pub async fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        api_version: i16,
    ) -> DescribeGroupsResponse {
        self.shared.state.lock().describe_groups(req, api_version)
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
        let (resp, syncs) = {
            let mut state = self.shared.state.lock();
            let resp = state.delete_groups(req);
            (resp, state.take_syncs())
        };
        self.after_change(syncs).await;
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
        let resp = self.shared.state.lock().consumer_heartbeat(
            req,
            api_version,
            client,
            topics,
            Instant::now(),
        );
        self.shared.wake.notify_one();
        resp
    }

    /// ConsumerGroupDescribe (KIP-848).
    pub async fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
        _api_version: i16,
        topics: &dyn TopicCatalog,
    ) -> ConsumerGroupDescribeResponse {
        self.shared
            .state
            .lock()
            .consumer_group_describe(req, topics)
    }

    /// Committed offsets of `group` (empty if it has none), sorted by topic and partition.
    pub fn committed_offsets(&self, group: &str) -> Vec<CommittedOffset> {
        self.shared.state.lock().committed_offsets(group)
    }

    /// Flushes and closes the log cleanly. Pending JoinGroup/SyncGroup calls answer NOT_COORDINATOR; later
    /// calls may still be answered from memory but nothing more is written durably.
    pub async fn shutdown(&self) {
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.state.lock().shutdown()).await;
        self.shared.wake.notify_one();
    }

    /// Runs the fsyncs a change needs (outside the lock) and wakes the timer task for new deadlines.
    /// Returns false when an fsync failed.
    async fn after_change(&self, syncs: Vec<store::PendingSync>) -> bool {
        self.shared.wake.notify_one();
        run_syncs(&self.shared, syncs).await
    }
}

async fn run_syncs(shared: &Arc<Shared>, syncs: Vec<store::PendingSync>) -> bool {
    if syncs.is_empty() {
        return true;
    }
    let done = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let mut ok = true;
            let mut flushed = Vec::new();
            for s in syncs {
                match (s.sync)() {
                    Ok(()) => flushed.push((s.partition, s.epoch, s.upto)),
                    Err(e) => {
                        tracing::error!(partition = s.partition, error = %e, "fsync of {} failed", store::TOPIC);
                        ok = false;
                    }
                }
            }
            shared.state.lock().mark_flushed(&flushed);
            ok
        })
    };
    done.await.unwrap_or(false)
}

/// Sleeps until the earliest deadline (or a wake-up), fires what is due, repeats; ends when the coordinator is
/// dropped or shut down.
async fn timer_task(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let (next, syncs, closed) = {
            let mut state = strong.state.lock();
            let next = state.on_timer(Instant::now());
            (next, state.take_syncs(), state.is_closed())
        };
        if closed {
            return;
        }
        if !syncs.is_empty() {
            let s = strong.clone();
            tokio::spawn(async move { run_syncs(&s, syncs).await });
        }
        let sleep_for = next
            .map(|n| n.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        let notified = strong.wake.notified();
        tokio::select! {
            _ = tokio::time::sleep(sleep_for) => {}
            _ = notified => {}
        }
    }
}

/// Milliseconds since the Unix epoch (commit timestamps, retention).
pub(crate) fn wall_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
