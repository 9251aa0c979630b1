//! The transaction coordinator (Kafka's `TransactionCoordinator`, `TransactionStateManager` and
//! `TransactionMarkerChannelManager`).
//!
//! State is one [`state::TxnMetadata`] per transactional id, kept in memory and persisted, before any answer
//! depends on it, to `__transaction_state` in Kafka's record schemas ([`records`]). That topic is an ordinary
//! replicated topic of the [`ReplicaManager`], created through the controller on first use, like
//! `__consumer_offsets`. As in Kafka a broker coordinates the transactional ids of the partitions it leads:
//! [`TxnCoordinator::reconcile`] (after every applied image) replays a partition this broker became leader of and
//! drops one it lost (NOT_COORDINATOR); while it replays, requests get COORDINATOR_LOAD_IN_PROGRESS.
//!
//! A write is prepared under the state lock (the metadata's `pending` state is set, so concurrent requests for the
//! id get CONCURRENT_TRANSACTIONS), appended with acks=all outside it, and installed when the append is committed.
//! EndTxn writes PrepareCommit/PrepareAbort, answers, then sends WriteTxnMarkers to every partition's leader
//! ([`markers`]) and writes CompleteCommit/CompleteAbort once all have the marker. A coordinator that takes over a
//! partition re-sends the markers of every transaction it finds prepared.
//!
//! Transaction versions 1 and 2 (KIP-890 part 2), chosen per request by its version as Kafka does: at version 2
//! every EndTxn (v5) bumps the producer epoch, and partition leaders add partitions for the client (Produce v12,
//! TxnOffsetCommit v5, AddPartitionsToTxn v5 without verifyOnly). See docs/decisions/0012-transaction-coordinator.md.

mod log;
pub mod markers;
mod ops;
mod peers;
pub mod records;
pub mod state;
mod timer;
mod verification;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::group::{BoxFuture, OffsetsTopicCreator, OffsetsTopicSpec};
use crate::replica::ReplicaManager;
pub use markers::{LeaderRoutes, Marker};
pub use ops::{DescribedTxn, ListFilter, ListedTxn};
use state::TxnMetadata;

/// Kafka's internal topic name.
pub const TXN_TOPIC: &str = "__transaction_state";

/// Kafka error codes the coordinator answers with.
pub mod code {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    pub const INVALID_REQUEST: i16 = 42;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
    pub const PRODUCER_FENCED: i16 = 90;
}

/// Coordinator settings, named after Kafka's broker configs.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions` (50).
    pub num_partitions: u32,
    /// `transaction.state.log.replication.factor` (3), capped at the live brokers at creation.
    pub replication_factor: i16,
    /// `transaction.state.log.min.isr` (2), capped at the replication factor chosen (see decision 0012).
    pub min_isr: i16,
    /// `transaction.state.log.segment.bytes` (104857600).
    pub segment_bytes: i64,
    /// `transaction.max.timeout.ms` (900000): InitProducerId with a longer timeout gets
    /// INVALID_TRANSACTION_TIMEOUT.
    pub max_timeout_ms: i32,
    /// `transaction.partition.verification.enable` (true): a partition leader verifies with the coordinator that
    /// a producer's first transactional batch there belongs to its ongoing transaction (KIP-890 part 1).
    pub partition_verification: bool,
    /// The `transaction.version` feature level finalized in ApiVersions (2): at 2, Java clients 4.x use KIP-890
    /// part 2 (no AddPartitionsToTxn, EndTxn v5 bumping the epoch). The coordinator serves both versions
    /// whatever the level: each request's version says which its client speaks, as in Kafka.
    pub transaction_version: i16,
    /// `transactional.id.expiration.ms` (604800000): an id idle this long in a finished state is removed.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10000).
    pub abort_timed_out_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (3600000).
    pub remove_expired_interval_ms: u64,
    /// How long a write to `__transaction_state` waits for the ISR (Kafka: `request.timeout.ms`, 30000).
    pub write_timeout_ms: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            num_partitions: 50,
            partition_verification: true,
            transaction_version: 2,
            replication_factor: 3,
            min_isr: 2,
            segment_bytes: 100 * 1024 * 1024,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
            write_timeout_ms: 30_000,
        }
    }
}

