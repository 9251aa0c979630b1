//! Transactional offset commits (TxnOffsetCommit) through the group coordinator's API: pending until the
//! transaction's marker, committed on COMMIT, dropped on ABORT, still pending after a restart (replayed from the
//! producer's transactional batches), and fenced producers refused by the log.

use crate::group_support;

use group_support::*;
use kafka_protocol::messages::*;

fn txn_commit(
    group: &str,
    producer_id: i64,
    epoch: i16,
    offsets: &[(&str, i32, i64)],
) -> TxnOffsetCommitRequest {
    let mut topics: Vec<txn_offset_commit_request::TxnOffsetCommitRequestTopic> = Vec::new();
    for (t, p, o) in offsets {
        let part = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
            .with_partition_index(*p)
            .with_committed_offset(*o)
            .with_committed_leader_epoch(-1)
            .with_committed_metadata(Some(s("txn")));
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(part),
            None => topics.push(
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(s(t).into())
                    .with_partitions(vec![part]),
            ),
        }
    }
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("tx")))
        .with_group_id(s(group).into())
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(topics)
}

async fn send(c: &annal_broker::group::GroupCoordinator, req: TxnOffsetCommitRequest) -> Vec<i16> {
    let resp = answer(c.txn_offset_commit(wire(req, 3), 3, &Registry).await, 3);
    resp.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

fn offsets(c: &annal_broker::group::GroupCoordinator, group: &str) -> Vec<(String, i32, i64)> {
    c.committed_offsets(group)
        .into_iter()
        .map(|o| (o.topic, o.partition, o.offset))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_are_visible_only_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    commit(&c, "g", -1, "", &[("t", 0, 1, None)], 8).await;
    assert_eq!(
        send(&c, txn_commit("g", 7000, 0, &[("t", 0, 5), ("t", 1, 6)])).await,
        vec![NONE, NONE]
    );
    assert_eq!(
        offsets(&c, "g"),
        vec![("t".into(), 0, 1)],
        "pending offsets are not the group's yet"
    );
    let partition = c.partition_for("g") as i32;
    assert_eq!(c.complete_transaction(partition, 7000, 0, true), 2);
    assert_eq!(
        offsets(&c, "g"),
        vec![("t".into(), 0, 5), ("t".into(), 1, 6)]
    );

    // The next transaction of the same producer aborts: nothing changes.
    assert_eq!(
        send(&c, txn_commit("g", 7000, 0, &[("t", 0, 50)])).await,
        vec![NONE]
    );
    assert_eq!(c.complete_transaction(partition, 7000, 0, false), 0);
    assert_eq!(offsets(&c, "g")[0], ("t".into(), 0, 5));
    // A marker for a producer with nothing pending, or another partition, changes nothing.
    assert_eq!(c.complete_transaction(partition, 7001, 0, true), 0);
    assert_eq!(c.complete_transaction(-3, 7000, 0, true), 0);

    // Unknown topics are refused per partition; an empty group id is INVALID_GROUP_ID.
    assert_eq!(
        send(&c, txn_commit("g", 7000, 0, &[("missing-t", 0, 1)])).await,
        vec![UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(
        send(&c, txn_commit("", 7000, 0, &[("t", 0, 1)])).await,
        vec![24]
    );
    // A zombie with an older epoch is fenced by the partition's producer state.
    assert_eq!(
        send(&c, txn_commit("g", 7000, 1, &[("t", 0, 60)])).await,
        vec![NONE]
    );
    assert_eq!(
        send(&c, txn_commit("g", 7000, 0, &[("t", 0, 61)])).await,
        vec![47]
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_transactional_offsets_stay_pending_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    commit(&c, "h", -1, "", &[("t", 0, 1, None)], 8).await;
    assert_eq!(
        send(&c, txn_commit("h", 9000, 0, &[("t", 0, 77)])).await,
        vec![NONE]
    );
    let partition = c.partition_for("h") as i32;
    c.shutdown().await;
    drop(c);
    let c = open(dir.path(), fast_config());
    assert_eq!(
        offsets(&c, "h"),
        vec![("t".into(), 0, 1)],
        "replay keeps them pending"
    );
    assert_eq!(c.complete_transaction(partition, 9000, 0, true), 1);
    assert_eq!(offsets(&c, "h"), vec![("t".into(), 0, 77)]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_stable_fetches_wait_for_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    assert_eq!(
        send(&c, txn_commit("st", 9100, 0, &[("t", 0, 4)])).await,
        vec![NONE]
    );
    let fetch = |stable: bool| {
        OffsetFetchRequest::default()
            .with_group_id(s("st").into())
            .with_require_stable(stable)
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(s("t").into())
                    .with_partition_indexes(vec![0, 1]),
            ]))
    };
    let resp = answer(c.offset_fetch(wire(fetch(true), 7), 7).await, 7);
    let codes: Vec<i16> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(
        codes,
        vec![88, NONE],
        "UNSTABLE_OFFSET_COMMIT only where a transaction holds an offset"
    );
    let resp = answer(c.offset_fetch(wire(fetch(false), 7), 7).await, 7);
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    assert_eq!(resp.topics[0].partitions[0].committed_offset, -1);
    c.complete_transaction(c.partition_for("st") as i32, 9100, 0, true);
    let resp = answer(c.offset_fetch(wire(fetch(true), 7), 7).await, 7);
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    assert_eq!(resp.topics[0].partitions[0].committed_offset, 4);
    c.shutdown().await;
}
