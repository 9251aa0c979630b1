//! WriteTxnMarkers (API 27, v1): the partition side of ending a transaction. A transaction coordinator sends
//! each partition leader the COMMIT or ABORT markers of the transactions it completes; the leader appends each
//! marker as a control batch ([`annal_log::control`]) with acks=all semantics and answers per partition.
//!
//! The engine checks the marker against the partition's producer state: an epoch older than the producer's is
//! INVALID_PRODUCER_EPOCH, a coordinator epoch older than the last marker's is TRANSACTION_COORDINATOR_FENCED.
//! Appending ends the producer's open transaction there (the last stable offset moves once the high watermark
//! passes the marker) and an ABORT is added to the segment's `.txnindex`. Unknown partitions answer
//! UNKNOWN_TOPIC_OR_PARTITION, partitions led elsewhere NOT_LEADER_OR_FOLLOWER, as Kafka's do; the coordinator
//! retries those. Markers written into `__consumer_offsets` are also handed to the group coordinator
//! ([`crate::group::GroupCoordinator::complete_transaction`]).
//!
//! v2 (a TransactionVersion field, Kafka 4.1+) is not served: the vendored protocol crate's codec stops at v1.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{RequestHeader, WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use annal_log::control::{build_marker_batch, EndTxnMarker, TxnOutcome};
use annal_log::AppendOrigin;

use crate::group::OFFSETS_TOPIC;
use crate::replica::AppendEntry;
use crate::Broker;

/// How long a marker waits for the in-sync replicas (Kafka uses the broker's `request.timeout.ms`, 30 s). Past
/// it the partition answers REQUEST_TIMED_OUT and the coordinator sends the marker again.
pub const MARKER_REPLICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// One partition's marker, in response order.
struct Planned {
    marker: usize,
    topic: usize,
    partition: i32,
}

pub async fn handle(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let now = crate::now_ms();
    let mut plan = Vec::new();
    let mut entries = Vec::new();
    let mut results: Vec<WritableTxnMarkerResult> = Vec::with_capacity(req.markers.len());
    for (mi, marker) in req.markers.iter().enumerate() {
        let outcome = if marker.transaction_result {
            TxnOutcome::Commit
        } else {
            TxnOutcome::Abort
        };
        let batch = Bytes::from(build_marker_batch(
            marker.producer_id.0,
            marker.producer_epoch,
            EndTxnMarker {
                outcome,
                coordinator_epoch: marker.coordinator_epoch,
            },
            now,
        ));
        let mut topics = Vec::with_capacity(marker.topics.len());
        for (ti, topic) in marker.topics.iter().enumerate() {
            topics.push(WritableTxnMarkerTopicResult::default().with_name(topic.name.clone()));
            for &partition in &topic.partition_indexes {
                plan.push(Planned {
                    marker: mi,
                    topic: ti,
                    partition,
                });
                entries.push(AppendEntry {
                    topic: topic.name.0.to_string(),
                    partition,
                    records: Some(batch.clone()),
                });
            }
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    let outcomes = broker
        .replica_manager
        .append_records_as(
            AppendOrigin::Coordinator,
            MARKER_REPLICATION_TIMEOUT,
            -1,
            entries,
        )
        .await;
    assert_eq!(outcomes.len(), plan.len(), "one outcome per marker entry");
    for (planned, outcome) in plan.into_iter().zip(outcomes) {
        let marker = &req.markers[planned.marker];
        let topic = &marker.topics[planned.topic];
        let error_code = match outcome {
            Ok(_) => {
                if topic.name.0.as_str() == OFFSETS_TOPIC {
                    // The group side of the outcome: pending transactional offsets of this producer in that
                    // partition become visible (COMMIT) or are dropped (ABORT).
                    broker.groups().complete_transaction(
                        planned.partition,
                        marker.producer_id.0,
                        marker.producer_epoch,
                        marker.transaction_result,
                    );
                }
                super::code::NONE
            }
            Err(e) => {
                tracing::debug!(topic = %topic.name.0, partition = planned.partition, producer_id = marker.producer_id.0,
                    error = %e, "transaction marker refused");
                e.code()
            }
        };
        results[planned.marker].topics[planned.topic]
            .partitions
            .push(
                WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(planned.partition)
                    .with_error_code(error_code),
            );
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}
