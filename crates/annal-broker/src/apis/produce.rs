//! Produce: batches are validated and appended by the engine exactly as sent (every codec passes through
//! untouched); the engine also deduplicates idempotent producers' retries and reports sequence/epoch errors.
//!
//! Durable acknowledgements (`flush.messages=1`): the append registers a wait with the partition's group commit
//! under the partition lock, and the response waits for it after the lock is released, so concurrent producers
//! share one fsync and appends go on while it runs (see `annal_log::GroupCommit`).

use std::sync::Arc;

use annal_log::{AppendOptions, TimestampType};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};

use super::offsets::{error_code, partition};
use super::{blocking, code, s};
use crate::server::Close;
use crate::topic_config;
use crate::Broker;

/// Returns `Ok(None)` for acks=0 (the client expects no response); `Err` closes the connection (a failed acks=0).
pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ProduceRequest,
) -> Result<Option<ProduceResponse>, Close> {
    let version = header.request_api_version;
    let acks = req.acks;
    let transactional = req.transactional_id.is_some();
    // Resolve partitions and check request-level rules first; then append everything in one blocking call.
    /// The partition, the batches to append, whether the topic uses LogAppendTime, whether acks wait for fsync.
    type Ready = (Arc<crate::topics::Partition>, Vec<u8>, bool, bool);
    struct Work {
        topic: usize,
        index: i32,
        result: Result<Ready, (i16, String)>,
    }
    let mut topics = Vec::new();
    let mut work = Vec::new();
    for (ti, t) in req.topic_data.into_iter().enumerate() {
        let name = t.name.0.to_string();
        let topic = broker.topics.get(&name);
        topics.push(TopicProduceResponse::default().with_name(t.name));
        for p in t.partition_data {
            let result = if !(-1..=1).contains(&acks) {
                Err((
                    code::INVALID_REQUIRED_ACKS,
                    format!("acks={acks} is not one of 0, 1, -1 (all)"),
                ))
            } else if transactional {
                Err((
                    code::INVALID_TXN_STATE,
                    "transactions are not supported by this Annal broker yet".into(),
                ))
            } else {
                match (&topic, partition(broker, &name, p.index)) {
                    (None, _) | (_, None) => Err((
                        code::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("partition {name}-{} does not exist", p.index),
                    )),
                    (Some(topic), Some(part)) => {
                        let min_isr: i32 = topic_config::effective(
                            "min.insync.replicas",
                            &topic.configs,
                            &broker.config,
                        )
                        .0
                        .parse()
                        .unwrap_or(1);
                        if acks == -1 && min_isr > 1 {
                            Err((
                                code::NOT_ENOUGH_REPLICAS,
                                format!("{name} has min.insync.replicas={min_isr} but this single node is the only in-sync replica"),
                            ))
                        } else {
                            match p.records {
                                None => Err((
                                    code::INVALID_RECORD,
                                    "the partition's records are null".into(),
                                )),
                                Some(bytes) => Ok((
                                    part,
                                    bytes.to_vec(),
                                    topic_config::log_append_time(&topic.configs, &broker.config),
                                    topic_config::durable_acks(&topic.configs, &broker.config),
                                )),
                            }
                        }
                    }
                }
            };
            work.push(Work {
                topic: ti,
                index: p.index,
                result,
            });
        }
    }

    let now = crate::now_ms();
    let done = blocking(move || {
        work.into_iter()
            .map(|w| {
                let outcome = w.result.and_then(|(part, mut bytes, log_append_time, durable)| {
                    let opts = AppendOptions {
                        leader_epoch: 0,
                        now_ms: now,
                        timestamp_type: if log_append_time { TimestampType::LogAppendTime } else { TimestampType::CreateTime },
                        ..Default::default()
                    };
                    let mut log = part.log.lock();
                    let appended = log.append(&mut bytes, &opts);
                    // Registered under the lock, right after the append: the next fsync covers it.
                    let durable_wait = match &appended {
                        Ok(info) if durable => Some(part.group_commit().durable(info.last_offset)),
                        _ => None,
                    };
                    drop(log);
                    let name = format!("{}-{}", part.topic, part.index);
                    appended
                        .map(|info| (info, durable_wait.map(|wait| (name.clone(), wait))))
                        .map_err(|e| {
                            let c = error_code(&e);
                            if c == code::KAFKA_STORAGE_ERROR {
                                tracing::error!(topic = %part.topic, partition = part.index, error = %e, "append failed");
                            }
                            (c, format!("{name}: {e}"))
                        })
                });
                (w.topic, w.index, outcome)
            })
            .collect::<Vec<_>>()
    })
    .await;

    let mut any_appended = false;
    let mut done_durable = Vec::with_capacity(done.len());
    for (ti, index, outcome) in done {
        let outcome = match outcome {
            Ok((info, None)) => Ok(info),
            Ok((info, Some((name, wait)))) if acks == 0 => {
                // Nobody waits for the answer, but flush.messages=1 still asks for the fsync: let it run.
                let b = broker.clone();
                tokio::spawn(async move {
                    match wait.await {
                        // The durable point moved: wake long-polling fetches of this durable partition.
                        Ok(()) => b.notify_appended(),
                        Err(e) => {
                            tracing::error!(partition = %name, error = %e, "fsync after an acks=0 produce failed")
                        }
                    }
                });
                Ok(info)
            }
            Ok((info, Some((name, wait)))) => match wait.await {
                Ok(()) => Ok(info),
                Err(e) => {
                    tracing::error!(partition = %name, error = %e, "durable produce failed");
                    Err((code::KAFKA_STORAGE_ERROR, format!("{name}: {e}")))
                }
            },
            Err(e) => Err(e),
        };
        done_durable.push((ti, index, outcome));
    }
    for (ti, index, outcome) in done_durable {
        let mut r = PartitionProduceResponse::default().with_index(index);
        match outcome {
            Ok(info) => {
                any_appended |= !info.duplicate;
                r.base_offset = info.first_offset;
                r.log_append_time_ms = info.log_append_time_ms.unwrap_or(-1);
                if version >= 5 {
                    r.log_start_offset = info.log_start_offset;
                }
            }
            Err((error, msg)) => {
                r.error_code = error;
                r.base_offset = -1;
                if version >= 8 {
                    r.error_message = Some(s(msg));
                }
            }
        }
        topics[ti].partition_responses.push(r);
    }
    if any_appended {
        broker.notify_appended();
    }
    if acks == 0 {
        // No response to carry an error: like Kafka, close the connection so the client notices (and refreshes
        // its metadata) instead of silently losing records.
        if topics.iter().any(|t| {
            t.partition_responses
                .iter()
                .any(|p| p.error_code != code::NONE)
        }) {
            return Err(Close(
                "acks=0 produce failed for at least one partition".into(),
            ));
        }
        return Ok(None);
    }
    Ok(Some(ProduceResponse::default().with_responses(topics)))
}

