//! The console's JSON API under `/v1/` (docs/http-api.md; design in docs/decisions/0018-console.md).
//!
//! The back end is a Kafka client of its own cluster: every change, and every read a Kafka API carries, is a
//! request through `annal_client::Client` to this broker's own client listener ([`ConsoleState`] knows where),
//! so it takes the same admin paths and the same authorization as any Kafka client, and it sees the whole
//! cluster from any broker. Views no Kafka API carries (lag health, time lag, time to loss) come from this
//! broker's `ops::groups` reports; the topics list comes from the local metadata image so 10,000 topics cost
//! no network round trip per topic.
//!
//! - [`session`]: sessions (cookie, CSRF token, one authenticated `Client` each when login is required).
//! - [`overview`], [`topics`], [`messages`], [`groups`], [`acls`]: the resources.
//!
//! Every limit is in [`limits`].

pub mod acls;
pub mod groups;
pub mod messages;
pub mod overview;
pub mod session;
pub mod topics;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use serde::Serialize;

pub use session::ConsoleState;
use session::Session;

use crate::Broker;

/// Every bound of the console's API, named in one place.
pub mod limits {
    use std::time::Duration;

    /// Sessions kept at once; the least recently used is dropped past this (its client with it).
    pub const SESSIONS_MAX: usize = 256;
    /// A session unused this long is dropped.
    pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
    /// Paging: default and largest page.
    pub const PAGE_SIZE_DEFAULT: usize = 50;
    pub const PAGE_SIZE_MAX: usize = 500;
    /// Message browse: records returned (default, max), records read per request (default, max).
    pub const BROWSE_LIMIT_DEFAULT: usize = 50;
    pub const BROWSE_LIMIT_MAX: usize = 1_000;
    pub const BROWSE_MAX_SCAN_DEFAULT: usize = 10_000;
    pub const BROWSE_MAX_SCAN_MAX: usize = 100_000;
    /// Message browse: bytes fetched per request in all, and per partition per Fetch.
    pub const BROWSE_MAX_BYTES: usize = 32 * 1024 * 1024;
    pub const BROWSE_FETCH_PARTITION_BYTES: i32 = 1024 * 1024;
    /// Message browse: Fetch rounds per request (each round asks every chosen partition's leader once).
    pub const BROWSE_FETCH_ROUNDS_MAX: usize = 200;
    /// Rendered text of one key, value or header value; longer is cut (the `size_bytes` stays exact).
    pub const RENDER_TEXT_BYTES_MAX: usize = 64 * 1024;
    /// The HTTP body limit for the console's routes (produce carries a record).
    pub const REQUEST_BODY_BYTES_MAX: usize = 1024 * 1024;
    /// The longest a console Kafka request chain may take before the console gives up on the broker.
    pub const KAFKA_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
    /// Partitions a topic may be given through the console (CreateTopics / CreatePartitions count).
    pub const PARTITIONS_MAX: i32 = 100_000;
}

/// The console's `/v1/` routes. `GET /v1/topics` and `GET /v1/groups` without `page=` answer the operations
/// arrays of `ops::http` (they predate the console, and `annal group health` reads them).
pub fn router() -> Router<Arc<Broker>> {
    Router::new()
        .route(
            "/v1/session",
            get(session::get_session)
                .post(session::login)
                .delete(session::logout),
        )
        .route("/v1/overview", get(overview::get_overview))
        .route("/v1/topics", get(topics::get_list).post(topics::create))
        .route(
            "/v1/topics/{topic}",
            get(topics::detail).delete(topics::delete_topic),
        )
        .route("/v1/topics/{topic}/configs", patch(topics::alter_configs))
        .route(
            "/v1/topics/{topic}/partitions",
            post(topics::add_partitions),
        )
        .route(
            "/v1/topics/{topic}/messages",
            get(messages::browse).post(messages::produce),
        )
        .route("/v1/groups", get(groups::get_list))
        .route(
            "/v1/groups/{group}",
            get(groups::get_detail).delete(groups::delete_group),
        )
        .route("/v1/groups/{group}/offsets", post(groups::reset_offsets))
        .route(
            "/v1/acls",
            get(acls::list).post(acls::create).delete(acls::delete_acls),
        )
        .route("/v1/users", get(acls::list_users).post(acls::upsert_user))
        .route("/v1/users/{name}", delete(acls::delete_user))
}

