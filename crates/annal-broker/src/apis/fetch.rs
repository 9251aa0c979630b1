//! Fetch with long polling. Incremental fetch sessions (KIP-227) are refused the way Kafka refuses them when its
//! session cache is full: a request that asks for a new session gets session id 0, so clients keep sending full
//! (sessionless) fetches; a request naming a session we never gave out gets FETCH_SESSION_ID_NOT_FOUND.

use std::sync::Arc;
use std::time::Duration;

use annal_log::LogError;
use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, RequestHeader};
use uuid::Uuid;

use super::code;
use super::offsets::error_code;
use crate::topics::Partition;
use crate::Broker;

/// Longest wait we honour, whatever the client asks (Kafka clients use 500 ms by default).
const MAX_WAIT_MS: i32 = 60_000;

/// What a fetch asked for, resolved once: per topic (name, id) and per partition (index, offset, max bytes).
type Plan = Vec<(String, Uuid, Vec<(i32, i64, i32, Target)>)>;

enum Target {
    Found(Arc<Partition>),
    Missing(i16),
}

pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: FetchRequest,
) -> FetchResponse {
    let version = header.request_api_version;
    if version >= 7 {
        // FINAL_EPOCH (-1) with session 0 is a sessionless fetch; epoch 0 asks for a new session (not granted).
        if req.session_id != 0 {
            return FetchResponse::default()
                .with_error_code(code::FETCH_SESSION_ID_NOT_FOUND)
                .with_session_id(0);
        }
        if req.session_epoch != 0 && req.session_epoch != -1 {
            return FetchResponse::default()
                .with_error_code(code::INVALID_FETCH_SESSION_EPOCH)
                .with_session_id(0);
        }
    }
    let read_committed = req.isolation_level == 1;
    // Resolve every requested partition once (by name, or by topic id from v13).
    let mut plan: Plan = Vec::new();
    for t in &req.topics {
        let topic = if version >= 13 {
            broker.topics.get_by_id(t.topic_id)
        } else {
            broker.topics.get(&t.topic.0)
        };
        let missing = if version >= 13 {
            code::UNKNOWN_TOPIC_ID
        } else {
            code::UNKNOWN_TOPIC_OR_PARTITION
        };
        let mut parts = Vec::new();
        for p in &t.partitions {
            let target = match &topic {
                None => Target::Missing(missing),
                Some(topic) => match usize::try_from(p.partition)
                    .ok()
                    .and_then(|i| topic.partitions.get(i))
                {
                    Some(part) => Target::Found(part.clone()),
                    None => Target::Missing(code::UNKNOWN_TOPIC_OR_PARTITION),
                },
            };
            parts.push((p.partition, p.fetch_offset, p.partition_max_bytes, target));
        }
        plan.push((t.topic.0.to_string(), t.topic_id, parts));
    }

    let plan = Arc::new(plan);
    let max_wait = Duration::from_millis(req.max_wait_ms.clamp(0, MAX_WAIT_MS) as u64);
    let deadline = tokio::time::Instant::now() + max_wait;
    // Before v3 there is no max_bytes; the broker's fetch.max.bytes caps every fetch (as in Kafka).
    let broker_max = broker.config.fetch_max_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        broker_max
    } else {
        (req.max_bytes as usize).min(broker_max)
    };
    let min_bytes = req.min_bytes.max(0) as usize;
    let mut appended = broker.appended.subscribe();
    let mut shutting_down = broker.shutting_down.clone();
    loop {
        // Subscribe before reading, so an append between the read and the wait still wakes us.
        appended.borrow_and_update();
        // Disk reads (pread of segment files) run off the async workers.
        let p = plan.clone();
        let (responses, total, has_error) =
            super::blocking(move || read_all(&p, version, max_bytes, read_committed)).await;
        let now = tokio::time::Instant::now();
        if total >= min_bytes || has_error || now >= deadline || *shutting_down.borrow() {
            return FetchResponse::default()
                .with_responses(responses)
                .with_session_id(0);
        }
        tokio::select! {
            _ = appended.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutting_down.changed() => {}
        }
    }
}

/// One pass over the partitions. The first partition with data returns at least one whole batch even past the
/// limits (KIP-74, so a large batch never blocks a consumer); later partitions stop at the limits.
fn read_all(
    plan: &Plan,
    version: i16,
    max_bytes: usize,
    read_committed: bool,
) -> (Vec<FetchableTopicResponse>, usize, bool) {
    let mut total = 0usize;
    let mut has_error = false;
    let mut responses = Vec::with_capacity(plan.len());
    for (name, id, parts) in plan {
        let mut topic = FetchableTopicResponse::default();
        if version >= 13 {
            topic.topic_id = *id;
        } else {
            topic.topic = super::topic_name(name);
        }
        for (index, offset, partition_max, target) in parts {
            let mut pd = PartitionData::default()
                .with_partition_index(*index)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_aborted_transactions(if read_committed {
                    Some(Vec::new())
                } else {
                    None
                })
                .with_records(Some(Bytes::new()));
            match target {
                Target::Missing(c) => {
                    pd.error_code = *c;
                    has_error = true;
                }
                Target::Found(part) => {
                    let budget = (*partition_max).max(0) as usize;
                    let budget = budget.min(max_bytes.saturating_sub(total));
                    let first = total == 0;
                    // Take the slice under the lock; read its bytes after releasing it.
                    let read = {
                        let log = part.log.lock();
                        let r = log.read(*offset, budget.max(1), None);
                        (r, log.log_start_offset(), log.log_end_offset())
                    };
                    let (r, start, end) = read;
                    pd.high_watermark = end;
                    pd.last_stable_offset = end;
                    pd.log_start_offset = start;
                    match r {
                        Ok(read) => {
                            if let Some(slice) = read.slice {
                                if first || slice.len() <= budget {
                                    match slice.read_to_vec() {
                                        Ok(bytes) => {
                                            total += bytes.len();
                                            pd.records = Some(Bytes::from(bytes));
                                        }
                                        Err(e) => {
                                            tracing::error!(partition = %format!("{}-{}", part.topic, part.index), error = %e, "read failed");
                                            pd.error_code = code::KAFKA_STORAGE_ERROR;
                                            has_error = true;
                                        }
                                    }
                                }
                            }
                        }
                        // OFFSET_OUT_OF_RANGE (below the log start or past the end) lets clients apply
                        // auto.offset.reset; anything else is a storage error.
                        Err(e) => {
                            if !matches!(e, LogError::OffsetOutOfRange { .. }) {
                                tracing::warn!(partition = %format!("{}-{}", part.topic, part.index), error = %e, "fetch read failed");
                            }
                            pd.error_code = error_code(&e);
                            has_error = true;
                        }
                    }
                }
            }
            topic.partitions.push(pd);
        }
        responses.push(topic);
    }
    (responses, total, has_error)
}
