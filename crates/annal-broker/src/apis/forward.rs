//! Admin requests in a cluster: the controller alone writes metadata, so a broker forwards CreateTopics,
//! DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs, ElectLeaders and the partition
//! reassignment APIs to the active controller
//! unchanged and
//! returns its answer (Kafka wraps them in an Envelope; what the client sees is the same). When the controller
//! cannot be reached, every item answers NOT_CONTROLLER, which clients retry.
//!
//! After a change commits, the broker waits (bounded) until its own state reflects it, so a client that asks
//! this broker for Metadata right after CreateTopics, or DescribeConfigs right after AlterConfigs, sees it.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ElectLeadersRequest, ElectLeadersResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};

use super::{code, s};
use crate::cluster::ClusterRuntime;
use crate::Broker;

/// Kafka's NOT_CONTROLLER (retriable): the controller could not be reached or is changing.
pub(crate) const NOT_CONTROLLER: i16 = 41;
/// How long a forwarded change waits to show up in this broker's own state.
const VISIBLE_WAIT_MAX: Duration = Duration::from_secs(5);
const VISIBLE_POLL: Duration = Duration::from_millis(20);

fn unreachable_message(e: &anyhow::Error) -> String {
    format!("the active controller could not be reached ({e:#}); retry")
}

pub async fn create_topics(
    broker: &Broker,
    cluster: &ClusterRuntime,
    version: i16,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let names: Vec<String> = req.topics.iter().map(|t| t.name.0.to_string()).collect();
    let validate_only = req.validate_only;
    match cluster.channel().send(&req, version).await {
        Ok(resp) => {
            if !validate_only {
                let created: Vec<&str> = resp
                    .topics
                    .iter()
                    .filter(|t| t.error_code == code::NONE)
                    .map(|t| t.name.0.as_str())
                    .collect();
                // The topic, and the leadership of each of its partitions (applied right after the topic is
                // registered): a produce right after the answer must not meet a partition that leads nobody yet.
                wait_until(|| {
                    created.iter().all(|n| {
                        let rm = broker.replica_manager();
                        rm.topic_is_installed(n, 0)
                            && rm.partitions_of(n).iter().all(|p| p.leader() >= 0)
                    })
                })
                .await;
            }
            resp
        }
        Err(e) => {
            let msg = unreachable_message(&e);
            let mut resp = CreateTopicsResponse::default();
            for (t, name) in req.topics.into_iter().zip(names) {
                tracing::debug!(topic = %name, "CreateTopics not forwarded: {msg}");
                resp.topics.push(
                    kafka_protocol::messages::create_topics_response::CreatableTopicResult::default()
                        .with_name(t.name)
                        .with_error_code(NOT_CONTROLLER)
                        .with_error_message(Some(s(msg.clone()))),
                );
            }
            resp
        }
    }
}

pub async fn delete_topics(
    broker: &Broker,
    cluster: &ClusterRuntime,
    version: i16,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
    match cluster.channel().send(&req, version).await {
        Ok(resp) => {
            let deleted: Vec<String> = resp
                .responses
                .iter()
                .filter(|t| t.error_code == code::NONE)
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .collect();
            wait_until(|| {
                deleted
                    .iter()
                    .all(|n| broker.replica_manager().topic(n).is_none())
            })
            .await;
            resp
        }
        Err(e) => {
            let msg = unreachable_message(&e);
            let mut resp = DeleteTopicsResponse::default();
            let targets: Vec<_> = if version >= 6 {
                req.topics
                    .into_iter()
                    .map(|t| (t.name, t.topic_id))
                    .collect()
            } else {
                req.topic_names
                    .into_iter()
                    .map(|n| (Some(n), uuid::Uuid::nil()))
                    .collect()
            };
            for (name, id) in targets {
                resp.responses.push(
                    DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(NOT_CONTROLLER)
                        .with_error_message(Some(s(msg.clone()))),
                );
            }
            resp
        }
    }
}

