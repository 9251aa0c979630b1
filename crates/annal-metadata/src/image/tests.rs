use super::*;
use crate::records::*;

fn register(id: i32, epoch: i64) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        is_migrating_zk_broker: false,
        incarnation_id: Uuid::from_u128(id as u128),
        broker_epoch: epoch,
        end_points: vec![],
        features: vec![],
        rack: None,
        fenced: true,
        in_controlled_shutdown: false,
        log_dirs: vec![],
    })
}

fn with_topic() -> (MetadataImage, Uuid) {
    let mut image = MetadataImage::new("c");
    let id = Uuid::from_u128(9);
    image.apply(1, &register(1, 1));
    image.apply(1, &register(2, 2));
    image.apply(
        2,
        &MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: id,
        }),
    );
    image.apply(
        2,
        &MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: id,
            replicas: vec![1, 2],
            isr: vec![1, 2],
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
    (image, id)
}

#[test]
fn a_leader_change_bumps_both_epochs_and_an_isr_change_only_the_partition_epoch() {
    let (mut image, id) = with_topic();
    let mut change = PartitionChangeRecord::new(id, 0);
    change.isr = Some(vec![1]);
    image.apply(3, &MetadataRecord::PartitionChange(change));
    let p = image.partition(&id, 0).unwrap();
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 0, 1));
    let mut change = PartitionChangeRecord::new(id, 0);
    change.leader = NO_LEADER;
    image.apply(4, &MetadataRecord::PartitionChange(change));
    let p = image.partition(&id, 0).unwrap();
    assert_eq!(
        (p.leader, p.leader_epoch, p.partition_epoch),
        (NO_LEADER, 1, 2)
    );
}

#[test]
fn records_that_break_invariants_are_refused_and_change_nothing() {
    let (mut image, id) = with_topic();
    let before = image.clone();
    let mut change = PartitionChangeRecord::new(id, 0);
    change.isr = Some(vec![2]); // leader 1 would no longer be in the ISR
    assert!(image
        .try_apply(3, &MetadataRecord::PartitionChange(change))
        .is_err());
    let mut change = PartitionChangeRecord::new(id, 0);
    change.isr = Some(vec![]);
    assert!(image
        .try_apply(3, &MetadataRecord::PartitionChange(change))
        .is_err());
    assert!(
        image.try_apply(3, &register(1, 1)).is_err(),
        "a broker epoch may not repeat"
    );
    assert!(
        image
            .try_apply(
                1,
                &MetadataRecord::FenceBroker(FenceBrokerRecord { id: 1, epoch: 1 })
            )
            .is_err(),
        "offsets go forward"
    );
    assert!(image
        .try_apply(
            3,
            &MetadataRecord::FenceBroker(FenceBrokerRecord { id: 1, epoch: 7 })
        )
        .is_err());
    assert_eq!(image, before);
}

#[test]
fn removing_a_topic_removes_its_configs_and_name() {
    let (mut image, id) = with_topic();
    image.apply(
        3,
        &MetadataRecord::Config(ConfigRecord {
            resource_type: ConfigResourceType::Topic.id(),
            resource_name: "t".into(),
            name: "retention.ms".into(),
            value: Some("5".into()),
        }),
    );
    assert_eq!(image.configs.len(), 1);
    image.apply(
        4,
        &MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id: id }),
    );
    assert!(image.topic_by_name("t").is_none());
    assert!(image.configs.is_empty());
}

#[test]
fn snapshot_round_trips_and_garbage_is_an_error() {
    let (image, _) = with_topic();
    let bytes = image.encode_snapshot();
    assert_eq!(MetadataImage::decode_snapshot(&bytes), Ok(image));
    for len in 0..bytes.len() {
        assert!(MetadataImage::decode_snapshot(&bytes[..len]).is_err());
    }
    let mut flipped = bytes.clone();
    for i in 0..flipped.len() {
        flipped[i] ^= 0xff;
        let _ = MetadataImage::decode_snapshot(&flipped);
        flipped[i] ^= 0xff;
    }
}

#[test]
fn broker_epochs_only_grow() {
    let (image, _) = with_topic();
    assert!(image.next_broker_epoch() > 2);
    assert_eq!(image.partitions_led_by(1).len(), 1);
    assert_eq!(image.partitions_hosted_on(2).len(), 1);
    assert_eq!(
        image.live_brokers().count(),
        0,
        "registered brokers start fenced"
    );
}

