//! Writes the seed corpora under `fuzz/corpus/<target>/` from real encodings: requests as kafka-protocol (the
//! library Annal's client and broker use) encodes them for every API key and version the broker accepts, batches
//! from the engine's builder and Kafka's encoder for every codec, real log directories written by annal-log,
//! metadata and group records from their encoders, responses for every API. Run `fuzz/gen_corpus.sh` (it
//! replaces the generated `gen-*` seeds; hand-added ones are kept).
// Built with the fuzz targets' instrumentation (gen_corpus.sh) to reuse their build: it then needs libFuzzer's
// coverage callbacks linked in, though it runs no fuzzer.
extern crate libfuzzer_sys;

use std::path::Path;

use annal_broker::group::records as group_records;
use annal_fuzz::{pack_dir, small_log_config};
use annal_log::batch::{self, ProducerFields};
use annal_log::{AppendOptions, Log};
use annal_metadata::records::*;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::Compression;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("gen-{name}")), bytes).unwrap();
}

fn clear(target: &str) {
    let dir = Path::new("corpus").join(target);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("gen-") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
}

/// A request frame without its size prefix, or None if this request cannot be encoded at `version`.
fn frame<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, body: &R) -> Option<Vec<u8>> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(s("fuzz-seed")));
    let mut out = BytesMut::new();
    header.encode(&mut out, R::header_version(version)).ok()?;
    body.encode(&mut out, version).ok()?;
    Some(out.to_vec())
}

