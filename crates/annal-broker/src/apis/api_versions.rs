//! ApiVersions: advertises exactly [`super::SUPPORTED`] (and [`super::CLUSTER_ONLY`] in a cluster). KIP-511: a version we do not know is still answered, with
//! a v0 body carrying UNSUPPORTED_VERSION and our ranges, so the client can retry with a version we support.

use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
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

/// Kafka's `TransactionVersion` feature: levels 0 and 1 are KIP-890 part 1 behaviour, 2 is part 2.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// The highest `transaction.version` this broker implements.
pub const TRANSACTION_VERSION_MAX: i16 = 2;

/// The epoch of the finalized features: clients keep the features of the highest epoch they saw, so it must grow
/// when the configured level changes. Annal's features come from configuration, not the metadata log, so the
/// epoch is the time this process started (ms).
fn finalized_features_epoch() -> i64 {
    static STARTED_MS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *STARTED_MS.get_or_init(crate::now_ms)
}

pub async fn handle(
    broker: &Arc<Broker>,
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
    // Features (v3+, KIP-584): Kafka 4.x finalizes `transaction.version` 2, which is what makes Java clients 4.x
    // use KIP-890 part 2. Level 0 is not listed as finalized, as Kafka omits features at level 0.
    let level = broker.config.transactions.transaction_version;
    let finalized = if level > 0 {
        vec![FinalizedFeatureKey::default()
            .with_name(kafka_protocol::protocol::StrBytes::from_static_str(
                TRANSACTION_VERSION_FEATURE,
            ))
            .with_min_version_level(level)
            .with_max_version_level(level)]
    } else {
        Vec::new()
    };
    ApiVersionsResponse::default()
        .with_error_code(code::NONE)
        .with_api_keys(keys)
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(kafka_protocol::protocol::StrBytes::from_static_str(
                TRANSACTION_VERSION_FEATURE,
            ))
            .with_min_version(0)
            .with_max_version(TRANSACTION_VERSION_MAX)])
        .with_finalized_features_epoch(finalized_features_epoch())
        .with_finalized_features(finalized)
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
