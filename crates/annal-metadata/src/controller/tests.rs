//! Controller tests over the in-memory writer: the same apply path the quorum uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::errors::*;
use super::*;
use crate::records::{PartitionChangeRecord, NO_LEADER};

const CLUSTER: &str = "test-cluster";

struct Harness {
    controller: Controller,
    writer: Arc<InMemoryWriter>,
    now: Instant,
    epochs: Vec<i64>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn registration(id: i32, incarnation: u128, rack: Option<&str>) -> BrokerRegistrationRequest {
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(id))
        .with_cluster_id(s(CLUSTER))
        .with_incarnation_id(Uuid::from_u128(incarnation))
        .with_rack(rack.map(s))
        .with_listeners(vec![Listener::default()
            .with_name(s("PLAINTEXT"))
            .with_host(s("127.0.0.1"))
            .with_port(9092 + id as u16)])
}

fn heartbeat(id: i32, epoch: i64, offset: i64) -> BrokerHeartbeatRequest {
    BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(id))
        .with_broker_epoch(epoch)
        .with_current_metadata_offset(offset)
}

impl Harness {
    fn empty() -> Harness {
        let writer = Arc::new(InMemoryWriter::new(MetadataImage::new(CLUSTER)));
        let config = ControllerConfig {
            seed: 7,
            ..ControllerConfig::default()
        };
        Harness {
            controller: Controller::new(config, writer.clone()),
            writer,
            now: Instant::now(),
            epochs: Vec::new(),
        }
    }

    /// `n` brokers (ids 0..n), registered and unfenced; racks cycle through `racks` if given.
    async fn with_brokers(n: i32, racks: &[&str]) -> Harness {
        let mut h = Harness::empty();
        for id in 0..n {
            let rack = (!racks.is_empty()).then(|| racks[id as usize % racks.len()]);
            let resp = h
                .controller
                .register_broker(registration(id, 100 + id as u128, rack), h.now)
                .await;
            assert_eq!(resp.error_code, NONE);
            h.epochs.push(resp.broker_epoch);
        }
        for id in 0..n {
            let resp = h.beat(id).await;
            assert!(!resp.is_fenced);
        }
        h
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.writer.image()
    }

    fn offset(&self) -> i64 {
        self.image().last_applied_offset.map_or(-1, |o| o as i64)
    }

    /// A caught-up heartbeat from broker `id`.
    async fn beat(&self, id: i32) -> BrokerHeartbeatResponse {
        let req = heartbeat(id, self.epochs[id as usize], self.offset());
        self.controller.broker_heartbeat(req, self.now).await
    }

    async fn create(&self, name: &str, partitions: i32, rf: i16) -> CreatableTopicResult {
        let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)]);
        self.controller.create_topics(req).await.topics.remove(0)
    }

    async fn create_assigned(&self, name: &str, assignment: &[&[i32]]) -> CreatableTopicResult {
        let assignments = assignment
            .iter()
            .enumerate()
            .map(|(i, ids)| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(i as i32)
                    .with_broker_ids(ids.iter().map(|b| BrokerId(*b)).collect())
            })
            .collect();
        let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(assignments)]);
        self.controller.create_topics(req).await.topics.remove(0)
    }

    /// Puts every replica of every partition in the ISR, as AlterPartition will once followers replicate.
    async fn expand_isrs(&self) {
        let image = self.image();
        let mut records = Vec::new();
        for t in image.topics.values() {
            for (i, p) in &t.partitions {
                let mut c = PartitionChangeRecord::new(t.id, *i);
                c.isr = Some(p.replicas.clone());
                if !p.elr.is_empty() {
                    c.eligible_leader_replicas = Some(vec![]);
                }
                records.push(MetadataRecord::PartitionChange(c));
            }
        }
        if !records.is_empty() {
            self.writer.write(records).await.unwrap();
        }
    }

    /// AlterPartition from the partition's current leader, at its current epochs and the members' broker epochs.
    async fn alter_isr(&self, topic: &str, i: i32, isr: &[i32], recovery: i8) -> i16 {
        use kafka_protocol::messages::alter_partition_request::{
            BrokerState, PartitionData, TopicData,
        };
        let p = self.partition(topic, i);
        let topic_id = self.image().topic_by_name(topic).unwrap().id;
        let req = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(p.leader))
            .with_broker_epoch(self.epochs[p.leader as usize])
            .with_topics(vec![TopicData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(i)
                    .with_leader_epoch(p.leader_epoch)
                    .with_partition_epoch(p.partition_epoch)
                    .with_leader_recovery_state(recovery)
                    .with_new_isr_with_epochs(
                        isr.iter()
                            .map(|b| {
                                BrokerState::default()
                                    .with_broker_id(BrokerId(*b))
                                    .with_broker_epoch(self.epochs[*b as usize])
                            })
                            .collect(),
                    )])]);
        let resp = self.controller.alter_partition(req).await;
        resp.topics[0].partitions[0].error_code
    }

    /// Lets broker `id`'s lease lapse while the others heartbeat, then ticks: `id` is fenced. Advances `now`.
    async fn silence(&mut self, id: i32) {
        self.now += Duration::from_secs(5);
        for b in 0..self.epochs.len() as i32 {
            if b != id && self.epochs[b as usize] >= 0 && !self.image().broker(b).unwrap().fenced {
                self.beat(b).await;
            }
        }
        self.now += Duration::from_secs(5);
        for b in 0..self.epochs.len() as i32 {
            if b != id && self.epochs[b as usize] >= 0 && !self.image().broker(b).unwrap().fenced {
                self.beat(b).await;
            }
        }
        self.controller.tick(self.now).await.unwrap();
        assert!(self.image().broker(id).unwrap().fenced);
    }

    /// Broker `id` restarts as a new process (`previous_epoch`: -1 unclean, its last epoch clean), catches up
    /// and is unfenced.
    async fn restart(&mut self, id: i32, incarnation: u128, previous_epoch: i64) {
        let req = registration(id, incarnation, None).with_previous_broker_epoch(previous_epoch);
        let resp = self.controller.register_broker(req, self.now).await;
        assert_eq!(resp.error_code, NONE);
        self.epochs[id as usize] = resp.broker_epoch;
        assert!(!self.beat(id).await.is_fenced);
    }

    fn partition(&self, topic: &str, i: i32) -> crate::image::PartitionState {
        let image = self.image();
        image.topic_by_name(topic).unwrap().partitions[&i].clone()
    }
}

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;

