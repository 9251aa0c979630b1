//! What each API asks of the authorizer, in one place: Kafka's `KafkaApis`/`ControllerApis`/`AclApis` checks
//! (operations, resources and the error codes of a denial), as wrappers around the handlers. `dispatch` routes
//! every API that Kafka authorizes through here; without `authorizer.class.name` each wrapper calls its handler
//! unchanged.
//!
//! Two shapes:
//! - requests with effects (Produce, CreateTopics, OffsetCommit, ...) are filtered first: the items the caller
//!   may not touch are taken out of the request, the handler runs on the rest, and the denied items are answered
//!   with Kafka's code beside the handler's answers;
//! - read-only requests (ListOffsets, DescribeConfigs, OffsetFetch, ...) run whole and the denied items of the
//!   answer are replaced by the denial, which is what Kafka answers since it checks before it looks.
//!
//! Kafka never lets an answer tell a caller that a topic it may not describe exists: where Kafka checks DESCRIBE
//! before existence the code is TOPIC_AUTHORIZATION_FAILED for existing and missing topics alike.
//!
//! | API | Kafka's check | denial |
//! |---|---|---|
//! | Produce | WRITE transactional id (if any), WRITE topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all; TOPIC_AUTHORIZATION_FAILED per topic |
//! | Fetch | follower: CLUSTER_ACTION cluster; consumer: READ topic | TOPIC_AUTHORIZATION_FAILED per partition |
//! | Metadata | DESCRIBE topic (all topics: filtered); auto-create: CREATE cluster or topic | TOPIC_AUTHORIZATION_FAILED per named topic |
//! | ListOffsets, OffsetForLeaderEpoch (consumer) | DESCRIBE topic | TOPIC_AUTHORIZATION_FAILED per partition |
//! | OffsetForLeaderEpoch (follower), WriteTxnMarkers, quorum RPCs | CLUSTER_ACTION cluster | CLUSTER_AUTHORIZATION_FAILED |
//! | CreateTopics | CREATE cluster or CREATE topic; configs shown with DESCRIBE_CONFIGS topic | TOPIC_AUTHORIZATION_FAILED |
//! | DeleteTopics | DELETE topic (UNKNOWN_TOPIC_OR_PARTITION only if describable) | TOPIC_AUTHORIZATION_FAILED |
//! | CreatePartitions | ALTER topic | TOPIC_AUTHORIZATION_FAILED |
//! | DeleteRecords | DELETE topic | TOPIC_AUTHORIZATION_FAILED |
//! | DescribeConfigs | DESCRIBE_CONFIGS topic / cluster (broker, broker logger) / group | TOPIC/CLUSTER/GROUP_AUTHORIZATION_FAILED |
//! | AlterConfigs, IncrementalAlterConfigs | ALTER_CONFIGS, same resources | same codes |
//! | FindCoordinator | DESCRIBE group / transactional id | GROUP / TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
//! | JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat | READ group | GROUP_AUTHORIZATION_FAILED |
//! | OffsetCommit | READ group, READ topic | GROUP_AUTHORIZATION_FAILED all; TOPIC_AUTHORIZATION_FAILED per topic |
//! | OffsetFetch | DESCRIBE group, DESCRIBE topic (all topics: filtered) | GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED |
//! | OffsetDelete | DELETE group, READ topic | GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED |
//! | DescribeGroups, ConsumerGroupDescribe | DESCRIBE group | GROUP_AUTHORIZATION_FAILED per group |
//! | ListGroups | DESCRIBE cluster, else filtered by DESCRIBE group | (filtered) |
//! | DeleteGroups | DELETE group | GROUP_AUTHORIZATION_FAILED per group |
//! | InitProducerId | WRITE transactional id; without one IDEMPOTENT_WRITE cluster or WRITE on any topic | TRANSACTIONAL_ID / CLUSTER_AUTHORIZATION_FAILED |
//! | AddPartitionsToTxn (v0-3) | WRITE transactional id, WRITE topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED, others OPERATION_NOT_ATTEMPTED |
//! | AddPartitionsToTxn (v4+, brokers) | CLUSTER_ACTION cluster | CLUSTER_AUTHORIZATION_FAILED |
//! | AddOffsetsToTxn | WRITE transactional id, READ group | TRANSACTIONAL_ID / GROUP_AUTHORIZATION_FAILED |
//! | EndTxn | WRITE transactional id | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
//! | TxnOffsetCommit | WRITE transactional id, READ group, READ topic | per partition |
//! | DescribeProducers | READ topic | TOPIC_AUTHORIZATION_FAILED per partition |
//! | DescribeTransactions / ListTransactions | DESCRIBE transactional id | TRANSACTIONAL_ID_AUTHORIZATION_FAILED / filtered |
//! | DescribeCluster | (none; authorized operations if asked) | |
//! | DescribeLogDirs, DescribeQuorum, ListPartitionReassignments, DescribeAcls, DescribeUserScramCredentials | DESCRIBE cluster | CLUSTER_AUTHORIZATION_FAILED |
//! | ElectLeaders, AlterPartitionReassignments, CreateAcls, DeleteAcls, AlterUserScramCredentials | ALTER cluster | CLUSTER_AUTHORIZATION_FAILED |
//! | DescribeClientQuotas | DESCRIBE_CONFIGS cluster | CLUSTER_AUTHORIZATION_FAILED |
//! | AlterClientQuotas | ALTER_CONFIGS cluster | CLUSTER_AUTHORIZATION_FAILED per entity |

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use annal_metadata::acl::{op, resource, CLUSTER_NAME};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{code, s};
use crate::security::authorizer::{java_host_address, AclIndex, Authorizer, Caller};
use crate::server::Close;
use crate::Broker;

/// Kafka's ConfigResource types.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_CLIENT_METRICS: i8 = 16;
const CONFIG_GROUP: i8 = 32;

