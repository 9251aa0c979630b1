//! ApiVersions: advertises exactly [`super::SUPPORTED`] (and [`super::CLUSTER_ONLY`] in a cluster). KIP-511: a version we do not know is still answered, with
//! a v0 body carrying UNSUPPORTED_VERSION and our ranges, so the client can retry with a version we support.

use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::Encodable;

use super::{code, SUPPORTED};
use crate::Broker;

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

pub async fn handle(
    _broker: &Arc<Broker>,
    _header: &RequestHeader,
    _req: ApiVersionsRequest,
) -> ApiVersionsResponse {
    let mut keys = api_keys();
    keys.extend(super::CLUSTER_ONLY.iter().map(|(k, min, max)| {
        ApiVersion::default()
            .with_api_key(*k as i16)
            .with_min_version(*min)
            .with_max_version(*max)
    }));
    ApiVersionsResponse::default()
        .with_error_code(code::NONE)
        .with_api_keys(keys)
        .with_finalized_features_epoch(-1)
}

/// The KIP-511 answer to an ApiVersions request of a version we do not support: header v0 + body v0.
pub fn unsupported_version_response(correlation_id: i32) -> BytesMut {
    let body = ApiVersionsResponse::default()
        .with_error_code(code::UNSUPPORTED_VERSION)
        .with_api_keys(api_keys());
    let mut out = BytesMut::with_capacity(256);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&correlation_id.to_be_bytes());
    // v0 encoding of a plain error + array of fixed-size entries cannot fail.
    let _ = body.encode(&mut out, 0);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}