#[tokio::test]
async fn registration_gives_growing_epochs_and_fenced_brokers() {
    let h = Harness::empty();
    let a = h
        .controller
        .register_broker(registration(1, 1, None), h.now)
        .await;
    let b = h
        .controller
        .register_broker(registration(2, 2, None), h.now)
        .await;
    assert_eq!((a.error_code, b.error_code), (NONE, NONE));
    assert!(b.broker_epoch > a.broker_epoch && a.broker_epoch > 0);
    assert!(
        h.image().broker(1).unwrap().fenced,
        "a new registration is fenced"
    );

    let wrong = registration(3, 3, None).with_cluster_id(s("other"));
    assert_eq!(
        h.controller.register_broker(wrong, h.now).await.error_code,
        INCONSISTENT_CLUSTER_ID
    );

    // Another process claiming id 1 while its lease is live is refused...
    let dup = h
        .controller
        .register_broker(registration(1, 99, None), h.now)
        .await;
    assert_eq!(dup.error_code, DUPLICATE_BROKER_REGISTRATION);
    // ...and accepted once the lease lapsed, with a higher epoch.
    let later = h.now + Duration::from_secs(10);
    let again = h
        .controller
        .register_broker(registration(1, 99, None), later)
        .await;
    assert_eq!(again.error_code, NONE);
    assert!(again.broker_epoch > b.broker_epoch);
    // The same process retrying is a re-registration, not a duplicate.
    let retry = h
        .controller
        .register_broker(registration(1, 99, None), later)
        .await;
    assert_eq!(retry.error_code, NONE);
    assert!(retry.broker_epoch > again.broker_epoch);
}

#[tokio::test]
async fn heartbeat_unfences_only_after_catching_up_and_checks_the_epoch() {
    let h = Harness::empty();
    let reg = h
        .controller
        .register_broker(registration(1, 1, None), h.now)
        .await;
    let registered_at = h.offset();
    let behind = h
        .controller
        .broker_heartbeat(heartbeat(1, reg.broker_epoch, registered_at - 1), h.now)
        .await;
    assert_eq!(behind.error_code, NONE);
    assert!(behind.is_fenced && !behind.is_caught_up);
    let caught_up = h
        .controller
        .broker_heartbeat(heartbeat(1, reg.broker_epoch, registered_at), h.now)
        .await;
    assert!(!caught_up.is_fenced && caught_up.is_caught_up);
    assert!(!h.image().broker(1).unwrap().fenced);

    let stale = h
        .controller
        .broker_heartbeat(heartbeat(1, reg.broker_epoch - 1, 0), h.now)
        .await;
    assert_eq!(stale.error_code, STALE_BROKER_EPOCH);
    let unknown = h
        .controller
        .broker_heartbeat(heartbeat(9, 1, 0), h.now)
        .await;
    assert_eq!(unknown.error_code, STALE_BROKER_EPOCH);
}

#[tokio::test]
async fn a_lapsed_lease_fences_the_broker_and_moves_its_leaderships() {
    let h = Harness::with_brokers(3, &[]).await;
    assert_eq!(
        h.create_assigned("t", &[&[0, 1, 2], &[1, 2, 0]])
            .await
            .error_code,
        NONE
    );
    h.expand_isrs().await;
    let before = h.partition("t", 0);
    assert_eq!(before.leader, 0);

    // Brokers 1 and 2 keep heartbeating; broker 0 goes silent past the session timeout.
    let later = h.now + Duration::from_millis(9500);
    for id in [1, 2] {
        let req = heartbeat(id, h.epochs[id as usize], h.offset());
        h.controller
            .broker_heartbeat(req, h.now + Duration::from_millis(5000))
            .await;
    }
    h.controller
        .tick(h.now + Duration::from_millis(8000))
        .await
        .unwrap();
    assert!(
        !h.image().broker(0).unwrap().fenced,
        "not before the timeout"
    );
    h.controller.tick(later).await.unwrap();
    let image = h.image();
    assert!(image.broker(0).unwrap().fenced);
    let after = h.partition("t", 0);
    assert_eq!(after.leader, 1, "first live replica in the ISR");
    assert_eq!(after.isr, vec![1, 2], "the fenced broker left the ISR");
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    assert!(after.partition_epoch > before.partition_epoch);
    let other = h.partition("t", 1);
    assert_eq!(
        (other.leader, other.leader_epoch),
        (1, 0),
        "a partition broker 0 did not lead keeps its leader"
    );
    assert_eq!(other.isr, vec![1, 2]);
    assert!(image.partitions_led_by(0).is_empty());
}

