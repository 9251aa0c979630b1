//! The controller: the only writer of metadata. It decides records against the latest committed image and
//! writes them through a [`MetadataWriter`] (the Raft quorum in a cluster, [`InMemoryWriter`] in tests and in
//! a single node), one operation at a time, so every decision sees every earlier one.
//!
//! Architecture invariant: nothing here reads a clock, draws unseeded randomness or knows about Raft. Time is
//! passed in (`now`), the placement RNG is seeded from [`ControllerConfig::seed`], and the quorum is behind
//! [`MetadataWriter`], so a simulator can drive the controller deterministically.
//!
//! Operations answer with Kafka's request/response types ([`Controller::handle`] takes and returns their
//! bytes), so a broker forwards admin requests unchanged.

pub mod acls;
mod alter_partition;
mod brokers;
mod configs;
mod elect_leaders;
mod election;
pub mod errors;
mod import;
mod partition_change;
mod placement;
pub mod quotas;
mod reassignments;
mod rebalance;
#[cfg(test)]
mod restart_tests;
pub mod scram;
mod topics;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AlterConfigsRequest, AlterPartitionReassignmentsRequest,
    AlterPartitionRequest, BrokerHeartbeatRequest, BrokerRegistrationRequest,
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, ElectLeadersRequest,
    IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::image::{ImageError, MetadataImage};
use crate::records::MetadataRecord;

pub use import::{ImportOutcome, ImportedTopic, SingleNodeImport};
pub use placement::{place_replicas, PlacementError};
pub use topics::{initial_isr, invalid_topic_name, PARTITIONS_PER_TOPIC_MAX};
pub use writer::InMemoryWriter;

/// A boxed future, so [`MetadataWriter`] is object safe without `async_trait`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// At most this many records go in one metadata batch when an operation need not be atomic (Kafka's
/// `maxRecordsPerBatch`). Fencing, unfencing or shutting down a broker writes one PartitionChange per partition
/// it leads or follows in sync: for 100,000 partitions that is ~17 MB of entry, far over one quorum entry
/// (`max_rpc_bytes / 2`), so as one batch it was refused every time and the broker never came back (issue 19).
/// 2,000 PartitionChanges with seven-replica lists are ~1 MB of entry (`batched_records_fit_one_entry`).
pub const MAX_RECORDS_PER_BATCH: usize = 2_000;

/// Where the controller's records go: the quorum, or an in-memory log.
pub trait MetadataWriter: Send + Sync {
    /// Appends the records as one atomic batch; resolves once committed and applied to the image, with the
    /// batch's offset.
    fn write(&self, records: Vec<MetadataRecord>) -> BoxFuture<'_, Result<u64, WriteError>>;
    /// The latest committed image.
    fn image(&self) -> Arc<MetadataImage>;

    /// Called by every operation before it decides: waits until [`Self::image`] holds every entry the log
    /// already has, so the decision sees everything that will be committed before its own records. A writer
    /// whose image is always current (the in-memory one) has nothing to wait for. A quorum writer whose wait
    /// fails (no majority, not the leader) refuses the operation's write instead ([`WriteError::Unavailable`],
    /// [`WriteError::NotController`]).
    fn catch_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Appends records of an operation that need not be atomic as consecutive batches of at most
    /// [`MAX_RECORDS_PER_BATCH`], in order, and resolves with the last batch's offset (Kafka's non-atomic
    /// `ControllerResult`). A failure part-way leaves a committed prefix, so callers order their records so
    /// that every prefix is a state the controller repairs by deciding again: the record that completes the
    /// transition (a FenceBrokerRecord, a RegisterBrokerRecord) comes last, or the next heartbeat or tick
    /// recomputes what is missing.
    fn write_in_batches(
        &self,
        records: Vec<MetadataRecord>,
    ) -> BoxFuture<'_, Result<u64, WriteError>> {
        Box::pin(async move {
            if records.len() <= MAX_RECORDS_PER_BATCH {
                return self.write(records).await;
            }
            let mut records = records.into_iter();
            let mut last = None;
            loop {
                let batch: Vec<MetadataRecord> =
                    records.by_ref().take(MAX_RECORDS_PER_BATCH).collect();
                if batch.is_empty() {
                    break;
                }
                last = Some(self.write(batch).await?);
            }
            Ok(last.expect("more than MAX_RECORDS_PER_BATCH records make at least one batch"))
        })
    }
}

/// Why a batch was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// This node is not (or no longer) the active controller: send the request to the leader (NOT_CONTROLLER 41).
    #[error("this node is not the active controller (leader hint: {leader_hint:?}); retry against the leader")]
    NotController { leader_hint: Option<i32> },
    /// The records do not fit the image: a controller bug, reported rather than committed.
    #[error("the controller produced records that do not apply: {0}")]
    Rejected(#[from] ImageError),
    /// The quorum could not commit (no majority, shutting down); retriable.
    #[error("the metadata quorum could not commit: {0}; retry once a majority of voters is up")]
    Unavailable(String),
}

