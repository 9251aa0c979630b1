//! Produce: batches are validated and appended by the engine exactly as sent (every codec passes through
//! untouched), except where the topic asks for record-level work (`produce_records.rs`: compacted topics refuse
//! keyless records; `compression.type` recompresses); the engine also deduplicates idempotent producers' retries
//! and reports sequence/epoch errors.
//!
//! The work (leader checks, min ISR, durable group-commit waits) is [`crate::ReplicaManager::append_records`]'s;
//! this module decodes and encodes.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};

use super::produce_records::{self, Prepared};
use super::{code, s};
use crate::replica::{AppendEntry, PartitionError};
use crate::server::Close;
use crate::Broker;

/// A partition refused before the append: error code, message and KIP-467 record errors (index in batch,
/// message).
type Refusal = (i16, String, Vec<(i32, String)>);
/// One partition's result: the append, or (error code, message, record errors).
type Outcome = Result<annal_log::AppendInfo, (i16, String, Vec<(i32, String)>)>;

/// Returns `Ok(None)` for acks=0 (the client expects no response); `Err` closes the connection (a failed acks=0).
pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ProduceRequest,
) -> Result<Option<ProduceResponse>, Close> {
    let version = header.request_api_version;
    let acks = req.acks;
    let mut topics = Vec::with_capacity(req.topic_data.len());
    // (response topic, partition index) of each entry, in entry order.
    let mut positions = Vec::new();
    // Per partition, in request order: what to append, or the refusal decided before the append (compacted topics'
    // keyless records, KIP-890 verification).
    let mut items: Vec<Result<AppendEntry, Refusal>> = Vec::new();
    for (ti, t) in req.topic_data.into_iter().enumerate() {
        let name = t.name.0.to_string();
        topics.push(TopicProduceResponse::default().with_name(t.name));
        let policy = broker.replica_manager.topic(&name).map(|topic| {
            let max =
                crate::topic_config::effective("max.message.bytes", &topic.configs, &broker.config)
                    .0
                    .parse::<u32>()
                    .unwrap_or(annal_log::LogConfig::DEFAULT_MAX_MESSAGE_BYTES);
            (
                crate::topic_config::record_policy(&topic.configs, &broker.config),
                max,
            )
        });
        for p in t.partition_data {
            positions.push((ti, p.index));
            let mut records = p.records;
            let mut refusal = None;
            if let (Some((policy, max)), Some(bytes)) = (&policy, &records) {
                match produce_records::prepare(bytes, policy, *max, &format!("{name}-{}", p.index))
                {
                    Prepared::Unchanged => {}
                    Prepared::Rewritten(new) => records = Some(new),
                    Prepared::Rejected {
                        message,
                        record_errors,
                    } => {
                        refusal = Some((code::INVALID_RECORD, message, record_errors));
                    }
                }
            }
            items.push(match refusal {
                Some(refusal) => Err(refusal),
                None => Ok(AppendEntry {
                    topic: name.clone(),
                    partition: p.index,
                    records,
                }),
            });
        }
    }
    // Transactional batches are appended like any idempotent producer's (the engine checks epoch and sequence, and
    // an epoch older than a marker's is INVALID_PRODUCER_EPOCH), once the coordinator has confirmed that each
    // partition a transaction starts in was added to it (KIP-890 part 1).
    // Produce v12 means a transaction-version-2 client (Kafka's clients send at most v11 at version 1): it sends
    // no AddPartitionsToTxn, so the partition is added here, whatever the verification setting (KIP-890 part 2).
    if let Some(transactional_id) = &req.transactional_id {
        let implicit_add = version >= 12;
        if implicit_add || broker.config.transactions.partition_verification {
            super::produce_verification::verify(
                broker,
                transactional_id.0.as_str(),
                &mut items,
                implicit_add,
            )
            .await;
        }
    }
    let outcomes: Vec<Outcome> = {
        let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
        let mut entries = Vec::with_capacity(items.len());
        let mut refused = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Ok(entry) => {
                    entries.push(entry);
                    refused.push(None);
                }
                Err(refusal) => refused.push(Some(refusal)),
            }
        }
        let mut appended = broker
            .replica_manager
            .append_records(timeout, acks, entries)
            .await
            .into_iter()
            .map(|r| r.map_err(|e: PartitionError| (e.code(), e.to_string(), Vec::new())));
        refused
            .into_iter()
            .map(|refusal| match refusal {
                Some(refusal) => Err(refusal),
                None => appended
                    .next()
                    .expect("one append result per entry appended"),
            })
            .collect()
    };
    for ((ti, index), outcome) in positions.into_iter().zip(outcomes) {
        let mut r = PartitionProduceResponse::default().with_index(index);
        match outcome {
            Ok(info) => {
                r.base_offset = info.first_offset;
                r.log_append_time_ms = info.log_append_time_ms.unwrap_or(-1);
                if version >= 5 {
                    r.log_start_offset = info.log_start_offset;
                }
            }
            Err((error, msg, record_errors)) => {
                r.error_code = error;
                r.base_offset = -1;
                if version >= 8 {
                    r.error_message = Some(s(msg));
                    // KIP-467: which records made the batch fail.
                    r.record_errors = record_errors
                        .into_iter()
                        .map(|(index, message)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(index)
                                .with_batch_index_error_message(Some(s(message)))
                        })
                        .collect();
                }
            }
        }
        topics[ti].partition_responses.push(r);
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
    let mut resp = ProduceResponse::default().with_responses(topics);
    super::leader_hints::add_to_produce(broker, version, &mut resp);
    Ok(Some(resp))
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