#[tokio::test]
async fn the_last_isr_member_fenced_moves_to_the_elr_and_is_elected_when_it_returns() {
    let mut h = Harness::with_brokers(2, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1]]).await.error_code, NONE);
    assert_eq!(
        h.partition("t", 0).isr,
        vec![0, 1],
        "every replica starts in sync"
    );
    // Broker 1 fell behind: the leader shrinks the ISR.
    assert_eq!(h.alter_isr("t", 0, &[0], 0).await, NONE);
    h.silence(0).await;
    let offline = h.partition("t", 0);
    assert_eq!(offline.leader, NO_LEADER, "no unclean election of broker 1");
    assert!(offline.isr.is_empty());
    assert_eq!(
        offline.elr,
        vec![0],
        "the last in-sync replica stays eligible"
    );
    assert_eq!(
        offline.last_known_elr,
        vec![0],
        "and is remembered as the last leader"
    );
    assert_eq!(offline.leader_epoch, 1);
    assert_eq!(h.image().offline_partitions().len(), 1);

    // Broker 0 comes back (a heartbeat after catching up): unfenced, and elected from the ELR.
    assert!(!h.beat(0).await.is_fenced);
    let online = h.partition("t", 0);
    assert_eq!((online.leader, online.leader_epoch), (0, 2));
    assert_eq!(online.isr, vec![0]);
    assert!(online.elr.is_empty() && online.last_known_elr.is_empty());
    assert_eq!(online.leader_recovery_state, 0, "a clean election");
    assert!(online.partition_epoch > offline.partition_epoch);
}

#[tokio::test]
async fn controlled_shutdown_moves_leaderships_then_says_shut_down() {
    let h = Harness::with_brokers(3, &[]).await;
    assert_eq!(
        h.create_assigned("t", &[&[0, 1, 2], &[0, 2, 1], &[1, 0, 2]])
            .await
            .error_code,
        NONE
    );
    h.expand_isrs().await;
    let req = heartbeat(0, h.epochs[0], h.offset()).with_want_shut_down(true);
    let resp = h.controller.broker_heartbeat(req, h.now).await;
    assert_eq!(resp.error_code, NONE);
    assert!(resp.should_shut_down, "it leads nothing any more");
    let image = h.image();
    assert!(image.broker(0).unwrap().in_controlled_shutdown);
    assert_eq!(h.partition("t", 0).leader, 1);
    assert_eq!(h.partition("t", 1).leader, 2);
    assert_eq!(h.partition("t", 2).leader, 1, "unchanged");
    assert!(image.partitions_led_by(0).is_empty());
    // New topics avoid it.
    let created = h.create("u", 4, 2).await;
    assert_eq!(created.error_code, NONE);
    assert!(h
        .image()
        .partitions_hosted_on(0)
        .iter()
        .all(|p| p.topic != "u"));
}

#[tokio::test]
async fn placement_balances_leaders_and_replicas_and_checks_the_replication_factor() {
    let h = Harness::with_brokers(3, &[]).await;
    let created = h.create("t", 6, 2).await;
    assert_eq!(
        (
            created.error_code,
            created.num_partitions,
            created.replication_factor
        ),
        (NONE, 6, 2)
    );
    let image = h.image();
    for b in 0..3 {
        assert_eq!(image.partitions_led_by(b).len(), 2, "leaders balanced");
        assert_eq!(image.partitions_hosted_on(b).len(), 4, "replicas balanced");
    }
    for i in 0..6 {
        let p = h.partition("t", i);
        assert_eq!(
            p.isr, p.replicas,
            "Kafka's rule: every replica starts in sync"
        );
        assert_eq!(p.leader, p.replicas[0]);
    }

    let too_many = h.create("u", 1, 4).await;
    assert_eq!(too_many.error_code, INVALID_REPLICATION_FACTOR);
    let message = too_many.error_message.unwrap().to_string();
    assert!(message.contains('4') && message.contains('3'), "{message}");

    assert_eq!(h.create("t", 1, 1).await.error_code, TOPIC_ALREADY_EXISTS);
    assert_eq!(
        h.create("bad name", 1, 1).await.error_code,
        INVALID_TOPIC_EXCEPTION
    );
    assert_eq!(h.create("v", 0, 1).await.error_code, INVALID_PARTITIONS);
    let defaults = h.create("w", -1, -1).await;
    assert_eq!(
        (defaults.num_partitions, defaults.replication_factor),
        (1, 1)
    );
}

#[tokio::test]
async fn rack_aware_placement_spreads_each_partition_over_racks() {
    let h = Harness::with_brokers(4, &["a", "b"]).await;
    assert_eq!(h.create("t", 8, 2).await.error_code, NONE);
    let image = h.image();
    for i in 0..8 {
        let p = h.partition("t", i);
        let racks: std::collections::BTreeSet<_> = p
            .replicas
            .iter()
            .map(|r| image.broker(*r).unwrap().rack.clone())
            .collect();
        assert_eq!(
            racks.len(),
            2,
            "partition {i} replicas {:?} share a rack",
            p.replicas
        );
    }
    for b in 0..4 {
        assert_eq!(image.partitions_led_by(b).len(), 2);
    }
}

