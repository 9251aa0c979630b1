//! The replica layer over the wire: leader-epoch fencing (KIP-320) on Fetch, ListOffsets and
//! OffsetForLeaderEpoch; leadership changes as the cluster code will make them; long polls woken only by their
//! own partitions.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::*;

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

/// A Fetch v12 (by name) of one partition with a CurrentLeaderEpoch; returns (error, leader epoch of the
/// first batch if any).
async fn fetch_with_epoch(
    c: &mut Client,
    topic: &str,
    current_leader_epoch: i32,
) -> (i16, Option<i32>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = c.call(&req, 12).await;
    let p = &resp.responses[0].partitions[0];
    // PartitionLeaderEpoch sits at bytes 12..16 of a v2 batch.
    let epoch = p
        .records
        .as_ref()
        .filter(|r| r.len() >= 16)
        .map(|r| i32::from_be_bytes(r[12..16].try_into().unwrap()));
    (p.error_code, epoch)
}

async fn list_latest(c: &mut Client, topic: &str, current_leader_epoch: i32) -> (i16, i64, i32) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_timestamp(-1)])]);
    let resp = c.call(&req, 9).await;
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset, p.leader_epoch)
}

async fn epoch_end(c: &mut Client, topic: &str, current: i32, epoch: i32) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current)
                .with_leader_epoch(epoch)])]);
    let resp = c.call(&req, 4).await;
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

