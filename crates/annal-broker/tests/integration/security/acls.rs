//! ACLs and the StandardAuthorizer over the wire: a broker with `authorizer.class.name` set, a SASL PLAIN
//! listener with users admin (super user), alice and bob, and raw Kafka requests. Prefixed and literal
//! patterns, the wildcard, deny beating allow, host matching, super users, `allow.everyone.if.no.acl.found`,
//! Metadata hiding what a principal may not describe, malformed CreateAcls/DeleteAcls, and ACLs kept in the
//! metadata log across a restart.

use super::*;

use annal_metadata::acl::{op, pattern, permission, resource};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;

const AUTHORIZER: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const JAAS_USERS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

fn settings(extra: &[&str]) -> Vec<String> {
    let mut v = overrides(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name=PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        JAAS_USERS,
        AUTHORIZER,
        "super.users=User:admin;User:ANONYMOUS",
    ]);
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

async fn login(addr: SocketAddr, user: &str) -> Client {
    let mut c = Client::connect(addr).await;
    assert_eq!(handshake(&mut c, "PLAIN", 1).await.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let a = authenticate(&mut c, token.as_bytes()).await;
    assert_eq!(a.error_code, 0, "{user} logs in: {:?}", a.error_message);
    c
}

fn acl(
    rt: i8,
    name: &str,
    pt: i8,
    principal: &str,
    host: &str,
    operation: i8,
    perm: i8,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pt)
        .with_principal(s(principal))
        .with_host(s(host))
        .with_operation(operation)
        .with_permission_type(perm)
}

/// A DescribeAcls whose string filters are null (the defaults are empty strings, which match only empty names).
fn describe_all() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
}

async fn create_acls(c: &mut Client, acls: Vec<AclCreation>) -> Vec<i16> {
    let r = c
        .call(&CreateAclsRequest::default().with_creations(acls), 3)
        .await;
    r.results.iter().map(|r| r.error_code).collect()
}

async fn metadata(
    c: &mut Client,
    topics: Option<&[&str]>,
    auto_create: bool,
) -> Vec<(String, i16)> {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|t| {
            t.iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(name(n))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    let mut got: Vec<(String, i16)> = c
        .call(&req, 12)
        .await
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    got.sort();
    got
}

async fn produce_code(c: &mut Client, topic: &str) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let batch = Bytes::from(batch(&["v"], 1_700_000_000_000));
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))])]);
    let r = c.call(&req, 9).await;
    r.responses[0].partition_responses[0].error_code
}