#[tokio::test]
async fn explicit_assignments_are_honoured_and_checked() {
    let h = Harness::with_brokers(3, &[]).await;
    let ok = h.create_assigned("t", &[&[2, 0], &[1, 2]]).await;
    assert_eq!(
        (ok.error_code, ok.num_partitions, ok.replication_factor),
        (NONE, 2, 2)
    );
    assert_eq!(h.partition("t", 0).replicas, vec![2, 0]);
    assert_eq!(h.partition("t", 0).leader, 2);
    for (name, assignment) in [
        ("unknown", &[&[0, 7][..]][..]),
        ("twice", &[&[1, 1][..]][..]),
        ("uneven", &[&[0, 1][..], &[2][..]][..]),
        ("empty", &[&[][..]][..]),
    ] {
        let r = h.create_assigned(name, assignment).await;
        assert_eq!(
            r.error_code, INVALID_REPLICA_ASSIGNMENT,
            "{name}: {:?}",
            r.error_message
        );
    }
    assert!(h.image().topic_by_name("unknown").is_none());
}

#[tokio::test]
async fn validate_only_writes_nothing() {
    let h = Harness::with_brokers(1, &[]).await;
    let before = h.image();
    let req = CreateTopicsRequest::default()
        .with_validate_only(true)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s("t")))
            .with_num_partitions(3)
            .with_replication_factor(1)]);
    let resp = h.controller.create_topics(req).await;
    assert_eq!(resp.topics[0].error_code, NONE);
    assert_eq!(h.image(), before);
}

#[tokio::test]
async fn producer_id_blocks_never_overlap() {
    let h = Harness::with_brokers(2, &[]).await;
    let mut blocks = Vec::new();
    for i in 0..6 {
        let id = i % 2;
        let req = AllocateProducerIdsRequest::default()
            .with_broker_id(BrokerId(id))
            .with_broker_epoch(h.epochs[id as usize]);
        let resp = h.controller.allocate_producer_ids(req).await;
        assert_eq!(resp.error_code, NONE);
        blocks.push((
            resp.producer_id_start.0,
            resp.producer_id_start.0 + i64::from(resp.producer_id_len),
        ));
    }
    blocks.sort();
    assert!(blocks.windows(2).all(|w| w[0].1 <= w[1].0), "{blocks:?}");
    assert_eq!(blocks[0], (0, 1000));
    let stale = AllocateProducerIdsRequest::default()
        .with_broker_id(BrokerId(0))
        .with_broker_epoch(-5);
    assert_eq!(
        h.controller.allocate_producer_ids(stale).await.error_code,
        STALE_BROKER_EPOCH
    );
}

#[tokio::test]
async fn delete_topics_create_partitions_and_configs() {
    let h = Harness::with_brokers(3, &[]).await;
    assert_eq!(h.create("t", 2, 2).await.error_code, NONE);

    let grow =
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(s("t")))
            .with_count(5)]);
    assert_eq!(
        h.controller.create_partitions(grow).await.results[0].error_code,
        NONE
    );
    assert_eq!(h.image().topic_by_name("t").unwrap().partitions.len(), 5);
    assert_eq!(h.partition("t", 4).replicas.len(), 2);
    let shrink =
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(s("t")))
            .with_count(3)]);
    assert_eq!(
        h.controller.create_partitions(shrink).await.results[0].error_code,
        INVALID_PARTITIONS
    );
    let assigned =
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(s("t")))
            .with_count(6)
            .with_assignments(Some(vec![CreatePartitionsAssignment::default()
                .with_broker_ids(vec![BrokerId(9), BrokerId(0)])]))]);
    assert_eq!(
        h.controller.create_partitions(assigned).await.results[0].error_code,
        INVALID_REPLICA_ASSIGNMENT
    );

    let set = |op: i8, name: &str, value: Option<&str>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s(name))
                    .with_config_operation(op)
                    .with_value(value.map(s))]),
        ])
    };
    let ok = h
        .controller
        .incremental_alter_configs(set(0, "retention.ms", Some("1000")))
        .await;
    assert_eq!(ok.responses[0].error_code, NONE);
    let resource = crate::image::ConfigResource {
        resource_type: crate::records::ConfigResourceType::Topic,
        name: "t".into(),
    };
    assert_eq!(h.image().configs[&resource]["retention.ms"], "1000");
    let bad = h
        .controller
        .incremental_alter_configs(set(0, "retention.ms", Some("soon")))
        .await;
    assert_eq!(bad.responses[0].error_code, INVALID_CONFIG);
    let unknown = h
        .controller
        .incremental_alter_configs(set(0, "no.such.config", Some("1")))
        .await;
    assert_eq!(unknown.responses[0].error_code, INVALID_CONFIG);
    h.controller
        .incremental_alter_configs(set(1, "retention.ms", None))
        .await;
    assert!(!h.image().configs.contains_key(&resource));

    let del = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(s("t")), TopicName(s("nope"))]);
    let resp = h.controller.delete_topics(del).await;
    assert_eq!(resp.responses[0].error_code, NONE);
    assert_eq!(resp.responses[1].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    assert!(h.image().topic_by_name("t").is_none());
}

