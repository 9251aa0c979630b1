//! Group APIs: thin adapters from the dispatcher to [`crate::group::GroupCoordinator`], which owns the state.
//!
//! A group's coordinator is the leader of its `__consumer_offsets` partition: this node on a single node, the
//! partition's leader from the image in a cluster. The coordinator itself answers NOT_COORDINATOR for groups
//! whose partition this broker does not lead.

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::group::{ClientInfo, NodeInfo, TopicCatalog, TopicInfo, OFFSETS_TOPIC};
use crate::txn::code;
use crate::Broker;

tokio::task_local! {
    /// The peer address of the connection whose request is being handled (for DescribeGroups' client host).
    pub static PEER: std::net::SocketAddr;
}

/// The topic registry, as the coordinator sees it.
impl TopicCatalog for crate::log_manager::LogManager {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.topic(name).map(|t| TopicInfo {
            id: t.id,
            partitions: t.partition_count,
        })
    }

    fn topic_name(&self, id: uuid::Uuid) -> Option<String> {
        self.topic_by_id(id).map(|t| t.name.clone())
    }
}

fn client_info(header: &RequestHeader) -> ClientInfo {
    let host = PEER
        .try_with(|p| format!("/{}", p.ip()))
        .unwrap_or_else(|_| "/127.0.0.1".into());
    ClientInfo {
        client_id: header
            .client_id
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        client_host: host,
    }
}

pub async fn find_coordinator(
    b: &Broker,
    h: &RequestHeader,
    r: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let version = h.request_api_version;
    // Group keys need `__consumer_offsets`, transaction keys `__transaction_state`: created on first use, as
    // Kafka does. Until it exists every key is answered COORDINATOR_NOT_AVAILABLE (clients retry).
    let key_type = if version >= 1 { r.key_type } else { 0 };
    let (topic_ready, topic) = match key_type {
        KEY_TYPE_TRANSACTION => (b.txn.ensure_topic().await.is_ok(), crate::txn::TXN_TOPIC),
        _ => (
            r.key_type != 0 || b.groups.ensure_offsets_topic().await.is_ok(),
            OFFSETS_TOPIC,
        ),
    };
    let cluster = b.cluster();
    // The answer's shape is the same for both key types; the node was chosen above from the key's own topic.
    let r = if key_type == KEY_TYPE_TRANSACTION {
        r.with_key_type(0)
    } else {
        r
    };
    if version >= 4 {
        let mut out = FindCoordinatorResponse::default();
        for key in r.coordinator_keys.clone() {
            let single = r.clone().with_coordinator_keys(vec![key.clone()]);
            let found = if topic_ready {
                cluster_coordinator(cluster, topic, &key)
            } else {
                None
            };
            match found {
                Some(node) => out.coordinators.extend(
                    b.groups
                        .find_coordinator(single, version, &node)
                        .coordinators,
                ),
                None => out
                    .coordinators
                    .extend(not_available(single, version).coordinators),
            }
        }
        return out;
    }
    let found = if topic_ready {
        cluster_coordinator(cluster, topic, &r.key.clone())
    } else {
        None
    };
    match found {
        Some(node) => b.groups.find_coordinator(r, version, &node),
        None => not_available(r, version),
    }
}

/// COORDINATOR_NOT_AVAILABLE (retriable) for every key of `r`.
fn not_available(r: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let message = "the group's coordinator is not available (its __consumer_offsets partition has no leader yet); retry";
    if version >= 4 {
        let mut out = FindCoordinatorResponse::default();
        for key in r.coordinator_keys {
            out.coordinators.push(
                find_coordinator_response::Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(COORDINATOR_NOT_AVAILABLE)
                    .with_error_message(Some(StrBytes::from_static_str(message))),
            );
        }
        return out;
    }
    FindCoordinatorResponse::default()
        .with_error_code(COORDINATOR_NOT_AVAILABLE)
        .with_error_message(Some(StrBytes::from_static_str(message)))
        .with_node_id(BrokerId(-1))
        .with_port(-1)
}

/// COORDINATOR_NOT_AVAILABLE (retriable).
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// FindCoordinator's key type for transactional ids.
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The coordinator of a group (or transactional id) in a cluster, as Kafka's: the leader of partition
/// `abs(javaHash(key)) % partitions` of `__consumer_offsets` (or `__transaction_state`), from the image. `None`
/// while that partition has no leader or its leader is not live (clients retry).
fn cluster_coordinator(
    cluster: &crate::cluster::ClusterRuntime,
    topic: &str,
    key: &str,
) -> Option<NodeInfo> {
    let image = cluster.image();
    let topic = image.topic_by_name(topic)?;
    let count = u32::try_from(topic.partitions.len()).ok()?;
    let index = i32::try_from(crate::group::records::partition_for(key, count)).ok()?;
    let leader = topic.partitions.get(&index)?.leader;
    if leader < 0 {
        return None;
    }
    cluster
        .live_brokers()
        .into_iter()
        .find(|broker| broker.id == leader)
        .map(|broker| NodeInfo {
            node_id: broker.id,
            host: broker.host,
            port: i32::from(broker.port),
        })
}

