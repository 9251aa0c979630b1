//! One module per group of Kafka APIs. [`SUPPORTED`] is the single list of what this broker implements (and so
//! what ApiVersions advertises); [`dispatch`] routes a decoded header to its handler.

pub mod acls;
pub mod admin;
pub mod api_versions;
pub mod authz;
pub mod configs;
pub mod fetch;
pub mod fetch_session;
pub(crate) mod forward;
pub mod groups;
mod leader_hints;
pub mod metadata;
pub mod offsets;
pub mod produce;
mod produce_records;
mod produce_verification;
pub mod producers;
pub mod quotas;
pub mod sasl;
pub mod txn;
pub mod txn_markers;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::server::{decode, encode_response, Close, Response};
use crate::Broker;

/// Every API this broker implements, with the versions it implements and tests (see docs/compatibility.md).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // v0-2 only answer UNSUPPORTED_VERSION; see produce::legacy_unsupported.
    (ApiKey::Produce, 0, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 9),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    // Sent by transaction coordinators to partition leaders (v0 removed in Kafka 4; v2 not yet, see txn_markers).
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeLogDirs, 1, 4),
    // Group coordinator: exactly `GroupCoordinator::api_versions()` (checked by a test).
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Transaction coordinator: exactly `txn::API_VERSIONS` (transaction versions 1 and 2), TxnOffsetCommit included.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // Security: the exchange runs before dispatch (server::sasl_frame); see apis::sasl.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Client quotas (decision 0017-quotas): described from the image, altered through the controller.
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    // ACLs (Kafka 4's versions: v0 was removed by KIP-896); see apis::acls and apis::authz.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// APIs the active controller answers, forwarded to it as Kafka's brokers forward them (DescribeQuorum and
/// ElectLeaders, partition reassignments). Every broker advertises them beside [`SUPPORTED`]; they are kept apart because their versions
/// are the controller's (`annal_metadata::controller::supported_apis` and the quorum's DescribeQuorum).
pub const CLUSTER_ONLY: &[(ApiKey, i16, i16)] = &[
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
];

/// The versions of `key` this broker serves: [`SUPPORTED`] and [`CLUSTER_ONLY`].
pub fn supported_by(key: ApiKey) -> Option<(i16, i16)> {
    if let Some((_, min, max)) = CLUSTER_ONLY.iter().find(|(k, _, _)| *k == key) {
        return Some((*min, *max));
    }
    supported(key)
}

pub fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, a, b)| (*a, *b))
}

pub(crate) use crate::blocking;
pub(crate) use crate::kafka_code as code;

/// Operations bitfields for Metadata/DescribeCluster when clients ask for authorized operations: everything
/// (Annal has no ACLs yet). Bits are Kafka's AclOperation codes.
pub const TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const CLUSTER_OPERATIONS: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

pub fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}