#[tokio::test]
async fn a_busy_image_survives_a_snapshot() {
    let h = Harness::with_brokers(4, &["r1", "r2"]).await;
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(h.create(name, 3 + i as i32, 2).await.error_code, NONE);
    }
    h.expand_isrs().await;
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("a"))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("cleanup.policy"))
                .with_value(Some(s("compact")))]),
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("log.retention.ms"))
                .with_value(Some(s("5")))]),
    ]);
    h.controller.incremental_alter_configs(req).await;
    let req = AllocateProducerIdsRequest::default()
        .with_broker_id(BrokerId(1))
        .with_broker_epoch(h.epochs[1]);
    h.controller.allocate_producer_ids(req).await;
    h.controller
        .broker_heartbeat(
            heartbeat(3, h.epochs[3], h.offset()).with_want_shut_down(true),
            h.now,
        )
        .await;
    h.controller
        .tick(h.now + Duration::from_secs(60))
        .await
        .unwrap(); // fences everyone
    let image = h.image();
    assert!(image.offline_partitions().len() + image.topics.len() > 3);

    let restored = MetadataImage::decode_snapshot(&image.encode_snapshot()).unwrap();
    assert_eq!(restored, *image);
    // And a replay of the records from an empty image reaches it too.
    let mut replayed = MetadataImage::new(CLUSTER);
    for r in image.to_records() {
        replayed.apply(image.last_applied_offset.unwrap(), &r);
    }
    assert_eq!(replayed, *image);
    assert!(restored.next_broker_epoch() >= image.next_broker_epoch());
}

#[tokio::test]
async fn a_new_controller_grants_fresh_leases() {
    let h = Harness::with_brokers(2, &[]).await;
    let writer: Arc<dyn MetadataWriter> = h.writer.clone();
    let successor = Controller::new(ControllerConfig::default(), writer);
    let later = h.now + Duration::from_secs(30);
    successor.on_become_active(later).await;
    successor
        .tick(later + Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        h.image().live_brokers().count(),
        2,
        "leases start at activation"
    );
    successor
        .tick(later + Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(h.image().live_brokers().count(), 0);
}

#[tokio::test]
async fn handle_speaks_kafka_bytes() {
    let h = Harness::with_brokers(1, &[]).await;
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(s("t")))
        .with_num_partitions(2)
        .with_replication_factor(1)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(s("retention.ms"))
            .with_value(Some(s("60000")))])]);
    let mut body = BytesMut::new();
    req.encode(&mut body, 7).unwrap();
    let out = h
        .controller
        .handle(19, 7, body.freeze(), h.now)
        .await
        .unwrap();
    let resp = CreateTopicsResponse::decode(&mut out.clone(), 7).unwrap();
    assert_eq!(resp.topics[0].error_code, NONE);
    assert_eq!(resp.topics[0].num_partitions, 2);
    assert_eq!(h.image().topic_by_name("t").unwrap().partitions.len(), 2);

    assert_eq!(
        h.controller.handle(0, 9, Bytes::new(), h.now).await,
        Err(HandleError::UnsupportedApi(0))
    );
    assert!(matches!(
        h.controller.handle(19, 99, Bytes::new(), h.now).await,
        Err(HandleError::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        h.controller
            .handle(19, 7, Bytes::from_static(&[0xff, 0xff]), h.now)
            .await,
        Err(HandleError::Decode { .. })
    ));
}

#[tokio::test]
async fn alter_partition_expands_the_isr_under_kafkas_rules() {
    use kafka_protocol::messages::alter_partition_request::{
        BrokerState, PartitionData, TopicData,
    };
    let h = Harness::with_brokers(3, &[]).await;
    assert_eq!(h.create_assigned("t", &[&[0, 1, 2]]).await.error_code, NONE);
    let topic_id = h.image().topic_by_name("t").unwrap().id;
    let p = h.partition("t", 0);
    let ask = |leader: i32, isr: &[i32], leader_epoch: i32, partition_epoch: i32| {
        AlterPartitionRequest::default()
            .with_broker_id(BrokerId(leader))
            .with_broker_epoch(h.epochs[leader as usize])
            .with_topics(vec![TopicData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![PartitionData::default()
                    .with_leader_epoch(leader_epoch)
                    .with_partition_epoch(partition_epoch)
                    .with_new_isr_with_epochs(
                        isr.iter()
                            .map(|b| {
                                BrokerState::default()
                                    .with_broker_id(BrokerId(*b))
                                    .with_broker_epoch(h.epochs[*b as usize])
                            })
                            .collect(),
                    )])])
    };
    let code = |r: &AlterPartitionResponse| r.topics[0].partitions[0].error_code;
    assert_eq!(
        code(
            &h.controller
                .alter_partition(ask(1, &[0, 1], p.leader_epoch, p.partition_epoch))
                .await
        ),
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(
        code(
            &h.controller
                .alter_partition(ask(0, &[0, 1], p.leader_epoch, p.partition_epoch + 1))
                .await
        ),
        INVALID_UPDATE_VERSION
    );
    assert_eq!(
        code(
            &h.controller
                .alter_partition(ask(0, &[1], p.leader_epoch, p.partition_epoch))
                .await
        ),
        INVALID_REQUEST
    );
    assert_eq!(h.alter_isr("t", 0, &[0], 0).await, NONE, "a shrink");
    let p = h.partition("t", 0);
    assert_eq!(p.isr, vec![0]);
    let ok = h
        .controller
        .alter_partition(ask(0, &[0, 1, 2], p.leader_epoch, p.partition_epoch))
        .await;
    assert_eq!(code(&ok), NONE);
    assert_eq!(
        ok.topics[0].partitions[0].partition_epoch,
        p.partition_epoch + 1
    );
    assert_eq!(h.partition("t", 0).isr, vec![0, 1, 2]);
    // A shutting-down broker may not join the ISR.
    h.controller
        .broker_heartbeat(
            heartbeat(2, h.epochs[2], h.offset()).with_want_shut_down(true),
            h.now,
        )
        .await;
    let p = h.partition("t", 0);
    assert_eq!(
        p.isr,
        vec![0, 1],
        "controlled shutdown took broker 2 out of the ISR"
    );
    let refused = h
        .controller
        .alter_partition(ask(0, &[0, 1, 2], p.leader_epoch, p.partition_epoch))
        .await;
    assert_eq!(code(&refused), INELIGIBLE_REPLICA);
}

