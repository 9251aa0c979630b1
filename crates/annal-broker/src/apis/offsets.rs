//! ListOffsets and DeleteRecords.

use std::sync::Arc;

use annal_log::LogError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    RequestHeader,
};

use super::{blocking, code};
use crate::topic_config;
use crate::topics::{high_watermark, Partition};
use crate::Broker;

/// The partition, if the topic exists and has it.
pub fn partition(broker: &Broker, topic: &str, index: i32) -> Option<Arc<Partition>> {
    let t = broker.topics.get(topic)?;
    usize::try_from(index)
        .ok()
        .and_then(|i| t.partitions.get(i).cloned())
}

/// Whether the topic acknowledges only fsynced records (its high watermark is then the flushed offset).
pub fn durable(broker: &Broker, topic: &str) -> bool {
    broker
        .topics
        .get(topic)
        .is_some_and(|t| topic_config::durable_acks(&t.configs, &broker.config))
}

pub fn error_code(e: &LogError) -> i16 {
    match e {
        LogError::CorruptRecord { .. } => code::CORRUPT_MESSAGE,
        LogError::InvalidRecord { .. } => code::INVALID_RECORD,
        LogError::MessageTooLarge { .. } => code::MESSAGE_TOO_LARGE,
        LogError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        LogError::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        LogError::InvalidProducerEpoch { .. } => code::INVALID_PRODUCER_EPOCH,
        LogError::UnknownProducerId { .. } => code::UNKNOWN_PRODUCER_ID,
        _ => code::KAFKA_STORAGE_ERROR,
    }
}

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const EARLIEST_PENDING_UPLOAD: i64 = -5;

pub async fn list_offsets(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let version = header.request_api_version;
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let mut r =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            match partition(broker, &t.name.0, p.partition_index) {
                None => r.error_code = code::UNKNOWN_TOPIC_OR_PARTITION,
                Some(part) => {
                    let durable = durable(broker, &t.name.0);
                    let log = part.log.lock();
                    let found: Result<(i64, i64), i16> = match p.timestamp {
                        LATEST => Ok((-1, high_watermark(&log, durable))),
                        EARLIEST | EARLIEST_LOCAL => Ok((-1, log.log_start_offset())),
                        // No tiered storage: nothing is pending upload (Kafka answers -1 then).
                        EARLIEST_PENDING_UPLOAD if version >= 9 => Ok((-1, -1)),
                        MAX_TIMESTAMP if version >= 7 => {
                            Ok(log.max_timestamp().unwrap_or((-1, -1)))
                        }
                        ts if ts >= 0 => match log.offset_for_timestamp(ts) {
                            Ok(Some((offset, timestamp))) => Ok((timestamp, offset)),
                            Ok(None) => Ok((-1, -1)),
                            Err(e) => Err(error_code(&e)),
                        },
                        _ => Err(code::INVALID_REQUEST),
                    };
                    match found {
                        Ok((timestamp, offset)) => {
                            r.timestamp = timestamp;
                            r.offset = offset;
                            if version >= 4 {
                                r.leader_epoch = if offset >= 0 { 0 } else { -1 };
                            }
                        }
                        Err(c) => r.error_code = c,
                    }
                }
            }
            partitions.push(r);
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

pub async fn delete_records(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            match partition(broker, &t.name.0, p.partition_index) {
                None => r.error_code = code::UNKNOWN_TOPIC_OR_PARTITION,
                Some(part) => {
                    let offset = p.offset;
                    let durable = durable(broker, &t.name.0);
                    let outcome = blocking(move || {
                        let mut log = part.log.lock();
                        let hw = high_watermark(&log, durable);
                        // -1 means "up to the high watermark".
                        let target = if offset == -1 { hw } else { offset };
                        if target < 0 || target > hw {
                            return Err(code::OFFSET_OUT_OF_RANGE);
                        }
                        if target <= log.log_start_offset() {
                            return Ok(log.log_start_offset());
                        }
                        log.delete_records_before(target)
                            .map_err(|e| error_code(&e))
                    })
                    .await;
                    match outcome {
                        Ok(low) => r.low_watermark = low,
                        Err(c) => r.error_code = c,
                    }
                }
            }
            partitions.push(r);
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// OffsetForLeaderEpoch (consumers validate their position after a leader change, KIP-320). A single node has
/// always been leader at epoch 0, and every batch carries epoch 0: epoch 0 ends at the log end; a later epoch
/// does not exist yet (Kafka answers -1/-1), and a current epoch above ours is one we have not seen.
pub async fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: kafka_protocol::messages::OffsetForLeaderEpochRequest,
) -> kafka_protocol::messages::OffsetForLeaderEpochResponse {
    use kafka_protocol::messages::offset_for_leader_epoch_response::{
        EpochEndOffset, OffsetForLeaderTopicResult,
    };
    const UNKNOWN_LEADER_EPOCH: i16 = 75;
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let mut r = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            match partition(broker, &t.topic.0, p.partition) {
                None => r.error_code = code::UNKNOWN_TOPIC_OR_PARTITION,
                Some(_) if p.current_leader_epoch > 0 => r.error_code = UNKNOWN_LEADER_EPOCH,
                Some(part) => {
                    if p.leader_epoch == 0 {
                        r.leader_epoch = 0;
                        r.end_offset = part.log.lock().log_end_offset();
                    }
                }
            }
            partitions.push(r);
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions),
        );
    }
    kafka_protocol::messages::OffsetForLeaderEpochResponse::default().with_topics(topics)
}