/// The authorizer's view of one request: who asks, from where, against which ACLs.
pub struct Authz<'a> {
    authorizer: &'a Authorizer,
    index: Arc<AclIndex>,
    caller: Caller,
}

/// The caller of the request being handled (the connection's principal and peer address).
pub fn caller() -> Caller {
    let principal = crate::server::PRINCIPAL
        .try_with(|p| p.to_string())
        .unwrap_or_else(|_| "User:ANONYMOUS".to_string());
    let host = super::groups::PEER
        .try_with(|p| java_host_address(p.ip()))
        .unwrap_or_else(|_| "127.0.0.1".to_string());
    Caller { principal, host }
}

impl<'a> Authz<'a> {
    /// `None` when no authorizer is configured: everything is allowed.
    pub fn of(broker: &'a Broker) -> Option<Authz<'a>> {
        let authorizer = broker.authorizer()?;
        let index = authorizer.index(&broker.cluster().image());
        Some(Authz {
            authorizer,
            index,
            caller: caller(),
        })
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    pub fn allows(&self, operation: i8, resource_type: i8, name: &str) -> bool {
        let ok =
            self.authorizer
                .authorize(&self.index, &self.caller, operation, resource_type, name);
        if !ok {
            tracing::debug!(target: "annal::authorizer", principal = %self.caller.principal, host = %self.caller.host,
                operation = op_name(operation), resource_type = resource_type_name(resource_type), resource = name, "denied");
        }
        ok
    }
    pub fn cluster(&self, operation: i8) -> bool {
        self.allows(operation, resource::CLUSTER, CLUSTER_NAME)
    }
    pub fn topic(&self, operation: i8, name: &str) -> bool {
        self.allows(operation, resource::TOPIC, name)
    }
    pub fn group(&self, operation: i8, name: &str) -> bool {
        self.allows(operation, resource::GROUP, name)
    }
    pub fn txn(&self, operation: i8, id: &str) -> bool {
        self.allows(operation, resource::TRANSACTIONAL_ID, id)
    }

    /// Kafka's authorized-operations bitfield for a resource (bit = AclOperation code).
    pub fn operations(&self, resource_type: i8, name: &str, ops: &[i8]) -> i32 {
        ops.iter()
            .filter(|o| {
                self.authorizer
                    .authorize(&self.index, &self.caller, **o, resource_type, name)
            })
            .fold(0, |bits, o| bits | (1 << *o))
    }
}

/// The operations Kafka reports for topics, clusters and groups (`AclEntry.supportedOperations`).
pub const TOPIC_OPS: &[i8] = &[
    op::READ,
    op::WRITE,
    op::CREATE,
    op::DELETE,
    op::ALTER,
    op::DESCRIBE,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
];
pub const CLUSTER_OPS: &[i8] = &[
    op::CREATE,
    op::ALTER,
    op::DESCRIBE,
    op::CLUSTER_ACTION,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
    op::IDEMPOTENT_WRITE,
];
pub const GROUP_OPS: &[i8] = &[op::READ, op::DESCRIBE, op::DELETE];

fn op_name(o: i8) -> &'static str {
    match o {
        op::ALL => "ALL",
        op::READ => "READ",
        op::WRITE => "WRITE",
        op::CREATE => "CREATE",
        op::DELETE => "DELETE",
        op::ALTER => "ALTER",
        op::DESCRIBE => "DESCRIBE",
        op::CLUSTER_ACTION => "CLUSTER_ACTION",
        op::DESCRIBE_CONFIGS => "DESCRIBE_CONFIGS",
        op::ALTER_CONFIGS => "ALTER_CONFIGS",
        op::IDEMPOTENT_WRITE => "IDEMPOTENT_WRITE",
        op::CREATE_TOKENS => "CREATE_TOKENS",
        op::DESCRIBE_TOKENS => "DESCRIBE_TOKENS",
        _ => "UNKNOWN",
    }
}

fn resource_type_name(t: i8) -> &'static str {
    match t {
        resource::TOPIC => "TOPIC",
        resource::GROUP => "GROUP",
        resource::CLUSTER => "CLUSTER",
        resource::TRANSACTIONAL_ID => "TRANSACTIONAL_ID",
        resource::DELEGATION_TOKEN => "DELEGATION_TOKEN",
        resource::USER => "USER",
        _ => "UNKNOWN",
    }
}

/// For broker-to-broker traffic that is not a Kafka API (the metadata quorum's RPCs on a broker listener): the
/// reason to close the connection when the caller lacks CLUSTER_ACTION, `None` when it may go on.
pub fn inter_broker_denied(broker: &Broker, what: &str) -> Option<String> {
    let a = Authz::of(broker)?;
    if a.cluster(op::CLUSTER_ACTION) {
        return None;
    }
    let c = a.caller();
    tracing::warn!(principal = %c.principal, host = %c.host,
        "{what} was refused: the principal lacks CLUSTER_ACTION on the cluster; brokers and controllers must \
         authenticate as a principal in super.users (on a PLAINTEXT inter-broker listener that is User:ANONYMOUS)");
    Some(format!(
        "{} may not perform CLUSTER_ACTION ({what}); add the inter-broker principal to super.users",
        c.principal
    ))
}

fn msg(v: &str) -> Option<StrBytes> {
    Some(s(v))
}

// ---- Produce and Fetch ----