impl WriteError {
    /// The Kafka error code a response carries for this failure.
    pub fn code(&self) -> i16 {
        match self {
            WriteError::NotController { .. } | WriteError::Unavailable(_) => errors::NOT_CONTROLLER,
            WriteError::Rejected(_) => errors::UNKNOWN_SERVER_ERROR,
        }
    }
}

/// Validates one config (name, value) and returns its normalized value, or a message for the client.
pub type ConfigValidator = fn(name: &str, value: &str) -> Result<String, String>;

/// The controller's settings, Kafka's names in the comments.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// broker.session.timeout.ms: a broker that has not heartbeated for this long is fenced.
    pub session_timeout: Duration,
    /// broker.heartbeat.interval.ms (reported to brokers; the controller only needs the timeout).
    pub heartbeat_interval: Duration,
    /// default.replication.factor, used when CreateTopics says -1.
    pub default_replication_factor: i16,
    /// num.partitions, used when CreateTopics says -1.
    pub num_partitions: i32,
    /// Producer ids handed out per AllocateProducerIds (Kafka: 1000).
    pub producer_id_block_size: i64,
    /// Validates topic configs (the broker passes its own table; the default knows Kafka's common names).
    pub topic_config_validator: ConfigValidator,
    /// Validates broker configs.
    pub broker_config_validator: ConfigValidator,
    /// Seeds replica placement's random start, so placement is reproducible.
    pub seed: u64,
    /// The node this controller runs in. When that node is also a broker, a registration of its id that this
    /// controller has not heard from since it became active can only be the previous, dead process of this very
    /// node (one node id cannot run twice: it is one voter address), so a restart re-registers at once instead
    /// of waiting out the old lease.
    pub local_node_id: Option<i32>,
    /// min.insync.replicas, for topics (and the cluster default) that do not set it: below it the ISR's
    /// departing members become eligible leader replicas (KIP-966).
    pub min_insync_replicas: i32,
    /// unclean.leader.election.enable, for topics (and the cluster default) that do not set it.
    pub unclean_leader_election_enable: bool,
    /// auto.leader.rebalance.enable: the tick moves leaderships back to preferred replicas.
    pub auto_leader_rebalance_enable: bool,
    /// leader.imbalance.check.interval.seconds.
    pub leader_imbalance_check_interval: Duration,
    /// leader.imbalance.per.broker.percentage: a broker's share of partitions it prefers but does not lead above
    /// which the rebalance moves them back.
    pub leader_imbalance_per_broker_percentage: u32,
    /// The clock a registration or heartbeat reads once its records are committed, to start the broker's lease
    /// from the answer rather than from the request's arrival: moving 100,000 leaderships is many batches and
    /// can take longer than the session timeout, and the broker, waiting for that answer, sends its next
    /// heartbeat only an interval after it. `None` (the tests' default) starts leases at the request's `now`.
    /// The node passes its monotonic clock (the simulator's, under simulation), so decisions stay
    /// deterministic.
    pub clock: Option<fn() -> Instant>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            session_timeout: Duration::from_millis(9000),
            heartbeat_interval: Duration::from_millis(2000),
            default_replication_factor: 1,
            num_partitions: 1,
            producer_id_block_size: 1000,
            topic_config_validator: configs::default_topic_config_validator,
            broker_config_validator: configs::default_broker_config_validator,
            seed: 0,
            local_node_id: None,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval: Duration::from_secs(300),
            leader_imbalance_per_broker_percentage: 10,
            clock: None,
        }
    }
}

/// A broker's lease, soft state of the active controller only (as Kafka's `BrokerHeartbeatManager`): a newly
/// active controller grants fresh leases ([`Controller::on_become_active`]).
#[derive(Debug, Clone, Copy)]
struct Lease {
    deadline: Instant,
    /// False for a lease granted on becoming active: the broker has not yet registered or heartbeated here.
    confirmed: bool,
    /// The offset of the broker's registration batch: it is caught up once its metadata offset reaches it.
    registration_offset: u64,
}

struct State {
    leases: HashMap<i32, Lease>,
    rng: StdRng,
    /// When the tick next checks leader imbalance (set on the first tick of an active term).
    next_imbalance_check: Option<Instant>,
}

/// Why [`Controller::handle`] could not answer at all (the broker answers the client with an error of its own).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    #[error("api key {0} is not a controller API")]
    UnsupportedApi(i16),
    #[error("api key {api_key} version {version} is not supported (versions {min}-{max} are)")]
    UnsupportedVersion {
        api_key: i16,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("request body for api key {api_key} does not decode: {message}")]
    Decode { api_key: i16, message: String },
}

/// The controller. Cheap to share (`Arc<Controller>`); operations run one at a time.
pub struct Controller {
    config: ControllerConfig,
    writer: Arc<dyn MetadataWriter>,
    state: tokio::sync::Mutex<State>,
}

