//! Commits and group metadata survive restarts: a clean shutdown, a dropped coordinator (no shutdown), and a
//! kill -9 of a process that committed. Plus adopting the old coordinator's logs and refusing a lowered partition
//! count. (Compaction of `__consumer_offsets` by the broker's cleaner: tests/offsets_compaction.rs.)

use crate::group_support;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use annal_broker::group::GroupConfig;
use group_support::*;

/// Per group: `(topic, partition, offset, metadata)` expected from OffsetFetch.
type Expected = Vec<(String, Vec<(String, i32, i64, String)>)>;

/// Commits a known pattern over many groups (spread over many `__consumer_offsets` partitions), overwriting
/// some offsets, deleting one group, and returns what must be there afterwards.
async fn commit_pattern(c: &annal_broker::group::GroupCoordinator) -> Expected {
    let mut expected = Vec::new();
    for g in 0..20 {
        let group = format!("group-{g}");
        for round in 0..3i64 {
            let meta = format!("r{round}");
            let errs = commit(
                c,
                &group,
                -1,
                "",
                &[
                    ("t", 0, 100 * g + round, Some(&meta)),
                    ("t", 1, round, None),
                ],
                9,
            )
            .await;
            assert!(errs.iter().all(|e| e.2 == 0));
        }
        expected.push((
            group,
            vec![
                ("t".to_string(), 0, 100 * g + 2, "r2".to_string()),
                ("t".to_string(), 1, 2, String::new()),
            ],
        ));
    }
    let del = kafka_protocol::messages::DeleteGroupsRequest::default()
        .with_groups_names(vec![s("group-7").into()]);
    assert_eq!(
        c.delete_groups(wire(del, 2), 2).await.results[0].error_code,
        0
    );
    expected[7].1 = vec![
        ("t".to_string(), 0, -1, String::new()),
        ("t".to_string(), 1, -1, String::new()),
    ];
    expected
}

async fn check_pattern(c: &annal_broker::group::GroupCoordinator, expected: &Expected) {
    for (group, offsets) in expected {
        let got = fetch(c, group, Some(&[("t", vec![0, 1])])).await;
        assert_eq!(&got, offsets, "group {group}");
    }
}

fn partitions_on_disk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("__consumer_offsets-")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_survive_a_clean_restart_and_a_dropped_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    assert_eq!(
        partitions_on_disk(dir.path()),
        0,
        "partitions are created lazily"
    );
    let expected = commit_pattern(&c).await;
    assert!(
        partitions_on_disk(dir.path()) > 5,
        "groups spread over partitions"
    );
    // No shutdown: the coordinator just goes away (its files were never closed cleanly).
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c = open(dir.path(), fast_config());
    check_pattern(&c, &expected).await;
    // More commits, then a clean shutdown.
    commit(&c, "group-1", -1, "", &[("t", 0, 5555, Some("after"))], 9).await;
    c.shutdown().await;
    drop(c);
    let c = open(dir.path(), fast_config());
    assert_eq!(
        fetch(&c, "group-1", Some(&[("t", vec![0])])).await[0],
        ("t".into(), 0, 5555, "after".into())
    );
    assert_eq!(
        fetch(&c, "group-2", Some(&[("t", vec![0])])).await[0].2,
        202
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_group_is_restored_after_restart_and_its_members_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let config = GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..fast_config()
    };
    let c = open(dir.path(), config.clone());
    let r = join(
        &c,
        join_request("g", "", Some("inst-1"), 1_000, 5_000, &["t"]),
        9,
        "client",
    )
    .await;
    assert_eq!(r.error_code, NONE);
    let (me, generation) = (r.member_id.to_string(), r.generation_id);
    let s1 = sync(
        &c,
        "g",
        generation,
        &me,
        Some("inst-1"),
        vec![(me.clone(), assignment(&[("t", vec![0, 1])]))],
        5,
    )
    .await;
    assert_eq!(s1.error_code, NONE);
    commit(&c, "g", generation, &me, &[("t", 0, 9, None)], 9).await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let c = open(dir.path(), config);
    let d = describe(&c, "g").await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id.as_str(), me);
    assert_eq!(d.members[0].group_instance_id.as_deref(), Some("inst-1"));
    assert_eq!(
        decode_assignment(&d.members[0].member_assignment),
        vec![("t".to_string(), vec![0, 1])]
    );
    // The member keeps going with its generation; a commit is accepted.
    assert_eq!(
        heartbeat(&c, "g", generation, &me, Some("inst-1")).await,
        NONE
    );
    assert_eq!(
        commit(&c, "g", generation, &me, &[("t", 0, 10, None)], 9).await[0].2,
        NONE
    );
    // A static restart right after the broker restart gets the assignment without a rebalance.
    let r = join(
        &c,
        join_request("g", "", Some("inst-1"), 1_000, 5_000, &["t"]),
        9,
        "client",
    )
    .await;
    assert_eq!((r.error_code, r.generation_id), (NONE, generation));
    let s2 = sync(&c, "g", generation, &r.member_id, Some("inst-1"), vec![], 5).await;
    assert_eq!(
        decode_assignment(&s2.assignment),
        vec![("t".to_string(), vec![0, 1])]
    );
    // Once it stops heartbeating, it expires and the group empties.
    let c2 = c.clone();
    assert!(
        eventually(Duration::from_secs(4), || {
            let c = c2.clone();
            async move { describe(&c, "g").await.group_state.as_str() == "Empty" }
        })
        .await
    );
    assert_eq!(fetch(&c, "g", Some(&[("t", vec![0])])).await[0].2, 10);
}

