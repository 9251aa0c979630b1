//! Elections, ELR, unclean elections, ElectLeaders and auto rebalance (issue 10), over the harness of
//! `tests.rs`: real controller, real image, deterministic time.

use super::*;
use crate::controller::partition_change::RECOVERING;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;

async fn create_with(
    h: &Harness,
    name: &str,
    assignment: &[&[i32]],
    configs: &[(&str, &str)],
) -> CreatableTopicResult {
    let assignments = assignment
        .iter()
        .enumerate()
        .map(|(i, ids)| {
            CreatableReplicaAssignment::default()
                .with_partition_index(i as i32)
                .with_broker_ids(ids.iter().map(|b| BrokerId(*b)).collect())
        })
        .collect();
    let configs = configs
        .iter()
        .map(|(n, v)| {
            CreatableTopicConfig::default()
                .with_name(s(n))
                .with_value(Some(s(v)))
        })
        .collect();
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(s(name)))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(assignments)
        .with_configs(configs)]);
    h.controller.create_topics(req).await.topics.remove(0)
}

fn elect_request(election_type: i8, topic: &str, partitions: &[i32]) -> ElectLeadersRequest {
    ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(partitions.to_vec())]))
}

/// (partition, error code) pairs of an ElectLeaders answer.
fn codes(resp: &ElectLeadersResponse) -> Vec<(i32, i16)> {
    resp.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(|p| (p.partition_id, p.error_code))
        })
        .collect()
}

#[tokio::test]
async fn below_min_isr_the_leaving_members_become_eligible_leaders() {
    let mut h = Harness::with_brokers(3, &[]).await;
    let r = create_with(&h, "t", &[&[0, 1, 2]], &[("min.insync.replicas", "2")]).await;
    assert_eq!(r.error_code, NONE);
    h.silence(2).await;
    let p = h.partition("t", 0);
    assert_eq!(
        (p.isr.clone(), p.elr.clone()),
        (vec![0, 1], vec![]),
        "at min ISR: no ELR"
    );
    h.silence(1).await;
    let p = h.partition("t", 0);
    assert_eq!(
        (p.isr.clone(), p.elr.clone()),
        (vec![0], vec![1]),
        "below min ISR: 1 stays eligible"
    );
    assert_eq!(p.leader, 0);
    h.silence(0).await;
    let p = h.partition("t", 0);
    assert_eq!(p.leader, NO_LEADER);
    assert!(p.isr.is_empty());
    assert_eq!(p.elr, vec![0, 1], "the last leader joins the ELR");
    assert_eq!(p.last_known_elr, vec![0]);

    // Broker 2 (out of sync since the first fencing) returns: not eligible, the partition stays offline.
    assert!(!h.beat(2).await.is_fenced);
    assert_eq!(h.partition("t", 0).leader, NO_LEADER);
    // Broker 1 returns: elected from the ELR, alone in the ISR; broker 0 stays eligible.
    assert!(!h.beat(1).await.is_fenced);
    let p = h.partition("t", 0);
    assert_eq!(p.leader, 1);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![1], vec![0]));
    assert!(p.last_known_elr.is_empty());
    assert_eq!(p.leader_recovery_state, 0);
    // The followers catch up: back at min ISR the ELR empties.
    assert!(!h.beat(0).await.is_fenced);
    assert_eq!(h.alter_isr("t", 0, &[1, 0], 0).await, NONE);
    let p = h.partition("t", 0);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![1, 0], vec![]));
}