/// Decodes a request body as [`dispatch`] does for `key`, and drops it (`server::decode_request_frame`, the fuzz
/// targets' entry). Each arm names the type its `dispatch` arm decodes; `every_supported_key_has_a_body_decoder`
/// checks that no supported key is missing.
pub fn decode_body(key: ApiKey, header: &RequestHeader, mut buf: Bytes) -> Result<(), Close> {
    use kafka_protocol::messages::*;
    let v = header.request_api_version;
    match key {
        ApiKey::ApiVersions => decode::<ApiVersionsRequest>(key, &mut buf, v).map(drop),
        ApiKey::Metadata => decode::<MetadataRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeCluster => decode::<DescribeClusterRequest>(key, &mut buf, v).map(drop),
        ApiKey::CreateTopics => decode::<CreateTopicsRequest>(key, &mut buf, v).map(drop),
        ApiKey::DeleteTopics => decode::<DeleteTopicsRequest>(key, &mut buf, v).map(drop),
        ApiKey::CreatePartitions => decode::<CreatePartitionsRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeConfigs => decode::<DescribeConfigsRequest>(key, &mut buf, v).map(drop),
        ApiKey::AlterConfigs => decode::<AlterConfigsRequest>(key, &mut buf, v).map(drop),
        ApiKey::IncrementalAlterConfigs => {
            decode::<IncrementalAlterConfigsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::ListOffsets => decode::<ListOffsetsRequest>(key, &mut buf, v).map(drop),
        ApiKey::DeleteRecords => decode::<DeleteRecordsRequest>(key, &mut buf, v).map(drop),
        ApiKey::InitProducerId => decode::<InitProducerIdRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeProducers => decode::<DescribeProducersRequest>(key, &mut buf, v).map(drop),
        ApiKey::WriteTxnMarkers => decode::<WriteTxnMarkersRequest>(key, &mut buf, v).map(drop),
        ApiKey::OffsetForLeaderEpoch => {
            decode::<OffsetForLeaderEpochRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::DescribeQuorum => decode::<DescribeQuorumRequest>(key, &mut buf, v).map(drop),
        ApiKey::ElectLeaders => decode::<ElectLeadersRequest>(key, &mut buf, v).map(drop),
        ApiKey::AlterPartitionReassignments => {
            decode::<AlterPartitionReassignmentsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::ListPartitionReassignments => {
            decode::<ListPartitionReassignmentsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::DescribeLogDirs => decode::<DescribeLogDirsRequest>(key, &mut buf, v).map(drop),
        ApiKey::Fetch => decode::<FetchRequest>(key, &mut buf, v).map(drop),
        ApiKey::FindCoordinator => decode::<FindCoordinatorRequest>(key, &mut buf, v).map(drop),
        ApiKey::JoinGroup => decode::<JoinGroupRequest>(key, &mut buf, v).map(drop),
        ApiKey::SyncGroup => decode::<SyncGroupRequest>(key, &mut buf, v).map(drop),
        ApiKey::Heartbeat => decode::<HeartbeatRequest>(key, &mut buf, v).map(drop),
        ApiKey::LeaveGroup => decode::<LeaveGroupRequest>(key, &mut buf, v).map(drop),
        ApiKey::OffsetCommit => decode::<OffsetCommitRequest>(key, &mut buf, v).map(drop),
        ApiKey::OffsetFetch => decode::<OffsetFetchRequest>(key, &mut buf, v).map(drop),
        ApiKey::OffsetDelete => decode::<OffsetDeleteRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeGroups => decode::<DescribeGroupsRequest>(key, &mut buf, v).map(drop),
        ApiKey::ListGroups => decode::<ListGroupsRequest>(key, &mut buf, v).map(drop),
        ApiKey::DeleteGroups => decode::<DeleteGroupsRequest>(key, &mut buf, v).map(drop),
        ApiKey::ConsumerGroupHeartbeat => {
            decode::<ConsumerGroupHeartbeatRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::ConsumerGroupDescribe => {
            decode::<ConsumerGroupDescribeRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::AddPartitionsToTxn => {
            decode::<AddPartitionsToTxnRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::AddOffsetsToTxn => decode::<AddOffsetsToTxnRequest>(key, &mut buf, v).map(drop),
        ApiKey::EndTxn => decode::<EndTxnRequest>(key, &mut buf, v).map(drop),
        ApiKey::TxnOffsetCommit => decode::<TxnOffsetCommitRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeTransactions => {
            decode::<DescribeTransactionsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::ListTransactions => decode::<ListTransactionsRequest>(key, &mut buf, v).map(drop),
        ApiKey::SaslHandshake => decode::<SaslHandshakeRequest>(key, &mut buf, v).map(drop),
        ApiKey::SaslAuthenticate => decode::<SaslAuthenticateRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeUserScramCredentials => {
            decode::<DescribeUserScramCredentialsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::AlterUserScramCredentials => {
            decode::<AlterUserScramCredentialsRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::DescribeClientQuotas => {
            decode::<DescribeClientQuotasRequest>(key, &mut buf, v).map(drop)
        }
        ApiKey::AlterClientQuotas => decode::<AlterClientQuotasRequest>(key, &mut buf, v).map(drop),
        ApiKey::DescribeAcls => decode::<DescribeAclsRequest>(key, &mut buf, v).map(drop),
        ApiKey::CreateAcls => decode::<CreateAclsRequest>(key, &mut buf, v).map(drop),
        ApiKey::DeleteAcls => decode::<DeleteAclsRequest>(key, &mut buf, v).map(drop),
        ApiKey::Produce if v < 3 => match produce::legacy_unsupported(v, &buf) {
            Some(Err(e)) => Err(Close(e)),
            _ => Ok(()),
        },
        ApiKey::Produce => decode::<ProduceRequest>(key, &mut buf, v).map(drop),
        other => Err(Close(format!("{other:?} is not implemented"))),
    }
}

/// Counts the error codes of a response in the metrics (`ops::metrics::ErrorCodes`; types without an impl
/// count nothing). A macro, not a function: the impl is chosen where the response's concrete type is known.
macro_rules! count_errors {
    ($broker:expr, $key:expr, $resp:expr) => {{
        #[allow(unused_imports)]
        use crate::ops::metrics::{CountErrors as _, CountNoErrors as _, ErrorProbe};
        let codes = (&ErrorProbe($resp)).codes();
        if !codes.is_empty() {
            $broker.metrics().count_errors($key, codes);
        }
    }};
}

/// Decodes the body, runs the handler, charges its time to the client's request quota (`apis::quotas`),
/// encodes the response.
macro_rules! route {
    ($broker:expr, $key:expr, $header:expr, $buf:expr, $req:ty, $handler:path) => {{
        let req: $req = decode($key, &mut $buf, $header.request_api_version)?;
        let (mut resp, busy) = crate::quota::timed($handler($broker, &$header, req)).await;
        request_quota!($broker, $key, $header, &mut resp, busy);
        count_errors!($broker, $key, &resp);
        Ok(Some(encode_response(&$header, &resp)?.into()))
    }};
}

/// [`route!`] for a handler that may close the connection instead of answering.
macro_rules! route_fallible {
    ($broker:expr, $key:expr, $header:expr, $buf:expr, $req:ty, $handler:path) => {{
        let req: $req = decode($key, &mut $buf, $header.request_api_version)?;
        let (resp, busy) = crate::quota::timed($handler($broker, &$header, req)).await;
        let mut resp = resp?;
        request_quota!($broker, $key, $header, &mut resp, busy);
        count_errors!($broker, $key, &resp);
        Ok(Some(encode_response(&$header, &resp)?.into()))
    }};
}

/// Records a handler's time against request_percentage and raises the response's throttle_time_ms. Inter-broker
/// requests (WriteTxnMarkers) are exempt, as Kafka's cluster actions are.
macro_rules! request_quota {
    ($broker:expr, $key:expr, $header:expr, $resp:expr, $busy:expr) => {{
        #[allow(unused_imports)]
        use quotas::{RaiseNoThrottle as _, RaiseThrottle as _};
        if $key != ApiKey::WriteTxnMarkers {
            let ms = quotas::throttle_request($broker, &$header, $busy);
            if ms > 0 {
                (&mut quotas::ThrottleProbe($resp)).raise(ms);
            }
        }
    }};
}

pub async fn dispatch(
    broker: &Arc<Broker>,
    key: ApiKey,
    header: RequestHeader,
    mut buf: Bytes,
) -> Result<Option<Response>, Close> {
    use kafka_protocol::messages::*;
    match key {
        ApiKey::ApiVersions => route!(
            broker,
            key,
            header,
            buf,
            ApiVersionsRequest,
            api_versions::handle
        ),
        ApiKey::Metadata => route!(broker, key, header, buf, MetadataRequest, authz::metadata),
        ApiKey::DescribeCluster => route!(
            broker,
            key,
            header,
            buf,
            DescribeClusterRequest,
            authz::describe_cluster
        ),
        ApiKey::CreateTopics => route!(
            broker,
            key,
            header,
            buf,
            CreateTopicsRequest,
            authz::create_topics
        ),
        ApiKey::DeleteTopics => route!(
            broker,
            key,
            header,
            buf,
            DeleteTopicsRequest,
            authz::delete_topics
        ),
        ApiKey::CreatePartitions => route!(
            broker,
            key,
            header,
            buf,
            CreatePartitionsRequest,
            authz::create_partitions
        ),
        ApiKey::DescribeConfigs => route!(
            broker,
            key,
            header,
            buf,
            DescribeConfigsRequest,
            authz::describe_configs
        ),
        ApiKey::AlterConfigs => route!(
            broker,
            key,
            header,
            buf,
            AlterConfigsRequest,
            authz::alter_configs
        ),
        ApiKey::IncrementalAlterConfigs => {
            route!(
                broker,
                key,
                header,
                buf,
                IncrementalAlterConfigsRequest,
                authz::incremental_alter_configs
            )
        }
        ApiKey::ListOffsets => route!(
            broker,
            key,
            header,
            buf,
            ListOffsetsRequest,
            authz::list_offsets
        ),
        ApiKey::DeleteRecords => route!(
            broker,
            key,
            header,
            buf,
            DeleteRecordsRequest,
            authz::delete_records
        ),
        ApiKey::InitProducerId => route!(
            broker,
            key,
            header,
            buf,
            InitProducerIdRequest,
            authz::init_producer_id
        ),
        ApiKey::DescribeProducers => {
            route!(
                broker,
                key,
                header,
                buf,
                DescribeProducersRequest,
                authz::describe_producers
            )
        }
        ApiKey::OffsetForLeaderEpoch => {
            route!(
                broker,
                key,
                header,
                buf,
                OffsetForLeaderEpochRequest,
                authz::offset_for_leader_epoch
            )
        }
        ApiKey::ElectLeaders => route!(
            broker,
            key,
            header,
            buf,
            ElectLeadersRequest,
            authz::elect_leaders
        ),
        ApiKey::AlterPartitionReassignments => route!(
            broker,
            key,
            header,
            buf,
            AlterPartitionReassignmentsRequest,
            authz::alter_partition_reassignments
        ),
        ApiKey::ListPartitionReassignments => route!(
            broker,
            key,
            header,
            buf,
            ListPartitionReassignmentsRequest,
            authz::list_partition_reassignments
        ),
        ApiKey::DescribeQuorum => route!(
            broker,
            key,
            header,
            buf,
            DescribeQuorumRequest,
            authz::describe_quorum
        ),
        ApiKey::DescribeLogDirs => route!(
            broker,
            key,
            header,
            buf,
            DescribeLogDirsRequest,
            authz::describe_log_dirs
        ),
        ApiKey::WriteTxnMarkers => route!(
            broker,
            key,
            header,
            buf,
            WriteTxnMarkersRequest,
            authz::write_txn_markers
        ),
        ApiKey::Fetch => {
            let mut req: FetchRequest = decode(key, &mut buf, header.request_api_version)?;
            let from_follower = if header.request_api_version >= 15 {
                req.replica_state.replica_id.0 >= 0
            } else {
                req.replica_id.0 >= 0
            };
            if !from_follower {
                quotas::cap_fetch_bytes(broker, &header, &mut req);
            }
            // A session is created by a full fetch (epoch 0); from v7 only.
            let new_session = header.request_api_version >= 7 && req.session_epoch == 0;
            let ((resp, slices), busy) =
                crate::quota::timed(authz::fetch(broker, &header, req)).await;
            let (resp, slices) = if from_follower {
                (resp, slices)
            } else {
                let request_ms = quotas::throttle_request(broker, &header, busy);
                quotas::throttle_fetch(broker, &header, new_session, request_ms, resp, slices)
            };
            count_errors!(broker, key, &resp);
            fetch::encode(&header, resp, slices).await.map(Some)
        }
        ApiKey::FindCoordinator => route!(
            broker,
            key,
            header,
            buf,
            FindCoordinatorRequest,
            authz::find_coordinator
        ),
        ApiKey::JoinGroup => route!(
            broker,
            key,
            header,
            buf,
            JoinGroupRequest,
            authz::join_group
        ),
        ApiKey::SyncGroup => route!(
            broker,
            key,
            header,
            buf,
            SyncGroupRequest,
            authz::sync_group
        ),
        ApiKey::Heartbeat => route!(broker, key, header, buf, HeartbeatRequest, authz::heartbeat),
        ApiKey::LeaveGroup => route!(
            broker,
            key,
            header,
            buf,
            LeaveGroupRequest,
            authz::leave_group
        ),
        ApiKey::OffsetCommit => route!(
            broker,
            key,
            header,
            buf,
            OffsetCommitRequest,
            authz::offset_commit
        ),
        ApiKey::OffsetFetch => route!(
            broker,
            key,
            header,
            buf,
            OffsetFetchRequest,
            authz::offset_fetch
        ),
        ApiKey::OffsetDelete => route!(
            broker,
            key,
            header,
            buf,
            OffsetDeleteRequest,
            authz::offset_delete
        ),
        ApiKey::DescribeGroups => route!(
            broker,
            key,
            header,
            buf,
            DescribeGroupsRequest,
            authz::describe_groups
        ),
        ApiKey::ListGroups => route!(
            broker,
            key,
            header,
            buf,
            ListGroupsRequest,
            authz::list_groups
        ),
        ApiKey::DeleteGroups => route!(
            broker,
            key,
            header,
            buf,
            DeleteGroupsRequest,
            authz::delete_groups
        ),
        ApiKey::ConsumerGroupHeartbeat => route!(
            broker,
            key,
            header,
            buf,
            ConsumerGroupHeartbeatRequest,
            authz::consumer_group_heartbeat
        ),
        ApiKey::ConsumerGroupDescribe => route!(
            broker,
            key,
            header,
            buf,
            ConsumerGroupDescribeRequest,
            authz::consumer_group_describe
        ),
        ApiKey::AddPartitionsToTxn => route!(
            broker,
            key,
            header,
            buf,
            AddPartitionsToTxnRequest,
            authz::add_partitions_to_txn
        ),
        ApiKey::AddOffsetsToTxn => route!(
            broker,
            key,
            header,
            buf,
            AddOffsetsToTxnRequest,
            authz::add_offsets_to_txn
        ),
        ApiKey::EndTxn => route!(broker, key, header, buf, EndTxnRequest, authz::end_txn),
        ApiKey::TxnOffsetCommit => route!(
            broker,
            key,
            header,
            buf,
            TxnOffsetCommitRequest,
            authz::txn_offset_commit
        ),
        ApiKey::DescribeTransactions => route!(
            broker,
            key,
            header,
            buf,
            DescribeTransactionsRequest,
            authz::describe_transactions
        ),
        ApiKey::ListTransactions => route!(
            broker,
            key,
            header,
            buf,
            ListTransactionsRequest,
            authz::list_transactions
        ),
        ApiKey::SaslHandshake => route!(
            broker,
            key,
            header,
            buf,
            SaslHandshakeRequest,
            sasl::sasl_handshake
        ),
        ApiKey::SaslAuthenticate => route!(
            broker,
            key,
            header,
            buf,
            SaslAuthenticateRequest,
            sasl::sasl_authenticate
        ),
        ApiKey::DescribeUserScramCredentials => route!(
            broker,
            key,
            header,
            buf,
            DescribeUserScramCredentialsRequest,
            authz::describe_user_scram_credentials
        ),
        ApiKey::AlterUserScramCredentials => route!(
            broker,
            key,
            header,
            buf,
            AlterUserScramCredentialsRequest,
            authz::alter_user_scram_credentials
        ),
        ApiKey::DescribeClientQuotas => route!(
            broker,
            key,
            header,
            buf,
            DescribeClientQuotasRequest,
            authz::describe_client_quotas
        ),
        ApiKey::AlterClientQuotas => route!(
            broker,
            key,
            header,
            buf,
            AlterClientQuotasRequest,
            authz::alter_client_quotas
        ),
        ApiKey::DescribeAcls => route_fallible!(
            broker,
            key,
            header,
            buf,
            DescribeAclsRequest,
            acls::describe_acls
        ),
        ApiKey::CreateAcls => route_fallible!(
            broker,
            key,
            header,
            buf,
            CreateAclsRequest,
            acls::create_acls
        ),
        ApiKey::DeleteAcls => route_fallible!(
            broker,
            key,
            header,
            buf,
            DeleteAclsRequest,
            acls::delete_acls
        ),
        ApiKey::Produce if header.request_api_version < 3 => {
            match produce::legacy_unsupported(header.request_api_version, &buf) {
                None => Ok(None),
                Some(Err(e)) => Err(Close(e)),
                Some(Ok(body)) => {
                    let mut out = BytesMut::with_capacity(8 + body.len());
                    out.extend_from_slice(&((4 + body.len()) as u32).to_be_bytes());
                    out.extend_from_slice(&header.correlation_id.to_be_bytes());
                    out.extend_from_slice(&body);
                    Ok(Some(out.into()))
                }
            }
        }
        ApiKey::Produce => {
            let request_bytes = buf.len();
            let req: ProduceRequest = decode(key, &mut buf, header.request_api_version)?;
            let acks = req.acks;
            let (answered, busy) = crate::quota::timed(authz::produce(broker, &header, req)).await;
            let answered = answered?;
            // Recorded once the produce is done, as Kafka's response callback does: the bytes always, the time
            // unless acks=0 (exempt from the request quota in Kafka).
            let mut throttle_ms = quotas::throttle_produce(broker, &header, request_bytes);
            if acks != 0 {
                throttle_ms = throttle_ms.max(quotas::throttle_request(broker, &header, busy));
            }
            match answered {
                Some(mut resp) => {
                    resp.throttle_time_ms = resp.throttle_time_ms.max(throttle_ms);
                    count_errors!(broker, key, &resp);
                    Ok(Some(encode_response(&header, &resp)?.into()))
                }
                None => Ok(None), // acks=0
            }
        }
        other => Err(Close(format!("{other:?} is not implemented"))),
    }
}

#[cfg(test)]
mod decode_body_tests {
    use super::*;

    #[test]
    fn the_transaction_coordinators_versions_are_advertised() {
        for &(key, min, max) in crate::txn::API_VERSIONS {
            let key = ApiKey::try_from(key).expect("known api key");
            assert_eq!(supported(key), Some((min, max)), "{key:?}");
        }
    }

    #[test]
    fn every_supported_key_has_a_body_decoder() {
        let keys = SUPPORTED
            .iter()
            .map(|(k, _, max)| (*k, *max))
            .chain(CLUSTER_ONLY.iter().map(|(k, _, max)| (*k, *max)));
        for (key, version) in keys {
            let header = RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version);
            // An empty body is malformed for every key; what matters is that the key has a decoder.
            if let Err(Close(why)) = decode_body(key, &header, Bytes::new()) {
                assert!(!why.contains("not implemented"), "{key:?}: {why}");
            }
        }
    }
}
