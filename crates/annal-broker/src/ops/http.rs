//! The HTTP listener (`http.listen`, default 127.0.0.1:9644; empty turns it off): `/metrics`, `/healthz`,
//! `/readyz` and a small JSON API under `/v1/` (`/v1/groups`, `/v1/groups/{group}`, `/v1/topics`,
//! `/v1/topics/{topic}/records?key=` for records by key).
//!
//! axum routes; hyper serves each connection (HTTP/1.1 only) from an accept loop of ours, so that every limit is
//! explicit: at most [`HttpLimits::max_connections`] connections (more are closed at accept), request headers
//! within [`HttpLimits::max_header_bytes`] and [`HttpLimits::header_read_timeout`] (which also ends idle
//! keep-alive connections), bodies refused past [`HttpLimits::max_request_bytes`] (1 MiB: the console's produce form is the largest body), a
//! handler answer within [`HttpLimits::request_timeout`], and a connection's whole life within
//! [`HttpLimits::connection_max_lifetime`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::OpsConfig;
use crate::Broker;

/// The listener's bounds. Fixed: an operations endpoint needs no tuning, only limits.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub max_request_bytes: usize,
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub connection_max_lifetime: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 64,
            // The console's produce form carries a record (console::api::limits).
            max_request_bytes: crate::console::api::limits::REQUEST_BODY_BYTES_MAX,
            // hyper's smallest read buffer; headers must fit in it.
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            connection_max_lifetime: Duration::from_secs(300),
        }
    }
}

/// Binds `http.listen`. `Ok(None)`: turned off (empty), or the default address is taken when nobody set it (a
/// warning says so; zero configuration must start even when another broker on the machine has the port). An
/// explicit address that cannot be bound is an error naming the setting.
pub async fn bind(config: &OpsConfig) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = config.http_listen.as_deref() else {
        return Ok(None);
    };
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if !config.http_listen_explicit => {
            tracing::warn!(address = addr, error = %e, "the HTTP listener's default address is not available; serving without /metrics and /v1 (set http.listen=HOST:PORT, or http.listen= to turn it off)");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!(
            "http.listen={addr}: cannot listen: {e}; pick another address with --override http.listen=HOST:PORT, or turn the listener off with --override http.listen="
        )),
    }
}

/// Readiness facts that are not in the broker's managers.
#[derive(Debug, Default)]
pub struct Readiness {
    /// The Kafka listener is accepting connections.
    pub kafka_listener_serving: AtomicBool,
}

/// Serves `app` on `listener` until `stop` turns true, within `limits`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
    on_refused: impl Fn() + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let builder = Arc::new(builder);
    loop {
        tokio::select! {
            biased;
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "HTTP accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    // At the limit: close now rather than queue (a scraper retries; memory stays bounded).
                    on_refused();
                    tracing::debug!(%peer, "HTTP connection refused: connection limit reached");
                    drop(stream);
                    continue;
                };
                // Answers are small and written as soon as they are ready: without TCP_NODELAY, Nagle's algorithm
                // can hold a response's last segment until the browser's delayed ACK (up to 40 ms a request).
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(%peer, error = %e, "HTTP connection: could not set TCP_NODELAY");
                }
                let service = TowerToHyperService::new(app.clone());
                let builder = builder.clone();
                let lifetime = limits.connection_max_lifetime;
                connections.spawn(async move {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    match tokio::time::timeout(lifetime, conn).await {
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP connection ended"),
                        Err(_) => tracing::debug!(%peer, "HTTP connection closed at its maximum lifetime"),
                        Ok(Ok(())) => {}
                    }
                    drop(slot);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = crate::stopped(&mut stop) => break,
        }
    }
    connections.shutdown().await;
}

/// The routes over `broker`, with the request-size and request-time limits applied.
pub fn router(broker: Arc<Broker>, limits: &HttpLimits) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/topics/{topic}/records", get(records))
        .merge(crate::console::router())
        .with_state(broker)
        .layer(bounds(limits))
}

/// The per-request bounds, shared by the real router and the tests' routers: the body limit outside (a large
/// body is refused before any handler runs), the handler's time limit inside.
pub fn bounds(
    limits: &HttpLimits,
) -> tower::layer::util::Stack<
    tower_http::timeout::TimeoutLayer,
    tower::layer::util::Stack<
        tower_http::limit::RequestBodyLimitLayer,
        tower::layer::util::Identity,
    >,
> {
    tower::ServiceBuilder::new()
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            limits.max_request_bytes,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .into_inner()
}

type Shared = State<Arc<Broker>>;

async fn healthz(State(broker): Shared) -> &'static str {
    broker.replica_manager().metrics().http_requests.inc();
    "ok\n"
}

#[derive(Serialize)]
struct Ready {
    ready: bool,
    metadata_applied: bool,
    kafka_listener_serving: bool,
    unfenced: bool,
}

/// Ready: the metadata image has been applied, the Kafka listener is serving, and the controller has this broker
/// unfenced. 503 otherwise, with which check failed.
async fn readyz(State(broker): Shared) -> Response {
    broker.replica_manager().metrics().http_requests.inc();
    let r = Ready {
        metadata_applied: broker.cluster().image().last_applied_offset.is_some(),
        kafka_listener_serving: broker
            .readiness
            .kafka_listener_serving
            .load(Ordering::Acquire),
        unfenced: !broker.cluster().lease().fenced,
        ready: false,
    };
    let ready = r.metadata_applied && r.kafka_listener_serving && r.unfenced;
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(Ready { ready, ..r })).into_response()
}

