//! Client quotas over the wire (decision 0017-security, Quotas): AlterClientQuotas through the controller,
//! DescribeClientQuotas with Kafka's filters, and the throttling a client over a quota is answered with
//! (throttle_time_ms in Produce, Fetch and other responses; a throttled fetch answered empty). The test clients
//! send client id `annal-test`; quotas are set on it from a connection of its own, because a throttled connection
//! is muted for the throttle time.

use crate::common;

use common::*;
use kafka_protocol::messages::*;

async fn alter(
    c: &mut Client,
    entity: &[(&str, Option<&str>)],
    ops: &[(&str, Option<f64>)],
) -> AlterClientQuotasResponse {
    use alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entry = EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| {
                    EntityData::default()
                        .with_entity_type(s(t))
                        .with_entity_name(n.map(s))
                })
                .collect(),
        )
        .with_ops(
            ops.iter()
                .map(|(k, v)| {
                    OpData::default()
                        .with_key(s(k))
                        .with_value(v.unwrap_or(0.0))
                        .with_remove(v.is_none())
                })
                .collect(),
        );
    c.call(
        &AlterClientQuotasRequest::default().with_entries(vec![entry]),
        1,
    )
    .await
}

fn describe_exact(entity_type: &str, name: Option<&str>) -> DescribeClientQuotasRequest {
    use describe_client_quotas_request::ComponentData;
    DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
        .with_entity_type(s(entity_type))
        .with_match_type(if name.is_some() { 0 } else { 1 })
        .with_match(name.map(s))])
}