pub async fn produce(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: ProduceRequest,
) -> Result<Option<ProduceResponse>, Close> {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let Some(a) = Authz::of(broker) else {
        return super::produce::handle(broker, header, req).await;
    };
    let denied_partition = |index: i32, error: i16| {
        PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(error)
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
    };
    let txn_denied = req
        .transactional_id
        .as_ref()
        .is_some_and(|t| !a.txn(op::WRITE, t));
    let mut denied: Vec<TopicProduceResponse> = Vec::new();
    let mut allowed = Vec::with_capacity(req.topic_data.len());
    for t in std::mem::take(&mut req.topic_data) {
        if txn_denied || !a.topic(op::WRITE, &t.name) {
            let error = if txn_denied {
                code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            } else {
                code::TOPIC_AUTHORIZATION_FAILED
            };
            denied.push(
                TopicProduceResponse::default()
                    .with_name(t.name.clone())
                    .with_partition_responses(
                        t.partition_data
                            .iter()
                            .map(|p| denied_partition(p.index, error))
                            .collect(),
                    ),
            );
        } else {
            allowed.push(t);
        }
    }
    if denied.is_empty() {
        req.topic_data = allowed;
        return super::produce::handle(broker, header, req).await;
    }
    if req.acks == 0 {
        // Kafka closes an acks=0 connection whose request failed: the client has no answer to read.
        return Err(Close(format!(
            "{} is not authorized to produce to every topic of an acks=0 request",
            a.caller().principal
        )));
    }
    let mut resp = if allowed.is_empty() {
        ProduceResponse::default()
    } else {
        req.topic_data = allowed;
        super::produce::handle(broker, header, req)
            .await?
            .unwrap_or_default()
    };
    resp.responses.extend(denied);
    Ok(Some(resp))
}

/// The topic a Fetch/Metadata entry names: its name, or (v13+ fetch, Metadata by id) its id's name. `None` for
/// an id this broker does not know (the handler answers UNKNOWN_TOPIC_ID).
fn name_of(broker: &Broker, name: &str, id: uuid::Uuid) -> Option<String> {
    if !name.is_empty() {
        return Some(name.to_string());
    }
    broker
        .replica_manager()
        .topic_by_id(id)
        .map(|t| t.name.clone())
}

pub async fn fetch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: FetchRequest,
) -> (FetchResponse, super::fetch::Slices) {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    let Some(a) = Authz::of(broker) else {
        return super::fetch::handle(broker, header, req).await;
    };
    let version = header.request_api_version;
    let replica_id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let follower_denied = replica_id >= 0 && !a.cluster(op::CLUSTER_ACTION);
    let mut denied: Vec<FetchableTopicResponse> = Vec::new();
    let mut allowed = Vec::with_capacity(req.topics.len());
    for t in std::mem::take(&mut req.topics) {
        let ok = !follower_denied
            && match name_of(broker, &t.topic, t.topic_id) {
                Some(name) => replica_id >= 0 || a.topic(op::READ, &name),
                None => true, // unknown id: the handler answers UNKNOWN_TOPIC_ID
            };
        if ok {
            allowed.push(t);
            continue;
        }
        denied.push(
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                                .with_high_watermark(-1)
                                .with_last_stable_offset(-1)
                                .with_log_start_offset(-1)
                                .with_records(Some(bytes::Bytes::new()))
                        })
                        .collect(),
                ),
        );
    }
    req.topics = allowed;
    let (mut resp, slices) = super::fetch::handle(broker, header, req).await;
    if follower_denied {
        tracing::warn!(principal = %a.caller().principal, replica_id,
            "a follower's fetch was refused: the principal lacks CLUSTER_ACTION; put the inter-broker principal in super.users");
    }
    resp.responses.extend(denied);
    (resp, slices)
}

// ---- Metadata and cluster descriptions ----

pub async fn metadata(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: MetadataRequest,
) -> MetadataResponse {
    use metadata_response::MetadataResponseTopic;
    let Some(a) = Authz::of(broker) else {
        return super::metadata::handle(broker, header, req).await;
    };
    let version = header.request_api_version;
    let all_topics = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    let auto_create =
        broker.config().auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    let denied_topic = |name: Option<TopicName>| {
        MetadataResponseTopic::default()
            .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
            .with_name(name)
            .with_topic_authorized_operations(i32::MIN)
    };
    let mut denied: Vec<MetadataResponseTopic> = Vec::new();
    if !all_topics {
        let may_create_any = auto_create && a.cluster(op::CREATE);
        let requested = req.topics.take().unwrap_or_default();
        let mut allowed = Vec::with_capacity(requested.len());
        for t in requested {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                allowed.push(t); // by id: checked on the answer
                continue;
            };
            let may_create = || {
                !auto_create
                    || may_create_any
                    || broker.replica_manager().topic(&name).is_some()
                    || a.topic(op::CREATE, &name)
            };
            if !a.topic(op::DESCRIBE, &name) || !may_create() {
                denied.push(denied_topic(t.name.clone()));
            } else {
                allowed.push(t);
            }
        }
        if allowed.is_empty() && version == 0 {
            // An empty v0 list means every topic; answer only the denials.
            let mut resp = super::metadata::handle(broker, header, req.clone()).await;
            resp.topics = denied;
            return resp;
        }
        req.topics = Some(allowed);
    }
    let with_topic_ops = version >= 8 && req.include_topic_authorized_operations;
    let with_cluster_ops = (8..=10).contains(&version) && req.include_cluster_authorized_operations;
    let mut resp = super::metadata::handle(broker, header, req).await;
    let mut topics = Vec::with_capacity(resp.topics.len());
    for mut t in std::mem::take(&mut resp.topics) {
        let name = t.name.as_ref().map(|n| n.0.to_string());
        match name {
            Some(n) if t.error_code == code::NONE && !a.topic(op::DESCRIBE, &n) => {
                if !all_topics {
                    // Asked for by id: the id is known, the topic not describable.
                    denied.push(denied_topic(None).with_topic_id(t.topic_id));
                }
            }
            Some(n) => {
                if with_topic_ops && t.error_code == code::NONE {
                    t.topic_authorized_operations = a.operations(resource::TOPIC, &n, TOPIC_OPS);
                }
                topics.push(t);
            }
            None => topics.push(t),
        }
    }
    topics.extend(denied);
    resp.topics = topics;
    if with_cluster_ops {
        resp.cluster_authorized_operations =
            a.operations(resource::CLUSTER, CLUSTER_NAME, CLUSTER_OPS);
    }
    resp
}