fn records(compression: Compression) -> Bytes {
    let rs: Vec<annal_client::OutgoingRecord> = (0..3)
        .map(|i| annal_client::OutgoingRecord {
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!("value {i} value {i} value {i}"))),
            headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
            timestamp: 1_700_000_000_000 + i,
        })
        .collect();
    annal_client::encode_batch(&rs, compression).unwrap()
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn request_seeds() {
    let t = "request_frame";
    clear(t);
    let topic_id = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
    let mut n = 0;
    let mut emit = |key: ApiKey, version: i16, bytes: Option<Vec<u8>>, label: &str| {
        let Some(bytes) = bytes else { return };
        if let Ok(Some(_)) = annal_broker::decode_request_frame(Bytes::from(bytes.clone())) {
            write(t, &format!("{key:?}-v{version}-{label}"), &bytes);
            n += 1;
        }
    };
    macro_rules! defaults {
        ($($key:ident => $ty:ty),* $(,)?) => {$(
            let r = ApiKey::$key.valid_versions();
            for v in r.min..=r.max {
                emit(ApiKey::$key, v, frame(ApiKey::$key, v, &<$ty>::default()), "default");
            }
        )*};
    }
    defaults!(
        Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest, ApiVersions => ApiVersionsRequest, CreateTopics => CreateTopicsRequest,
        DeleteTopics => DeleteTopicsRequest, DeleteRecords => DeleteRecordsRequest,
        InitProducerId => InitProducerIdRequest, DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest, CreatePartitions => CreatePartitionsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest, DescribeCluster => DescribeClusterRequest,
        DescribeProducers => DescribeProducersRequest, OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
        DescribeLogDirs => DescribeLogDirsRequest, OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest, FindCoordinator => FindCoordinatorRequest,
        JoinGroup => JoinGroupRequest, Heartbeat => HeartbeatRequest, LeaveGroup => LeaveGroupRequest,
        SyncGroup => SyncGroupRequest, DescribeGroups => DescribeGroupsRequest, ListGroups => ListGroupsRequest,
        DeleteGroups => DeleteGroupsRequest, OffsetDelete => OffsetDeleteRequest,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
        ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
    );
    // Populated requests: what clients really send, with topics, partitions, records and groups.
    for v in 0..=12 {
        for (i, c) in CODECS.iter().enumerate() {
            let produce = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(s("fuzz")))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records(*c)))])]);
            emit(
                ApiKey::Produce,
                v,
                frame(ApiKey::Produce, v, &produce),
                &format!("codec{i}"),
            );
        }
    }
    for v in 4..=17 {
        let partition = FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(5)
            .with_partition_max_bytes(1 << 20);
        let by_name = FetchTopic::default()
            .with_topic(TopicName(s("fuzz")))
            .with_partitions(vec![partition.clone()]);
        let by_id = FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![partition]);
        for (label, topic) in [("name", by_name), ("id", by_id)] {
            let fetch = FetchRequest::default()
                .with_max_wait_ms(500)
                .with_min_bytes(1)
                .with_max_bytes(52_428_800)
                .with_session_epoch(-1)
                .with_topics(vec![topic]);
            emit(ApiKey::Fetch, v, frame(ApiKey::Fetch, v, &fetch), label);
        }
    }
    for v in 0..=12 {
        let md = MetadataRequest::default()
            .with_allow_auto_topic_creation(true)
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s("fuzz"))))
            ]));
        emit(
            ApiKey::Metadata,
            v,
            frame(ApiKey::Metadata, v, &md),
            "topics",
        );
    }
    for v in 2..=7 {
        let ct = CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s("fuzz")))
                .with_num_partitions(3)
                .with_replication_factor(1)
                .with_configs(vec![CreatableTopicConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1000")))])]);
        emit(
            ApiKey::CreateTopics,
            v,
            frame(ApiKey::CreateTopics, v, &ct),
            "topic",
        );
    }
    for v in 1..=9 {
        let lo = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(s("fuzz")))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1)])]);
        emit(
            ApiKey::ListOffsets,
            v,
            frame(ApiKey::ListOffsets, v, &lo),
            "latest",
        );
    }
    for v in 0..=9 {
        let jg = JoinGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(
                    b"\x00\x03\x00\x00\x00\x01\x00\x04fuzz\xff\xff\xff\xff",
                ))]);
        emit(
            ApiKey::JoinGroup,
            v,
            frame(ApiKey::JoinGroup, v, &jg),
            "consumer",
        );
    }
    for v in 0..=5 {
        let sg = SyncGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id(1)
            .with_member_id(s("m-1"))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(s("m-1"))
                .with_assignment(Bytes::from_static(b"\x00\x03\x00\x00\x00\x01\x00\x04fuzz\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff"))]);
        emit(
            ApiKey::SyncGroup,
            v,
            frame(ApiKey::SyncGroup, v, &sg),
            "leader",
        );
    }
    for v in 2..=9 {
        let oc = OffsetCommitRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id_or_member_epoch(1)
            .with_member_id(s("m-1"))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("fuzz")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(42)])]);
        emit(
            ApiKey::OffsetCommit,
            v,
            frame(ApiKey::OffsetCommit, v, &oc),
            "commit",
        );
    }
    for v in 0..=1 {
        let iac = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("fuzz"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(s("5")))]),
        ]);
        emit(
            ApiKey::IncrementalAlterConfigs,
            v,
            frame(ApiKey::IncrementalAlterConfigs, v, &iac),
            "set",
        );
    }
    for v in 0..=1 {
        let hb = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(s("fuzz"))]));
        emit(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            frame(ApiKey::ConsumerGroupHeartbeat, v, &hb),
            "join",
        );
    }
    println!("request_frame: {n} seeds");
}

