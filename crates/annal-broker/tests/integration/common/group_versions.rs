//! Exercises every version of the group APIs over the wire (part of `versions.rs`' exact-set check).

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::*;

use super::{name, s, Client};

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

/// Joins a fresh classic group at `join_v` (retrying once for KIP-394's MEMBER_ID_REQUIRED), then syncs,
/// heartbeats and leaves at the given versions. Returns the member id.
async fn classic_round(
    c: &mut Client,
    group: &str,
    join_v: i16,
    sync_v: i16,
    hb_v: i16,
    leave_v: i16,
) {
    let mut join = JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(Bytes::from_static(b"\x00\x01\x00\x00\x00\x00"))]);
    let mut resp = c.call(&join, join_v).await;
    if resp.error_code == 79 {
        join = join.with_member_id(resp.member_id.clone());
        resp = c.call(&join, join_v).await;
    }
    assert_eq!(resp.error_code, 0, "join group v{join_v}");
    assert_eq!(
        resp.leader, resp.member_id,
        "join group v{join_v}: the only member leads"
    );
    let member = resp.member_id.clone();
    let generation = resp.generation_id;

    let mut sync = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(member.clone())
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(member.clone())
                .with_assignment(Bytes::from_static(b"assigned")),
        ]);
    if sync_v >= 5 {
        sync = sync
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")));
    }
    let resp = c.call(&sync, sync_v).await;
    assert_eq!(resp.error_code, 0, "sync group v{sync_v}");
    assert_eq!(
        resp.assignment.as_ref(),
        b"assigned",
        "sync group v{sync_v}"
    );

    let hb = HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(member.clone());
    assert_eq!(c.call(&hb, hb_v).await.error_code, 0, "heartbeat v{hb_v}");

    let leave = if leave_v >= 3 {
        LeaveGroupRequest::default()
            .with_group_id(gid(group))
            .with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(member.clone())
            ])
    } else {
        LeaveGroupRequest::default()
            .with_group_id(gid(group))
            .with_member_id(member.clone())
    };
    let resp = c.call(&leave, leave_v).await;
    assert_eq!(resp.error_code, 0, "leave group v{leave_v}");
}

async fn commit(c: &mut Client, group: &str, topic: &str, offset: i64, v: i16) {
    let req = OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_metadata(Some(s("meta"))),
                ]),
        ]);
    let resp = c.call(&req, v).await;
    assert_eq!(
        resp.topics[0].partitions[0].error_code, 0,
        "offset commit v{v}"
    );
}

