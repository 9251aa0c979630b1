//! One TCP connection to one broker: framing, correlation ids, and API version negotiation.
//!
//! Requests are sent one at a time (no pipelining), so a response is always the answer to the request just
//! written; the correlation id is still checked so a confused broker is reported, not trusted.
//!
//! A connection that fails mid-exchange (I/O error, timeout, oversized or mismatched response) no longer knows
//! where the next response starts in the byte stream, so it closes itself: the socket is dropped and every later
//! request fails at once saying why. Reconnecting is the caller's decision (`Connection::connect` again), since
//! only the caller knows whether to retry, back off or look the broker up anew.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter, ReadHalf, WriteHalf};

use crate::net::{BoxConnection, Network, TokioNetwork};

/// UNSUPPORTED_VERSION: the answer to an ApiVersions request newer than the broker knows (KIP-511).
const UNSUPPORTED_VERSION: i16 = 35;

/// The newest ApiVersions request we can send; older brokers tell us theirs (see `negotiate`).
const API_VERSIONS_MAX: i16 = 4;

/// Read and write buffer size per connection.
const IO_BUFFER_BYTES: usize = 64 * 1024;

/// How a [`Connection`] behaves. `Default` is what the `annal` CLI uses.
#[derive(Clone)]
pub struct ConnectionOptions {
    /// Bound on the TCP connect (the ApiVersions handshake after it is bounded by `request_timeout`).
    pub connect_timeout: Duration,
    /// How long to wait for any one response. The CLI's default is longer than the 30 s it gives the broker for
    /// Produce and admin requests, so a slow broker answers with its own timeout error before we give up on it.
    /// A request that times out closes the connection (its answer may still arrive and would be misread).
    pub request_timeout: Duration,
    /// Largest response frame accepted; a bigger one closes the connection with an error naming this limit.
    /// It keeps a bad length prefix from allocating gigabytes. Keep it above the `max_bytes` of any Fetch sent.
    pub max_response_bytes: usize,
    /// The client id in every request header (brokers log it and show it in group member lists).
    pub client_id: String,
    /// Testing aid: `Produce=12,Fetch=12` makes the connection behave as if the broker supported at most those
    /// versions, to exercise older protocol versions against a modern broker.
    pub version_caps: Option<String>,
    /// How the connection is opened: the operating system's TCP ([`TokioNetwork`]) unless a node runs inside
    /// the deterministic simulator ([`crate::net`]).
    pub network: Arc<dyn Network>,
    /// Authenticate every connection with SASL right after ApiVersions (a SASL_PLAINTEXT or SASL_SSL listener).
    pub sasl: Option<crate::sasl::SaslCredentials>,
    /// Speak TLS (an SSL or SASL_SSL listener): the handshake runs right after the TCP connect, within
    /// `connect_timeout`.
    pub tls: Option<crate::tls::ClientTls>,
}

impl std::fmt::Debug for ConnectionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("client_id", &self.client_id)
            .field("version_caps", &self.version_caps)
            .field("sasl", &self.sasl)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Default for ConnectionOptions {
    fn default() -> ConnectionOptions {
        ConnectionOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_response_bytes: 256 * 1024 * 1024,
            client_id: "annal-cli".to_string(),
            version_caps: None,
            network: Arc::new(TokioNetwork),
            sasl: None,
            tls: None,
        }
    }
}

impl ConnectionOptions {
    /// The defaults, plus version caps from `ANNAL_CLIENT_MAX_VERSIONS` (e.g. `Produce=12,Fetch=12`) if set.
    pub fn from_env() -> ConnectionOptions {
        ConnectionOptions {
            version_caps: std::env::var("ANNAL_CLIENT_MAX_VERSIONS").ok(),
            ..ConnectionOptions::default()
        }
    }
}

/// One open connection to a broker, with the API versions the broker advertised.
///
/// `send` picks the highest version both sides speak; `send_version` uses the caller's. Any request type from
/// `kafka_protocol::messages` works: the API key, header versions and response type come from its [`Request`]
/// impl.
///
/// A failure after a request is written (I/O error, `request_timeout`, a frame over `max_response_bytes`, a
/// wrong correlation id) closes the connection: [`Connection::is_closed`] turns true and every later request
/// fails at once with the original reason. Reconnect with [`Connection::connect_with`]. Errors before anything
/// is written (no common version, encoding), and a response that arrives whole but does not decode, leave the
/// connection usable.
pub struct Connection {
    addr: String,
    options: ConnectionOptions,
    /// `None` once the connection has been closed after an error.
    io: Option<Io>,
    /// Why the connection was closed, for the errors of later requests.
    closed_because: Option<String>,
    next_correlation_id: i32,
    /// What the broker advertised in ApiVersions: api key -> (min, max).
    broker_versions: HashMap<i16, (i16, i16)>,
}

