//! The CONTROLLER listener: what a metadata node answers on `controller.listener.names`.
//!
//! Three kinds of traffic share it, all in Kafka's request framing: the quorum's own RPCs (the private
//! [`RAFT_RPC_API_KEY`]), the controller APIs brokers send (BrokerRegistration, BrokerHeartbeat, the forwarded
//! admin requests), and the two APIs tools use against a controller directly (ApiVersions, DescribeQuorum, as
//! `kafka-metadata-quorum --bootstrap-controller` does). Bounded: at most [`CONNECTIONS_MAX`] connections, frames
//! up to the quorum's `max_rpc_bytes`, one request at a time per connection, and an idle connection is closed.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_quorum_response::{PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeQuorumResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::controller;
use crate::env::{BoxConnection, Listener};
use crate::node::MetadataNode;
use crate::raft::transport::{parse_request, read_frame, REQUEST_HEADER_BYTES_MIN};
use crate::raft::{QuorumStatus, RAFT_RPC_API_KEY};

/// Connections the listener serves at once (peers and brokers; a cluster has a handful of each).
pub const CONNECTIONS_MAX: usize = 256;
/// Largest request frame: raft entries and snapshot chunks are bounded well below it.
pub const FRAME_BYTES_MAX: usize = 16 << 20;
/// A connection silent for this long is closed (brokers heartbeat every couple of seconds).
const IDLE_MAX: Duration = Duration::from_secs(600);

/// The metadata log's name in DescribeQuorum, as Kafka reports it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

const UNSUPPORTED_VERSION: i16 = 35;

