//! DescribeClientQuotas (48) and AlterClientQuotas (49). Describe is answered from this broker's metadata image
//! with Kafka's filter semantics (`annal_metadata::quota::QuotaFilter`: exact name, default entity, any entity of
//! a type; strict); Alter is forwarded to the controller (`controller/quotas.rs`), which alone writes
//! ClientQuotaRecords, and answered once this broker's image shows the change, so a client throttled here right
//! after sees the new quota. Authorization (DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster) is `apis::authz`'s.

use std::sync::Arc;

use annal_metadata::quota::{FilterError, QuotaEntity, QuotaFilter};
use kafka_protocol::messages::*;

use super::fetch::Slices;
use super::forward::{wait_until, NOT_CONTROLLER};
use super::{code, s};
use crate::quota::QuotaKind;
use crate::Broker;

/// The (user, client-id) a request's quotas are looked up by: the connection's principal name and the
/// header's client id ("" when absent, as Kafka's).
fn quota_identity(header: &RequestHeader) -> (String, String) {
    let user = crate::server::PRINCIPAL
        .try_with(|p| crate::quota::quota_user(p).to_string())
        .unwrap_or_else(|_| "ANONYMOUS".to_string());
    let client = header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    (user, client)
}

/// Records a Produce request's bytes against the client's producer_byte_rate and mutes its connection if it
/// went over (Kafka records `request.sizeInBytes` for every produce, acks=0 included). Returns the throttle
/// time for the response.
pub fn throttle_produce(broker: &Arc<Broker>, header: &RequestHeader, request_bytes: usize) -> i32 {
    let image = broker.cluster().image();
    if image.client_quotas.is_empty() {
        return 0;
    }
    let (user, client) = quota_identity(header);
    let ms = broker
        .quotas()
        .produce
        .record(&image, &user, &client, request_bytes as f64);
    throttled(broker, QuotaKind::Produce, ms)
}

/// Records a consumer's Fetch response against its consumer_byte_rate, as Kafka's `handleFetchRequest`: within
/// the quota (and request_percentage, whose throttle `request_ms` is already recorded) the response goes as it
/// is; over either the bytes are taken back and the answer is an empty response carrying the throttle time (the
/// records stay for the next fetch, after the mute). A session this fetch just created is dropped, as Kafka
/// creates none for a throttled full fetch (the client starts a new one). Followers' fetches never come here.
pub fn throttle_fetch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    new_session: bool,
    request_ms: i32,
    resp: FetchResponse,
    slices: Slices,
) -> (FetchResponse, Slices) {
    let image = broker.cluster().image();
    if image.client_quotas.is_empty() {
        return (resp, slices);
    }
    let (user, client) = quota_identity(header);
    let bytes = super::fetch::record_bytes(&resp, &slices) as f64;
    let fetch = &broker.quotas().fetch;
    let ms = throttled(
        broker,
        QuotaKind::Fetch,
        fetch.record(&image, &user, &client, bytes),
    );
    let ms = ms.max(request_ms);
    if ms == 0 {
        return (resp, slices);
    }
    // Over either quota: the response is not sent, so its bytes do not count (Kafka's unrecordQuotaSensor).
    fetch.unrecord(&image, &user, &client, bytes);
    let session_id = if new_session && resp.session_id != 0 {
        broker.fetch_sessions.remove(resp.session_id);
        0
    } else {
        resp.session_id
    };
    let empty = FetchResponse::default()
        .with_throttle_time_ms(ms)
        .with_error_code(resp.error_code)
        .with_session_id(session_id);
    (empty, Slices::default())
}

/// Kafka caps a consumer's fetch at what its quota allows in one window (`getMaxValueInQuotaWindow`), so one
/// response cannot earn a throttle longer than the window.
pub fn cap_fetch_bytes(broker: &Arc<Broker>, header: &RequestHeader, req: &mut FetchRequest) {
    let image = broker.cluster().image();
    if image.client_quotas.is_empty() {
        return;
    }
    let (user, client) = quota_identity(header);
    if let Some(max) = broker
        .quotas()
        .fetch
        .max_value_in_window(&image, &user, &client)
    {
        let max = max.clamp(1.0, f64::from(i32::MAX)) as i32;
        if req.max_bytes <= 0 || req.max_bytes > max {
            req.max_bytes = max;
        }
    }
}

fn throttled(broker: &Arc<Broker>, kind: QuotaKind, ms: u32) -> i32 {
    if ms > 0 {
        broker
            .replica_manager()
            .metrics()
            .quota_throttled(kind.name(), ms);
        crate::quota::throttle_connection(ms);
    }
    ms.min(i32::MAX as u32) as i32
}

/// Records the time a request's handler took against the client's request_percentage (Kafka's
/// `ClientRequestQuotaManager`, for every request but inter-broker ones and acks=0 produces, which the caller
/// leaves out), mutes the connection if it went over, and returns the throttle time for the response.
pub fn throttle_request(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    busy: std::time::Duration,
) -> i32 {
    let image = broker.cluster().image();
    if image.client_quotas.is_empty() {
        return 0;
    }
    let (user, client) = quota_identity(header);
    let ms =
        broker
            .quotas()
            .request
            .record(&image, &user, &client, crate::quota::busy_percent(busy));
    throttled(broker, QuotaKind::Request, ms)
}