/// A seeded random walk over registrations, heartbeats (some wanting shutdown), silences, ticks and topic
/// creations: every batch the controller writes must apply (the image checks its invariants on every record),
/// leaders are always live brokers or none, and leader epochs never go backwards.
#[tokio::test]
async fn random_operations_keep_every_invariant() {
    use rand::{Rng, SeedableRng};
    let (mut partitions_seen, mut leader_changes, mut fenced_seen) = (0, 0, 0);
    let (mut elr_seen, mut empty_isr_seen) = (0, 0);
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut h = Harness::empty();
        let brokers = 4;
        h.epochs = vec![-1; brokers];
        let mut incarnations = vec![0u128; brokers];
        let mut silent = vec![false; brokers];
        let mut now = h.now;
        let mut leader_epochs: std::collections::BTreeMap<(Uuid, i32), i32> = Default::default();
        let mut topics = 0;
        for _step in 0..80 {
            now += Duration::from_millis(rng.gen_range(0..3000));
            let id = rng.gen_range(0..brokers);
            match rng.gen_range(0..10) {
                0 => {
                    incarnations[id] += 1;
                    // Half the restarts are clean (they show their last epoch), half like kill -9.
                    let previous = if rng.gen_bool(0.5) { h.epochs[id] } else { -1 };
                    let req = registration(id as i32, incarnations[id] + 1000 * id as u128, None)
                        .with_previous_broker_epoch(previous);
                    let resp = h.controller.register_broker(req, now).await;
                    assert!(
                        resp.error_code == NONE || resp.error_code == DUPLICATE_BROKER_REGISTRATION
                    );
                    if resp.error_code == NONE {
                        h.epochs[id] = resp.broker_epoch;
                        silent[id] = false;
                    }
                }
                1 => silent[id] = !silent[id],
                2 => {
                    let req =
                        heartbeat(id as i32, h.epochs[id], h.offset()).with_want_shut_down(true);
                    let resp = h.controller.broker_heartbeat(req, now).await;
                    assert_ne!(resp.error_code, UNKNOWN_SERVER_ERROR);
                }
                3 | 4 => {
                    topics += 1;
                    let rf = rng.gen_range(1..=3);
                    let min_isr = rng.gen_range(1..=3).to_string();
                    let req =
                        CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                            .with_name(TopicName(s(&format!("t{topics}"))))
                            .with_num_partitions(rng.gen_range(1..5))
                            .with_replication_factor(rf)
                            .with_configs(vec![CreatableTopicConfig::default()
                                .with_name(s("min.insync.replicas"))
                                .with_value(Some(s(&min_isr)))])]);
                    let r = h.controller.create_topics(req).await.topics.remove(0);
                    assert!(
                        [NONE, INVALID_REPLICATION_FACTOR].contains(&r.error_code),
                        "{:?}",
                        r.error_message
                    );
                }
                5 => h.expand_isrs().await,
                6 => {
                    // A leader shrinks an ISR to itself (its followers fell behind).
                    let image = h.image();
                    let led: Vec<(String, i32)> = image
                        .topics
                        .values()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .filter(|(_, p)| p.leader >= 0 && p.leader_recovery_state == 0)
                                .map(|(i, _)| (t.name.clone(), *i))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    if !led.is_empty() {
                        let (t, i) = &led[rng.gen_range(0..led.len())];
                        let leader = h.partition(t, *i).leader;
                        let before = h.partition(t, *i);
                        let broker = h.image().broker(leader).cloned();
                        let code = h.alter_isr(t, *i, &[leader], 0).await;
                        assert_eq!(
                            code,
                            NONE,
                            "seed {seed}: shrink {t}-{i} {before:?} {broker:?} -> {:?}",
                            h.partition(t, *i)
                        );
                    }
                }
                _ => {
                    for (b, is_silent) in silent.iter().enumerate() {
                        if !is_silent && h.epochs[b] >= 0 {
                            let req = heartbeat(b as i32, h.epochs[b], h.offset());
                            let resp = h.controller.broker_heartbeat(req, now).await;
                            assert_ne!(resp.error_code, UNKNOWN_SERVER_ERROR);
                        }
                    }
                    h.controller.tick(now).await.expect("every batch applies");
                }
            }
            let image = h.image();
            for t in image.topics.values() {
                for (i, p) in &t.partitions {
                    if p.leader != NO_LEADER {
                        let leader = image.broker(p.leader).expect("leaders are registered");
                        assert!(
                            !leader.fenced,
                            "seed {seed}: {}-{i} led by fenced broker {}",
                            t.name, p.leader
                        );
                    }
                    let last = leader_epochs
                        .insert((t.id, *i), p.leader_epoch)
                        .unwrap_or(0);
                    assert!(
                        p.leader_epoch >= last,
                        "seed {seed}: leader epoch went backwards"
                    );
                    partitions_seen += 1;
                    leader_changes += usize::from(p.leader_epoch > last);
                    assert!(p.isr.iter().all(|r| p.replicas.contains(r)));
                    assert!(p.elr.iter().all(|r| !p.isr.contains(r)));
                    elr_seen += usize::from(!p.elr.is_empty());
                    empty_isr_seen += usize::from(p.isr.is_empty());
                }
            }
            fenced_seen += image.brokers.values().filter(|b| b.fenced).count();
        }
    }
    // The walk must reach the interesting states, or it proves nothing.
    assert!(
        partitions_seen > 1000
            && leader_changes > 20
            && fenced_seen > 100
            && elr_seen > 50
            && empty_isr_seen > 10,
        "{partitions_seen} {leader_changes} {fenced_seen} {elr_seen} {empty_isr_seen}"
    );
}

