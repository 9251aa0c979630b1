//! Replica fetchers: how a follower copies its leaders' logs. One task per (source broker, slot), where a
//! partition's slot is a hash of its name modulo `num.replica.fetchers`; each task keeps one connection to its
//! leader's inter-broker listener and sends Kafka's Fetch for all its partitions at once, as Kafka's
//! `ReplicaFetcherThread` does: fetch offset = local log end, CurrentLeaderEpoch, LastFetchedEpoch, and the
//! broker's id and epoch (ReplicaState from v15). Returned batches are appended with their offsets and epochs
//! kept; a DivergingEpoch answer truncates the log to the divergence point (never to the high watermark).
//!
//! Bounded: a response is at most `replica.fetch.response.max.bytes` (the connection refuses larger frames),
//! a task holds one response at a time, and errors back off for `replica.fetch.backoff.ms`. A task stops when
//! its last partition leaves it (`make_leader`, a new leader, delete) and at shutdown.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use annal_client::net::{Network, TokioNetwork};
use annal_client::{Connection, ConnectionOptions};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, TopicName};
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use super::Partition;
use crate::config::ReplicaFetchConfig;
use crate::kafka_code as code;
use crate::security::InterBrokerClient;

/// Fetch versions a follower speaks: v12 brings LastFetchedEpoch/DivergingEpoch, v15 ReplicaState.
const FETCH_VERSIONS: (i16, i16) = (12, 17);
/// How long a partition that failed (not leader, fenced, unknown) sits out before it is fetched again, so one
/// bad partition does not turn its fetcher into a busy loop while the metadata catches up.
const PARTITION_BACKOFF: Duration = Duration::from_millis(500);
/// Headroom over `replica.fetch.response.max.bytes` for the response's framing and a first batch larger than
/// the limit (KIP-74 sends it whole).
const RESPONSE_SLACK_BYTES: usize = 2 * 1024 * 1024;

/// A partition a fetcher copies, and who leads it.
#[derive(Clone)]
struct Followed {
    partition: Arc<Partition>,
    leader: i32,
}

/// A partition as one fetch asked for it: the leader epoch the request carried, so an answer that a
/// leadership change overtook is dropped rather than appended at the new epoch.
#[derive(Clone)]
struct Asked {
    followed: Followed,
    leader_epoch: i32,
}

type PartitionKey = (String, i32);

/// One fetcher task: its leader's address and its partitions.
struct FetcherHandle {
    addr: String,
    partitions: Arc<Mutex<BTreeMap<PartitionKey, Followed>>>,
    /// Wakes the task when its partitions change.
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// Every fetcher task of this broker. Methods are synchronous (the image is applied off the async workers);
/// tasks are spawned on the runtime given at creation.
pub struct ReplicaFetchers {
    local_broker_id: i32,
    config: ReplicaFetchConfig,
    /// This broker's epoch now (-1 while unregistered): sent in every fetch (KIP-903).
    broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
    runtime: tokio::runtime::Handle,
    stop: watch::Receiver<bool>,
    /// Ordered, so shutting down aborts the tasks in the same order every run (the simulator replays runs).
    fetchers: Mutex<BTreeMap<(i32, usize), FetcherHandle>>,
    /// How connections to leaders are opened (the OS's TCP unless the broker runs in the simulator).
    network: Arc<dyn Network>,
    /// TLS and SASL for the leaders' inter-broker listener.
    security: InterBrokerClient,
}

impl ReplicaFetchers {
    pub fn new(
        local_broker_id: i32,
        config: ReplicaFetchConfig,
        broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
        runtime: tokio::runtime::Handle,
        stop: watch::Receiver<bool>,
    ) -> ReplicaFetchers {
        assert!(config.num_fetchers >= 1, "num.replica.fetchers >= 1");
        ReplicaFetchers {
            local_broker_id,
            config,
            broker_epoch,
            runtime,
            stop,
            fetchers: Mutex::new(BTreeMap::new()),
            network: Arc::new(TokioNetwork),
            security: InterBrokerClient::default(),
        }
    }

    /// Speaks TLS and/or SASL to the leaders (a secured inter-broker listener).
    pub fn with_security(mut self, security: InterBrokerClient) -> Self {
        self.security = security;
        self
    }

    /// Opens connections to leaders through `network` instead of the OS's TCP.
    pub fn with_network(mut self, network: Arc<dyn Network>) -> Self {
        self.network = network;
        self
    }