impl Controller {
    pub fn new(config: ControllerConfig, writer: Arc<dyn MetadataWriter>) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        Controller {
            config,
            writer,
            state: tokio::sync::Mutex::new(State {
                leases: HashMap::new(),
                rng,
                next_imbalance_check: None,
            }),
        }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The latest committed image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.writer.image()
    }

    /// Takes the operation lock (operations run one at a time, so each decides against every earlier one's
    /// records), then waits until the image holds everything the metadata log holds ([`MetadataWriter::catch_up`]).
    async fn lock_state(&self) -> tokio::sync::MutexGuard<'_, State> {
        let state = self.state.lock().await;
        self.writer.catch_up().await;
        state
    }

    /// Topic election policies against `image`.
    fn policies<'a>(&self, image: &'a MetadataImage) -> election::Policies<'a> {
        election::Policies::new(image, &self.config)
    }

    /// Decodes a controller request (api key, version, body), runs it and encodes the response body.
    pub async fn handle(
        &self,
        api_key: i16,
        version: i16,
        body: Bytes,
        now: Instant,
    ) -> Result<Bytes, HandleError> {
        macro_rules! run {
            ($req:ty, $op:expr) => {{
                let req: $req = decode::<$req>(api_key, version, body)?;
                let resp = $op(req).await;
                encode(&resp, version)
            }};
        }
        match api_key {
            62 => run!(BrokerRegistrationRequest, |r| self.register_broker(r, now)),
            63 => run!(BrokerHeartbeatRequest, |r| self.broker_heartbeat(r, now)),
            19 => run!(CreateTopicsRequest, |r| self.create_topics(r)),
            20 => run!(DeleteTopicsRequest, |r| self.delete_topics(r)),
            37 => run!(CreatePartitionsRequest, |r| self.create_partitions(r)),
            44 => run!(IncrementalAlterConfigsRequest, |r| self
                .incremental_alter_configs(r)),
            33 => run!(AlterConfigsRequest, |r| self.alter_configs(r)),
            67 => run!(AllocateProducerIdsRequest, |r| self
                .allocate_producer_ids(r)),
            56 => run!(AlterPartitionRequest, |r| self.alter_partition(r)),
            43 => run!(ElectLeadersRequest, |r| self.elect_leaders(r)),
            45 => run!(AlterPartitionReassignmentsRequest, |r| self
                .alter_partition_reassignments(r)),
            46 => run!(ListPartitionReassignmentsRequest, |r| self
                .list_partition_reassignments(r)),
            51 => run!(
                kafka_protocol::messages::AlterUserScramCredentialsRequest,
                |r| self.alter_user_scram_credentials(r)
            ),
            30 => run!(kafka_protocol::messages::CreateAclsRequest, |r| self
                .create_acls(r)),
            31 => run!(kafka_protocol::messages::DeleteAclsRequest, |r| self
                .delete_acls(r)),
            49 => run!(kafka_protocol::messages::AlterClientQuotasRequest, |r| self
                .alter_client_quotas(r)),
            other => Err(HandleError::UnsupportedApi(other)),
        }
    }
}

/// The APIs [`Controller::handle`] answers, as (api key, min version, max version), for ApiVersions on the
/// controller listener and for the broker's forwarding table.
pub fn supported_apis() -> Vec<(i16, i16, i16)> {
    fn range<T: Message>(api_key: i16) -> (i16, i16, i16) {
        (api_key, T::VERSIONS.min, T::VERSIONS.max)
    }
    vec![
        range::<CreateTopicsRequest>(19),
        range::<DeleteTopicsRequest>(20),
        range::<kafka_protocol::messages::CreateAclsRequest>(30),
        range::<kafka_protocol::messages::DeleteAclsRequest>(31),
        range::<AlterConfigsRequest>(33),
        range::<CreatePartitionsRequest>(37),
        range::<ElectLeadersRequest>(43),
        range::<AlterPartitionReassignmentsRequest>(45),
        range::<ListPartitionReassignmentsRequest>(46),
        range::<IncrementalAlterConfigsRequest>(44),
        range::<kafka_protocol::messages::AlterClientQuotasRequest>(49),
        range::<kafka_protocol::messages::AlterUserScramCredentialsRequest>(51),
        range::<AlterPartitionRequest>(56),
        range::<BrokerRegistrationRequest>(62),
        range::<BrokerHeartbeatRequest>(63),
        range::<AllocateProducerIdsRequest>(67),
    ]
}

fn decode<T: Decodable + Message>(
    api_key: i16,
    version: i16,
    body: Bytes,
) -> Result<T, HandleError> {
    if version < T::VERSIONS.min || version > T::VERSIONS.max {
        return Err(HandleError::UnsupportedVersion {
            api_key,
            version,
            min: T::VERSIONS.min,
            max: T::VERSIONS.max,
        });
    }
    let mut body = body;
    T::decode(&mut body, version).map_err(|e| HandleError::Decode {
        api_key,
        message: e.to_string(),
    })
}

fn encode<T: Encodable>(resp: &T, version: i16) -> Result<Bytes, HandleError> {
    let mut out = BytesMut::new();
    // A response built by the controller for a version the request decoded at always encodes; a failure here
    // would be a field the version cannot carry, i.e. a bug.
    resp.encode(&mut out, version).unwrap_or_else(|e| {
        panic!("controller response does not encode at version {version}: {e}")
    });
    Ok(out.freeze())
}