fn batch_seeds() {
    clear("record_batch");
    clear("client_records");
    let kv = [
        (Some(b"k".as_slice()), Some(b"v".as_slice())),
        (None, Some(b"value two".as_slice())),
        (None, None),
    ];
    let plain = batch::build_uncompressed_batch(&kv, 1_700_000_000_000);
    let idempotent = batch::build_batch(
        &kv,
        &[1_700_000_000_000, 1_700_000_000_005, 1_699_999_999_000],
        ProducerFields {
            producer_id: 4000,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: false,
        },
    );
    let transactional = batch::build_batch(
        &kv[..1],
        &[1_700_000_000_000],
        ProducerFields {
            producer_id: 4001,
            producer_epoch: 2,
            base_sequence: 10,
            transactional: true,
        },
    );
    let mut seeds: Vec<(String, Vec<u8>)> = vec![
        ("plain".into(), plain.clone()),
        ("idempotent".into(), idempotent.clone()),
        ("transactional".into(), transactional.clone()),
        ("two".into(), [plain.clone(), idempotent.clone()].concat()),
    ];
    for (i, c) in CODECS.iter().enumerate() {
        seeds.push((format!("codec{i}"), records(*c).to_vec()));
    }
    for (name, bytes) in &seeds {
        write("record_batch", name, bytes);
        let mut fetched = 0i64.to_be_bytes().to_vec();
        fetched.insert(0, 0);
        fetched.extend_from_slice(bytes);
        write("client_records", &format!("fetched-{name}"), &fetched);
    }
    for v in 0..=3 {
        let a = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![TopicPartition::default()
                .with_topic(TopicName(s("fuzz")))
                .with_partitions(vec![0, 2])])
            .with_user_data(Some(Bytes::from_static(b"sticky")));
        let mut out = BytesMut::new();
        out.extend_from_slice(&(v as i16).to_be_bytes());
        if a.encode(&mut out, v).is_ok() {
            let mut seed = vec![1u8];
            seed.extend_from_slice(&out);
            write("client_records", &format!("assignment-v{v}"), &seed);
        }
    }
    println!("record_batch: {} seeds", seeds.len());
}

fn log_seeds() {
    clear("log_recovery");
    clear("producer_snapshot");
    let producer = |id: i64, seq: i32| ProducerFields {
        producer_id: id,
        producer_epoch: 0,
        base_sequence: seq,
        transactional: false,
    };
    for (name, close, codec_rounds) in [
        ("clean", true, false),
        ("unclean", false, false),
        ("compressed", true, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_log_config()).unwrap();
        let mut sequence = 0;
        for i in 0..60i32 {
            let value = vec![b'a' + (i % 26) as u8; 200 + (i as usize * 37) % 700];
            let mut b = if codec_rounds && i % 2 == 0 {
                records(CODECS[(i as usize / 2) % 5]).to_vec()
            } else if i % 3 == 0 {
                sequence += 1;
                batch::build_batch(
                    &[(None, Some(value.as_slice()))],
                    &[1_700_000_000_000 + i as i64 * 1000],
                    producer(77, sequence - 1),
                )
            } else {
                batch::build_uncompressed_batch(
                    &[(Some(b"k".as_slice()), Some(value.as_slice()))],
                    1_700_000_000_000 + i as i64 * 1000,
                )
            };
            log.append(
                &mut b,
                &AppendOptions {
                    leader_epoch: i / 20,
                    ..AppendOptions::default()
                },
            )
            .unwrap();
        }
        if close {
            log.close().unwrap();
        } else {
            log.flush().unwrap();
            drop(log);
        }
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let file = e.file_name().to_string_lossy().to_string();
            if file.ends_with(".snapshot") {
                // The producer_snapshot target takes what follows the version and CRC.
                let bytes = std::fs::read(e.path()).unwrap();
                write("producer_snapshot", &format!("{name}-{file}"), &bytes[6..]);
            }
        }
        let packed = pack_dir(dir.path()).unwrap();
        write("log_recovery", name, &packed);
        println!("log_recovery {name}: {} bytes", packed.len());
    }
}

