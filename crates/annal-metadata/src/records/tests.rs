use proptest::prelude::*;

use super::*;

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

fn ids() -> impl Strategy<Value = Vec<i32>> {
    proptest::collection::vec(any::<i32>(), 0..5)
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._\\-é]{0,12}"
}

fn register_broker() -> impl Strategy<Value = MetadataRecord> {
    (
        any::<i32>(),
        any::<bool>(),
        uuid(),
        any::<i64>(),
        proptest::collection::vec((text(), text(), any::<u16>(), any::<i16>()), 0..3),
        proptest::collection::vec((text(), any::<i16>(), any::<i16>()), 0..3),
        proptest::option::of(text()),
        (any::<bool>(), any::<bool>()),
        proptest::collection::vec(uuid(), 0..3),
    )
        .prop_map(
            |(id, zk, inc, epoch, eps, feats, rack, (fenced, ics), dirs)| {
                MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                    broker_id: id,
                    is_migrating_zk_broker: zk,
                    incarnation_id: inc,
                    broker_epoch: epoch,
                    end_points: eps
                        .into_iter()
                        .map(|(name, host, port, security_protocol)| BrokerEndpoint {
                            name,
                            host,
                            port,
                            security_protocol,
                        })
                        .collect(),
                    features: feats
                        .into_iter()
                        .map(|(name, min, max)| BrokerFeature {
                            name,
                            min_supported_version: min,
                            max_supported_version: max,
                        })
                        .collect(),
                    rack,
                    fenced,
                    in_controlled_shutdown: ics,
                    log_dirs: dirs,
                })
            },
        )
}

fn partition() -> impl Strategy<Value = MetadataRecord> {
    (
        (any::<i32>(), uuid(), ids(), ids(), ids(), ids()),
        (any::<i32>(), any::<i8>(), any::<i32>(), any::<i32>()),
        proptest::collection::vec(uuid(), 0..3),
        proptest::option::of(ids()),
        proptest::option::of(ids()),
    )
        .prop_map(|((p, t, r, i, rm, ad), (l, lrs, le, pe), dirs, elr, lke)| {
            MetadataRecord::Partition(PartitionRecord {
                partition_id: p,
                topic_id: t,
                replicas: r,
                isr: i,
                removing_replicas: rm,
                adding_replicas: ad,
                leader: l,
                leader_recovery_state: lrs,
                leader_epoch: le,
                partition_epoch: pe,
                directories: dirs,
                eligible_leader_replicas: elr,
                last_known_elr: lke,
            })
        })
}

fn partition_change() -> impl Strategy<Value = MetadataRecord> {
    (
        (
            any::<i32>(),
            uuid(),
            proptest::option::of(ids()),
            any::<i32>(),
        ),
        (
            proptest::option::of(ids()),
            proptest::option::of(ids()),
            proptest::option::of(ids()),
            any::<i8>(),
        ),
        proptest::option::of(proptest::collection::vec(uuid(), 0..3)),
        proptest::option::of(ids()),
        proptest::option::of(ids()),
    )
        .prop_map(|((p, t, isr, leader), (r, rm, ad, lrs), dirs, elr, lke)| {
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: p,
                topic_id: t,
                isr,
                leader,
                replicas: r,
                removing_replicas: rm,
                adding_replicas: ad,
                leader_recovery_state: lrs,
                directories: dirs,
                eligible_leader_replicas: elr,
                last_known_elr: lke,
            })
        })
}