#[tokio::test]
async fn a_fenced_leader_is_replaced_by_the_first_in_sync_live_replica_in_replica_order() {
    let mut h = Harness::with_brokers(4, &[]).await;
    assert_eq!(
        h.create_assigned("t", &[&[0, 3, 1, 2]]).await.error_code,
        NONE
    );
    // 3 is out of sync; 1 and 2 are in sync.
    assert_eq!(h.alter_isr("t", 0, &[0, 1, 2], 0).await, NONE);
    let before = h.partition("t", 0);
    h.silence(0).await;
    let p = h.partition("t", 0);
    assert_eq!(
        p.leader, 1,
        "3 precedes 1 in replica order but is not in sync"
    );
    assert_eq!(p.isr, vec![1, 2]);
    assert_eq!(p.leader_epoch, before.leader_epoch + 1);
    assert_eq!(p.partition_epoch, before.partition_epoch + 1);
}

#[tokio::test]
async fn unclean_election_needs_the_topic_or_cluster_to_allow_it_and_marks_the_leader_recovering() {
    let mut h = Harness::with_brokers(2, &[]).await;
    assert_eq!(
        create_with(&h, "safe", &[&[0, 1]], &[]).await.error_code,
        NONE
    );
    let r = create_with(
        &h,
        "risky",
        &[&[0, 1]],
        &[("unclean.leader.election.enable", "true")],
    )
    .await;
    assert_eq!(r.error_code, NONE);
    for t in ["safe", "risky"] {
        assert_eq!(h.alter_isr(t, 0, &[0], 0).await, NONE);
    }
    h.silence(0).await;
    let safe = h.partition("safe", 0);
    assert_eq!(safe.leader, NO_LEADER, "unclean election is off by default");
    let risky = h.partition("risky", 0);
    assert_eq!(risky.leader, 1, "any live replica");
    assert_eq!(risky.isr, vec![1], "the ISR is the new leader alone");
    assert!(risky.elr.is_empty() && risky.last_known_elr.is_empty());
    assert_eq!(risky.leader_recovery_state, RECOVERING);
    // While recovering the leader may not add followers, and may not go back to RECOVERING once recovered.
    assert_eq!(
        h.alter_isr("risky", 0, &[1, 0], RECOVERING).await,
        INVALID_REQUEST
    );
    assert_eq!(h.alter_isr("risky", 0, &[1], 0).await, NONE);
    assert_eq!(h.partition("risky", 0).leader_recovery_state, 0);
    assert_eq!(
        h.alter_isr("risky", 0, &[1], RECOVERING).await,
        INVALID_REQUEST
    );

    // The cluster default turned on: the tick elects the offline partition of the other topic.
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("unclean.leader.election.enable"))
                .with_config_operation(0)
                .with_value(Some(s("true")))]),
    ]);
    let resp = h.controller.incremental_alter_configs(req).await;
    assert_eq!(
        resp.responses[0].error_code, NONE,
        "{:?}",
        resp.responses[0].error_message
    );
    h.controller.tick(h.now).await.unwrap();
    let safe = h.partition("safe", 0);
    assert_eq!((safe.leader, safe.leader_recovery_state), (1, RECOVERING));
}

#[tokio::test]
async fn an_unclean_restart_leaves_the_elr_a_clean_one_does_not() {
    let mut h = Harness::with_brokers(3, &[]).await;
    let r = create_with(
        &h,
        "t",
        &[&[0, 1, 2], &[0, 1, 2]],
        &[("min.insync.replicas", "3")],
    )
    .await;
    assert_eq!(r.error_code, NONE);
    h.silence(1).await;
    for i in 0..2 {
        assert_eq!(h.partition("t", i).elr, vec![1]);
    }
    // A clean restart (it shows the epoch it shut down with) keeps it eligible...
    let last = h.epochs[1];
    h.restart(1, 555, last).await;
    assert_eq!(h.partition("t", 0).elr, vec![1]);
    // ...an unclean one (kill -9: no proof) does not, nor is it back in the ISR at its new epoch (KIP-903).
    h.silence(1).await;
    h.restart(1, 556, -1).await;
    let p = h.partition("t", 0);
    assert!(p.elr.is_empty(), "{p:?}");
    assert_eq!(p.isr, vec![0, 2]);
    // AlterPartition at the broker's old epoch is refused; at the new one it rejoins.
    let stale = h.epochs[1];
    h.epochs[1] = stale - 1;
    assert_eq!(h.alter_isr("t", 0, &[0, 2, 1], 0).await, INELIGIBLE_REPLICA);
    h.epochs[1] = stale;
    assert_eq!(h.alter_isr("t", 0, &[0, 2, 1], 0).await, NONE);
}