#[path = "election_tests.rs"]
mod election_tests;

#[tokio::test]
async fn scram_credentials_follow_kafkas_rules() {
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::AlterUserScramCredentialsRequest;
    let h = Harness::empty();
    let up = |user: &str, mechanism: i8, iterations: i32| {
        ScramCredentialUpsertion::default()
            .with_name(s(user))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt-salt-salt"))
            .with_salted_password(Bytes::from(vec![9u8; 32]))
    };
    let del = |user: &str, mechanism: i8| {
        ScramCredentialDeletion::default()
            .with_name(s(user))
            .with_mechanism(mechanism)
    };
    let codes = |r: kafka_protocol::messages::AlterUserScramCredentialsResponse| {
        r.results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect::<Vec<_>>()
    };
    let resp = h
        .controller
        .alter_user_scram_credentials(AlterUserScramCredentialsRequest::default().with_upsertions(
            vec![
                up("alice", 1, 4096),
                up("bob", 2, 100),
                up("carol", 2, 20000),
                up("dave", 3, 4096),
                up("", 1, 4096),
            ],
        ))
        .await;
    assert_eq!(
        codes(resp),
        vec![
            ("alice".into(), NONE),
            ("bob".into(), UNACCEPTABLE_CREDENTIAL),
            ("carol".into(), UNACCEPTABLE_CREDENTIAL),
            ("dave".into(), UNSUPPORTED_SASL_MECHANISM),
            ("".into(), UNACCEPTABLE_CREDENTIAL),
        ]
    );
    let image = h.image();
    let c = image.scram_credential("alice", 1).expect("written");
    // StoredKey = SHA-256(HMAC(salted, "Client Key")): 32 bytes; never the salted password itself.
    assert_eq!((c.stored_key.len(), c.server_key.len()), (32, 32));
    assert_ne!(c.stored_key, vec![9u8; 32]);
    assert!(image.scram_credential("bob", 2).is_none());

    let resp = h
        .controller
        .alter_user_scram_credentials(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![del("alice", 1), del("nobody", 1)])
                .with_upsertions(vec![up("alice", 1, 8192)]),
        )
        .await;
    assert_eq!(
        codes(resp),
        vec![
            ("alice".into(), DUPLICATE_RESOURCE),
            ("nobody".into(), RESOURCE_NOT_FOUND)
        ]
    );
    let resp = h
        .controller
        .alter_user_scram_credentials(
            AlterUserScramCredentialsRequest::default().with_deletions(vec![del("alice", 1)]),
        )
        .await;
    assert_eq!(codes(resp), vec![("alice".into(), NONE)]);
    assert!(h.image().scram_credential("alice", 1).is_none());
}

#[tokio::test]
async fn acls_follow_kafkas_acl_control_manager() {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest};
    let h = Harness::empty();
    let acl = |name: &str, pattern: i8, op: i8| {
        AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s(name))
            .with_resource_pattern_type(pattern)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(op)
            .with_permission_type(3)
    };
    let resp = h
        .controller
        .create_acls(CreateAclsRequest::default().with_creations(vec![
            acl("orders-", 4, 2),
            acl("orders-", 4, 2), // the same binding twice: one record
            acl("t", 3, 3),
            acl("t", 2, 3),                       // MATCH
            acl("", 3, 3),                        // empty name
            acl("t", 3, 1),                       // ANY operation
            acl("t", 3, 3).with_resource_type(4), // a cluster not named kafka-cluster
            acl("t", 3, 3).with_principal(s("alice")),
        ]))
        .await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![0, 0, 0, 42, 42, 42, 42, 42]);
    let image = h.writer.image();
    assert_eq!(image.acls.len(), 2);
    assert!(image.acls.keys().all(|id| !id.is_nil()));
    // Again: nothing new is written.
    h.controller
        .create_acls(CreateAclsRequest::default().with_creations(vec![acl("t", 3, 3)]))
        .await;
    assert_eq!(h.writer.image().acls.len(), 2);

    let filter = |name: Option<&str>, pattern: i8| {
        DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(name.map(s))
            .with_pattern_type_filter(pattern)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1)
    };
    // MATCH on a literal name finds the prefixed ACL that applies to it and the literal one.
    let resp = h
        .controller
        .delete_acls(DeleteAclsRequest::default().with_filters(vec![
            filter(Some("orders-eu"), 2),
            filter(None, 0), // UNKNOWN pattern
        ]))
        .await;
    assert_eq!(resp.filter_results[0].error_code, 0);
    assert_eq!(resp.filter_results[0].matching_acls.len(), 1);
    assert_eq!(
        resp.filter_results[0].matching_acls[0]
            .resource_name
            .as_str(),
        "orders-"
    );
    assert_eq!(resp.filter_results[1].error_code, 42);
    let image = h.writer.image();
    assert_eq!(image.acls.len(), 1);
    assert_eq!(
        image.acls.values().next().map(|a| a.resource_name.as_str()),
        Some("t")
    );
    // Deleting what matches nothing is fine and writes nothing.
    let resp = h
        .controller
        .delete_acls(DeleteAclsRequest::default().with_filters(vec![filter(Some("zzz"), 3)]))
        .await;
    assert_eq!(resp.filter_results[0].error_code, 0);
    assert!(resp.filter_results[0].matching_acls.is_empty());
}

