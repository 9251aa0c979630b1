//! The raft transport: openraft's RPCs as Kafka-framed requests to a peer's CONTROLLER listener.
//!
//! Request: 4-byte size, request header v2 (api key [`RAFT_RPC_API_KEY`], version 0, correlation id, client
//! id, empty tagged fields), body = the openraft request as JSON. Response: 4-byte size, correlation id, body.
//! JSON (serde_json, already a workspace dependency) is self-describing and its decoder allocates no more than
//! the bytes it reads; byte arrays cost up to 4x, which is why snapshot chunks are a fifth of a frame.

// openraft's network trait returns its `RPCError` (over 200 bytes); the helpers share that type.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::env::{BoxConnection, Listener, Network as Connector};

use super::types::TypeConfig;
use super::{Quorum, RAFT_RPC_API_KEY};

/// Idle connections kept per peer.
const IDLE_CONNECTIONS_PER_PEER_MAX: usize = 4;
/// Smallest request frame: api key, version, correlation id, client id length.
pub(crate) const REQUEST_HEADER_BYTES_MIN: usize = 10;
const CLIENT_ID: &str = "annal-raft";
/// Connections one `serve` accepts at once; more are closed at once (a quorum has a handful of peers).
const SERVED_CONNECTIONS_MAX: usize = 64;

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// The request could not be decoded.
    BadRequest(String),
}

pub(crate) fn encode_response(response: &RpcResponse) -> Vec<u8> {
    serde_json::to_vec(response).unwrap_or_else(|e| {
        serde_json::to_vec(&RpcResponse::BadRequest(format!(
            "encode the response: {e}"
        )))
        .expect("a string always encodes")
    })
}

/// Wall-clock time (ms since the epoch) of the last answer from each peer: DescribeQuorum's last contact.
#[derive(Default)]
pub(crate) struct Contacts(Mutex<BTreeMap<u64, i64>>);

impl Contacts {
    pub fn get(&self, node: u64) -> Option<i64> {
        self.0.lock().get(&node).copied()
    }
    fn touch(&self, node: u64) {
        self.0.lock().insert(node, super::now_ms());
    }
}

/// The client side: connections pooled per peer address.
#[derive(Clone)]
pub(crate) struct Network {
    shared: Arc<NetShared>,
}

struct NetShared {
    /// A `BTreeMap`, not a `HashMap`: when a node stops, its pooled connections close in this map's order,
    /// which must not depend on a per-process hash seed (the simulator replays a crash exactly).
    idle: Mutex<BTreeMap<String, Vec<BoxConnection>>>,
    connector: Arc<dyn Connector>,
    connect_timeout: Duration,
    max_rpc_bytes: usize,
    correlation: AtomicI32,
    contacts: Arc<Contacts>,
}

impl Network {
    pub fn new(
        connector: Arc<dyn Connector>,
        connect_timeout: Duration,
        max_rpc_bytes: usize,
        contacts: Arc<Contacts>,
    ) -> Network {
        Network {
            shared: Arc::new(NetShared {
                idle: Mutex::new(BTreeMap::new()),
                connector,
                connect_timeout,
                max_rpc_bytes,
                correlation: AtomicI32::new(0),
                contacts,
            }),
        }
    }
}

