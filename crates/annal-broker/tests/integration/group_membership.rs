//! The classic group protocol driven through the coordinator's API with real request structs and real time:
//! joins, rebalances, assignments, member expiry, static membership, leaving.

use crate::group_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use group_support::*;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::*;

const GROUP: &str = "g-members";

/// Joins `n` dynamic members concurrently (KIP-394 style) and returns their JoinGroup answers, in order.
async fn join_many(
    c: &std::sync::Arc<annal_broker::group::GroupCoordinator>,
    ids: &[String],
    session_ms: i32,
    rebalance_ms: i32,
) -> Vec<JoinGroupResponse> {
    let mut handles = Vec::new();
    for id in ids {
        let (c, id) = (c.clone(), id.clone());
        handles.push(tokio::spawn(async move {
            join_v9(&c, GROUP, &id, session_ms, rebalance_ms, &["t"]).await
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Gets a member id for a new dynamic member (first half of KIP-394).
async fn new_member_id(c: &annal_broker::group::GroupCoordinator, session_ms: i32) -> String {
    let r = join(
        c,
        join_request(GROUP, "", None, session_ms, 5000, &["t"]),
        9,
        "client",
    )
    .await;
    assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
    r.member_id.to_string()
}

/// The leader's range-like assignment: topic `t`'s `partitions` dealt out in member order.
fn deal(members: &[String], partitions: i32) -> Vec<(String, Bytes)> {
    let mut per: BTreeMap<usize, Vec<i32>> = BTreeMap::new();
    for p in 0..partitions {
        per.entry(p as usize % members.len()).or_default().push(p);
    }
    members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (
                m.clone(),
                assignment(&[("t", per.remove(&i).unwrap_or_default())]),
            )
        })
        .collect()
}

/// Syncs every member (followers first, concurrently, then the leader with `deal`); returns member → assignment.
async fn sync_all(
    c: &std::sync::Arc<annal_broker::group::GroupCoordinator>,
    joins: &[JoinGroupResponse],
    partitions: i32,
) -> BTreeMap<String, Vec<(String, Vec<i32>)>> {
    let generation = joins[0].generation_id;
    let leader = joins[0].leader.to_string();
    let leader_join = joins
        .iter()
        .find(|j| j.member_id.as_str() == leader)
        .expect("leader among members");
    let members: Vec<String> = leader_join
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect();
    let mut handles = Vec::new();
    for j in joins.iter().filter(|j| j.member_id.as_str() != leader) {
        let (c, id) = (c.clone(), j.member_id.to_string());
        handles.push((
            id.clone(),
            tokio::spawn(async move { sync(&c, GROUP, generation, &id, None, vec![], 5).await }),
        ));
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut out = BTreeMap::new();
    let lr = sync(
        c,
        GROUP,
        generation,
        &leader,
        None,
        deal(&members, partitions),
        5,
    )
    .await;
    assert_eq!(lr.error_code, NONE);
    out.insert(leader.clone(), decode_assignment(&lr.assignment));
    for (id, h) in handles {
        let r = h.await.unwrap();
        assert_eq!(r.error_code, NONE, "follower sync");
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
        out.insert(id, decode_assignment(&r.assignment));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_get_a_generation_a_leader_and_assignments_then_a_fourth_rebalances() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(new_member_id(&c, 10_000).await);
    }
    let started = Instant::now();
    let joins = join_many(&c, &ids, 10_000, 5_000).await;
    // An empty group waits group.initial.rebalance.delay.ms for more members before completing the join.
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "initial rebalance delay honoured"
    );
    let generation = joins[0].generation_id;
    assert_eq!(generation, 1);
    let leader = joins[0].leader.to_string();
    for j in &joins {
        assert_eq!(j.error_code, NONE);
        assert_eq!(j.generation_id, generation);
        assert_eq!(j.leader.as_str(), leader);
        assert_eq!(j.protocol_name.as_deref(), Some("range"));
        assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
        if j.member_id.as_str() == leader {
            assert_eq!(j.members.len(), 3, "the leader sees every member");
            for m in &j.members {
                assert_eq!(
                    m.metadata,
                    subscription(&["t"]),
                    "member metadata for the chosen protocol"
                );
            }
        } else {
            assert!(j.members.is_empty(), "followers get no member list");
        }
    }
    assert!(ids.contains(&leader));

    let assigned = sync_all(&c, &joins, 6).await;
    assert_eq!(assigned.len(), 3);
    let mut all: Vec<i32> = assigned.values().flat_map(|a| a[0].1.clone()).collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3, 4, 5]);
    assert!(
        assigned.values().all(|a| a[0].1.len() == 2),
        "two partitions each: {assigned:?}"
    );

    let d = describe(&c, GROUP).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_data.as_str(), "range");
    assert_eq!(d.members.len(), 3);
    for m in &d.members {
        assert_eq!(m.client_id.as_str(), "client");
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
        assert_eq!(
            decode_assignment(&m.member_assignment),
            assigned[m.member_id.as_str()]
        );
    }
    for id in &ids {
        assert_eq!(heartbeat(&c, GROUP, generation, id, None).await, NONE);
    }

    // A fourth member: the group rebalances; the others learn it from their heartbeats.
    let c4 = c.clone();
    let fourth = tokio::spawn(async move { join_v9(&c4, GROUP, "", 10_000, 5_000, &["t"]).await });
    let c2 = c.clone();
    let id0 = ids[0].clone();
    assert!(
        eventually(Duration::from_secs(2), || {
            let (c, id) = (c2.clone(), id0.clone());
            async move { heartbeat(&c, GROUP, generation, &id, None).await == REBALANCE_IN_PROGRESS }
        })
        .await
    );
    assert_eq!(
        describe(&c, GROUP).await.group_state.as_str(),
        "PreparingRebalance"
    );
    let mut joins = join_many(&c, &ids, 10_000, 5_000).await;
    joins.push(fourth.await.unwrap());
    for j in &joins {
        assert_eq!(j.error_code, NONE);
        assert_eq!(j.generation_id, generation + 1);
    }
    let leader_join = joins.iter().find(|j| j.member_id == j.leader).unwrap();
    assert_eq!(leader_join.members.len(), 4);
    assert_eq!(
        describe(&c, GROUP).await.group_state.as_str(),
        "CompletingRebalance"
    );
    // During CompletingRebalance heartbeats are fine (cooperative clients keep consuming) and commits wait.
    assert_eq!(
        heartbeat(&c, GROUP, generation + 1, &ids[1], None).await,
        NONE
    );
    let commit_errors = commit(&c, GROUP, generation + 1, &ids[1], &[("t", 0, 5, None)], 9).await;
    assert_eq!(commit_errors[0].2, REBALANCE_IN_PROGRESS);
    let assigned = sync_all(&c, &joins, 8).await;
    assert_eq!(assigned.len(), 4);
    assert!(assigned.values().all(|a| a[0].1.len() == 2));
    assert_eq!(describe(&c, GROUP).await.group_state.as_str(), "Stable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_expires_after_its_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    let a = new_member_id(&c, 400).await;
    let b = new_member_id(&c, 400).await;
    let joins = join_many(&c, &[a.clone(), b.clone()], 400, 2_000).await;
    let generation = joins[0].generation_id;
    // b's session starts at its SyncGroup, after this: b expires at least 400 ms from here.
    let started = Instant::now();
    sync_all(&c, &joins, 2).await;
    // Only `a` heartbeats; `b` goes silent.
    let mut seen = NONE;
    while started.elapsed() < Duration::from_secs(3) {
        seen = heartbeat(&c, GROUP, generation, &a, None).await;
        if seen != NONE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen, REBALANCE_IN_PROGRESS,
        "b's expiry started a rebalance"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "not before the session timeout"
    );
    let r = join_v9(&c, GROUP, &a, 400, 2_000, &["t"]).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.generation_id, generation + 1);
    assert_eq!(r.leader.as_str(), a);
    assert_eq!(r.members.len(), 1);
    assert_eq!(
        heartbeat(&c, GROUP, generation, &b, None).await,
        UNKNOWN_MEMBER_ID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    let a = new_member_id(&c, 10_000).await;
    let b = new_member_id(&c, 10_000).await;
    let joins = join_many(&c, &[a.clone(), b.clone()], 10_000, 400).await;
    let generation = joins[0].generation_id;
    sync_all(&c, &joins, 2).await;
    // A third member joins; `a` rejoins, `b` keeps heartbeating but never rejoins.
    let c3 = c.clone();
    let third = tokio::spawn(async move { join_v9(&c3, GROUP, "", 10_000, 400, &["t"]).await });
    let c2 = c.clone();
    let a2 = a.clone();
    assert!(
        eventually(Duration::from_secs(2), || {
            let (c, a) = (c2.clone(), a2.clone());
            async move { heartbeat(&c, GROUP, generation, &a, None).await == REBALANCE_IN_PROGRESS }
        })
        .await
    );
    let started = Instant::now();
    let ra = join_v9(&c, GROUP, &a, 10_000, 400, &["t"]).await;
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the join waited for b"
    );
    let r3 = third.await.unwrap();
    assert_eq!((ra.error_code, r3.error_code), (NONE, NONE));
    assert_eq!(ra.generation_id, generation + 1);
    let leader = if ra.member_id == ra.leader { &ra } else { &r3 };
    assert_eq!(leader.members.len(), 2, "b was dropped");
    assert!(leader.members.iter().all(|m| m.member_id.as_str() != b));
    assert_eq!(
        heartbeat(&c, GROUP, generation, &b, None).await,
        UNKNOWN_MEMBER_ID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    // Static members join with an empty member id and no MEMBER_ID_REQUIRED round.
    let mut handles = Vec::new();
    for inst in ["i1", "i2"] {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            join(
                &c,
                join_request(GROUP, "", Some(inst), 5_000, 5_000, &["t"]),
                9,
                "static-client",
            )
            .await
        }));
    }
    let mut joins = Vec::new();
    for h in handles {
        joins.push(h.await.unwrap());
    }
    for j in &joins {
        assert_eq!(j.error_code, NONE);
    }
    assert!(
        joins.iter().any(|j| j.member_id.starts_with("i1-")),
        "static member id is instance id + uuid"
    );
    let generation = joins[0].generation_id;
    let before = sync_all(&c, &joins, 4).await;
    let id_of = |inst: &str| {
        joins
            .iter()
            .find(|j| j.member_id.starts_with(&format!("{inst}-")))
            .unwrap()
            .member_id
            .to_string()
    };
    let (old_i1, i2) = (id_of("i1"), id_of("i2"));
    let i1_was_leader = joins[0].leader.as_str() == old_i1;

    // i1 restarts: a new JoinGroup with an empty member id and the same group.instance.id.
    let started = Instant::now();
    let r = join(
        &c,
        join_request(GROUP, "", Some("i1"), 5_000, 5_000, &["t"]),
        9,
        "static-client",
    )
    .await;
    // A rebalance would hold the answer for the 5 s rebalance timeout; an answer at once includes the group
    // record's fsync, which a loaded disk may take a while over.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered at once, no rebalance"
    );
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.generation_id, generation, "same generation");
    assert_ne!(r.member_id.as_str(), old_i1);
    if i1_was_leader {
        // KIP-814: the restarted leader is told it leads but need not compute an assignment.
        assert!(r.skip_assignment);
        assert_eq!(r.leader, r.member_id);
    } else {
        assert!(!r.skip_assignment);
        assert_eq!(r.leader.as_str(), i2);
    }
    let new_i1 = r.member_id.to_string();
    let s1 = sync(&c, GROUP, generation, &new_i1, Some("i1"), vec![], 5).await;
    assert_eq!(s1.error_code, NONE);
    assert_eq!(
        decode_assignment(&s1.assignment),
        before[&old_i1],
        "same partitions as before the restart"
    );
    assert_eq!(
        heartbeat(&c, GROUP, generation, &i2, Some("i2")).await,
        NONE,
        "no rebalance for the others"
    );
    assert_eq!(
        heartbeat(&c, GROUP, generation, &new_i1, Some("i1")).await,
        NONE
    );
    assert_eq!(
        heartbeat(&c, GROUP, generation, &old_i1, Some("i1")).await,
        FENCED_INSTANCE_ID,
        "the old instance is fenced"
    );
    let d = describe(&c, GROUP).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 2);

    // A static member leaving by instance id alone (LeaveGroup v5) triggers a rebalance.
    let leave = LeaveGroupRequest::default()
        .with_group_id(s(GROUP).into())
        .with_members(vec![
            MemberIdentity::default()
                .with_member_id(s(""))
                .with_group_instance_id(Some(s("i1"))),
            MemberIdentity::default()
                .with_member_id(s(&old_i1))
                .with_group_instance_id(Some(s("i2"))),
        ]);
    let resp = answer(c.leave_group(wire(leave, 5), 5).await, 5);
    assert_eq!(resp.error_code, NONE);
    assert_eq!(resp.members[0].error_code, NONE);
    assert_eq!(
        resp.members[1].error_code, FENCED_INSTANCE_ID,
        "member id does not match the instance"
    );
    assert_eq!(
        heartbeat(&c, GROUP, generation, &i2, Some("i2")).await,
        REBALANCE_IN_PROGRESS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_errors_match_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    // Unknown member id on a group that does not exist.
    let r = join(
        &c,
        join_request(GROUP, "nobody", None, 5_000, 5_000, &["t"]),
        9,
        "c",
    )
    .await;
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
    // Session timeout outside group.min/max.session.timeout.ms.
    let r = join(&c, join_request(GROUP, "", None, 5, 5_000, &["t"]), 9, "c").await;
    assert_eq!(r.error_code, INVALID_SESSION_TIMEOUT);
    // Empty protocol type.
    let r = join(
        &c,
        join_request(GROUP, "", None, 5_000, 5_000, &["t"]).with_protocol_type(s("")),
        9,
        "c",
    )
    .await;
    assert_eq!(r.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let lg = wire(ListGroupsRequest::default(), 5);
    assert!(
        c.list_groups(lg, 5).await.groups.is_empty(),
        "refused joins leave no group behind"
    );

    // JoinGroup v3 (before KIP-394) joins at once without MEMBER_ID_REQUIRED.
    let first = join(
        &c,
        join_request(GROUP, "", None, 5_000, 5_000, &["t"]),
        3,
        "old-client",
    )
    .await;
    assert_eq!(first.error_code, NONE);
    assert_eq!(first.generation_id, 1);
    assert!(first.member_id.starts_with("old-client-"));
    let me = first.member_id.to_string();
    // A member with an incompatible protocol cannot join.
    let mut other = join_request(GROUP, "", None, 5_000, 5_000, &["t"]);
    other.protocols.retain(|p| p.name.as_str() == "roundrobin");
    other.protocols[0].name = s("sticky-only");
    assert_eq!(
        join(&c, other, 9, "c").await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    // SyncGroup with a wrong generation, an unknown member.
    assert_eq!(
        sync(&c, GROUP, 7, &me, None, vec![], 3).await.error_code,
        ILLEGAL_GENERATION
    );
    assert_eq!(
        sync(&c, GROUP, 1, "ghost", None, vec![], 3)
            .await
            .error_code,
        UNKNOWN_MEMBER_ID
    );
    // The leader leaves one member out of... itself: an empty assignment, still a valid answer.
    let r = sync(&c, GROUP, 1, &me, None, vec![], 3).await;
    assert_eq!(r.error_code, NONE);
    assert!(r.assignment.is_empty());
    // Heartbeat errors.
    assert_eq!(heartbeat(&c, GROUP, 0, &me, None).await, ILLEGAL_GENERATION);
    assert_eq!(
        heartbeat(&c, GROUP, 1, "ghost", None).await,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        heartbeat(&c, "no-such-group", 1, &me, None).await,
        UNKNOWN_MEMBER_ID
    );
    // A new member while Stable: SyncGroup from the old member during PreparingRebalance is refused.
    let c2 = c.clone();
    let newcomer = tokio::spawn(async move {
        join(
            &c2,
            join_request(GROUP, "", None, 5_000, 5_000, &["t"]),
            3,
            "late",
        )
        .await
    });
    let c3 = c.clone();
    let me2 = me.clone();
    assert!(
        eventually(Duration::from_secs(2), || {
            let (c, me) = (c3.clone(), me2.clone());
            async move { heartbeat(&c, GROUP, 1, &me, None).await == REBALANCE_IN_PROGRESS }
        })
        .await
    );
    assert_eq!(
        sync(&c, GROUP, 1, &me, None, vec![], 3).await.error_code,
        REBALANCE_IN_PROGRESS
    );
    let again = join(
        &c,
        join_request(GROUP, &me, None, 5_000, 5_000, &["t"]),
        3,
        "old-client",
    )
    .await;
    assert_eq!(again.error_code, NONE);
    assert_eq!(again.generation_id, 2);
    assert_eq!(newcomer.await.unwrap().generation_id, 2);
    // Every JoinGroup version the coordinator advertises encodes (v0 included, with its session-timeout
    // rebalance timeout).
    for v in 0..=9 {
        let group = format!("g-version-{v}");
        let r = join(
            &c,
            join_request(&group, "", None, 5_000, 5_000, &["t"]),
            v,
            "c",
        )
        .await;
        assert!(
            r.error_code == NONE || r.error_code == MEMBER_ID_REQUIRED,
            "v{v}: {}",
            r.error_code
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_members_rebalance_the_group_and_the_last_one_empties_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    let ids = vec![
        new_member_id(&c, 10_000).await,
        new_member_id(&c, 10_000).await,
        new_member_id(&c, 10_000).await,
    ];
    let joins = join_many(&c, &ids, 10_000, 5_000).await;
    let generation = joins[0].generation_id;
    sync_all(&c, &joins, 3).await;
    // Batched leave (v3+): one known member and one unknown.
    let leave = LeaveGroupRequest::default()
        .with_group_id(s(GROUP).into())
        .with_members(vec![
            MemberIdentity::default().with_member_id(s(&ids[0])),
            MemberIdentity::default().with_member_id(s("ghost")),
        ]);
    let resp = answer(c.leave_group(wire(leave, 4), 4).await, 4);
    assert_eq!(resp.error_code, NONE);
    assert_eq!(
        resp.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.error_code))
            .collect::<Vec<_>>(),
        vec![
            (ids[0].clone(), NONE),
            ("ghost".to_string(), UNKNOWN_MEMBER_ID)
        ]
    );
    assert_eq!(
        heartbeat(&c, GROUP, generation, &ids[1], None).await,
        REBALANCE_IN_PROGRESS
    );
    let joins = join_many(&c, &ids[1..], 10_000, 5_000).await;
    assert!(joins
        .iter()
        .all(|j| j.generation_id == generation + 1 && j.error_code == NONE));
    sync_all(&c, &joins, 3).await;
    // v0 leave, one member at a time; the error is top-level.
    for id in &ids[1..] {
        let leave = LeaveGroupRequest::default()
            .with_group_id(s(GROUP).into())
            .with_member_id(s(id));
        assert_eq!(
            answer(c.leave_group(wire(leave, 0), 0).await, 0).error_code,
            NONE
        );
    }
    let leave = LeaveGroupRequest::default()
        .with_group_id(s(GROUP).into())
        .with_member_id(s("ghost"));
    assert_eq!(
        answer(c.leave_group(wire(leave, 0), 0).await, 0).error_code,
        UNKNOWN_MEMBER_ID
    );
    let d = describe(&c, GROUP).await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert!(d.members.is_empty());
    // ListGroups state filters (v4+), case-insensitive as Kafka.
    let list = |states: Vec<&str>| {
        let c = c.clone();
        let req =
            ListGroupsRequest::default().with_states_filter(states.into_iter().map(s).collect());
        async move {
            answer(c.list_groups(wire(req, 5), 5).await, 5)
                .groups
                .into_iter()
                .map(|g| {
                    (
                        g.group_id.0.to_string(),
                        g.group_state.to_string(),
                        g.group_type.to_string(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(vec!["empty"]).await,
        vec![(
            GROUP.to_string(),
            "Empty".to_string(),
            "classic".to_string()
        )]
    );
    assert!(list(vec!["Stable"]).await.is_empty());
    assert_eq!(list(vec![]).await.len(), 1);
}