/// An error answer: `{"error", "code"}` with a status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub error: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, error: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: code.to_string(),
            error: error.into(),
        }
    }

    pub fn bad_request(error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", error)
    }

    pub fn not_found(code: &str, error: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, error)
    }

    /// A Kafka error code from a response: its name in `code`, a status from the kind of error.
    pub fn kafka(code: i16, error: impl Into<String>) -> ApiError {
        let name = annal_client::errors::error_name(code);
        ApiError::new(status_for_kafka_name(&name), &name, error)
    }

    /// A failed `annal_client` call. Its messages name the Kafka error (or say what it means); the `code` is
    /// recovered from them so the page can react to it.
    pub fn from_client(e: anyhow::Error) -> ApiError {
        let text = format!("{e:#}");
        let name = kafka_name_in(&text);
        ApiError::new(status_for_kafka_name(&name), &name, text)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
            code: String,
        }
        (
            self.status,
            Json(Body {
                error: self.error,
                code: self.code,
            }),
        )
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The Kafka error name in a client error message; the client's messages for the commonest errors say what
/// they mean instead of the name, so those are recognised by their wording (annal_client's own texts).
fn kafka_name_in(text: &str) -> String {
    let named = text
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .find(|w| w.len() >= 6 && w.contains('_') && !w.starts_with('_') && !w.ends_with('_'));
    if let Some(name) = named {
        return name.to_string();
    }
    if text.contains("already exists") {
        "TOPIC_ALREADY_EXISTS".into()
    } else if text.contains("does not exist") || text.contains("has no partition") {
        "UNKNOWN_TOPIC_OR_PARTITION".into()
    } else if text.contains("cannot reach broker") || text.contains("connection") {
        "BROKER_NOT_AVAILABLE".into()
    } else {
        "KAFKA_ERROR".into()
    }
}

fn status_for_kafka_name(name: &str) -> StatusCode {
    match name {
        "TOPIC_ALREADY_EXISTS" | "NON_EMPTY_GROUP" | "GROUP_NOT_EMPTY" => StatusCode::CONFLICT,
        "UNKNOWN_TOPIC_OR_PARTITION"
        | "UNKNOWN_TOPIC_ID"
        | "GROUP_ID_NOT_FOUND"
        | "RESOURCE_NOT_FOUND" => StatusCode::NOT_FOUND,
        "SASL_AUTHENTICATION_FAILED" | "ILLEGAL_SASL_STATE" | "UNSUPPORTED_SASL_MECHANISM" => {
            StatusCode::UNAUTHORIZED
        }
        "BROKER_NOT_AVAILABLE"
        | "KAFKA_ERROR"
        | "REQUEST_TIMED_OUT"
        | "NOT_CONTROLLER"
        | "LEADER_NOT_AVAILABLE"
        | "NOT_LEADER_OR_FOLLOWER"
        | "COORDINATOR_NOT_AVAILABLE"
        | "COORDINATOR_LOAD_IN_PROGRESS" => StatusCode::BAD_GATEWAY,
        n if n.ends_with("_AUTHORIZATION_FAILED") => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// What every console handler starts from: the broker and the caller's session, checked (CSRF on mutations,
/// login when required).
pub struct Ctx {
    pub broker: Arc<Broker>,
    pub session: Option<Arc<Session>>,
}

impl FromRequestParts<Arc<Broker>> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        broker: &Arc<Broker>,
    ) -> Result<Self, Self::Rejection> {
        Ctx::authorize(broker, &parts.method, parts.uri.path(), &parts.headers)
    }
}

