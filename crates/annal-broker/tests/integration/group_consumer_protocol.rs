//! The consumer group protocol (KIP-848) through the coordinator's API: server-side assignment, cooperative
//! reconciliation (revoke first, then assign), fencing, expiry, static members, offsets with member epochs.

use crate::group_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use annal_broker::group::{GroupConfig, GroupCoordinator, TopicCatalog, TopicInfo};
use group_support::*;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::*;
use uuid::Uuid;

const FENCED_MEMBER_EPOCH: i16 = 110;
const UNRELEASED_INSTANCE_ID: i16 = 111;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const GROUP: &str = "g-kip848";

struct Topics(BTreeMap<String, TopicInfo>);

impl TopicCatalog for Topics {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.0.get(name).copied()
    }
    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.0
            .iter()
            .find(|(_, t)| t.id == id)
            .map(|(n, _)| n.clone())
    }
}

fn topics(list: &[(&str, i32)]) -> Topics {
    Topics(
        list.iter()
            .map(|(n, p)| {
                (
                    n.to_string(),
                    TopicInfo {
                        id: Uuid::new_v4(),
                        partitions: *p,
                    },
                )
            })
            .collect(),
    )
}

/// A consumer as Kafka's client behaves: it revokes and takes partitions at once, and reports what it owns.
struct Member {
    id: String,
    epoch: i32,
    owned: BTreeMap<Uuid, BTreeSet<i32>>,
    instance: Option<String>,
}

impl Member {
    fn new(instance: Option<&str>) -> Member {
        Member {
            id: Uuid::new_v4().to_string(),
            epoch: 0,
            owned: BTreeMap::new(),
            instance: instance.map(str::to_string),
        }
    }

    async fn heartbeat(
        &mut self,
        c: &GroupCoordinator,
        t: &Topics,
        subscribe: &[&str],
    ) -> ConsumerGroupHeartbeatResponse {
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(s(GROUP).into())
            .with_member_id(s(&self.id))
            .with_member_epoch(self.epoch)
            .with_instance_id(self.instance.as_deref().map(s))
            .with_rebalance_timeout_ms(5_000)
            .with_subscribed_topic_names(Some(subscribe.iter().map(|n| s(n).into()).collect()))
            .with_topic_partitions(Some(
                self.owned
                    .iter()
                    .map(|(t, p)| {
                        TopicPartitions::default()
                            .with_topic_id(*t)
                            .with_partitions(p.iter().copied().collect())
                    })
                    .collect(),
            ));
        let resp = answer(
            c.consumer_group_heartbeat(wire(req, 1), 1, &client("kip848"), t)
                .await,
            1,
        );
        if resp.error_code == NONE {
            self.epoch = resp.member_epoch;
            if let Some(a) = &resp.assignment {
                self.owned = a
                    .topic_partitions
                    .iter()
                    .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                    .collect();
            }
        }
        resp
    }

    fn count(&self) -> usize {
        self.owned.values().map(|p| p.len()).sum()
    }
}

fn no_overlap(members: &[&Member]) {
    let mut seen = BTreeSet::new();
    for m in members {
        for (t, ps) in &m.owned {
            for p in ps {
                assert!(seen.insert((*t, *p)), "partition {p} owned twice");
            }
        }
    }
}