async fn list_offsets_code(c: &mut Client, topic: &str) -> i16 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let r = c.call(&req, 7).await;
    r.topics[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorizer_follows_standard_authorizer_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = SecureBroker::start(&dir.path().join("data"), &settings(&[])).await;
    let addr = broker.addr("SASL_PLAINTEXT");
    let mut admin = login(addr, "admin").await;
    for t in ["orders-eu", "orders-secret", "payments", "shared"] {
        create_topic(&mut admin, t, 1, &[]).await;
    }
    let mut alice = login(addr, "alice").await;
    let mut bob = login(addr, "bob").await;

    // No ACLs and allow.everyone.if.no.acl.found=false: alice may do nothing, and sees no topic at all.
    assert_eq!(metadata(&mut alice, None, false).await, vec![]);
    assert_eq!(produce_code(&mut alice, "orders-eu").await, 29);
    // A named topic she may not describe is TOPIC_AUTHORIZATION_FAILED whether it exists or not.
    assert_eq!(
        metadata(&mut alice, Some(&["payments", "no-such-topic"]), false).await,
        vec![("no-such-topic".into(), 29), ("payments".into(), 29)]
    );
    // Only the super user may manage ACLs.
    assert_eq!(
        create_acls(
            &mut alice,
            vec![acl(
                resource::TOPIC,
                "x",
                pattern::LITERAL,
                "User:alice",
                "*",
                op::ALL,
                permission::ALLOW
            )]
        )
        .await,
        vec![31]
    );
    let d = alice
        .call(
            &describe_all()
                .with_resource_type_filter(resource::ANY)
                .with_pattern_type_filter(pattern::ANY)
                .with_operation(op::ANY)
                .with_permission_type(permission::ANY),
            3,
        )
        .await;
    assert_eq!(d.error_code, 31);

    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                // Everything on orders-* (prefixed) ...
                acl(
                    resource::TOPIC,
                    "orders-",
                    pattern::PREFIXED,
                    "User:alice",
                    "*",
                    op::ALL,
                    permission::ALLOW
                ),
                // ... but not reading orders-secret: DENY beats ALLOW.
                acl(
                    resource::TOPIC,
                    "orders-secret",
                    pattern::LITERAL,
                    "User:alice",
                    "*",
                    op::READ,
                    permission::DENY
                ),
                // Everyone may describe "shared" (wildcard principal), bob may write it from another host only.
                acl(
                    resource::TOPIC,
                    "shared",
                    pattern::LITERAL,
                    "User:*",
                    "*",
                    op::DESCRIBE,
                    permission::ALLOW
                ),
                acl(
                    resource::TOPIC,
                    "shared",
                    pattern::LITERAL,
                    "User:bob",
                    "10.9.9.9",
                    op::WRITE,
                    permission::ALLOW
                ),
                // Groups: alice reads any group (wildcard name).
                acl(
                    resource::GROUP,
                    "*",
                    pattern::LITERAL,
                    "User:alice",
                    "*",
                    op::READ,
                    permission::ALLOW
                ),
            ]
        )
        .await,
        vec![0, 0, 0, 0, 0]
    );
    // The same ACL again succeeds without a second copy.
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(
                resource::TOPIC,
                "orders-",
                pattern::PREFIXED,
                "User:alice",
                "*",
                op::ALL,
                permission::ALLOW
            )]
        )
        .await,
        vec![0]
    );

    assert_eq!(
        metadata(&mut alice, None, false).await,
        vec![
            ("orders-eu".into(), 0),
            ("orders-secret".into(), 0),
            ("shared".into(), 0)
        ]
    );
    assert_eq!(produce_code(&mut alice, "orders-eu").await, 0);
    assert_eq!(
        produce_code(&mut alice, "orders-secret").await,
        0,
        "WRITE is still allowed"
    );
    assert_eq!(produce_code(&mut alice, "payments").await, 29);
    assert_eq!(
        list_offsets_code(&mut alice, "orders-secret").await,
        0,
        "DENY READ does not deny DESCRIBE"
    );
    // Fetch orders-secret: READ denied.
    {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(
                ["orders-eu", "orders-secret"]
                    .iter()
                    .map(|t| {
                        FetchTopic::default()
                            .with_topic(name(t))
                            .with_partitions(vec![FetchPartition::default()
                                .with_partition(0)
                                .with_partition_max_bytes(1 << 20)])
                    })
                    .collect(),
            );
        let r = alice.call(&req, 11).await;
        let codes: std::collections::BTreeMap<String, i16> = r
            .responses
            .iter()
            .map(|t| (t.topic.to_string(), t.partitions[0].error_code))
            .collect();
        assert_eq!(codes.get("orders-eu"), Some(&0));
        assert_eq!(codes.get("orders-secret"), Some(&29));
    }
    // Host matching: bob's WRITE on "shared" is from 10.9.9.9 only; DESCRIBE through User:*.
    assert_eq!(produce_code(&mut bob, "shared").await, 29);
    assert_eq!(list_offsets_code(&mut bob, "shared").await, 0);
    assert_eq!(
        metadata(&mut bob, None, false).await,
        vec![("shared".into(), 0)]
    );
    // Auto-creation needs CREATE: alice may create orders-* topics through Metadata, not others.
    assert_eq!(
        metadata(&mut alice, Some(&["orders-new", "other-new"]), true).await,
        vec![("orders-new".into(), 0), ("other-new".into(), 29)]
    );
    // The super user needs no ACL.
    assert_eq!(produce_code(&mut admin, "payments").await, 0);

    // DescribeAcls with a MATCH filter: the ACLs that apply to topic orders-secret.
    let d = admin
        .call(
            &describe_all()
                .with_resource_type_filter(resource::TOPIC)
                .with_resource_name_filter(Some(s("orders-secret")))
                .with_pattern_type_filter(pattern::MATCH)
                .with_operation(op::ANY)
                .with_permission_type(permission::ANY),
            3,
        )
        .await;
    assert_eq!(d.error_code, 0);
    let mut patterns: Vec<(String, i8)> = d
        .resources
        .iter()
        .map(|r| (r.resource_name.to_string(), r.pattern_type))
        .collect();
    patterns.sort();
    assert_eq!(
        patterns,
        vec![
            ("orders-".into(), pattern::PREFIXED),
            ("orders-secret".into(), pattern::LITERAL)
        ]
    );

    // DeleteAcls removes the DENY: alice reads orders-secret.
    let r = admin
        .call(
            &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_resource_type_filter(resource::TOPIC)
                .with_resource_name_filter(Some(s("orders-secret")))
                .with_pattern_type_filter(pattern::LITERAL)
                .with_operation(op::ANY)
                .with_permission_type(permission::DENY)]),
            3,
        )
        .await;
    assert_eq!(r.filter_results[0].error_code, 0);
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(
        r.filter_results[0].matching_acls[0].principal.as_str(),
        "User:alice"
    );
    {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("orders-secret"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let r = alice.call(&req, 11).await;
        assert_eq!(r.responses[0].partitions[0].error_code, 0);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls() {
    let dir = tempfile::tempdir().unwrap();
    let broker = SecureBroker::start(
        &dir.path().join("data"),
        &settings(&["allow.everyone.if.no.acl.found=true"]),
    )
    .await;
    let addr = broker.addr("SASL_PLAINTEXT");
    let mut admin = login(addr, "admin").await;
    create_topic(&mut admin, "open", 1, &[]).await;
    create_topic(&mut admin, "guarded", 1, &[]).await;
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(
                resource::TOPIC,
                "guarded",
                pattern::LITERAL,
                "User:alice",
                "*",
                op::WRITE,
                permission::ALLOW
            )]
        )
        .await,
        vec![0]
    );
    let mut bob = login(addr, "bob").await;
    assert_eq!(
        produce_code(&mut bob, "open").await,
        0,
        "no ACL on the topic: allowed"
    );
    assert_eq!(
        produce_code(&mut bob, "guarded").await,
        29,
        "the topic has ACLs, none for bob"
    );
    let mut alice = login(addr, "alice").await;
    assert_eq!(produce_code(&mut alice, "guarded").await, 0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_acl_requests_get_kafkas_answers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = SecureBroker::start(&data, &settings(&[])).await;
    let addr = broker.addr("SASL_PLAINTEXT");
    let mut admin = login(addr, "admin").await;
    let ok = acl(
        resource::TOPIC,
        "t",
        pattern::LITERAL,
        "User:alice",
        "*",
        op::READ,
        permission::ALLOW,
    );
    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                ok.clone(),
                ok.clone().with_resource_type(resource::CLUSTER), // the cluster is named kafka-cluster
                ok.clone().with_resource_name(s("")),
                ok.clone().with_principal(s("alice")),
                ok.clone().with_resource_type(99), // codes Kafka does not know are UNKNOWN
                ok.clone().with_operation(99),
                acl(
                    resource::CLUSTER,
                    "kafka-cluster",
                    pattern::LITERAL,
                    "User:alice",
                    "*",
                    op::DESCRIBE,
                    permission::ALLOW
                ),
            ]
        )
        .await,
        vec![0, 42, 42, 42, 42, 42, 0]
    );
    // ANY or MATCH where a concrete value is needed fails the whole request with UNKNOWN_SERVER_ERROR and creates
    // nothing, as Kafka 4's broker does.
    for bad in [
        ok.clone().with_resource_pattern_type(pattern::MATCH),
        ok.clone().with_resource_pattern_type(pattern::ANY),
        ok.clone().with_resource_type(resource::ANY),
        ok.clone().with_operation(op::ANY),
        ok.clone().with_permission_type(permission::ANY),
    ] {
        let fresh = ok.clone().with_resource_name(s("never-created"));
        assert_eq!(
            create_acls(&mut admin, vec![fresh, bad]).await,
            vec![-1, -1]
        );
    }
    // UNKNOWN (0) codes: the request is refused whole and the connection closed, as Kafka's parser does.
    let mut c = login(addr, "admin").await;
    c.send(
        &CreateAclsRequest::default().with_creations(vec![ok.clone().with_resource_type(0)]),
        3,
    )
    .await;
    assert!(c.read_frame().await.is_none());
    let mut c = login(addr, "admin").await;
    c.send(
        &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()]),
        3,
    )
    .await;
    assert!(c.read_frame().await.is_none(), "a filter of UNKNOWN codes");
    // The broker is still fine, and the two good ACLs are there.
    let d = admin
        .call(
            &describe_all()
                .with_resource_type_filter(resource::ANY)
                .with_pattern_type_filter(pattern::ANY)
                .with_operation(op::ANY)
                .with_permission_type(permission::ANY),
            3,
        )
        .await;
    assert_eq!(d.resources.len(), 2);
    broker.stop().await;

    // ACLs live in the metadata log: after a restart they come back and still decide.
    let broker = SecureBroker::start(&data, &settings(&[])).await;
    let addr = broker.addr("SASL_PLAINTEXT");
    let mut admin = login(addr, "admin").await;
    let d = admin
        .call(
            &describe_all()
                .with_resource_type_filter(resource::ANY)
                .with_pattern_type_filter(pattern::ANY)
                .with_operation(op::ANY)
                .with_permission_type(permission::ANY),
            3,
        )
        .await;
    assert_eq!(d.resources.len(), 2);
    create_topic(&mut admin, "t", 1, &[]).await;
    let mut alice = login(addr, "alice").await;
    assert_eq!(
        list_offsets_code(&mut alice, "t").await,
        0,
        "READ implies DESCRIBE"
    );
    assert_eq!(produce_code(&mut alice, "t").await, 29);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_acl_apis_answer_security_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = SecureBroker::start(
        &dir.path().join("data"),
        &overrides(&["listeners=PLAINTEXT://127.0.0.1:0"]),
    )
    .await;
    let mut c = Client::connect(broker.addr("PLAINTEXT")).await;
    let r = c
        .call(
            &CreateAclsRequest::default().with_creations(vec![acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:a",
                "*",
                op::READ,
                permission::ALLOW,
            )]),
            3,
        )
        .await;
    assert_eq!(r.results[0].error_code, 54);
    let d = c
        .call(
            &describe_all()
                .with_resource_type_filter(resource::ANY)
                .with_pattern_type_filter(pattern::ANY)
                .with_operation(op::ANY)
                .with_permission_type(permission::ANY),
            3,
        )
        .await;
    assert_eq!(d.error_code, 54);
    broker.stop().await;
}

#[test]
fn authorizer_settings_are_checked_at_start_up() {
    let load = |extra: &[&str]| {
        BrokerConfig::load(
            None,
            &overrides(extra),
            Some("/tmp/annal-acl-config".into()),
            None,
        )
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
    };
    let e = load(&["authorizer.class.name=com.example.MyAuthorizer"]).unwrap_err();
    assert!(
        e.contains("authorizer.class.name") && e.contains("StandardAuthorizer"),
        "{e}"
    );
    let e = load(&[AUTHORIZER, "super.users=admin"]).unwrap_err();
    assert!(e.contains("super.users"), "{e}");
    load(&[AUTHORIZER, "super.users=User:admin; User:ANONYMOUS"]).unwrap();
}