pub(crate) struct PeerClient {
    shared: Arc<NetShared>,
    target: u64,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            shared: self.shared.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// Why a call failed: the peer could not be reached at all, or the exchange broke.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl CallError {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<u64, BasicNode, E> {
        match self {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

fn protocol_error(message: String) -> CallError {
    CallError::Network(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        message,
    ))
}

impl PeerClient {
    async fn call(&self, request: &RpcRequest, ttl: Duration) -> Result<RpcResponse, CallError> {
        let body =
            serde_json::to_vec(request).map_err(|e| protocol_error(format!("encode: {e}")))?;
        let correlation_id = self.shared.correlation.fetch_add(1, Ordering::Relaxed);
        let frame = encode_request_frame(correlation_id, &body);
        if frame.len() - 4 > self.shared.max_rpc_bytes {
            return Err(protocol_error(format!(
                "a raft RPC of {} bytes exceeds max_rpc_bytes {}",
                frame.len() - 4,
                self.shared.max_rpc_bytes
            )));
        }
        let mut stream = self.checkout().await?;
        let exchange = async {
            stream.write_all(&frame).await?;
            read_response(&mut stream, correlation_id, self.shared.max_rpc_bytes).await
        };
        let body = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Err(CallError::Network(e)),
            Err(_) => {
                return Err(CallError::Network(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "raft RPC to node {} at {} timed out after {ttl:?}",
                        self.target, self.addr
                    ),
                )))
            }
        };
        self.checkin(stream);
        self.shared.contacts.touch(self.target);
        serde_json::from_slice(&body)
            .map_err(|e| protocol_error(format!("decode the response: {e}")))
    }

    async fn checkout(&self) -> Result<BoxConnection, CallError> {
        if let Some(stream) = self
            .shared
            .idle
            .lock()
            .get_mut(&self.addr)
            .and_then(Vec::pop)
        {
            return Ok(stream);
        }
        let connect = self.shared.connector.connect(self.addr.clone());
        match tokio::time::timeout(self.shared.connect_timeout, connect).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(CallError::Unreachable(e)),
            Err(_) => Err(CallError::Unreachable(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "connecting to node {} at {} timed out",
                    self.target, self.addr
                ),
            ))),
        }
    }

    fn checkin(&self, stream: BoxConnection) {
        let mut idle = self.shared.idle.lock();
        let pool = idle.entry(self.addr.clone()).or_default();
        if pool.len() < IDLE_CONNECTIONS_PER_PEER_MAX {
            pool.push(stream);
        }
    }

    fn remote<T, E: std::error::Error>(
        &self,
        result: Result<T, RaftError<u64, E>>,
    ) -> Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

fn unexpected<E: std::error::Error>(response: RpcResponse) -> RPCError<u64, BasicNode, E> {
    let what = match response {
        RpcResponse::BadRequest(reason) => format!("the peer refused the request: {reason}"),
        _ => "the peer answered a different RPC".to_string(),
    };
    protocol_error(what).into_rpc()
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self
            .call(&RpcRequest::AppendEntries(rpc), option.hard_ttl())
            .await
        {
            Ok(RpcResponse::AppendEntries(r)) => self.remote(r),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        match self
            .call(&RpcRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(RpcResponse::InstallSnapshot(r)) => self.remote(r),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.call(&RpcRequest::Vote(rpc), option.hard_ttl()).await {
            Ok(RpcResponse::Vote(r)) => self.remote(r),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e.into_rpc()),
        }
    }
}

/// size, api key, version 0, correlation id, client id (int16 length + bytes), empty tagged fields, body.
pub(crate) fn encode_request_frame(correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut frame =
        Vec::with_capacity(4 + REQUEST_HEADER_BYTES_MIN + CLIENT_ID.len() + 1 + body.len());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&RAFT_RPC_API_KEY.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    frame.extend_from_slice(CLIENT_ID.as_bytes());
    frame.push(0); // tagged fields: none
    frame.extend_from_slice(body);
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

pub(crate) async fn read_frame<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    min: usize,
    max: usize,
) -> std::io::Result<Vec<u8>> {
    let size = stream.read_i32().await?;
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if size < min || size > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {size} bytes (allowed {min}..={max}; raise max_rpc_bytes if it is legitimate)"),
        ));
    }
    // Memory follows the bytes that arrive, not the size a peer claims.
    let mut frame = Vec::with_capacity(size.min(64 * 1024));
    (&mut *stream)
        .take(size as u64)
        .read_to_end(&mut frame)
        .await?;
    if frame.len() != size {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame cut at {} of {size} bytes", frame.len()),
        ));
    }
    Ok(frame)
}

async fn read_response<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    correlation_id: i32,
    max: usize,
) -> std::io::Result<Vec<u8>> {
    let mut frame = read_frame(stream, 4, max).await?;
    let got = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if got != correlation_id {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("response for correlation id {got}, expected {correlation_id}"),
        ));
    }
    frame.drain(..4);
    Ok(frame)
}