struct Io {
    reader: BufReader<ReadHalf<BoxConnection>>,
    writer: BufWriter<WriteHalf<BoxConnection>>,
}

/// Turns a connect failure into something a person can act on.
fn describe_connect_error(addr: &str, err: &std::io::Error, timeout: Duration) -> anyhow::Error {
    use std::io::ErrorKind::*;
    match err.kind() {
        ConnectionRefused => anyhow!(
            "cannot reach broker at {addr}: connection refused; is `annal serve` running there? \
             (choose another broker with -b HOST:PORT)"
        ),
        TimedOut => anyhow!(
            "cannot reach broker at {addr}: connection timed out after {timeout:?}; check the address and any firewall"
        ),
        _ => anyhow!("cannot reach broker at {addr}: {err}"),
    }
}

impl Connection {
    /// Connects with the default options and negotiates API versions.
    pub async fn connect(addr: &str) -> Result<Connection> {
        Connection::connect_with(addr, ConnectionOptions::default()).await
    }

    /// Connects to `addr` (`HOST:PORT`) within `options.connect_timeout` and negotiates API versions.
    pub async fn connect_with(addr: &str, options: ConnectionOptions) -> Result<Connection> {
        let timeout = options.connect_timeout;
        let connect = options.network.connect(addr.to_string());
        let stream = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => return Err(describe_connect_error(addr, &err, timeout)),
            Err(_) => {
                return Err(describe_connect_error(
                    addr,
                    &std::io::Error::from(std::io::ErrorKind::TimedOut),
                    timeout,
                ))
            }
        };
        let stream = match &options.tls {
            None => stream,
            Some(tls) => {
                match tokio::time::timeout(timeout, crate::tls::handshake(stream, addr, tls)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => bail!("TLS handshake with broker at {addr} failed: {err}"),
                    Err(_) => bail!(
                        "TLS handshake with broker at {addr} did not finish within {timeout:?}; is that \
                         address an SSL or SASL_SSL listener?"
                    ),
                }
            }
        };
        // TCP_NODELAY is set by the network (TokioNetwork sets it on every stream).
        let (read, write) = tokio::io::split(stream);
        let mut conn = Connection {
            addr: addr.to_string(),
            options,
            io: Some(Io {
                reader: BufReader::with_capacity(IO_BUFFER_BYTES, read),
                writer: BufWriter::with_capacity(IO_BUFFER_BYTES, write),
            }),
            closed_because: None,
            next_correlation_id: 1,
            broker_versions: HashMap::new(),
        };
        conn.negotiate().await?;
        if let Some(credentials) = conn.options.sasl.clone() {
            crate::sasl::authenticate(&mut conn, &credentials).await?;
        }
        Ok(conn)
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// True once an error has closed the connection; every request then fails, and the caller reconnects.
    pub fn is_closed(&self) -> bool {
        self.io.is_none()
    }

    /// The version range (min, max) the broker advertised for `key`, or `None` if it does not offer that API.
    pub fn broker_versions(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.broker_versions.get(&(key as i16)).copied()
    }

