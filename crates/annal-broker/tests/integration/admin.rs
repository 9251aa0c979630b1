//! Topic administration over the raw protocol: create, describe, configs, partitions, delete, auto-create.

use crate::common;

use common::*;
use kafka_protocol::messages::*;

fn create_req(
    topic: &str,
    partitions: i32,
    rf: i16,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> CreateTopicsRequest {
    use create_topics_request::{CreatableTopic, CreatableTopicConfig};
    CreateTopicsRequest::default()
        .with_timeout_ms(1000)
        .with_validate_only(validate_only)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
}

async fn metadata(c: &mut Client, topics: Option<&[&str]>, allow_create: bool) -> MetadataResponse {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(allow_create)
        .with_topics(topics.map(|t| {
            t.iter()
                .map(|n| metadata_request::MetadataRequestTopic::default().with_name(Some(name(n))))
                .collect()
        }));
    c.call(&req, 12).await
}

/// The topic config once it reads `want` (or after 5 s, whatever it is then): a broker applies a config change
/// from the metadata log a moment after the controller committed it, as Kafka's brokers do.
async fn settled_topic_config(c: &mut Client, topic: &str, key: &str, want: &str) -> (String, i8) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = topic_config(c, topic, key).await;
        if got.0 == want || std::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn topic_config(c: &mut Client, topic: &str, key: &str) -> (String, i8) {
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configuration_keys(Some(vec![s(key)])),
    ]);
    let resp = c.call(&req, 4).await;
    assert_eq!(resp.results[0].error_code, 0);
    let e = &resp.results[0].configs[0];
    (e.value.as_ref().unwrap().to_string(), e.config_source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_validate_describe_delete() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["num.partitions=3"]).await;
    let mut c = broker.client().await;

    let err = |r: CreateTopicsResponse| {
        (
            r.topics[0].error_code,
            r.topics[0]
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default(),
        )
    };
    let (code, msg) = err(c.call(&create_req("rf3", 1, 3, &[], false), 7).await);
    assert_eq!(code, 38);
    assert!(msg.contains("only 1 broker"), "{msg}");
    assert_eq!(
        err(c.call(&create_req("bad/name", 1, 1, &[], false), 7).await).0,
        17
    );
    assert_eq!(
        err(c
            .call(&create_req(&"x".repeat(250), 1, 1, &[], false), 7)
            .await)
        .0,
        17
    );
    assert_eq!(
        err(c.call(&create_req("zero", 0, 1, &[], false), 7).await).0,
        37
    );
    let (code, msg) = err(c
        .call(
            &create_req("cfg", 1, 1, &[("retention.ms", "soon")], false),
            7,
        )
        .await);
    assert_eq!(code, 40);
    assert!(msg.contains("retention.ms"), "{msg}");
    assert_eq!(
        err(c
            .call(
                &create_req("cfg", 1, 1, &[("no.such.config", "1")], false),
                7
            )
            .await)
        .0,
        40
    );

    // validate_only creates nothing.
    assert_eq!(
        err(c.call(&create_req("dry", 2, 1, &[], true), 7).await).0,
        0
    );
    assert_eq!(
        metadata(&mut c, Some(&["dry"]), false).await.topics[0].error_code,
        3
    );

    // Defaults: -1 partitions and replication factor take num.partitions and default.replication.factor.
    let resp = c
        .call(
            &create_req(
                "real",
                -1,
                -1,
                &[("retention.ms", "60000"), ("cleanup.policy", "compact")],
                false,
            ),
            7,
        )
        .await;
    assert_eq!(resp.topics[0].error_code, 0);
    assert_eq!(resp.topics[0].num_partitions, 3);
    assert_ne!(resp.topics[0].topic_id, uuid::Uuid::nil());
    assert_eq!(
        err(c.call(&create_req("real", 1, 1, &[], false), 7).await).0,
        36
    );
    assert!(dir.path().join("real-2").is_dir());

    create_topic(&mut c, "a.b", 1, &[]).await;
    let (code, msg) = err(c.call(&create_req("a_b", 1, 1, &[], false), 7).await);
    assert_eq!(code, 17, "{msg}");
    let md = metadata(&mut c, None, false).await;
    assert_eq!(md.topics.len(), 2);
    let real = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().unwrap().as_str() == "real")
        .unwrap();
    assert_eq!(real.partitions.len(), 3);
    assert_eq!(
        topic_config(&mut c, "real", "retention.ms").await,
        ("60000".to_string(), 1)
    );
    assert_eq!(
        topic_config(&mut c, "real", "segment.bytes").await,
        ("1073741824".to_string(), 5)
    );

    // Incremental alter: set, delete back to default, append to a list config.
    let inc = |ops: Vec<(&str, i8, Option<&str>)>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("real"))
                .with_configs(
                    ops.into_iter()
                        .map(|(k, op, v)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(s(k))
                                .with_config_operation(op)
                                .with_value(v.map(s))
                        })
                        .collect(),
                ),
        ])
    };
    assert_eq!(
        c.call(&inc(vec![("segment.bytes", 0, Some("1048576"))]), 1)
            .await
            .responses[0]
            .error_code,
        0
    );
    // Read right after the answer: a forwarded SET or DELETE is answered once this broker's own topic shows it.
    assert_eq!(
        topic_config(&mut c, "real", "segment.bytes").await,
        ("1048576".to_string(), 1)
    );
    assert_eq!(
        c.call(&inc(vec![("retention.ms", 1, None)]), 1)
            .await
            .responses[0]
            .error_code,
        0
    );
    assert_eq!(
        topic_config(&mut c, "real", "retention.ms").await,
        ("604800000".to_string(), 5)
    );
    assert_eq!(
        c.call(&inc(vec![("cleanup.policy", 2, Some("delete"))]), 1)
            .await
            .responses[0]
            .error_code,
        0
    );
    assert_eq!(
        settled_topic_config(&mut c, "real", "cleanup.policy", "compact,delete")
            .await
            .0,
        "compact,delete"
    );
    assert_eq!(
        c.call(&inc(vec![("max.message.bytes", 0, Some("-5"))]), 1)
            .await
            .responses[0]
            .error_code,
        40
    );

    // Broker configs are described read-only; altering them is refused with a reason.
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s("0")),
    ]);
    let resp = c.call(&req, 4).await;
    let np = resp.results[0]
        .configs
        .iter()
        .find(|e| e.name.as_str() == "num.partitions")
        .unwrap();
    assert_eq!(
        (np.value.as_deref(), np.read_only, np.config_source),
        (Some("3"), true, 4)
    );
    // An empty IncrementalAlterConfigs of the broker resource is accepted by the controller, as Kafka accepts it.
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s("0")),
    ]);
    assert_eq!(c.call(&req, 1).await.responses[0].error_code, 0);

    // CreatePartitions: grow, not shrink.
    let cp = |count: i32| {
        CreatePartitionsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(name("real"))
                    .with_count(count),
            ])
    };
    assert_eq!(c.call(&cp(2), 3).await.results[0].error_code, 37);
    assert_eq!(c.call(&cp(5), 3).await.results[0].error_code, 0);
    assert_eq!(
        metadata(&mut c, Some(&["real"]), false).await.topics[0]
            .partitions
            .len(),
        5
    );
    // "real" is compacted (cleanup.policy=compact,delete): a keyless record is INVALID_RECORD (87), a keyed
    // one is appended.
    assert_eq!(
        produce(&mut c, "real", 4, batch(&["p4"], 1_700_000_000_000), 1, 9)
            .await
            .0,
        87
    );
    {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::ProduceRequest;
        let req = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("real"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(4)
                    .with_records(Some(bytes::Bytes::from(batch(
                        &["a", "b"],
                        1_700_000_000_000,
                    ))))])]);
        let resp = c.call(&req, 9).await;
        let p = &resp.responses[0].partition_responses[0];
        // KIP-467: each keyless record is named by its index in the batch.
        let indexes: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!((p.error_code, indexes), (87, vec![0, 1]));
        assert!(p
            .error_message
            .as_ref()
            .is_some_and(|m| m.contains("2 record errors")));
    }
    let keyed = annal_log::batch::build_uncompressed_batch(
        &[(Some(b"k".as_slice()), Some(b"p4".as_slice()))],
        1_700_000_000_000,
    );
    assert_eq!(produce(&mut c, "real", 4, keyed, 1, 9).await, (0, 0));

    // Delete removes the partition directories.
    let req = DeleteTopicsRequest::default()
        .with_timeout_ms(1000)
        .with_topic_names(vec![name("real")]);
    assert_eq!(c.call(&req, 5).await.responses[0].error_code, 0);
    // The directories go as the deletion is applied, a moment after the registry forgets the topic.
    let gone = || !dir.path().join("real-0").exists() && !dir.path().join("real-4").exists();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !gone() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(gone());
    assert_eq!(c.call(&req, 5).await.responses[0].error_code, 3);
    assert_eq!(
        metadata(&mut c, Some(&["real"]), false).await.topics[0].error_code,
        3
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_auto_creates_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["num.partitions=2"]).await;
    let mut c = broker.client().await;
    assert_eq!(
        metadata(&mut c, Some(&["auto"]), false).await.topics[0].error_code,
        3
    );
    let md = metadata(&mut c, Some(&["auto"]), true).await;
    assert_eq!(md.topics[0].error_code, 0);
    assert_eq!(md.topics[0].partitions.len(), 2);
    assert_eq!(
        metadata(&mut c, Some(&["bad name"]), true).await.topics[0].error_code,
        17
    );
    // Several clients auto-creating one topic at once: one creates it, the others find it registered, perhaps
    // before its partitions are installed. None may be told it has no partitions: each sees the whole topic, or
    // LEADER_NOT_AVAILABLE (a topic being created, which clients retry) with none listed.
    let mut racers = Vec::new();
    for _ in 0..4 {
        let mut c = broker.client().await;
        racers.push(tokio::spawn(async move {
            let md = metadata(&mut c, Some(&["raced"]), true).await;
            (md.topics[0].error_code, md.topics[0].partitions.len())
        }));
    }
    for racer in racers {
        let (error, partitions) = racer.await.unwrap();
        assert!(
            (error, partitions) == (0, 2) || (error, partitions) == (5, 0),
            "an auto-created topic of 2 partitions was described with error {error} and {partitions} partitions"
        );
    }
    broker.stop().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &["auto.create.topics.enable=false"]).await;
    let mut c = broker.client().await;
    assert_eq!(
        metadata(&mut c, Some(&["auto"]), true).await.topics[0].error_code,
        3
    );
    broker.stop().await.unwrap();
}
