//! Transaction APIs: thin adapters from the dispatcher to [`crate::txn::TxnCoordinator`] (AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions; InitProducerId with a transactional id comes
//! through `producers.rs`). A request for an id whose `__transaction_state` partition this broker does not lead
//! gets NOT_COORDINATOR from the coordinator.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::*;

use super::s;
use crate::txn::{code, ListFilter};
use crate::Broker;

/// KIP-588: PRODUCER_FENCED exists from AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2 (InitProducerId v4);
/// older clients get INVALID_PRODUCER_EPOCH, as Kafka's `KafkaApis` maps it.
pub(crate) fn fenced_for(version: i16, first_with_fenced: i16, error: i16) -> i16 {
    if error == code::PRODUCER_FENCED && version < first_with_fenced {
        code::INVALID_PRODUCER_EPOCH
    } else {
        error
    }
}

/// AddPartitionsToTxn: v0-3 carry one transaction from its producer; v4+ a batch from partition leaders, each
/// verifyOnly (KIP-890 part 1) or, at v5, the implicit add of a transaction-version-2 client (KIP-890 part 2).
pub async fn add_partitions_to_txn(
    b: &Arc<Broker>,
    h: &RequestHeader,
    r: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if h.request_api_version < 4 {
        let results = add_one(
            b,
            &r.v3_and_below_transactional_id.0,
            r.v3_and_below_producer_id.0,
            r.v3_and_below_producer_epoch,
            false,
            0,
            &r.v3_and_below_topics,
        )
        .await;
        let mut results = results;
        for t in &mut results {
            for p in &mut t.results_by_partition {
                p.partition_error_code =
                    fenced_for(h.request_api_version, 2, p.partition_error_code);
            }
        }
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // Kafka's `TransactionVersion.transactionVersionForAddPartitionsToTxn`: v5+ adds for a version-2 client.
    let client_version = if h.request_api_version >= 5 { 2 } else { 0 };
    let mut resp = AddPartitionsToTxnResponse::default();
    for t in r.transactions {
        let results = add_one(
            b,
            &t.transactional_id.0,
            t.producer_id.0,
            t.producer_epoch,
            t.verify_only,
            client_version,
            &t.topics,
        )
        .await;
        resp.results_by_transaction.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id)
                .with_topic_results(results),
        );
    }
    resp
}

/// One transaction's partitions: UNKNOWN_TOPIC_OR_PARTITION for those that do not exist (and
/// OPERATION_NOT_ATTEMPTED for the rest, as Kafka), else the coordinator's answer for all.
async fn add_one(
    b: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    client_version: i16,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let partitions: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let exists = |(t, p): &(String, i32)| {
        b.replica_manager
            .topic(t)
            .is_some_and(|topic| *p >= 0 && *p < topic.partition_count)
    };
    let codes: Vec<i16> = if !partitions.iter().all(exists) {
        partitions
            .iter()
            .map(|p| {
                if exists(p) {
                    code::OPERATION_NOT_ATTEMPTED
                } else {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                }
            })
            .collect()
    } else if verify_only {
        match b
            .txn
            .verify_partitions(transactional_id, producer_id, producer_epoch, &partitions)
            .await
        {
            Ok(codes) => codes,
            Err(e) => vec![e; partitions.len()],
        }
    } else {
        let e = b
            .txn
            .add_partitions(
                transactional_id,
                producer_id,
                producer_epoch,
                &partitions,
                client_version,
            )
            .await
            .err()
            .unwrap_or(code::NONE);
        vec![e; partitions.len()]
    };
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, partition), error) in partitions.into_iter().zip(codes) {
        let result = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(partition)
            .with_partition_error_code(error);
        match out.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.results_by_partition.push(result),
            None => out.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(super::topic_name(&topic))
                    .with_results_by_partition(vec![result]),
            ),
        }
    }
    out
}

/// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition to the transaction.
pub async fn add_offsets_to_txn(
    b: &Arc<Broker>,
    h: &RequestHeader,
    r: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    if let Err(e) = b.groups.ensure_offsets_topic().await {
        return AddOffsetsToTxnResponse::default().with_error_code(e);
    }
    let partition = b.groups.partition_for(r.group_id.0.as_str()) as i32;
    let partitions = [(crate::group::OFFSETS_TOPIC.to_string(), partition)];
    let error = b
        .txn
        .add_partitions(
            &r.transactional_id.0,
            r.producer_id.0,
            r.producer_epoch,
            &partitions,
            0,
        )
        .await
        .err()
        .unwrap_or(code::NONE);
    AddOffsetsToTxnResponse::default().with_error_code(fenced_for(h.request_api_version, 2, error))
}

/// EndTxn: v5 is transaction version 2 (KIP-890 part 2): the coordinator bumps the epoch and answers the producer
/// id and epoch to continue with; Kafka answers -1/-1 with an error, and v0-4 ignore the fields.
pub async fn end_txn(b: &Arc<Broker>, h: &RequestHeader, r: EndTxnRequest) -> EndTxnResponse {
    let tv2 = h.request_api_version >= 5;
    let (error, (producer_id, producer_epoch)) = match b
        .txn
        .end_txn(
            &r.transactional_id.0,
            r.producer_id.0,
            r.producer_epoch,
            r.committed,
            tv2,
        )
        .await
    {
        Ok(continues_with) => (code::NONE, continues_with),
        Err(e) => (e, (-1, -1)),
    };
    EndTxnResponse::default()
        .with_error_code(fenced_for(h.request_api_version, 2, error))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
}

pub async fn describe_transactions(
    b: &Arc<Broker>,
    _h: &RequestHeader,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    use describe_transactions_response::{TopicData, TransactionState};
    let ids: Vec<String> = r
        .transactional_ids
        .iter()
        .map(|i| i.0.to_string())
        .collect();
    let described = b.txn.describe(&ids).await;
    let states = described
        .into_iter()
        .map(|d| {
            let mut topics: Vec<TopicData> = Vec::new();
            for (t, p) in &d.partitions {
                match topics.iter_mut().find(|x| x.topic.0.as_str() == t) {
                    Some(x) => x.partitions.push(*p),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(super::topic_name(t))
                            .with_partitions(vec![*p]),
                    ),
                }
            }
            TransactionState::default()
                .with_error_code(d.error_code)
                .with_transactional_id(TransactionalId(s(d.transactional_id)))
                .with_transaction_state(s(d.state))
                .with_transaction_timeout_ms(d.timeout_ms)
                .with_transaction_start_time_ms(d.start_ms)
                .with_producer_id(ProducerId(d.producer_id))
                .with_producer_epoch(d.producer_epoch)
                .with_topics(topics)
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub async fn list_transactions(
    b: &Arc<Broker>,
    h: &RequestHeader,
    r: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let filter = ListFilter {
        states: r.state_filters.iter().map(|x| x.to_string()).collect(),
        producer_ids: r.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_ms: if h.request_api_version >= 1 {
            r.duration_filter
        } else {
            -1
        },
    };
    let (listed, unknown) = b.txn.list(&filter);
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown.into_iter().map(s).collect())
        .with_transaction_states(
            listed
                .into_iter()
                .map(|t| {
                    list_transactions_response::TransactionState::default()
                        .with_transactional_id(TransactionalId(s(t.transactional_id)))
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_transaction_state(s(t.state))
                })
                .collect(),
        )
}
