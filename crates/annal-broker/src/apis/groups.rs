//! Group APIs: thin adapters from the dispatcher to [`crate::group::GroupCoordinator`], which owns the state.
//!
//! The broker is the coordinator of every group (single node), so FindCoordinator answers with this node.

use kafka_protocol::messages::*;

use crate::group::{ClientInfo, NodeInfo, TopicCatalog, TopicInfo};
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

fn node(broker: &Broker) -> NodeInfo {
    NodeInfo {
        node_id: broker.config.node_id,
        host: broker.advertised.0.clone(),
        port: i32::from(broker.advertised.1),
    }
}

pub async fn find_coordinator(
    b: &Broker,
    h: &RequestHeader,
    r: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    b.groups
        .find_coordinator(r, h.request_api_version, &node(b))
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