async fn metadata_epoch(c: &mut Client, topic: &str) -> (i32, i32) {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let resp = c.call(&req, 12).await;
    let p = &resp.topics[0].partitions[0];
    (p.leader_id.0, p.leader_epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_leader_epoch_is_checked_and_leadership_changes_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (test, broker) = TestBroker::start_with_handle(dir.path(), &[]).await;
    let mut c = test.client().await;
    create_topic(&mut c, "fence", 1, &[]).await;
    assert_eq!(
        produce(&mut c, "fence", 0, batch(&["a"], 1_700_000_000_000), 1, 9).await,
        (0, 0)
    );

    // Open: this node leads at epoch 0. -1 means "no epoch sent"; a newer epoch is unknown to us.
    assert_eq!(
        metadata_epoch(&mut c, "fence").await,
        (broker.config().node_id, 0)
    );
    assert_eq!(fetch_with_epoch(&mut c, "fence", -1).await, (0, Some(0)));
    assert_eq!(fetch_with_epoch(&mut c, "fence", 0).await, (0, Some(0)));
    assert_eq!(
        fetch_with_epoch(&mut c, "fence", 1).await.0,
        UNKNOWN_LEADER_EPOCH
    );
    assert_eq!(
        list_latest(&mut c, "fence", 1).await.0,
        UNKNOWN_LEADER_EPOCH
    );
    assert_eq!(
        epoch_end(&mut c, "fence", 1, 0).await.0,
        UNKNOWN_LEADER_EPOCH
    );

    // A leader change to epoch 3 (what the cluster code will do from the controller's PartitionChangeRecord).
    let me = broker.config().node_id;
    let part = broker
        .replica_manager()
        .partition("fence", 0)
        .expect("partition");
    assert!(part.make_leader(3, 0, vec![me], vec![me]));
    assert_eq!(metadata_epoch(&mut c, "fence").await, (me, 3));
    assert_eq!(
        fetch_with_epoch(&mut c, "fence", 2).await.0,
        FENCED_LEADER_EPOCH
    );
    assert_eq!(
        fetch_with_epoch(&mut c, "fence", 4).await.0,
        UNKNOWN_LEADER_EPOCH
    );
    assert_eq!(list_latest(&mut c, "fence", 0).await.0, FENCED_LEADER_EPOCH);
    assert_eq!(list_latest(&mut c, "fence", 3).await, (0, 1, 3));
    assert_eq!(
        epoch_end(&mut c, "fence", 2, 0).await.0,
        FENCED_LEADER_EPOCH
    );
    assert_eq!(
        epoch_end(&mut c, "fence", 4, 0).await.0,
        UNKNOWN_LEADER_EPOCH
    );

    // New batches carry the new epoch; epoch 0 ended where epoch 3 began.
    assert_eq!(
        produce(&mut c, "fence", 0, batch(&["b"], 1_700_000_000_000), 1, 9).await,
        (0, 1)
    );
    assert_eq!(epoch_end(&mut c, "fence", 3, 0).await, (0, 0, 1));
    assert_eq!(epoch_end(&mut c, "fence", 3, 3).await, (0, 3, 2));
    assert_eq!(epoch_end(&mut c, "fence", -1, 7).await, (0, -1, -1));
    {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("fence"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(3)
                    .with_fetch_offset(1)
                    .with_partition_max_bytes(1 << 20)])]);
        let resp = c.call(&req, 12).await;
        let records = resp.responses[0].partitions[0].records.clone().unwrap();
        assert_eq!(i32::from_be_bytes(records[12..16].try_into().unwrap()), 3);
    }

    // Becoming a follower of another broker: produce and client fetches go to the leader.
    assert!(part.make_follower(me + 1, 4, 0, vec![me, me + 1], vec![me + 1]));
    assert_eq!(
        produce(&mut c, "fence", 0, batch(&["c"], 1_700_000_000_000), 1, 9)
            .await
            .0,
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(
        fetch_with_epoch(&mut c, "fence", 4).await.0,
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(metadata_epoch(&mut c, "fence").await, (me + 1, 4));
    // A stale leader change (epoch 3 < 4) is ignored.
    assert!(!part.make_leader(3, 0, vec![me], vec![me]));
    assert!(!part.is_leader());

    drop(part);
    drop(broker);
    test.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_needs_min_insync_replicas_in_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let (test, broker) = TestBroker::start_with_handle(dir.path(), &[]).await;
    let mut c = test.client().await;
    create_topic(&mut c, "isr", 1, &[("min.insync.replicas", "2")]).await;
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    assert_eq!(
        produce(&mut c, "isr", 0, batch(&["a"], 1_700_000_000_000), -1, 9)
            .await
            .0,
        NOT_ENOUGH_REPLICAS
    );
    assert_eq!(
        produce(&mut c, "isr", 0, batch(&["a"], 1_700_000_000_000), 1, 9).await,
        (0, 0)
    );
    // Two in-sync replicas: acks=all now waits for the follower, and times out while it does not fetch.
    let me = broker.config().node_id;
    let follower = me + 1;
    let part = broker.replica_manager().partition("isr", 0).unwrap();
    part.make_leader(1, 1, vec![me, follower], vec![me, follower]);
    const REQUEST_TIMED_OUT: i16 = 7;
    let mut slow = test.client().await;
    let timed_out =
        produce_with_timeout(&mut slow, "isr", batch(&["b"], 1_700_000_000_000), 50).await;
    assert_eq!(
        timed_out.0, REQUEST_TIMED_OUT,
        "written on the leader, never confirmed"
    );
    assert_eq!(
        part.high_watermark(),
        1,
        "it stays where it was: the follower's log end is unknown"
    );
    // The follower fetches everything; its next fetch (at the leader's log end) confirms it.
    let mut replica = test.client().await;
    let pd = replica_fetch(&mut replica, "isr", follower, 1, 0, -1).await;
    assert_eq!(pd.error_code, 0);
    assert_eq!(
        values(pd.records.as_ref().unwrap()).len(),
        2,
        "followers read past the high watermark"
    );
    let waiting = tokio::spawn(async move {
        produce_with_timeout(&mut slow, "isr", batch(&["c"], 1_700_000_000_000), 5000).await
    });
    // Appended on the leader (its log end moves to 3), and waiting for the follower.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while part.log_end_offset() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        part.log_end_offset(),
        3,
        "the acks=all produce was appended"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "acks=all waits for the follower");
    let pd = replica_fetch(&mut replica, "isr", follower, 1, 3, 1).await;
    assert_eq!((pd.error_code, pd.high_watermark), (0, 3));
    assert_eq!(
        waiting.await.unwrap(),
        (0, 2),
        "the follower's fetch at 3 commits offset 2"
    );
    assert_eq!(part.follower_progress(follower).unwrap().log_end_offset, 3);
    // A follower whose last batch is of an epoch the leader never had diverges: it is told where to truncate.
    let pd = replica_fetch(&mut replica, "isr", follower, 1, 5, 0).await;
    assert_eq!(
        (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset),
        (0, 1),
        "epoch 0 ends where epoch 1 starts on the leader"
    );
    drop(part);
    drop(broker);
    test.stop().await.unwrap();
}

