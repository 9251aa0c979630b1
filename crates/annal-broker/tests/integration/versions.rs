//! Every (API, version) that ApiVersions advertises is exercised here with a real request and must answer
//! successfully: "advertise exactly what is implemented and tested".

use crate::common;

use std::collections::BTreeSet;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::*;

const T: &str = "versions-topic";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_version_answers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["group.initial.rebalance.delay.ms=0"]).await;
    let mut c = broker.client().await;
    let mut tested: BTreeSet<(i16, i16)> = BTreeSet::new();

    // ApiVersions, all versions; the advertised set must be what we test below.
    let mut advertised = Vec::new();
    for v in 0..=4 {
        let resp = c.call(&ApiVersionsRequest::default(), v).await;
        assert_eq!(resp.error_code, 0);
        advertised = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        tested.insert((ApiKey::ApiVersions as i16, v));
    }

    create_topic(&mut c, T, 1, &[]).await;
    let id = topic_id(&mut c, T).await;

    for v in 0..=12 {
        let req = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(name(T))),
        ]));
        let resp = c.call(&req, v).await;
        assert_eq!(resp.topics.len(), 1, "metadata v{v}");
        assert_eq!(resp.topics[0].error_code, 0, "metadata v{v}");
        assert_eq!(resp.brokers[0].host.as_str(), "127.0.0.1");
        if v >= 10 {
            assert_eq!(resp.topics[0].topic_id, id);
        }
        tested.insert((ApiKey::Metadata as i16, v));
    }

    // Produce v0-2: advertised for librdkafka's compression check, answered with UNSUPPORTED_VERSION per partition.
    for v in 0..=2i16 {
        let mut body = Vec::new();
        body.extend_from_slice(&1i16.to_be_bytes()); // acks
        body.extend_from_slice(&1000i32.to_be_bytes());
        body.extend_from_slice(&1i32.to_be_bytes()); // one topic
        body.extend_from_slice(&(T.len() as i16).to_be_bytes());
        body.extend_from_slice(T.as_bytes());
        body.extend_from_slice(&1i32.to_be_bytes()); // one partition
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(b"abc"); // a v0/v1 message set we never look at
        let mut frame = Vec::new();
        frame.extend_from_slice(&0i16.to_be_bytes());
        frame.extend_from_slice(&v.to_be_bytes());
        frame.extend_from_slice(&77i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        frame.extend_from_slice(&body);
        let mut out = (frame.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&frame);
        use tokio::io::AsyncWriteExt;
        c.stream.write_all(&out).await.unwrap();
        let resp = c.read_frame().await.expect("answered");
        let mut want = 77i32.to_be_bytes().to_vec();
        want.extend_from_slice(&1i32.to_be_bytes());
        want.extend_from_slice(&(T.len() as i16).to_be_bytes());
        want.extend_from_slice(T.as_bytes());
        want.extend_from_slice(&1i32.to_be_bytes());
        want.extend_from_slice(&0i32.to_be_bytes());
        want.extend_from_slice(&35i16.to_be_bytes());
        want.extend_from_slice(&(-1i64).to_be_bytes());
        if v >= 2 {
            want.extend_from_slice(&(-1i64).to_be_bytes());
        }
        if v >= 1 {
            want.extend_from_slice(&0i32.to_be_bytes());
        }
        assert_eq!(&resp[..], &want[..], "produce v{v}");
        tested.insert((ApiKey::Produce as i16, v));
    }

    for v in 3..=12 {
        let (err, base) = produce(
            &mut c,
            T,
            0,
            batch(&[&format!("v{v}")], 1_700_000_000_000 + v as i64),
            1,
            v,
        )
        .await;
        assert_eq!((err, base), (0, (v - 3) as i64), "produce v{v}");
        tested.insert((ApiKey::Produce as i16, v));
    }

    for v in 4..=17 {
        let p = fetch(&mut c, T, 0, 2, v, 100).await;
        assert_eq!(p.error_code, 0, "fetch v{v}");
        assert_eq!(p.high_watermark, 10);
        let vals = values(p.records.as_ref().unwrap());
        assert_eq!(vals[0], (2, "v5".to_string()), "fetch v{v}");
        tested.insert((ApiKey::Fetch as i16, v));
    }

    for v in 1..=9 {
        for (ts, want) in [(-1i64, 10i64), (-2, 0), (1_700_000_000_005, 2)] {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(name(T))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(ts),
                    ])]);
            let resp = c.call(&req, v).await;
            let p = &resp.topics[0].partitions[0];
            assert_eq!(
                (p.error_code, p.offset),
                (0, want),
                "list offsets v{v} ts {ts}"
            );
        }
        tested.insert((ApiKey::ListOffsets as i16, v));
    }

    for v in 2..=7 {
        let topic = format!("created-v{v}");
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(name(&topic))
                .with_num_partitions(1)
                .with_replication_factor(1)]);
        let resp = c.call(&req, v).await;
        assert_eq!(resp.topics[0].error_code, 0, "create topics v{v}");
        tested.insert((ApiKey::CreateTopics as i16, v));
    }

    for v in 0..=3 {
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(name("created-v2"))
                    .with_count(2 + v as i32),
            ]);
        let resp = c.call(&req, v).await;
        assert_eq!(
            resp.results[0].error_code, 0,
            "create partitions v{v}: {:?}",
            resp.results[0].error_message
        );
        tested.insert((ApiKey::CreatePartitions as i16, v));
    }

    for v in 1..=4 {
        let req = DescribeConfigsRequest::default()
            .with_include_synonyms(v >= 1)
            .with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(T)),
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("0")),
            ]);
        let resp = c.call(&req, v).await;
        assert_eq!(resp.results[0].error_code, 0);
        assert!(
            resp.results[0]
                .configs
                .iter()
                .any(|e| e.name.as_str() == "retention.ms"),
            "describe configs v{v}: {resp:?}"
        );
        assert!(resp.results[1]
            .configs
            .iter()
            .any(|e| e.name.as_str() == "num.partitions" && e.read_only));
        tested.insert((ApiKey::DescribeConfigs as i16, v));
    }

    for v in 0..=2 {
        let req = AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(T))
                .with_configs(vec![alter_configs_request::AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s(&format!("{}", 1000 + v as i64))))]),
        ]);
        let resp = c.call(&req, v).await;
        assert_eq!(resp.responses[0].error_code, 0, "alter configs v{v}");
        tested.insert((ApiKey::AlterConfigs as i16, v));
    }

    for v in 0..=1 {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(T))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(s("retention.bytes"))
                        .with_config_operation(0)
                        .with_value(Some(s("123456"))),
                ]),
        ]);
        let resp = c.call(&req, v).await;
        assert_eq!(resp.responses[0].error_code, 0, "incremental alter v{v}");
        tested.insert((ApiKey::IncrementalAlterConfigs as i16, v));
    }

    for v in 0..=1 {
        let resp = c.call(&DescribeClusterRequest::default(), v).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.brokers.len(), 1);
        tested.insert((ApiKey::DescribeCluster as i16, v));
    }

    for v in 0..=5 {
        let mut req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60000);
        if v >= 3 {
            req = req.with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
        }
        let resp = c.call(&req, v).await;
        assert_eq!(resp.error_code, 0, "init producer id v{v}");
        assert!(resp.producer_id.0 >= 0);
        tested.insert((ApiKey::InitProducerId as i16, v));
    }

    {
        let req = DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name(T))
                .with_partition_indexes(vec![0]),
        ]);
        let resp = c.call(&req, 0).await;
        assert_eq!(resp.topics[0].partitions[0].error_code, 0);
        tested.insert((ApiKey::DescribeProducers as i16, 0));
    }

    for v in 2..=4 {
        let req = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(name(T))
                    .with_partitions(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(0)
                            .with_leader_epoch(0),
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(-1)
                            .with_leader_epoch(3),
                    ]),
            ]);
        let resp = c.call(&req, v).await;
        let ps = &resp.topics[0].partitions;
        assert_eq!(
            (ps[0].error_code, ps[0].leader_epoch, ps[0].end_offset),
            (0, 0, 10),
            "offset for leader epoch v{v}"
        );
        assert_eq!(
            (ps[1].error_code, ps[1].leader_epoch, ps[1].end_offset),
            (0, -1, -1)
        );
        tested.insert((ApiKey::OffsetForLeaderEpoch as i16, v));
    }

    for v in 1..=4 {
        let resp = c
            .call(&DescribeLogDirsRequest::default().with_topics(None), v)
            .await;
        assert_eq!(resp.results.len(), 1, "describe log dirs v{v}");
        let t = resp.results[0]
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == T)
            .expect("topic listed");
        assert!(t.partitions[0].partition_size > 0);
        tested.insert((ApiKey::DescribeLogDirs as i16, v));
    }

    {
        // After the offset checks above. A COMMIT marker for a producer the partition has not seen: written (see transactions.rs).
        let req = WriteTxnMarkersRequest::default().with_markers(vec![
            write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0)
                .with_transaction_result(true)
                .with_coordinator_epoch(0)
                .with_topics(vec![
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(name(T))
                        .with_partition_indexes(vec![0]),
                ]),
        ]);
        let resp = c.call(&req, 1).await;
        assert_eq!(resp.markers[0].topics[0].partitions[0].error_code, 0);
        tested.insert((ApiKey::WriteTxnMarkers as i16, 1));
    }

    for v in 0..=2 {
        let req = DeleteRecordsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                .with_name(name(T))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(1 + v as i64),
                ])]);
        let resp = c.call(&req, v).await;
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "delete records v{v}");
        assert!(p.low_watermark >= 0 && p.low_watermark <= 1 + v as i64);
        tested.insert((ApiKey::DeleteRecords as i16, v));
    }

    for v in 1..=6 {
        let topic = format!("created-v{}", v + 1);
        let req = if v >= 6 {
            DeleteTopicsRequest::default()
                .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(name(&topic)))])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![name(&topic)])
        };
        let resp = c.call(&req.with_timeout_ms(1000), v).await;
        assert_eq!(resp.responses[0].error_code, 0, "delete topics v{v}");
        tested.insert((ApiKey::DeleteTopics as i16, v));
    }

    common::group_versions::exercise_group_apis(&mut c, T, &mut tested).await;
    common::txn::exercise_txn_apis(&mut c, T, &mut tested).await;

    // SASL on a PLAINTEXT listener: Kafka answers ILLEGAL_SASL_STATE (the exchanges: security.rs).
    for v in 0..=1 {
        let resp = c
            .call(
                &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
                v,
            )
            .await;
        assert_eq!(resp.error_code, 34, "sasl handshake v{v}");
        tested.insert((ApiKey::SaslHandshake as i16, v));
    }
    for v in 0..=2 {
        let resp = c.call(&SaslAuthenticateRequest::default(), v).await;
        assert_eq!(resp.error_code, 34, "sasl authenticate v{v}");
        tested.insert((ApiKey::SaslAuthenticate as i16, v));
    }
    {
        let salt = bytes::Bytes::from_static(b"versions-salt");
        let up = alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
            .with_name(s("versions-user"))
            .with_mechanism(1)
            .with_iterations(4096)
            .with_salt(salt)
            .with_salted_password(bytes::Bytes::from(vec![7u8; 32]));
        let resp = c
            .call(
                &AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]),
                0,
            )
            .await;
        assert_eq!(
            resp.results[0].error_code, 0,
            "{:?}",
            resp.results[0].error_message
        );
        tested.insert((ApiKey::AlterUserScramCredentials as i16, 0));
        let resp = c
            .call(
                &DescribeUserScramCredentialsRequest::default().with_users(None),
                0,
            )
            .await;
        assert_eq!(resp.results.len(), 1);
        assert_eq!(resp.results[0].credential_infos[0].iterations, 4096);
        tested.insert((ApiKey::DescribeUserScramCredentials as i16, 0));
    }
    // Client quotas: each AlterClientQuotas version sets a quota on its own client id, and each DescribeClientQuotas
    // version then finds both (the default filter matches every entity).
    for v in 0..=1 {
        use kafka_protocol::messages::alter_client_quotas_request::{
            EntityData, EntryData, OpData,
        };
        let entry = EntryData::default()
            .with_entity(vec![EntityData::default()
                .with_entity_type(s("client-id"))
                .with_entity_name(Some(s(&format!("versions-{v}"))))])
            .with_ops(vec![OpData::default()
                .with_key(s("producer_byte_rate"))
                .with_value(1e9)]);
        let resp = c
            .call(
                &AlterClientQuotasRequest::default().with_entries(vec![entry]),
                v,
            )
            .await;
        assert_eq!(
            resp.entries[0].error_code, 0,
            "{:?}",
            resp.entries[0].error_message
        );
        tested.insert((ApiKey::AlterClientQuotas as i16, v));
    }
    for v in 0..=1 {
        let resp = c.call(&DescribeClientQuotasRequest::default(), v).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.entries.map(|e| e.len()), Some(2));
        tested.insert((ApiKey::DescribeClientQuotas as i16, v));
    }
    // ACL APIs: without an authorizer Kafka answers SECURITY_DISABLED (tests/integration/security/acls.rs has the
    // authorizer's answers at v3).
    for v in 1..=3 {
        use kafka_protocol::messages::create_acls_request::AclCreation;
        use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
        let resp = c
            .call(
                &DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(1)
                    .with_operation(1)
                    .with_permission_type(1),
                v,
            )
            .await;
        assert_eq!(resp.error_code, 54, "DescribeAcls v{v}");
        tested.insert((ApiKey::DescribeAcls as i16, v));
        let creation = AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("t"))
            .with_principal(s("User:a"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3);
        let resp = c
            .call(
                &CreateAclsRequest::default().with_creations(vec![creation]),
                v,
            )
            .await;
        assert_eq!(resp.results[0].error_code, 54, "CreateAcls v{v}");
        tested.insert((ApiKey::CreateAcls as i16, v));
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let resp = c
            .call(&DeleteAclsRequest::default().with_filters(vec![filter]), v)
            .await;
        assert_eq!(resp.filter_results[0].error_code, 54, "DeleteAcls v{v}");
        tested.insert((ApiKey::DeleteAcls as i16, v));
    }

    // The APIs the active controller answers (ElectLeaders, reassignments, DescribeQuorum: the broker forwards
    // them) are proven by the cluster interop tests (test_elections.py, test_cluster.py, the Kafka tools), which
    // drive them with Kafka's own clients on real clusters.
    let forwarded = [
        ApiKey::ElectLeaders as i16,
        ApiKey::AlterPartitionReassignments as i16,
        ApiKey::ListPartitionReassignments as i16,
        ApiKey::DescribeQuorum as i16,
    ];
    let advertised_set: BTreeSet<(i16, i16)> = advertised
        .iter()
        .filter(|(k, _, _)| !forwarded.contains(k))
        .flat_map(|(k, min, max)| (*min..=*max).map(move |v| (*k, v)))
        .collect();
    assert_eq!(
        advertised_set, tested,
        "advertised versions must be exactly the tested ones"
    );
    let _ = Bytes::new();
    broker.stop().await.unwrap();
}