fn any_record() -> impl Strategy<Value = MetadataRecord> {
    prop_oneof![
        register_broker(),
        (any::<i32>(), any::<i64>()).prop_map(|(broker_id, broker_epoch)| {
            MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                broker_id,
                broker_epoch,
            })
        }),
        (text(), uuid())
            .prop_map(|(name, topic_id)| MetadataRecord::Topic(TopicRecord { name, topic_id })),
        partition(),
        (any::<i8>(), text(), text(), proptest::option::of(text())).prop_map(
            |(resource_type, resource_name, name, value)| {
                MetadataRecord::Config(ConfigRecord {
                    resource_type,
                    resource_name,
                    name,
                    value,
                })
            }
        ),
        partition_change(),
        (any::<i32>(), any::<i64>())
            .prop_map(|(id, epoch)| MetadataRecord::FenceBroker(FenceBrokerRecord { id, epoch })),
        (any::<i32>(), any::<i64>()).prop_map(|(id, epoch)| MetadataRecord::UnfenceBroker(
            UnfenceBrokerRecord { id, epoch }
        )),
        uuid().prop_map(|topic_id| MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id })),
        (text(), any::<i16>()).prop_map(|(name, feature_level)| {
            MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name,
                feature_level,
            })
        }),
        (any::<i32>(), any::<i64>(), any::<i64>()).prop_map(|(b, e, n)| {
            MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: b,
                broker_epoch: e,
                next_producer_id: n,
            })
        }),
        (
            any::<i32>(),
            any::<i64>(),
            any::<i8>(),
            any::<i8>(),
            proptest::collection::vec(uuid(), 0..3)
        )
            .prop_map(|(b, e, f, c, d)| {
                MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                    broker_id: b,
                    broker_epoch: e,
                    fenced: f,
                    in_controlled_shutdown: c,
                    log_dirs: d,
                })
            }),
        (
            text(),
            any::<i8>(),
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(any::<u8>(), 0..70),
            proptest::collection::vec(any::<u8>(), 0..70),
            any::<i32>()
        )
            .prop_map(
                |(name, mechanism, salt, stored_key, server_key, iterations)| {
                    MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                        name,
                        mechanism,
                        salt,
                        stored_key,
                        server_key,
                        iterations,
                    })
                }
            ),
        (text(), any::<i8>()).prop_map(|(name, mechanism)| {
            MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                name,
                mechanism,
            })
        }),
        (
            uuid(),
            any::<i8>(),
            text(),
            any::<i8>(),
            text(),
            text(),
            any::<i8>(),
            any::<i8>()
        )
            .prop_map(
                |(
                    id,
                    resource_type,
                    resource_name,
                    pattern_type,
                    principal,
                    host,
                    operation,
                    permission_type,
                )| {
                    MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
                        id,
                        resource_type,
                        resource_name,
                        pattern_type,
                        principal,
                        host,
                        operation,
                        permission_type,
                    })
                }
            ),
        uuid().prop_map(|id| MetadataRecord::RemoveAccessControlEntry(
            RemoveAccessControlEntryRecord { id }
        )),
        (
            proptest::collection::vec((text(), proptest::option::of(text())), 0..3),
            text(),
            any::<f64>(),
            any::<bool>()
        )
            .prop_map(|(entity, key, value, remove)| {
                MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: entity
                        .into_iter()
                        .map(|(entity_type, entity_name)| QuotaEntityPart {
                            entity_type,
                            entity_name,
                        })
                        .collect(),
                    key,
                    value,
                    remove,
                })
            }),
    ]
}

/// A ClientQuotaRecord's bytes, laid out by hand from Kafka's ClientQuotaRecord.json (api key 14, v0, flexible):
/// entity array (type, nullable name, tags), key, float64 value (big-endian IEEE 754), remove, tags.
#[test]
fn client_quota_record_layout() {
    let r = MetadataRecord::ClientQuota(ClientQuotaRecord {
        entity: vec![
            QuotaEntityPart {
                entity_type: "user".into(),
                entity_name: Some("al".into()),
            },
            QuotaEntityPart {
                entity_type: "client-id".into(),
                entity_name: None,
            },
        ],
        key: "k".into(),
        value: 1024.0,
        remove: false,
    });
    let mut want = vec![1, 14, 0, 3, 5, b'u', b's', b'e', b'r', 3, b'a', b'l', 0, 10];
    want.extend_from_slice(b"client-id");
    want.extend_from_slice(&[0, 0, 2, b'k']);
    want.extend_from_slice(&1024.0f64.to_be_bytes());
    want.extend_from_slice(&[0, 0]);
    assert_eq!(r.encode(), want);
    assert_eq!(MetadataRecord::decode(&want), Ok(r));
}

/// An AccessControlEntryRecord's bytes, laid out by hand from Kafka's AccessControlEntryRecord.json (api key 18,
/// v0, flexible): id, resource type, name, pattern type, principal, host, operation, permission, no tags.
#[test]
fn access_control_entry_record_layout() {
    let id = uuid::Uuid::from_u128(1);
    let r = MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
        id,
        resource_type: 2,
        resource_name: "t".into(),
        pattern_type: 3,
        principal: "U:a".into(),
        host: "*".into(),
        operation: 3,
        permission_type: 3,
    });
    let mut want = vec![1, 18, 0];
    want.extend_from_slice(id.as_bytes());
    want.extend_from_slice(&[2, 2, b't', 3, 4, b'U', b':', b'a', 2, b'*', 3, 3, 0]);
    assert_eq!(r.encode(), want);
    let remove = MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id });
    let mut want = vec![1, 19, 0];
    want.extend_from_slice(id.as_bytes());
    want.push(0);
    assert_eq!(remove.encode(), want);
}

/// A UserScramCredentialRecord's bytes, laid out by hand from Kafka's UserScramCredentialRecord.json (v0,
/// flexible): the debug output never shows keys.
#[test]
fn scram_credential_record_layout() {
    let r = MetadataRecord::UserScramCredential(UserScramCredentialRecord {
        name: "al".into(),
        mechanism: 2,
        salt: vec![1, 2],
        stored_key: vec![3],
        server_key: vec![4],
        iterations: 4096,
    });
    assert_eq!(
        r.encode(),
        vec![1, 11, 0, 3, b'a', b'l', 2, 3, 1, 2, 2, 3, 2, 4, 0, 0, 16, 0, 0]
    );
    assert!(!format!("{r:?}").contains("stored_key"));
}