/// A parsed request header v2.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Splits a request frame (without its size) into its header and body. Never panics.
pub(crate) fn parse_request(frame: &[u8]) -> Result<(RequestHeader, &[u8]), String> {
    let fixed = frame.get(..10).ok_or("request shorter than its header")?;
    let header = RequestHeader {
        api_key: i16::from_be_bytes([fixed[0], fixed[1]]),
        api_version: i16::from_be_bytes([fixed[2], fixed[3]]),
        correlation_id: i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
    };
    let client_id_len = i16::from_be_bytes([fixed[8], fixed[9]]);
    let mut at = 10 + usize::try_from(client_id_len).unwrap_or(0); // -1 is a null client id
    if at > frame.len() {
        return Err("client id longer than the request".into());
    }
    let (tagged_count, n) = read_uvarint(&frame[at..]).ok_or("bad tagged fields")?;
    at += n;
    for _ in 0..tagged_count {
        let (_tag, n) =
            read_uvarint(frame.get(at..).ok_or("truncated tagged field")?).ok_or("bad tag")?;
        at += n;
        let (size, n) =
            read_uvarint(frame.get(at..).ok_or("truncated tagged field")?).ok_or("bad tag size")?;
        at = at
            .checked_add(n)
            .and_then(|a| a.checked_add(size as usize))
            .filter(|&a| a <= frame.len())
            .ok_or("tagged field longer than the request")?;
    }
    Ok((header, &frame[at..]))
}

fn read_uvarint(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u32 = 0;
    for (i, &b) in bytes.iter().take(5).enumerate() {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Serves raft RPCs on `listener` until `stop` turns true (or its sender is dropped). For tests and for a
/// controller-only node; a broker routes [`RAFT_RPC_API_KEY`] on its CONTROLLER listener to
/// [`Quorum::handle_rpc`] instead.
pub async fn serve<L: Listener>(
    mut listener: L,
    quorum: Arc<Quorum>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(SERVED_CONNECTIONS_MAX));
    loop {
        if *stop.borrow() {
            return;
        }
        // Biased: the same branch wins every time two are ready, so a simulated run does not depend on
        // tokio's unseeded fairness draw; stopping comes first.
        tokio::select! {
            biased;
            changed = stop.changed() => if changed.is_err() { return },
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "too many raft connections; closing this one");
                        continue;
                    };
                    let (quorum, stop) = (quorum.clone(), stop.clone());
                    tokio::spawn(async move {
                        serve_connection(stream, quorum, stop).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a raft connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn serve_connection(
    mut stream: BoxConnection,
    quorum: Arc<Quorum>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let max = quorum.max_rpc_bytes();
    loop {
        let frame = tokio::select! {
            biased;
            _ = stop.changed() => return,
            frame = read_frame(&mut stream, REQUEST_HEADER_BYTES_MIN, max) => frame,
        };
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    tracing::debug!(error = %e, "closing a raft connection");
                }
                return;
            }
        };
        let (header, body) = match parse_request(&frame) {
            Ok((h, b)) if h.api_key == RAFT_RPC_API_KEY && h.api_version == 0 => (h, b),
            Ok((h, _)) => {
                tracing::debug!(
                    api_key = h.api_key,
                    version = h.api_version,
                    "not a raft request; closing"
                );
                return;
            }
            Err(reason) => {
                tracing::debug!(%reason, "malformed raft request; closing");
                return;
            }
        };
        let response = quorum.handle_rpc(body).await;
        let mut out = Vec::with_capacity(8 + response.len());
        out.extend_from_slice(&((response.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(&header.correlation_id.to_be_bytes());
        out.extend_from_slice(&response);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frames_parse_and_garbage_is_an_error() {
        let frame = encode_request_frame(7, b"{body}");
        let (header, body) = parse_request(&frame[4..]).unwrap();
        assert_eq!(
            header,
            RequestHeader {
                api_key: RAFT_RPC_API_KEY,
                api_version: 0,
                correlation_id: 7
            }
        );
        assert_eq!(body, b"{body}");
        for cut in 4..frame.len() - 6 {
            assert!(parse_request(&frame[4..cut]).is_err(), "cut at {cut}");
        }
        let mut huge_tag = frame[4..frame.len() - 6].to_vec();
        *huge_tag.last_mut().unwrap() = 1;
        huge_tag.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0x0f]);
        assert!(parse_request(&huge_tag).is_err());
    }
}
