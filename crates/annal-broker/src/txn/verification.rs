//! KIP-890 part 1, the partition leader's side: before it appends a producer's first transactional batch to a
//! partition (the producer has no transaction open there), the leader asks the transactional id's coordinator
//! whether the partition was added to the ongoing transaction (AddPartitionsToTxn v4 with verifyOnly, the request
//! Kafka's `AddPartitionsToTxnManager` sends). Without this check a batch the coordinator never heard of (a
//! client bug, or a produce retried after its transaction was aborted) opens a transaction no marker will ever
//! close: a hanging transaction that pins the last stable offset and stalls every read_committed consumer.
//!
//! KIP-890 part 2 (transaction version 2) uses the same path to *add* the partition instead (AddPartitionsToTxn
//! v5 without verifyOnly): a transaction-version-2 client sends no AddPartitionsToTxn of its own.
//!
//! The coordinator may be this broker (answered in memory) or another one (one request over [`Peers`]). The
//! answer is not re-checked at append time (Kafka's VerificationGuard): the race it closes, a marker landing
//! between verification and append, needs the coordinator to end the transaction at the same producer epoch while
//! the producer still sends, and the coordinator here only does that at a bumped epoch (timeouts, fencing, every
//! EndTxn at transaction version 2), which the log's epoch check refuses anyway. docs/decisions/0012-transaction-coordinator.md.

use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;

use super::peers::Peers;
use super::{code, TxnCoordinator, TXN_TOPIC};

/// AddPartitionsToTxn versions a verification may use: v4 is the first with batched transactions and verifyOnly.
const VERIFY_VERSIONS: (i16, i16) = (4, 4);
/// The implicit add of transaction version 2 (KIP-890 part 2) is v5 with verifyOnly false: v5 tells the
/// coordinator the client speaks transaction version 2.
const IMPLICIT_ADD_VERSIONS: (i16, i16) = (5, 5);
/// How long a remote verification may take before the produce is answered with a retriable error.
pub(crate) const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest verification response accepted (a few bytes per partition).
pub(crate) const VERIFY_RESPONSE_MAX_BYTES: usize = 4 * 1024 * 1024;

pub(crate) fn peers(
    security: crate::security::InterBrokerClient,
    network: std::sync::Arc<dyn annal_client::net::Network>,
) -> Peers {
    Peers::new(
        "annal-txn-verifier",
        VERIFY_TIMEOUT,
        VERIFY_RESPONSE_MAX_BYTES,
        security,
        network,
    )
}

impl TxnCoordinator {
    /// Whether each of `partitions` is part of `transactional_id`'s ongoing transaction at
    /// (`producer_id`, `producer_epoch`): NONE, or the coordinator's error for it (INVALID_TXN_STATE for a
    /// partition never added; a coordinator error such as NOT_COORDINATOR when it cannot tell yet).
    ///
    /// With `add` (a transaction-version-2 client: Produce v12, TxnOffsetCommit v5) the partitions are added
    /// to the transaction instead, starting it if needed (KIP-890 part 2's implicit add; Kafka's
    /// `AddPartitionsToTxnManager` with the `addPartition` operation).
    pub async fn verify_for_append(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        add: bool,
    ) -> Vec<i16> {
        let here = self.shared.state.lock().coordinator_epoch(transactional_id);
        match here {
            Ok(_) if add => {
                let e = self
                    .add_partitions(transactional_id, producer_id, producer_epoch, partitions, 2)
                    .await
                    .err()
                    .unwrap_or(code::NONE);
                vec![e; partitions.len()]
            }
            Ok(_) => self
                .verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
                .await
                .unwrap_or_else(|e| vec![e; partitions.len()]),
            Err(code::NOT_COORDINATOR) => {
                self.verify_remotely(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    partitions,
                    add,
                )
                .await
            }
            Err(e) => vec![e; partitions.len()],
        }
    }

    async fn verify_remotely(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        add: bool,
    ) -> Vec<i16> {
        let coordinator_partition = self.partition_for(transactional_id) as i32;
        let addr = match self.shared.routes.leader(TXN_TOPIC, coordinator_partition) {
            Ok(Some((_, addr))) => addr,
            // No coordinator yet (no leader, or the topic is not in this broker's image yet): retriable.
            Ok(None) | Err(()) => return vec![code::COORDINATOR_NOT_AVAILABLE; partitions.len()],
        };
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (topic, partition) in partitions {
            match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(t) => t.partitions.push(*partition),
                None => topics.push(
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(vec![*partition]),
                ),
            }
        }
        let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    transactional_id.to_string(),
                )))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_verify_only(!add)
                .with_topics(topics),
        ]);
        let versions = if add {
            IMPLICIT_ADD_VERSIONS
        } else {
            VERIFY_VERSIONS
        };
        let response = match self
            .shared
            .verify_peers
            .send(&addr, &request, versions)
            .await
        {
            Ok(response) => response,
            Err(e) => {
                tracing::debug!(coordinator = %addr, transactional_id, error = %format!("{e:#}"), "cannot verify a transactional produce with its coordinator");
                return vec![code::COORDINATOR_NOT_AVAILABLE; partitions.len()];
            }
        };
        if response.error_code != code::NONE {
            return vec![response.error_code; partitions.len()];
        }
        let result = response
            .results_by_transaction
            .iter()
            .find(|r| r.transactional_id.0.as_str() == transactional_id);
        partitions
            .iter()
            .map(|(topic, partition)| {
                result
                    .and_then(|r| r.topic_results.iter().find(|t| t.name.0.as_str() == topic))
                    .and_then(|t| {
                        t.results_by_partition
                            .iter()
                            .find(|p| p.partition_index == *partition)
                    })
                    // A coordinator that left a partition out of its answer did not verify it.
                    .map_or(code::INVALID_TXN_STATE, |p| p.partition_error_code)
            })
            .collect()
    }
}
