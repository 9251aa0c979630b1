//! Topic admin: CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders and partition reassignments are
//! decisions of the controller (the only writer of metadata), so a broker forwards them (`forward.rs`) and
//! answers once the change is visible here; DescribeLogDirs answers from this broker's own partitions.

use std::sync::Arc;

use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader,
};

use super::{s, topic_name};
use crate::Broker;

pub async fn create_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    super::forward::create_topics(broker, broker.cluster(), header.request_api_version, req).await
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    super::forward::delete_topics(broker, broker.cluster(), header.request_api_version, req).await
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    super::forward::create_partitions(broker, broker.cluster(), header.request_api_version, req)
        .await
}

/// ElectLeaders (43).
pub async fn elect_leaders(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::ElectLeadersRequest,
) -> kafka_protocol::messages::ElectLeadersResponse {
    super::forward::elect_leaders(broker.cluster(), header.request_api_version, req).await
}

/// AlterPartitionReassignments (45).
pub async fn alter_partition_reassignments(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::AlterPartitionReassignmentsRequest,
) -> kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    use kafka_protocol::messages::AlterPartitionReassignmentsResponse as Resp;
    super::forward::to_controller(broker.cluster(), header.request_api_version, &req, |msg| {
        Resp::default()
            .with_error_code(super::forward::NOT_CONTROLLER)
            .with_error_message(Some(s(msg)))
    })
    .await
}

/// ListPartitionReassignments (46).
pub async fn list_partition_reassignments(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: kafka_protocol::messages::ListPartitionReassignmentsRequest,
) -> kafka_protocol::messages::ListPartitionReassignmentsResponse {
    use kafka_protocol::messages::ListPartitionReassignmentsResponse as Resp;
    super::forward::to_controller(broker.cluster(), header.request_api_version, &req, |msg| {
        Resp::default()
            .with_error_code(super::forward::NOT_CONTROLLER)
            .with_error_message(Some(s(msg)))
    })
    .await
}

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
