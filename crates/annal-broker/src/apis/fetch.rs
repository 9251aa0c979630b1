//! Fetch with long polling and KIP-227 incremental fetch sessions (see [`super::fetch_session`]). Reads return
//! whole batches; the first partition with data always gets at least one batch (KIP-74).

use std::sync::Arc;
use std::time::Duration;

use annal_log::LogError;
use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, RequestHeader};
use uuid::Uuid;

use super::offsets::error_code;
use super::{code, fetch_session};
use crate::topic_config;
use crate::topics::{high_watermark, Partition};
use crate::Broker;

/// Longest wait we honour, whatever the client asks (Kafka clients use 500 ms by default).
const MAX_WAIT_MS: i32 = 60_000;

/// What a fetch asked for, resolved once: per topic (name, id) and per partition (index, offset, max bytes).
type Plan = Vec<(String, Uuid, Vec<(i32, i64, i32, Target)>)>;

enum Target {
    /// The partition, and whether its topic is durable (high watermark = flushed offset).
    Found(Arc<Partition>, bool),
    Missing(i16),
}

/// How this fetch relates to KIP-227 sessions.
enum Mode {
    /// Full request, full response, session id 0.
    Sessionless,
    /// Full request that opens a session (the response carries its id).
    New,
    /// Incremental request on an existing session: only partitions with news are answered.
    Incremental(i32),
}

pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: FetchRequest,
) -> FetchResponse {
    let version = header.request_api_version;
    let by_id = version >= 13;
    let key = |name: &str, id: Uuid, partition: i32| fetch_session::Key {
        topic: if by_id {
            String::new()
        } else {
            name.to_string()
        },
        topic_id: if by_id { id } else { Uuid::nil() },
        partition,
    };
    let requested: fetch_session::Entries = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    key(&t.topic.0, t.topic_id, p.partition),
                    p.fetch_offset,
                    p.partition_max_bytes,
                )
            })
        })
        .collect();
    let sessions = &broker.fetch_sessions;
    let (mode, entries) = if version < 7 {
        (Mode::Sessionless, requested)
    } else {
        match (req.session_id, req.session_epoch) {
            (0, -1) => (Mode::Sessionless, requested),
            (0, 0)
                if sessions.enabled()
                    && requested.len() <= fetch_session::MAX_PARTITIONS_PER_SESSION =>
            {
                (Mode::New, requested)
            }
            (0, 0) => (Mode::Sessionless, requested),
            (0, _) => return session_error(code::INVALID_FETCH_SESSION_EPOCH),
            (id, -1) => {
                // FINAL_EPOCH: the client closes its session and fetches sessionless.
                sessions.remove(id);
                (Mode::Sessionless, requested)
            }
            (id, 0) => {
                sessions.remove(id);
                (
                    if sessions.enabled() {
                        Mode::New
                    } else {
                        Mode::Sessionless
                    },
                    requested,
                )
            }
            (id, epoch) => {
                let forgotten: Vec<fetch_session::Key> = req
                    .forgotten_topics_data
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| key(&t.topic.0, t.topic_id, *p)))
                    .collect();
                match sessions.update(id, epoch, &requested, &forgotten) {
                    Ok(all) => (Mode::Incremental(id), all),
                    Err(c) => return session_error(c),
                }
            }
        }
    };
    let read_committed = req.isolation_level == 1;
    let plan = Arc::new(resolve(broker, by_id, &entries));
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
    let responses = loop {
        // Subscribe before reading, so an append between the read and the wait still wakes us.
        appended.borrow_and_update();
        // Disk reads (pread of segment files) run off the async workers.
        let p = plan.clone();
        let (responses, total, has_error) =
            super::blocking(move || read_all(&p, version, max_bytes, read_committed)).await;
        let now = tokio::time::Instant::now();
        if total >= min_bytes || has_error || now >= deadline || *shutting_down.borrow() {
            break responses;
        }
        tokio::select! {
            _ = appended.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutting_down.changed() => {}
        }
    };
    let responses = match mode {
        Mode::Sessionless => {
            return FetchResponse::default()
                .with_responses(responses)
                .with_session_id(0)
        }
        Mode::New => {
            let told = entries
                .iter()
                .zip(responses.iter().flat_map(|t| t.partitions.iter()))
                .map(|((k, offset, max), p)| {
                    let cached = fetch_session::Cached {
                        fetch_offset: *offset,
                        max_bytes: *max,
                        high_watermark: p.high_watermark,
                        log_start: p.log_start_offset,
                    };
                    (k.clone(), cached)
                })
                .collect();
            let id = sessions.create(told);
            return FetchResponse::default()
                .with_responses(responses)
                .with_session_id(id);
        }
        Mode::Incremental(id) => {
            let mut keys = entries.iter().map(|(k, _, _)| k);
            let mut out = Vec::new();
            for mut topic in responses {
                topic.partitions.retain(|p| {
                    let Some(k) = keys.next() else { return true };
                    let records = p.records.as_ref().map_or(0, |r| r.len());
                    sessions.has_news(
                        id,
                        k,
                        p.error_code,
                        records,
                        p.high_watermark,
                        p.log_start_offset,
                    )
                });
                if !topic.partitions.is_empty() {
                    out.push(topic);
                }
            }
            (id, out)
        }
    };
    FetchResponse::default()
        .with_responses(responses.1)
        .with_session_id(responses.0)
}

fn session_error(code: i16) -> FetchResponse {
    FetchResponse::default()
        .with_error_code(code)
        .with_session_id(0)
}

/// Resolves the partitions to fetch (consecutive entries of one topic share a response topic).
fn resolve(broker: &Broker, by_id: bool, entries: &fetch_session::Entries) -> Plan {
    let mut plan: Plan = Vec::new();
    for (key, offset, max_bytes) in entries {
        let same_topic = plan
            .last()
            .is_some_and(|(name, id, _)| *name == key.topic && *id == key.topic_id);
        if !same_topic {
            plan.push((key.topic.clone(), key.topic_id, Vec::new()));
        }
        let topic = if by_id {
            broker.topics.get_by_id(key.topic_id)
        } else {
            broker.topics.get(&key.topic)
        };
        let target = match topic {
            None => Target::Missing(if by_id {
                code::UNKNOWN_TOPIC_ID
            } else {
                code::UNKNOWN_TOPIC_OR_PARTITION
            }),
            Some(topic) => match usize::try_from(key.partition)
                .ok()
                .and_then(|i| topic.partitions.get(i))
            {
                Some(part) => Target::Found(
                    part.clone(),
                    topic_config::durable_acks(&topic.configs, &broker.config),
                ),
                None => Target::Missing(code::UNKNOWN_TOPIC_OR_PARTITION),
            },
        };
        if let Some(last) = plan.last_mut() {
            last.2.push((key.partition, *offset, *max_bytes, target));
        }
    }
    plan
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
                Target::Found(part, durable) => {
                    let budget = (*partition_max).max(0) as usize;
                    let budget = budget.min(max_bytes.saturating_sub(total));
                    let first = total == 0;
                    // Take the slice under the lock; read its bytes after releasing it.
                    // Durable topics are read only up to the flushed offset (their high watermark).
                    let read = {
                        let log = part.log.lock();
                        let hw = high_watermark(&log, *durable);
                        let r = log.read(*offset, budget.max(1), durable.then_some(hw));
                        (r, log.log_start_offset(), hw)
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