/// `__transaction_state` keys and values, markers, and a log directory holding committed and aborted
/// transactions (so `.txnindex` files) for the recovery target.
fn txn_seeds() {
    use annal_broker::txn::records::{self as txn_records, TxnLogValue};
    use annal_broker::txn::state::TxnState;
    use annal_log::control::{build_marker_batch, EndTxnMarker, TxnOutcome};
    use annal_log::AppendOrigin;
    clear("txn_records");
    let with_selector = |selector: u8, bytes: &[u8]| [&[selector][..], bytes].concat();
    write(
        "txn_records",
        "key",
        &with_selector(0, &txn_records::key("copier-7")),
    );
    for (name, state, partitions) in [
        ("empty", TxnState::Empty, vec![]),
        (
            "ongoing",
            TxnState::Ongoing,
            vec![("orders", 0), ("orders", 2), ("audit", 1)],
        ),
        (
            "prepare-commit",
            TxnState::PrepareCommit,
            vec![("orders", 1)],
        ),
        ("complete-abort", TxnState::CompleteAbort, vec![]),
    ] {
        let value = TxnLogValue {
            producer_id: 4000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state,
            partitions: partitions
                .into_iter()
                .map(|(t, p)| (t.to_string(), p))
                .collect(),
            last_update_ms: 1_700_000_000_000,
            start_ms: 1_699_999_990_000,
            client_transaction_version: 0,
        };
        write(
            "txn_records",
            &format!("value-{name}"),
            &with_selector(1, &txn_records::value(&value)),
        );
    }
    for (name, outcome) in [("commit", TxnOutcome::Commit), ("abort", TxnOutcome::Abort)] {
        let marker = EndTxnMarker {
            outcome,
            coordinator_epoch: 5,
        };
        let bytes = build_marker_batch(4000, 3, marker, 1_700_000_000_000);
        write(
            "txn_records",
            &format!("marker-{name}"),
            &with_selector(2, &bytes),
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_log_config()).unwrap();
    let client = AppendOptions {
        now_ms: 1_700_000_000_000,
        ..AppendOptions::default()
    };
    let coordinator = AppendOptions {
        now_ms: 1_700_000_000_000,
        origin: AppendOrigin::Coordinator,
        ..AppendOptions::default()
    };
    for round in 0..24i32 {
        let producer_id = 100 + i64::from(round % 3);
        let sequence = round / 3 * 2;
        for i in 0..2 {
            let value = vec![b'a' + (round % 26) as u8; 300];
            let mut b = batch::build_batch(
                &[(None, Some(value.as_slice()))],
                &[1_700_000_000_000],
                ProducerFields {
                    producer_id,
                    producer_epoch: 0,
                    base_sequence: sequence + i,
                    transactional: true,
                },
            );
            log.append(&mut b, &client).unwrap();
        }
        let outcome = if round % 2 == 0 {
            TxnOutcome::Abort
        } else {
            TxnOutcome::Commit
        };
        let mut m = build_marker_batch(
            producer_id,
            0,
            EndTxnMarker {
                outcome,
                coordinator_epoch: 1,
            },
            1_700_000_000_000,
        );
        log.append(&mut m, &coordinator).unwrap();
    }
    log.close().unwrap();
    let packed = pack_dir(dir.path()).unwrap();
    write("log_recovery", "transactions", &packed);
    println!(
        "log_recovery transactions: {} bytes; txn_records seeds",
        packed.len()
    );
}

fn metadata_seeds() {
    clear("metadata_record");
    clear("raft_entry");
    let topic_id = uuid::Uuid::from_u128(42);
    let records = vec![
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: "metadata.version".into(),
            feature_level: 21,
        }),
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 1,
            is_migrating_zk_broker: false,
            incarnation_id: uuid::Uuid::from_u128(7),
            broker_epoch: 5,
            end_points: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "localhost".into(),
                port: 9092,
                security_protocol: 0,
            }],
            features: vec![BrokerFeature {
                name: "metadata.version".into(),
                min_supported_version: 1,
                max_supported_version: 21,
            }],
            rack: Some("r1".into()),
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: vec![uuid::Uuid::from_u128(9)],
        }),
        MetadataRecord::UnfenceBroker(UnfenceBrokerRecord { id: 1, epoch: 5 }),
        MetadataRecord::Topic(TopicRecord {
            name: "fuzz".into(),
            topic_id,
        }),
        MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id,
            replicas: vec![1],
            isr: vec![1],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: 1,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: vec![uuid::Uuid::from_u128(9)],
            eligible_leader_replicas: None,
            last_known_elr: None,
        }),
        MetadataRecord::Config(ConfigRecord {
            resource_type: 2,
            resource_name: "fuzz".into(),
            name: "retention.ms".into(),
            value: Some("1000".into()),
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            isr: Some(vec![1]),
            leader: 1,
            ..PartitionChangeRecord::new(topic_id, 0)
        }),
        MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 5,
            next_producer_id: 1000,
        }),
        MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id: 1,
            broker_epoch: 5,
            fenced: 0,
            in_controlled_shutdown: 1,
            log_dirs: vec![],
        }),
        MetadataRecord::FenceBroker(FenceBrokerRecord { id: 1, epoch: 5 }),
        MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id }),
        MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
            broker_id: 1,
            broker_epoch: 5,
        }),
    ];
    let mut sequence = Vec::new();
    for r in &records {
        let bytes = r.encode();
        let mut one = (bytes.len() as u16).to_le_bytes().to_vec();
        one.extend_from_slice(&bytes);
        write("metadata_record", r.type_name(), &one);
        sequence.extend_from_slice(&one);
    }
    write("metadata_record", "sequence", &sequence);
    checkpoint_seeds(&records);

    // Raft entries as the quorum writes them: an entry-header record, then the payload's records.
    let entries: Vec<(&str, String, Vec<Vec<u8>>)> = vec![
        ("blank", r#"{"index":1,"leader_node":1,"kind":"blank"}"#.into(), vec![]),
        ("normal", r#"{"index":7,"leader_node":2,"kind":"normal"}"#.into(), records.iter().take(5).map(|r| r.encode()).collect()),
        (
            "membership",
            r#"{"index":2,"leader_node":1,"kind":{"membership":{"configs":[[1,2,3]],"nodes":{"1":{"addr":"a:1"},"2":{"addr":"b:2"},"3":{"addr":"c:3"}}}}}"#.into(),
            vec![],
        ),
    ];
    for (name, header, payload) in entries {
        let mut kvs: Vec<batch::KeyValue<'_>> = vec![(
            Some(b"annal.raft.entry".as_slice()),
            Some(header.as_bytes()),
        )];
        kvs.extend(payload.iter().map(|r| (None, Some(r.as_slice()))));
        let mut bytes = batch::build_uncompressed_batch(&kvs, 1_700_000_000_000);
        batch::assign_offset(&mut bytes, 3, 4);
        match annal_metadata::raft::decode_entry_checked(&bytes) {
            Ok(_) => write("raft_entry", name, &bytes),
            Err(e) => eprintln!("raft_entry seed {name} does not decode: {e}"),
        }
    }
}