pub async fn describe_cluster(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let asked = req.include_cluster_authorized_operations;
    let mut resp = super::metadata::describe_cluster(broker, header, req).await;
    if let (Some(a), true) = (Authz::of(broker), asked) {
        resp.cluster_authorized_operations =
            a.operations(resource::CLUSTER, CLUSTER_NAME, CLUSTER_OPS);
    }
    resp
}

/// Answers `$resp` (a default response with `$code` in its top-level error field) when the caller lacks
/// `$op` on the cluster, else runs the handler.
macro_rules! cluster_gate {
    ($name:ident, $req:ty, $resp:ty, $op:expr, $handler:path, |$r:ident, $rq:ident| $deny:expr) => {
        pub async fn $name(broker: &Arc<Broker>, header: &RequestHeader, req: $req) -> $resp {
            if let Some(a) = Authz::of(broker) {
                if !a.cluster($op) {
                    let $rq = &req;
                    let mut $r = <$resp>::default();
                    $deny;
                    return $r;
                }
            }
            $handler(broker, header, req).await
        }
    };
}

cluster_gate!(
    describe_log_dirs,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    op::DESCRIBE,
    super::admin::describe_log_dirs,
    |r, _q| r.error_code = code::CLUSTER_AUTHORIZATION_FAILED
);
cluster_gate!(
    describe_quorum,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    op::DESCRIBE,
    super::metadata::describe_quorum,
    |r, _q| {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = msg("Cluster authorization failed.");
    }
);
cluster_gate!(
    list_partition_reassignments,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    op::DESCRIBE,
    super::admin::list_partition_reassignments,
    |r, _q| {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = msg("Cluster authorization failed.");
    }
);
cluster_gate!(
    alter_partition_reassignments,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    op::ALTER,
    super::admin::alter_partition_reassignments,
    |r, _q| {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = msg("Cluster authorization failed.");
    }
);
cluster_gate!(
    elect_leaders,
    ElectLeadersRequest,
    ElectLeadersResponse,
    op::ALTER,
    super::admin::elect_leaders,
    |r, q| {
        use elect_leaders_response::{PartitionResult, ReplicaElectionResult};
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.replica_election_results = q
            .topic_partitions
            .iter()
            .flatten()
            .map(|t| {
                ReplicaElectionResult::default()
                    .with_topic(t.topic.clone())
                    .with_partition_result(
                        t.partitions
                            .iter()
                            .map(|p| {
                                PartitionResult::default()
                                    .with_partition_id(*p)
                                    .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                                    .with_error_message(msg("Cluster authorization failed."))
                            })
                            .collect(),
                    )
            })
            .collect();
    }
);
cluster_gate!(
    describe_user_scram_credentials,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    op::DESCRIBE,
    super::sasl::describe_user_scram_credentials,
    |r, _q| {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = msg("Cluster authorization failed.");
    }
);
cluster_gate!(
    alter_user_scram_credentials,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    op::ALTER,
    super::sasl::alter_user_scram_credentials,
    |r, q| {
        use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
        let users: BTreeSet<String> = q
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(q.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        r.results = users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(s(u))
                    .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(msg("Cluster authorization failed."))
            })
            .collect();
    }
);
cluster_gate!(
    describe_client_quotas,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    op::DESCRIBE_CONFIGS,
    super::quotas::describe_client_quotas,
    |r, _q| {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = msg("Cluster authorization failed.");
    }
);
cluster_gate!(
    alter_client_quotas,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    op::ALTER_CONFIGS,
    super::quotas::alter_client_quotas,
    |r, q| {
        use alter_client_quotas_response::{EntityData, EntryData};
        r.entries = q
            .entries
            .iter()
            .map(|e| {
                EntryData::default()
                    .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(msg("Cluster authorization failed."))
                    .with_entity(
                        e.entity
                            .iter()
                            .map(|p| {
                                EntityData::default()
                                    .with_entity_type(p.entity_type.clone())
                                    .with_entity_name(p.entity_name.clone())
                            })
                            .collect(),
                    )
            })
            .collect();
    }
);
cluster_gate!(
    write_txn_markers,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    op::CLUSTER_ACTION,
    super::txn_markers::handle,
    |r, q| {
        use write_txn_markers_response::*;
        r.markers = q
            .markers
            .iter()
            .map(|m| {
                WritableTxnMarkerResult::default()
                    .with_producer_id(m.producer_id)
                    .with_topics(
                        m.topics
                            .iter()
                            .map(|t| {
                                WritableTxnMarkerTopicResult::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partition_indexes
                                            .iter()
                                            .map(|p| {
                                                WritableTxnMarkerPartitionResult::default()
                                                    .with_partition_index(*p)
                                                    .with_error_code(
                                                        code::CLUSTER_AUTHORIZATION_FAILED,
                                                    )
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect();
    }
);

// ---- Topic admin ----

pub async fn create_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    use create_topics_response::CreatableTopicResult;
    let Some(a) = Authz::of(broker) else {
        return super::admin::create_topics(broker, header, req).await;
    };
    let cluster_create = a.cluster(op::CREATE);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for t in &req.topics {
        *count.entry(t.name.to_string()).or_default() += 1;
    }
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        // Duplicates stay: the handler answers INVALID_REQUEST for them whoever asks, as Kafka does.
        let ok = count.get(t.name.as_str()).is_some_and(|n| *n > 1)
            || cluster_create
            || a.topic(op::CREATE, &t.name);
        if !ok {
            denied.push(
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(msg("Authorization failed."))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
        }
        ok
    });
    let mut resp = if req.topics.is_empty() {
        CreateTopicsResponse::default()
    } else {
        super::admin::create_topics(broker, header, req).await
    };
    for t in resp.topics.iter_mut() {
        if t.error_code == code::NONE && !a.topic(op::DESCRIBE_CONFIGS, &t.name) {
            // Created, but the caller may not see its configs (Kafka's "describable" topics).
            t.configs = None;
            t.topic_config_error_code = code::TOPIC_AUTHORIZATION_FAILED;
        }
    }
    resp.topics.extend(denied);
    resp
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    use delete_topics_response::DeletableTopicResult;
    let Some(a) = Authz::of(broker) else {
        return super::admin::delete_topics(broker, header, req).await;
    };
    let rm = broker.replica_manager();
    // The answer for a topic the caller may not delete: UNKNOWN_TOPIC_OR_PARTITION only when it may describe it
    // and it does not exist (Kafka never reveals existence to a caller that cannot describe).
    let refusal = |name: &str| -> Option<i16> {
        if a.topic(op::DELETE, name) {
            None
        } else if a.topic(op::DESCRIBE, name) && rm.topic(name).is_none() {
            Some(code::UNKNOWN_TOPIC_OR_PARTITION)
        } else {
            Some(code::TOPIC_AUTHORIZATION_FAILED)
        }
    };
    let mut denied = Vec::new();
    req.topic_names.retain(|n| match refusal(n) {
        None => true,
        Some(error) => {
            denied.push(
                DeletableTopicResult::default()
                    .with_name(Some(n.clone()))
                    .with_error_code(error),
            );
            false
        }
    });
    req.topics.retain(|t| {
        let name = match &t.name {
            Some(n) => Some(n.to_string()),
            None => rm.topic_by_id(t.topic_id).map(|x| x.name.clone()),
        };
        let Some(name) = name else { return true }; // unknown id: the handler answers
        match refusal(&name) {
            None => true,
            Some(error) => {
                denied.push(
                    DeletableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_topic_id(t.topic_id)
                        .with_error_code(error),
                );
                false
            }
        }
    });
    let mut resp = if req.topic_names.is_empty() && req.topics.is_empty() {
        DeleteTopicsResponse::default()
    } else {
        super::admin::delete_topics(broker, header, req).await
    };
    resp.responses.extend(denied);
    resp
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    use create_partitions_response::CreatePartitionsTopicResult;
    let Some(a) = Authz::of(broker) else {
        return super::admin::create_partitions(broker, header, req).await;
    };
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        let ok = a.topic(op::ALTER, &t.name);
        if !ok {
            denied.push(
                CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(msg("Authorization failed.")),
            );
        }
        ok
    });
    let mut resp = if req.topics.is_empty() {
        CreatePartitionsResponse::default()
    } else {
        super::admin::create_partitions(broker, header, req).await
    };
    resp.results.extend(denied);
    resp
}

pub async fn delete_records(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
    let Some(a) = Authz::of(broker) else {
        return super::offsets::delete_records(broker, header, req).await;
    };
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        let ok = a.topic(op::DELETE, &t.name);
        if !ok {
            denied.push(
                DeleteRecordsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                DeleteRecordsPartitionResult::default()
                                    .with_partition_index(p.partition_index)
                                    .with_low_watermark(-1)
                                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                            })
                            .collect(),
                    ),
            );
        }
        ok
    });
    let mut resp = if req.topics.is_empty() {
        DeleteRecordsResponse::default()
    } else {
        super::offsets::delete_records(broker, header, req).await
    };
    resp.topics.extend(denied);
    resp
}

