//! `annal_client::Connection` against a real `annal serve` (or the broker named by `ANNAL_TEST_BOOTSTRAP`): the
//! properties the broker's own inter-node connections rely on. Version negotiation and an explicit version
//! override, the response size limit (an oversized frame closes the connection with an error naming the limit,
//! later requests fail fast), and reconnecting by opening a new connection.

mod support;

use std::time::Duration;

use annal_client::{Connection, ConnectionOptions};
use kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, ApiKey, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use support::*;

/// Above the ApiVersions handshake, below a Metadata response for a topic with `PARTITIONS` partitions.
const SMALL_LIMIT_BYTES: usize = 1200;
const PARTITIONS: &str = "128";

fn metadata_for(topic: &str) -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]))
}

fn options() -> ConnectionOptions {
    ConnectionOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        client_id: "annal-client-test".to_string(),
        ..ConnectionOptions::default()
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("test runtime")
        .block_on(f)
}

#[test]
fn negotiates_versions_and_accepts_an_explicit_override() {
    let broker = Broker::start();
    block_on(async {
        let mut conn = Connection::connect_with(&broker.addr, options())
            .await
            .expect("connect");
        assert_eq!(conn.addr(), broker.addr);
        let (_, their_max) = conn
            .broker_versions(ApiKey::Metadata)
            .expect("every broker offers Metadata");
        let no_topics = MetadataRequest::default().with_topics(Some(vec![]));
        let (response, version) = conn.send(&no_topics, (4, 12)).await.expect("Metadata");
        assert_eq!(version, their_max.min(12));
        assert!(
            response
                .brokers
                .iter()
                .any(|b| format!("{}:{}", b.host.as_str(), b.port) == broker.addr),
            "{response:?}"
        );
        // An explicit version bypasses negotiation: v4 (no tagged fields) still decodes.
        let response = conn.send_version(&no_topics, 4).await.expect("Metadata v4");
        assert!(!response.brokers.is_empty());
        assert!(!conn.is_closed());
    });
}

#[test]
fn an_oversized_response_closes_the_connection_and_the_caller_reconnects() {
    let broker = Broker::start();
    let topic = unique_topic("client-limit");
    broker.ok(&["topic", "create", &topic, "-p", PARTITIONS], "");
    block_on(async {
        let small = ConnectionOptions {
            max_response_bytes: SMALL_LIMIT_BYTES,
            ..options()
        };
        let mut conn = Connection::connect_with(&broker.addr, small)
            .await
            .expect("the handshake fits under the small limit");
        let err = conn
            .send(&metadata_for(&topic), (4, 12))
            .await
            .expect_err("the Metadata response is larger than the limit");
        let err = format!("{err:#}");
        assert!(
            err.contains(&format!("limit {SMALL_LIMIT_BYTES} bytes")),
            "{err}"
        );
        assert!(conn.is_closed());
        let again = conn
            .send(
                &MetadataRequest::default().with_topics(Some(vec![])),
                (4, 12),
            )
            .await
            .expect_err("a closed connection refuses requests");
        let again = format!("{again:#}");
        assert!(
            again.contains("closed after an earlier error") && again.contains("limit"),
            "{again}"
        );

        // Reconnecting is the caller's move: a new connection with a sufficient limit gets the answer.
        let mut conn = Connection::connect_with(&broker.addr, options())
            .await
            .expect("reconnect");
        let (response, _) = conn
            .send(&metadata_for(&topic), (4, 12))
            .await
            .expect("Metadata");
        assert_eq!(response.topics[0].partitions.len(), 128);
    });
    broker.delete_quietly(&topic);
}
