//! CreateTopics, DeleteTopics, CreatePartitions.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader,
};
use uuid::Uuid;

use super::{blocking, code, s, topic_name};
use crate::log_manager::invalid_topic_name;
use crate::topic_config::{self, TOPIC_SETTINGS};
use crate::Broker;

/// Upper bound on partitions per topic: each partition holds open files, and one request must not be able to
/// exhaust the broker's file descriptors.
pub const MAX_PARTITIONS: i32 = 10_000;

type Failure = (i16, String);

pub async fn create_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    if let Some(cluster) = broker.cluster() {
        return super::forward::create_topics(broker, cluster, header.request_api_version, req)
            .await;
    }
    let version = header.request_api_version;
    let mut results = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatableTopicResult::default()
            .with_error_message(None)
            .with_name(t.name.clone());
        if !seen.insert(name.clone()) {
            result.error_code = code::INVALID_REQUEST;
            result.error_message = Some(s(format!(
                "topic '{name}' appears more than once in the request"
            )));
            results.push(result);
            continue;
        }
        match check_creatable(broker, &name, &t) {
            Err((error, msg)) => {
                result.error_code = error;
                result.error_message = Some(s(msg));
            }
            Ok((partitions, configs)) => {
                let outcome = if req.validate_only {
                    Ok(Uuid::nil())
                } else {
                    let (b, n, c) = (broker.clone(), name.clone(), configs.clone());
                    match blocking(move || b.replica_manager.create_topic(&n, partitions, c)).await
                    {
                        Ok(Some(topic)) => {
                            tracing::info!(topic = %name, partitions, "created topic");
                            Ok(topic.id)
                        }
                        Ok(None) => Err((
                            code::TOPIC_ALREADY_EXISTS,
                            format!("Topic '{name}' already exists."),
                        )),
                        Err(e) => Err((
                            code::UNKNOWN_SERVER_ERROR,
                            format!("creating topic '{name}' failed: {e:#}"),
                        )),
                    }
                };
                match outcome {
                    Ok(id) => {
                        if version >= 7 {
                            result.topic_id = id;
                        }
                        if version >= 5 {
                            result.num_partitions = partitions;
                            result.replication_factor = 1;
                            result.configs = Some(
                                TOPIC_SETTINGS
                                    .iter()
                                    .map(|st| {
                                        let (value, source) = topic_config::effective(
                                            st.name,
                                            &configs,
                                            &broker.config,
                                        );
                                        CreatableTopicConfigs::default()
                                            .with_name(s(st.name))
                                            .with_value(Some(s(value)))
                                            .with_config_source(source as i8)
                                    })
                                    .collect(),
                            );
                        }
                    }
                    Err((error, msg)) => {
                        result.error_code = error;
                        result.error_message = Some(s(msg));
                    }
                }
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// Validates a CreateTopics entry; returns the partition count and config overrides to create it with.
fn check_creatable(
    broker: &Broker,
    name: &str,
    t: &CreatableTopic,
) -> Result<(i32, BTreeMap<String, String>), Failure> {
    if let Some(why) = invalid_topic_name(name) {
        return Err((code::INVALID_TOPIC_EXCEPTION, why));
    }
    if broker.replica_manager.topic(name).is_some() {
        return Err((
            code::TOPIC_ALREADY_EXISTS,
            format!("Topic '{name}' already exists."),
        ));
    }
    // Kafka refuses names that differ only by '.' versus '_' (they collide in metric names).
    let unified = name.replace('.', "_");
    if let Some(other) = broker
        .replica_manager
        .topics()
        .into_iter()
        .find(|t| t.name.replace('.', "_") == unified)
    {
        return Err((
            code::INVALID_TOPIC_EXCEPTION,
            format!("Topic '{name}' collides with existing topic '{}': names may not differ only by '.' and '_'", other.name),
        ));
    }
    let node = broker.config.node_id;
    let partitions = if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err((
                code::INVALID_REQUEST,
                "give either replica assignments or num_partitions/replication_factor, not both"
                    .into(),
            ));
        }
        let mut indexes: Vec<i32> = t.assignments.iter().map(|a| a.partition_index).collect();
        indexes.sort_unstable();
        if indexes.iter().enumerate().any(|(i, p)| *p != i as i32) {
            return Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                "partition indexes must be 0..N-1, each once".into(),
            ));
        }
        if let Some(a) = t
            .assignments
            .iter()
            .find(|a| a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>() != vec![node])
        {
            return Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "partition {} is assigned to brokers {:?}; this single-node cluster only has broker {node}",
                    a.partition_index,
                    a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>()
                ),
            ));
        }
        t.assignments.len() as i32
    } else {
        let rf = if t.replication_factor == -1 {
            broker.config.default_replication_factor
        } else {
            t.replication_factor
        };
        if rf < 1 {
            return Err((
                code::INVALID_REPLICATION_FACTOR,
                format!("replication factor must be at least 1, got {rf}"),
            ));
        }
        if rf > 1 {
            return Err((
                code::INVALID_REPLICATION_FACTOR,
                format!(
                    "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be \
                     reached because only 1 broker(s) are registered. Use replication factor 1 on this single-node Annal cluster."
                ),
            ));
        }
        if t.num_partitions == -1 {
            broker.config.num_partitions
        } else {
            t.num_partitions
        }
    };
    if partitions < 1 {
        return Err((
            code::INVALID_PARTITIONS,
            format!("number of partitions must be at least 1, got {partitions}"),
        ));
    }
    if partitions > MAX_PARTITIONS {
        return Err((
            code::INVALID_PARTITIONS,
            format!("{partitions} partitions is more than the {MAX_PARTITIONS} a topic may have"),
        ));
    }
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let key = c.name.to_string();
        let value = topic_config::validate(&key, c.value.as_deref())
            .map_err(|e| (code::INVALID_CONFIG, e))?;
        configs.insert(key, value);
    }
    Ok((partitions, configs))
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    if let Some(cluster) = broker.cluster() {
        return super::forward::delete_topics(broker, cluster, header.request_api_version, req)
            .await;
    }
    let version = header.request_api_version;
    // v0-5 name topics in `topic_names`; v6 in `topics`, by name or by id.
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::new();
    for (name, id) in targets {
        let topic = match &name {
            Some(n) => broker.replica_manager.topic(n),
            None => broker.replica_manager.topic_by_id(id),
        };
        let mut r = DeletableTopicResult::default()
            .with_error_message(None)
            .with_name(name.as_deref().map(topic_name));
        if version >= 6 {
            r.topic_id = topic.as_ref().map(|t| t.id).unwrap_or(id);
        }
        let failure = if !broker.config.delete_topic_enable {
            Some((
                code::TOPIC_DELETION_DISABLED,
                "topic deletion is disabled (delete.topic.enable=false)".to_string(),
            ))
        } else {
            match topic {
                None if name.is_none() => {
                    Some((code::UNKNOWN_TOPIC_ID, format!("no topic has id {id}")))
                }
                None => Some((
                    code::UNKNOWN_TOPIC_OR_PARTITION,
                    format!(
                        "topic '{}' does not exist",
                        name.clone().unwrap_or_default()
                    ),
                )),
                Some(t) => {
                    if version >= 6 {
                        r.name = Some(topic_name(&t.name));
                    }
                    let (b, n) = (broker.clone(), t.name.clone());
                    match blocking(move || b.replica_manager.delete_topic(&n)).await {
                        Ok(Some(_)) => {
                            tracing::info!(topic = %t.name, "deleted topic");
                            None
                        }
                        Ok(None) => Some((
                            code::UNKNOWN_TOPIC_OR_PARTITION,
                            format!("topic '{}' does not exist", t.name),
                        )),
                        Err(e) => Some((
                            code::UNKNOWN_SERVER_ERROR,
                            format!("deleting topic '{}' failed: {e:#}", t.name),
                        )),
                    }
                }
            }
        };
        if let Some((error, msg)) = failure {
            r.error_code = error;
            if version >= 5 {
                r.error_message = Some(s(msg));
            }
        }
        responses.push(r);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// ElectLeaders (43): a controller decision, so only a cluster serves it (a single node does not advertise it).
pub async fn elect_leaders(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::ElectLeadersRequest,
) -> kafka_protocol::messages::ElectLeadersResponse {
    match broker.cluster() {
        Some(cluster) => {
            super::forward::elect_leaders(cluster, header.request_api_version, req).await
        }
        None => kafka_protocol::messages::ElectLeadersResponse::default()
            .with_error_code(code::UNSUPPORTED_VERSION),
    }
}

/// AlterPartitionReassignments (45): cluster only, forwarded.
pub async fn alter_partition_reassignments(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::AlterPartitionReassignmentsRequest,
) -> kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    use kafka_protocol::messages::AlterPartitionReassignmentsResponse as Resp;
    match broker.cluster() {
        Some(cluster) => {
            super::forward::to_controller(cluster, header.request_api_version, &req, |msg| {
                Resp::default()
                    .with_error_code(super::forward::NOT_CONTROLLER)
                    .with_error_message(Some(s(msg)))
            })
            .await
        }
        None => Resp::default().with_error_code(code::UNSUPPORTED_VERSION),
    }
}

