//! Connections and framing: accept, read size-prefixed frames within limits, decode headers, dispatch to
//! [`crate::apis`], write responses in request order.
//!
//! Each connection is served by one task that reads a request, answers it, and reads the next: requests
//! pipelined by a client wait in the socket buffer and are answered in order (Kafka also processes one request
//! per connection at a time). Limits: a frame larger than `socket.request.max.bytes` is refused before any
//! allocation and the connection closed; all frames being read at once share a byte budget; a connection idle
//! for `connections.max.idle.ms` is closed; a frame that does not decode closes its connection only.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::apis;
use crate::Broker;

/// Why a connection is closed instead of answered.
#[derive(Debug)]
pub struct Close(pub String);

/// Accepts connections until `stop` turns true, then waits for every connection to finish its current request.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    // All connections together may hold this many bytes of partly read requests (Kafka's queued.max.request.bytes).
    let budget_bytes = (broker.config.socket_request_max_bytes as usize).max(256 << 20);
    let budget = Arc::new(Semaphore::new(budget_bytes));
    let mut connections = JoinSet::new();
    let conn_stop = stop.clone();
    broker
        .readiness
        .kafka_listener_serving
        .store(true, std::sync::atomic::Ordering::Release);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (b, s, budget) = (broker.clone(), conn_stop.clone(), budget.clone());
                    connections.spawn(apis::groups::PEER.scope(peer, async move {
                        let metrics = b.replica_manager().metrics().clone();
                        metrics.connections_accepted.inc();
                        metrics.connections.inc();
                        if let Err(Close(why)) = connection(stream, b, s, budget).await {
                            metrics.connections_closed_on_error.inc();
                            tracing::debug!(%peer, reason = %why, "connection closed");
                        }
                        metrics.connections.dec();
                    }));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = crate::stopped(&mut stop) => break,
        }
    }
    drop(listener);
    broker
        .readiness
        .kafka_listener_serving
        .store(false, std::sync::atomic::Ordering::Release);
    tracing::info!(
        connections = connections.len(),
        "stopped accepting; finishing in-flight requests"
    );
    // A request in flight finishes; a peer that stops reading its response cannot hold the shutdown forever.
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "connections still busy after the shutdown grace period; closing them"
        );
        connections.shutdown().await;
    }
}

/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

async fn connection(
    mut stream: TcpStream,
    broker: Arc<Broker>,
    mut stop: watch::Receiver<bool>,
    budget: Arc<Semaphore>,
) -> Result<(), Close> {
    let idle = crate::config_duration(broker.config.connections_max_idle_ms);
    let max = broker.config.socket_request_max_bytes as usize;
    loop {
        let mut size = [0u8; 4];
        tokio::select! {
            r = tokio::time::timeout(idle, stream.read_exact(&mut size)) => match r {
                Err(_) => return Err(Close(format!("idle for more than connections.max.idle.ms={}", idle.as_millis()))),
                Ok(Err(_)) => return Ok(()), // peer closed
                Ok(Ok(_)) => {}
            },
            _ = crate::stopped(&mut stop) => return Ok(()),
        }
        let size = i32::from_be_bytes(size);
        if size < 8 || size as usize > max {
            // Refused before allocating: the declared size is never used to reserve memory.
            return Err(Close(format!(
                "frame of {size} bytes is outside [8, socket.request.max.bytes={max}]"
            )));
        }
        let size = size as usize;
        let read = tokio::time::timeout(idle, read_frame(&mut stream, size, &budget)).await;
        let (frame, permit) = match read {
            Err(_) => {
                return Err(Close(
                    "frame not completed within connections.max.idle.ms".into(),
                ))
            }
            Ok(r) => r?,
        };
        let metrics = broker.replica_manager().metrics();
        metrics.network_received_bytes.inc_by(4 + size as u64);
        let response = handle_frame(&broker, Bytes::from(frame)).await?;
        drop(permit);
        if let Some(response) = response {
            metrics.network_sent_bytes.inc_by(response.len() as u64);
            match tokio::time::timeout(idle, write_response(&mut stream, response)).await {
                Err(_) => {
                    return Err(Close(
                        "client did not read its response within connections.max.idle.ms".into(),
                    ))
                }
                Ok(Err(e)) => return Err(Close(format!("write failed: {e}"))),
                Ok(Ok(())) => {}
            }
        }
    }
}

/// A response frame: one buffer, or (zero-copy Fetch) buffers and ranges of segment files that `sendfile(2)`
/// sends straight from the page cache, in order. The frame's size prefix (in the first buffer) covers them all.
pub enum Response {
    Buf(BytesMut),
    Pieces(Vec<Piece>),
}

pub enum Piece {
    Bytes(Bytes),
    File(annal_log::FileSlice),
}