#[tokio::test]
async fn a_single_replica_partition_recovers_on_its_last_leader_after_an_unclean_restart() {
    let mut h = Harness::with_brokers(1, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0]]).await.error_code, NONE);
    // kill -9 and restart: a new incarnation without a clean-shutdown epoch.
    h.silence(0).await;
    let p = h.partition("t", 0);
    assert_eq!(
        (p.elr.clone(), p.last_known_elr.clone()),
        (vec![0], vec![0])
    );
    h.restart(0, 900, -1).await;
    let p = h.partition("t", 0);
    assert_eq!(p.leader, 0, "balanced recovery on the last known leader");
    assert_eq!(p.isr, vec![0]);
    assert_eq!(p.leader_recovery_state, RECOVERING);
    assert!(p.elr.is_empty() && p.last_known_elr.is_empty());
}

#[tokio::test]
async fn elect_leaders_preferred_moves_leadership_back_and_answers_kafkas_errors() {
    let mut h = Harness::with_brokers(3, &[]).await;
    assert_eq!(
        h.create_assigned("t", &[&[0, 1, 2], &[1, 2, 0], &[2, 0, 1]])
            .await
            .error_code,
        NONE
    );
    let last = h.epochs[0];
    h.silence(0).await;
    assert_eq!(h.partition("t", 0).leader, 1);
    // Preferred replica 0 is fenced: not available.
    let resp = h
        .controller
        .elect_leaders(elect_request(0, "t", &[0, 1]))
        .await;
    assert_eq!(
        codes(&resp),
        vec![
            (0, PREFERRED_LEADER_NOT_AVAILABLE),
            (1, ELECTION_NOT_NEEDED)
        ]
    );
    // Back (clean restart), but not yet in the ISR: still not available.
    h.restart(0, 777, last).await;
    assert!(!h.partition("t", 0).isr.contains(&0));
    let resp = h
        .controller
        .elect_leaders(elect_request(0, "t", &[0]))
        .await;
    assert_eq!(codes(&resp), vec![(0, PREFERRED_LEADER_NOT_AVAILABLE)]);
    // Caught up (the leader expands the ISR): the preferred election moves leadership back.
    assert_eq!(h.alter_isr("t", 0, &[1, 2, 0], 0).await, NONE);
    let before = h.partition("t", 0);
    let resp = h
        .controller
        .elect_leaders(elect_request(0, "t", &[0]))
        .await;
    assert_eq!(codes(&resp), vec![(0, NONE)]);
    let after = h.partition("t", 0);
    assert_eq!(after.leader, 0);
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    // Every partition (null list): those already led by their preferred replica are left out.
    let all = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_topic_partitions(None);
    let resp = h.controller.elect_leaders(all).await;
    assert_eq!(codes(&resp), Vec::<(i32, i16)>::new());
    // Unknown partition, unknown election type.
    let resp = h
        .controller
        .elect_leaders(elect_request(0, "t", &[9]))
        .await;
    assert_eq!(codes(&resp), vec![(9, UNKNOWN_TOPIC_OR_PARTITION)]);
    let resp = h
        .controller
        .elect_leaders(elect_request(5, "t", &[0]))
        .await;
    assert_eq!(resp.error_code, INVALID_REQUEST);
}