    /// ApiVersions handshake. We ask with our newest version; a broker that does not know it answers with
    /// UNSUPPORTED_VERSION in a v0 body listing its own ApiVersions range (KIP-511), and we retry with that.
    async fn negotiate(&mut self) -> Result<()> {
        let mut version = API_VERSIONS_MAX;
        for _ in 0..2 {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("annal"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            let body = self.round_trip_raw(version, &request).await?;
            // The error code leads every ApiVersions body version, so peek it before choosing a decoder.
            let error_code = body
                .get(..2)
                .map(|b| i16::from_be_bytes([b[0], b[1]]))
                .unwrap_or(-1);
            let decode_version = if error_code == UNSUPPORTED_VERSION {
                0
            } else {
                version
            };
            let response = ApiVersionsResponse::decode(&mut body.clone(), decode_version)
                .with_context(|| {
                    format!(
                        "broker at {} sent an ApiVersions response we cannot decode",
                        self.addr
                    )
                })?;
            if response.error_code == UNSUPPORTED_VERSION {
                let theirs = response
                    .api_keys
                    .iter()
                    .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                    .map(|k| k.max_version)
                    .unwrap_or(0);
                version = theirs.min(API_VERSIONS_MAX);
                continue;
            }
            if response.error_code != 0 {
                bail!(
                    "broker at {} refused ApiVersions: {}",
                    self.addr,
                    crate::errors::error_name(response.error_code)
                );
            }
            tracing::debug!(addr = %self.addr, api_versions_version = version, "connected");
            self.broker_versions = response
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect();
            if let Some(caps) = &self.options.version_caps {
                apply_version_caps(&mut self.broker_versions, caps)?;
            }
            return Ok(());
        }
        bail!(
            "broker at {} does not accept any ApiVersions version we can send",
            self.addr
        )
    }

    /// The highest version of `key` that both the broker and we (`ours`, inclusive) support.
    pub fn pick_version(&self, key: ApiKey, ours: (i16, i16)) -> Result<i16> {
        let Some((their_min, their_max)) = self.broker_versions(key) else {
            bail!(
                "broker at {} does not support the {key:?} API, which this command needs; \
                 is that address a broker's client listener (not a controller port)?",
                self.addr
            );
        };
        pick_common_version(ours, (their_min, their_max)).ok_or_else(|| {
            anyhow!(
                "broker at {} supports {key:?} versions {their_min}..={their_max}, but annal speaks {}..={}; \
                 upgrade the older side",
                self.addr,
                ours.0,
                ours.1
            )
        })
    }

    /// Sends a request with the highest common version in `ours` and returns the decoded response and the
    /// version used.
    pub async fn send<R: Request>(
        &mut self,
        request: &R,
        ours: (i16, i16),
    ) -> Result<(R::Response, i16)> {
        let key = api_key::<R>()?;
        let version = self.pick_version(key, ours)?;
        let response = self.send_version(request, version).await?;
        Ok((response, version))
    }

    /// Sends a request at an explicit version (not checked against what the broker advertised, so a test or a
    /// caller that knows better can override negotiation).
    pub async fn send_version<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response> {
        let key = api_key::<R>()?;
        tracing::debug!(addr = %self.addr, "{key:?} v{version}");
        let mut body = self.round_trip_raw(version, request).await?;
        R::Response::decode(&mut body, version).with_context(|| {
            format!(
                "broker at {} sent a {key:?} v{version} response we cannot decode",
                self.addr
            )
        })
    }

    /// Sends a request that the broker will not answer (Produce with acks=0).
    pub async fn send_without_response<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<()> {
        let key = api_key::<R>()?;
        tracing::debug!(addr = %self.addr, "{key:?} v{version}, no response expected");
        self.write_request(version, request).await?;
        Ok(())
    }

    /// Drops the socket and remembers why; later requests fail with that reason.
    fn close(&mut self, reason: &anyhow::Error) {
        if self.io.take().is_some() {
            tracing::debug!(addr = %self.addr, "closing connection: {reason:#}");
            self.closed_because = Some(format!("{reason:#}"));
        }
    }

    fn io(&mut self) -> Result<&mut Io> {
        let addr = &self.addr;
        let reason = self.closed_because.as_deref().unwrap_or("unknown");
        self.io.as_mut().ok_or_else(|| {
            anyhow!(
                "the connection to broker at {addr} was closed after an earlier error ({reason}); \
                 open a new one"
            )
        })
    }

    async fn write_request<R: Request>(&mut self, version: i16, request: &R) -> Result<i32> {
        let key = api_key::<R>()?;
        let correlation_id = self.next_correlation_id;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.options.client_id.clone())));
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&[0; 4]);
        header.encode(&mut frame, R::header_version(version))?;
        request
            .encode(&mut frame, version)
            .with_context(|| format!("cannot encode {key:?} v{version} request"))?;
        let len = i32::try_from(frame.len() - 4).context("request too large to send")?;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        // Encoding failures above leave the stream untouched; from here on a failure may leave half a frame.
        // Bounded like the answer: a broker that stopped reading this socket (hung, or cut off by a network
        // partition with the send buffer full) would otherwise hold the write, and its caller, forever. Kafka's
        // request.timeout.ms likewise counts from when the request is sent, not from when it was written.
        let timeout = self.options.request_timeout;
        let io = self.io()?;
        let written = async {
            io.writer.write_all(&frame).await?;
            io.writer.flush().await
        };
        let failed = match tokio::time::timeout(timeout, written).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(anyhow!(
                "lost connection to broker at {} while sending {key:?}: {e}",
                self.addr
            )),
            Err(_) => Some(anyhow!(
                "could not write a {key:?} request to broker at {} within {timeout:?} (it is not reading \
                 this connection); closing",
                self.addr
            )),
        };
        if let Some(err) = failed {
            self.close(&err);
            return Err(err);
        }
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        Ok(correlation_id)
    }

    /// Writes one request and reads its response body (header stripped, correlation id checked). Any failure
    /// after the request is written closes the connection.
    async fn round_trip_raw<R: Request>(&mut self, version: i16, request: &R) -> Result<Bytes> {
        let correlation_id = self.write_request(version, request).await?;
        let read = self.read_response::<R>(version, correlation_id).await;
        if let Err(e) = &read {
            self.close(e);
        }
        read
    }

    async fn read_response<R: Request>(
        &mut self,
        version: i16,
        correlation_id: i32,
    ) -> Result<Bytes> {
        let key = api_key::<R>()?;
        let timeout = self.options.request_timeout;
        let mut frame = tokio::time::timeout(timeout, self.read_frame(key))
            .await
            .map_err(|_| {
                anyhow!(
                    "broker at {} did not answer a {key:?} request within {timeout:?}; closing",
                    self.addr
                )
            })??;
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .with_context(|| format!("broker at {} sent a malformed response header", self.addr))?;
        if header.correlation_id != correlation_id {
            bail!(
                "broker at {} answered request {correlation_id} with correlation id {}; closing",
                self.addr,
                header.correlation_id
            );
        }
        Ok(frame)
    }

    async fn read_frame(&mut self, key: ApiKey) -> Result<Bytes> {
        let addr = self.addr.clone();
        let limit = self.options.max_response_bytes;
        let lost = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                anyhow!(
                    "broker at {addr} closed the connection while we waited for a {key:?} response"
                )
            } else {
                anyhow!(
                    "lost connection to broker at {addr} while waiting for a {key:?} response: {e}"
                )
            }
        };
        let io = self.io()?;
        let len = io.reader.read_i32().await.map_err(&lost)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= limit)
            .ok_or_else(|| {
                anyhow!(
                    "broker at {addr} sent a {key:?} response frame of {len} bytes \
                 (limit {limit} bytes, ConnectionOptions::max_response_bytes); closing"
                )
            })?;
        let mut buf = BytesMut::zeroed(len);
        io.reader.read_exact(&mut buf).await.map_err(&lost)?;
        Ok(buf.freeze())
    }
}