/// Heartbeats every member round-robin until all are at the same epoch with the wanted counts.
async fn settle(c: &GroupCoordinator, t: &Topics, members: &mut [&mut Member], want: &[usize]) {
    for _ in 0..20 {
        for m in members.iter_mut() {
            let r = m.heartbeat(c, t, &["t"]).await;
            assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        }
        let refs: Vec<&Member> = members.iter().map(|m| &**m).collect();
        no_overlap(&refs);
        let counts: Vec<usize> = refs.iter().map(|m| m.count()).collect();
        if counts == want && refs.iter().all(|m| m.epoch == refs[0].epoch) {
            return;
        }
    }
    panic!(
        "did not settle: {:?}",
        members
            .iter()
            .map(|m| (m.epoch, m.count()))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_partitions_and_a_newcomer_gets_only_revoked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), fast_config());
    let t = topics(&[("t", 6)]);
    let mut a = Member::new(None);
    let r = a.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.heartbeat_interval_ms, 5_000);
    assert_eq!(a.count(), 6);

    // B joins: its partitions are still A's, so it waits with nothing until A revokes.
    let mut b = Member::new(None);
    let r = b.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.member_epoch, 2);
    assert_eq!(b.count(), 0);
    let r = a.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(
        r.member_epoch, 1,
        "A stays in its epoch until it has revoked"
    );
    assert_eq!(a.count(), 3);
    let kept: BTreeSet<i32> = a.owned.values().next().unwrap().clone();
    let r = a.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.member_epoch, 2);
    assert_eq!(
        a.owned.values().next().unwrap(),
        &kept,
        "A keeps the partitions it was not asked to give up"
    );
    b.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(b.count(), 3);
    no_overlap(&[&a, &b]);
    let req = wire(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![s(GROUP).into()]),
        1,
    );
    let d = answer(c.consumer_group_describe(req, 1, &t).await, 1)
        .groups
        .remove(0);
    assert_eq!(d.error_code, NONE);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!((d.group_epoch, d.assignment_epoch), (2, 2));
    assert_eq!(d.assignor_name.as_str(), "uniform");
    assert_eq!(d.members.len(), 2);
    assert!(d
        .members
        .iter()
        .all(|m| m.assignment.topic_partitions[0].topic_name.0.as_str() == "t"));

    // C joins, then A leaves: all settle with no partition ever owned twice.
    let mut cm = Member::new(None);
    settle(&c, &t, &mut [&mut a, &mut b, &mut cm], &[2, 2, 2]).await;
    let leave = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(s(GROUP).into())
        .with_member_id(s(&a.id))
        .with_member_epoch(-1);
    let r = answer(
        c.consumer_group_heartbeat(wire(leave, 1), 1, &client("kip848"), &t)
            .await,
        1,
    );
    assert_eq!((r.error_code, r.member_epoch), (NONE, -1));
    settle(&c, &t, &mut [&mut b, &mut cm], &[3, 3]).await;

    // Errors: a bigger epoch is fenced, an unknown member is unknown, an unknown assignor is refused.
    let mut bogus = Member {
        id: b.id.clone(),
        epoch: b.epoch + 5,
        owned: BTreeMap::new(),
        instance: None,
    };
    assert_eq!(
        bogus.heartbeat(&c, &t, &["t"]).await.error_code,
        FENCED_MEMBER_EPOCH
    );
    let mut ghost = Member {
        id: "ghost".into(),
        epoch: 3,
        owned: BTreeMap::new(),
        instance: None,
    };
    assert_eq!(
        ghost.heartbeat(&c, &t, &["t"]).await.error_code,
        UNKNOWN_MEMBER_ID
    );
    let bad = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(s(GROUP).into())
        .with_member_id(s("x"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(1000)
        .with_subscribed_topic_names(Some(vec![s("t").into()]))
        .with_server_assignor(Some(s("magic")))
        .with_topic_partitions(Some(vec![]));
    assert_eq!(
        c.consumer_group_heartbeat(wire(bad, 1), 1, &client("x"), &t)
            .await
            .error_code,
        UNSUPPORTED_ASSIGNOR
    );

    // The classic protocol cannot join a consumer group that has members; ListGroups shows its type.
    let j = join(
        &c,
        join_request(GROUP, "", None, 5_000, 5_000, &["t"]),
        9,
        "classic",
    )
    .await;
    assert_eq!(j.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let list = answer(
        c.list_groups(wire(ListGroupsRequest::default(), 5), 5)
            .await,
        5,
    );
    assert_eq!(list.groups[0].group_type.as_str(), "consumer");
    assert_eq!(list.groups[0].protocol_type.as_str(), "consumer");

    // Offsets: commits carry the member epoch.
    assert_eq!(
        commit(&c, GROUP, b.epoch, &b.id, &[("t", 0, 11, None)], 9).await[0].2,
        NONE
    );
    assert_eq!(
        commit(&c, GROUP, b.epoch - 1, &b.id, &[("t", 0, 12, None)], 9).await[0].2,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        commit(&c, GROUP, -1, "", &[("t", 0, 13, None)], 9).await[0].2,
        UNKNOWN_MEMBER_ID
    );
    let fetch_req = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(s(GROUP).into())
            .with_member_id(Some(s(&b.id)))
            .with_member_epoch(b.epoch)
            .with_topics(None),
    ]);
    let resp = answer(c.offset_fetch(wire(fetch_req, 9), 9).await, 9);
    assert_eq!(resp.groups[0].error_code, NONE);
    assert_eq!(resp.groups[0].topics[0].partitions[0].committed_offset, 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_is_fenced_and_a_static_member_returns_to_its_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(
        dir.path(),
        GroupConfig {
            consumer_session_timeout_ms: 400,
            ..fast_config()
        },
    );
    let t = topics(&[("t", 4)]);
    let mut a = Member::new(Some("static-a"));
    let mut b = Member::new(None);
    // B's last heartbeat is in `settle`: its session ends at least 400 ms after this.
    let before_b_last_heartbeat = std::time::Instant::now();
    settle(&c, &t, &mut [&mut a, &mut b], &[2, 2]).await;
    let a_parts = a.owned.clone();

    // A leaves temporarily (epoch -2) and comes back under a new member id: same partitions, no reshuffle.
    let leave = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(s(GROUP).into())
        .with_member_id(s(&a.id))
        .with_member_epoch(-2)
        .with_instance_id(Some(s("static-a")));
    assert_eq!(
        c.consumer_group_heartbeat(wire(leave, 1), 1, &client("k"), &t)
            .await
            .error_code,
        NONE
    );
    // Another member claiming the same instance id while it is held is refused.
    let mut thief = Member::new(Some("static-a"));
    let mut back = Member::new(Some("static-a"));
    let r = back.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        back.owned, a_parts,
        "the static member gets its partitions back"
    );
    assert_eq!(
        thief.heartbeat(&c, &t, &["t"]).await.error_code,
        UNRELEASED_INSTANCE_ID
    );

    // B goes silent: after the session timeout it is fenced and A gets everything.
    let started = std::time::Instant::now();
    let mut done = false;
    while started.elapsed() < Duration::from_secs(3) {
        back.heartbeat(&c, &t, &["t"]).await;
        if back.count() == 4 {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(done, "b's partitions moved after its session timeout");
    assert!(
        before_b_last_heartbeat.elapsed() >= Duration::from_millis(400),
        "not before b's session timeout"
    );
    assert_eq!(
        b.heartbeat(&c, &t, &["t"]).await.error_code,
        UNKNOWN_MEMBER_ID
    );
    // New partitions are picked up: the topic grows to 6.
    let mut grown = topics(&[("t", 6)]);
    grown.0.get_mut("t").unwrap().id = *back.owned.keys().next().unwrap();
    back.heartbeat(&c, &grown, &["t"]).await;
    assert_eq!(back.count(), 6);
}

/// A coordinator that takes a consumer group over (here a restart on the same log; a failover replays the same
/// records) carries on from what the log says: members keep their epochs and partitions, a revocation in
/// progress stays in progress, and a newcomer gets no partition its previous owner has not released. Before the
/// group's records were logged, the restarted coordinator knew no members: the newcomer got every partition at
/// once while the old members still consumed theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_coordinator_carries_on_the_group_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let t = topics(&[("t", 6)]);
    let mut a = Member::new(None);
    let mut b = Member::new(Some("static-b"));
    let c = open(dir.path(), fast_config());
    settle(&c, &t, &mut [&mut a, &mut b], &[3, 3]).await;
    // C joins: A and B are asked to give up one partition each; A hears of it, B does not before the restart.
    let mut newcomer = Member::new(None);
    newcomer.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(newcomer.count(), 0, "A and B still own everything");
    let before_revoke = a.owned.clone();
    let r = a.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(a.count(), 2, "A is asked to revoke one partition");
    let revoked_by_a: BTreeSet<(Uuid, i32)> = before_revoke
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .filter(|(t, p)| !a.owned.get(t).is_some_and(|o| o.contains(p)))
        .collect();
    assert_eq!(revoked_by_a.len(), 1);
    let epochs = (a.epoch, b.epoch, newcomer.epoch);
    // A crash: the coordinator is dropped, not shut down.
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let c = open(dir.path(), fast_config());
    let req = wire(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![s(GROUP).into()]),
        1,
    );
    let d = answer(c.consumer_group_describe(req, 1, &t).await, 1)
        .groups
        .remove(0);
    assert_eq!(d.error_code, NONE, "{:?}", d.error_message);
    assert_eq!(
        d.members.len(),
        3,
        "every member is known after the restart"
    );
    assert_eq!(d.group_state.as_str(), "Reconciling");
    // B, who had not heard of the rebalance, still holds its three partitions in its old epoch.
    let r = b.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
    assert_eq!(b.count(), 2, "B is now asked to revoke one");
    // The newcomer gets nothing still owned: A has not reported its revocation yet, B neither.
    let r = newcomer.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
    assert_eq!(r.member_epoch, epochs.2, "the newcomer keeps its epoch");
    no_overlap(&[&a, &b, &newcomer]);
    assert_eq!(newcomer.count(), 0);
    // A, in its epoch from before the restart, reports the partition released; then B; then all settle.
    let r = a.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(
        r.error_code, NONE,
        "A's epoch {} survives: {:?}",
        epochs.0, r.error_message
    );
    settle(&c, &t, &mut [&mut a, &mut b, &mut newcomer], &[2, 2, 2]).await;
    assert!(
        revoked_by_a
            .iter()
            .all(|(t, p)| !a.owned.get(t).is_some_and(|o| o.contains(p))),
        "A does not get back what it revoked"
    );
    let settled_epoch = a.epoch;

    // A clean restart: the settled group comes back as it was, and a silent member is still fenced in time.
    // (A session of a second: A and B heartbeat every 50 ms, and must not lapse on a loaded machine.)
    c.shutdown().await;
    drop(c);
    let c = open(
        dir.path(),
        GroupConfig {
            consumer_session_timeout_ms: 1_000,
            ..fast_config()
        },
    );
    for m in [&mut a, &mut b] {
        let r = m.heartbeat(&c, &t, &["t"]).await;
        assert_eq!((r.error_code, r.member_epoch), (NONE, settled_epoch));
        assert_eq!(m.count(), 2);
    }
    // The newcomer stays silent: after its session timeout its partitions go to A and B.
    let mut a_and_b = [&mut a, &mut b];
    for _ in 0..100 {
        for m in a_and_b.iter_mut() {
            m.heartbeat(&c, &t, &["t"]).await;
        }
        if a_and_b.iter().map(|m| m.count()).sum::<usize>() == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a_and_b.iter().map(|m| m.count()).sum::<usize>(), 6);
    let r = newcomer.heartbeat(&c, &t, &["t"]).await;
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
    c.shutdown().await;
}