/// Produce v0-v2 (removed in Kafka 4.0, KIP-896) is still advertised, as Kafka 4 does, because librdkafka decides
/// whether it may compress by looking for Produce v0..v2 in ApiVersions (librdkafka#4956, KAFKA-18659). Clients
/// pick the highest common version, so only a client that cannot speak v3 sends these; it gets
/// UNSUPPORTED_VERSION for every partition. kafka-protocol has no codec for these versions, so the request is
/// walked by hand with every length checked against the bytes left.
pub fn legacy_unsupported(version: i16, mut body: &[u8]) -> Option<Result<Vec<u8>, String>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if b.len() < n {
            return Err(format!("needs {n} bytes, {} left", b.len()));
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Ok(head)
    }
    fn i16_(b: &mut &[u8]) -> Result<i16, String> {
        Ok(i16::from_be_bytes(take(b, 2)?.try_into().unwrap()))
    }
    fn i32_(b: &mut &[u8]) -> Result<i32, String> {
        Ok(i32::from_be_bytes(take(b, 4)?.try_into().unwrap()))
    }
    fn count(b: &mut &[u8], min_size: usize) -> Result<usize, String> {
        let n = i32_(b)?;
        if n < 0 || (n as usize).saturating_mul(min_size) > b.len() {
            return Err(format!(
                "array count {n} does not fit in the {} bytes left",
                b.len()
            ));
        }
        Ok(n as usize)
    }
    /// acks, and per topic its name and partition indexes.
    type Parsed = (i16, Vec<(Vec<u8>, Vec<i32>)>);
    let parse = |body: &mut &[u8]| -> Result<Parsed, String> {
        let acks = i16_(body)?;
        let _timeout = i32_(body)?;
        let mut topics = Vec::new();
        for _ in 0..count(body, 6)? {
            let len = i16_(body)?;
            let name = take(body, len.max(0) as usize)?.to_vec();
            let mut partitions = Vec::new();
            for _ in 0..count(body, 8)? {
                partitions.push(i32_(body)?);
                let size = i32_(body)?;
                take(body, size.max(0) as usize)?;
            }
            topics.push((name, partitions));
        }
        Ok((acks, topics))
    };
    let (acks, topics) = match parse(&mut body) {
        Ok(v) => v,
        Err(e) => return Some(Err(format!("malformed Produce v{version} request: {e}"))),
    };
    if acks == 0 {
        // Nothing was written and no response can say so: close, as for any failed acks=0 produce.
        return Some(Err(format!(
            "Produce v{version} with acks=0 is not supported"
        )));
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for (name, partitions) in topics {
        out.extend_from_slice(&(name.len() as i16).to_be_bytes());
        out.extend_from_slice(&name);
        out.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
        for p in partitions {
            out.extend_from_slice(&p.to_be_bytes());
            out.extend_from_slice(&code::UNSUPPORTED_VERSION.to_be_bytes());
            out.extend_from_slice(&(-1i64).to_be_bytes());
            if version >= 2 {
                out.extend_from_slice(&(-1i64).to_be_bytes()); // log_append_time
            }
        }
    }
    if version >= 1 {
        out.extend_from_slice(&0i32.to_be_bytes()); // throttle_time_ms
    }
    Some(Ok(out))
}