fn api_key<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY).map_err(|_| anyhow!("unknown api key {}", R::KEY))
}

/// Applies `ConnectionOptions::version_caps` (`Api=max,...`) to what the broker advertised.
fn apply_version_caps(versions: &mut HashMap<i16, (i16, i16)>, caps: &str) -> Result<()> {
    for cap in caps.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (name, max) = cap.split_once('=').ok_or_else(|| {
            anyhow!("ANNAL_CLIENT_MAX_VERSIONS: expected Api=version, got '{cap}'")
        })?;
        let max: i16 = max
            .parse()
            .map_err(|_| anyhow!("ANNAL_CLIENT_MAX_VERSIONS: bad version in '{cap}'"))?;
        let key = (0..1000i16)
            .filter_map(|k| ApiKey::try_from(k).ok())
            .find(|key| format!("{key:?}") == name)
            .ok_or_else(|| anyhow!("ANNAL_CLIENT_MAX_VERSIONS: unknown API '{name}'"))?
            as i16;
        if let Some(range) = versions.get_mut(&key) {
            range.1 = range.1.min(max);
        }
    }
    Ok(())
}

/// The highest version in both inclusive ranges, if they overlap.
pub fn pick_common_version(ours: (i16, i16), theirs: (i16, i16)) -> Option<i16> {
    let low = ours.0.max(theirs.0);
    let high = ours.1.min(theirs.1);
    (low <= high).then_some(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A peer that reads the request and answers with `reply`, then closes.
    async fn peer(reply: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = sock.read(&mut buf).await;
            let _ = sock.write_all(reply).await;
        });
        addr
    }

    #[tokio::test]
    async fn huge_response_length_is_refused_without_allocating() {
        let addr = peer(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]).await;
        let err = Connection::connect(&addr)
            .await
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("response frame of 2147483647 bytes"), "{err}");
    }

    #[tokio::test]
    async fn negative_response_length_is_refused() {
        let addr = peer(&[0xff, 0xff, 0xff, 0xfe]).await;
        let err = Connection::connect(&addr)
            .await
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("response frame of -2 bytes"), "{err}");
    }

    #[tokio::test]
    async fn peer_closing_mid_response_is_reported() {
        let addr = peer(&[0, 0, 0, 10, 0, 0]).await;
        let err = Connection::connect(&addr)
            .await
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("closed the connection"), "{err}");
    }

    #[tokio::test]
    async fn wrong_correlation_id_is_reported() {
        let addr = peer(&[0, 0, 0, 4, 0, 0, 0, 99]).await;
        let err = Connection::connect(&addr)
            .await
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("correlation id 99"), "{err}");
    }

    #[tokio::test]
    async fn refused_connection_names_the_address_and_the_fix() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let err = Connection::connect(&addr)
            .await
            .err()
            .expect("must fail")
            .to_string();
        assert!(
            err.contains(&format!("cannot reach broker at {addr}")) && err.contains("annal serve"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_silent_peer_times_out_and_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Accepts and reads, never answers; holds the socket until the test ends.
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            while sock.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        });
        let options = ConnectionOptions {
            request_timeout: Duration::from_millis(200),
            ..ConnectionOptions::default()
        };
        let err = Connection::connect_with(&addr, options)
            .await
            .err()
            .expect("must time out")
            .to_string();
        assert!(
            err.contains("did not answer a ApiVersions request within 200ms"),
            "{err}"
        );
    }

    /// A broker that answers the ApiVersions handshake, then never reads its socket again (hung, or cut off with
    /// the send buffers full): a request too big for the buffers must fail within `request_timeout`, not wait
    /// forever in the write (found by the simulator, `annal-sim --brokers --seed 1141 --seconds 60`).
    #[tokio::test]
    async fn a_peer_that_stops_reading_fails_the_write_within_the_request_timeout() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest, RequestHeader};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let len = sock.read_i32().await.unwrap() as usize;
            let mut frame = vec![0u8; len];
            sock.read_exact(&mut frame).await.unwrap();
            let mut body = Bytes::from(frame);
            let version = i16::from_be_bytes([body[2], body[3]]);
            let header = RequestHeader::decode(&mut body, 1).unwrap();
            let response = ApiVersionsResponse::default().with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(18)
                    .with_min_version(0)
                    .with_max_version(3),
                ApiVersion::default()
                    .with_api_key(3)
                    .with_min_version(0)
                    .with_max_version(12),
            ]);
            let mut out = BytesMut::new();
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&header.correlation_id.to_be_bytes());
            response.encode(&mut out, version).unwrap();
            let n = (out.len() - 4) as i32;
            out[..4].copy_from_slice(&n.to_be_bytes());
            sock.write_all(&out).await.unwrap();
            // Holds the socket open, unread, until the test is done.
            let _ = stop_rx.await;
        });
        let options = ConnectionOptions {
            request_timeout: Duration::from_millis(500),
            ..ConnectionOptions::default()
        };
        let mut conn = Connection::connect_with(&addr, options).await.unwrap();
        // About 64 MiB of topic names: far more than loopback's socket buffers hold.
        let name = "t".repeat(240);
        let topics = (0..280_000)
            .map(|_| {
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(kafka_protocol::messages::TopicName(
                        StrBytes::from_string(name.clone()),
                    )))
            })
            .collect();
        let request = MetadataRequest::default().with_topics(Some(topics));
        // The outer bound only turns a hang (the bug) into a failure; the assertion is on the error.
        let err = tokio::time::timeout(Duration::from_secs(60), conn.send(&request, (1, 12)))
            .await
            .expect("the write was not bounded: still blocked after 60 s")
            .expect_err("the write must fail")
            .to_string();
        assert!(
            err.contains("could not write a Metadata request") && err.contains("within 500ms"),
            "{err}"
        );
        assert!(conn.is_closed(), "the half-written connection is closed");
        let _ = stop_tx.send(());
    }

    #[test]
    fn version_caps_lower_the_broker_max() {
        let mut v: HashMap<i16, (i16, i16)> = [(0, (3, 13)), (1, (4, 18))].into_iter().collect();
        apply_version_caps(&mut v, "Produce=9, Fetch=12").unwrap();
        assert_eq!(v[&0], (3, 9));
        assert_eq!(v[&1], (4, 12));
        assert!(apply_version_caps(&mut v, "Nope=1").is_err());
        assert!(apply_version_caps(&mut v, "Produce").is_err());
    }

    #[test]
    fn picks_highest_common_version() {
        assert_eq!(pick_common_version((3, 12), (0, 11)), Some(11));
        assert_eq!(pick_common_version((3, 12), (3, 13)), Some(12));
        assert_eq!(pick_common_version((4, 4), (4, 4)), Some(4));
        assert_eq!(pick_common_version((5, 9), (0, 4)), None);
        assert_eq!(pick_common_version((0, 2), (3, 9)), None);
    }
}
