//! Console sessions: a cookie (`annal_session`, HttpOnly, SameSite=Strict), a CSRF token each mutation must
//! echo, and the Kafka client the session's requests run as.
//!
//! Login is a SASL exchange with this broker's own client listener ([`ConsoleState::target`]): the password is
//! checked there, by the same code that checks any Kafka client's, and the `Client` that logged in is kept so
//! every later request runs as that principal (the broker's authorizer decides what it may see and change).
//! Without SASL on the listener there is no login and one shared anonymous client serves every session.
//! Bounded: at most [`limits::SESSIONS_MAX`] sessions, each dropped after [`limits::SESSION_IDLE_TIMEOUT`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_client::{Client, ConnectionOptions, SaslCredentials, SaslMechanism};
use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedMutexGuard;

use super::{limits, ApiError, ApiResult, Ctx};

const COOKIE: &str = "annal_session";
const CSRF_HEADER: &str = "x-csrf-token";

/// Where the console's Kafka client connects: this broker's client listener.
#[derive(Debug, Clone)]
pub struct Target {
    /// `HOST:PORT` of the bound listener (127.0.0.1 or ::1 for a wildcard bind).
    pub addr: String,
    /// The listener requires SASL: the console requires a login.
    pub sasl: bool,
}

/// The console's state in the broker: where to connect, the sessions, the shared anonymous client.
pub struct ConsoleState {
    target: Option<Target>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    anonymous: Arc<tokio::sync::Mutex<Option<Client>>>,
    /// The topics list's name-sorted view of the metadata image (`topics::TopicListCache`).
    pub(super) topic_list: super::topics::TopicListCache,
}

/// One browser's session.
pub struct Session {
    id: String,
    csrf_token: String,
    last_used: Mutex<Instant>,
    login: Mutex<Option<Login>>,
    /// The session's own client (login required only), authenticated as its principal.
    client: Arc<tokio::sync::Mutex<Option<Client>>>,
}

#[derive(Clone)]
struct Login {
    principal: String,
    credentials: SaslCredentials,
}

impl Session {
    pub fn principal(&self) -> Option<String> {
        self.login.lock().as_ref().map(|l| l.principal.clone())
    }
}

/// A locked client for one request chain (requests on one client are sequential; the client is `&mut`).
pub struct ClientLease(OwnedMutexGuard<Option<Client>>);

impl std::ops::Deref for ClientLease {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.0.as_ref().expect("a lease is handed out connected")
    }
}

impl std::ops::DerefMut for ClientLease {
    fn deref_mut(&mut self) -> &mut Client {
        self.0.as_mut().expect("a lease is handed out connected")
    }
}

fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::thread_rng().gen();
    annal_client::hex::encode(&bytes)
}

fn client_options(sasl: Option<SaslCredentials>) -> ConnectionOptions {
    ConnectionOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: limits::KAFKA_REQUEST_TIMEOUT,
        // Above the browse's largest Fetch (every partition's BROWSE_FETCH_PARTITION_BYTES, capped).
        max_response_bytes: 64 * 1024 * 1024,
        client_id: "annal-console".to_string(),
        sasl,
        ..ConnectionOptions::default()
    }
}

impl ConsoleState {
    pub fn new(target: Option<Target>) -> ConsoleState {
        ConsoleState {
            target,
            sessions: Mutex::new(HashMap::new()),
            anonymous: Arc::new(tokio::sync::Mutex::new(None)),
            topic_list: Default::default(),
        }
    }

    /// The client listener requires SASL, so every console request needs a logged-in session.
    pub fn login_required(&self) -> bool {
        self.target.as_ref().is_some_and(|t| t.sasl)
    }

    fn target(&self) -> ApiResult<&Target> {
        self.target.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_CLIENT_LISTENER",
                "the console needs a PLAINTEXT or SASL_PLAINTEXT client listener on this broker (TLS listeners \
                 are not supported by the console); add one to `listeners`",
            )
        })
    }

    /// The live session with this id (touched), if any.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        let mut sessions = self.sessions.lock();
        let s = sessions.get(id)?.clone();
        let mut last = s.last_used.lock();
        if last.elapsed() > limits::SESSION_IDLE_TIMEOUT {
            drop(last);
            sessions.remove(id);
            return None;
        }
        *last = Instant::now();
        drop(last);
        Some(s)
    }

    fn create_session(&self) -> Arc<Session> {
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, s| s.last_used.lock().elapsed() <= limits::SESSION_IDLE_TIMEOUT);
        while sessions.len() >= limits::SESSIONS_MAX {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| *s.last_used.lock())
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => sessions.remove(&id),
                None => break,
            };
        }
        let s = Arc::new(Session {
            id: random_token(),
            csrf_token: random_token(),
            last_used: Mutex::new(Instant::now()),
            login: Mutex::new(None),
            client: Arc::new(tokio::sync::Mutex::new(None)),
        });
        sessions.insert(s.id.clone(), s.clone());
        s
    }

    /// Sessions held now (for tests of the bound).
    pub fn session_count(&self) -> usize {
        self.sessions.lock().len()
    }

    /// The client a request runs as, connected (a connection an error closed is replaced).
    pub async fn client_for(&self, session: Option<&Session>) -> ApiResult<ClientLease> {
        let target = self.target()?.clone();
        let (slot, credentials) = match (self.login_required(), session) {
            (false, _) => (self.anonymous.clone(), None),
            (true, Some(s)) => {
                let Some(login) = s.login.lock().clone() else {
                    return Err(unauthenticated());
                };
                (s.client.clone(), Some(login.credentials))
            }
            (true, None) => return Err(unauthenticated()),
        };
        let mut guard = slot.lock_owned().await;
        if !guard.as_ref().is_some_and(|c| c.is_connected()) {
            let client = Client::connect_with(&target.addr, client_options(credentials))
                .await
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "BROKER_NOT_AVAILABLE",
                        format!(
                            "the console cannot reach its broker's client listener at {}: {e:#}",
                            target.addr
                        ),
                    )
                })?;
            *guard = Some(client);
        }
        Ok(ClientLease(guard))
    }
}