impl Ctx {
    /// The checks every console request passes: CSRF on a mutation, a login when one is required.
    pub fn authorize(
        broker: &Arc<Broker>,
        method: &Method,
        path: &str,
        headers: &axum::http::HeaderMap,
    ) -> ApiResult<Ctx> {
        broker.metrics().http_requests.inc();
        let console = broker.console();
        let session = session::cookie(headers).and_then(|id| console.session(&id));
        let mutation = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let is_session_route = path == "/v1/session";
        if mutation {
            session::check_csrf(headers, session.as_deref())?;
        }
        if !is_session_route && console.login_required() {
            let authenticated = session.as_ref().is_some_and(|s| s.principal().is_some());
            if !authenticated {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "UNAUTHENTICATED",
                    "log in first: POST /v1/session with a SASL user of this cluster",
                ));
            }
        }
        Ok(Ctx {
            broker: broker.clone(),
            session,
        })
    }

    /// The Kafka client this request runs as: the session's (authenticated as its principal) when login is
    /// required, the shared anonymous one otherwise.
    pub async fn client(&self) -> ApiResult<session::ClientLease> {
        self.broker
            .console()
            .client_for(self.session.as_deref())
            .await
    }
}

/// A query string as (name, value) pairs, percent-decoded.
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(raw: Option<&str>) -> ApiResult<Query> {
        let mut pairs = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let decode = |s: &str| {
                crate::ops::records::percent_decode(s)
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "query parameter '{part}' is not valid percent-encoded UTF-8"
                        ))
                    })
            };
            pairs.push((decode(k)?, decode(v)?));
        }
        Ok(Query(pairs))
    }

    /// A query built from (name, value) pairs, e.g. a JSON body's fields read as a filter.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Query {
        Query(pairs)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    /// A whole number parameter within `range`; the error names it and the range.
    pub fn number<T>(&self, name: &str, range: std::ops::RangeInclusive<T>) -> ApiResult<Option<T>>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match text.parse::<T>() {
            Ok(v) if range.contains(&v) => Ok(Some(v)),
            _ => Err(ApiError::bad_request(format!(
                "{name}={text}: expected a whole number from {} to {}",
                range.start(),
                range.end()
            ))),
        }
    }

    pub fn flag(&self, name: &str) -> ApiResult<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "{name}={other}: expected true or false"
            ))),
        }
    }
}

/// A list request wants the paged form when it names any list parameter (a malformed query too, so it is
/// answered with a 400 rather than the whole array); a bare `GET /v1/topics` or `/v1/groups` keeps the array.
pub fn wants_page(raw: Option<&str>) -> bool {
    const LIST_PARAMETERS: &[&str] = &[
        "page",
        "page_size",
        "q",
        "sort",
        "internal",
        "state",
        "status",
    ];
    match Query::parse(raw) {
        Ok(q) => LIST_PARAMETERS.iter().any(|p| q.has(p)),
        Err(_) => true,
    }
}

/// `page`, `page_size`, `q` and `sort` of a list request.
pub struct Paging {
    pub page: usize,
    pub page_size: usize,
    /// Lower-cased substring of the name.
    pub q: Option<String>,
    /// The sort field and whether it is descending (`-` prefix).
    pub sort: Option<(String, bool)>,
}