/// Hands out producer ids no broker of the cluster has used (the controller's blocks).
pub trait ProducerIdSource: Send + Sync {
    fn next_producer_id(&self) -> BoxFuture<'_, anyhow::Result<i64>>;
}

/// A `__transaction_state` partition as this coordinator holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owned {
    /// Led here and being replayed: COORDINATOR_LOAD_IN_PROGRESS.
    Loading { leader_epoch: i32 },
    /// Coordinated here; `leader_epoch` is the coordinator epoch stamped on markers.
    Active { leader_epoch: i32 },
}

impl Owned {
    fn leader_epoch(self) -> i32 {
        match self {
            Owned::Loading { leader_epoch } | Owned::Active { leader_epoch } => leader_epoch,
        }
    }
}

/// `BTreeMap`s, not `HashMap`s: the timer walks `txns` and starts one abort task per timed-out transaction, and a
/// load resumes the markers of every prepared one, in the map's order, which must be the same in every run of the
/// deterministic simulator (std's hash seed differs per process and per map).
struct State {
    owned: BTreeMap<u32, Owned>,
    txns: BTreeMap<String, TxnMetadata>,
    /// `__transaction_state`'s partition count: the topic's once it exists, else the configured one.
    num_partitions: u32,
    closed: bool,
}

impl State {
    fn partition_for(&self, transactional_id: &str) -> u32 {
        crate::group::records::partition_for(transactional_id, self.num_partitions)
    }

    /// The coordinator epoch `transactional_id` is served at, or why it is not served here.
    fn coordinator_epoch(&self, transactional_id: &str) -> Result<(u32, i32), i16> {
        if self.closed {
            return Err(code::NOT_COORDINATOR);
        }
        let partition = self.partition_for(transactional_id);
        match self.owned.get(&partition) {
            None => Err(code::NOT_COORDINATOR),
            Some(Owned::Loading { .. }) => Err(code::COORDINATOR_LOAD_IN_PROGRESS),
            Some(Owned::Active { leader_epoch }) => Ok((partition, *leader_epoch)),
        }
    }

    /// Whether `partition` is still coordinated here at `leader_epoch` (a write or marker task checks this).
    fn still_active(&self, partition: u32, leader_epoch: i32) -> bool {
        !self.closed && self.owned.get(&partition) == Some(&Owned::Active { leader_epoch })
    }