pub async fn create_partitions(
    broker: &Broker,
    cluster: &ClusterRuntime,
    version: i16,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
    let wanted: Vec<(String, i32)> = req
        .topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.count))
        .collect();
    let validate_only = req.validate_only;
    // The partitions each topic had: the new ones, from there on, must be installed and led before the answer.
    let before: Vec<i32> = wanted
        .iter()
        .map(|(n, _)| {
            broker
                .replica_manager()
                .topic(n)
                .map_or(0, |t| t.partition_count)
        })
        .collect();
    match cluster.channel().send(&req, version).await {
        Ok(resp) => {
            if !validate_only {
                let grown: Vec<(&(String, i32), i32)> = wanted
                    .iter()
                    .zip(before)
                    .filter(|((n, _), _)| {
                        resp.results
                            .iter()
                            .any(|r| r.name.0.as_str() == n && r.error_code == code::NONE)
                    })
                    .collect();
                wait_until(|| {
                    grown.iter().all(|((n, count), before)| {
                        let rm = broker.replica_manager();
                        rm.topic_is_installed(n, *count)
                            && rm
                                .partitions_of(n)
                                .iter()
                                .skip(usize::try_from(*before).unwrap_or(0))
                                .all(|p| p.leader() >= 0)
                    })
                })
                .await;
            }
            resp
        }
        Err(e) => {
            let msg = unreachable_message(&e);
            let mut resp = CreatePartitionsResponse::default();
            for t in req.topics {
                resp.results.push(
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name)
                        .with_error_code(NOT_CONTROLLER)
                        .with_error_message(Some(s(msg.clone()))),
                );
            }
            resp
        }
    }
}

pub async fn alter_configs(
    broker: &Broker,
    cluster: &ClusterRuntime,
    version: i16,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    match cluster.channel().send(&req, version).await {
        Ok(resp) => {
            if !req.validate_only {
                // AlterConfigs replaces a topic's whole set: it shows once the topic holds exactly the given values.
                let expected: Vec<(String, BTreeMap<String, String>)> = req
                    .resources
                    .iter()
                    .filter(|r| {
                        r.resource_type == TOPIC_RESOURCE
                            && altered(&resp.responses, r.resource_name.as_str())
                    })
                    .map(|r| {
                        let configs = r
                            .configs
                            .iter()
                            .filter_map(|c| {
                                Some((c.name.to_string(), c.value.as_ref()?.to_string()))
                            })
                            .collect();
                        (r.resource_name.to_string(), configs)
                    })
                    .collect();
                wait_until(|| {
                    expected.iter().all(|(topic, configs)| {
                        broker
                            .replica_manager()
                            .topic(topic)
                            .is_none_or(|t| t.configs == *configs)
                    })
                })
                .await;
            }
            resp
        }
        Err(e) => {
            let msg = unreachable_message(&e);
            let mut resp = AlterConfigsResponse::default();
            for r in req.resources {
                resp.responses.push(
                    AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name)
                        .with_error_code(NOT_CONTROLLER)
                        .with_error_message(Some(s(msg.clone()))),
                );
            }
            resp
        }
    }
}

