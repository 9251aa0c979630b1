//! The metadata quorum: Raft consensus from openraft 0.9 (docs/decisions/0004-metadata-quorum.md) over
//! opaque payloads. Annal supplies the storage (the metadata log is an `annal_log::Log` in
//! `data_dir/__cluster_metadata-0/`, one Kafka v2 batch per entry, partition leader epoch = term, the raft
//! index in a private entry-header record since Kafka offsets count records; the vote in `quorum-state`;
//! snapshots as `<index>-<term>.checkpoint`), the snapshot bridge to the
//! caller's [`StateMachine`] and the transport (Kafka-framed requests with api key [`RAFT_RPC_API_KEY`] to a
//! peer's CONTROLLER listener).
//!
//! Architecture invariant: the quorum never interprets a payload; what records mean is the controller's and
//! the image's business.

mod entry_codec;
mod log_store;
mod snapshot;
mod state_file;
pub(crate) mod transport;
mod types;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ServerState};
use tokio::sync::watch;

pub use transport::serve;

use crate::env::NodeEnv;
use log_store::LogStore;
use snapshot::SmStore;
use transport::{Contacts, Network, RpcRequest, RpcResponse};
use types::Raft;

/// The api key of raft RPCs on the CONTROLLER listener: outside Kafka's range, private to a cluster.
pub const RAFT_RPC_API_KEY: i16 = 32_000;

/// Decodes the raft entry in the record batch at the start of `bytes`, as the log store does on read, and checks
/// that it encodes back to an equal entry. The fuzz targets' entry (fuzz/): `Ok` gives the bytes the batch used.
///
/// # Panics
/// If a decoded entry does not survive encode + decode: a codec bug, which is what the fuzzer looks for.
pub fn decode_entry_checked(bytes: &[u8]) -> Result<usize, String> {
    let (entry, used) = entry_codec::decode(bytes)?;
    let again = entry_codec::encode(&entry).expect("a decoded entry encodes");
    let (back, _) = entry_codec::decode(&again).expect("an encoded entry decodes");
    assert_eq!(back, entry, "raft entry changed through encode + decode");
    Ok(used)
}

/// Parses a whole quorum snapshot file (`<index>-<term>.checkpoint`) as start-up does and checks it re-encodes to
/// the same meta and data. The fuzz targets' entry (fuzz/): `Ok` is the state machine's bytes, which the
/// controller hands to `MetadataImage::decode_snapshot`.
///
/// # Panics
/// If what parsed does not survive encode + parse: a codec bug, which is what the fuzzer looks for.
#[doc(hidden)]
pub fn decode_snapshot_file_checked(bytes: &[u8]) -> Result<Vec<u8>, String> {
    snapshot::parse_checkpoint_checked(bytes)
}

/// A valid quorum snapshot file around `data` (fuzz targets: mutated state-machine bytes past the CRC).
#[doc(hidden)]
pub fn snapshot_file_around(data: &[u8]) -> Vec<u8> {
    snapshot::checkpoint_around(data)
}

/// Parses a `quorum-state` file (the vote, committed and purged log ids) as start-up does and checks it survives
/// a write + read. The fuzz targets' entry (fuzz/).
///
/// # Panics
/// If what parsed does not survive write + read.
#[doc(hidden)]
pub fn decode_quorum_state_checked(bytes: &[u8]) -> Result<(), String> {
    let state = state_file::QuorumState::parse(bytes)?;
    let again =
        state_file::QuorumState::parse(&state.encode().expect("a parsed quorum state encodes"))
            .expect("an encoded quorum state parses");
    assert_eq!(again, state, "quorum state changed through write + read");
    Ok(())
}

/// Name of the metadata log directory under `data_dir`, as in Kafka.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";

/// A payload is a list of opaque records (each will be one Kafka metadata record); they are stored as the
/// records of one Kafka v2 record batch per raft entry, so the log looks like Kafka's `__cluster_metadata`.
pub type Payload = Vec<Vec<u8>>;

