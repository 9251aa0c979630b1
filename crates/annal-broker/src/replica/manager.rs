//! The replica manager: the partitions this broker holds (topic -> [`Partition`]s), produce
//! ([`ReplicaManager::append_records`]: acks, durable group-commit waits) and fetch
//! ([`ReplicaManager::fetch_messages`]: long polls parked per partition, see [`super::delayed_fetch`]).
//! Topic admin goes through it too, so the registry ([`LogManager`]) and the partitions change together.
//!
//! Architecture invariant: no protocol types here; handlers in `apis/` translate requests into these calls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use annal_log::{AppendInfo, AppendOrigin, FileSlice, Log, LogError};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use uuid::Uuid;

use super::checkpoints;
use super::partition::{Partition, PartitionConfig, ReplicaFetch};
use super::PartitionError;
use crate::config::BrokerConfig;
use crate::log_manager::{LogManager, OpenedLogs, Topic};
use crate::topic_config;

/// One partition's share of a produce request.
pub struct AppendEntry {
    pub topic: String,
    pub partition: i32,
    /// The request's record batches (null is answered INVALID_RECORD).
    pub records: Option<Bytes>,
}

/// A fetch request's limits.
#[derive(Debug, Clone, Copy)]
pub struct FetchParams {
    /// How long to wait for `min_bytes` (already capped by the caller).
    pub max_wait: Duration,
    pub min_bytes: usize,
    /// The response's byte budget over all partitions (the first partition with data exceeds it if its first
    /// batch alone is larger, KIP-74).
    pub max_bytes: usize,
    /// Isolation level READ_COMMITTED: consumers read up to the last stable offset and learn the aborted
    /// transactions of what they read. Followers ignore it.
    pub read_committed: bool,
}

/// One partition of a fetch: resolved by the caller ([`ReplicaManager::partition_or_error`]), so an unknown one
/// carries its error.
pub struct FetchPartition {
    pub target: Result<Arc<Partition>, PartitionError>,
    pub fetch_offset: i64,
    /// KIP-320 CurrentLeaderEpoch, -1 if the client sent none.
    pub current_leader_epoch: i32,
    pub max_bytes: i32,
    /// Set when a follower broker fetches (replica id >= 0): it reads up to the log end, its progress is
    /// recorded, and a diverging log is answered with the divergence point.
    pub replica: Option<ReplicaFetch>,
}

/// What a fetch returns for one partition, in request order. Offsets are -1 when the partition failed before
/// reading (unknown, not leader, fenced).
pub struct FetchPartitionResult {
    pub high_watermark: i64,
    /// -1 when the partition failed before reading.
    pub last_stable_offset: i64,
    /// read_committed consumer reads: the aborted transactions `(producer id, first offset)` of the records.
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    pub log_start_offset: i64,
    pub records: Result<Option<FileSlice>, PartitionError>,
    /// (epoch, end offset) for a follower whose log diverges from the leader's.
    pub diverging_epoch: Option<(i32, i64)>,
}

/// The leader id of a partition that has none (Kafka's -1).
pub const NO_LEADER: i32 = -1;

pub struct ReplicaManager {
    local_broker_id: i32,
    /// Not part of a broker: every partition is led by this node from the start (a standalone group coordinator
    /// in tests and tools). A broker's partitions lead or follow as the metadata image says.
    standalone: bool,
    config: BrokerConfig,
    log_manager: LogManager,
    /// topic -> its partitions, index = position. Replaced per topic on admin changes.
    /// Ordered by topic name: everything that walks the partitions (ISR proposals, image application, flushes)
    /// does so in the same order every run, which the deterministic simulator's replays rely on.
    partitions: RwLock<BTreeMap<String, Vec<Arc<Partition>>>>,
    /// Serializes admin changes so the registry and `partitions` change in the same order.
    admin: Mutex<()>,
    /// Becomes true when the broker shuts down; long polls answer at once.
    shutting_down: tokio::sync::watch::Receiver<bool>,
    /// Times a waiting fetch was woken by one of its partitions (metrics; tests check who wakes whom).
    delayed_fetch_wakeups: AtomicU64,
    /// The broker's always-on metrics (`crate::ops::metrics`), here so every layer that counts can reach them.
    metrics: Arc<crate::ops::metrics::BrokerMetrics>,
}