pub async fn list_offsets(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let a = Authz::of(broker);
    let mut resp = super::offsets::list_offsets(broker, header, req).await;
    if let Some(a) = a {
        for t in resp
            .topics
            .iter_mut()
            .filter(|t| !a.topic(op::DESCRIBE, &t.name))
        {
            for p in t.partitions.iter_mut() {
                *p = list_offsets_response::ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                    .with_timestamp(-1)
                    .with_offset(-1);
            }
        }
    }
    resp
}

pub async fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    use offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
    let Some(a) = Authz::of(broker) else {
        return super::offsets::offset_for_leader_epoch(broker, header, req).await;
    };
    let denied = |t: &TopicName, partitions: Vec<i32>, error: i16| {
        OffsetForLeaderTopicResult::default()
            .with_topic(t.clone())
            .with_partitions(
                partitions
                    .into_iter()
                    .map(|p| {
                        EpochEndOffset::default()
                            .with_partition(p)
                            .with_error_code(error)
                            .with_leader_epoch(-1)
                            .with_end_offset(-1)
                    })
                    .collect(),
            )
    };
    if req.replica_id.0 >= 0 && !a.cluster(op::CLUSTER_ACTION) {
        return OffsetForLeaderEpochResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    denied(
                        &t.topic,
                        t.partitions.iter().map(|p| p.partition).collect(),
                        code::CLUSTER_AUTHORIZATION_FAILED,
                    )
                })
                .collect(),
        );
    }
    let follower = req.replica_id.0 >= 0;
    let mut resp = super::offsets::offset_for_leader_epoch(broker, header, req).await;
    if !follower {
        for t in resp
            .topics
            .iter_mut()
            .filter(|t| !a.topic(op::DESCRIBE, &t.topic))
        {
            *t = denied(
                &t.topic,
                t.partitions.iter().map(|p| p.partition).collect(),
                code::TOPIC_AUTHORIZATION_FAILED,
            );
        }
    }
    resp
}

// ---- Configs ----

