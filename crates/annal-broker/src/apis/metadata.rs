//! Metadata (with topic auto-creation) and DescribeCluster. Partition leaders, epochs, replicas and ISRs come
//! from the replica manager's partitions (on a single node: this node, epoch 0, ISR = {this node}).

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    RequestHeader,
};

use super::{code, s, topic_name, CLUSTER_OPERATIONS, TOPIC_OPERATIONS};
use crate::cluster::BrokerView;
use crate::log_manager::{invalid_topic_name, Topic};
use crate::Broker;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeQuorumRequest, DescribeQuorumResponse,
};

pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: MetadataRequest,
) -> MetadataResponse {
    let version = header.request_api_version;
    let with_ops = version >= 8 && req.include_topic_authorized_operations;
    // v0: an empty list means all topics; v1+: null means all topics, empty means none.
    let requested = match req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(t),
    };
    let mut topics = Vec::new();
    match requested {
        None => {
            for t in broker.replica_manager.topics() {
                topics.push(describe(broker, &t, version, with_ops));
            }
        }
        Some(list) => {
            // Before v4 there is no flag and Kafka auto-creates.
            let allow_create =
                broker.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
            for rt in list {
                let name = rt.name.map(|n| n.0.to_string());
                let topic = match &name {
                    Some(n) => broker.replica_manager.topic(n),
                    None => broker.replica_manager.topic_by_id(rt.topic_id),
                };
                let topic = match (topic, &name) {
                    (Some(t), _) => Ok(t),
                    (None, Some(n)) if allow_create && invalid_topic_name(n).is_none() => {
                        auto_create(broker, n).await
                    }
                    (None, Some(n)) if invalid_topic_name(n).is_some() => {
                        Err(code::INVALID_TOPIC_EXCEPTION)
                    }
                    (None, Some(_)) => Err(code::UNKNOWN_TOPIC_OR_PARTITION),
                    (None, None) => Err(code::UNKNOWN_TOPIC_ID),
                };
                match topic {
                    Ok(t) => topics.push(describe(broker, &t, version, with_ops)),
                    Err(error) => {
                        topics.push(
                            MetadataResponseTopic::default()
                                .with_error_code(error)
                                .with_name(name.as_deref().map(topic_name))
                                .with_topic_id(rt.topic_id),
                        );
                    }
                }
            }
        }
    }
    let (brokers, controller) = brokers_and_controller(broker);
    let mut resp = MetadataResponse::default()
        .with_brokers(
            brokers
                .into_iter()
                .map(|b| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.id))
                        .with_host(s(b.host))
                        .with_port(i32::from(b.port))
                        .with_rack(b.rack.map(s))
                })
                .collect(),
        )
        .with_cluster_id(Some(s(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(controller))
        .with_topics(topics);
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS;
    }
    resp
}

/// A topic's partitions as this broker's replica manager holds them: leader, leader epoch, replicas and ISR.
fn describe(broker: &Broker, t: &Topic, version: i16, with_ops: bool) -> MetadataResponseTopic {
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    let installed = broker.replica_manager.partitions_of(&t.name);
    let partitions: Vec<_> = installed
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p.index())
                .with_leader_id(BrokerId(p.leader()))
                .with_leader_epoch(p.leader_epoch())
                .with_replica_nodes(ids(p.replicas()))
                .with_isr_nodes(ids(p.isr()))
        })
        .collect();
    // Registered a moment ago, its partitions not installed yet: what Kafka answers for a topic being
    // created, which every client retries (an empty partition list with no error reads as a topic of none).
    let error = if partitions.is_empty() && t.partition_count > 0 {
        code::LEADER_NOT_AVAILABLE
    } else {
        code::NONE
    };
    let mut topic = MetadataResponseTopic::default()
        .with_error_code(error)
        .with_name(Some(topic_name(&t.name)))
        .with_is_internal(t.name == crate::group::OFFSETS_TOPIC)
        .with_partitions(partitions);
    if version >= 10 {
        topic.topic_id = t.id;
    }
    if with_ops {
        topic.topic_authorized_operations = TOPIC_OPERATIONS;
    }
    topic
}

pub async fn describe_cluster(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let (brokers, controller) = brokers_and_controller(broker);
    let mut resp = DescribeClusterResponse::default()
        .with_error_message(None)
        .with_cluster_id(s(broker.cluster_id.clone()))
        .with_controller_id(BrokerId(controller))
        .with_endpoint_type(req.endpoint_type)
        .with_brokers(
            brokers
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.id))
                        .with_host(s(b.host))
                        .with_port(i32::from(b.port))
                        .with_rack(b.rack.map(s))
                })
                .collect(),
        );
    if req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS;
    }
    resp
}

/// The brokers to list (the live ones, from the metadata image) and the controller id clients are told.
fn brokers_and_controller(broker: &Broker) -> (Vec<BrokerView>, i32) {
    let c = broker.cluster();
    let brokers = c.live_brokers();
    let controller = c.controller_id_for_clients(&brokers, broker.config.node_id);
    (brokers, controller)
}

/// Metadata's auto-creation: a CreateTopics (default partitions and replication factor) through the controller.
/// The topic once it is visible here with its partitions installed; otherwise LEADER_NOT_AVAILABLE, Kafka's
/// answer for a topic being created, which clients retry (another client's creation may not be applied here
/// yet, or the controller refused it, which is logged).
async fn auto_create(broker: &Arc<Broker>, name: &str) -> Result<Arc<Topic>, i16> {
    let cluster = broker.cluster();
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(-1)
            .with_replication_factor(-1)])
        .with_timeout_ms(30_000);
    let resp = super::forward::create_topics(broker, cluster, 5, req).await;
    let mut exists = false;
    for t in &resp.topics {
        if t.error_code == code::NONE || t.error_code == code::TOPIC_ALREADY_EXISTS {
            exists = true;
        } else {
            tracing::info!(topic = %name, error_code = t.error_code, message = ?t.error_message, "auto-create through the controller failed");
        }
    }
    if exists {
        // Created by another client a moment ago: the controller has it, this broker may not have applied it.
        super::forward::wait_until(|| broker.replica_manager.topic_is_installed(name, 0)).await;
    }
    broker
        .replica_manager
        .topic(name)
        .ok_or(code::LEADER_NOT_AVAILABLE)
}

/// DescribeQuorum on a broker: forwarded to the active controller, which knows every voter's progress (a
/// follower's own view lacks it).
pub async fn describe_quorum(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    let cluster = broker.cluster();
    match cluster
        .channel()
        .send(&req, header.request_api_version)
        .await
    {
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(error = %format!("{e:#}"), "DescribeQuorum not forwarded");
            // The local view: the leader and epoch this node knows, which is what a client most needs.
            annal_metadata::listener::describe_quorum(&cluster.node().quorum_status())
        }
    }
}