/// Serves the controller listener until `stop` turns true. `listener` is a `tokio::net::TcpListener` in
/// production, a simulated one in the simulator (`crate::env`).
pub async fn serve<L: Listener>(
    mut listener: L,
    node: Arc<MetadataNode>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        // Biased: stopping wins, and a simulated run does not depend on tokio's unseeded fairness draw.
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, limit = CONNECTIONS_MAX, "controller listener is at its connection limit; closing a new connection");
                        continue;
                    };
                    let (node, stop) = (node.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut heartbeats_of = None;
                        let stopping = match connection(stream, &node, stop, &mut heartbeats_of).await {
                            Ok(stopping) => stopping,
                            Err(why) => {
                                tracing::debug!(%peer, reason = %why, "controller connection closed");
                                false
                            }
                        };
                        if let (Some(broker_id), false) = (heartbeats_of, stopping) {
                            node.broker_connection_closed(broker_id);
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept on the controller listener failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves one connection; `Ok(true)` when it ended because this node is stopping. `heartbeats_of` is set to the
/// broker whose heartbeats the connection carried, if any: when such a connection ends, the broker's process may
/// be gone.
async fn connection(
    mut stream: BoxConnection,
    node: &MetadataNode,
    mut stop: watch::Receiver<bool>,
    heartbeats_of: &mut Option<i32>,
) -> Result<bool, String> {
    loop {
        let frame = tokio::select! {
            biased;
            _ = stopped(&mut stop) => return Ok(true),
            f = tokio::time::timeout(IDLE_MAX, read_frame(&mut stream, REQUEST_HEADER_BYTES_MIN - 2, FRAME_BYTES_MAX)) => f,
        };
        let frame = match frame {
            Err(_) => return Err("idle".into()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(f)) => f,
        };
        let (out, heartbeat_broker) = answer(node, Bytes::from(frame)).await?;
        if heartbeat_broker.is_some() {
            *heartbeats_of = heartbeat_broker;
        }
        stream
            .write_all(&out)
            .await
            .map_err(|e| format!("write failed: {e}"))?;
    }
}

/// One request frame (without its size) to one response frame (with its size), and the broker id of a
/// BrokerHeartbeat request. `Err` closes the connection.
async fn answer(node: &MetadataNode, frame: Bytes) -> Result<(Vec<u8>, Option<i32>), String> {
    let api_key = frame
        .get(..2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or("frame shorter than a request header")?;
    if api_key == RAFT_RPC_API_KEY {
        let (header, body) = parse_request(&frame)?;
        let response = node.handle_raft_rpc(body).await;
        return Ok((frame_response(header.correlation_id, &[], &response), None));
    }
    let key = ApiKey::try_from(api_key).map_err(|_| format!("unknown API key {api_key}"))?;
    let version = frame
        .get(2..4)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or("frame shorter than a request header")?;
    let correlation_id = frame
        .get(4..8)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or("frame shorter than a request header")?;
    let supported = supported_apis()
        .into_iter()
        .find(|(k, _, _)| *k == api_key)
        .map(|(_, min, max)| (min, max));
    let in_range = supported.is_some_and(|(min, max)| (min..=max).contains(&version));
    if !in_range {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer with a v0 body carrying UNSUPPORTED_VERSION and our ranges.
            let body = encode(&api_versions(UNSUPPORTED_VERSION), 0)?;
            return Ok((frame_response(correlation_id, &[], &body), None));
        }
        return Err(format!(
            "{key:?} v{version} is not served on the controller listener"
        ));
    }
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
        .map_err(|e| format!("malformed {key:?} request header: {e}"))?;
    // BrokerHeartbeat's body starts with BrokerId (int32) in every version.
    let heartbeat_broker = (key == ApiKey::BrokerHeartbeat)
        .then(|| {
            buf.get(..4)
                .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        })
        .flatten();
    let body = match key {
        ApiKey::ApiVersions => encode(&api_versions(0), version)?,
        ApiKey::DescribeQuorum => encode(&describe_quorum(&node.quorum_status()), version)?,
        _ => node
            .handle_controller_request(api_key, version, buf)
            .await
            .map_err(|e| match e {
                controller::HandleError::UnsupportedApi(_) => {
                    format!("{key:?} is not served: this node is not a controller")
                }
                other => other.to_string(),
            })?
            .to_vec(),
    };
    let mut head = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(&mut head, key.response_header_version(version))
        .map_err(|e| format!("cannot encode a response header: {e}"))?;
    Ok((frame_response_raw(&head, &body), heartbeat_broker))
}

/// What the controller listener serves: (api key, min, max).
pub fn supported_apis() -> Vec<(i16, i16, i16)> {
    let mut apis = controller::supported_apis();
    apis.push((ApiKey::ApiVersions as i16, 0, 4));
    apis.push((ApiKey::DescribeQuorum as i16, 0, 2));
    apis
}

fn api_versions(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            supported_apis()
                .into_iter()
                .map(|(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(k)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
        .with_finalized_features_epoch(-1)
}

/// DescribeQuorum from the quorum's status: leader, epoch (the raft term), high watermark (the commit index),
/// voters and observers with how far each has replicated. Brokers answer it with the same function.
pub fn describe_quorum(status: &QuorumStatus) -> DescribeQuorumResponse {
    let hw = status.high_watermark.map_or(-1, |h| h as i64);
    let replica = |r: &crate::raft::ReplicaStatus| {
        let log_end = r.matched_index.map_or(-1, |m| m as i64 + 1);
        ReplicaState::default()
            .with_replica_id(BrokerId(r.node_id as i32))
            .with_log_end_offset(log_end)
            .with_last_fetch_timestamp(r.last_contact_ms.unwrap_or(-1))
            .with_last_caught_up_timestamp(if log_end > hw {
                r.last_contact_ms.unwrap_or(-1)
            } else {
                -1
            })
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(status.leader_id.map_or(-1, |l| l as i32)))
        .with_leader_epoch(i32::try_from(status.term).unwrap_or(i32::MAX))
        .with_high_watermark(hw)
        .with_current_voters(status.voters.iter().map(replica).collect())
        .with_observers(status.observers.iter().map(replica).collect());
    DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
        .with_partitions(vec![partition])])
}

fn encode<T: Encodable>(message: &T, version: i16) -> Result<Vec<u8>, String> {
    let mut buf = BytesMut::new();
    message
        .encode(&mut buf, version)
        .map_err(|e| format!("cannot encode a v{version} response: {e}"))?;
    Ok(buf.to_vec())
}

fn frame_response(correlation_id: i32, head_extra: &[u8], body: &[u8]) -> Vec<u8> {
    let mut head = correlation_id.to_be_bytes().to_vec();
    head.extend_from_slice(head_extra);
    frame_response_raw(&head, body)
}

fn frame_response_raw(head: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + head.len() + body.len());
    out.extend_from_slice(&((head.len() + body.len()) as u32).to_be_bytes());
    out.extend_from_slice(head);
    out.extend_from_slice(body);
    out
}
