//! Producer state of a partition as DescribeProducers reports it (read from the engine's producer table).

use kafka_protocol::messages::describe_producers_response::ProducerState;
use kafka_protocol::messages::ProducerId;

use crate::topics::Partition;

pub fn describe(part: &Partition) -> Vec<ProducerState> {
    let log = part.log.lock();
    log.producer_state()
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
}
