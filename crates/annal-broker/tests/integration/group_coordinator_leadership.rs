//! The coordinator follows leadership of `__consumer_offsets`: it coordinates the groups of the partitions this
//! broker leads, answers NOT_COORDINATOR for the others (and for a partition it stopped leading, dropping that
//! partition's groups), and reloads a partition from its log when it leads it again. Parked JoinGroup calls of
//! an unloaded group are answered NOT_COORDINATOR. Driven by the real replica manager's `make_follower` /
//! `make_leader`, as the cluster code calls them on metadata changes.

use crate::group_support;

use std::time::Duration;

use group_support::*;
use kafka_protocol::messages::*;

const NOT_COORDINATOR: i16 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_and_regaining_leadership_unloads_and_reloads_the_partition_s_groups() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(
        dir.path(),
        annal_broker::group::GroupConfig {
            initial_rebalance_delay_ms: 60_000,
            ..fast_config()
        },
    );
    assert_eq!(
        commit(&c, "abc", -1, "", &[("t", 0, 41, None)], 9).await[0].2,
        NONE
    );
    assert_eq!(
        commit(&c, "other", -1, "", &[("t", 0, 7, None)], 9).await[0].2,
        NONE
    );
    let rm = c.replica_manager().clone();
    let me = rm.local_broker_id();
    let p = c.partition_for("abc");
    assert_ne!(
        p,
        c.partition_for("other"),
        "the two groups live in different partitions"
    );
    let part = rm
        .partition("__consumer_offsets", p as i32)
        .expect("the topic was created on first use");
    assert!(part.is_leader());

    // A JoinGroup parked in the initial rebalance delay of a group in that partition.
    let c2 = c.clone();
    let parked = tokio::spawn(async move {
        join(
            &c2,
            join_request("abc", "", None, 10_000, 5_000, &["t"]),
            3,
            "client",
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Another broker becomes leader.
    assert!(part.make_follower(me + 1, 1, 0, vec![me, me + 1], vec![me + 1]));
    c.reconcile();
    let r = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(
        r.error_code, NOT_COORDINATOR,
        "the parked join is answered at once"
    );
    assert_eq!(
        commit(&c, "abc", -1, "", &[("t", 0, 42, None)], 9).await[0].2,
        NOT_COORDINATOR
    );
    let fetched = c
        .offset_fetch(
            OffsetFetchRequest::default()
                .with_group_id(s("abc").into())
                .with_topics(None),
            7,
        )
        .await;
    assert_eq!(fetched.error_code, NOT_COORDINATOR);
    let hb = c
        .heartbeat(
            HeartbeatRequest::default()
                .with_group_id(s("abc").into())
                .with_member_id(s("m")),
            4,
        )
        .await;
    assert_eq!(hb.error_code, NOT_COORDINATOR);
    // Groups of partitions still led here are untouched.
    assert_eq!(fetch(&c, "other", Some(&[("t", vec![0])])).await[0].2, 7);

    // Leadership comes back (a newer epoch): the partition is replayed and its groups are served again.
    assert!(part.make_leader(2, 0, vec![me, me + 1], vec![me]));
    c.reconcile();
    let c3 = c.clone();
    assert!(
        eventually(Duration::from_secs(5), || {
            let c = c3.clone();
            async move {
                c.offset_fetch(
                    OffsetFetchRequest::default()
                        .with_group_id(s("abc").into())
                        .with_topics(None),
                    7,
                )
                .await
                .error_code
                    == NONE
            }
        })
        .await,
        "reloaded"
    );
    assert_eq!(fetch(&c, "abc", Some(&[("t", vec![0])])).await[0].2, 41);
    assert_eq!(
        commit(&c, "abc", -1, "", &[("t", 0, 43, None)], 9).await[0].2,
        NONE
    );
    assert_eq!(fetch(&c, "abc", Some(&[("t", vec![0])])).await[0].2, 43);
    c.shutdown().await;
}