impl Paging {
    pub fn parse(query: &Query, sort_fields: &[&str]) -> ApiResult<Paging> {
        let page = query
            .number::<usize>("page", 1..=usize::MAX / 2)?
            .unwrap_or(1);
        let page_size = query
            .number::<usize>("page_size", 1..=limits::PAGE_SIZE_MAX)?
            .unwrap_or(limits::PAGE_SIZE_DEFAULT);
        let sort = match query.get("sort") {
            None => None,
            Some(s) => {
                let (field, descending) = match s.strip_prefix('-') {
                    Some(f) => (f, true),
                    None => (s, false),
                };
                if !sort_fields.contains(&field) {
                    return Err(ApiError::bad_request(format!(
                        "sort={s}: sort by one of {} (a - prefix sorts descending)",
                        sort_fields.join(", ")
                    )));
                }
                Some((field.to_string(), descending))
            }
        };
        Ok(Paging {
            page,
            page_size,
            q: query.get("q").map(|q| q.to_lowercase()),
            sort,
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        self.q
            .as_ref()
            .is_none_or(|q| name.to_lowercase().contains(q.as_str()))
    }

    /// The page's slice of `items` (already filtered and sorted).
    pub fn page_of<T>(&self, items: Vec<T>) -> Page<T> {
        let total = items.len();
        let start = (self.page - 1).saturating_mul(self.page_size);
        let items = items.into_iter().skip(start).take(self.page_size).collect();
        Page {
            total,
            page: self.page,
            page_size: self.page_size,
            items,
        }
    }
}

#[derive(Serialize)]
pub struct Page<T> {
    pub total: usize,
    pub page: usize,
    pub page_size: usize,
    pub items: Vec<T>,
}

impl<T> Page<T> {
    /// The same page with each item mapped (a page of names becomes a page of summaries: only the page's
    /// items pay for the summary).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            total: self.total,
            page: self.page,
            page_size: self.page_size,
            items: self.items.into_iter().map(f).collect(),
        }
    }
}

/// A JSON body, refused with the console's error shape (not axum's text) when it does not parse.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not the JSON this endpoint takes: {e}"
        ))
    })
}

/// A confirmation parameter (`confirm=`) that must repeat the name of what is deleted.
pub fn check_confirm(query: &Query, name: &str, what: &str) -> ApiResult<()> {
    if query.get("confirm") == Some(name) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "deleting {what} '{name}' needs confirm={name} (the name again)"
        )))
    }
}

/// Runs a chain of Kafka requests within [`limits::KAFKA_REQUEST_TIMEOUT`].
pub async fn within_timeout<T>(
    what: &str,
    f: impl std::future::Future<Output = ApiResult<T>>,
) -> ApiResult<T> {
    match tokio::time::timeout(limits::KAFKA_REQUEST_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "REQUEST_TIMED_OUT",
            format!(
                "{what}: the cluster did not answer within {:?}; check `annal cluster health`",
                limits::KAFKA_REQUEST_TIMEOUT
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_are_found_in_client_messages() {
        assert_eq!(
            kafka_name_in("cannot create topic 'x': INVALID_CONFIG (bad value)"),
            "INVALID_CONFIG"
        );
        assert_eq!(
            kafka_name_in("topic 'x' already exists; see it with `annal topic describe x`"),
            "TOPIC_ALREADY_EXISTS"
        );
        assert_eq!(
            status_for_kafka_name("TOPIC_AUTHORIZATION_FAILED"),
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn paging_checks_its_parameters() {
        let q = Query::parse(Some("page=0")).unwrap();
        assert!(Paging::parse(&q, &["name"]).is_err());
        let q = Query::parse(Some("page_size=100000000000000000000000")).unwrap();
        assert!(Paging::parse(&q, &["name"]).is_err());
        let q = Query::parse(Some("sort=-nope")).unwrap();
        assert!(Paging::parse(&q, &["name"]).is_err());
        let q = Query::parse(Some("page=3&page_size=2&q=A%20b&sort=-name")).unwrap();
        let p = Paging::parse(&q, &["name"]).unwrap();
        assert_eq!(p.q.as_deref(), Some("a b"));
        let page = p.page_of((0..7).collect::<Vec<_>>());
        assert_eq!((page.total, page.items), (7, vec![4, 5]));
        assert!(Query::parse(Some("q=%zz")).is_err());
    }
}