/// `checkpoint_files` inputs: the first byte picks the file (0 leader epochs, 1 high watermarks, 2 quorum state,
/// 3 snapshot data, 7 snapshot data and a whole snapshot file), the rest is what the broker or quorum wrote.
fn checkpoint_seeds(records: &[MetadataRecord]) {
    use annal_broker::checkpoint_files::{write_high_watermarks, write_leader_epochs};
    clear("checkpoint_files");
    let dir = tempfile::tempdir().unwrap();
    let seed = |which: u8, file: &str| {
        let mut bytes = vec![which];
        bytes.extend_from_slice(&std::fs::read(dir.path().join(file)).unwrap());
        bytes
    };
    write_leader_epochs(dir.path(), &[(0, 0), (3, 17), (4, 17), (9, 1_000_000)]).unwrap();
    write(
        "checkpoint_files",
        "leader-epochs",
        &seed(0, "leader-epoch-checkpoint"),
    );
    let hws = [
        (("orders".to_string(), 0), 42),
        (("orders".to_string(), 1), 0),
        (("__consumer_offsets".to_string(), 7), 9),
    ];
    write_high_watermarks(dir.path(), &hws.into_iter().collect()).unwrap();
    write(
        "checkpoint_files",
        "high-watermarks",
        &seed(1, "replication-offset-checkpoint"),
    );
    let state = br#"{"vote":{"leader_id":{"term":3,"node_id":2},"committed":true},"committed":{"leader_id":{"term":3,"node_id":2},"index":41},"last_purged":{"leader_id":{"term":2,"node_id":1},"index":20}}"#;
    let mut quorum_state = vec![2u8];
    quorum_state.extend_from_slice(state);
    match annal_metadata::raft::decode_quorum_state_checked(state) {
        Ok(()) => write("checkpoint_files", "quorum-state", &quorum_state),
        Err(e) => eprintln!("checkpoint_files seed quorum-state does not parse: {e}"),
    }
    // A metadata image with a broker, a topic, a partition and a config, as the controller snapshots it (without
    // the records that remove what the others add).
    let mut image = annal_metadata::image::MetadataImage::new("fuzz-cluster");
    for (offset, r) in records.iter().take(9).enumerate() {
        let _ = image.try_apply(offset as u64, r);
    }
    let data = image.encode_snapshot();
    let mut snapshot = vec![3u8];
    snapshot.extend_from_slice(&data);
    write("checkpoint_files", "image-snapshot", &snapshot);
    let mut whole = vec![7u8];
    whole.extend_from_slice(&annal_metadata::raft::snapshot_file_around(&data));
    write("checkpoint_files", "snapshot-file", &whole);
}