/// How to run one node of the quorum.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: u64,
    /// Static voters (`controller.quorum.voters`): id -> "host:port" of their CONTROLLER listener.
    pub voters: BTreeMap<u64, String>,
    /// This node's own raft address if it is not a voter (a broker-only node joins as a learner/observer).
    pub advertised_addr: String,
    /// The metadata log lives in `data_dir/__cluster_metadata-0/`.
    pub data_dir: PathBuf,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// A snapshot is taken (and the log purged up to it) after this many entries since the last one.
    pub snapshot_every_entries: u64,
    /// A snapshot is also taken once this many bytes of records were applied since the last one (Kafka's
    /// `metadata.log.max.record.bytes.between.snapshots`, 20 MiB): entries carry up to thousands of records
    /// each, so an entry count alone let a 100,000-partition cluster's log grow to 78 MB (1.5 million
    /// records, 6 s of replay at every start) in 800 entries.
    pub snapshot_every_bytes: u64,
    /// The largest raft RPC frame sent or accepted (both sides).
    pub max_rpc_bytes: usize,
    /// Network, disk I/O and election-timeout draw ([`NodeEnv::production`] unless a simulation runs it).
    pub env: NodeEnv,
}

impl QuorumConfig {
    /// Kafka's defaults where KRaft has one (`controller.quorum.election.timeout.ms` = 1000,
    /// `controller.quorum.fetch.timeout.ms` / 2 as heartbeat, `metadata.log.max.snapshot.interval` in entries).
    pub fn new(
        node_id: u64,
        voters: BTreeMap<u64, String>,
        advertised_addr: String,
        data_dir: PathBuf,
    ) -> Self {
        QuorumConfig {
            node_id,
            voters,
            advertised_addr,
            data_dir,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            heartbeat_interval_ms: 500,
            snapshot_every_entries: 20_000,
            snapshot_every_bytes: 20 << 20,
            max_rpc_bytes: 8 << 20,
            env: NodeEnv::production(),
        }
    }
}

/// The caller's replicated state: the metadata image, for the controller.
pub trait StateMachine: Send + Sync + 'static {
    /// Called once per committed normal entry, in log order, on every node (voters and learners).
    fn apply(&self, index: u64, records: &[Vec<u8>]);
    /// Consecutive committed normal entries, in log order: the same as [`StateMachine::apply`] on each, which
    /// is the default. A state machine whose apply copies its state overrides it to copy once per run (a
    /// restart replays hundreds of entries, each up to `MAX_RECORDS_PER_BATCH` records).
    fn apply_run(&self, entries: &[(u64, Vec<Vec<u8>>)]) {
        for (index, records) in entries {
            self.apply(*index, records);
        }
    }
    /// A snapshot of everything applied so far: (last applied index, bytes).
    fn snapshot(&self) -> (u64, Vec<u8>);
    /// Replace the state with a snapshot taken at `index` (install from the leader, or at start-up). The state
    /// machine handed to [`Quorum::start`] must be empty: the quorum restores it from its newest snapshot and
    /// replays the log after it.
    fn restore(&self, index: u64, data: &[u8]) -> Result<(), String>;
}

/// Starting the quorum failed.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// A setting is wrong; the message names it.
    #[error("metadata quorum configuration: {0}")]
    Config(String),
    /// The metadata log, its state file or a snapshot could not be read or written.
    #[error("metadata log storage: {0}")]
    Storage(String),
    /// openraft refused to start or to initialize.
    #[error("metadata quorum: {0}")]
    Raft(String),
}

/// A write (or membership change) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Only the leader writes; send the write to `leader` (unknown while an election runs: retry shortly).
    #[error("this node is not the metadata quorum leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    /// The payload would not fit one raft RPC; split it or raise max_rpc_bytes.
    #[error("payload of about {bytes} bytes exceeds the limit of {limit} bytes; split it into smaller writes")]
    TooLarge { bytes: usize, limit: usize },
    /// The quorum is stopped or hit a storage error it cannot survive; the node must restart.
    #[error("the metadata quorum is not running: {0}")]
    Stopped(String),
    #[error("metadata quorum write failed: {0}")]
    Other(String),
}

/// One voter's or observer's replication state, for DescribeQuorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub node_id: u64,
    /// The last log index known to match the leader's (`None`: not known; only the leader knows others').
    pub matched_index: Option<u64>,
    /// When the leader last heard from it, in ms since the Unix epoch (the leader's own: now).
    pub last_contact_ms: Option<i64>,
}

/// The quorum as DescribeQuorum reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub leader_id: Option<u64>,
    /// The raft term, which is Kafka's leader epoch.
    pub term: u64,
    /// The commit index, which is Kafka's high watermark (`None` before anything committed).
    pub high_watermark: Option<u64>,
    pub voters: Vec<ReplicaStatus>,
    pub observers: Vec<ReplicaStatus>,
}