proptest! {
    #[test]
    fn every_record_round_trips(record in any_record()) {
        let bytes = record.encode();
        prop_assert_eq!(MetadataRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn every_strict_prefix_is_an_error(record in any_record()) {
        let bytes = record.encode();
        for len in 0..bytes.len() {
            prop_assert!(MetadataRecord::decode(&bytes[..len]).is_err(), "prefix of {} bytes decoded", len);
        }
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = MetadataRecord::decode(&bytes);
    }

    #[test]
    fn framed_garbage_never_panics(api_key in 0u8..20, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        // A valid frame header in front of random bytes reaches every record decoder.
        let mut bytes = vec![1, api_key, 0];
        bytes.extend_from_slice(&body);
        let _ = MetadataRecord::decode(&bytes);
        bytes[2] = 2;
        let _ = MetadataRecord::decode(&bytes);
    }
}

#[test]
fn trailing_bytes_are_rejected() {
    let mut bytes = MetadataRecord::RemoveTopic(RemoveTopicRecord {
        topic_id: Uuid::nil(),
    })
    .encode();
    bytes.push(0);
    assert_eq!(
        MetadataRecord::decode(&bytes),
        Err(RecordError::TrailingBytes {
            record: "RemoveTopicRecord",
            count: 1
        })
    );
}

#[test]
fn frame_version_type_and_version_are_checked() {
    assert_eq!(
        MetadataRecord::decode(&[0, 2, 0]),
        Err(RecordError::UnknownFrameVersion(0))
    );
    assert_eq!(
        MetadataRecord::decode(&[1, 99, 0]),
        Err(RecordError::UnknownRecordType(99))
    );
    assert!(matches!(
        MetadataRecord::decode(&[1, 2, 1]),
        Err(RecordError::UnsupportedVersion {
            record: "TopicRecord",
            version: 1,
            ..
        })
    ));
    // A varint longer than 5 bytes (or overflowing 32 bits) is not a varint.
    assert!(matches!(
        MetadataRecord::decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Err(RecordError::Malformed(_))
    ));
}

#[test]
fn a_huge_declared_count_is_refused_before_allocating() {
    // PartitionRecord v0 whose Replicas array claims 2^31 elements in a few bytes.
    let mut bytes = vec![1, 3, 0];
    bytes.extend_from_slice(&0i32.to_be_bytes());
    bytes.extend_from_slice(&[0; 16]);
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
    assert!(matches!(
        MetadataRecord::decode(&bytes),
        Err(RecordError::Truncated {
            field: "Replicas",
            ..
        })
    ));
    // And a string claiming 2^32-2 bytes.
    let mut bytes = vec![1, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
    bytes.extend_from_slice(b"abc");
    assert!(matches!(
        MetadataRecord::decode(&bytes),
        Err(RecordError::Truncated { field: "Name", .. })
    ));
}

#[test]
fn unknown_tagged_fields_are_skipped() {
    let topic = TopicRecord {
        name: "t".into(),
        topic_id: Uuid::from_u128(7),
    };
    let mut bytes = MetadataRecord::Topic(topic.clone()).encode();
    // Replace the empty tag section with one unknown tag (99) of 2 bytes.
    bytes.pop();
    bytes.extend_from_slice(&[1, 99, 2, 0xab, 0xcd]);
    assert_eq!(
        MetadataRecord::decode(&bytes),
        Ok(MetadataRecord::Topic(topic))
    );
}

/// Bytes printed by Apache Kafka 4.x's own `MetadataRecordSerde` (see docs/metadata-log.md for the jshell snippet
/// that produced them): the encoding is Kafka's, byte for byte.
mod kafka_bytes {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
            .collect()
    }

    fn check(kafka_hex: &str, record: MetadataRecord) {
        let bytes = hex(kafka_hex);
        assert_eq!(MetadataRecord::decode(&bytes), Ok(record.clone()));
        assert_eq!(
            record.encode(),
            bytes,
            "Annal's encoding differs from Kafka's"
        );
    }

    include!("kafka_bytes.rs");
}

#[test]
fn batches_round_trip_and_one_bad_value_fails_the_batch() {
    let records = vec![
        MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: Uuid::from_u128(1),
        }),
        MetadataRecord::FenceBroker(FenceBrokerRecord { id: 1, epoch: 2 }),
    ];
    let mut values = encode_batch(&records);
    assert_eq!(decode_batch(&values), Ok(records));
    values.push(vec![1]);
    assert!(decode_batch(&values).is_err());
}