async fn metrics(State(broker): Shared) -> Response {
    broker.replica_manager().metrics().http_requests.inc();
    let b = broker.clone();
    let text = crate::blocking(move || {
        let reports = super::groups::reports(&b, None);
        super::scrape::encode(&b, &reports)
    })
    .await;
    match text {
        Ok(t) => ([(header::CONTENT_TYPE, super::scrape::CONTENT_TYPE)], t).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        )
            .into_response(),
    }
}

/// `GET /v1/groups` without `page=` (routed by the console).
pub(crate) async fn groups_array(broker: Arc<Broker>) -> Response {
    broker.replica_manager().metrics().http_requests.inc();
    let b = broker.clone();
    let reports = crate::blocking(move || super::groups::reports(&b, None)).await;
    Json(reports).into_response()
}

#[derive(Serialize)]
struct TopicView {
    name: String,
    id: String,
    partitions: Vec<PartitionView>,
}

#[derive(Serialize)]
struct PartitionView {
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    high_watermark: i64,
    log_start_offset: i64,
    log_end_offset: i64,
    size_bytes: u64,
}

/// `GET /v1/topics` without `page=` (routed by the console).
pub(crate) async fn topics_array(broker: Arc<Broker>) -> Response {
    broker.replica_manager().metrics().http_requests.inc();
    let b = broker.clone();
    let views = crate::blocking(move || {
        let mut topics: Vec<TopicView> = b
            .replica_manager()
            .topics()
            .iter()
            .map(|t| TopicView {
                name: t.name.clone(),
                id: t.id.to_string(),
                partitions: b
                    .replica_manager()
                    .partitions_of(&t.name)
                    .iter()
                    .map(|p| PartitionView {
                        partition: p.index(),
                        leader: p.leader(),
                        replicas: p.replicas(),
                        isr: p.isr(),
                        high_watermark: p.high_watermark(),
                        log_start_offset: p.log_start_offset(),
                        log_end_offset: p.log_end_offset(),
                        size_bytes: p.size_bytes(),
                    })
                    .collect(),
            })
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    })
    .await;
    Json(views).into_response()
}

/// Records by key (`ops/records.rs`).
async fn records(
    State(broker): Shared,
    Path(topic): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    broker.replica_manager().metrics().http_requests.inc();
    let b = broker.clone();
    crate::blocking(move || super::records::answer(&b, &topic, query.as_deref())).await
}

/// Where the listener is, for the start-up log line and tests.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A router with the real bounds and a slow route, served on a loopback port.
    async fn start(limits: HttpLimits) -> (SocketAddr, watch::Sender<bool>) {
        let app = Router::new()
            .route("/fast", get(|| async { "fast" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "slow"
                }),
            )
            .route(
                "/echo",
                axum::routing::post(|body: String| async move { body }),
            )
            .layer(bounds(&limits));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        tokio::spawn(serve(listener, app, limits, rx, || {}));
        (addr, tx)
    }

    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn answers_within_the_limits() {
        let (addr, _stop) = start(HttpLimits::default()).await;
        let r = exchange(
            addr,
            b"GET /fast HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.ends_with("fast"), "{r}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let limits = HttpLimits {
            max_request_bytes: 100,
            ..HttpLimits::default()
        };
        let (addr, _stop) = start(limits).await;
        let body = "x".repeat(1000);
        let req = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let r = exchange(addr, req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 413"), "{r}");
    }

    #[tokio::test]
    async fn headers_over_the_limit_are_refused() {
        let (addr, _stop) = start(HttpLimits::default()).await;
        let big = "a".repeat(64 * 1024);
        let req = format!("GET /fast HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
        let r = exchange(addr, req.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 431") || r.is_empty(), "{r}");
        assert!(!r.contains("fast"), "{r}");
    }

    #[tokio::test]
    async fn a_slow_handler_times_out() {
        let limits = HttpLimits {
            request_timeout: Duration::from_millis(200),
            ..HttpLimits::default()
        };
        let (addr, _stop) = start(limits).await;
        let r = exchange(
            addr,
            b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    }

    #[tokio::test]
    async fn a_client_that_never_sends_its_headers_is_dropped() {
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(200),
            ..HttpLimits::default()
        };
        let (addr, _stop) = start(limits).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /fast HTTP/1.1\r\n").await.unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
        assert!(
            read.is_ok(),
            "the connection should be closed by the server"
        );
        assert!(!String::from_utf8_lossy(&out).contains("fast"));
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_at_accept() {
        let limits = HttpLimits {
            max_connections: 2,
            ..HttpLimits::default()
        };
        let (addr, _stop) = start(limits).await;
        // Two idle connections hold both slots.
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
            held.push(s);
        }
        let r = exchange(
            addr,
            b"GET /fast HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(
            r.is_empty(),
            "a third connection should be closed unanswered: {r}"
        );
        drop(held);
        // Slots free again once the held connections close.
        let mut answered = false;
        for _ in 0..50 {
            let r = exchange(
                addr,
                b"GET /fast HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
            .await;
            if r.starts_with("HTTP/1.1 200") {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(answered);
    }

    #[tokio::test]
    async fn an_explicit_address_that_cannot_be_bound_names_the_setting() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let explicit = OpsConfig {
            http_listen: Some(addr.clone()),
            http_listen_explicit: true,
            ..OpsConfig::default()
        };
        let e = bind(&explicit).await.unwrap_err();
        assert!(format!("{e:#}").contains("http.listen="), "{e:#}");
        // The same address as an unset default: a warning and no listener.
        let default = OpsConfig {
            http_listen: Some(addr),
            http_listen_explicit: false,
            ..OpsConfig::default()
        };
        assert!(bind(&default).await.unwrap().is_none());
        let off = OpsConfig {
            http_listen: None,
            ..OpsConfig::default()
        };
        assert!(bind(&off).await.unwrap().is_none());
    }
}