/// The operation's resource and denial code for a config resource, `None` for a type Kafka does not authorize
/// this way (the handler answers it).
fn config_resource(resource_type: i8, name: &str) -> Option<(i8, String, i16)> {
    match resource_type {
        CONFIG_TOPIC => Some((
            resource::TOPIC,
            name.to_string(),
            code::TOPIC_AUTHORIZATION_FAILED,
        )),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER | CONFIG_CLIENT_METRICS => Some((
            resource::CLUSTER,
            CLUSTER_NAME.to_string(),
            code::CLUSTER_AUTHORIZATION_FAILED,
        )),
        CONFIG_GROUP => Some((
            resource::GROUP,
            name.to_string(),
            code::GROUP_AUTHORIZATION_FAILED,
        )),
        _ => None,
    }
}

fn config_denial(a: &Authz, operation: i8, resource_type: i8, name: &str) -> Option<i16> {
    let (rt, rn, error) = config_resource(resource_type, name)?;
    (!a.allows(operation, rt, &rn)).then_some(error)
}

fn authorization_message(error: i16) -> &'static str {
    match error {
        code::TOPIC_AUTHORIZATION_FAILED => "Topic authorization failed.",
        code::GROUP_AUTHORIZATION_FAILED => "Group authorization failed.",
        code::CLUSTER_AUTHORIZATION_FAILED => "Cluster authorization failed.",
        _ => "Authorization failed.",
    }
}

pub async fn describe_configs(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let a = Authz::of(broker);
    let mut resp = super::configs::describe(broker, header, req).await;
    if let Some(a) = a {
        for r in resp.results.iter_mut() {
            if let Some(error) =
                config_denial(&a, op::DESCRIBE_CONFIGS, r.resource_type, &r.resource_name)
            {
                r.error_code = error;
                r.error_message = msg(authorization_message(error));
                r.configs.clear();
            }
        }
    }
    resp
}

macro_rules! alter_configs_gate {
    ($name:ident, $req:ty, $resp:ty, $handler:path, $result:ty) => {
        pub async fn $name(broker: &Arc<Broker>, header: &RequestHeader, mut req: $req) -> $resp {
            let Some(a) = Authz::of(broker) else {
                return $handler(broker, header, req).await;
            };
            let mut denied = Vec::new();
            req.resources.retain(|r| {
                match config_denial(&a, op::ALTER_CONFIGS, r.resource_type, &r.resource_name) {
                    None => true,
                    Some(error) => {
                        denied.push(
                            <$result>::default()
                                .with_resource_type(r.resource_type)
                                .with_resource_name(r.resource_name.clone())
                                .with_error_code(error)
                                .with_error_message(msg(authorization_message(error))),
                        );
                        false
                    }
                }
            });
            let mut resp = if req.resources.is_empty() {
                <$resp>::default()
            } else {
                $handler(broker, header, req).await
            };
            resp.responses.extend(denied);
            resp
        }
    };
}

alter_configs_gate!(
    alter_configs,
    AlterConfigsRequest,
    AlterConfigsResponse,
    super::configs::alter,
    alter_configs_response::AlterConfigsResourceResponse
);
alter_configs_gate!(
    incremental_alter_configs,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    super::configs::incremental_alter,
    incremental_alter_configs_response::AlterConfigsResourceResponse
);

// ---- Groups ----

pub async fn find_coordinator(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let a = Authz::of(broker);
    let key_type = req.key_type;
    let version = header.request_api_version;
    let single_key = req.key.to_string();
    let mut resp = super::groups::find_coordinator(broker, header, req).await;
    let Some(a) = a else { return resp };
    let denial = |key: &str| -> Option<i16> {
        match key_type {
            0 if !a.group(op::DESCRIBE, key) => Some(code::GROUP_AUTHORIZATION_FAILED),
            1 if !a.txn(op::DESCRIBE, key) => Some(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            _ => None,
        }
    };
    if version < 4 {
        if let Some(error) = denial(&single_key) {
            resp.error_code = error;
            resp.error_message = None;
            resp.node_id = BrokerId(-1);
            resp.host = s("");
            resp.port = -1;
        }
    } else {
        for c in resp.coordinators.iter_mut() {
            if let Some(error) = denial(&c.key) {
                c.error_code = error;
                c.error_message = None;
                c.node_id = BrokerId(-1);
                c.host = s("");
                c.port = -1;
            }
        }
    }
    resp
}

/// Group membership APIs: READ on the group or the error code alone.
macro_rules! group_read_gate {
    ($name:ident, $req:ty, $resp:ty, $handler:path, |$r:ident| $deny:expr) => {
        pub async fn $name(broker: &Arc<Broker>, header: &RequestHeader, req: $req) -> $resp {
            if let Some(a) = Authz::of(broker) {
                if !a.group(op::READ, &req.group_id) {
                    let mut $r = <$resp>::default();
                    $deny;
                    return $r;
                }
            }
            $handler(broker, header, req).await
        }
    };
}

group_read_gate!(
    join_group,
    JoinGroupRequest,
    JoinGroupResponse,
    super::groups::join_group,
    |r| {
        r.error_code = code::GROUP_AUTHORIZATION_FAILED;
        r.generation_id = -1;
    }
);
group_read_gate!(
    sync_group,
    SyncGroupRequest,
    SyncGroupResponse,
    super::groups::sync_group,
    |r| r.error_code = code::GROUP_AUTHORIZATION_FAILED
);
group_read_gate!(
    heartbeat,
    HeartbeatRequest,
    HeartbeatResponse,
    super::groups::heartbeat,
    |r| r.error_code = code::GROUP_AUTHORIZATION_FAILED
);
group_read_gate!(
    leave_group,
    LeaveGroupRequest,
    LeaveGroupResponse,
    super::groups::leave_group,
    |r| r.error_code = code::GROUP_AUTHORIZATION_FAILED
);
group_read_gate!(
    consumer_group_heartbeat,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    super::groups::consumer_group_heartbeat,
    |r| {
        r.error_code = code::GROUP_AUTHORIZATION_FAILED;
        r.error_message = msg("Group authorization failed.");
    }
);

pub async fn offset_commit(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let Some(a) = Authz::of(broker) else {
        return super::groups::offset_commit(broker, header, req).await;
    };
    let answer = |t: &offset_commit_request::OffsetCommitRequestTopic, error: i16| {
        OffsetCommitResponseTopic::default()
            .with_name(t.name.clone())
            .with_topic_id(t.topic_id)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(error)
                    })
                    .collect(),
            )
    };
    if !a.group(op::READ, &req.group_id) {
        return OffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| answer(t, code::GROUP_AUTHORIZATION_FAILED))
                .collect(),
        );
    }
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        let ok = a.topic(op::READ, &t.name);
        if !ok {
            denied.push(answer(t, code::TOPIC_AUTHORIZATION_FAILED));
        }
        ok
    });
    let mut resp = if req.topics.is_empty() && !denied.is_empty() {
        OffsetCommitResponse::default()
    } else {
        super::groups::offset_commit(broker, header, req).await
    };
    resp.topics.extend(denied);
    resp
}

