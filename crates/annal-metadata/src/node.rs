//! A metadata node: the quorum, the image this node rebuilds from it, and (on a voter) the controller that is
//! active while this node leads the quorum.
//!
//! [`ImageStateMachine`] is the quorum's state machine: every committed entry is decoded and applied to the
//! image, and the new image is published on a watch channel. [`QuorumWriter`] is the controller's
//! [`MetadataWriter`] over the quorum. [`MetadataNode::start`] ties them together and runs the active
//! controller's clock (lease expiry ticks) while this node is the leader.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{BrokerHeartbeatResponse, BrokerRegistrationResponse};
use kafka_protocol::protocol::Encodable;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::controller::{
    self, errors, BoxFuture, Controller, ControllerConfig, MetadataWriter, WriteError,
};
use crate::crash_probe::CrashProbes;
use crate::env::{self, ApplyObserver, NodeEnv};
use crate::image::MetadataImage;
use crate::raft::{self, Quorum, QuorumConfig, QuorumStatus, StateMachine};
use crate::records::{decode_batch, encode_batch, MetadataRecord};

/// How often the active controller looks for lapsed leases.
const TICK_INTERVAL: Duration = Duration::from_millis(250);

/// The image every node rebuilds by applying committed entries in order.
pub struct ImageStateMachine {
    image: Mutex<Arc<MetadataImage>>,
    published: watch::Sender<Arc<MetadataImage>>,
    /// Set when a committed entry could not be applied: the node stops applying (its image would diverge
    /// from the quorum's) and reports why.
    poisoned: Mutex<Option<String>>,
    /// Sees every entry once the image has it (`NodeEnv::on_apply`).
    observer: Option<ApplyObserver>,
}

impl ImageStateMachine {
    pub fn new(cluster_id: &str) -> Arc<ImageStateMachine> {
        Self::observed(cluster_id, None)
    }

    /// A state machine that also hands every applied entry to `observer`.
    pub fn observed(cluster_id: &str, observer: Option<ApplyObserver>) -> Arc<ImageStateMachine> {
        let image = Arc::new(MetadataImage::new(cluster_id));
        let (published, _) = watch::channel(image.clone());
        Arc::new(ImageStateMachine {
            image: Mutex::new(image),
            published,
            poisoned: Mutex::new(None),
            observer,
        })
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.lock().clone()
    }

    pub fn watch(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    /// Why this node stopped applying metadata, if it did.
    pub fn poisoned(&self) -> Option<String> {
        self.poisoned.lock().clone()
    }
}

impl StateMachine for ImageStateMachine {
    fn apply(&self, index: u64, records: &[Vec<u8>]) {
        if self.poisoned.lock().is_some() {
            return;
        }
        let result = decode_batch(records)
            .map_err(|e| format!("cannot decode the metadata entry at offset {index}: {e}"))
            .and_then(|records| {
                let mut next = (*self.image()).clone();
                next.try_apply_batch(index, &records).map_err(|e| {
                    format!("the metadata entry at offset {index} does not apply: {e}")
                })?;
                Ok(next)
            });
        match result {
            Ok(next) => {
                let next = Arc::new(next);
                *self.image.lock() = next.clone();
                self.published.send_replace(next);
                if let Some(observer) = &self.observer {
                    observer(index, records);
                }
            }
            Err(why) => {
                tracing::error!(error = %why, "metadata node stopped applying the metadata log; \
                    this node's view is frozen: restart it, and report this as a bug if it repeats");
                *self.poisoned.lock() = Some(why);
            }
        }
    }

    /// One copy of the image for the whole run (a copy of a 100,000-partition image is tens of milliseconds;
    /// a restart replays hundreds of entries), published once at its end. If an entry does not apply, the run
    /// is applied again entry by entry, so the image stops exactly before that entry, as [`Self::apply`] does.
    fn apply_run(&self, entries: &[(u64, Vec<Vec<u8>>)]) {
        if entries.len() <= 1 || self.observer.is_some() {
            // The observer (the simulator's) sees every entry with the image it produced.
            for (index, records) in entries {
                self.apply(*index, records);
            }
            return;
        }
        if self.poisoned.lock().is_some() {
            return;
        }
        let mut next = (*self.image()).clone();
        let applied_all = entries.iter().all(|(index, records)| {
            decode_batch(records)
                .is_ok_and(|records| next.try_apply_batch(*index, &records).is_ok())
        });
        if !applied_all {
            for (index, records) in entries {
                self.apply(*index, records);
            }
            return;
        }
        let next = Arc::new(next);
        *self.image.lock() = next.clone();
        self.published.send_replace(next);
    }