/// A response whose throttle_time_ms a quota can raise.
pub trait HasThrottleTime {
    fn raise_throttle_time_ms(&mut self, ms: i32);
}

macro_rules! has_throttle_time {
    ($($t:ty),* $(,)?) => {$(
        impl HasThrottleTime for $t {
            fn raise_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = self.throttle_time_ms.max(ms);
            }
        }
    )*};
}

has_throttle_time!(
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsResponse,
    ApiVersionsResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    EndTxnResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
);

/// Dispatch helper: sets the throttle time of a response that has the field, and does nothing for the others
/// (SASL, WriteTxnMarkers), chosen at compile time as `ops::metrics::ErrorProbe` does: the impl on
/// `&mut ThrottleProbe<T>` needs `T: HasThrottleTime`, the fallback takes any `T` one auto-reference later.
pub struct ThrottleProbe<'a, T>(pub &'a mut T);

pub trait RaiseThrottle {
    fn raise(self, ms: i32);
}

impl<T: HasThrottleTime> RaiseThrottle for &mut ThrottleProbe<'_, T> {
    fn raise(self, ms: i32) {
        self.0.raise_throttle_time_ms(ms);
    }
}

pub trait RaiseNoThrottle {
    fn raise(self, ms: i32);
}

impl<T> RaiseNoThrottle for &mut &mut ThrottleProbe<'_, T> {
    fn raise(self, _ms: i32) {}
}

/// Kafka's UNSUPPORTED_VERSION, what it answers a filter on an entity type it does not know.
const UNSUPPORTED_VERSION: i16 = 35;

/// DescribeClientQuotas (48).
pub async fn describe_client_quotas(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    use describe_client_quotas_response::{EntityData, EntryData, ValueData};
    let components: Vec<(String, i8, Option<String>)> = req
        .components
        .iter()
        .map(|c| {
            (
                c.entity_type.to_string(),
                c.match_type,
                c._match.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    let filter = match QuotaFilter::parse(&components, req.strict) {
        Ok(f) => f,
        Err(e) => {
            let (code, message) = match e {
                FilterError::Invalid(m) => (code::INVALID_REQUEST, m),
                FilterError::UnsupportedEntityType(m) => (UNSUPPORTED_VERSION, m),
            };
            return DescribeClientQuotasResponse::default()
                .with_error_code(code)
                .with_error_message(Some(s(message)))
                .with_entries(None);
        }
    };
    let image = broker.cluster().image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(entity, _)| filter.matches(entity))
        .map(|(entity, keys)| {
            EntryData::default()
                .with_entity(
                    entity
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(s(t.clone()))
                                .with_entity_name(n.clone().map(s))
                        })
                        .collect(),
                )
                .with_values(
                    keys.iter()
                        .map(|(k, v)| ValueData::default().with_key(s(k.clone())).with_value(v.0))
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// AlterClientQuotas (49), forwarded to the controller.
pub async fn alter_client_quotas(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let cluster = broker.cluster();
    match cluster
        .channel()
        .send(&req, header.request_api_version)
        .await
    {
        Ok(resp) => {
            if !req.validate_only {
                // What each accepted entity should read in this broker's image once the change is applied.
                let expected: Vec<(QuotaEntity, Vec<(String, Option<f64>)>)> = req
                    .entries
                    .iter()
                    .zip(&resp.entries)
                    .filter(|(_, r)| r.error_code == code::NONE)
                    .map(|(e, _)| {
                        let entity: QuotaEntity = e
                            .entity
                            .iter()
                            .map(|p| {
                                (
                                    p.entity_type.to_string(),
                                    p.entity_name.as_ref().map(|n| n.to_string()),
                                )
                            })
                            .collect();
                        let ops = e
                            .ops
                            .iter()
                            .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                            .collect();
                        (entity, ops)
                    })
                    .collect();
                wait_until(|| {
                    let image = cluster.image();
                    expected.iter().all(|(entity, ops)| {
                        ops.iter().all(|(key, want)| {
                            image.client_quota(entity, key).map(f64::to_bits)
                                == want.map(f64::to_bits)
                        })
                    })
                })
                .await;
            }
            resp
        }
        Err(e) => {
            use alter_client_quotas_response::{EntityData, EntryData};
            let message = format!("the active controller could not be reached ({e:#}); retry");
            AlterClientQuotasResponse::default().with_entries(
                req.entries
                    .iter()
                    .map(|entry| {
                        EntryData::default()
                            .with_error_code(NOT_CONTROLLER)
                            .with_error_message(Some(s(message.clone())))
                            .with_entity(
                                entry
                                    .entity
                                    .iter()
                                    .map(|p| {
                                        EntityData::default()
                                            .with_entity_type(p.entity_type.clone())
                                            .with_entity_name(p.entity_name.clone())
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
        }
    }
}