#[tokio::test]
async fn quotas_are_altered_described_and_refused_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut c = broker.client().await;
    let resp = alter(
        &mut c,
        &[("user", Some("alice"))],
        &[("producer_byte_rate", Some(1024.0))],
    )
    .await;
    assert_eq!(
        resp.entries[0].error_code, 0,
        "{:?}",
        resp.entries[0].error_message
    );
    let resp = alter(
        &mut c,
        &[("user", Some("alice")), ("client-id", None)],
        &[
            ("consumer_byte_rate", Some(2048.0)),
            ("request_percentage", Some(12.5)),
        ],
    )
    .await;
    assert_eq!(resp.entries[0].error_code, 0);
    // Kafka's validation (the controller's): fractional byte rates, unknown keys, ip keys on users.
    for (entity, key, value) in [
        (("user", Some("alice")), "producer_byte_rate", 1.5),
        (("user", Some("alice")), "no_such_quota", 1.0),
        (("user", Some("alice")), "connection_creation_rate", 1.0),
        (("user", Some("")), "producer_byte_rate", 1.0),
    ] {
        let resp = alter(&mut c, &[entity], &[(key, Some(value))]).await;
        assert_eq!(
            resp.entries[0].error_code, 42,
            "{key}={value}: INVALID_REQUEST"
        ); // INVALID_REQUEST
    }

    // Exact user: alice's own entity and (not strict) the one with a default client id.
    let resp = c.call(&describe_exact("user", Some("alice")), 1).await;
    assert_eq!(resp.error_code, 0);
    let entries = resp.entries.unwrap();
    assert_eq!(entries.len(), 2);
    let strict = c
        .call(&describe_exact("user", Some("alice")).with_strict(true), 1)
        .await
        .entries
        .unwrap();
    assert_eq!(strict.len(), 1);
    assert_eq!(strict[0].values.len(), 1);
    assert_eq!(strict[0].values[0].key.as_str(), "producer_byte_rate");
    assert_eq!(strict[0].values[0].value, 1024.0);
    let defaults = c
        .call(&describe_exact("client-id", None), 1)
        .await
        .entries
        .unwrap();
    assert_eq!(defaults.len(), 1);
    assert_eq!(defaults[0].values.len(), 2);
    // An entity type Kafka does not know.
    let resp = c.call(&describe_exact("topic", Some("t")), 1).await;
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION");

    // Removing every key removes the entity.
    let resp = alter(
        &mut c,
        &[("user", Some("alice"))],
        &[("producer_byte_rate", None)],
    )
    .await;
    assert_eq!(resp.entries[0].error_code, 0);
    let strict = c
        .call(&describe_exact("user", Some("alice")).with_strict(true), 1)
        .await
        .entries
        .unwrap();
    assert!(strict.is_empty());
    broker.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_over_its_byte_rates_is_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut admin = broker.client().await;
    create_topic(&mut admin, "q", 1, &[]).await;
    // 1000 B/s: 12 000 bytes at once are 1200 B/s over the 10 s minimum span, 20 % over: a 2 s throttle.
    let resp = alter(
        &mut admin,
        &[("client-id", Some("annal-test"))],
        &[
            ("producer_byte_rate", Some(1000.0)),
            ("consumer_byte_rate", Some(1000.0)),
        ],
    )
    .await;
    assert_eq!(resp.entries[0].error_code, 0);

    let value = "v".repeat(12_000);
    let mut producer = broker.client().await;
    let small = produce_with_throttle(&mut producer, batch(&["small"], 1), 9).await;
    assert_eq!(small, 0, "within the quota");
    let throttle = produce_with_throttle(&mut producer, batch(&[&value], 1), 9).await;
    assert!(throttle > 0, "over the quota: throttle_time_ms {throttle}");
    // The muted connection answers again once the throttle has passed (still over the quota: throttled again).
    assert!(produce_with_throttle(&mut producer, batch(&["after"], 1), 9).await > 0);

    // The consumer's fetch of the 12 KB batch (offset 1) goes over consumer_byte_rate: answered empty, with the
    // throttle time, and the records wait for the next fetch.
    let mut consumer = broker.client().await;
    let req = fetch_request("q", 1);
    let resp = consumer.call(&req, 12).await;
    assert_eq!(resp.error_code, 0);
    assert!(
        resp.throttle_time_ms > 0,
        "a fetch over the quota is throttled"
    );
    assert!(
        resp.responses.is_empty(),
        "a throttled fetch carries no records"
    );

    // Deleting the quotas: nothing is throttled any more (a new connection, not muted).
    let resp = alter(
        &mut admin,
        &[("client-id", Some("annal-test"))],
        &[("producer_byte_rate", None), ("consumer_byte_rate", None)],
    )
    .await;
    assert_eq!(resp.entries[0].error_code, 0);
    let mut again = broker.client().await;
    let resp = again.call(&req, 12).await;
    assert_eq!(resp.throttle_time_ms, 0);
    assert_eq!(resp.responses[0].partitions[0].error_code, 0);
    assert!(resp.responses[0].partitions[0]
        .records
        .as_ref()
        .is_some_and(|r| !r.is_empty()));
    broker.stop().await.unwrap();
}

#[tokio::test]
async fn request_percentage_throttles_any_request_for_at_most_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path(), &[]).await;
    let mut admin = broker.client().await;
    // A millionth of one thread: the first requests' handler time is over it.
    let resp = alter(
        &mut admin,
        &[("client-id", Some("annal-test"))],
        &[("request_percentage", Some(1e-6))],
    )
    .await;
    assert_eq!(resp.entries[0].error_code, 0);
    let mut c = broker.client().await;
    let mut throttled = 0;
    for _ in 0..3 {
        let resp = c
            .call(&MetadataRequest::default().with_topics(None), 12)
            .await;
        assert!(
            resp.throttle_time_ms <= 1000,
            "bounded by quota.window.size.seconds"
        );
        throttled = throttled.max(resp.throttle_time_ms);
    }
    assert!(
        throttled > 0,
        "Metadata responses carry the request quota's throttle time"
    );
    broker.stop().await.unwrap();
}

async fn produce_with_throttle(c: &mut Client, records: Vec<u8>, version: i16) -> i32 {
    use produce_request::{PartitionProduceData, TopicProduceData};
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("q"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(bytes::Bytes::from(records)))])]);
    let resp = c.call(&req, version).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    resp.throttle_time_ms
}

fn fetch_request(topic: &str, offset: i64) -> FetchRequest {
    use fetch_request::{FetchPartition, FetchTopic};
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}