impl Response {
    /// Bytes on the wire, size prefix included.
    pub fn len(&self) -> usize {
        match self {
            Response::Buf(b) => b.len(),
            Response::Pieces(pieces) => pieces
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.len(),
                    Piece::File(f) => f.len(),
                })
                .sum(),
        }
    }
}

impl From<BytesMut> for Response {
    fn from(b: BytesMut) -> Response {
        Response::Buf(b)
    }
}

/// Writes one response. File pieces go with `sendfile(2)` (Linux); a failure midway closes the connection
/// (the frame is incomplete), as any write failure does.
async fn write_response(stream: &mut TcpStream, response: Response) -> std::io::Result<()> {
    match response {
        Response::Buf(b) => stream.write_all(&b).await,
        Response::Pieces(pieces) => {
            let corked = cork(stream, true);
            for piece in pieces {
                match piece {
                    Piece::Bytes(b) => stream.write_all(&b).await?,
                    Piece::File(f) => send_file(stream, &f).await?,
                }
            }
            if corked {
                cork(stream, false);
            }
            Ok(())
        }
    }
}

/// TCP_CORK: the small buffers between file ranges leave in full packets with the file bytes, not alone
/// (the socket has TCP_NODELAY). Best effort.
#[cfg(target_os = "linux")]
fn cork(stream: &TcpStream, on: bool) -> bool {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = on.into();
    // SAFETY: setsockopt on a valid socket fd with a c_int option value of the given size.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn cork(_stream: &TcpStream, _on: bool) -> bool {
    false
}

/// Sends a file range with `sendfile(2)`: partial writes continue where they stopped, EAGAIN waits for the socket
/// to become writable. A file shorter than the range (truncated meanwhile) is an error.
#[cfg(target_os = "linux")]
async fn send_file(stream: &TcpStream, slice: &annal_log::FileSlice) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (file, position, len) = slice.file_range();
    let (mut offset, mut left) = (position as libc::off_t, len);
    while left > 0 {
        stream.writable().await?;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            // SAFETY: both fds are open for the duration of the call; `offset` is a valid off_t that sendfile
            // advances by the bytes it sent.
            let n = unsafe {
                libc::sendfile(
                    stream.as_raw_fd(),
                    file.as_raw_fd(),
                    &mut offset,
                    left.min(1 << 30),
                )
            };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "segment file ended inside a fetched range",
                ))
            }
            Ok(n) => left -= n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
async fn send_file(stream: &mut TcpStream, slice: &annal_log::FileSlice) -> std::io::Result<()> {
    let s = slice.clone();
    let bytes = tokio::task::spawn_blocking(move || s.read_to_vec())
        .await
        .map_err(std::io::Error::other)??;
    stream.write_all(&bytes).await
}

/// Reads a `size`-byte frame body. Memory follows the bytes that actually arrive (a peer that declares a large
/// frame and stalls holds little), and every byte held is first taken from the shared `budget`, so many large
/// requests at once wait for memory instead of exhausting it.
async fn read_frame(
    stream: &mut TcpStream,
    size: usize,
    budget: &Arc<Semaphore>,
) -> Result<(Vec<u8>, Option<tokio::sync::OwnedSemaphorePermit>), Close> {
    const CHUNK: usize = 64 * 1024;
    let mut frame: Vec<u8> = Vec::with_capacity(size.min(CHUNK));
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while frame.len() < size {
        let want = (size - frame.len()).min(CHUNK);
        let permit = budget
            .clone()
            .acquire_many_owned(want as u32)
            .await
            .map_err(|_| Close("shutting down".into()))?;
        match held.as_mut() {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        frame.reserve(want);
        let n = (&mut *stream)
            .take(want as u64)
            .read_buf(&mut frame)
            .await
            .map_err(|e| Close(format!("read failed: {e}")))?;
        if n == 0 {
            return Err(Close(format!(
                "truncated frame: {} of {size} bytes",
                frame.len()
            )));
        }
        // Give back what was reserved for bytes that did not arrive yet.
        if n < want {
            if let Some(h) = held.as_mut() {
                if let Some(unused) = h.split(want - n) {
                    drop(unused);
                }
            }
        }
    }
    Ok((frame, held))
}

/// The fields every request header starts with, read without trusting the rest of the frame.
pub struct Prefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn prefix(frame: &[u8]) -> Option<Prefix> {
    if frame.len() < 8 {
        return None;
    }
    Some(Prefix {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    })
}

/// Decodes one request and answers it. `Ok(None)`: no response (Produce with acks=0). `Err`: close the connection.
pub async fn handle_frame(broker: &Arc<Broker>, frame: Bytes) -> Result<Option<Response>, Close> {
    let p = prefix(&frame).ok_or_else(|| Close("frame shorter than a request header".into()))?;
    if p.api_key == annal_metadata::raft::RAFT_RPC_API_KEY {
        // A broker-only node learns the metadata log: the quorum leader pushes it to this listener.
        return raft_rpc(broker, frame).await.map(Some);
    }
    let Ok(api_key) = ApiKey::try_from(p.api_key) else {
        // No response schema exists for an unknown key; Kafka closes the connection too.
        return Err(Close(format!("unknown API key {}", p.api_key)));
    };
    let supported = apis::supported_by(api_key);
    let in_range = supported.is_some_and(|(min, max)| (min..=max).contains(&p.api_version));
    if !in_range {
        if api_key == ApiKey::ApiVersions {
            // KIP-511: always answer, with a v0 body carrying UNSUPPORTED_VERSION and our ranges.
            return Ok(Some(
                apis::api_versions::unsupported_version_response(p.correlation_id).into(),
            ));
        }
        // Clients only send versions we advertise; Kafka disconnects on anything else, and so do we.
        return Err(Close(format!(
            "{api_key:?} v{} is not supported (supported: {})",
            p.api_version,
            match supported {
                Some((a, b)) => format!("v{a}-v{b}"),
                None => "none".into(),
            }
        )));
    }
    let (header, buf) = decode_header(api_key, p.api_version, frame)?;
    let started = std::time::Instant::now();
    let answered = apis::dispatch(broker, api_key, header, buf).await;
    broker
        .replica_manager()
        .metrics()
        .observe_request(api_key, started.elapsed());
    answered
}

fn decode_header(
    api_key: ApiKey,
    api_version: i16,
    mut frame: Bytes,
) -> Result<(RequestHeader, Bytes), Close> {
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| Close(format!("malformed {api_key:?} request header: {e}")))?;
    Ok((header, frame))
}

