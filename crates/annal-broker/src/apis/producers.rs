//! InitProducerId (idempotent producers) and DescribeProducers.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, RequestHeader,
};

use super::offsets::partition;
use super::{blocking, code, s};
use crate::Broker;

/// A non-transactional producer always gets a fresh producer id at epoch 0, as Kafka does: that is also its
/// recovery path after UNKNOWN_PRODUCER_ID or an exhausted epoch (KIP-360). Ids come from durable blocks, so they
/// are never reused, across restarts and crashes included.
pub async fn init_producer_id(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if req.transactional_id.is_some() {
        return InitProducerIdResponse::default()
            .with_error_code(code::INVALID_REQUEST)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    let b = broker.clone();
    match blocking(move || b.producer_ids.next()).await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot allocate a producer id");
            InitProducerIdResponse::default()
                .with_error_code(code::KAFKA_STORAGE_ERROR)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}

pub async fn describe_producers(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for index in t.partition_indexes {
            let mut r = PartitionResponse::default()
                .with_error_message(None)
                .with_partition_index(index);
            match partition(broker, &t.name.0, index) {
                None => {
                    r.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                    r.error_message =
                        Some(s(format!("partition {}-{index} does not exist", t.name.0)));
                }
                Some(part) => {
                    r.active_producers = crate::producer_state::describe(&part);
                }
            }
            partitions.push(r);
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}
