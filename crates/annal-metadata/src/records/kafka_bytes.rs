// Hex printed by crates/annal-metadata/kafka/MetadataRecordBytes.java against Apache Kafka 4.x jars.

fn topic_id() -> Uuid {
    Uuid::from_u64_pair(0x0123456789abcdef, 0x1122334455667788)
}

#[test]
fn topic_record() {
    check(
        "010200076f72646572730123456789abcdef112233445566778800",
        MetadataRecord::Topic(TopicRecord {
            name: "orders".into(),
            topic_id: topic_id(),
        }),
    );
}

#[test]
fn register_broker_record_v3() {
    check(
        "010003000000020000000000000000010000000000000002000000000000002a020a504c41494e544558540a3132372e302e30\
         2e31238400000002116d657461646174612e76657273696f6e0007001900077261636b2d61010000",
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 2,
            is_migrating_zk_broker: false,
            incarnation_id: Uuid::from_u64_pair(1, 2),
            broker_epoch: 42,
            end_points: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: 0,
            }],
            features: vec![BrokerFeature {
                name: "metadata.version".into(),
                min_supported_version: 7,
                max_supported_version: 25,
            }],
            rack: Some("rack-a".into()),
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: vec![],
        }),
    );
}

#[test]
fn partition_record_v0() {
    check(
        "010300000000030123456789abcdef1122334455667788040000000100000002000000030200000001010100000001000000000000000000",
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 3,
            topic_id: topic_id(),
            replicas: vec![1, 2, 3],
            isr: vec![1],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: 1,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: vec![],
            eligible_leader_replicas: None,
            last_known_elr: None,
        }),
    );
}

#[test]
fn partition_change_record_v0() {
    let mut change = PartitionChangeRecord::new(topic_id(), 3);
    change.isr = Some(vec![2, 3]);
    change.leader = 2;
    check(
        "010500000000030123456789abcdef1122334455667788020009030000000200000003010400000002",
        MetadataRecord::PartitionChange(change),
    );
}

/// KIP-966 fields: the partition leaves its last ISR member in the ELR and remembers its last leader.
#[test]
fn partition_change_record_v2_with_elr() {
    let mut change = PartitionChangeRecord::new(topic_id(), 3);
    change.isr = Some(vec![]);
    change.leader = NO_LEADER;
    change.eligible_leader_replicas = Some(vec![1, 2]);
    change.last_known_elr = Some(vec![1]);
    check(
        "010502000000030123456789abcdef1122334455667788040001010104ffffffff060903000000010000000207050200000001",
        MetadataRecord::PartitionChange(change),
    );
}

/// An unclean election: ISR = the new leader, RECOVERING, ELR and LastKnownElr cleared (empty, not null).
#[test]
fn partition_change_record_v2_unclean_election() {
    let mut change = PartitionChangeRecord::new(topic_id(), 3);
    change.isr = Some(vec![3]);
    change.leader = 3;
    change.leader_recovery_state = 1;
    change.eligible_leader_replicas = Some(vec![]);
    change.last_known_elr = Some(vec![]);
    check(
        "010502000000030123456789abcdef11223344556677880500050200000003010400000003050101060101070101",
        MetadataRecord::PartitionChange(change),
    );
}

#[test]
fn partition_record_v2_with_elr() {
    check(
        "010302000000030123456789abcdef112233445566778804000000010000000200000003010101ffffffff0000000400000007010201\
         05020000000202050200000001",
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 3,
            topic_id: topic_id(),
            replicas: vec![1, 2, 3],
            isr: vec![],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: NO_LEADER,
            leader_recovery_state: 0,
            leader_epoch: 4,
            partition_epoch: 7,
            directories: vec![],
            eligible_leader_replicas: Some(vec![2]),
            last_known_elr: Some(vec![1]),
        }),
    );
}

#[test]
fn broker_registration_change_record_v2() {
    check(
        "01110200000002000000000000002a01000101",
        MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id: 2,
            broker_epoch: 42,
            fenced: 1,
            in_controlled_shutdown: 0,
            log_dirs: vec![],
        }),
    );
}

#[test]
fn config_producer_ids_fence_and_feature_records() {
    check(
        "01040002076f72646572730d726574656e74696f6e2e6d73053130303000",
        MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: "orders".into(),
            name: "retention.ms".into(),
            value: Some("1000".into()),
        }),
    );
    check(
        "010f0000000002000000000000002a00000000000007d000",
        MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: 2,
            broker_epoch: 42,
            next_producer_id: 2000,
        }),
    );
    check(
        "01070000000002000000000000002a00",
        MetadataRecord::FenceBroker(FenceBrokerRecord { id: 2, epoch: 42 }),
    );
    check(
        "010c00116d657461646174612e76657273696f6e001900",
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: "metadata.version".into(),
            feature_level: 25,
        }),
    );
}