pub async fn join_group(b: &Broker, h: &RequestHeader, r: JoinGroupRequest) -> JoinGroupResponse {
    b.groups
        .join_group(r, h.request_api_version, &client_info(h))
        .await
}

pub async fn sync_group(b: &Broker, h: &RequestHeader, r: SyncGroupRequest) -> SyncGroupResponse {
    b.groups.sync_group(r, h.request_api_version).await
}

pub async fn heartbeat(b: &Broker, h: &RequestHeader, r: HeartbeatRequest) -> HeartbeatResponse {
    b.groups.heartbeat(r, h.request_api_version).await
}

pub async fn leave_group(
    b: &Broker,
    h: &RequestHeader,
    r: LeaveGroupRequest,
) -> LeaveGroupResponse {
    b.groups.leave_group(r, h.request_api_version).await
}

pub async fn offset_commit(
    b: &Broker,
    h: &RequestHeader,
    r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    b.groups
        .offset_commit(r, h.request_api_version, b.replica_manager.log_manager())
        .await
}

/// TxnOffsetCommit. v5 comes from a transaction-version-2 client, which sends no AddOffsetsToTxn: the group's
/// `__consumer_offsets` partition is added to its transaction first (KIP-890 part 2, Kafka's `addPartition`
/// verification), with the coordinator's transient errors as COORDINATOR_NOT_AVAILABLE (the client finds the
/// coordinator again and retries) as Kafka's group coordinator normalises them.
pub async fn txn_offset_commit(
    b: &Broker,
    h: &RequestHeader,
    r: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    if h.request_api_version >= 5 && !r.topics.is_empty() {
        if let Err(e) = b.groups.ensure_offsets_topic().await {
            return crate::group::txn_commit_error(&r, e);
        }
        let partition = b.groups.partition_for(r.group_id.0.as_str()) as i32;
        let partitions = [(crate::group::OFFSETS_TOPIC.to_string(), partition)];
        let added = b
            .txn()
            .verify_for_append(
                &r.transactional_id.0,
                r.producer_id.0,
                r.producer_epoch,
                &partitions,
                true,
            )
            .await;
        let error = added.first().copied().unwrap_or(code::NONE);
        if error != code::NONE {
            let error = match error {
                code::CONCURRENT_TRANSACTIONS
                | code::COORDINATOR_LOAD_IN_PROGRESS
                | code::NOT_COORDINATOR
                | code::NOT_ENOUGH_REPLICAS
                | code::REQUEST_TIMED_OUT => code::COORDINATOR_NOT_AVAILABLE,
                code::PRODUCER_FENCED => code::INVALID_PRODUCER_EPOCH,
                other => other,
            };
            return crate::group::txn_commit_error(&r, error);
        }
    }
    b.groups
        .txn_offset_commit(r, h.request_api_version, b.replica_manager.log_manager())
        .await
}

pub async fn offset_fetch(
    b: &Broker,
    h: &RequestHeader,
    r: OffsetFetchRequest,
) -> OffsetFetchResponse {
    b.groups.offset_fetch(r, h.request_api_version).await
}

pub async fn offset_delete(
    b: &Broker,
    h: &RequestHeader,
    r: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    b.groups
        .offset_delete(r, h.request_api_version, b.replica_manager.log_manager())
        .await
}

pub async fn describe_groups(
    b: &Broker,
    h: &RequestHeader,
    r: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    b.groups.describe_groups(r, h.request_api_version).await
}

pub async fn list_groups(
    b: &Broker,
    h: &RequestHeader,
    r: ListGroupsRequest,
) -> ListGroupsResponse {
    b.groups.list_groups(r, h.request_api_version).await
}

pub async fn delete_groups(
    b: &Broker,
    h: &RequestHeader,
    r: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    b.groups.delete_groups(r, h.request_api_version).await
}

pub async fn consumer_group_heartbeat(
    b: &Broker,
    h: &RequestHeader,
    r: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    b.groups
        .consumer_group_heartbeat(
            r,
            h.request_api_version,
            &client_info(h),
            b.replica_manager.log_manager(),
        )
        .await
}

pub async fn consumer_group_describe(
    b: &Broker,
    h: &RequestHeader,
    r: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    b.groups
        .consumer_group_describe(r, h.request_api_version, b.replica_manager.log_manager())
        .await
}