/// ListPartitionReassignments (46): cluster only, forwarded.
pub async fn list_partition_reassignments(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::ListPartitionReassignmentsRequest,
) -> kafka_protocol::messages::ListPartitionReassignmentsResponse {
    use kafka_protocol::messages::ListPartitionReassignmentsResponse as Resp;
    match broker.cluster() {
        Some(cluster) => {
            super::forward::to_controller(cluster, header.request_api_version, &req, |msg| {
                Resp::default()
                    .with_error_code(super::forward::NOT_CONTROLLER)
                    .with_error_message(Some(s(msg)))
            })
            .await
        }
        None => Resp::default().with_error_code(code::UNSUPPORTED_VERSION),
    }
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    if let Some(cluster) = broker.cluster() {
        return super::forward::create_partitions(broker, cluster, header.request_api_version, req)
            .await;
    }
    let mut results = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut r = CreatePartitionsTopicResult::default()
            .with_error_message(None)
            .with_name(t.name.clone());
        let failure: Option<Failure> = match broker.replica_manager.topic(&name) {
            None => Some((
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic '{name}' does not exist"),
            )),
            Some(topic) => {
                let current = topic.partition_count;
                let node = broker.config.node_id;
                if t.count <= current {
                    Some((
                        code::INVALID_PARTITIONS,
                        format!("Topic currently has {current} partitions, which is higher than the requested {}.", t.count),
                    ))
                } else if t.count > MAX_PARTITIONS {
                    Some((
                        code::INVALID_PARTITIONS,
                        format!(
                            "{} partitions is more than the {MAX_PARTITIONS} a topic may have",
                            t.count
                        ),
                    ))
                } else if let Some(bad) =
                    t.assignments
                        .as_ref()
                        .filter(|a| !a.is_empty())
                        .and_then(|a| {
                            if a.len() as i32 != t.count - current {
                                return Some(format!(
                                    "{} assignments given for {} new partitions",
                                    a.len(),
                                    t.count - current
                                ));
                            }
                            a.iter()
                                .find(|x| {
                                    x.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>()
                                        != vec![node]
                                })
                                .map(|x| {
                                    format!(
                                "assignment {:?} names brokers other than {node}, the only broker",
                                x.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>()
                            )
                                })
                        })
                {
                    Some((code::INVALID_REPLICA_ASSIGNMENT, bad))
                } else if req.validate_only {
                    None
                } else {
                    let (b, n, count) = (broker.clone(), name.clone(), t.count);
                    match blocking(move || b.replica_manager.create_partitions(&n, count)).await {
                        Ok(()) => {
                            tracing::info!(topic = %name, partitions = t.count, "added partitions");
                            None
                        }
                        Err(e) => Some((
                            code::UNKNOWN_SERVER_ERROR,
                            format!("adding partitions to '{name}' failed: {e:#}"),
                        )),
                    }
                }
            }
        };
        if let Some((error, msg)) = failure {
            r.error_code = error;
            r.error_message = Some(s(msg));
        }
        results.push(r);
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// DescribeLogDirs: the one data directory and the size of each partition in it (tools and UIs show topic
/// sizes from this). Volume sizes are reported unknown (-1), as Kafka does when it cannot tell.
pub async fn describe_log_dirs(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: kafka_protocol::messages::DescribeLogDirsRequest,
) -> kafka_protocol::messages::DescribeLogDirsResponse {
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };
    // Null: every partition. Otherwise the listed ones that exist.
    let wanted: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    let mut topics = Vec::new();
    for topic in broker.replica_manager.topics() {
        let held = broker.replica_manager.partitions_of(&topic.name);
        let partitions: Vec<i32> = match &wanted {
            None => (0..held.len() as i32).collect(),
            Some(list) => match list.iter().find(|(n, _)| *n == topic.name) {
                Some((_, ps)) => ps.clone(),
                None => continue,
            },
        };
        let mut out = Vec::new();
        for index in partitions {
            if let Some(part) = usize::try_from(index).ok().and_then(|i| held.get(i)) {
                out.push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(index)
                        .with_partition_size(part.size_bytes() as i64),
                );
            }
        }
        if !out.is_empty() {
            topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(&topic.name))
                    .with_partitions(out),
            );
        }
    }
    let dir = std::fs::canonicalize(&broker.config.data_dir)
        .unwrap_or_else(|_| broker.config.data_dir.clone());
    kafka_protocol::messages::DescribeLogDirsResponse::default().with_results(vec![
        DescribeLogDirsResult::default()
            .with_log_dir(s(dir.display().to_string()))
            .with_topics(topics)
            .with_total_bytes(-1)
            .with_usable_bytes(-1),
    ])
}