/// Decodes a request frame (without its size prefix) as [`handle_frame`] does on a zero-configuration node, up to
/// the handler: API key and version checks, header, body. No broker, no socket: this is the fuzz targets' entry
/// (fuzz/). `Ok` is a frame the broker would hand to a handler (or answer, for an unsupported ApiVersions);
/// `Err` is one that closes the connection, with the reason.
pub fn decode_request_frame(frame: Bytes) -> Result<Option<RequestHeader>, String> {
    let p = prefix(&frame).ok_or("frame shorter than a request header")?;
    let api_key =
        ApiKey::try_from(p.api_key).map_err(|_| format!("unknown API key {}", p.api_key))?;
    let in_range = apis::supported(api_key).is_some_and(|(a, b)| (a..=b).contains(&p.api_version));
    if !in_range {
        if api_key == ApiKey::ApiVersions {
            return Ok(None);
        }
        return Err(format!("{api_key:?} v{} is not supported", p.api_version));
    }
    let (header, body) = decode_header(api_key, p.api_version, frame).map_err(|Close(e)| e)?;
    apis::decode_body(api_key, &header, body).map_err(|Close(e)| e)?;
    Ok(Some(header))
}

/// A quorum RPC on the broker listener (the leader feeding a broker-only learner).
async fn raft_rpc(broker: &Arc<Broker>, mut frame: Bytes) -> Result<Response, Close> {
    let cluster = broker.cluster();
    let header = RequestHeader::decode(&mut frame, 2)
        .map_err(|e| Close(format!("malformed raft request header: {e}")))?;
    let body = cluster.node().handle_raft_rpc(&frame).await;
    let mut out = BytesMut::with_capacity(8 + body.len());
    out.extend_from_slice(&((4 + body.len()) as u32).to_be_bytes());
    out.extend_from_slice(&header.correlation_id.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(Response::Buf(out))
}

/// Decodes a request body; a failure closes the connection.
pub fn decode<T: Decodable>(api_key: ApiKey, buf: &mut Bytes, version: i16) -> Result<T, Close> {
    T::decode(buf, version)
        .map_err(|e| Close(format!("malformed {api_key:?} v{version} request: {e}")))
}

/// Encodes a response frame: size, response header, body.
pub fn encode_response<T: Encodable + HeaderVersion>(
    header: &RequestHeader,
    body: &T,
) -> Result<BytesMut, Close> {
    let version = header.request_api_version;
    let header_version = T::header_version(version);
    let mut resp_header = ResponseHeader::default();
    resp_header.correlation_id = header.correlation_id;
    // Sized up front: a fetch response carries megabytes of records, and growing the buffer by doubling would
    // copy them again at every step.
    let body_size = body.compute_size(version).unwrap_or(0);
    let mut out = BytesMut::with_capacity(4 + 16 + body_size);
    out.extend_from_slice(&[0, 0, 0, 0]);
    resp_header
        .encode(&mut out, header_version)
        .and_then(|_| body.encode(&mut out, version))
        .map_err(|e| {
            Close(format!(
                "cannot encode the response to correlation id {}: {e}",
                header.correlation_id
            ))
        })?;
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}