    fn snapshot(&self) -> (u64, Vec<u8>) {
        let image = self.image();
        (
            image.last_applied_offset.unwrap_or(0),
            image.encode_snapshot(),
        )
    }

    fn restore(&self, _index: u64, data: &[u8]) -> Result<(), String> {
        let image = MetadataImage::decode_snapshot(data).map_err(|e| e.to_string())?;
        let image = Arc::new(image);
        *self.image.lock() = image.clone();
        self.published.send_replace(image);
        Ok(())
    }
}

/// The controller's writer: a batch of records is one quorum entry.
///
/// Invariant: a batch is proposed only if it was decided against an image that held every entry of the
/// leader's log ([`Quorum::await_log_applied`]), this leadership's own writes aside. Otherwise a decision taken
/// against an older image lands after entries it never saw: a leader that restarted in its term (openraft
/// resumes it) decided a broker's removal from an ISR without the ELR change its previous life had appended,
/// and the two together named a broker in both the ISR and the ELR; every node then stopped applying the
/// metadata log (simulator seed 294).
pub struct QuorumWriter {
    quorum: Arc<Quorum>,
    state: Arc<ImageStateMachine>,
    /// The term and image the current operation decides against, set by [`MetadataWriter::catch_up`] and moved
    /// on by each of its own writes; `None` if the catch-up failed.
    decided_on: Mutex<Option<(u64, Arc<MetadataImage>)>>,
}

/// How long an operation waits for its leader's log to be applied (see [`Quorum::await_log_applied`]): about a
/// session timeout, after which the request fails as retriable.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(5);

impl QuorumWriter {
    fn new(quorum: Arc<Quorum>, state: Arc<ImageStateMachine>) -> QuorumWriter {
        QuorumWriter {
            quorum,
            state,
            decided_on: Mutex::new(None),
        }
    }

    fn not_controller(&self) -> WriteError {
        WriteError::NotController {
            leader_hint: self.quorum.leader().and_then(|l| i32::try_from(l).ok()),
        }
    }
}

impl MetadataWriter for QuorumWriter {
    fn catch_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let decided_on = match self.quorum.await_log_applied(CATCH_UP_LIMIT).await {
                Ok(term) => Some((term, self.state.image())),
                Err(_) => None,
            };
            *self.decided_on.lock() = decided_on;
        })
    }

    fn write(&self, records: Vec<MetadataRecord>) -> BoxFuture<'_, Result<u64, WriteError>> {
        Box::pin(async move {
            // Nothing may have joined the log (another leader's entries, an entry of this node's past) between
            // the decision and now: then the decision is stale and the operation is retried from the top.
            let term = match self.quorum.await_log_applied(CATCH_UP_LIMIT).await {
                Ok(term) => term,
                Err(raft::WriteError::NotLeader { .. }) => return Err(self.not_controller()),
                Err(e) => return Err(WriteError::Unavailable(e.to_string())),
            };
            let current = self.state.image();
            let fresh = self
                .decided_on
                .lock()
                .as_ref()
                .is_some_and(|(t, image)| *t == term && Arc::ptr_eq(image, &current));
            if !fresh {
                return Err(WriteError::Unavailable(
                    "the metadata log moved while the controller decided (a new term, or entries it had not \
                     applied yet); retry"
                        .into(),
                ));
            }
            let written = self.quorum.write(encode_batch(&records)).await;
            // Whatever the outcome, the next write of this operation must see this one applied: a failed write
            // may still commit, and then the image moves and the next write is refused.
            match written {
                Ok(index) => {
                    if let Some(why) = self.state.poisoned() {
                        return Err(WriteError::Unavailable(why));
                    }
                    *self.decided_on.lock() = Some((term, self.state.image()));
                    Ok(index)
                }
                Err(raft::WriteError::NotLeader { leader }) => Err(WriteError::NotController {
                    leader_hint: leader.and_then(|l| i32::try_from(l).ok()),
                }),
                Err(e) => Err(WriteError::Unavailable(e.to_string())),
            }
        })
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.state.image()
    }
}