    fn unload(&mut self, partition: u32) {
        self.owned.remove(&partition);
        let n = self.num_partitions;
        self.txns
            .retain(|id, _| crate::group::records::partition_for(id, n) != partition);
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    config: TxnConfig,
    replicas: Arc<ReplicaManager>,
    creator: Arc<dyn OffsetsTopicCreator>,
    ids: Arc<dyn ProducerIdSource>,
    /// Where partition leaders are (`__transaction_state`'s too, for verification of another coordinator's
    /// transactions).
    routes: Arc<dyn LeaderRoutes>,
    markers: markers::MarkerChannel,
    /// Connections to other coordinators for KIP-890 verification (`verification.rs`).
    verify_peers: peers::Peers,
    /// One creation of `__transaction_state` at a time.
    creating: tokio::sync::Mutex<()>,
}

/// The transaction coordinator. Use it behind the `Arc` [`TxnCoordinator::start`] returns; needs a tokio runtime.
pub struct TxnCoordinator {
    shared: Arc<Shared>,
    timer: tokio::task::JoinHandle<()>,
}

impl Drop for TxnCoordinator {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// The APIs the coordinator serves and the versions it implements, as Kafka 4.x advertises them: the last
/// version of AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit is transaction version 2's.
pub const API_VERSIONS: &[(i16, i16, i16)] = &[
    (24, 0, 5), // AddPartitionsToTxn (v4+: batched, verifyOnly, KIP-890 part 1; v5: implicit add, part 2)
    (25, 0, 4), // AddOffsetsToTxn (v4: a version-2 client; the same request)
    (26, 0, 5), // EndTxn (v5: epoch bump, the producer id and epoch in the answer)
    (28, 0, 5), // TxnOffsetCommit (the group coordinator's side; v5 adds the offsets partition implicitly)
    (65, 0, 0), // DescribeTransactions
    (66, 0, 1), // ListTransactions
];

impl TxnCoordinator {
    /// The coordinator over `replicas`; partitions load as this broker becomes their leader
    /// ([`TxnCoordinator::reconcile`]). Must be called inside a tokio runtime.
    pub fn start(
        replicas: Arc<ReplicaManager>,
        creator: Arc<dyn OffsetsTopicCreator>,
        ids: Arc<dyn ProducerIdSource>,
        routes: Arc<dyn LeaderRoutes>,
        config: TxnConfig,
    ) -> anyhow::Result<Arc<Self>> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the transaction coordinator needs a tokio runtime"))?;
        anyhow::ensure!(
            config.num_partitions >= 1,
            "transaction.state.log.num.partitions must be at least 1"
        );
        let verify_security = routes.inter_broker_client();
        let verify_network = routes.network();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                owned: BTreeMap::new(),
                txns: BTreeMap::new(),
                num_partitions: config.num_partitions,
                closed: false,
            }),
            markers: markers::MarkerChannel::new(routes.clone()),
            routes,
            verify_peers: verification::peers(verify_security, verify_network),
            config,
            replicas,
            creator,
            ids,
            creating: tokio::sync::Mutex::new(()),
        });
        let timer = runtime.spawn(timer::run(Arc::downgrade(&shared)));
        Ok(Arc::new(TxnCoordinator { shared, timer }))
    }

    /// Loads each `__transaction_state` partition this broker has become leader of (in the background) and
    /// drops each one it no longer leads. Idempotent; call after every applied image (the timer also calls it).
    pub fn reconcile(&self) {
        drop(log::reconcile(&self.shared));
    }

    /// Creates `__transaction_state` if needed and loads what this broker leads. COORDINATOR_NOT_AVAILABLE if
    /// the topic cannot be created yet (clients retry).
    pub async fn ensure_topic(&self) -> Result<(), i16> {
        let shared = &self.shared;
        if shared.replicas.topic(TXN_TOPIC).is_some() {
            drop(log::reconcile(shared));
            return Ok(());
        }
        {
            let _one = shared.creating.lock().await;
            if shared.replicas.topic(TXN_TOPIC).is_none() {
                if let Err(e) = shared.creator.create(topic_spec(&shared.config)).await {
                    tracing::warn!(error = %format!("{e:#}"), "cannot create {TXN_TOPIC}");
                    return Err(code::COORDINATOR_NOT_AVAILABLE);
                }
                tracing::info!("created {TXN_TOPIC}");
            }
        }
        for handle in log::reconcile(shared) {
            let _ = handle.await;
        }
        // Loads the timer's reconcile started have no handle here: wait for them too (bounded), so the request
        // that created the topic is served rather than told to retry.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline
            && shared
                .state
                .lock()
                .owned
                .values()
                .any(|o| matches!(o, Owned::Loading { .. }))
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The `__transaction_state` partition of `transactional_id` (Kafka's `abs(hashCode) % partitions`).
    pub fn partition_for(&self, transactional_id: &str) -> u32 {
        self.shared.state.lock().partition_for(transactional_id)
    }

    pub fn config(&self) -> &TxnConfig {
        &self.shared.config
    }

    /// Stops coordinating: later requests get NOT_COORDINATOR; marker tasks stop at their next step.
    pub async fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.closed = true;
        state.owned.clear();
        state.txns.clear();
    }
}

/// What `__transaction_state` is created with: Kafka's configs (compacted, `transaction.state.log.segment.bytes`,
/// `min.insync.replicas` from `transaction.state.log.min.isr`).
fn topic_spec(config: &TxnConfig) -> OffsetsTopicSpec {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert(
        "segment.bytes".to_string(),
        config.segment_bytes.to_string(),
    );
    configs.insert(
        "min.insync.replicas".to_string(),
        config.min_isr.max(1).to_string(),
    );
    OffsetsTopicSpec {
        name: TXN_TOPIC,
        partitions: i32::try_from(config.num_partitions).unwrap_or(i32::MAX),
        replication_factor: config.replication_factor,
        configs,
    }
}
