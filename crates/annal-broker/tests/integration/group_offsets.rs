//! Committed offsets through the coordinator's API: standalone and member commits, fetch (one group and several
//! per request), metadata round-trip, OffsetDelete, DeleteGroups, retention, independent groups.

use crate::group_support;

use std::time::Duration;

use group_support::*;
use kafka_protocol::messages::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_commits_round_trip_with_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    // A consumer without group management commits with generation -1 and no member id.
    let errs = commit(
        &c,
        "solo",
        -1,
        "",
        &[
            ("t", 0, 42, Some("meta-0")),
            ("t", 1, 7, None),
            ("u", 3, 0, Some("")),
        ],
        8,
    )
    .await;
    assert!(errs.iter().all(|e| e.2 == NONE), "{errs:?}");
    let got = fetch(&c, "solo", Some(&[("t", vec![0, 1, 2]), ("u", vec![3])])).await;
    assert_eq!(
        got,
        vec![
            ("t".into(), 0, 42, "meta-0".into()),
            ("t".into(), 1, 7, "".into()),
            ("t".into(), 2, -1, "".into()),
            ("u".into(), 3, 0, "".into()),
        ]
    );
    // All topics (null topic list).
    let all = fetch(&c, "solo", None).await;
    assert_eq!(all.len(), 3);
    // A later commit replaces the earlier one.
    commit(&c, "solo", -1, "", &[("t", 0, 100, Some("second"))], 9).await;
    assert_eq!(
        fetch(&c, "solo", Some(&[("t", vec![0])])).await,
        vec![("t".into(), 0, 100, "second".into())]
    );
    assert_eq!(
        c.committed_offsets("solo")
            .iter()
            .map(|o| (o.topic.as_str(), o.partition, o.offset))
            .collect::<Vec<_>>(),
        vec![("t", 0, 100), ("t", 1, 7), ("u", 3, 0)]
    );
    // Leader epoch (v6+) comes back.
    let req = OffsetFetchRequest::default()
        .with_group_id(s("solo").into())
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(s("t").into())
                .with_partition_indexes(vec![0]),
        ]));
    let resp = answer(c.offset_fetch(wire(req, 7), 7).await, 7);
    assert_eq!(resp.topics[0].partitions[0].committed_leader_epoch, 3);
    // Metadata over offset.metadata.max.bytes is refused per partition.
    let big = "x".repeat(5000);
    let errs = commit(&c, "solo", -1, "", &[("t", 0, 1, Some(&big))], 9).await;
    assert_eq!(errs[0].2, OFFSET_METADATA_TOO_LARGE);
    assert_eq!(fetch(&c, "solo", Some(&[("t", vec![0])])).await[0].2, 100);
    // Listed as a group with no protocol type, Empty.
    let list = answer(
        c.list_groups(wire(ListGroupsRequest::default(), 3), 3)
            .await,
        3,
    );
    assert_eq!(list.groups.len(), 1);
    assert_eq!(list.groups[0].protocol_type.as_str(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_commits_are_validated_against_generation_and_member() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    // Generation >= 0 for a group that does not exist.
    assert_eq!(
        commit(&c, "g", 3, "m", &[("t", 0, 1, None)], 9).await[0].2,
        GROUP_ID_NOT_FOUND
    );
    assert_eq!(
        commit(&c, "g", 3, "m", &[("t", 0, 1, None)], 8).await[0].2,
        ILLEGAL_GENERATION
    );
    let r = join_v9(&c, "g", "", 10_000, 5_000, &["t"]).await;
    assert_eq!(r.error_code, NONE);
    let me = r.member_id.to_string();
    let generation = r.generation_id;
    // While CompletingRebalance, commits wait for the assignment.
    assert_eq!(
        commit(&c, "g", generation, &me, &[("t", 0, 1, None)], 9).await[0].2,
        REBALANCE_IN_PROGRESS
    );
    assert_eq!(
        sync(
            &c,
            "g",
            generation,
            &me,
            None,
            vec![(me.clone(), assignment(&[("t", vec![0])]))],
            5
        )
        .await
        .error_code,
        NONE
    );
    assert_eq!(
        commit(&c, "g", generation, &me, &[("t", 0, 10, None)], 9).await[0].2,
        NONE
    );
    assert_eq!(
        commit(&c, "g", generation + 1, &me, &[("t", 0, 11, None)], 9).await[0].2,
        ILLEGAL_GENERATION
    );
    assert_eq!(
        commit(&c, "g", generation, "ghost", &[("t", 0, 12, None)], 9).await[0].2,
        UNKNOWN_MEMBER_ID
    );
    // Without member and generation, only an empty group accepts commits.
    assert_eq!(
        commit(&c, "g", -1, "", &[("t", 0, 13, None)], 9).await[0].2,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(fetch(&c, "g", Some(&[("t", vec![0])])).await[0].2, 10);
    // OffsetCommit v2 (oldest Kafka 4 accepts) still works for members.
    assert_eq!(
        commit(&c, "g", generation, &me, &[("t", 1, 20, Some("v2"))], 2).await[0].2,
        NONE
    );
    assert_eq!(
        fetch(&c, "g", Some(&[("t", vec![1])])).await[0],
        ("t".into(), 1, 20, "v2".into())
    );

    // OffsetDelete on a group whose member subscribes to `t`: refused for `t`, fine for other topics.
    commit(&c, "g", generation, &me, &[("old", 0, 5, None)], 9).await;
    let del = OffsetDeleteRequest::default()
        .with_group_id(s("g").into())
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(s("t").into())
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ]),
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(s("old").into())
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ]),
        ]);
    let resp = answer(c.offset_delete(wire(del.clone(), 0), 0, &Registry).await, 0);
    assert_eq!(resp.error_code, NONE);
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    assert_eq!(resp.topics[1].partitions[0].error_code, NONE);
    assert_eq!(fetch(&c, "g", Some(&[("old", vec![0])])).await[0].2, -1);
    assert_eq!(fetch(&c, "g", Some(&[("t", vec![0])])).await[0].2, 10);

    // DeleteGroups: refused while it has members; allowed once empty; then everything is gone.
    let dg = |names: Vec<&str>| {
        DeleteGroupsRequest::default()
            .with_groups_names(names.into_iter().map(|n| s(n).into()).collect())
    };
    let resp = answer(c.delete_groups(wire(dg(vec!["g", "nope"]), 2), 2).await, 2);
    assert_eq!(
        resp.results
            .iter()
            .map(|r| r.error_code)
            .collect::<Vec<_>>(),
        vec![NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]
    );
    let leave = LeaveGroupRequest::default()
        .with_group_id(s("g").into())
        .with_member_id(s(&me));
    assert_eq!(c.leave_group(wire(leave, 1), 1).await.error_code, NONE);
    // Empty now: OffsetDelete of a subscribed topic is allowed.
    let resp = answer(c.offset_delete(wire(del, 0), 0, &Registry).await, 0);
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    let resp = answer(c.delete_groups(wire(dg(vec!["g"]), 2), 2).await, 2);
    assert_eq!(resp.results[0].error_code, NONE);
    assert_eq!(fetch(&c, "g", Some(&[("t", vec![1])])).await[0].2, -1);
    assert_eq!(describe(&c, "g").await.group_state.as_str(), "Dead");
    let nf = OffsetDeleteRequest::default().with_group_id(s("g").into());
    assert_eq!(
        c.offset_delete(wire(nf, 0), 0, &Registry).await.error_code,
        GROUP_ID_NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_for_topics_or_partitions_that_do_not_exist_are_refused_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    // Only unknown partitions: refused, and no group appears.
    let errs = commit(
        &c,
        "ghost-group",
        5,
        "m",
        &[
            ("missing-topic", 0, 1, None),
            ("t", REGISTRY_PARTITIONS, 1, None),
        ],
        9,
    )
    .await;
    assert_eq!(
        errs.iter().map(|e| e.2).collect::<Vec<_>>(),
        vec![UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert!(c
        .list_groups(wire(ListGroupsRequest::default(), 5), 5)
        .await
        .groups
        .is_empty());
    // Mixed: the known partition gets the group's answer (here GROUP_ID_NOT_FOUND), the unknown one its own.
    let errs = commit(
        &c,
        "ghost-group",
        5,
        "m",
        &[("t", 0, 1, None), ("missing-topic", 0, 1, None)],
        9,
    )
    .await;
    assert_eq!(
        errs.iter().map(|e| e.2).collect::<Vec<_>>(),
        vec![GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION]
    );
    let errs = commit(
        &c,
        "solo",
        -1,
        "",
        &[("t", 0, 1, None), ("t", -1, 1, None)],
        9,
    )
    .await;
    assert_eq!(
        errs.iter().map(|e| e.2).collect::<Vec<_>>(),
        vec![NONE, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(c.committed_offsets("solo").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_keep_independent_offsets_and_one_fetch_reads_both() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    commit(
        &c,
        "fast",
        -1,
        "",
        &[("t", 0, 900), ("t", 1, 800)].map(|(t, p, o)| (t, p, o, None)),
        9,
    )
    .await;
    commit(&c, "slow", -1, "", &[("t", 0, 10, Some("slow-meta"))], 9).await;
    assert_eq!(
        fetch(&c, "fast", Some(&[("t", vec![0, 1])]))
            .await
            .iter()
            .map(|f| f.2)
            .collect::<Vec<_>>(),
        vec![900, 800]
    );
    assert_eq!(
        fetch(&c, "slow", Some(&[("t", vec![0, 1])]))
            .await
            .iter()
            .map(|f| f.2)
            .collect::<Vec<_>>(),
        vec![10, -1]
    );
    // OffsetFetch v8+: several groups in one request; one asks for all its topics (null).
    let req = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(s("fast").into())
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(s("t").into())
                    .with_partition_indexes(vec![1]),
            ])),
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(s("slow").into())
            .with_topics(None),
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(s("never").into())
            .with_topics(None),
    ]);
    for v in [8, 9] {
        let resp = answer(c.offset_fetch(wire(req.clone(), v), v).await, v);
        assert_eq!(resp.groups.len(), 3);
        assert_eq!(resp.groups[0].topics[0].partitions[0].committed_offset, 800);
        assert_eq!(resp.groups[1].topics[0].partitions[0].committed_offset, 10);
        assert_eq!(
            resp.groups[1].topics[0].partitions[0].metadata.as_deref(),
            Some("slow-meta")
        );
        assert!(resp.groups[2].topics.is_empty());
        assert!(resp.groups.iter().all(|g| g.error_code == NONE));
    }
    // Older single-group versions.
    for v in 1..=7 {
        let req = OffsetFetchRequest::default()
            .with_group_id(s("slow").into())
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(s("t").into())
                    .with_partition_indexes(vec![0]),
            ]));
        let resp = answer(c.offset_fetch(wire(req, v), v).await, v);
        assert_eq!(resp.topics[0].partitions[0].committed_offset, 10, "v{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_of_empty_groups_expire_after_the_retention_period() {
    let dir = tempfile::tempdir().unwrap();
    let config = annal_broker::group::GroupConfig {
        offsets_retention_ms: 300,
        offsets_retention_check_interval_ms: 50,
        ..fast_config()
    };
    let c = open(dir.path(), config.clone());
    commit(&c, "standalone", -1, "", &[("t", 0, 5, None)], 9).await;
    // A consumer group with a live member subscribed to `t`: its `t` offsets stay; `gone` ones expire.
    let r = join_v9(&c, "live", "", 10_000, 5_000, &["t"]).await;
    let me = r.member_id.to_string();
    sync(&c, "live", r.generation_id, &me, None, vec![], 5).await;
    commit(
        &c,
        "live",
        r.generation_id,
        &me,
        &[("t", 0, 1, None), ("gone", 0, 2, None)],
        9,
    )
    .await;
    let c2 = c.clone();
    let me2 = me.clone();
    let generation = r.generation_id;
    let keepalive = tokio::spawn(async move {
        loop {
            heartbeat(&c2, "live", generation, &me2, None).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let c3 = c.clone();
    assert!(
        eventually(Duration::from_secs(3), || {
            let c = c3.clone();
            async move {
                c.committed_offsets("standalone").is_empty()
                    && c.committed_offsets("live").len() == 1
            }
        })
        .await,
        "expired: standalone {:?}, live {:?}",
        c.committed_offsets("standalone"),
        c.committed_offsets("live")
    );
    assert_eq!(c.committed_offsets("live")[0].topic, "t");
    keepalive.abort();
    // The emptied standalone group is deleted, and stays deleted after a restart (tombstones in the log).
    let list = answer(
        c.list_groups(wire(ListGroupsRequest::default(), 4), 4)
            .await,
        4,
    );
    assert_eq!(
        list.groups
            .iter()
            .map(|g| g.group_id.0.to_string())
            .collect::<Vec<_>>(),
        vec!["live".to_string()]
    );
    c.shutdown().await;
    drop(c);
    let c = open(
        dir.path(),
        annal_broker::group::GroupConfig {
            offsets_retention_ms: i64::MAX / 2,
            ..config
        },
    );
    assert!(c.committed_offsets("standalone").is_empty());
    assert_eq!(c.committed_offsets("live").len(), 1);
}