pub struct MetadataNodeConfig {
    pub node_id: i32,
    pub cluster_id: String,
    /// Voter id -> "host:port" of its CONTROLLER listener.
    pub voters: BTreeMap<i32, String>,
    /// Where peers reach this node's raft endpoint (its controller listener; a broker-only node's
    /// inter-broker listener).
    pub advertised_addr: String,
    pub data_dir: PathBuf,
    /// controller.quorum.election.timeout.ms (openraft draws each timeout from [t, 2t)).
    pub election_timeout_ms: u64,
    pub controller: ControllerConfig,
}

/// A running metadata node.
pub struct MetadataNode {
    node_id: i32,
    quorum: Arc<Quorum>,
    state: Arc<ImageStateMachine>,
    /// Present on voters: it acts only while this node leads the quorum.
    controller: Option<Arc<Controller>>,
    /// Early fencing of brokers whose process is gone (active controller only).
    crash_probes: Arc<CrashProbes>,
    stop: watch::Sender<bool>,
}

impl MetadataNode {
    /// Starts a node on the operating system's network and disk ([`NodeEnv::production`]).
    pub async fn start(config: MetadataNodeConfig) -> anyhow::Result<Arc<MetadataNode>> {
        Self::start_in(config, NodeEnv::production()).await
    }

    /// Starts a node whose network, disk I/O and election timeouts come from `env` (the simulator's).
    pub async fn start_in(
        config: MetadataNodeConfig,
        env: NodeEnv,
    ) -> anyhow::Result<Arc<MetadataNode>> {
        let is_voter = config.voters.contains_key(&config.node_id);
        let node_id = u64::try_from(config.node_id)
            .map_err(|_| anyhow::anyhow!("node.id={} must not be negative", config.node_id))?;
        let mut voters = BTreeMap::new();
        for (id, addr) in &config.voters {
            let id = u64::try_from(*id).map_err(|_| {
                anyhow::anyhow!("controller.quorum.voters names a negative node id {id}")
            })?;
            voters.insert(id, addr.clone());
        }
        let mut quorum_config = QuorumConfig::new(
            node_id,
            voters,
            config.advertised_addr.clone(),
            config.data_dir.clone(),
        );
        let election = config.election_timeout_ms.max(50);
        quorum_config.election_timeout_min_ms = election;
        quorum_config.election_timeout_max_ms = election * 2;
        quorum_config.heartbeat_interval_ms = (election / 4).max(10);
        let network = env.network.clone();
        let state = ImageStateMachine::observed(&config.cluster_id, env.on_apply.clone());
        quorum_config.env = env;
        let quorum = Arc::new(
            Quorum::start(quorum_config, state.clone())
                .await
                .map_err(|e| anyhow::anyhow!("cannot start the metadata quorum: {e}"))?,
        );
        let image_cluster = state.image().cluster_id.clone();
        anyhow::ensure!(
            image_cluster == config.cluster_id,
            "the metadata log in {} belongs to cluster {image_cluster}, not {}; \
             point log.dirs at this cluster's data directory",
            config.data_dir.display(),
            config.cluster_id
        );
        let mut controller_config = config.controller;
        // Leases start when a registration or heartbeat is answered, by the node's clock (the simulator's under
        // simulation).
        controller_config.clock.get_or_insert(env::now);
        let controller = is_voter.then(|| {
            Arc::new(Controller::new(
                controller_config,
                Arc::new(QuorumWriter::new(quorum.clone(), state.clone())),
            ))
        });
        let (stop, stop_rx) = watch::channel(false);
        let node = Arc::new(MetadataNode {
            node_id: config.node_id,
            quorum,
            state,
            controller,
            crash_probes: Arc::new(CrashProbes::new(network)),
            stop,
        });
        if let Some(controller) = node.controller.clone() {
            tokio::spawn(active_controller_loop(
                controller,
                node.quorum.clone(),
                node.crash_probes.clone(),
                node_id,
                stop_rx,
            ));
        }
        Ok(node)
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.state.image()
    }