async fn produce_with_timeout(
    c: &mut Client,
    topic: &str,
    records: Vec<u8>,
    timeout_ms: i32,
) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(bytes::Bytes::from(records)))])]);
    let resp = c.call(&req, 9).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A follower's Fetch v15 (ReplicaState) of partition 0 at `offset` with LastFetchedEpoch.
async fn replica_fetch(
    c: &mut Client,
    topic: &str,
    replica: i32,
    current_leader_epoch: i32,
    offset: i64,
    last_fetched_epoch: i32,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
    let id = topic_id(c, topic).await;
    let req = FetchRequest::default()
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(replica))
                .with_replica_epoch(-1),
        )
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(last_fetched_epoch)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = c.call(&req, 15).await;
    assert_eq!(resp.error_code, 0);
    resp.responses[0].partitions[0].clone()
}

/// A long poll on partition A is not woken by appends to partition B: it answers empty at its max wait, and
/// the broker counts no wake-up for it. An append to A does wake it, with the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_wakes_only_for_its_own_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (test, broker) = TestBroker::start_with_handle(dir.path(), &[]).await;
    let mut setup = test.client().await;
    create_topic(&mut setup, "lp", 2, &[]).await;
    let wakeups_before = broker.replica_manager().delayed_fetch_wakeups();

    const MAX_WAIT_MS: i32 = 1500;
    let mut poller = test.client().await;
    let started = Instant::now();
    let poll = tokio::spawn(async move {
        let pd = fetch(&mut poller, "lp", 0, 0, 12, MAX_WAIT_MS).await;
        (pd, poller)
    });
    // Appends to B while A's fetch waits (the fetch registers within its first pass; keep appending past that).
    for i in 0..10 {
        let (err, _) = produce(
            &mut setup,
            "lp",
            1,
            batch(&[&format!("b{i}")], 1_700_000_000_000),
            1,
            9,
        )
        .await;
        assert_eq!(err, 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (pd, mut poller) = poll.await.unwrap();
    assert_eq!(pd.error_code, 0);
    assert_eq!(
        pd.records.as_ref().map_or(0, |r| r.len()),
        0,
        "A has no data"
    );
    assert_eq!(pd.high_watermark, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(MAX_WAIT_MS as u64),
        "answered before its max wait"
    );
    assert_eq!(
        broker.replica_manager().delayed_fetch_wakeups(),
        wakeups_before,
        "appends to B woke a fetch waiting on A"
    );

    // Now data for A arrives during the wait: the fetch is woken and returns it.
    let poll = tokio::spawn(async move { fetch(&mut poller, "lp", 0, 0, 12, 20_000).await });
    // Once the fetch waits on A (not before: it would find the record at once, with no wake-up).
    let a = broker.replica_manager().partition("lp", 0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.waiting_fetches() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.waiting_fetches(), 1, "the fetch waits on A");
    assert_eq!(
        produce(&mut setup, "lp", 0, batch(&["a0"], 1_700_000_000_000), 1, 9).await,
        (0, 0)
    );
    let pd = tokio::time::timeout(Duration::from_secs(15), poll)
        .await
        .expect("woken by A's append")
        .unwrap();
    assert_eq!(
        values(pd.records.as_ref().unwrap()),
        vec![(0, "a0".to_string())]
    );
    assert!(broker.replica_manager().delayed_fetch_wakeups() > wakeups_before);
    drop(broker);
    test.stop().await.unwrap();
}