#[tokio::test]
async fn elect_leaders_unclean_elects_a_live_replica_only_when_the_partition_is_offline() {
    let mut h = Harness::with_brokers(2, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1]]).await.error_code, NONE);
    let resp = h
        .controller
        .elect_leaders(elect_request(1, "t", &[0]))
        .await;
    assert_eq!(
        codes(&resp),
        vec![(0, ELECTION_NOT_NEEDED)],
        "it has a leader"
    );
    assert_eq!(h.alter_isr("t", 0, &[0], 0).await, NONE);
    h.silence(0).await;
    h.silence(1).await;
    let resp = h
        .controller
        .elect_leaders(elect_request(1, "t", &[0]))
        .await;
    assert_eq!(
        codes(&resp),
        vec![(0, ELIGIBLE_LEADERS_NOT_AVAILABLE)],
        "nobody is live"
    );
    assert!(!h.beat(1).await.is_fenced);
    assert_eq!(
        h.partition("t", 0).leader,
        NO_LEADER,
        "not in sync, not eligible"
    );
    let resp = h
        .controller
        .elect_leaders(elect_request(1, "t", &[0]))
        .await;
    assert_eq!(codes(&resp), vec![(0, NONE)]);
    let p = h.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone(), p.leader_recovery_state),
        (1, vec![1], RECOVERING)
    );
}

#[tokio::test]
async fn elect_leaders_speaks_kafka_bytes_at_every_version() {
    let h = Harness::with_brokers(2, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1]]).await.error_code, NONE);
    for version in 0..=2 {
        let mut body = BytesMut::new();
        elect_request(0, "t", &[0])
            .encode(&mut body, version)
            .unwrap();
        let out = h
            .controller
            .handle(43, version, body.freeze(), h.now)
            .await
            .unwrap();
        let resp = ElectLeadersResponse::decode(&mut out.clone(), version).unwrap();
        assert_eq!(codes(&resp), vec![(0, ELECTION_NOT_NEEDED)], "v{version}");
    }
    assert!(supported_apis().contains(&(43, 0, 2)));
}

#[tokio::test]
async fn the_tick_rebalances_leaders_to_preferred_replicas_when_due() {
    let mut h = Harness::with_brokers(3, &[]).await;
    assert_eq!(
        h.create_assigned("t", &[&[0, 1, 2], &[1, 2, 0], &[2, 0, 1]])
            .await
            .error_code,
        NONE
    );
    let last = h.epochs[0];
    h.silence(0).await;
    h.restart(0, 321, last).await;
    assert_eq!(h.alter_isr("t", 0, &[1, 2, 0], 0).await, NONE);
    assert_eq!(h.partition("t", 0).leader, 1);
    // The first tick of the term (in `silence`) scheduled the check 300 s later; time passes with every broker
    // heartbeating and the controller ticking.
    let scheduled = h
        .controller
        .state
        .lock()
        .await
        .next_imbalance_check
        .unwrap();
    while h.now + Duration::from_secs(5) < scheduled {
        h.now += Duration::from_secs(5);
        for b in 0..3 {
            h.beat(b).await;
        }
        h.controller.tick(h.now).await.unwrap();
        assert_eq!(h.partition("t", 0).leader, 1, "not before the interval");
    }
    h.now = scheduled;
    for b in 0..3 {
        h.beat(b).await;
    }
    h.controller.tick(h.now).await.unwrap();
    assert_eq!(
        h.partition("t", 0).leader,
        0,
        "back on its preferred replica"
    );
    for i in 0..3 {
        let p = h.partition("t", i);
        assert_eq!(p.leader, p.replicas[0]);
    }
}