    pub fn watch_image(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.state.watch()
    }

    /// Why this node stopped applying the metadata log (a committed entry that does not apply to its image: a
    /// controller bug), if it did. Its image is frozen from then on.
    pub fn stopped_applying(&self) -> Option<String> {
        self.state.poisoned()
    }

    /// The active controller (the quorum leader), as this node knows it.
    pub fn controller_id(&self) -> Option<i32> {
        self.quorum.leader().and_then(|l| i32::try_from(l).ok())
    }

    pub fn watch_leader(&self) -> watch::Receiver<Option<u64>> {
        self.quorum.watch_leader()
    }

    pub fn is_active_controller(&self) -> bool {
        self.controller.is_some() && self.quorum.is_leader()
    }

    /// A connection that carried broker `broker_id`'s heartbeats to this node closed. On the active controller,
    /// probes whether the broker's process is gone and fences it at once if so ([`crate::crash_probe`]).
    pub fn broker_connection_closed(&self, broker_id: i32) {
        if let Some(controller) = self
            .controller
            .as_ref()
            .filter(|_| self.is_active_controller())
        {
            self.crash_probes.spawn(
                controller.clone(),
                broker_id,
                "its heartbeat connection closed",
            );
        }
    }

    pub fn quorum_status(&self) -> QuorumStatus {
        self.quorum.status()
    }

    /// Resolves when this node's part of the metadata quorum stops on a fault (a storage error writing the
    /// metadata log, say), with the reason; never on a normal shutdown. Nothing recovers from it but a restart.
    pub async fn failed(&self) -> String {
        self.quorum.failed().await
    }

    /// The raft transport's server side (the private API key on the controller listener).
    pub async fn handle_raft_rpc(&self, body: &[u8]) -> Vec<u8> {
        self.quorum.handle_rpc(body).await
    }

