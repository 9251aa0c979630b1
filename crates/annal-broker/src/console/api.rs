//! The console's JSON API under `/v1/` (docs/http-api.md).

use std::sync::Arc;

use axum::Router;

use crate::Broker;

/// The console's `/v1/` routes.
pub fn router() -> Router<Arc<Broker>> {
    Router::new()
}