#[test]
fn scram_credentials_apply_remove_and_survive_snapshots() {
    let mut image = MetadataImage::new("c");
    let cred = |mechanism| {
        MetadataRecord::UserScramCredential(UserScramCredentialRecord {
            name: "alice".into(),
            mechanism,
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        })
    };
    image.apply(1, &cred(1));
    image.apply(2, &cred(2));
    assert_eq!(
        image.scram_credential("alice", 2).map(|c| c.iterations),
        Some(4096)
    );
    let snap = MetadataImage::decode_snapshot(&image.encode_snapshot()).unwrap();
    assert_eq!(snap, image);
    let remove = MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
        name: "alice".into(),
        mechanism: 1,
    });
    image.apply(3, &remove);
    assert!(image.scram_credential("alice", 1).is_none());
    assert!(image.scram_credential("alice", 2).is_some());
    // Removing what is not there, or an unknown mechanism, does not fit the image.
    assert!(image.try_apply(4, &remove).is_err());
    assert!(image.try_apply(4, &cred(3)).is_err());
}

#[test]
fn acls_apply_remove_and_survive_snapshots() {
    let mut image = MetadataImage::new("c");
    let acl = |id: u128, name: &str| AccessControlEntryRecord {
        id: Uuid::from_u128(id),
        resource_type: 2,
        resource_name: name.into(),
        pattern_type: 4,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 2,
        permission_type: 3,
    };
    image.apply(1, &MetadataRecord::AccessControlEntry(acl(1, "orders-")));
    image.apply(2, &MetadataRecord::AccessControlEntry(acl(2, "payments")));
    assert_eq!(image.acls.len(), 2);
    assert!(image
        .acl_like(&AccessControlEntryRecord {
            id: Uuid::nil(),
            ..acl(0, "orders-")
        })
        .is_some());
    let snap = MetadataImage::decode_snapshot(&image.encode_snapshot()).unwrap();
    assert_eq!(snap, image);
    let remove = MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
        id: Uuid::from_u128(1),
    });
    image.apply(3, &remove);
    assert_eq!(image.acls.len(), 1);
    // Removing what is not there, or an ACL with codes no stored ACL may have, does not fit the image.
    assert!(image.try_apply(4, &remove).is_err());
    let mut bad = acl(5, "x");
    bad.pattern_type = 2; // MATCH
    assert!(image
        .try_apply(4, &MetadataRecord::AccessControlEntry(bad))
        .is_err());
}

#[test]
fn client_quotas_set_remove_and_survive_snapshots() {
    let part = |t: &str, n: Option<&str>| QuotaEntityPart {
        entity_type: t.into(),
        entity_name: n.map(str::to_string),
    };
    let set = |entity: Vec<QuotaEntityPart>, key: &str, value: f64| {
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity,
            key: key.into(),
            value,
            remove: false,
        })
    };
    let alice = vec![part("user", Some("alice")), part("client-id", None)];
    let mut image = MetadataImage::new("c");
    image.apply(1, &set(alice.clone(), "producer_byte_rate", 1024.0));
    image.apply(2, &set(alice.clone(), "consumer_byte_rate", 2048.0));
    image.apply(
        3,
        &set(vec![part("user", None)], "request_percentage", 50.0),
    );
    // The parts' order in the record does not matter: it is the same entity.
    let reversed: Vec<_> = alice.iter().rev().cloned().collect();
    image.apply(4, &set(reversed, "producer_byte_rate", 4096.0));
    let key: crate::quota::QuotaEntity = [
        ("user".to_string(), Some("alice".to_string())),
        ("client-id".to_string(), None),
    ]
    .into_iter()
    .collect();
    assert_eq!(image.client_quota(&key, "producer_byte_rate"), Some(4096.0));
    assert_eq!(image.client_quotas.len(), 2);
    let snap = MetadataImage::decode_snapshot(&image.encode_snapshot()).unwrap();
    assert_eq!(snap, image);
    let remove = |key: &str| {
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: alice.clone(),
            key: key.into(),
            value: 0.0,
            remove: true,
        })
    };
    image.apply(5, &remove("producer_byte_rate"));
    assert_eq!(image.client_quota(&key, "producer_byte_rate"), None);
    image.apply(6, &remove("consumer_byte_rate"));
    assert!(
        !image.client_quotas.contains_key(&key),
        "an empty entity is dropped"
    );
    // Records no controller writes do not fit: unknown keys, keys for the wrong entity, bad values.
    assert!(image
        .try_apply(7, &set(alice.clone(), "bogus", 1.0))
        .is_err());
    assert!(image
        .try_apply(7, &set(vec![part("ip", None)], "producer_byte_rate", 1.0))
        .is_err());
    assert!(image
        .try_apply(7, &set(alice.clone(), "producer_byte_rate", -1.0))
        .is_err());
    assert!(image
        .try_apply(
            7,
            &set(
                vec![part("user", None), part("user", Some("a"))],
                "producer_byte_rate",
                1.0
            )
        )
        .is_err());
}