fn unauthenticated() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        "log in first: POST /v1/session with a SASL user of this cluster",
    )
}

/// The session id in the request's cookies.
pub fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// A mutation must carry the session's CSRF token and, when the browser sends `Origin`, come from the page's
/// own origin (`Origin` naming the request's `Host`).
pub fn check_csrf(headers: &HeaderMap, session: Option<&Session>) -> ApiResult<()> {
    let refuse = |why: &str| ApiError::new(StatusCode::FORBIDDEN, "CSRF", why.to_string());
    let Some(session) = session else {
        return Err(refuse(
            "a change needs a console session: GET /v1/session first, then send its csrf_token as X-CSRF-Token",
        ));
    };
    let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    let token_ok = sent.is_some_and(|t| {
        use subtle::ConstantTimeEq;
        bool::from(t.as_bytes().ct_eq(session.csrf_token.as_bytes()))
    });
    if !token_ok {
        return Err(refuse(
            "missing or wrong X-CSRF-Token: send the csrf_token of GET /v1/session with every change",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest.trim_end_matches('/'));
        if host.is_none() || origin_host != host {
            return Err(refuse(
                "cross-origin change refused: the Origin header does not name this console's host",
            ));
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct SessionView {
    authenticated: bool,
    principal: Option<String>,
    login_required: bool,
    csrf_token: String,
}

fn view(ctx_login_required: bool, s: &Session) -> SessionView {
    let principal = s.principal();
    SessionView {
        authenticated: principal.is_some(),
        principal,
        login_required: ctx_login_required,
        csrf_token: s.csrf_token.clone(),
    }
}

fn with_cookie(s: &Session, body: SessionView) -> Response {
    let cookie = format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", s.id);
    let mut r = Json(body).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `GET /v1/session`: the session, created when the request has none.
pub async fn get_session(ctx: Ctx) -> Response {
    let console = ctx.broker.console();
    let s = match ctx.session {
        Some(s) => s,
        None => console.create_session(),
    };
    with_cookie(&s, view(console.login_required(), &s))
}

#[derive(Deserialize)]
struct LoginBody {
    username: String,
    password: String,
    #[serde(default)]
    mechanism: Option<String>,
}

/// `POST /v1/session`: log in with a SASL user; the exchange with the broker's listener is the check.
pub async fn login(ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let console = ctx.broker.console();
    let session = ctx.session.clone().expect("the CSRF check needs a session");
    let body: LoginBody = super::parse_body(&body)?;
    if !console.login_required() {
        return Err(ApiError::bad_request(
            "this broker's client listener does not use SASL, so the console has no login",
        ));
    }
    let mechanism_name = body.mechanism.as_deref().unwrap_or("SCRAM-SHA-256");
    let mechanism = SaslMechanism::parse(mechanism_name).ok_or_else(|| {
        ApiError::bad_request(format!(
            "mechanism '{mechanism_name}': use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN"
        ))
    })?;
    if body.username.is_empty() || body.username.len() > 256 || body.password.len() > 1024 {
        return Err(ApiError::bad_request(
            "username (1 to 256 bytes) and password (up to 1024 bytes) are required",
        ));
    }
    let credentials = SaslCredentials {
        mechanism,
        username: body.username.clone(),
        password: body.password,
    };
    let target = console.target()?.clone();
    let connect = Client::connect_with(&target.addr, client_options(Some(credentials.clone())));
    let client = match tokio::time::timeout(limits::KAFKA_REQUEST_TIMEOUT, connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let text = format!("{e:#}");
            let refused = text.contains("SASL") || text.contains("authentication");
            return Err(if refused {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "SASL_AUTHENTICATION_FAILED",
                    format!(
                        "login as '{}' with {mechanism_name} failed: {text}",
                        body.username
                    ),
                )
            } else {
                ApiError::from_client(e)
            });
        }
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "REQUEST_TIMED_OUT",
                "the broker's listener did not finish the SASL exchange in time",
            ))
        }
    };
    *session.client.lock().await = Some(client);
    *session.login.lock() = Some(Login {
        principal: format!("User:{}", body.username),
        credentials,
    });
    Ok(with_cookie(&session, view(true, &session)))
}

/// `DELETE /v1/session`: log out (the session's client is closed; the CSRF token stays for the next login).
pub async fn logout(ctx: Ctx) -> Response {
    if let Some(s) = &ctx.session {
        *s.login.lock() = None;
        *s.client.lock().await = None;
    }
    StatusCode::NO_CONTENT.into_response()
}