#[tokio::test]
async fn rebalance_respects_the_per_broker_percentage_and_can_be_off() {
    let config = ControllerConfig {
        auto_leader_rebalance_enable: false,
        ..ControllerConfig::default()
    };
    let writer = Arc::new(InMemoryWriter::new(MetadataImage::new(CLUSTER)));
    let c = Controller::new(config, writer.clone());
    let t0 = Instant::now();
    c.tick(t0).await.unwrap();
    c.tick(t0 + Duration::from_secs(1000)).await.unwrap();
    assert!(
        c.state.lock().await.next_imbalance_check.is_none(),
        "never scheduled when off"
    );

    // 1 of 10 partitions preferring broker 0 is led elsewhere: 10% is not above 10%.
    let h = Harness::with_brokers(2, &[]).await;
    let assignment: Vec<&[i32]> = (0..10).map(|_| &[0, 1][..]).collect();
    assert_eq!(h.create_assigned("t", &assignment).await.error_code, NONE);
    let image = h.image();
    let topic = image.topic_by_name("t").unwrap();
    let mut c = PartitionChangeRecord::new(topic.id, 0);
    c.leader = 1;
    h.writer
        .write(vec![MetadataRecord::PartitionChange(c)])
        .await
        .unwrap();
    let image = h.image();
    let policies = election::Policies::new(&image, h.controller.config());
    assert!(rebalance::rebalance_changes(&image, &policies, 10).is_empty());
    assert_eq!(rebalance::rebalance_changes(&image, &policies, 9).len(), 1);
}

fn reassign(
    topic: &str,
    partition: i32,
    replicas: Option<&[i32]>,
) -> AlterPartitionReassignmentsRequest {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    AlterPartitionReassignmentsRequest::default()
        .with_allow_replication_factor_change(true)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    replicas.map(|r| r.iter().map(|b| BrokerId(*b)).collect()),
                )])])
}

fn reassign_code(resp: &AlterPartitionReassignmentsResponse) -> i16 {
    if resp.error_code != NONE {
        return resp.error_code;
    }
    resp.responses[0].partitions[0].error_code
}

#[tokio::test]
async fn a_reassignment_adds_replicas_waits_for_them_to_catch_up_then_removes_the_old_ones() {
    let h = Harness::with_brokers(4, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1]]).await.error_code, NONE);
    let before = h.partition("t", 0);
    // Move [0, 1] to [2, 3]: both old replicas leave, the leader among them.
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("t", 0, Some(&[2, 3])))
        .await;
    assert_eq!(reassign_code(&resp), NONE);
    let moving = h.partition("t", 0);
    assert_eq!(moving.replicas, vec![2, 3, 0, 1]);
    assert_eq!(
        (
            moving.adding_replicas.clone(),
            moving.removing_replicas.clone()
        ),
        (vec![2, 3], vec![0, 1])
    );
    assert_eq!(moving.isr, vec![0, 1], "new replicas are not in sync yet");
    assert_eq!(moving.leader, 0);
    assert_eq!(
        moving.leader_epoch, before.leader_epoch,
        "no replica left yet"
    );

    let list = h
        .controller
        .list_partition_reassignments(
            ListPartitionReassignmentsRequest::default().with_topics(None),
        )
        .await;
    assert_eq!(list.topics.len(), 1);
    let ongoing = &list.topics[0].partitions[0];
    assert_eq!(ongoing.adding_replicas, vec![BrokerId(2), BrokerId(3)]);
    assert_eq!(ongoing.removing_replicas, vec![BrokerId(0), BrokerId(1)]);

    // Broker 2 caught up: in the ISR, not complete yet.
    assert_eq!(h.alter_isr("t", 0, &[0, 1, 2], 0).await, NONE);
    assert_eq!(h.partition("t", 0).adding_replicas, vec![2, 3]);
    // Broker 3 caught up: every target replica is in sync, the reassignment completes, and since the leader left
    // the leadership moves (the leader hears NEW_LEADER_ELECTED).
    assert_eq!(
        h.alter_isr("t", 0, &[0, 1, 2, 3], 0).await,
        NEW_LEADER_ELECTED
    );
    let done = h.partition("t", 0);
    assert_eq!(done.replicas, vec![2, 3]);
    assert_eq!(done.isr, vec![2, 3]);
    assert!(done.adding_replicas.is_empty() && done.removing_replicas.is_empty());
    assert_eq!(done.leader, 2);
    assert!(done.leader_epoch > before.leader_epoch);
    let list = h
        .controller
        .list_partition_reassignments(
            ListPartitionReassignmentsRequest::default().with_topics(None),
        )
        .await;
    assert!(list.topics.is_empty());
}

