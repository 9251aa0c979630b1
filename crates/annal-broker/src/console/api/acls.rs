//! ACLs and SCRAM users.

use annal_client::Client;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use super::{ApiError, ApiResult, Ctx};

#[derive(Serialize, Clone)]
pub struct Acl {
    principal: String,
    host: String,
    operation: String,
    permission: String,
    resource_type: String,
    resource_name: String,
    pattern_type: String,
}

fn planned() -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, "NOT_IMPLEMENTED", "not served yet")
}

/// The ACLs on a topic; empty when the cluster has no authorizer or the principal may not describe them.
pub async fn for_topic(_client: &mut Client, _topic: &str) -> Vec<Acl> {
    Vec::new()
}

pub async fn list(_ctx: Ctx, RawQuery(_raw): RawQuery) -> ApiResult<Response> {
    Err(planned())
}
pub async fn create(_ctx: Ctx, _body: Bytes) -> ApiResult<Response> {
    Err(planned())
}
pub async fn delete_acls(_ctx: Ctx, _body: Bytes) -> ApiResult<Response> {
    Err(planned())
}
pub async fn list_users(_ctx: Ctx) -> ApiResult<Response> {
    Err(planned())
}
pub async fn upsert_user(_ctx: Ctx, _body: Bytes) -> ApiResult<Response> {
    Err(planned())
}
pub async fn delete_user(_ctx: Ctx, Path(_name): Path<String>) -> ApiResult<Response> {
    Err(planned())
}