/// One running node of the metadata quorum.
pub struct Quorum {
    node_id: u64,
    raft: Raft,
    log: LogStore,
    contacts: Arc<Contacts>,
    leader_rx: watch::Receiver<Option<u64>>,
    max_rpc_bytes: usize,
    disk_io: crate::env::DiskIo,
    leader_task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Bytes added around a payload by the entry header and the AppendEntries envelope.
const ENTRY_OVERHEAD_BYTES: usize = 4096;

fn validate(config: &QuorumConfig) -> Result<(), QuorumError> {
    let bad = |m: String| Err(QuorumError::Config(m));
    if config.voters.is_empty() {
        return bad("controller.quorum.voters is empty; list at least one voter".into());
    }
    if !config.voters.contains_key(&config.node_id) && config.advertised_addr.is_empty() {
        return bad(format!(
            "node.id {} is not in controller.quorum.voters and has no advertised address to join as an observer",
            config.node_id
        ));
    }
    if config.election_timeout_min_ms == 0
        || config.election_timeout_min_ms >= config.election_timeout_max_ms
        || config.heartbeat_interval_ms >= config.election_timeout_min_ms
    {
        return bad(format!(
            "timeouts: need 0 < heartbeat ({}) < election min ({}) < election max ({}) ms",
            config.heartbeat_interval_ms,
            config.election_timeout_min_ms,
            config.election_timeout_max_ms
        ));
    }
    if let Some(t) = config.env.fixed_election_timeout_ms {
        if t <= config.heartbeat_interval_ms {
            return bad(format!(
                "a fixed election timeout of {t} ms must exceed the heartbeat interval ({} ms)",
                config.heartbeat_interval_ms
            ));
        }
    }
    if config.max_rpc_bytes < 64 * 1024 {
        return bad(format!(
            "max_rpc_bytes {} is below the 64 KiB minimum",
            config.max_rpc_bytes
        ));
    }
    if config.snapshot_every_bytes == 0 {
        return bad("snapshot_every_bytes must be at least 1".into());
    }
    if config.snapshot_every_entries == 0 {
        return bad("snapshot_every_entries must be at least 1".into());
    }
    Ok(())
}

impl Quorum {
    /// Opens the metadata log, restores the state machine from the newest snapshot and starts raft. A voter
    /// that finds no state initializes the quorum with the full voter set (every voter does so, which openraft
    /// allows when the sets agree); a node with state resumes; a learner waits for the leader's `add_learner`.
    pub async fn start(
        config: QuorumConfig,
        sm: Arc<dyn StateMachine>,
    ) -> Result<Quorum, QuorumError> {
        validate(&config)?;
        let dir = config.data_dir.join(METADATA_LOG_DIR);
        let max_entry_bytes = config.max_rpc_bytes / 2;
        let disk_io = config.env.disk_io;
        let (log, sm_store) = disk_io
            .run({
                let dir = dir.clone();
                move || -> Result<_, String> {
                    let log = LogStore::open(&dir, max_entry_bytes)?.with_disk_io(disk_io);
                    let sm_store = SmStore::open(&dir, sm)?.with_disk_io(disk_io);
                    Ok((log, sm_store))
                }
            })
            .await
            .map_err(QuorumError::Storage)?
            .map_err(QuorumError::Storage)?;
        // openraft draws each election timeout from [min, max) with `rand::thread_rng`; a one-wide range makes
        // the draw the value the environment fixed (a simulation's seeded choice).
        let (election_min, election_max) = match config.env.fixed_election_timeout_ms {
            Some(t) => (t, t + 1),
            None => (
                config.election_timeout_min_ms,
                config.election_timeout_max_ms,
            ),
        };
        let pristine = log.is_pristine() && !sm_store.has_snapshot();
        let applied_bytes = sm_store.bytes_since_snapshot();

        let raft_config = openraft::Config {
            cluster_name: "annal-metadata".into(),
            election_timeout_min: election_min,
            election_timeout_max: election_max,
            heartbeat_interval: config.heartbeat_interval_ms,
            install_snapshot_timeout: config.election_timeout_max_ms.max(1000),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_every_entries),
            // JSON spells a byte as up to 4 characters: a chunk of a fifth of a frame always fits.
            snapshot_max_chunk_size: (config.max_rpc_bytes / 5) as u64,
            // Purge up to the snapshot: a restart replays only the tail; a lagging node gets the snapshot.
            max_in_snapshot_log_to_keep: 0,
            ..Default::default()
        }
        .validate()
        .map_err(|e| QuorumError::Config(e.to_string()))?;