    fn slot(&self, topic: &str, index: i32) -> usize {
        // FNV-1a: stable across runs, so a partition keeps its fetcher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in topic.bytes().chain(index.to_be_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (h % self.config.num_fetchers as u64) as usize
    }

    /// Starts copying `partition` from `leader` at `addr` (its inter-broker endpoint), moving it from any
    /// fetcher that had it.
    pub fn follow(&self, partition: Arc<Partition>, leader: i32, addr: String) {
        assert_ne!(
            leader, self.local_broker_id,
            "a broker never fetches from itself"
        );
        let key = (partition.topic().to_string(), partition.index());
        let slot = self.slot(&key.0, key.1);
        let mut fetchers = self.fetchers.lock();
        self.remove_locked(&mut fetchers, &key, Some((leader, slot)));
        let restart = fetchers
            .get(&(leader, slot))
            .is_some_and(|f| f.addr != addr || f.task.is_finished());
        if restart {
            // The leader moved to another address (or its task ended): start over with the same partitions.
            if let Some(old) = fetchers.remove(&(leader, slot)) {
                old.task.abort();
                let kept = std::mem::take(&mut *old.partitions.lock());
                let handle = self.spawn(leader, addr.clone(), kept);
                fetchers.insert((leader, slot), handle);
            }
        }
        let handle = fetchers
            .entry((leader, slot))
            .or_insert_with(|| self.spawn(leader, addr, BTreeMap::new()));
        handle
            .partitions
            .lock()
            .insert(key, Followed { partition, leader });
        handle.changed.notify_one();
    }

    /// Stops copying the partition (this broker leads it now, it has no leader, or it was deleted).
    pub fn unfollow(&self, topic: &str, index: i32) {
        let mut fetchers = self.fetchers.lock();
        self.remove_locked(&mut fetchers, &(topic.to_string(), index), None);
    }

    /// Removes `key` from every fetcher but `keep`; fetchers left with no partition stop.
    fn remove_locked(
        &self,
        fetchers: &mut BTreeMap<(i32, usize), FetcherHandle>,
        key: &PartitionKey,
        keep: Option<(i32, usize)>,
    ) {
        let mut empty = Vec::new();
        for (id, f) in fetchers.iter() {
            if Some(*id) == keep {
                continue;
            }
            let mut parts = f.partitions.lock();
            if parts.remove(key).is_some() && parts.is_empty() {
                empty.push(*id);
            }
        }
        for id in empty {
            if let Some(f) = fetchers.remove(&id) {
                f.task.abort();
            }
        }
    }