fn group_seeds() {
    clear("group_records");
    let put = |name: &str, which: u8, bytes: Vec<u8>| {
        let mut seed = vec![which];
        seed.extend_from_slice(&bytes);
        write("group_records", name, &seed);
    };
    put("offset-key", 0, group_records::offset_key("g", "fuzz", 3));
    put("group-key", 0, group_records::group_key("g"));
    put(
        "offset-value",
        1,
        group_records::offset_value(&group_records::OffsetValue {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
            expire_timestamp: None,
        }),
    );
    put(
        "offset-value-v1",
        1,
        group_records::offset_value(&group_records::OffsetValue {
            offset: 42,
            leader_epoch: -1,
            metadata: "".into(),
            commit_timestamp: 1_700_000_000_000,
            expire_timestamp: Some(1_700_000_100_000),
        }),
    );
    put(
        "group-value",
        2,
        group_records::group_value(&group_records::GroupValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            current_state_timestamp: 1_700_000_000_000,
            members: vec![group_records::MemberValue {
                member_id: "m-1".into(),
                instance_id: Some("i-1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 30_000,
                session_timeout_ms: 10_000,
                subscription: Bytes::from_static(b"\x00\x03\x00\x00\x00\x01\x00\x04fuzz"),
                assignment: Bytes::from_static(b"\x00\x03\x00\x00\x00\x00"),
            }],
        }),
    );
    consumer_group_seeds(&put);
    put(
        "group-value-empty",
        2,
        group_records::group_value(&group_records::GroupValue {
            protocol_type: "".into(),
            generation: 0,
            protocol: None,
            leader: None,
            current_state_timestamp: -1,
            members: vec![],
        }),
    );
}