    /// Adds a broker-only node as a learner, so the leader replicates the metadata log to it.
    pub async fn add_learner(&self, id: i32, addr: String) -> anyhow::Result<()> {
        let id = u64::try_from(id).map_err(|_| anyhow::anyhow!("negative node id {id}"))?;
        self.quorum
            .add_learner(id, addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot add learner {id}: {e}"))
    }

    /// Imports a single node's topics and producer ids into a new metadata log (see
    /// [`controller::SingleNodeImport`]), waiting up to `wait` for this node to become the active controller.
    /// Only a sole voter may do it: its log is the cluster's.
    pub async fn import_single_node(
        &self,
        import: controller::SingleNodeImport,
        wait: std::time::Duration,
    ) -> anyhow::Result<controller::ImportOutcome> {
        let controller = self.controller.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "node {} is not a voter; only the sole voter imports",
                self.node_id
            )
        })?;
        let mut leader = self.quorum.watch_leader();
        let me = u64::try_from(self.node_id).ok();
        tokio::time::timeout(wait, leader.wait_for(|l| l.is_some() && *l == me))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "node {} did not become the active controller within {wait:?}",
                    self.node_id
                )
            })?
            .map_err(|_| anyhow::anyhow!("the metadata quorum stopped"))?;
        controller
            .import_single_node(import)
            .await
            .map_err(|e| anyhow::anyhow!("cannot write the import into the metadata log: {e}"))
    }

    /// Answers a controller API request (its body; headers stay with the caller). A node that is not the active
    /// controller answers registrations and heartbeats with NOT_CONTROLLER itself: a heartbeat must never
    /// refresh a lease on a controller that is not the one deciding fencing.
    pub async fn handle_controller_request(
        &self,
        api_key: i16,
        version: i16,
        body: Bytes,
    ) -> Result<Bytes, controller::HandleError> {
        let active = self.is_active_controller();
        match (&self.controller, api_key) {
            (Some(c), 62) if active => {
                let response = run_to_completion(c, api_key, version, body).await?;
                self.add_registered_learners();
                Ok(response)
            }
            (Some(c), _) if active => run_to_completion(c, api_key, version, body).await,
            (_, 62) => encode_body(
                api_key,
                &BrokerRegistrationResponse::default()
                    .with_error_code(errors::NOT_CONTROLLER)
                    .with_broker_epoch(-1),
                version,
            ),
            (_, 63) => encode_body(
                api_key,
                &BrokerHeartbeatResponse::default()
                    .with_error_code(errors::NOT_CONTROLLER)
                    .with_is_fenced(true),
                version,
            ),
            // Admin requests: the controller decides against its image and its write fails with
            // NOT_CONTROLLER; a node with no controller still answers through one built on the fly would be
            // wrong, so it refuses the same way.
            (Some(c), _) => c.handle(api_key, version, body, env::now()).await,
            (None, _) => Err(controller::HandleError::UnsupportedApi(api_key)),
        }
    }

    /// Makes every registered broker that is not a voter a learner of the quorum (at its first endpoint), so
    /// the leader replicates the metadata log to it: KRaft's observers. Runs in the background; adding a node
    /// that already learns is harmless.
    fn add_registered_learners(&self) {
        let status = self.quorum.status();
        let known: std::collections::BTreeSet<u64> = status
            .voters
            .iter()
            .chain(status.observers.iter())
            .map(|r| r.node_id)
            .collect();
        for broker in self.image().brokers.values() {
            let Ok(id) = u64::try_from(broker.id) else {
                continue;
            };
            if known.contains(&id) {
                continue;
            }
            let Some(endpoint) = broker.listeners.first() else {
                continue;
            };
            let addr = format!("{}:{}", endpoint.host, endpoint.port);
            let quorum = self.quorum.clone();
            tokio::spawn(async move {
                match quorum.add_learner(id, addr.clone()).await {
                    Ok(()) => {
                        tracing::info!(node = id, %addr, "broker added as a metadata learner")
                    }
                    Err(e) => {
                        tracing::warn!(node = id, %addr, error = %e, "could not add the broker as a metadata learner; it retries at its next registration")
                    }
                }
            });
        }
    }

    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        self.quorum.shutdown().await;
    }
}

fn encode_body<T: Encodable + kafka_protocol::protocol::Message>(
    api_key: i16,
    message: &T,
    version: i16,
) -> Result<Bytes, controller::HandleError> {
    let mut buf = BytesMut::new();
    match message.encode(&mut buf, version) {
        Ok(()) => Ok(buf.freeze()),
        Err(_) => Err(controller::HandleError::UnsupportedVersion {
            api_key,
            version,
            min: T::VERSIONS.min,
            max: T::VERSIONS.max,
        }),
    }
}

/// While this node leads the quorum: give every broker a fresh lease on becoming active, then tick.
async fn active_controller_loop(
    controller: Arc<Controller>,
    quorum: Arc<Quorum>,
    crash_probes: Arc<CrashProbes>,
    node_id: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut leader = quorum.watch_leader();
    let mut active = false;
    loop {
        let leads = *leader.borrow_and_update() == Some(node_id);
        if leads && !active {
            tracing::info!(node = node_id, "this node is now the active controller");
            controller.on_become_active(env::now()).await;
            // The previous controller may have died with a broker (a combined node): that broker will never
            // connect here, so look at every unfenced broker once rather than wait out fresh leases.
            let image = controller.image();
            for broker in image.brokers.values().filter(|b| !b.fenced) {
                if u64::try_from(broker.id).ok() != Some(node_id) {
                    crash_probes.spawn(
                        controller.clone(),
                        broker.id,
                        "this node became the active controller",
                    );
                }
            }
        } else if !leads && active {
            tracing::info!(
                node = node_id,
                "this node is no longer the active controller"
            );
        }
        active = leads;
        // Biased (stop, then a leader change, then the tick): a simulated run must not depend on tokio's
        // unseeded fairness draw between branches ready at once.
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            changed = leader.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(TICK_INTERVAL), if active => {
                if let Err(e) = controller.tick(env::now()).await {
                    tracing::debug!(error = %e, "controller tick did not commit");
                }
            }
        }
    }
}