/// Calls every group API at every version the coordinator advertises, recording each in `tested`.
pub async fn exercise_group_apis(c: &mut Client, topic: &str, tested: &mut BTreeSet<(i16, i16)>) {
    for v in 0..=6i16 {
        let req = if v >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")])
        } else {
            FindCoordinatorRequest::default().with_key(s("g"))
        };
        let resp = c.call(&req, v).await;
        let (error, port) = if v >= 4 {
            (resp.coordinators[0].error_code, resp.coordinators[0].port)
        } else {
            (resp.error_code, resp.port)
        };
        assert_eq!(error, 0, "find coordinator v{v}");
        assert!(port > 0, "find coordinator v{v}");
        tested.insert((ApiKey::FindCoordinator as i16, v));
    }

    for join_v in 0..=9i16 {
        let (sync_v, hb_v, leave_v) = (join_v.min(5), join_v.min(4), join_v.min(5));
        classic_round(
            c,
            &format!("classic-v{join_v}"),
            join_v,
            sync_v,
            hb_v,
            leave_v,
        )
        .await;
        tested.insert((ApiKey::JoinGroup as i16, join_v));
        tested.insert((ApiKey::SyncGroup as i16, sync_v));
        tested.insert((ApiKey::Heartbeat as i16, hb_v));
        tested.insert((ApiKey::LeaveGroup as i16, leave_v));
    }

    for v in 2..=9i16 {
        commit(c, "committer", topic, 100 + i64::from(v), v).await;
        tested.insert((ApiKey::OffsetCommit as i16, v));
    }

    for v in 1..=9i16 {
        let offset = if v >= 8 {
            let req = OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(gid("committer"))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(name(topic))
                            .with_partition_indexes(vec![0]),
                    ])),
            ]);
            let resp = c.call(&req, v).await;
            assert_eq!(resp.groups[0].error_code, 0, "offset fetch v{v}");
            let p = &resp.groups[0].topics[0].partitions[0];
            assert_eq!(p.metadata.as_deref(), Some("meta"));
            p.committed_offset
        } else {
            let req = OffsetFetchRequest::default()
                .with_group_id(gid("committer"))
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(name(topic))
                        .with_partition_indexes(vec![0]),
                ]));
            let resp = c.call(&req, v).await;
            let p = &resp.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "offset fetch v{v}");
            p.committed_offset
        };
        assert_eq!(offset, 109, "offset fetch v{v} returns the last commit");
        tested.insert((ApiKey::OffsetFetch as i16, v));
    }

    for v in 0..=6i16 {
        let resp = c
            .call(
                &DescribeGroupsRequest::default().with_groups(vec![gid("committer")]),
                v,
            )
            .await;
        assert_eq!(resp.groups[0].error_code, 0, "describe groups v{v}");
        assert_eq!(
            resp.groups[0].group_state.as_str(),
            "Empty",
            "describe groups v{v}"
        );
        tested.insert((ApiKey::DescribeGroups as i16, v));
    }

    for v in 0..=5i16 {
        let mut req = ListGroupsRequest::default();
        if v >= 4 {
            req = req.with_states_filter(vec![s("Empty")]);
        }
        let resp = c.call(&req, v).await;
        assert_eq!(resp.error_code, 0, "list groups v{v}");
        assert!(
            resp.groups
                .iter()
                .any(|g| g.group_id.0.as_str() == "committer"),
            "list groups v{v}"
        );
        tested.insert((ApiKey::ListGroups as i16, v));
    }

    {
        let req = OffsetDeleteRequest::default()
            .with_group_id(gid("committer"))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ]),
            ]);
        let resp = c.call(&req, 0).await;
        assert_eq!(resp.error_code, 0, "offset delete v0");
        assert_eq!(
            resp.topics[0].partitions[0].error_code, 0,
            "offset delete v0"
        );
        tested.insert((ApiKey::OffsetDelete as i16, 0));
    }

    for v in 0..=2i16 {
        let group = format!("doomed-v{v}");
        commit(c, &group, topic, 1, 9).await;
        let resp = c
            .call(
                &DeleteGroupsRequest::default().with_groups_names(vec![gid(&group)]),
                v,
            )
            .await;
        assert_eq!(resp.results[0].error_code, 0, "delete groups v{v}");
        tested.insert((ApiKey::DeleteGroups as i16, v));
    }

    for v in 0..=1i16 {
        let group = format!("consumer-v{v}");
        let member = if v >= 1 {
            s(&uuid::Uuid::new_v4().to_string())
        } else {
            s("")
        };
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(gid(&group))
            .with_member_id(member)
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(10_000)
            .with_subscribed_topic_names(Some(vec![name(topic)]))
            .with_topic_partitions(Some(vec![]));
        let resp = c.call(&req, v).await;
        assert_eq!(
            resp.error_code, 0,
            "consumer group heartbeat v{v}: {:?}",
            resp.error_message
        );
        assert!(resp.member_epoch > 0, "consumer group heartbeat v{v}");
        tested.insert((ApiKey::ConsumerGroupHeartbeat as i16, v));

        let resp = c
            .call(
                &ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid(&group)]),
                v,
            )
            .await;
        assert_eq!(resp.groups[0].error_code, 0, "consumer group describe v{v}");
        assert_eq!(
            resp.groups[0].members.len(),
            1,
            "consumer group describe v{v}"
        );
        tested.insert((ApiKey::ConsumerGroupDescribe as i16, v));
    }
}