        let contacts = Arc::new(Contacts::default());
        let connect_timeout =
            Duration::from_millis(config.election_timeout_min_ms.clamp(100, 3000));
        let network = Network::new(
            config.env.network.clone(),
            connect_timeout,
            config.max_rpc_bytes,
            contacts.clone(),
        );
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            network,
            log.clone(),
            sm_store,
        )
        .await
        .map_err(|e| QuorumError::Raft(format!("start raft: {e}")))?;

        if pristine && config.voters.contains_key(&config.node_id) {
            let members: BTreeMap<u64, BasicNode> = config
                .voters
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr)))
                .collect();
            match raft.initialize(members).await {
                Ok(()) => {}
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(QuorumError::Raft(format!("initialize the quorum: {e}"))),
            }
        }
        let sole_voter = config.voters.len() == 1 && config.voters.contains_key(&config.node_id);
        if sole_voter && !pristine {
            // A sole voter needs nobody's vote: restarting, it leads at once instead of after an election
            // timeout (1-2 s of a zero-configuration node refusing metadata changes).
            if let Err(e) = raft.trigger().elect().await {
                tracing::warn!(error = %e, "could not start an election at once; waiting for the election timeout");
            }
        }

        let (leader_tx, leader_rx) = watch::channel(None);
        let mut metrics = raft.metrics();
        let snapshot_raft = raft.clone();
        let snapshot_every_bytes = config.snapshot_every_bytes;
        let leader_task = tokio::spawn(async move {
            loop {
                let leader = metrics.borrow_and_update().current_leader;
                leader_tx.send_if_modified(|l| std::mem::replace(l, leader) != leader);
                // Every applied entry changes the metrics: the place to see the bytes pass the threshold.
                // Reset when triggered, so a snapshot in progress is not asked for again.
                if applied_bytes.load(Ordering::Relaxed) >= snapshot_every_bytes {
                    applied_bytes.store(0, Ordering::Relaxed);
                    if let Err(e) = snapshot_raft.trigger().snapshot().await {
                        tracing::warn!(error = %e, "could not start a metadata snapshot");
                    }
                }
                if metrics.changed().await.is_err() {
                    leader_tx.send_replace(None);
                    return;
                }
            }
        });
        Ok(Quorum {
            node_id: config.node_id,
            raft,
            log,
            contacts,
            leader_rx,
            max_rpc_bytes: config.max_rpc_bytes,
            disk_io,
            leader_task: parking_lot::Mutex::new(Some(leader_task)),
        })
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub(crate) fn max_rpc_bytes(&self) -> usize {
        self.max_rpc_bytes
    }

    /// Replicates `payload`; returns its index once it is committed AND applied to the local state machine.
    /// `Err(NotLeader { leader })` when this node is not the leader.
    pub async fn write(&self, payload: Payload) -> Result<u64, WriteError> {
        let limit = self.max_rpc_bytes / 2;
        // The JSON size is what travels (a byte costs up to 4); records are checked before encoding.
        let raw: usize = payload.iter().map(|r| r.len() + 8).sum();
        let bytes = if raw > limit {
            raw
        } else {
            serde_json::to_vec(&payload).map_or(usize::MAX, |v| v.len())
        };
        if bytes + ENTRY_OVERHEAD_BYTES > limit {
            return Err(WriteError::TooLarge { bytes, limit });
        }
        match self.raft.client_write(payload).await {
            Ok(response) => Ok(response.log_id.index),
            Err(e) => Err(write_error(e)),
        }
    }

    pub fn leader(&self) -> Option<u64> {
        *self.leader_rx.borrow()
    }

    /// Resolves when this node's Raft stops on a fault (a storage error, a panic in its core), with the reason;
    /// never on a normal shutdown. openraft does not recover from these: its core task is gone.
    pub async fn failed(&self) -> String {
        /// What the core last reported: running, stopped normally, or failed (and why).
        fn state(m: &openraft::RaftMetrics<u64, openraft::BasicNode>) -> Option<Option<String>> {
            match &m.running_state {
                Ok(()) => None,
                Err(openraft::error::Fatal::Stopped) => Some(None),
                Err(f) => Some(Some(f.to_string())),
            }
        }
        let mut metrics = self.raft.metrics();
        loop {
            let now = state(&metrics.borrow_and_update());
            let closed = match now {
                Some(Some(reason)) => return reason,
                Some(None) => true,
                None => metrics.changed().await.is_err(),
            };
            if closed {
                // The core is gone: its last report says whether it failed or was stopped.
                let last = state(&metrics.borrow());
                if let Some(Some(reason)) = last {
                    return reason;
                }
                return std::future::pending().await;
            }
        }
    }

    pub fn watch_leader(&self) -> watch::Receiver<Option<u64>> {
        self.leader_rx.clone()
    }

    /// Waits (up to `limit`) until this leader has applied every entry its log holds, and returns its term.
    ///
    /// A new leader's log may end in entries its state machine has not applied: entries of earlier terms it
    /// commits only with its first entry of its own, or, when a leader restarts and resumes its term (openraft
    /// keeps a committed vote), the entries its previous life appended but never saw committed. Anything decided
    /// against the state machine before those apply is decided against a past that the log has already moved
    /// on from. `Err(NotLeader)` as soon as this node is not the leader; `Err(Other)` on timeout (no majority to
    /// commit with).
    pub async fn await_log_applied(&self, limit: Duration) -> Result<u64, WriteError> {
        let mut metrics = self.raft.metrics();
        let wait = async {
            loop {
                let (leads, leader, term, last_log, applied) = {
                    let m = metrics.borrow_and_update();
                    (
                        m.state == ServerState::Leader && m.current_leader == Some(self.node_id),
                        m.current_leader,
                        m.current_term,
                        m.last_log_index,
                        m.last_applied.map(|l| l.index),
                    )
                };
                if !leads {
                    return Err(WriteError::NotLeader { leader });
                }
                if applied >= last_log {
                    return Ok(term);
                }
                if metrics.changed().await.is_err() {
                    return Err(WriteError::Stopped("its raft core stopped".into()));
                }
            }
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(result) => result,
            Err(_) => Err(WriteError::Other(format!(
                "the metadata log was not applied up to its end within {limit:?} (is a majority of voters up?)"
            ))),
        }
    }

    pub fn is_leader(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.node_id)
    }

    /// The server side of the raft transport: decode a request body, hand it to openraft, encode the answer.
    pub async fn handle_rpc(&self, body: &[u8]) -> Vec<u8> {
        let response = match serde_json::from_slice::<RpcRequest>(body) {
            Err(e) => RpcResponse::BadRequest(format!("undecodable raft request: {e}")),
            Ok(RpcRequest::AppendEntries(rpc)) => {
                RpcResponse::AppendEntries(self.raft.append_entries(rpc).await)
            }
            Ok(RpcRequest::Vote(rpc)) => RpcResponse::Vote(self.raft.vote(rpc).await),
            Ok(RpcRequest::InstallSnapshot(rpc)) => {
                RpcResponse::InstallSnapshot(self.raft.install_snapshot(rpc).await)
            }
        };
        transport::encode_response(&response)
    }

    /// Adds a non-voting member (a broker-only node, Kafka's observer) at raft address `addr`; the leader then
    /// replicates the log, or a snapshot if the log was purged, to it. Returns once the change is committed,
    /// not when the learner has caught up.
    pub async fn add_learner(&self, id: u64, addr: String) -> Result<(), WriteError> {
        self.raft
            .add_learner(id, BasicNode::new(addr), false)
            .await
            .map(|_| ())
            .map_err(write_error)
    }

    /// For DescribeQuorum: leader id, term (= Kafka's leader epoch), high watermark (commit index), and per
    /// voter/observer the last matched index and last contact.
    pub fn status(&self) -> QuorumStatus {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let replication = m.replication.as_ref();
        let leading = m.state == ServerState::Leader;
        let replica = |node_id: u64| {
            let own = node_id == self.node_id;
            ReplicaStatus {
                node_id,
                matched_index: if own {
                    m.last_log_index
                } else {
                    replication
                        .and_then(|r| r.get(&node_id).copied().flatten())
                        .map(|l| l.index)
                },
                last_contact_ms: if own && leading {
                    Some(now_ms())
                } else if leading {
                    self.contacts.get(node_id)
                } else {
                    None
                },
            }
        };
        QuorumStatus {
            leader_id: m.current_leader,
            term: m.current_term,
            high_watermark: self.log.state().committed.map(|c| c.index),
            voters: membership.voter_ids().map(replica).collect(),
            observers: membership.learner_ids().map(replica).collect(),
        }
    }

    /// Stops raft and closes the metadata log cleanly. Idempotent.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "metadata quorum shutdown");
        }
        if let Some(task) = self.leader_task.lock().take() {
            task.abort();
        }
        let log = self.log.clone();
        let _ = self.disk_io.run(move || log.close()).await;
    }
}

fn write_error(e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> WriteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteError::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            WriteError::Other(c.to_string())
        }
        RaftError::Fatal(f) => WriteError::Stopped(f.to_string()),
    }
}
