//! What can go wrong on a partition, and the Kafka code each failure is answered with. The rule that fails
//! decides the variant (in [`super::Partition`] or [`super::ReplicaManager`]); handlers only call
//! [`PartitionError::code`] and [`PartitionError`]'s `Display` for the error message.

use annal_log::{DurableError, LogError};

use crate::kafka_code as code;

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// UNKNOWN_TOPIC_OR_PARTITION (3): the client's metadata is stale; it refreshes and retries.
    #[error("partition {topic}-{partition} does not exist")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    /// UNKNOWN_TOPIC_ID (100): the topic was deleted (or never existed); the client refreshes its metadata.
    #[error("no topic has id {0}")]
    UnknownTopicId(uuid::Uuid),
    /// NOT_LEADER_OR_FOLLOWER (6): this broker does not lead the partition; the client refreshes its metadata
    /// and sends the request to the leader.
    #[error(
        "this broker does not lead {partition}; send the request to its leader (refresh metadata)"
    )]
    NotLeader { partition: String },
    /// NOT_ENOUGH_REPLICAS (19): acks=all needs min.insync.replicas in-sync replicas; retriable once followers
    /// catch up, or lower the topic's min.insync.replicas.
    #[error("{partition} has {isr} in-sync replicas but min.insync.replicas={min_isr}; acks=all cannot be met (wait for followers to catch up or lower min.insync.replicas)")]
    NotEnoughReplicas {
        partition: String,
        isr: usize,
        min_isr: i32,
    },
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND (20): the batch was written on the leader, but the ISR fell below
    /// min.insync.replicas before the other replicas had it; the producer retries (idempotence makes that safe).
    #[error("{partition}: written on the leader, but the ISR shrank to {isr} (< min.insync.replicas={min_isr}) before it was replicated; retry")]
    NotEnoughReplicasAfterAppend {
        partition: String,
        isr: usize,
        min_isr: i32,
    },
    /// REQUEST_TIMED_OUT (7): acks=all waited the request's timeout and the in-sync replicas did not all
    /// confirm the batch; it may still be committed later. The producer retries.
    #[error("{partition}: the in-sync replicas did not confirm offset {offset} within the request timeout; retry")]
    ReplicationTimedOut { partition: String, offset: i64 },
    /// NOT_LEADER_OR_FOLLOWER (6) for a replica fetch from a broker that is not one of the partition's replicas.
    #[error("{partition}: broker {replica} is not one of its replicas")]
    NotAReplica { partition: String, replica: i32 },
    /// FENCED_LEADER_EPOCH (74): the client's leader epoch is older than this leader's; it refreshes metadata.
    #[error("{partition}: the request's leader epoch {requested} is older than the current {current}; refresh metadata")]
    FencedLeaderEpoch {
        partition: String,
        requested: i32,
        current: i32,
    },
    /// UNKNOWN_LEADER_EPOCH (75): the client has seen a newer epoch than this broker; retriable once this
    /// broker catches up with the metadata.
    #[error("{partition}: the request's leader epoch {requested} is newer than this broker's {current}; retry")]
    UnknownLeaderEpoch {
        partition: String,
        requested: i32,
        current: i32,
    },
    /// INVALID_REQUIRED_ACKS (21).
    #[error("acks={0} is not one of 0, 1, -1 (all)")]
    InvalidRequiredAcks(i16),
    /// INVALID_RECORD (87).
    #[error("the partition's records are null")]
    NullRecords,
    /// OFFSET_OUT_OF_RANGE (1) for DeleteRecords: records can be deleted only below the high watermark.
    #[error(
        "{partition}: offset {offset} is not between 0 and the high watermark {high_watermark}"
    )]
    DeleteBeyondHighWatermark {
        partition: String,
        offset: i64,
        high_watermark: i64,
    },
    /// INVALID_REQUEST (42): a ListOffsets timestamp that is neither a time nor a known special value.
    #[error(
        "{0} is not a timestamp or a special offset (-1 latest, -2 earliest, -3 max timestamp)"
    )]
    InvalidOffsetSpec(i64),
    /// KAFKA_STORAGE_ERROR (56): a durable produce's fsync failed; see the broker log for the disk error.
    #[error("{partition}: {source}")]
    Durable {
        partition: String,
        source: DurableError,
    },
    /// The engine's own error, mapped as `annal_log::LogError` documents.
    #[error("{partition}: {source}")]
    Log { partition: String, source: LogError },
}

impl PartitionError {
    /// The Kafka error code the response carries.
    pub fn code(&self) -> i16 {
        match self {
            PartitionError::UnknownTopicOrPartition { .. } => code::UNKNOWN_TOPIC_OR_PARTITION,
            PartitionError::UnknownTopicId(_) => code::UNKNOWN_TOPIC_ID,
            PartitionError::NotLeader { .. } => code::NOT_LEADER_OR_FOLLOWER,
            PartitionError::NotEnoughReplicas { .. } => code::NOT_ENOUGH_REPLICAS,
            PartitionError::NotEnoughReplicasAfterAppend { .. } => {
                code::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            }
            PartitionError::ReplicationTimedOut { .. } => code::REQUEST_TIMED_OUT,
            PartitionError::NotAReplica { .. } => code::NOT_LEADER_OR_FOLLOWER,
            PartitionError::FencedLeaderEpoch { .. } => code::FENCED_LEADER_EPOCH,
            PartitionError::UnknownLeaderEpoch { .. } => code::UNKNOWN_LEADER_EPOCH,
            PartitionError::InvalidRequiredAcks(_) => code::INVALID_REQUIRED_ACKS,
            PartitionError::NullRecords => code::INVALID_RECORD,
            PartitionError::DeleteBeyondHighWatermark { .. } => code::OFFSET_OUT_OF_RANGE,
            PartitionError::InvalidOffsetSpec(_) => code::INVALID_REQUEST,
            PartitionError::Durable { .. } => code::KAFKA_STORAGE_ERROR,
            PartitionError::Log { source, .. } => log_error_code(source),
        }
    }

    /// True for failures of the disk (worth an error line in the broker log), not of the request.
    pub fn is_storage(&self) -> bool {
        self.code() == code::KAFKA_STORAGE_ERROR
    }
}

/// The Kafka code for an engine error.
fn log_error_code(e: &LogError) -> i16 {
    match e {
        LogError::CorruptRecord { .. } => code::CORRUPT_MESSAGE,
        LogError::InvalidRecord { .. } => code::INVALID_RECORD,
        LogError::MessageTooLarge { .. } => code::MESSAGE_TOO_LARGE,
        LogError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        LogError::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        LogError::InvalidProducerEpoch { .. } => code::INVALID_PRODUCER_EPOCH,
        LogError::UnknownProducerId { .. } => code::UNKNOWN_PRODUCER_ID,
        LogError::InvalidTxnState { .. } => code::INVALID_TXN_STATE,
        LogError::TransactionCoordinatorFenced { .. } => code::TRANSACTION_COORDINATOR_FENCED,
        _ => code::KAFKA_STORAGE_ERROR,
    }
}