#[tokio::test]
async fn reassignments_are_validated_cancelled_and_shrinks_complete_at_once() {
    let h = Harness::with_brokers(3, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1, 2]]).await.error_code, NONE);
    for (target, code) in [
        (&[][..], INVALID_REPLICA_ASSIGNMENT),
        (&[0, 0][..], INVALID_REPLICA_ASSIGNMENT),
        (&[0, 9][..], INVALID_REPLICA_ASSIGNMENT),
    ] {
        let resp = h
            .controller
            .alter_partition_reassignments(reassign("t", 0, Some(target)))
            .await;
        assert_eq!(reassign_code(&resp), code, "{target:?}");
    }
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("nope", 0, Some(&[0])))
        .await;
    assert_eq!(reassign_code(&resp), UNKNOWN_TOPIC_OR_PARTITION);
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("t", 0, None))
        .await;
    assert_eq!(reassign_code(&resp), NO_REASSIGNMENT_IN_PROGRESS);
    let strict = reassign("t", 0, Some(&[0, 1])).with_allow_replication_factor_change(false);
    assert_eq!(
        reassign_code(&h.controller.alter_partition_reassignments(strict).await),
        INVALID_REPLICATION_FACTOR
    );

    // Dropping a replica that is in sync needs no catching up: complete at once, epochs bumped.
    let before = h.partition("t", 0);
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("t", 0, Some(&[0, 1])))
        .await;
    assert_eq!(reassign_code(&resp), NONE);
    let p = h.partition("t", 0);
    assert_eq!(
        (p.replicas.clone(), p.isr.clone()),
        (vec![0, 1], vec![0, 1])
    );
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert_eq!(
        p.leader_epoch,
        before.leader_epoch + 1,
        "a replica left: the leader epoch moves"
    );

    // Add broker 2 back, then cancel before it caught up: the original assignment returns.
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("t", 0, Some(&[0, 1, 2])))
        .await;
    assert_eq!(reassign_code(&resp), NONE);
    assert_eq!(h.partition("t", 0).adding_replicas, vec![2]);
    let resp = h
        .controller
        .alter_partition_reassignments(reassign("t", 0, None))
        .await;
    assert_eq!(reassign_code(&resp), NONE);
    let p = h.partition("t", 0);
    assert_eq!(
        (p.replicas.clone(), p.isr.clone()),
        (vec![0, 1], vec![0, 1])
    );
    assert!(p.adding_replicas.is_empty());
}

#[tokio::test]
async fn reassignment_apis_speak_kafka_bytes() {
    let h = Harness::with_brokers(2, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0]]).await.error_code, NONE);
    for version in 0..=1 {
        let mut body = BytesMut::new();
        reassign("t", 0, Some(&[0]))
            .encode(&mut body, version)
            .unwrap();
        let out = h
            .controller
            .handle(45, version, body.freeze(), h.now)
            .await
            .unwrap();
        let resp = AlterPartitionReassignmentsResponse::decode(&mut out.clone(), version).unwrap();
        assert_eq!(reassign_code(&resp), NONE, "v{version}: a no-op move");
    }
    let mut body = BytesMut::new();
    ListPartitionReassignmentsRequest::default()
        .with_topics(None)
        .encode(&mut body, 0)
        .unwrap();
    let out = h
        .controller
        .handle(46, 0, body.freeze(), h.now)
        .await
        .unwrap();
    let resp = ListPartitionReassignmentsResponse::decode(&mut out.clone(), 0).unwrap();
    assert!(resp.topics.is_empty());
    assert!(supported_apis().contains(&(45, 0, 1)) && supported_apis().contains(&(46, 0, 0)));
}