    /// Which partitions are fetched from which leader (for tests and logs).
    pub fn assignments(&self) -> BTreeMap<PartitionKey, i32> {
        let fetchers = self.fetchers.lock();
        fetchers
            .iter()
            .flat_map(|((leader, _), f)| {
                f.partitions
                    .lock()
                    .keys()
                    .map(|k| (k.clone(), *leader))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Stops every fetcher.
    pub fn shutdown(&self) {
        for (_, f) in std::mem::take(&mut *self.fetchers.lock()) {
            f.task.abort();
        }
    }

    fn spawn(
        &self,
        leader: i32,
        addr: String,
        partitions: BTreeMap<PartitionKey, Followed>,
    ) -> FetcherHandle {
        let partitions = Arc::new(Mutex::new(partitions));
        let changed = Arc::new(Notify::new());
        let task = FetcherTask {
            local_broker_id: self.local_broker_id,
            leader,
            addr: addr.clone(),
            config: self.config.clone(),
            broker_epoch: self.broker_epoch.clone(),
            partitions: partitions.clone(),
            changed: changed.clone(),
            stop: self.stop.clone(),
            backoff_until: HashMap::new(),
            network: self.network.clone(),
            security: self.security.clone(),
        };
        tracing::info!(leader, %addr, "starting a replica fetcher");
        FetcherHandle {
            addr,
            partitions,
            changed,
            task: self.runtime.spawn(task.run()),
        }
    }
}

impl Drop for ReplicaFetchers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct FetcherTask {
    local_broker_id: i32,
    leader: i32,
    addr: String,
    config: ReplicaFetchConfig,
    broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
    partitions: Arc<Mutex<BTreeMap<PartitionKey, Followed>>>,
    changed: Arc<Notify>,
    stop: watch::Receiver<bool>,
    /// Partitions sitting out after an error, until then.
    backoff_until: HashMap<PartitionKey, tokio::time::Instant>,
    network: Arc<dyn Network>,
    security: InterBrokerClient,
}

impl FetcherTask {
    async fn run(mut self) {
        let mut conn: Option<Connection> = None;
        let backoff = Duration::from_millis(self.config.fetch_backoff_ms.max(50));
        loop {
            if *self.stop.borrow() {
                return;
            }
            let now = tokio::time::Instant::now();
            self.backoff_until.retain(|_, until| *until > now);
            let wanted: Vec<Followed> = self
                .partitions
                .lock()
                .iter()
                .filter(|(k, f)| {
                    !self.backoff_until.contains_key(*k) && f.partition.leader() == self.leader
                })
                .map(|(_, f)| f.clone())
                .collect();
            if wanted.is_empty() {
                tokio::select! {
                    biased;
                    _ = self.changed.notified() => {}
                    _ = tokio::time::sleep(PARTITION_BACKOFF) => {}
                    _ = crate::stopped(&mut self.stop) => return,
                }
                continue;
            }
            if conn.as_ref().is_none_or(Connection::is_closed) {
                match self.connect().await {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        tracing::warn!(leader = self.leader, addr = %self.addr, error = %format!("{e:#}"), "replica fetcher cannot connect; retrying");
                        self.pause(backoff).await;
                        continue;
                    }
                }
            }
            let c = conn.as_mut().expect("connected above");
            let version = match c.pick_version(ApiKey::Fetch, FETCH_VERSIONS) {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(leader = self.leader, addr = %self.addr, error = %format!("{e:#}"), "the leader does not speak Fetch v12+; cannot replicate from it");
                    conn = None;
                    self.pause(backoff).await;
                    continue;
                }
            };
            let asked: Vec<Asked> = wanted
                .iter()
                .map(|f| Asked {
                    followed: f.clone(),
                    leader_epoch: f.partition.leader_epoch(),
                })
                .collect();
            let request = self.request(&asked, version);
            let sent = tokio::select! {
                biased;
                r = c.send_version(&request, version) => r,
                _ = crate::stopped(&mut self.stop) => return,
            };
            let response = match sent {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(leader = self.leader, addr = %self.addr, error = %format!("{e:#}"), "replica fetch failed; reconnecting");
                    conn = None;
                    self.pause(backoff).await;
                    continue;
                }
            };
            if response.error_code != code::NONE {
                tracing::warn!(
                    leader = self.leader,
                    code = response.error_code,
                    "replica fetch refused"
                );
                self.pause(backoff).await;
                continue;
            }
            let by_id: HashMap<(Uuid, i32), Asked> = asked
                .iter()
                .map(|a| {
                    let p = &a.followed.partition;
                    ((p.topic_id(), p.index()), a.clone())
                })
                .collect();
            let mut answers = Vec::new();
            for topic in response.responses {
                for pd in topic.partitions {
                    let followed = by_id
                        .get(&(topic.topic_id, pd.partition_index))
                        .or_else(|| {
                            asked.iter().find(|a| {
                                a.followed.partition.topic() == topic.topic.0.as_str()
                                    && a.followed.partition.index() == pd.partition_index
                            })
                        });
                    if let Some(f) = followed {
                        answers.push((f.clone(), pd));
                    }
                }
            }
            let failed = crate::blocking(move || {
                answers
                    .into_iter()
                    .filter_map(|(a, pd)| {
                        let p = &a.followed.partition;
                        let key = (p.topic().to_string(), p.index());
                        (!apply_answer(&a, pd)).then_some(key)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
            let until = tokio::time::Instant::now() + PARTITION_BACKOFF;
            for key in failed {
                self.backoff_until.insert(key, until);
            }
        }
    }

    async fn pause(&mut self, d: Duration) {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(d) => {}
            _ = crate::stopped(&mut self.stop) => {}
        }
    }

    async fn connect(&self) -> anyhow::Result<Connection> {
        let wait = Duration::from_millis(self.config.fetch_wait_max_ms.max(0) as u64);
        let options = ConnectionOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: wait + Duration::from_secs(30),
            max_response_bytes: (self.config.fetch_response_max_bytes.max(0) as usize)
                .saturating_add(RESPONSE_SLACK_BYTES),
            client_id: format!("annal-replica-fetcher-{}", self.local_broker_id),
            version_caps: None,
            network: self.network.clone(),
            sasl: None,
            tls: None,
        };
        Connection::connect_with(&self.addr, self.security.apply(options)).await
    }

    /// The Fetch for `wanted` at `version`: the follower names itself by ReplicaId before v15 and by
    /// ReplicaState (with its broker epoch) from v15, where ReplicaId must stay unset.
    fn request(&self, asked: &[Asked], version: i16) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for a in asked {
            let p = &a.followed.partition;
            let part = FetchPartition::default()
                .with_partition(p.index())
                .with_current_leader_epoch(a.leader_epoch)
                .with_fetch_offset(p.log_end_offset())
                .with_last_fetched_epoch(p.last_fetched_epoch())
                .with_log_start_offset(p.log_start_offset())
                .with_partition_max_bytes(self.config.fetch_max_bytes);
            match topics.last_mut() {
                Some(t) if t.topic_id == p.topic_id() && version >= 13 => t.partitions.push(part),
                Some(t) if t.topic.0.as_str() == p.topic() && version < 13 => {
                    t.partitions.push(part)
                }
                // Topics are named before v13 and by id from v13 (the other field must stay unset).
                _ if version >= 13 => topics.push(
                    FetchTopic::default()
                        .with_topic_id(p.topic_id())
                        .with_partitions(vec![part]),
                ),
                _ => topics.push(
                    FetchTopic::default()
                        .with_topic(TopicName(p.topic().to_string().into()))
                        .with_partitions(vec![part]),
                ),
            }
        }
        let request = if version >= 15 {
            FetchRequest::default().with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(self.local_broker_id))
                    .with_replica_epoch((self.broker_epoch)()),
            )
        } else {
            FetchRequest::default().with_replica_id(BrokerId(self.local_broker_id))
        };
        request
            .with_max_wait_ms(self.config.fetch_wait_max_ms)
            .with_min_bytes(self.config.fetch_min_bytes)
            .with_max_bytes(self.config.fetch_response_max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
    }
}

/// Applies one partition's answer (blocking: appends or truncates). False if the partition should back off.
fn apply_answer(a: &Asked, pd: PartitionData) -> bool {
    let f = &a.followed;
    let p = &f.partition;
    // The fetch was built at this epoch; a leadership change since makes the answer stale.
    let epoch = a.leader_epoch;
    if p.leader_epoch() != epoch || p.leader() != f.leader {
        return true;
    }
    match pd.error_code {
        code::NONE => {}
        code::OFFSET_OUT_OF_RANGE => return out_of_range(f, &pd),
        other => {
            tracing::debug!(partition = %p.name(), leader = f.leader, code = other, "replica fetch error for a partition");
            return false;
        }
    }
    if pd.diverging_epoch.epoch >= 0 || pd.diverging_epoch.end_offset >= 0 {
        let (leader_epoch, leader_end) = (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset);
        let (local_epoch, local_end) = p.local_end_offset_for_epoch(leader_epoch);
        // Kafka's getOffsetTruncationState: the end of the largest common epoch, on whichever log ends first.
        let target = if local_epoch < 0 {
            leader_end
        } else {
            local_end.min(leader_end)
        }
        .min(p.log_end_offset())
        .max(p.log_start_offset());
        tracing::info!(partition = %p.name(), leader = f.leader, leader_epoch, leader_end, local_epoch, local_end, target, "log diverges from the leader's; truncating");
        return match p.truncate_to(target, None) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(partition = %p.name(), error = %e, "truncation failed");
                false
            }
        };
    }
    let records = pd.records.unwrap_or_default();
    let whole = whole_batches_len(&records);
    match p.append_as_follower(
        f.leader,
        epoch,
        &records[..whole],
        pd.high_watermark,
        pd.log_start_offset,
        crate::now_ms(),
    ) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(partition = %p.name(), leader = f.leader, error = %e, "appending replicated records failed");
            false
        }
    }
}

/// OFFSET_OUT_OF_RANGE: this log ends before the leader's log start (the leader deleted what we lack), so
/// start over at the leader's log start. A log that ends after the leader's is left to divergence handling.
fn out_of_range(f: &Followed, pd: &PartitionData) -> bool {
    let p = &f.partition;
    if pd.log_start_offset > p.log_end_offset() {
        tracing::warn!(partition = %p.name(), leader_log_start = pd.log_start_offset, log_end = p.log_end_offset(), "behind the leader's log start; restarting the log there");
        return p.truncate_to(0, Some(pd.log_start_offset)).is_ok();
    }
    false
}

/// The length of the whole batches at the front of `bytes` (a leader may cut its last batch short).
fn whole_batches_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while let Some(h) = bytes
        .get(at..)
        .and_then(annal_log::batch::BatchHeader::parse)
    {
        let size = h.size();
        if size == 0 || at.saturating_add(size) > bytes.len() {
            break;
        }
        at += size;
    }
    at
}
