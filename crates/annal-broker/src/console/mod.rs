//! The web console, served by the broker's HTTP listener (`http.listen`) at `/`: static assets embedded in the
//! binary ([`assets`]) and the JSON API they talk to under `/v1/` ([`api`]). docs/decisions/0018-console.md says
//! why it is shaped this way; docs/http-api.md lists every endpoint.
//!
//! - [`assets`]: `/` and `/console/*`: the page, its script and its style, compiled in (no Node at build time).
//! - [`api`]: the console's `/v1/` resources (overview, topics, messages, groups, offsets, ACLs, users) and its
//!   sessions (login with the broker's SASL users, CSRF tokens).
//!
//! Architecture invariant: the console changes nothing by itself. Every change it makes is a Kafka request
//! through the same admin paths (and authorization) as a Kafka client's; it only reads the broker's state
//! directly for views that no Kafka API carries (lag health, time to loss, records by key).

pub mod api;
pub mod assets;

use std::sync::Arc;

use axum::Router;

use crate::Broker;

/// The console's routes (assets and API), to be merged into the HTTP listener's router.
pub fn router() -> Router<Arc<Broker>> {
    Router::new().merge(assets::router()).merge(api::router())
}
