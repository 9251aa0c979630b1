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

use annal_client::net::BoxConnection;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::apis;
use crate::security::sasl::{AuthState, Exchange, Outcome};
use crate::security::{tls, ListenerContext, AUTHENTICATION_TIMEOUT, TLS_HANDSHAKE_TIMEOUT};
use crate::{Broker, BrokerListener};

tokio::task_local! {
    /// The listener a request came in on: Metadata and FindCoordinator answer with that listener's endpoints,
    /// as Kafka does.
    pub static LISTENER: Arc<str>;
    /// The principal of the connection a request came in on (`User:ANONYMOUS`, the TLS subject, the SASL
    /// user), set for each request: what the authorizer checks (`apis::authz`).
    pub static PRINCIPAL: Arc<str>;
}

/// Why a connection is closed instead of answered.
#[derive(Debug)]
pub struct Close(pub String);

/// Serves every listener until `stop` turns true. All connections of all listeners share one byte budget for
/// partly read requests (Kafka's queued.max.request.bytes).
pub async fn serve_all(
    listeners: Vec<(BrokerListener, Arc<ListenerContext>)>,
    broker: Arc<Broker>,
    stop: watch::Receiver<bool>,
) {
    let budget_bytes = (broker.config.socket_request_max_bytes as usize).max(256 << 20);
    let budget = Arc::new(Semaphore::new(budget_bytes));
    let mut loops = JoinSet::new();
    for (listener, ctx) in listeners {
        loops.spawn(serve(
            listener,
            ctx,
            broker.clone(),
            stop.clone(),
            budget.clone(),
        ));
    }
    while loops.join_next().await.is_some() {}
}