pub async fn offset_fetch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    let Some(a) = Authz::of(broker) else {
        return super::groups::offset_fetch(broker, header, req).await;
    };
    let version = header.request_api_version;
    // Which groups asked for all topics (null list): their unauthorized topics are left out, not denied.
    let all_topics_v7 = req.topics.is_none();
    let all_topics: BTreeSet<String> = req
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.to_string())
        .collect();
    let single_group = req.group_id.to_string();
    let mut resp = super::groups::offset_fetch(broker, header, req).await;
    if version < 8 {
        if !a.group(op::DESCRIBE, &single_group) {
            return OffsetFetchResponse::default()
                .with_error_code(code::GROUP_AUTHORIZATION_FAILED);
        }
        if all_topics_v7 {
            resp.topics.retain(|t| a.topic(op::DESCRIBE, &t.name));
        } else {
            for t in resp
                .topics
                .iter_mut()
                .filter(|t| !a.topic(op::DESCRIBE, &t.name))
            {
                for p in t.partitions.iter_mut() {
                    p.committed_offset = -1;
                    p.committed_leader_epoch = -1;
                    p.metadata = Some(s(""));
                    p.error_code = code::TOPIC_AUTHORIZATION_FAILED;
                }
            }
        }
        return resp;
    }
    for g in resp.groups.iter_mut() {
        if !a.group(op::DESCRIBE, &g.group_id) {
            g.topics.clear();
            g.error_code = code::GROUP_AUTHORIZATION_FAILED;
            continue;
        }
        if all_topics.contains(g.group_id.as_str()) {
            g.topics.retain(|t| a.topic(op::DESCRIBE, &t.name));
            continue;
        }
        for t in g.topics.iter_mut() {
            let name = match name_of(broker, &t.name, t.topic_id) {
                Some(n) => n,
                None => continue,
            };
            if !a.topic(op::DESCRIBE, &name) {
                for p in t.partitions.iter_mut() {
                    p.committed_offset = -1;
                    p.committed_leader_epoch = -1;
                    p.metadata = Some(s(""));
                    p.error_code = code::TOPIC_AUTHORIZATION_FAILED;
                }
            }
        }
    }
    resp
}

pub async fn offset_delete(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    let Some(a) = Authz::of(broker) else {
        return super::groups::offset_delete(broker, header, req).await;
    };
    if !a.group(op::DELETE, &req.group_id) {
        return OffsetDeleteResponse::default().with_error_code(code::GROUP_AUTHORIZATION_FAILED);
    }
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        let ok = a.topic(op::READ, &t.name);
        if !ok {
            denied.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED)
                            })
                            .collect(),
                    ),
            );
        }
        ok
    });
    let mut resp = if req.topics.is_empty() && !denied.is_empty() {
        OffsetDeleteResponse::default()
    } else {
        super::groups::offset_delete(broker, header, req).await
    };
    resp.topics.extend(denied);
    resp
}

pub async fn describe_groups(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let a = Authz::of(broker);
    let with_ops = req.include_authorized_operations;
    let mut resp = super::groups::describe_groups(broker, header, req).await;
    if let Some(a) = a {
        for g in resp.groups.iter_mut() {
            if !a.group(op::DESCRIBE, &g.group_id) {
                *g = describe_groups_response::DescribedGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(code::GROUP_AUTHORIZATION_FAILED)
                    .with_authorized_operations(i32::MIN);
            } else if with_ops {
                g.authorized_operations = a.operations(resource::GROUP, &g.group_id, GROUP_OPS);
            }
        }
    }
    resp
}

pub async fn consumer_group_describe(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let a = Authz::of(broker);
    let mut resp = super::groups::consumer_group_describe(broker, header, req).await;
    if let Some(a) = a {
        for g in resp
            .groups
            .iter_mut()
            .filter(|g| !a.group(op::DESCRIBE, &g.group_id))
        {
            *g = consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(code::GROUP_AUTHORIZATION_FAILED)
                .with_error_message(msg("Group authorization failed."))
                .with_authorized_operations(i32::MIN);
        }
    }
    resp
}

pub async fn list_groups(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    let a = Authz::of(broker);
    let mut resp = super::groups::list_groups(broker, header, req).await;
    if let Some(a) = a {
        if !a.cluster(op::DESCRIBE) {
            resp.groups.retain(|g| a.group(op::DESCRIBE, &g.group_id));
        }
    }
    resp
}

pub async fn delete_groups(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    use delete_groups_response::DeletableGroupResult;
    let Some(a) = Authz::of(broker) else {
        return super::groups::delete_groups(broker, header, req).await;
    };
    let mut denied = Vec::new();
    req.groups_names.retain(|g| {
        let ok = a.group(op::DELETE, g);
        if !ok {
            denied.push(
                DeletableGroupResult::default()
                    .with_group_id(g.clone())
                    .with_error_code(code::GROUP_AUTHORIZATION_FAILED),
            );
        }
        ok
    });
    let mut resp = if req.groups_names.is_empty() {
        DeleteGroupsResponse::default()
    } else {
        super::groups::delete_groups(broker, header, req).await
    };
    resp.results.extend(denied);
    resp
}