/// A partition whose log start offset retention moved: what the retention guard needs to count lost records.
pub struct RetentionMove {
    pub partition: Arc<Partition>,
    pub log_start_before: i64,
    pub log_start_after: i64,
}

/// The settings a partition applies itself, from its topic's overrides and the broker's defaults.
pub(crate) fn partition_config(
    configs: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> PartitionConfig {
    PartitionConfig {
        durable: topic_config::durable_acks(configs, broker),
        log_append_time: topic_config::log_append_time(configs, broker),
        min_insync_replicas: topic_config::effective("min.insync.replicas", configs, broker)
            .0
            .parse()
            .unwrap_or(1),
    }
}

/// Log bytes one key index step reads under a partition's lock (about a millisecond of decompression).
pub const KEY_INDEX_STEP_BYTES: u64 = 256 * 1024;
/// Log bytes the key index housekeeping reads per tick, over all partitions (the tick is at most a second).
pub const KEY_INDEX_TICK_BYTES: u64 = 64 << 20;

impl ReplicaManager {
    /// Opens every registered partition's log, each a follower of nobody until the cluster code applies the
    /// metadata image ([`Partition::make_leader`] / [`Partition::make_follower`]).
    pub fn open(
        config: &BrokerConfig,
        shutting_down: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<ReplicaManager> {
        Self::open_with(config, shutting_down, false)
    }

    /// Opens every registered partition's log led by this node at epoch 0, ISR = {itself}: for a standalone group
    /// coordinator (tests, tools) that runs without a cluster.
    pub fn open_standalone(
        config: &BrokerConfig,
        shutting_down: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<ReplicaManager> {
        Self::open_with(config, shutting_down, true)
    }

    fn open_with(
        config: &BrokerConfig,
        shutting_down: tokio::sync::watch::Receiver<bool>,
        standalone: bool,
    ) -> anyhow::Result<ReplicaManager> {
        let started = std::time::Instant::now();
        let (log_manager, opened) = LogManager::open(config)?;
        let logs_opened = started.elapsed();
        let manager = ReplicaManager {
            local_broker_id: config.node_id,
            standalone,
            config: config.clone(),
            log_manager,
            partitions: RwLock::new(BTreeMap::new()),
            admin: Mutex::new(()),
            shutting_down,
            delayed_fetch_wakeups: AtomicU64::new(0),
            metrics: Arc::new(crate::ops::metrics::BrokerMetrics::new()),
        };
        for logs in opened {
            manager.install(logs);
        }
        // High watermarks survive restarts: a leader that comes back exposes no less than before, and a
        // follower keeps serving as a candidate with what it knew committed.
        for ((topic, index), hw) in checkpoints::read_high_watermarks(&config.data_dir) {
            if let Some(p) = manager.partition(&topic, index) {
                p.restore_high_watermark(hw);
            }
        }
        tracing::info!(
            partitions = manager
                .partitions
                .read()
                .values()
                .map(Vec::len)
                .sum::<usize>(),
            logs_ms = logs_opened.as_millis() as u64,
            partitions_ms = (started.elapsed() - logs_opened).as_millis() as u64,
            "opened the partitions"
        );
        Ok(manager)
    }

    /// Wraps newly opened logs in partitions this broker leads, and adds them to the map.
    fn install(&self, opened: OpenedLogs) {
        let OpenedLogs {
            topic,
            first_index,
            logs,
        } = opened;
        let config = partition_config(&topic.configs, &self.config);
        let me = self.local_broker_id;
        // Several at once: a partition reads its leader-epoch checkpoint (at a restart of 100,000 partitions,
        // 100,000 small reads, 2-15 s one after another).
        let numbered: Vec<(i32, Log)> = logs
            .into_iter()
            .enumerate()
            .map(|(i, log)| (first_index + i as i32, log))
            .collect();
        let installed = crate::log_io::map_in_parallel(numbered, |(index, log)| {
            let p = Partition::new(&topic.name, index, topic.id, me, log, config);
            if self.standalone {
                p.make_leader(0, 0, vec![me], vec![me]);
            } else {
                // Led by whoever the metadata names; until it is applied, nobody here.
                p.make_follower(NO_LEADER, 0, -1, vec![], vec![]);
            }
            Arc::new(p)
        });
        let mut map = self.partitions.write();
        let parts = map.entry(topic.name.clone()).or_default();
        assert_eq!(
            parts.len(),
            first_index as usize,
            "partitions of {} are added in index order",
            topic.name
        );
        parts.extend(installed.iter().cloned());
        drop(map);
        // The leader-epoch checkpoints of the new leaderships, all at once (see `sync_leader_epochs_of`).
        Partition::sync_leader_epochs_of(&installed);
    }

    /// How many times a long-polling fetch was woken by a partition it waits on (an append, an fsync, a
    /// leadership change or a delete on that partition), since the broker started.
    pub fn delayed_fetch_wakeups(&self) -> u64 {
        self.delayed_fetch_wakeups.load(Ordering::Relaxed)
    }

    /// The broker's always-on metrics.
    pub fn metrics(&self) -> &Arc<crate::ops::metrics::BrokerMetrics> {
        &self.metrics
    }

    pub fn local_broker_id(&self) -> i32 {
        self.local_broker_id
    }

    /// The topic registry and the logs on disk.
    pub fn log_manager(&self) -> &LogManager {
        &self.log_manager
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.log_manager.topic(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.log_manager.topic_by_id(id)
    }

    /// Every topic, by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.log_manager.topics()
    }

    /// The partition, if this broker holds it.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let map = self.partitions.read();
        let parts = map.get(topic)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| parts.get(i).cloned())
    }

    /// The partition, or UNKNOWN_TOPIC_OR_PARTITION.
    pub fn partition_or_error(
        &self,
        topic: &str,
        index: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        self.partition(topic, index)
            .ok_or_else(|| PartitionError::UnknownTopicOrPartition {
                topic: topic.to_string(),
                partition: index,
            })
    }

    /// A topic's partitions this broker holds, by index.
    pub fn partitions_of(&self, topic: &str) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether the topic is registered with at least `count` partitions and every one of them is installed
    /// here. The registry learns a topic (or its new count) a moment before its partitions are installed: a
    /// request answered in between would see a topic with fewer partitions than it has.
    pub fn topic_is_installed(&self, name: &str, count: i32) -> bool {
        let Some(topic) = self.topic(name) else {
            return false;
        };
        let installed = self.partitions_of(name).len();
        i32::try_from(installed).is_ok_and(|n| n >= topic.partition_count.max(count))
    }

    /// Every partition this broker holds.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().flatten().cloned().collect()
    }

    /// Creates a topic (registry, logs, partitions led by this broker). `Ok(None)` if it exists. Blocking.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<Option<Arc<Topic>>> {
        self.create_topic_with_id(name, Uuid::new_v4(), partitions, configs)
    }

    /// Creates a topic with the id the cluster metadata gave it. In a cluster its partitions start with no
    /// leader; the metadata that created them says who leads (see `cluster::apply`). Blocking.
    pub fn create_topic_with_id(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<Option<Arc<Topic>>> {
        let _admin = self.admin.lock();
        let Some(opened) = self
            .log_manager
            .create_topic_with_id(name, id, partitions, configs)?
        else {
            return Ok(None);
        };
        let topic = opened.topic.clone();
        self.install(opened);
        Ok(Some(topic))
    }

    /// Grows a topic to `count` partitions. Blocking.
    pub fn create_partitions(&self, name: &str, count: i32) -> anyhow::Result<()> {
        let _admin = self.admin.lock();
        let opened = self.log_manager.add_partitions(name, count)?;
        self.install(opened);
        Ok(())
    }

    /// Replaces a topic's config overrides and applies them to its partitions. Blocking.
    pub fn alter_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let _admin = self.admin.lock();
        let topic = self.log_manager.set_configs(name, configs)?;
        let log_config = topic_config::log_config(&topic.configs, &self.config);
        let config = partition_config(&topic.configs, &self.config);
        for p in self.partitions_of(name) {
            p.set_config(log_config.clone(), config);
        }
        Ok(())
    }

    /// Deletes a topic and its data; returns its id, or `None` if it did not exist. Blocking.
    pub fn delete_topic(&self, name: &str) -> anyhow::Result<Option<Uuid>> {
        let _admin = self.admin.lock();
        let Some(topic) = self.log_manager.delete_topic(name)? else {
            return Ok(None);
        };
        let parts = self.partitions.write().remove(name).unwrap_or_default();
        for p in parts {
            // Long polls on it answer now (with UNKNOWN_TOPIC_OR_PARTITION at their next look).
            p.high_watermark_moved();
            let index = p.index();
            let log = Arc::try_unwrap(p).ok().and_then(Partition::into_log);
            self.log_manager.remove_partition_data(name, index, log);
        }
        Ok(Some(topic.id))
    }

    /// Produce: appends each entry to its partition's leader log, off the async workers, and answers in entry
    /// order. acks=0 and acks=1 answer after the append; durable partitions (`flush.messages=1`) answer after the
    /// group-commit fsync (for acks=0 the fsync still runs, unawaited). `timeout` bounds waits for other replicas
    /// (replication; none on a single node); local fsyncs are not timed out.
    pub async fn append_records(
        &self,
        timeout: Duration,
        required_acks: i16,
        entries: Vec<AppendEntry>,
    ) -> Vec<Result<AppendInfo, PartitionError>> {
        self.append_records_as(AppendOrigin::Client, timeout, required_acks, entries)
            .await
    }

    /// [`Self::append_records`] for a given writer: WriteTxnMarkers appends its control batches as
    /// [`AppendOrigin::Coordinator`] (clients may not write control batches).
    pub async fn append_records_as(
        &self,
        origin: AppendOrigin,
        timeout: Duration,
        required_acks: i16,
        entries: Vec<AppendEntry>,
    ) -> Vec<Result<AppendInfo, PartitionError>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let work: Vec<Result<(Arc<Partition>, Bytes), PartitionError>> = entries
            .into_iter()
            .map(|e| {
                if !(-1..=1).contains(&required_acks) {
                    return Err(PartitionError::InvalidRequiredAcks(required_acks));
                }
                let part = self.partition_or_error(&e.topic, e.partition)?;
                let records = e.records.ok_or(PartitionError::NullRecords)?;
                Ok((part, records))
            })
            .collect();
        let now = crate::now_ms();
        let appended = crate::blocking(move || {
            // Leader epochs not yet durable (just after a restart or a leadership change) are made so in one
            // batch for the request's partitions, not with two fsyncs each as each append would on its own.
            let unsynced: Vec<Arc<Partition>> = work
                .iter()
                .filter_map(|w| w.as_ref().ok())
                .filter(|(part, _)| part.leader_epochs_unsynced())
                .map(|(part, _)| part.clone())
                .collect();
            if unsynced.len() > 1 {
                Partition::sync_leader_epochs_of(&unsynced);
            }
            work.into_iter()
                .map(|w| {
                    let (part, records) = w?;
                    let mut batches = records.to_vec();
                    let appended =
                        part.append_to_leader_as(origin, &mut batches, required_acks, now);
                    if let Ok(a) = &appended {
                        if !a.info.duplicate {
                            part.stats
                                .produced(a.info.records_count, batches.len() as u64);
                        }
                    }
                    if let Err(e) = &appended {
                        if e.is_storage() {
                            tracing::error!(partition = %part.name(), error = %e, "append failed");
                        }
                    }
                    appended.map(|a| (part, a))
                })
                .collect::<Vec<_>>()
        })
        .await;
        let mut out = Vec::with_capacity(appended.len());
        for result in appended {
            let outcome = match result {
                Err(e) => Err(e),
                Ok((part, a)) => {
                    let info = a.info;
                    match self.await_durable(&part, a, required_acks).await {
                        Err(e) => Err(e),
                        Ok(()) if required_acks != -1 => Ok(info),
                        Ok(()) => Self::await_replicated(&part, info.last_offset + 1, deadline)
                            .await
                            .map(|()| info),
                    }
                }
            };
            out.push(outcome);
        }
        out
    }

    /// Durable partitions (`flush.messages=1`): waits for the group-commit fsync (for acks=0 it runs unawaited).
    async fn await_durable(
        &self,
        part: &Arc<Partition>,
        appended: super::LeaderAppend,
        required_acks: i16,
    ) -> Result<(), PartitionError> {
        let Some(wait) = appended.durable else {
            return Ok(());
        };
        // A simulated slow disk (annal-sim): the fsync this waits for takes that long, in this runtime's time.
        if annal_log::disk_faults::any() {
            if let Some(delay) = annal_log::disk_faults::fsync_delay(&part.log_dir()) {
                tokio::time::sleep(delay).await;
            }
        }
        if required_acks == 0 {
            // Nobody waits for the answer, but flush.messages=1 still asks for the fsync: let it run.
            let part = part.clone();
            tokio::spawn(async move {
                match wait.await {
                    Ok(()) => part.high_watermark_moved(),
                    Err(e) => {
                        tracing::error!(partition = %part.name(), error = %e, "fsync after an acks=0 produce failed")
                    }
                }
            });
            return Ok(());
        }
        match wait.await {
            Ok(()) => {
                part.high_watermark_moved();
                Ok(())
            }
            Err(source) => {
                tracing::error!(partition = %part.name(), error = %source, "durable produce failed");
                Err(PartitionError::Durable {
                    partition: part.name(),
                    source,
                })
            }
        }
    }

    /// acks=all: waits (parked on the partition's high-watermark watchers, the produce purgatory) until the
    /// high watermark reaches `required` (every in-sync replica has the batch), the ISR shrinks below
    /// min.insync.replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership moves (NOT_LEADER_OR_FOLLOWER), or
    /// `deadline` passes (REQUEST_TIMED_OUT).
    async fn await_replicated(
        part: &Arc<Partition>,
        required: i64,
        deadline: tokio::time::Instant,
    ) -> Result<(), PartitionError> {
        let waiter = Arc::new(Notify::new());
        let _unwatch = Unwatch(part, &waiter);
        loop {
            // Register before looking, so a move between the look and the wait still wakes us.
            let parked = part.watchers().watch(&waiter);
            if part.high_watermark() >= required {
                return Ok(());
            }
            if !part.is_leader() {
                return Err(PartitionError::NotLeader {
                    partition: part.name(),
                });
            }
            let (isr, min_isr) = (part.isr().len(), part.config().min_insync_replicas);
            if part.replicas().len() > 1 && (isr as i64) < i64::from(min_isr) {
                return Err(PartitionError::NotEnoughReplicasAfterAppend {
                    partition: part.name(),
                    isr,
                    min_isr,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(PartitionError::ReplicationTimedOut {
                    partition: part.name(),
                    offset: required - 1,
                });
            }
            // A full purgatory (WATCHERS_PER_PARTITION_MAX waiters) degrades to polling, never to unbounded growth.
            let wake = tokio::time::sleep_until(if parked {
                deadline
            } else {
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(5))
            });
            tokio::select! {
                biased;
                _ = waiter.notified() => {}
                _ = wake => {}
            }
        }
    }

    /// Writes every partition's high watermark to `replication-offset-checkpoint` (housekeeping and shutdown).
    /// Blocking.
    pub fn checkpoint_high_watermarks(&self) {
        let hws = self
            .all_partitions()
            .iter()
            .map(|p| ((p.topic().to_string(), p.index()), p.high_watermark()))
            .collect();
        if let Err(e) = checkpoints::write_high_watermarks(&self.config.data_dir, &hws) {
            tracing::error!(error = %e, dir = %self.config.data_dir.display(), "cannot write the replication offset checkpoint");
        }
    }

    /// Fetch: reads every partition; answers when `min_bytes` are there, a partition failed, `max_wait` passed
    /// or the broker is shutting down. Meanwhile the fetch waits on the partitions it reads, and only their
    /// high-watermark moves wake it.
    pub async fn fetch_messages(
        &self,
        params: FetchParams,
        partitions: Vec<FetchPartition>,
    ) -> Vec<FetchPartitionResult> {
        let deadline = tokio::time::Instant::now() + params.max_wait;
        let mut failed_early = false;
        let mut plan = Vec::new();
        // Position in the request -> its error, for partitions that failed before any read.
        let mut early: Vec<Option<PartitionError>> = Vec::with_capacity(partitions.len());
        for p in partitions {
            match p.target {
                Ok(part) => {
                    plan.push(Planned {
                        part,
                        offset: p.fetch_offset,
                        current_leader_epoch: p.current_leader_epoch,
                        max_bytes: p.max_bytes,
                        replica: p.replica,
                    });
                    early.push(None);
                }
                Err(e) => {
                    failed_early = true;
                    early.push(Some(e));
                }
            }
        }
        let plan = Arc::new(plan);
        let watching = Watching::new(plan.clone());
        let mut shutting_down = self.shutting_down.clone();
        let read = loop {
            // Watch before reading, so an append between the read and the wait still wakes us.
            let can_wait = watching.watch_all();
            let p = plan.clone();
            let (max_bytes, read_committed) = (params.max_bytes, params.read_committed);
            // Index lookups (and page faults on them) run off the async workers.
            let pass = crate::blocking(move || read_pass(&p, max_bytes, read_committed)).await;
            let now = tokio::time::Instant::now();
            if failed_early
                || pass.total >= params.min_bytes
                || pass.failed
                || !can_wait
                || now >= deadline
                || *shutting_down.borrow()
            {
                break pass.results;
            }
            tokio::select! {
                biased;
                _ = watching.waiter.notified() => {
                    self.delayed_fetch_wakeups.fetch_add(1, Ordering::Relaxed);
                }
                _ = tokio::time::sleep_until(deadline) => {}
                _ = shutting_down.changed() => {}
            }
        };
        drop(watching);
        for (p, r) in plan.iter().zip(&read) {
            if let (None, Ok(Some(slice))) = (&p.replica, &r.records) {
                p.part.stats.fetched(slice.len() as u64);
            }
        }
        let mut read = read.into_iter();
        early
            .into_iter()
            .map(|e| match e {
                Some(e) => FetchPartitionResult {
                    high_watermark: -1,
                    last_stable_offset: -1,
                    aborted_transactions: None,
                    log_start_offset: -1,
                    records: Err(e),
                    diverging_epoch: None,
                },
                None => read.next().expect("one read result per planned partition"),
            })
            .collect()
    }

    /// Housekeeping: fsyncs partitions whose `flush.ms` is due. Blocking.
    pub fn flush_due(&self, now_ms: i64) {
        for p in self.all_partitions() {
            if let Err(e) = p.flush_if_due(now_ms) {
                tracing::warn!(partition = %p.name(), error = %e, "flush failed");
            }
        }
    }

    /// Housekeeping: builds the key index of partitions with `key.index.enable`, in steps of
    /// [`KEY_INDEX_STEP_BYTES`] (the log lock is released between steps, so produce waits at most one step), at
    /// most [`KEY_INDEX_TICK_BYTES`] in all per call. Returns the bytes indexed. Blocking.
    pub fn index_keys(&self) -> u64 {
        let mut spent = 0u64;
        let mut partitions = self.all_partitions();
        while spent < KEY_INDEX_TICK_BYTES && !partitions.is_empty() {
            partitions.retain(|p| match p.index_keys(KEY_INDEX_STEP_BYTES) {
                Ok(progress) => {
                    spent += progress.indexed_bytes;
                    progress.pending_segments > 0 && progress.indexed_bytes > 0
                }
                Err(e) => {
                    tracing::warn!(partition = %p.name(), error = %e, "building the key index failed");
                    false
                }
            });
        }
        spent
    }

    /// Housekeeping: applies retention to every partition, with the retention guard `guard_of` gives for it
    /// (`retention.guard.groups`); returns those whose log start moved. Blocking.
    pub fn apply_retention(
        &self,
        now_ms: i64,
        guard_of: &dyn Fn(&Partition) -> Option<annal_log::RetentionGuard>,
    ) -> Vec<RetentionMove> {
        let mut moved = Vec::new();
        for p in self.all_partitions() {
            let log_start_before = p.log_start_offset();
            let guard = guard_of(&p);
            match p.apply_retention(now_ms, guard).map(|o| o.deleted_segments) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(partition = %p.name(), segments = n, "retention deleted segments");
                    self.metrics.retention_deleted_segments.inc_by(u64::from(n));
                    let log_start_after = p.log_start_offset();
                    if log_start_after > log_start_before {
                        moved.push(RetentionMove {
                            partition: p,
                            log_start_before,
                            log_start_after,
                        });
                    }
                }
                Err(e) => tracing::warn!(partition = %p.name(), error = %e, "retention failed"),
            }
        }
        moved
    }

    /// Closes every log cleanly; partitions still referenced elsewhere are flushed only. Once every log is
    /// closed, and only then, the data directory's clean-shutdown marker is written
    /// ([`crate::log_manager::LOGS_CLEAN_MARKER`]), so the next start skips recovery. Blocking.
    pub fn close_all(&self) {
        self.checkpoint_high_watermarks();
        let map = std::mem::take(&mut *self.partitions.write());
        // Several at once: each close is a few fsyncs (see `log_io`).
        let partitions: Vec<Arc<Partition>> = map.into_values().flatten().collect();
        let closed = crate::log_io::map_in_parallel(partitions, |p| {
            if let Err(e) = p.flush() {
                tracing::error!(partition = %p.name(), error = %e, "flush at shutdown failed");
                return false;
            }
            let name = p.name();
            match Arc::try_unwrap(p).ok().and_then(Partition::into_log) {
                Some(log) => match log.close_for_marker() {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(partition = %name, error = %e, "clean close failed");
                        false
                    }
                },
                None => {
                    tracing::warn!(partition = %name, "partition still in use at shutdown; flushed but not marked clean");
                    false
                }
            }
        });
        if closed.iter().all(|c| *c) {
            if let Err(e) = self.log_manager.mark_logs_clean() {
                tracing::warn!(error = %e, "cannot write the clean-shutdown marker; the next start recovers every log");
            }
        } else {
            tracing::warn!("not every log was closed cleanly; the next start recovers every log");
        }
    }
}

