//! Messages: browse (Fetch) and produce (Produce).

use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::Response;

use super::{ApiError, ApiResult, Ctx};

fn planned() -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, "NOT_IMPLEMENTED", "not served yet")
}

pub async fn browse(_ctx: Ctx, Path(_topic): Path<String>, RawQuery(_raw): RawQuery) -> ApiResult<Response> {
    Err(planned())
}

pub async fn produce(_ctx: Ctx, Path(_topic): Path<String>, _body: Bytes) -> ApiResult<Response> {
    Err(planned())
}