/// Accepts connections until `stop` turns true, then waits for every connection to finish its current request.
async fn serve(
    mut listener: BrokerListener,
    ctx: Arc<ListenerContext>,
    broker: Arc<Broker>,
    mut stop: watch::Receiver<bool>,
    budget: Arc<Semaphore>,
) {
    let mut connections = JoinSet::new();
    let conn_stop = stop.clone();
    broker
        .readiness
        .kafka_listener_serving
        .store(true, std::sync::atomic::Ordering::Release);
    loop {
        // Biased (stop first, then accept, then reap): a flood of connections cannot hold off a stop, and a
        // simulated run does not depend on tokio's unseeded branch draw.
        tokio::select! {
            biased;
            _ = crate::stopped(&mut stop) => break,
            accepted = accept_one(&mut listener) => match accepted {
                Ok((stream, peer)) => {
                    let (b, s, budget, ctx) = (broker.clone(), conn_stop.clone(), budget.clone(), ctx.clone());
                    let name = ctx.name.clone();
                    connections.spawn(apis::groups::PEER.scope(peer, LISTENER.scope(name, async move {
                        let metrics = b.replica_manager().metrics().clone();
                        metrics.connections_accepted.inc();
                        metrics.connections.inc();
                        if let Err(Close(why)) = accept(stream, ctx, b, s, budget).await {
                            metrics.connections_closed_on_error.inc();
                            tracing::debug!(%peer, reason = %why, "connection closed");
                        }
                        metrics.connections.dec();
                    })));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
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

/// A connection as accepted, before any TLS.
enum Accepted {
    Tcp(TcpStream),
    Seam(BoxConnection),
}

async fn accept_one(
    listener: &mut BrokerListener,
) -> std::io::Result<(Accepted, std::net::SocketAddr)> {
    match listener {
        BrokerListener::Tcp(l) => {
            let (stream, peer) = l.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok((Accepted::Tcp(stream), peer))
        }
        BrokerListener::Seam(l) => {
            let (stream, peer) = l.accept().await?;
            Ok((Accepted::Seam(stream), peer))
        }
    }
}

/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The TLS handshake (on SSL and SASL_SSL listeners), then the connection's requests.
async fn accept(
    stream: Accepted,
    ctx: Arc<ListenerContext>,
    broker: Arc<Broker>,
    stop: watch::Receiver<bool>,
    budget: Arc<Semaphore>,
) -> Result<(), Close> {
    let stream = match stream {
        Accepted::Tcp(s) => s,
        Accepted::Seam(s) if ctx.tls.is_none() => {
            let state = if ctx.sasl.is_some() {
                AuthState::AwaitHandshake
            } else {
                AuthState::Authenticated
            };
            let principal = "User:ANONYMOUS".to_string();
            return connection(Conn::Seam(s), ctx, state, principal, broker, stop, budget).await;
        }
        Accepted::Seam(_) => {
            return Err(Close("TLS is not supported on a simulated listener".into()))
        }
    };
    let peer = stream.peer_addr().ok();
    let (conn, principal) = match &ctx.tls {
        None => (Conn::Plain(stream), "User:ANONYMOUS".to_string()),
        Some(listener) => {
            let handshake =
                tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, listener.acceptor().accept(stream))
                    .await;
            let tls = match handshake {
                Err(_) => {
                    tracing::info!(listener = %ctx.name, ?peer, "TLS handshake not completed within {} s; connection closed", TLS_HANDSHAKE_TIMEOUT.as_secs());
                    return Err(Close("TLS handshake timed out".into()));
                }
                Ok(Err(e)) => {
                    // Plaintext sent to a TLS port, an untrusted or expired client certificate, no common
                    // protocol version: the operator sees why; the client got rustls's alert.
                    tracing::info!(listener = %ctx.name, ?peer, error = %e, "TLS handshake failed; connection closed");
                    return Err(Close(format!("TLS handshake failed: {e}")));
                }
                Ok(Ok(tls)) => tls,
            };
            let principal = tls::principal_of(tls.get_ref().1.peer_certificates());
            (Conn::Tls(Box::new(tls)), principal)
        }
    };
    let state = if ctx.sasl.is_some() {
        AuthState::AwaitHandshake
    } else {
        AuthState::Authenticated
    };
    connection(conn, ctx, state, principal, broker, stop, budget).await
}

/// A client connection: plain TCP (file ranges go out with `sendfile(2)`), TLS (file ranges are read and
/// encrypted: no zero copy through a TLS record layer in user space), or a connection from a listener that is
/// not the OS's (the simulator's: file ranges are read and copied).
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Seam(BoxConnection),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Seam(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Seam(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Seam(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Seam(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What the SASL state machine wants done with a frame's answer.
struct SaslReply {
    response: Option<Response>,
    /// Close after sending the response (and the failed-authentication delay), for this reason.
    then_close: Option<String>,
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    mut stream: Conn,
    ctx: Arc<ListenerContext>,
    mut state: AuthState,
    mut principal: String,
    broker: Arc<Broker>,
    mut stop: watch::Receiver<bool>,
    budget: Arc<Semaphore>,
) -> Result<(), Close> {
    let idle = crate::config_duration(broker.config.connections_max_idle_ms);
    let max_authenticated = broker.config.socket_request_max_bytes as usize;
    let max_unauthenticated = broker
        .config
        .security
        .sasl_max_receive_size
        .min(max_authenticated);
    let auth_deadline = tokio::time::Instant::now() + AUTHENTICATION_TIMEOUT;
    // What a quota asked of this connection after its last request (crate::quota): Kafka mutes the channel.
    let throttle = Arc::new(crate::quota::ConnectionThrottle::default());
    loop {
        let authenticated = matches!(state, AuthState::Authenticated);
        let (max, wait) = if authenticated {
            (max_authenticated, idle)
        } else {
            let left = auth_deadline.saturating_duration_since(tokio::time::Instant::now());
            (max_unauthenticated, idle.min(left))
        };
        let mut size = [0u8; 4];
        tokio::select! {
            biased;
            r = tokio::time::timeout(wait, stream.read_exact(&mut size)) => match r {
                Err(_) if !authenticated => {
                    tracing::info!(listener = %ctx.name, "SASL authentication not completed within {} s; connection closed", AUTHENTICATION_TIMEOUT.as_secs());
                    return Err(Close("authentication timed out".into()));
                }
                Err(_) => return Err(Close(format!("idle for more than connections.max.idle.ms={}", idle.as_millis()))),
                Ok(Err(_)) => return Ok(()), // peer closed
                Ok(Ok(_)) => {}
            },
            _ = crate::stopped(&mut stop) => return Ok(()),
        }
        let declared = i32::from_be_bytes(size);
        if declared < 8 || declared as usize > max {
            if size[0] == 0x16 && size[1] == 0x03 && ctx.tls.is_none() {
                tracing::info!(listener = %ctx.name, "a TLS handshake arrived on a {} listener; connection closed (client: use security.protocol={} or the SSL listener)", ctx.protocol.name(), ctx.protocol.name());
                return Err(Close("TLS handshake on a listener without TLS".into()));
            }
            // Refused before allocating: the declared size is never used to reserve memory.
            return Err(Close(format!(
                "frame of {declared} bytes is outside [8, {}={max}]",
                if authenticated {
                    "socket.request.max.bytes"
                } else {
                    "sasl.server.max.receive.size"
                }
            )));
        }
        let size = declared as usize;
        let read = tokio::time::timeout(wait, read_frame(&mut stream, size, &budget)).await;
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
        let reply = if authenticated {
            let who: Arc<str> = Arc::from(principal.as_str());
            SaslReply {
                response: PRINCIPAL
                    .scope(
                        who,
                        crate::quota::CONNECTION_THROTTLE
                            .scope(throttle.clone(), handle_frame(&broker, Bytes::from(frame))),
                    )
                    .await?,
                then_close: None,
            }
        } else {
            sasl_frame(
                &broker,
                &ctx,
                &mut state,
                &mut principal,
                Bytes::from(frame),
            )
            .await?
        };
        drop(permit);
        let mute = Duration::from_millis(u64::from(throttle.take()));
        if let Some(response) = reply.response {
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
        // Muted: the next request stays unread in the socket until the throttle has passed (KIP-219: the
        // client was told throttle_time_ms and waits too; one that does not gains nothing).
        if !mute_for(mute, &mut stop).await {
            return Ok(());
        }
        if let Some(why) = reply.then_close {
            // connection.failed.authentication.delay.ms: a guesser waits before it learns to reconnect.
            tokio::time::sleep(Duration::from_millis(
                broker.config.security.failed_authentication_delay_ms,
            ))
            .await;
            return Err(Close(why));
        }
    }
}

/// Waits out a quota throttle; false if the broker is stopping meanwhile (the connection then closes).
async fn mute_for(mute: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if mute.is_zero() {
        return true;
    }
    tokio::select! {
        biased;
        _ = crate::stopped(stop) => false,
        _ = tokio::time::sleep(mute) => true,
    }
}

/// A frame on a connection that has not authenticated yet (Kafka's `SaslServerAuthenticator`).
async fn sasl_frame(
    broker: &Arc<Broker>,
    ctx: &ListenerContext,
    state: &mut AuthState,
    principal: &mut String,
    frame: Bytes,
) -> Result<SaslReply, Close> {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    let Some(settings) = ctx.sasl.as_ref() else {
        return Err(Close("SASL state on a listener without SASL".into()));
    };
    if let AuthState::Authenticating {
        exchange,
        raw: true,
    } = state
    {
        // After a v0 handshake the tokens are bare frames, and so are the answers; a failure just closes.
        let mechanism = exchange_mechanism(exchange);
        return match exchange.step(&frame, settings, |u| {
            crate::security::scram_credential(broker, u, mechanism)
        }) {
            Outcome::Continue(token) => Ok(raw_reply(token, None)),
            Outcome::Done {
                principal: p,
                token,
            } => {
                tracing::debug!(listener = %ctx.name, principal = %p, "SASL authenticated (v0 framing)");
                *principal = p;
                *state = AuthState::Authenticated;
                Ok(raw_reply(token, None))
            }
            Outcome::Failed(why) => {
                tracing::info!(listener = %ctx.name, reason = %why, "SASL authentication failed; connection closed");
                Ok(SaslReply {
                    response: None,
                    then_close: Some(why),
                })
            }
        };
    }
    let p = prefix(&frame).ok_or_else(|| Close("frame shorter than a request header".into()))?;
    let key = ApiKey::try_from(p.api_key).ok();
    let expected = match state {
        AuthState::AwaitHandshake => {
            matches!(key, Some(ApiKey::ApiVersions | ApiKey::SaslHandshake))
        }
        AuthState::Authenticating { .. } => matches!(key, Some(ApiKey::SaslAuthenticate)),
        AuthState::Authenticated => true,
    };
    if !expected {
        tracing::info!(listener = %ctx.name, api_key = p.api_key, "request before SASL authentication; connection closed");
        return Err(Close(format!(
            "unexpected request (API key {}) during SASL authentication: only ApiVersions, SaslHandshake and \
             SaslAuthenticate are allowed before it completes",
            p.api_key
        )));
    }
    if key == Some(ApiKey::ApiVersions) {
        let who: Arc<str> = Arc::from(principal.as_str());
        return Ok(SaslReply {
            response: PRINCIPAL.scope(who, handle_frame(broker, frame)).await?,
            then_close: None,
        });
    }
    let api_key = key.expect("checked above");
    let in_range =
        apis::supported_by(api_key).is_some_and(|(a, b)| (a..=b).contains(&p.api_version));
    if !in_range {
        return Err(Close(format!(
            "{api_key:?} v{} is not supported",
            p.api_version
        )));
    }
    let (header, mut body) = decode_header(api_key, p.api_version, frame)?;
    let version = header.request_api_version;
    if api_key == ApiKey::SaslHandshake {
        let req: SaslHandshakeRequest = decode(api_key, &mut body, version)?;
        let enabled: Vec<_> = settings
            .mechanisms
            .iter()
            .map(|m| apis::s(m.name()))
            .collect();
        let chosen = crate::config::SaslMechanism::parse(req.mechanism.as_str())
            .filter(|m| settings.mechanisms.contains(m));
        let mut resp = SaslHandshakeResponse::default().with_mechanisms(enabled);
        let then_close = match chosen {
            Some(m) => {
                *state = AuthState::Authenticating {
                    exchange: Exchange::new(m),
                    raw: version == 0,
                };
                None
            }
            None => {
                resp.error_code = apis::code::UNSUPPORTED_SASL_MECHANISM;
                tracing::info!(listener = %ctx.name, mechanism = %req.mechanism.as_str(), "client asked for a SASL mechanism this listener does not enable; connection closed");
                Some(format!(
                    "unsupported SASL mechanism {}",
                    req.mechanism.as_str()
                ))
            }
        };
        return Ok(SaslReply {
            response: Some(encode_response(&header, &resp)?.into()),
            then_close,
        });
    }
    let req: SaslAuthenticateRequest = decode(api_key, &mut body, version)?;
    let AuthState::Authenticating { exchange, .. } = state else {
        return Err(Close("SaslAuthenticate before SaslHandshake".into()));
    };
    let mechanism = exchange_mechanism(exchange);
    let outcome = exchange.step(&req.auth_bytes, settings, |u| {
        crate::security::scram_credential(broker, u, mechanism)
    });
    let mut resp = SaslAuthenticateResponse::default();
    let then_close = match outcome {
        Outcome::Continue(token) => {
            resp.auth_bytes = Bytes::from(token);
            None
        }
        Outcome::Done {
            principal: p,
            token,
        } => {
            tracing::debug!(listener = %ctx.name, principal = %p, mechanism = mechanism.name(), "SASL authenticated");
            resp.auth_bytes = Bytes::from(token);
            *principal = p;
            *state = AuthState::Authenticated;
            None
        }
        Outcome::Failed(why) => {
            tracing::info!(listener = %ctx.name, mechanism = mechanism.name(), reason = %why, "SASL authentication failed; connection closed");
            resp.error_code = apis::code::SASL_AUTHENTICATION_FAILED;
            resp.error_message = Some(apis::s(why.clone()));
            Some(why)
        }
    };
    Ok(SaslReply {
        response: Some(encode_response(&header, &resp)?.into()),
        then_close,
    })
}

fn exchange_mechanism(exchange: &Exchange) -> crate::config::SaslMechanism {
    match exchange {
        Exchange::Plain => crate::config::SaslMechanism::Plain,
        Exchange::Scram(s) => s.mechanism(),
    }
}

fn raw_reply(token: Vec<u8>, then_close: Option<String>) -> SaslReply {
    let mut out = BytesMut::with_capacity(4 + token.len());
    out.extend_from_slice(&(token.len() as u32).to_be_bytes());
    out.extend_from_slice(&token);
    SaslReply {
        response: Some(Response::Buf(out)),
        then_close,
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
async fn write_response(conn: &mut Conn, response: Response) -> std::io::Result<()> {
    let stream = match conn {
        Conn::Plain(s) => s,
        Conn::Tls(tls) => return write_response_copying(tls.as_mut(), response).await,
        Conn::Seam(s) => return write_response_copying(s, response).await,
    };
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

/// Writes one response through TLS or a simulated stream: file ranges are read into memory (off the async
/// workers) and written (encrypted, for TLS).
async fn write_response_copying(
    stream: &mut (impl AsyncWrite + Unpin),
    response: Response,
) -> std::io::Result<()> {
    match response {
        Response::Buf(b) => stream.write_all(&b).await?,
        Response::Pieces(pieces) => {
            for piece in pieces {
                match piece {
                    Piece::Bytes(b) => stream.write_all(&b).await?,
                    Piece::File(f) => {
                        let bytes = crate::blocking(move || f.read_to_vec()).await?;
                        stream.write_all(&bytes).await?
                    }
                }
            }
        }
    }
    // TLS buffers records; the response must leave now, not with the next one.
    stream.flush().await
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
    let bytes = crate::blocking(move || s.read_to_vec()).await?;
    stream.write_all(&bytes).await
}

/// Reads a `size`-byte frame body. Memory follows the bytes that actually arrive (a peer that declares a large
/// frame and stalls holds little), and every byte held is first taken from the shared `budget`, so many large
/// requests at once wait for memory instead of exhausting it.
async fn read_frame(
    stream: &mut (impl AsyncRead + Unpin),
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
        // A broker-only node learns the metadata log: the quorum leader pushes it to this listener. With an
        // authorizer only a principal with CLUSTER_ACTION (a super user, as Kafka requires of brokers) may.
        if let Some(denied) =
            apis::authz::inter_broker_denied(broker, "the metadata quorum's replication")
        {
            return Err(Close(denied));
        }
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
    let started = tokio::time::Instant::now();
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