struct Planned {
    part: Arc<Partition>,
    offset: i64,
    current_leader_epoch: i32,
    max_bytes: i32,
    replica: Option<ReplicaFetch>,
}

struct Pass {
    results: Vec<FetchPartitionResult>,
    total: usize,
    failed: bool,
}

/// One read of every planned partition. The first partition with data returns at least one whole batch even
/// past the limits (KIP-74, so a large batch never blocks a consumer); later partitions stop at the limits.
fn read_pass(plan: &[Planned], max_bytes: usize, read_committed: bool) -> Pass {
    let mut total = 0usize;
    let mut failed = false;
    let mut results = Vec::with_capacity(plan.len());
    for p in plan {
        let budget = (p.max_bytes.max(0) as usize).min(max_bytes.saturating_sub(total));
        let first = total == 0;
        let read = match p.replica {
            None => p
                .part
                .read(p.current_leader_epoch, p.offset, budget, read_committed),
            Some(replica) => p.part.read_for_follower(
                replica,
                p.current_leader_epoch,
                p.offset,
                budget,
                // Follower progress is timed on the monotonic clock (ISR lag), not the wall clock.
                crate::monotonic_ms(),
            ),
        };
        let result = match read {
            Err(e) => FetchPartitionResult {
                high_watermark: -1,
                last_stable_offset: -1,
                aborted_transactions: None,
                log_start_offset: -1,
                records: Err(e),
                diverging_epoch: None,
            },
            Ok(read) => FetchPartitionResult {
                high_watermark: read.high_watermark,
                last_stable_offset: read.last_stable_offset,
                log_start_offset: read.log_start_offset,
                diverging_epoch: read.diverging_epoch,
                records: read.records.map(|slice| {
                    slice.filter(|s| first || s.len() <= budget).inspect(|s| {
                        total += s.len();
                    })
                }),
                aborted_transactions: read.aborted_transactions,
            },
        };
        // A slice left out for the byte budget takes its aborted transactions with it.
        let result = match result {
            FetchPartitionResult {
                records: Ok(None),
                aborted_transactions: Some(_),
                ..
            } => FetchPartitionResult {
                aborted_transactions: Some(Vec::new()),
                ..result
            },
            other => other,
        };
        if result.diverging_epoch.is_some() {
            // The follower must truncate before anything else: answer now.
            failed = true;
        }
        if let Err(e) = &result.records {
            // OFFSET_OUT_OF_RANGE lets clients apply auto.offset.reset; a storage error is worth a line.
            let out_of_range = matches!(
                e,
                PartitionError::Log {
                    source: LogError::OffsetOutOfRange { .. },
                    ..
                }
            );
            if e.is_storage() && !out_of_range {
                tracing::warn!(partition = %p.part.name(), error = %e, "fetch read failed");
            }
            failed = true;
        }
        results.push(result);
    }
    Pass {
        results,
        total,
        failed,
    }
}

/// A fetch's registration with the partitions it waits on; dropping it (the fetch answered, or its connection
/// went away mid-wait) unregisters, so no partition keeps stale waiters.
struct Watching {
    plan: Arc<Vec<Planned>>,
    waiter: Arc<Notify>,
}

impl Watching {
    fn new(plan: Arc<Vec<Planned>>) -> Watching {
        Watching {
            plan,
            waiter: Arc::new(Notify::new()),
        }
    }

    /// Registers with every partition; false if one had no room (then the fetch must not wait).
    fn watch_all(&self) -> bool {
        self.plan.iter().all(|p| watchers_of(p).watch(&self.waiter))
    }
}

/// Consumers wait for the high watermark to move; followers for the log end.
fn watchers_of(p: &Planned) -> &super::delayed_fetch::FetchWatchers {
    match p.replica {
        None => p.part.watchers(),
        Some(_) => p.part.replica_watchers(),
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        for p in self.plan.iter() {
            watchers_of(p).unwatch(&self.waiter);
        }
    }
}

/// Unregisters an acks=all wait from its partition when the produce answers (or its connection goes away).
struct Unwatch<'a>(&'a Arc<Partition>, &'a Arc<Notify>);

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.0.watchers().unwatch(self.1);
    }
}
