//! InitProducerId (idempotent producers; transactional ones go to the transaction coordinator) and
//! DescribeProducers.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, RequestHeader,
};

use super::s;
use crate::replica::Partition;
use crate::Broker;

/// A non-transactional producer always gets a fresh producer id at epoch 0, as Kafka does: that is also its
/// recovery path after UNKNOWN_PRODUCER_ID or an exhausted epoch (KIP-360). Ids come from durable blocks, so they
/// are never reused, across restarts and crashes included.
pub async fn init_producer_id(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if let Some(id) = &req.transactional_id {
        // KIP-360 (v3+): the producer's current id and epoch, when it has one.
        let expected = (header.request_api_version >= 3 && req.producer_id.0 >= 0)
            .then_some((req.producer_id.0, req.producer_epoch));
        return match broker
            .txn()
            .init_producer_id(id.0.as_str(), req.transaction_timeout_ms, expected)
            .await
        {
            Ok((producer_id, epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch),
            Err(error) => InitProducerIdResponse::default()
                .with_error_code(super::txn::fenced_for(header.request_api_version, 4, error))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        };
    }
    // Ids come from the metadata log in blocks (AllocateProducerIds), so no two brokers hand out the same one.
    match broker
        .cluster()
        .next_producer_id(broker.config.node_id)
        .await
    {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot get a producer id block from the controller");
            // COORDINATOR_NOT_AVAILABLE: retriable, the producer asks again.
            InitProducerIdResponse::default()
                .with_error_code(15)
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
            match broker.replica_manager.partition_or_error(&t.name.0, index) {
                Err(e) => {
                    r.error_code = e.code();
                    r.error_message = Some(s(e.to_string()));
                }
                Ok(part) => r.active_producers = active_producers(&part),
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

/// The partition's producers as DescribeProducers reports them (from the engine's producer table).
fn active_producers(part: &Partition) -> Vec<ProducerState> {
    part.with_producer_state(|state| {
        state
            .producers()
            .map(|p| {
                ProducerState::default()
                    .with_producer_id(ProducerId(p.producer_id))
                    .with_producer_epoch(p.epoch as i32)
                    .with_last_sequence(p.last_sequence().unwrap_or(-1))
                    .with_last_timestamp(p.last_timestamp)
                    .with_coordinator_epoch(p.coordinator_epoch)
                    .with_current_txn_start_offset(p.current_txn_first_offset.unwrap_or(-1))
            })
            .collect()
    })
}
