//! KIP-890 part 1 on the produce path: the partitions where a transactional producer's batch would open a new
//! transaction are verified with the transaction coordinator before the append (`txn/verification.rs`); those the
//! coordinator does not confirm are refused, so no batch can open a transaction no marker will close.

use std::sync::Arc;

use annal_log::batch::BatchHeader;

use crate::replica::AppendEntry;
use crate::txn::code;
use crate::Broker;

/// Refused before the append: error code, message, KIP-467 record errors.
type Refusal = (i16, String, Vec<(i32, String)>);

/// A producer's (id, epoch).
type ProducerKey = (i64, i16);
/// An entry to verify: its index in the request's items, its topic and partition.
type PendingEntry = (usize, String, i32);

/// Verifies each entry of `items` that starts a transaction on its partition; refuses those that fail. With
/// `add` (Produce v12: the client speaks transaction version 2 and sends no AddPartitionsToTxn) the coordinator
/// adds the partitions to the transaction instead of checking them (KIP-890 part 2).
pub async fn verify(
    broker: &Arc<Broker>,
    transactional_id: &str,
    items: &mut [Result<AppendEntry, Refusal>],
    add: bool,
) {
    // The entries to verify per producer; a request normally carries one producer.
    let mut to_verify: Vec<(ProducerKey, Vec<PendingEntry>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Ok(entry) = item else { continue };
        let Some(header) = entry.records.as_deref().and_then(BatchHeader::parse) else {
            continue;
        };
        if !header.is_transactional() || header.is_control() {
            continue;
        }
        // A partition that is missing or not led here is refused by the append itself, with the usual errors.
        let Ok(partition) = broker
            .replica_manager
            .partition_or_error(&entry.topic, entry.partition)
        else {
            continue;
        };
        let producer = (header.producer_id, header.producer_epoch);
        // Already inside this producer's transaction on this partition: verified when it began.
        let open_here = partition.with_producer_state(|state| {
            state
                .get(producer.0)
                .is_some_and(|p| p.epoch == producer.1 && p.current_txn_first_offset.is_some())
        });
        if open_here {
            continue;
        }
        let target = (i, entry.topic.clone(), entry.partition);
        match to_verify.iter_mut().find(|(p, _)| *p == producer) {
            Some((_, targets)) => targets.push(target),
            None => to_verify.push((producer, vec![target])),
        }
    }
    for ((producer_id, producer_epoch), targets) in to_verify {
        let partitions: Vec<(String, i32)> =
            targets.iter().map(|(_, t, p)| (t.clone(), *p)).collect();
        let codes = broker
            .txn()
            .verify_for_append(
                transactional_id,
                producer_id,
                producer_epoch,
                &partitions,
                add,
            )
            .await;
        for ((index, topic, partition), error) in targets.into_iter().zip(codes) {
            if error == code::NONE {
                continue;
            }
            let error = produce_error(error);
            let message = if error == code::INVALID_TXN_STATE {
                format!(
                    "{topic}-{partition} is not part of the ongoing transaction of transactional id \
                     '{transactional_id}' (producer {producer_id}, epoch {producer_epoch}): the producer must \
                     add it with AddPartitionsToTxn before writing to it (KIP-890 verification)"
                )
            } else {
                format!(
                    "the transaction coordinator of '{transactional_id}' could not confirm that {topic}-{partition} \
                     is part of its transaction yet (error {error}); retry"
                )
            };
            items[index] = Err((error, message, Vec::new()));
        }
    }
}

/// The error a producer gets for a failed verification: Kafka answers the coordinator's transient errors with
/// NOT_ENOUGH_REPLICAS, which every producer retries, PRODUCER_FENCED with INVALID_PRODUCER_EPOCH (what producers
/// expect from a produce, as Kafka's `AddPartitionsToTxnManager` maps it), and passes the others through.
pub(crate) fn produce_error(error: i16) -> i16 {
    match error {
        code::CONCURRENT_TRANSACTIONS
        | code::COORDINATOR_LOAD_IN_PROGRESS
        | code::COORDINATOR_NOT_AVAILABLE
        | code::NOT_COORDINATOR => code::NOT_ENOUGH_REPLICAS,
        code::PRODUCER_FENCED => code::INVALID_PRODUCER_EPOCH,
        other => other,
    }
}
