//! `__consumer_offsets` is kept small by the broker's log cleaner (it is a `cleanup.policy=compact` topic like
//! any other; decision 0002), on a single node too: many commits of the same group and partitions, the cleaner
//! compacts the log while the broker runs, and a restarted broker replays the small log and serves the latest
//! committed offsets.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::{
    offset_commit_request, offset_fetch_request, GroupId, OffsetCommitRequest, OffsetFetchRequest,
};

const COMMITS: i64 = 600;

fn overrides() -> Vec<&'static str> {
    vec![
        "offsets.topic.num.partitions=1",
        "offsets.topic.replication.factor=1",
        // Many small segments, cleaned as soon as anything is dirty, checked often.
        "offsets.topic.segment.bytes=4096",
        "log.cleaner.min.cleanable.ratio=0.01",
        "log.cleaner.backoff.ms=100",
    ]
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

/// OffsetCommit of one round, retried while the coordinator is loading or not yet known (the first commit
/// creates `__consumer_offsets`, whose partition must lead before it answers; a loaded machine makes that slow).
async fn commit(c: &mut Client, round: i64) {
    let started = Instant::now();
    loop {
        match try_commit(c, round).await {
            Ok(()) => return,
            Err(14..=16) if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(code) => panic!("commit round {round} failed with error {code}"),
        }
    }
}

async fn try_commit(c: &mut Client, round: i64) -> Result<(), i16> {
    let partitions = (0..2)
        .map(|p| {
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(round * (i64::from(p) + 1))
                .with_committed_metadata(Some(s(&format!("round-{round}"))))
        })
        .collect();
    let req = OffsetCommitRequest::default()
        .with_group_id(gid("busy"))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(name("t"))
                .with_partitions(partitions),
        ]);
    let resp = c.call(&req, 8).await;
    match resp.topics[0].partitions.iter().find(|p| p.error_code != 0) {
        Some(p) => Err(p.error_code),
        None => Ok(()),
    }
}

/// OffsetFetch, retried while the coordinator is loading or not yet known (as clients retry
/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR after a restart).
async fn fetch_offsets(c: &mut Client) -> Vec<(i64, String)> {
    let started = Instant::now();
    loop {
        match try_fetch_offsets(c).await {
            Ok(offsets) => return offsets,
            Err(code @ (14..=16)) if started.elapsed() < Duration::from_secs(20) => {
                let _ = code;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(code) => panic!("OffsetFetch failed with error {code}"),
        }
    }
}

async fn try_fetch_offsets(c: &mut Client) -> Result<Vec<(i64, String)>, i16> {
    let req = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(gid("busy"))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(name("t"))
                    .with_partition_indexes(vec![0, 1]),
            ])),
    ]);
    let resp = c.call(&req, 8).await;
    let group = &resp.groups[0];
    if group.error_code != 0 {
        return Err(group.error_code);
    }
    group.topics[0]
        .partitions
        .iter()
        .map(|p| {
            if p.error_code != 0 {
                return Err(p.error_code);
            }
            Ok((
                p.committed_offset,
                p.metadata.as_deref().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

/// Bytes of the `.log` files of `__consumer_offsets-0`.
fn log_bytes(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join("__consumer_offsets-0"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_compacts_consumer_offsets_and_a_restart_serves_the_latest_commits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &overrides()).await;
    let mut c = broker.client().await;
    create_topic(&mut c, "t", 2, &[]).await;
    for round in 0..COMMITS {
        commit(&mut c, round).await;
    }
    // Every commit is one batch (a 61-byte header and two records): uncleaned, the log is at least this big.
    let uncleaned_at_least = COMMITS as u64 * 61;
    let started = Instant::now();
    let mut bytes = log_bytes(dir.path());
    while bytes * 4 >= uncleaned_at_least && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        bytes = log_bytes(dir.path());
    }
    assert!(
        bytes * 4 < uncleaned_at_least,
        "the cleaner compacted __consumer_offsets-0: {bytes} bytes of log for {COMMITS} commits"
    );
    eprintln!("__consumer_offsets-0: {bytes} bytes of log after {COMMITS} commits (uncleaned >= {uncleaned_at_least})");
    let last = COMMITS - 1;
    let expected = vec![
        (last, format!("round-{last}")),
        (2 * last, format!("round-{last}")),
    ];
    assert_eq!(fetch_offsets(&mut c).await, expected);
    drop(c);
    broker.stop().await.unwrap();

    // A restart replays the compacted log: the latest commits, and the group keeps working.
    let broker = TestBroker::start(dir.path(), &overrides()).await;
    let mut c = broker.client().await;
    assert_eq!(fetch_offsets(&mut c).await, expected);
    commit(&mut c, COMMITS).await;
    assert_eq!(fetch_offsets(&mut c).await[1].0, 2 * COMMITS);
    drop(c);
    broker.stop().await.unwrap();
}