/// The child half of the kill -9 test: commits, reports it, then waits to be killed. Run only by the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by commits_survive_kill_9_of_the_process"]
async fn kill_9_child() {
    let dir = std::env::var("ANNAL_GROUP_KILL_DIR").expect("run by the parent test");
    // No fsync: the page cache must carry commits across a process kill.
    let c = open(
        Path::new(&dir),
        GroupConfig {
            sync_writes: false,
            ..fast_config()
        },
    );
    let expected = commit_pattern(&c).await;
    let _ = expected;
    println!("COMMITTED");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_survive_kill_9_of_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "group_durability::kill_9_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ANNAL_GROUP_KILL_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut committed = false;
    for line in std::io::BufReader::new(stdout).lines() {
        if line.unwrap().contains("COMMITTED") {
            committed = true;
            break;
        }
    }
    assert!(committed, "the child committed");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let c = open(dir.path(), fast_config());
    // The same pattern the child committed.
    let scratch = tempfile::tempdir().unwrap();
    let reference = open(scratch.path(), fast_config());
    let expected = commit_pattern(&reference).await;
    check_pattern(&c, &expected).await;
}

/// Writes offset commits the way the coordinator did before `__consumer_offsets` was a registered topic: its
/// own engine log per partition under `<dir>/__consumer_offsets-<n>/` (Kafka's record schemas, one batch per
/// commit, appended as the coordinator, closed cleanly), with no entry in the topic registry.
fn write_legacy_commits(dir: &Path, commits: &[(&str, &str, i32, i64)]) {
    use annal_broker::group::records;
    use annal_log::{batch, AppendOptions, AppendOrigin, Log, LogConfig};
    let config = LogConfig {
        segment_bytes: 100 * 1024 * 1024,
        retention_ms: -1,
        retention_bytes: -1,
        max_message_bytes: 100 * 1024 * 1024,
        ..LogConfig::default()
    };
    for &(group, topic, partition, offset) in commits {
        let p = records::partition_for(group, 50);
        let mut log =
            Log::open(&dir.join(format!("__consumer_offsets-{p}")), config.clone()).unwrap();
        let key = records::offset_key(group, topic, partition);
        let value = records::offset_value(&records::OffsetValue {
            offset,
            leader_epoch: -1,
            metadata: format!("legacy-{offset}"),
            commit_timestamp: 1_700_000_000_000,
            expire_timestamp: None,
        });
        let mut bytes = batch::build_batch(
            &[(Some(key.as_slice()), Some(value.as_slice()))],
            &[1_700_000_000_000],
            batch::ProducerFields::default(),
        );
        let opts = AppendOptions {
            now_ms: 1_700_000_000_000,
            origin: AppendOrigin::Coordinator,
            ..AppendOptions::default()
        };
        log.append(&mut bytes, &opts).unwrap();
        log.close().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_kept_as_the_coordinator_s_own_logs_become_the_topic_s_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let commits: Vec<(String, i64)> = (0..40)
        .map(|i| (format!("legacy-group-{i}"), 1000 + i))
        .collect();
    let as_refs: Vec<(&str, &str, i32, i64)> = commits
        .iter()
        .map(|(g, o)| (g.as_str(), "t", 0, *o))
        .collect();
    write_legacy_commits(dir.path(), &as_refs);
    // A later commit of the same key supersedes the first, as on the old coordinator.
    write_legacy_commits(dir.path(), &[("legacy-group-0", "t", 0, 7)]);
    let legacy_dirs = partitions_on_disk(dir.path());
    assert!(legacy_dirs > 5, "commits spread over partitions");
    for round in 0..2 {
        let c = open(dir.path(), fast_config());
        for (group, offset) in &commits {
            if group == "legacy-group-1" && round > 0 {
                continue; // committed again below
            }
            let want = if group == "legacy-group-0" {
                7
            } else {
                *offset
            };
            let got = fetch(&c, group, Some(&[("t", vec![0])])).await;
            assert_eq!(
                got[0],
                ("t".into(), 0, want, format!("legacy-{want}")),
                "{group}, round {round}"
            );
        }
        commit(
            &c,
            "legacy-group-1",
            -1,
            "",
            &[("t", 0, 5000 + round, None)],
            9,
        )
        .await;
        assert_eq!(
            fetch(&c, "legacy-group-1", Some(&[("t", vec![0])])).await[0].2,
            5000 + round
        );
        c.shutdown().await;
        drop(c);
    }
    let registry = std::fs::read_to_string(dir.path().join("topics.json")).unwrap();
    assert!(
        registry.contains("__consumer_offsets"),
        "registered as a topic: {registry}"
    );
    assert_eq!(
        partitions_on_disk(dir.path()),
        50,
        "all of the topic's partitions, the old ones among them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_rewrite_is_finished_or_discarded_on_open() {
    // The old coordinator's rewrite (before `__consumer_offsets` was a topic): a crash after the new log moved
    // aside the old one but before taking its name leaves a complete `.rewrite`.
    let dir = tempfile::tempdir().unwrap();
    write_legacy_commits(dir.path(), &[("abc", "t", 0, 77)]);
    let p = dir.path().join("__consumer_offsets-4");
    assert!(p.is_dir());
    std::fs::rename(&p, dir.path().join("__consumer_offsets-4.rewrite")).unwrap();
    std::fs::create_dir(dir.path().join("__consumer_offsets-4.old")).unwrap();
    let c = open(dir.path(), fast_config());
    assert_eq!(fetch(&c, "abc", Some(&[("t", vec![0])])).await[0].2, 77);
    assert!(!dir.path().join("__consumer_offsets-4.old").exists());
    c.shutdown().await;
    drop(c);
    // A crash while writing the `.rewrite`: the partition itself is intact, the leftover goes.
    let dir = tempfile::tempdir().unwrap();
    write_legacy_commits(dir.path(), &[("abc", "t", 0, 78)]);
    std::fs::create_dir(dir.path().join("__consumer_offsets-4.rewrite")).unwrap();
    let c = open(dir.path(), fast_config());
    assert_eq!(fetch(&c, "abc", Some(&[("t", vec![0])])).await[0].2, 78);
    assert!(!dir.path().join("__consumer_offsets-4.rewrite").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_partition_count_is_refused_with_a_clear_error() {
    // Old data: the setting decides where groups live, so a lower one would lose them.
    let dir = tempfile::tempdir().unwrap();
    write_legacy_commits(dir.path(), &[("abc", "t", 0, 9)]);
    let err = annal_broker::group::GroupCoordinator::open(
        dir.path(),
        GroupConfig {
            offsets_topic_num_partitions: 3,
            ..fast_config()
        },
    )
    .err()
    .expect("refused");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("offsets.topic.num.partitions") && msg.contains("partition 4"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_topic_exists_its_partition_count_decides_where_a_group_lives() {
    // As Kafka: the setting is what the topic is created with; a lower one later changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    commit(&c, "abc", -1, "", &[("t", 0, 1, None)], 9).await;
    c.shutdown().await;
    drop(c);
    let c = open(
        dir.path(),
        GroupConfig {
            offsets_topic_num_partitions: 3,
            ..fast_config()
        },
    );
    assert_eq!(c.partition_for("abc"), 4);
    assert_eq!(fetch(&c, "abc", Some(&[("t", vec![0])])).await[0].2, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_sees_the_last_persisted_group_state_not_an_unfinished_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let config = GroupConfig {
        offsets_retention_check_interval_ms: 100,
        initial_rebalance_delay_ms: 0,
        sync_writes: false,
        ..fast_config()
    };
    let c = open(dir.path(), config.clone());
    // A Stable group with an assignment (persisted), then many commits to the same partition.
    let r = join(
        &c,
        join_request("abc", "", Some("i1"), 10_000, 5_000, &["t"]),
        9,
        "client",
    )
    .await;
    let (me, generation) = (r.member_id.to_string(), r.generation_id);
    sync(
        &c,
        "abc",
        generation,
        &me,
        Some("i1"),
        vec![(me.clone(), assignment(&[("t", vec![0, 1])]))],
        5,
    )
    .await;
    for i in 0..300 {
        assert_eq!(
            commit(&c, "abc", generation, &me, &[("t", 0, i, None)], 9).await[0].2,
            NONE
        );
    }
    // Start a rebalance that does not finish (a new member joins, `me` never rejoins): the in-memory state is
    // PreparingRebalance; what a restart must see is the last persisted Stable state.
    let c2 = c.clone();
    let _late = tokio::spawn(async move {
        join(
            &c2,
            join_request("abc", "", Some("i2"), 10_000, 5_000, &["t"]),
            9,
            "client",
        )
        .await
    });
    // Still writable, and a restart (no clean shutdown) sees everything.
    assert_eq!(
        commit(&c, "abc", generation, &me, &[("t", 1, 77, None)], 9).await[0].2,
        NONE
    );
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c = open(dir.path(), config);
    assert_eq!(
        fetch(&c, "abc", Some(&[("t", vec![0, 1])]))
            .await
            .iter()
            .map(|f| f.2)
            .collect::<Vec<_>>(),
        vec![299, 77]
    );
    let d = describe(&c, "abc").await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(
        d.members.len(),
        1,
        "the unfinished rebalance's newcomer was never persisted"
    );
    assert_eq!(
        decode_assignment(&d.members[0].member_assignment),
        vec![("t".to_string(), vec![0, 1])]
    );
}