/// Members that leave are gone after a restart too, and a deleted group stays deleted: their records are
/// tombstoned, not just forgotten in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_left_and_a_deleted_group_stay_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t = topics(&[("t", 2)]);
    let mut a = Member::new(None);
    let mut b = Member::new(None);
    let c = open(dir.path(), fast_config());
    settle(&c, &t, &mut [&mut a, &mut b], &[1, 1]).await;
    let leave = |m: &Member| {
        wire(
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(s(GROUP).into())
                .with_member_id(s(&m.id))
                .with_member_epoch(-1),
            1,
        )
    };
    let r = c
        .consumer_group_heartbeat(leave(&b), 1, &client("k"), &t)
        .await;
    assert_eq!(r.error_code, NONE);
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let c = open(dir.path(), fast_config());
    let d = describe_group(&c, &t).await;
    assert_eq!(d.error_code, NONE);
    let ids: Vec<&str> = d.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, vec![a.id.as_str()], "B left before the restart");
    let r = c
        .consumer_group_heartbeat(leave(&a), 1, &client("k"), &t)
        .await;
    assert_eq!(r.error_code, NONE);
    let del = DeleteGroupsRequest::default().with_groups_names(vec![s(GROUP).into()]);
    assert_eq!(
        c.delete_groups(wire(del, 2), 2).await.results[0].error_code,
        NONE
    );
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let c = open(dir.path(), fast_config());
    assert_eq!(
        describe_group(&c, &t).await.error_code,
        69,
        "GROUP_ID_NOT_FOUND"
    );
    c.shutdown().await;
}

async fn describe_group(
    c: &GroupCoordinator,
    t: &Topics,
) -> consumer_group_describe_response::DescribedGroup {
    let req = wire(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![s(GROUP).into()]),
        1,
    );
    answer(c.consumer_group_describe(req, 1, t).await, 1)
        .groups
        .remove(0)
}