pub async fn incremental_alter_configs(
    broker: &Broker,
    cluster: &ClusterRuntime,
    version: i16,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    match cluster.channel().send(&req, version).await {
        Ok(resp) => {
            if !req.validate_only {
                // SET shows as the value, DELETE as its absence; APPEND and SUBTRACT edit lists whose result only
                // the controller computed, so they are not waited for.
                let expected: Vec<(String, String, Option<String>)> = req
                    .resources
                    .iter()
                    .filter(|r| {
                        r.resource_type == TOPIC_RESOURCE
                            && altered_incrementally(&resp.responses, r.resource_name.as_str())
                    })
                    .flat_map(|r| {
                        r.configs.iter().filter_map(|c| match c.config_operation {
                            OP_SET => Some((
                                r.resource_name.to_string(),
                                c.name.to_string(),
                                c.value.as_ref().map(|v| v.to_string()),
                            )),
                            OP_DELETE => {
                                Some((r.resource_name.to_string(), c.name.to_string(), None))
                            }
                            _ => None,
                        })
                    })
                    .collect();
                wait_until(|| {
                    expected.iter().all(|(topic, name, value)| {
                        broker
                            .replica_manager()
                            .topic(topic)
                            .is_none_or(|t| t.configs.get(name) == value.as_ref())
                    })
                })
                .await;
            }
            resp
        }
        Err(e) => {
            let msg = unreachable_message(&e);
            let mut resp = IncrementalAlterConfigsResponse::default();
            for r in req.resources {
                resp.responses.push(
                    AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name)
                        .with_error_code(NOT_CONTROLLER)
                        .with_error_message(Some(s(msg.clone()))),
                );
            }
            resp
        }
    }
}

/// Config resource type 2 (TOPIC): the only resource whose configs this broker applies to its own state.
const TOPIC_RESOURCE: i8 = 2;
/// IncrementalAlterConfigs operations SET (0) and DELETE (1).
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// Whether the controller's AlterConfigs answer says `topic` was altered.
fn altered(
    responses: &[kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse],
    topic: &str,
) -> bool {
    responses.iter().any(|r| {
        r.resource_type == TOPIC_RESOURCE
            && r.resource_name.as_str() == topic
            && r.error_code == code::NONE
    })
}

/// Whether the controller's IncrementalAlterConfigs answer says `topic` was altered.
fn altered_incrementally(
    responses: &[kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse],
    topic: &str,
) -> bool {
    responses.iter().any(|r| {
        r.resource_type == TOPIC_RESOURCE
            && r.resource_name.as_str() == topic
            && r.error_code == code::NONE
    })
}

/// Waits until `done` holds, at most [`VISIBLE_WAIT_MAX`]; the change is committed either way, so running out
/// only means a client may briefly not see it here.
pub(crate) async fn wait_until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + VISIBLE_WAIT_MAX;
    while !done() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(VISIBLE_POLL).await;
    }
}

/// ElectLeaders (43). Unreachable controller: v1+ answer NOT_CONTROLLER at the top, v0 (no top-level code) on
/// every partition asked for.
pub async fn elect_leaders(
    cluster: &ClusterRuntime,
    version: i16,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    match cluster.channel().send(&req, version).await {
        Ok(resp) => resp,
        Err(e) => {
            let msg = unreachable_message(&e);
            tracing::debug!("ElectLeaders not forwarded: {msg}");
            let results = req
                .topic_partitions
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    ReplicaElectionResult::default()
                        .with_topic(t.topic)
                        .with_partition_result(
                            t.partitions
                                .into_iter()
                                .map(|p| {
                                    PartitionResult::default()
                                        .with_partition_id(p)
                                        .with_error_code(NOT_CONTROLLER)
                                        .with_error_message(Some(s(msg.clone())))
                                })
                                .collect(),
                        )
                })
                .collect();
            ElectLeadersResponse::default()
                .with_error_code(if version >= 1 { NOT_CONTROLLER } else { 0 })
                .with_replica_election_results(results)
        }
    }
}

/// Sends `req` to the controller and returns its answer, or `unreachable(message)` when it cannot be reached.
pub async fn to_controller<Req, Resp>(
    cluster: &ClusterRuntime,
    version: i16,
    req: &Req,
    unreachable: impl FnOnce(String) -> Resp,
) -> Resp
where
    Req: kafka_protocol::protocol::Request<Response = Resp>,
{
    match cluster.channel().send(req, version).await {
        Ok(resp) => resp,
        Err(e) => {
            let msg = unreachable_message(&e);
            tracing::debug!("{} not forwarded: {msg}", std::any::type_name::<Req>());
            unreachable(msg)
        }
    }
}
