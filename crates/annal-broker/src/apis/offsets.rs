//! ListOffsets and DeleteRecords.

use std::sync::Arc;

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

use super::blocking;
use crate::replica::{OffsetSpec, PartitionError};
use crate::Broker;

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
    // Isolation level (v2+): READ_COMMITTED (1) answers LATEST with the last stable offset.
    let read_committed = version >= 2 && req.isolation_level == 1;
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let mut r =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let current_epoch = if version >= 4 {
                p.current_leader_epoch
            } else {
                -1
            };
            let found = broker
                .replica_manager
                .partition_or_error(&t.name.0, p.partition_index)
                .and_then(|part| match offset_spec(p.timestamp, version)? {
                    // No tiered storage: nothing is pending upload (Kafka answers -1 then).
                    None => Ok(None),
                    Some(spec) => part
                        .list_offsets(current_epoch, spec, read_committed)
                        .map(Some),
                });
            match found {
                Ok(None) => {
                    r.timestamp = -1;
                    r.offset = -1;
                    if version >= 4 {
                        r.leader_epoch = -1;
                    }
                }
                Ok(Some(o)) => {
                    r.timestamp = o.timestamp;
                    r.offset = o.offset;
                    if version >= 4 {
                        r.leader_epoch = o.leader_epoch;
                    }
                }
                Err(e) => r.error_code = e.code(),
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
            match broker
                .replica_manager
                .partition_or_error(&t.name.0, p.partition_index)
            {
                Err(e) => r.error_code = e.code(),
                Ok(part) => {
                    let offset = p.offset;
                    match blocking(move || part.delete_records(offset)).await {
                        Ok(low) => r.low_watermark = low,
                        Err(e) => r.error_code = e.code(),
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

/// OffsetForLeaderEpoch (consumers validate their position after a leader change, KIP-320): where the
/// requested epoch ended, from the partition's leader-epoch cache; CurrentLeaderEpoch is checked as for Fetch.
pub async fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: kafka_protocol::messages::OffsetForLeaderEpochRequest,
) -> kafka_protocol::messages::OffsetForLeaderEpochResponse {
    use kafka_protocol::messages::offset_for_leader_epoch_response::{
        EpochEndOffset, OffsetForLeaderTopicResult,
    };
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let mut r = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let found = broker
                .replica_manager
                .partition_or_error(&t.topic.0, p.partition)
                .and_then(|part| {
                    part.offset_for_leader_epoch(p.current_leader_epoch, p.leader_epoch)
                });
            match found {
                Ok((epoch, end)) => {
                    r.leader_epoch = epoch;
                    r.end_offset = end;
                }
                Err(e) => r.error_code = e.code(),
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

/// The ListOffsets timestamp as what it asks for; `Ok(None)` for EARLIEST_PENDING_UPLOAD (v9+), which has no
/// answer without tiered storage. Special values newer than the request's version are invalid.
fn offset_spec(timestamp: i64, version: i16) -> Result<Option<OffsetSpec>, PartitionError> {
    match timestamp {
        LATEST => Ok(Some(OffsetSpec::Latest)),
        EARLIEST | EARLIEST_LOCAL => Ok(Some(OffsetSpec::Earliest)),
        EARLIEST_PENDING_UPLOAD if version >= 9 => Ok(None),
        MAX_TIMESTAMP if version >= 7 => Ok(Some(OffsetSpec::MaxTimestamp)),
        ts if ts >= 0 => Ok(Some(OffsetSpec::Timestamp(ts))),
        other => Err(PartitionError::InvalidOffsetSpec(other)),
    }
}