#[tokio::test]
async fn alter_client_quotas_follows_kafkas_client_quota_control_manager() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let h = Harness::empty();
    let entity = |parts: &[(&str, Option<&str>)]| -> Vec<EntityData> {
        parts
            .iter()
            .map(|(t, n)| {
                EntityData::default()
                    .with_entity_type(s(t))
                    .with_entity_name(n.map(s))
            })
            .collect()
    };
    let set = |k: &str, v: f64| OpData::default().with_key(s(k)).with_value(v);
    let remove = |k: &str| OpData::default().with_key(s(k)).with_remove(true);
    let alter = |entries: Vec<EntryData>, validate_only: bool| {
        AlterClientQuotasRequest::default()
            .with_entries(entries)
            .with_validate_only(validate_only)
    };
    let alice = entity(&[("user", Some("alice")), ("client-id", None)]);
    let good = EntryData::default()
        .with_entity(alice.clone())
        .with_ops(vec![
            set("producer_byte_rate", 1024.0),
            set("request_percentage", 12.5),
        ]);
    let bad_key = EntryData::default()
        .with_entity(entity(&[("ip", Some("10.0.0.1"))]))
        .with_ops(vec![set("producer_byte_rate", 1.0)]);
    let bad_type = EntryData::default()
        .with_entity(entity(&[("group", Some("g"))]))
        .with_ops(vec![set("producer_byte_rate", 1.0)]);
    let fractional = EntryData::default()
        .with_entity(entity(&[("client-id", Some("c"))]))
        .with_ops(vec![set("consumer_byte_rate", 1.5)]);

    // validate_only answers as a real alteration would and writes nothing.
    let before = h.offset();
    let resp = h
        .controller
        .alter_client_quotas(alter(vec![good.clone(), bad_key.clone()], true))
        .await;
    let codes: Vec<i16> = resp.entries.iter().map(|e| e.error_code).collect();
    assert_eq!(codes, vec![NONE, INVALID_REQUEST]);
    assert_eq!(h.offset(), before);

    let resp = h
        .controller
        .alter_client_quotas(alter(
            vec![good.clone(), bad_key, bad_type, fractional],
            false,
        ))
        .await;
    let codes: Vec<i16> = resp.entries.iter().map(|e| e.error_code).collect();
    assert_eq!(
        codes,
        vec![NONE, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST]
    );
    let messages: Vec<String> = resp
        .entries
        .iter()
        .map(|e| {
            e.error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(messages[1], "Invalid configuration key producer_byte_rate");
    assert_eq!(messages[2], "Unhandled client quota entity type: group");
    assert_eq!(
        messages[3],
        "consumer_byte_rate cannot be a fractional value."
    );
    let key: crate::quota::QuotaEntity = [
        ("user".to_string(), Some("alice".to_string())),
        ("client-id".to_string(), None),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        h.image().client_quota(&key, "producer_byte_rate"),
        Some(1024.0)
    );
    assert_eq!(
        h.image().client_quota(&key, "request_percentage"),
        Some(12.5)
    );

    // The same values again write nothing; a duplicate key fails the entity.
    let offset = h.offset();
    let resp = h
        .controller
        .alter_client_quotas(alter(vec![good], false))
        .await;
    assert_eq!(resp.entries[0].error_code, NONE);
    assert_eq!(h.offset(), offset, "unchanged values write no record");
    let dup = EntryData::default()
        .with_entity(alice.clone())
        .with_ops(vec![
            set("producer_byte_rate", 1.0),
            remove("producer_byte_rate"),
        ]);
    let resp = h
        .controller
        .alter_client_quotas(alter(vec![dup], false))
        .await;
    assert_eq!(resp.entries[0].error_code, INVALID_REQUEST);
    assert_eq!(
        h.image().client_quota(&key, "producer_byte_rate"),
        Some(1024.0)
    );

    // Removing both keys removes the entity.
    let gone = EntryData::default().with_entity(alice).with_ops(vec![
        remove("producer_byte_rate"),
        remove("request_percentage"),
    ]);
    let resp = h
        .controller
        .alter_client_quotas(alter(vec![gone], false))
        .await;
    assert_eq!(resp.entries[0].error_code, NONE);
    assert!(h.image().client_quotas.is_empty());
}

#[path = "batch_tests.rs"]
mod batch_tests;