/// A consumer-protocol group's records (types 3-8), selectors as in the `group_records` target.
fn consumer_group_seeds(put: &dyn Fn(&str, u8, Vec<u8>)) {
    use annal_broker::group::consumer_records as c;
    let topic = uuid::Uuid::from_u128(7);
    let parts: c::Parts = [(topic, [0, 2].into())].into();
    put(
        "consumer-member-key",
        0,
        c::Key::Current {
            group: "g".into(),
            member: "m-1".into(),
        }
        .encode(),
    );
    put("consumer-epoch", 3, c::epoch_value(4));
    put(
        "consumer-topics",
        4,
        c::partition_metadata_value(&[("fuzz".to_string(), (topic, 3))].into()),
    );
    put(
        "consumer-member",
        5,
        c::member_value(&c::MemberMetadata {
            instance_id: Some("i-1".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed: ["fuzz".to_string()].into(),
            rebalance_timeout_ms: 30_000,
            server_assignor: Some("uniform".into()),
        }),
    );
    put("consumer-target", 6, c::target_value(&parts));
    put(
        "consumer-current",
        7,
        c::current_value(&c::CurrentAssignment {
            epoch: 4,
            previous_epoch: 3,
            state: c::STATE_UNREVOKED_PARTITIONS,
            assigned: parts.clone(),
            pending_revocation: [(topic, [1].into())].into(),
        }),
    );
}

fn response_seeds() {
    let t = "client_response";
    clear(t);
    let mut n = 0;
    let mut emit =
        |key: ApiKey, version: i16, header_version: i16, body: Option<BytesMut>, label: &str| {
            let Some(body) = body else { return };
            let range = key.valid_versions();
            let mut seed = (key as i16).to_be_bytes().to_vec();
            seed.extend_from_slice(&((version - range.min) as u16).to_be_bytes());
            let mut h = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(7)
                .encode(&mut h, header_version)
                .unwrap();
            seed.extend_from_slice(&h);
            seed.extend_from_slice(&body);
            write(t, &format!("{key:?}-v{version}-{label}"), &seed);
            n += 1;
        };
    macro_rules! responses {
        ($($key:ident => $ty:ty),* $(,)?) => {$(
            let r = ApiKey::$key.valid_versions();
            for v in r.min..=r.max {
                let mut b = BytesMut::new();
                let body = <$ty>::default().encode(&mut b, v).ok().map(|_| b);
                emit(ApiKey::$key, v, <$ty>::header_version(v), body, "default");
            }
        )*};
    }
    responses!(
        Produce => ProduceResponse, Fetch => FetchResponse, ListOffsets => ListOffsetsResponse,
        Metadata => MetadataResponse, ApiVersions => ApiVersionsResponse, CreateTopics => CreateTopicsResponse,
        DeleteTopics => DeleteTopicsResponse, DescribeConfigs => DescribeConfigsResponse,
        IncrementalAlterConfigs => IncrementalAlterConfigsResponse, DescribeCluster => DescribeClusterResponse,
        DescribeProducers => DescribeProducersResponse, DescribeQuorum => DescribeQuorumResponse,
        OffsetCommit => OffsetCommitResponse, OffsetFetch => OffsetFetchResponse,
        FindCoordinator => FindCoordinatorResponse, DescribeGroups => DescribeGroupsResponse,
        ListGroups => ListGroupsResponse, DeleteGroups => DeleteGroupsResponse,
    );
    for v in 4..=17 {
        let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(s("fuzz")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(3)
                .with_records(Some(records(Compression::Lz4)))])]);
        let mut b = BytesMut::new();
        emit(
            ApiKey::Fetch,
            v,
            FetchResponse::header_version(v),
            resp.encode(&mut b, v).ok().map(|_| b),
            "records",
        );
    }
    for v in 0..=12 {
        let resp = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(s("localhost"))
                .with_port(9092)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(s("fuzz"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_leader_id(BrokerId(1))
                    .with_replica_nodes(vec![BrokerId(1)])
                    .with_isr_nodes(vec![BrokerId(1)])])]);
        let mut b = BytesMut::new();
        emit(
            ApiKey::Metadata,
            v,
            MetadataResponse::header_version(v),
            resp.encode(&mut b, v).ok().map(|_| b),
            "topic",
        );
    }
    for v in 0..=4 {
        let resp = ApiVersionsResponse::default().with_api_keys(vec![ApiVersion::default()
            .with_api_key(0)
            .with_min_version(3)
            .with_max_version(12)]);
        let mut b = BytesMut::new();
        emit(
            ApiKey::ApiVersions,
            v,
            0,
            resp.encode(&mut b, v).ok().map(|_| b),
            "keys",
        );
    }
    println!("client_response: {n} seeds");
}

fn main() {
    request_seeds();
    batch_seeds();
    log_seeds();
    txn_seeds();
    metadata_seeds();
    group_seeds();
    response_seeds();
    // The structured batch target reads `arbitrary` input: any bytes make a start.
    write("record_batch_structured", "zeros", &[0u8; 64]);
    write("record_batch_structured", "ones", &[1u8; 256]);
    write(
        "record_batch_structured",
        "mixed",
        &(0..=255u8).cycle().take(1024).collect::<Vec<_>>(),
    );
}