// ---- Producers and transactions ----

pub async fn init_producer_id(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if let Some(a) = Authz::of(broker) {
        let error = match &req.transactional_id {
            Some(t) if !a.txn(op::WRITE, t) => Some(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            Some(_) => None,
            None if a.cluster(op::IDEMPOTENT_WRITE)
                || a.authorizer.authorize_by_resource_type(
                    &a.index,
                    &a.caller,
                    op::WRITE,
                    resource::TOPIC,
                ) =>
            {
                None
            }
            None => Some(code::CLUSTER_AUTHORIZATION_FAILED),
        };
        if let Some(error) = error {
            return InitProducerIdResponse::default()
                .with_error_code(error)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
        }
    }
    super::producers::init_producer_id(broker, header, req).await
}

pub async fn add_partitions_to_txn(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    use add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    let Some(a) = Authz::of(broker) else {
        return super::txn::add_partitions_to_txn(broker, header, req).await;
    };
    let version = header.request_api_version;
    if version >= 4 {
        // Sent by brokers to verify partitions (KIP-890): the sender must be a broker.
        if !a.cluster(op::CLUSTER_ACTION) {
            return AddPartitionsToTxnResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED);
        }
        return super::txn::add_partitions_to_txn(broker, header, req).await;
    }
    let results = |topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
                   error: &dyn Fn(&str) -> i16| {
        topics
            .iter()
            .map(|t| {
                let e = error(&t.name);
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_partition_error_code(e)
                            })
                            .collect(),
                    )
            })
            .collect::<Vec<_>>()
    };
    if !a.txn(op::WRITE, &req.v3_and_below_transactional_id) {
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(results(&req.v3_and_below_topics, &|_| {
                code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            }));
    }
    let unauthorized: BTreeSet<String> = req
        .v3_and_below_topics
        .iter()
        .filter(|t| !a.topic(op::WRITE, &t.name))
        .map(|t| t.name.to_string())
        .collect();
    if !unauthorized.is_empty() {
        // Kafka adds nothing when any topic is refused: the others are OPERATION_NOT_ATTEMPTED.
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results(
            &req.v3_and_below_topics,
            &|name| {
                if unauthorized.contains(name) {
                    code::TOPIC_AUTHORIZATION_FAILED
                } else {
                    code::OPERATION_NOT_ATTEMPTED
                }
            },
        ));
    }
    super::txn::add_partitions_to_txn(broker, header, req).await
}

pub async fn add_offsets_to_txn(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    if let Some(a) = Authz::of(broker) {
        if !a.txn(op::WRITE, &req.transactional_id) {
            return AddOffsetsToTxnResponse::default()
                .with_error_code(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
        if !a.group(op::READ, &req.group_id) {
            return AddOffsetsToTxnResponse::default()
                .with_error_code(code::GROUP_AUTHORIZATION_FAILED);
        }
    }
    super::txn::add_offsets_to_txn(broker, header, req).await
}

pub async fn end_txn(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: EndTxnRequest,
) -> EndTxnResponse {
    if let Some(a) = Authz::of(broker) {
        if !a.txn(op::WRITE, &req.transactional_id) {
            return EndTxnResponse::default()
                .with_error_code(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
        }
    }
    super::txn::end_txn(broker, header, req).await
}

pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    mut req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    use txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    let Some(a) = Authz::of(broker) else {
        return super::groups::txn_offset_commit(broker, header, req).await;
    };
    let answer = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic, error: i16| {
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
    };
    let whole = if !a.txn(op::WRITE, &req.transactional_id) {
        Some(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !a.group(op::READ, &req.group_id) {
        Some(code::GROUP_AUTHORIZATION_FAILED)
    } else {
        None
    };
    if let Some(error) = whole {
        return TxnOffsetCommitResponse::default()
            .with_topics(req.topics.iter().map(|t| answer(t, error)).collect());
    }
    let mut denied = Vec::new();
    req.topics.retain(|t| {
        let ok = a.topic(op::READ, &t.name);
        if !ok {
            denied.push(answer(t, code::TOPIC_AUTHORIZATION_FAILED));
        }
        ok
    });
    let mut resp = if req.topics.is_empty() && !denied.is_empty() {
        TxnOffsetCommitResponse::default()
    } else {
        super::groups::txn_offset_commit(broker, header, req).await
    };
    resp.topics.extend(denied);
    resp
}

pub async fn describe_producers(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let a = Authz::of(broker);
    let mut resp = super::producers::describe_producers(broker, header, req).await;
    if let Some(a) = a {
        for t in resp
            .topics
            .iter_mut()
            .filter(|t| !a.topic(op::READ, &t.name))
        {
            for p in t.partitions.iter_mut() {
                *p = describe_producers_response::PartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code::TOPIC_AUTHORIZATION_FAILED);
            }
        }
    }
    resp
}

pub async fn describe_transactions(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let a = Authz::of(broker);
    let mut resp = super::txn::describe_transactions(broker, header, req).await;
    if let Some(a) = a {
        for t in resp
            .transaction_states
            .iter_mut()
            .filter(|t| !a.txn(op::DESCRIBE, &t.transactional_id))
        {
            *t = describe_transactions_response::TransactionState::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_error_code(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
    }
    resp
}

pub async fn list_transactions(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let a = Authz::of(broker);
    let mut resp = super::txn::list_transactions(broker, header, req).await;
    if let Some(a) = a {
        resp.transaction_states
            .retain(|t| a.txn(op::DESCRIBE, &t.transactional_id));
    }
    resp
}