/// Runs one controller operation on a task of its own, so that it runs to its end even if the request that asked
/// for it is dropped (its connection closed, a timeout). Dropped mid-write, an operation released the controller's
/// lock while its entry was still on its way through the quorum: the next operation decided from an image without
/// that entry, and once both were committed the second did not apply, which stopped every node's metadata
/// (found by the simulator: `annal-sim --brokers --seed 2609 --seconds 60`, a BrokerRegistration whose broker
/// gave up after 4.5 s, then its retry's re-registration built on the ISR before the first's shrink).
async fn run_to_completion(
    controller: &Arc<Controller>,
    api_key: i16,
    version: i16,
    body: Bytes,
) -> Result<Bytes, controller::HandleError> {
    let controller = controller.clone();
    let now = env::now();
    let task = tokio::spawn(async move { controller.handle(api_key, version, body, now).await });
    match task.await {
        Ok(answer) => answer,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: nobody is left to answer.
        Err(_) => Err(controller::HandleError::UnsupportedApi(api_key)),
    }
}

/// Resolves once `stop` is true (or its sender is gone); the watch guard stays inside so callers stay `Send`.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use kafka_protocol::messages::broker_registration_request::Listener;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{
        BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest, CreateTopicsRequest, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    /// Issue 19 through the real quorum: fencing and unfencing a broker whose partition changes exceed one
    /// quorum entry. As one batch they were refused (`TooLarge`) on every tick, for ever.
    #[tokio::test]
    async fn a_transition_larger_than_one_quorum_entry_commits_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut voters = BTreeMap::new();
        voters.insert(0u64, "127.0.0.1:1".to_string());
        // Entries up to 512 KiB: 5,000 partition changes (~850 KB of entry) do not fit one.
        let config = QuorumConfig {
            election_timeout_min_ms: 50,
            election_timeout_max_ms: 100,
            heartbeat_interval_ms: 20,
            max_rpc_bytes: 1 << 20,
            ..QuorumConfig::new(0, voters, "127.0.0.1:1".into(), dir.path().to_path_buf())
        };
        let state = ImageStateMachine::new("c");
        let quorum = Arc::new(Quorum::start(config, state.clone()).await.unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !quorum.is_leader() {
            assert!(
                Instant::now() < deadline,
                "the single voter did not become leader"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let controller = Controller::new(
            ControllerConfig::default(),
            Arc::new(QuorumWriter::new(quorum.clone(), state.clone())),
        );
        let now = Instant::now();
        let reg = controller
            .register_broker(
                BrokerRegistrationRequest::default()
                    .with_broker_id(BrokerId(0))
                    .with_cluster_id(StrBytes::from_static_str("c"))
                    .with_listeners(vec![Listener::default()
                        .with_name(StrBytes::from_static_str("PLAINTEXT"))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(9092)]),
                now,
            )
            .await;
        assert_eq!(reg.error_code, errors::NONE);
        let beat = || {
            BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(0))
                .with_broker_epoch(reg.broker_epoch)
                .with_current_metadata_offset(state.image().last_applied_offset.unwrap() as i64)
        };
        assert!(!controller.broker_heartbeat(beat(), now).await.is_fenced);
        for t in 0..5 {
            let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(format!("t{t}"))))
                .with_num_partitions(1_000)
                .with_replication_factor(1)]);
            assert_eq!(
                controller.create_topics(req).await.topics[0].error_code,
                errors::NONE
            );
        }
        assert_eq!(state.image().partitions_led_by(0).len(), 5_000);

        controller
            .tick(now + Duration::from_secs(10))
            .await
            .unwrap();
        let image = state.image();
        assert!(image.broker(0).unwrap().fenced, "the fence committed");
        assert!(image.partitions_led_by(0).is_empty());

        let resp = controller
            .broker_heartbeat(beat(), now + Duration::from_secs(10))
            .await;
        assert_eq!(resp.error_code, errors::NONE);
        assert!(!resp.is_fenced);
        assert_eq!(
            state.image().partitions_led_by(0).len(),
            5_000,
            "every partition elected again"
        );
        quorum.shutdown().await;
    }
}
