//! Produce: batches are validated and appended by the engine exactly as sent (every codec passes through
//! untouched); the engine also deduplicates idempotent producers' retries and reports sequence/epoch errors.

use std::sync::Arc;

use annal_log::{AppendOptions, TimestampType};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};

use super::offsets::{error_code, partition};
use super::{blocking, code, s};
use crate::topic_config;
use crate::Broker;

/// Returns `None` for acks=0: the client expects no response.
pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ProduceRequest,
) -> Option<ProduceResponse> {
    let version = header.request_api_version;
    let acks = req.acks;
    let transactional = req.transactional_id.is_some();
    // Resolve partitions and check request-level rules first; then append everything in one blocking call.
    type Ready = (Arc<crate::topics::Partition>, Vec<u8>, bool);
    struct Work {
        topic: usize,
        index: i32,
        /// The partition, the batches to append, and whether the topic uses LogAppendTime.
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
                let outcome = w.result.and_then(|(part, mut bytes, log_append_time)| {
                    let opts = AppendOptions {
                        leader_epoch: 0,
                        now_ms: now,
                        timestamp_type: if log_append_time { TimestampType::LogAppendTime } else { TimestampType::CreateTime },
                        ..Default::default()
                    };
                    let appended = part.log.lock().append(&mut bytes, &opts);
                    appended.map_err(|e| {
                        let c = error_code(&e);
                        if c == code::KAFKA_STORAGE_ERROR {
                            tracing::error!(topic = %part.topic, partition = part.index, error = %e, "append failed");
                        }
                        (c, format!("{}-{}: {e}", part.topic, part.index))
                    })
                });
                (w.topic, w.index, outcome)
            })
            .collect::<Vec<_>>()
    })
    .await;

    let mut any_appended = false;
    for (ti, index, outcome) in done {
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
        return None;
    }
    Some(ProduceResponse::default().with_responses(topics))
}
