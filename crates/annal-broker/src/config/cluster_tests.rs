//! Cluster settings end to end: real `server.properties` files (Kafka's own, the interop script's, a 3-node
//! cluster's) through [`BrokerConfig::load`], and one test per start-up error, each checking that the message
//! names the setting to fix.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;

/// Loads `text` as a config file, with `--override`s and an optional `--listen`.
fn load_with(text: &str, overrides: &[&str], listen: Option<&str>) -> anyhow::Result<BrokerConfig> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.properties");
    std::fs::write(&path, text).unwrap();
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    BrokerConfig::load(Some(&path), &overrides, None, listen.map(str::to_string))
}

fn load(text: &str) -> BrokerConfig {
    load_with(text, &[], None).unwrap_or_else(|e| panic!("{e:#}\n--- file ---\n{text}"))
}

/// The start-up error for `text`, asserted to name `setting` and to contain `hint`.
fn error(text: &str, setting: &str, hint: &str) -> String {
    let e = match load_with(text, &[], None) {
        Ok(c) => panic!("expected an error naming {setting}, got {:?}", c.cluster),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(setting), "error does not name {setting}: {e}");
    assert!(e.contains(hint), "error lacks '{hint}': {e}");
    e
}

fn ep(host: &str, port: u16) -> Endpoint {
    Endpoint::new(host, port)
}

const VOTERS: &str = "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097";

/// Node `id` (1..=3) of a 3-node combined-mode cluster on loopback: clients on 1909{2,4,6}, controllers on
/// 1909{3,5,7}.
fn combined(id: u16) -> String {
    let client = 19090 + 2 * id;
    let ctrl = client + 1;
    format!(
        "process.roles=broker,controller\nnode.id={id}\ncontroller.quorum.voters={VOTERS}\n\
         listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{ctrl}\n\
         advertised.listeners=PLAINTEXT://127.0.0.1:{client}\ninter.broker.listener.name=PLAINTEXT\n\
         controller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nlog.dirs=/tmp/annal-{id}\n"
    )
}

#[test]
fn zero_configuration_is_a_single_combined_node_that_is_the_only_voter() {
    let c = BrokerConfig::load(None, &[], None, None).unwrap();
    assert_eq!(c.listen, "127.0.0.1:9092");
    assert_eq!(c.advertised, None);
    assert_eq!(c.data_dir, PathBuf::from("annal-data"));
    let k = &c.cluster;
    assert!(k.implicit_single_node);
    assert_eq!(k.roles, ProcessRoles::COMBINED);
    assert_eq!(k.node_id, 0);
    assert_eq!(k.quorum.voter_source, VoterSource::Implicit);
    assert_eq!(
        k.quorum.voters,
        BTreeMap::from([(0, ep("127.0.0.1", 9093))])
    );
    assert!(k.is_voter());
    assert_eq!(k.client_listener().unwrap().bind, ep("127.0.0.1", 9092));
    assert_eq!(k.client_listener().unwrap().name, "PLAINTEXT");
    assert_eq!(k.controller_listener().unwrap().bind, ep("127.0.0.1", 9093));
    assert_eq!(k.controller_listener().unwrap().name, "CONTROLLER");
    assert_eq!(k.inter_broker_listener().unwrap().name, "PLAINTEXT");
    assert_eq!(k.controller_endpoints(), vec![ep("127.0.0.1", 9093)]);
    assert_eq!(k.lease.session_timeout_ms, 9000);
    assert_eq!(k.lease.heartbeat_interval_ms, 2000);
    assert_eq!(k.quorum.election_timeout_ms, 1000);
    assert_eq!(k.quorum.fetch_timeout_ms, 2000);
    assert_eq!(k.replication.offsets_topic_replication_factor, 3);
    assert_eq!(k.replication.replica_lag_time_max_ms, 30_000);
    assert_eq!(k.replication.num_replica_fetchers, 1);
    assert_eq!(k.replication.replica_fetch_max_bytes, 1_048_576);
    assert_eq!(k.replication.replica_fetch_wait_max_ms, 500);
    assert!(!k.replication.unclean_leader_election_enable);
    assert!(k.controlled_shutdown_enable);
    assert_eq!(k.rack, None);
    // DescribeConfigs reports the KRaft settings too, as defaults.
    let d = |k: &str| c.described.get(k).cloned();
    assert_eq!(
        d("process.roles"),
        Some(("broker,controller".into(), Source::Default))
    );
    assert_eq!(
        d("controller.quorum.voters"),
        Some(("0@127.0.0.1:9093".into(), Source::Default))
    );
    assert_eq!(
        d("listeners"),
        Some((
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093".into(),
            Source::Default
        ))
    );
    assert_eq!(
        d("broker.session.timeout.ms"),
        Some(("9000".into(), Source::Default))
    );
    assert_eq!(
        d("inter.broker.listener.name"),
        Some(("PLAINTEXT".into(), Source::Default))
    );
    assert_eq!(
        d("unclean.leader.election.enable"),
        Some(("false".into(), Source::Default))
    );
}

#[test]
fn zero_configuration_flags_keep_working() {
    // Tests bind port 0: the controller listener asks for a free port too.
    let c =
        BrokerConfig::load(None, &[], Some("/tmp/x".into()), Some("127.0.0.1:0".into())).unwrap();
    assert_eq!(c.listen, "127.0.0.1:0");
    assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(
        c.cluster.controller_listener().unwrap().bind,
        ep("127.0.0.1", 0)
    );
    // Another client port moves the controller port with it, and stays on loopback.
    let c = BrokerConfig::load(None, &["node.id=4".into()], None, Some(":9192".into())).unwrap();
    assert_eq!(c.listen, "0.0.0.0:9192");
    assert_eq!(
        c.cluster.controller_listener().unwrap().bind,
        ep("127.0.0.1", 9193)
    );
    assert_eq!(
        c.cluster.quorum.voters,
        BTreeMap::from([(4, ep("127.0.0.1", 9193))])
    );
    assert_eq!(c.described["listeners"].1, Source::Static);
    // --listen replaces the client listener of a file, and keeps its controller listener.
    let c = load_with(&combined(1), &[], Some("127.0.0.1:29092")).unwrap();
    assert_eq!(c.listen, "127.0.0.1:29092");
    assert_eq!(
        c.cluster.controller_listener().unwrap().bind,
        ep("127.0.0.1", 19093)
    );
    let e = BrokerConfig::load(None, &[], None, Some("nowhere".into())).unwrap_err();
    assert!(format!("{e:#}").contains("--listen"), "{e:#}");
}

#[test]
fn a_file_without_process_roles_is_still_a_single_node() {
    // Today's Annal files (and ZooKeeper-era Kafka files): no KRaft settings at all.
    let c =
        load("listeners=PLAINTEXT://:9092\nnum.io.threads=8\nzookeeper.connect=localhost:2181\n");
    assert!(c.cluster.implicit_single_node);
    assert_eq!(c.listen, "0.0.0.0:9092");
    assert_eq!(
        c.cluster.controller_listener().unwrap().bind,
        ep("127.0.0.1", 9093)
    );
    // Its own controller listener, when it names one.
    let c = load(
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9999\ncontroller.listener.names=CONTROLLER\n",
    );
    assert_eq!(
        c.cluster.quorum.voters,
        BTreeMap::from([(0, ep("127.0.0.1", 9999))])
    );
    // The implicit controller port skips a port the file already uses.
    let c = load("listeners=PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9093\nlistener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT\n");
    assert_eq!(
        c.cluster.controller_listener().unwrap().bind,
        ep("127.0.0.1", 9094)
    );
    // A client listener of another name, as single-node Annal accepted: it is the inter-broker listener too.
    let c = load(
        "listeners=CLIENT://127.0.0.1:9092\nlistener.security.protocol.map=CLIENT:PLAINTEXT\n",
    );
    assert_eq!(c.cluster.inter_broker_listener().unwrap().name, "CLIENT");
    assert_eq!(c.listen, "127.0.0.1:9092");
}

/// Kafka's `config/kraft/reconfig-server.properties` (apache/kafka at 1eb7644), which Kafka 4.0 ships as
/// `config/server.properties`, with the two `share.coordinator.*` lines 4.0 added: a KIP-853 combined node whose
/// only bootstrap server is itself (formatted with `kafka-storage format --standalone`).
const KAFKA_4_SERVER_PROPERTIES: &str = include_str!("fixtures/kafka-4-server.properties");
/// Kafka's `config/kraft/broker.properties` and `controller.properties` from the same commit (Kafka 4.0's
/// `config/broker.properties` and `config/controller.properties`).
const KAFKA_4_BROKER_PROPERTIES: &str = include_str!("fixtures/kafka-4-broker.properties");
const KAFKA_4_CONTROLLER_PROPERTIES: &str = include_str!("fixtures/kafka-4-controller.properties");

#[test]
fn kafkas_own_server_properties_starts_unchanged() {
    let c = load(KAFKA_4_SERVER_PROPERTIES);
    let k = &c.cluster;
    assert!(!k.implicit_single_node);
    assert_eq!(k.roles, ProcessRoles::COMBINED);
    assert_eq!(k.node_id, 1);
    assert_eq!(k.quorum.voter_source, VoterSource::Standalone);
    assert_eq!(
        k.quorum.voters,
        BTreeMap::from([(1, ep("localhost", 9093))])
    );
    assert_eq!(k.quorum.bootstrap_servers, vec![ep("localhost", 9093)]);
    let client = k.client_listener().unwrap();
    assert_eq!(client.bind, ep("0.0.0.0", 9092));
    assert_eq!(client.advertised, Some(ep("localhost", 9092)));
    let ctrl = k.controller_listener().unwrap();
    assert_eq!(ctrl.bind, ep("0.0.0.0", 9093));
    assert_eq!(ctrl.advertised, Some(ep("localhost", 9093)));
    assert_eq!(c.listen, "0.0.0.0:9092");
    assert_eq!(c.advertised, Some(("localhost".into(), 9092)));
    assert_eq!(c.data_dir, PathBuf::from("/tmp/kraft-combined-logs"));
    assert_eq!(k.replication.offsets_topic_replication_factor, 1);
    assert_eq!(
        c.described["process.roles"],
        ("broker,controller".into(), Source::Static)
    );
}

#[test]
fn kafkas_own_broker_and_controller_properties_start_unchanged() {
    let b = load(KAFKA_4_BROKER_PROPERTIES).cluster;
    assert_eq!((b.roles.broker, b.roles.controller), (true, false));
    assert_eq!(b.node_id, 2);
    assert_eq!(b.quorum.voter_source, VoterSource::Bootstrap);
    assert!(b.quorum.voters.is_empty() && !b.is_voter());
    assert_eq!(b.controller_endpoints(), vec![ep("localhost", 9093)]);
    assert_eq!(b.controller_listener(), None);
    assert_eq!(b.listeners.controller_names, vec!["CONTROLLER".to_string()]);
    assert_eq!(
        b.inter_broker_listener().unwrap().bind,
        ep("localhost", 9092)
    );

    let c = load(KAFKA_4_CONTROLLER_PROPERTIES);
    let k = &c.cluster;
    assert_eq!((k.roles.broker, k.roles.controller), (false, true));
    assert_eq!(k.quorum.voter_source, VoterSource::Standalone);
    assert_eq!(
        k.quorum.voters,
        BTreeMap::from([(1, ep("localhost", 9093))])
    );
    assert!(k.listeners.broker.is_empty() && k.client_listener().is_none());
    assert_eq!(k.inter_broker_listener(), None);
    // A controller-only node serves the Kafka protocol on its controller listener.
    assert_eq!(c.listen, "0.0.0.0:9093");
}

/// The file scripts/kafka/start.sh writes for the interop suite's real Kafka, with its shell variables filled in.
#[test]
fn the_interop_scripts_kafka_file_starts() {
    let script = include_str!("../../../../scripts/kafka/start.sh");
    let start = script
        .find("<<PROPS\n")
        .expect("start.sh writes server.properties")
        + 8;
    let len = script[start..].find("\nPROPS\n").expect("heredoc end");
    let text = script[start..start + len]
        .replace("$ctrl_port", "19093")
        .replace("$port", "19092")
        .replace("$dir", "/tmp/kafka-interop");
    assert!(!text.contains('$'), "unfilled variable in {text}");
    let c = load(&text);
    assert_eq!(
        c.cluster.quorum.voters,
        BTreeMap::from([(1, ep("127.0.0.1", 19093))])
    );
    assert_eq!(c.cluster.quorum.voter_source, VoterSource::Static);
    assert_eq!(c.listen, "127.0.0.1:19092");
    assert_eq!(c.data_dir, PathBuf::from("/tmp/kafka-interop/data"));
    assert_eq!(c.cluster.replication.offsets_topic_replication_factor, 1);
}

#[test]
fn three_node_combined_cluster_files_agree() {
    let nodes: Vec<ClusterConfig> = (1..=3).map(|id| load(&combined(id)).cluster).collect();
    for (i, k) in nodes.iter().enumerate() {
        let id = i as i32 + 1;
        assert_eq!(k.node_id, id);
        assert_eq!(k.quorum.voter_source, VoterSource::Static);
        assert_eq!(
            k.quorum.voters, nodes[0].quorum.voters,
            "one voter set on every node"
        );
        assert_eq!(k.quorum.voters.len(), 3);
        // What the others call this node's controller at is where it binds.
        assert_eq!(k.quorum.voters[&id], k.controller_listener().unwrap().bind);
        let inter = k.inter_broker_listener().unwrap();
        assert_eq!(
            inter.advertised,
            Some(ep("127.0.0.1", 19090 + 2 * id as u16))
        );
        assert_eq!(k.controller_endpoints().len(), 3);
    }
    let e = load_with(&combined(1), &["default.replication.factor=3"], None).unwrap();
    assert_eq!(
        e.default_replication_factor, 3,
        "a cluster may default to RF 3"
    );
}

#[test]
fn broker_only_and_controller_only_nodes() {
    // Three dedicated controllers and a broker, Kafka's "isolated" mode.
    let controller = |id: u16| {
        format!(
            "process.roles=controller\nnode.id={id}\ncontroller.quorum.voters={VOTERS}\n\
             listeners=CONTROLLER://127.0.0.1:{}\ncontroller.listener.names=CONTROLLER\n",
            19091 + 2 * id
        )
    };
    for id in 1..=3 {
        let c = load(&controller(id));
        let k = &c.cluster;
        assert_eq!((k.roles.broker, k.roles.controller), (false, true));
        assert!(k.is_voter());
        assert!(k.listeners.broker.is_empty());
        assert_eq!(c.listen, format!("127.0.0.1:{}", 19091 + 2 * id));
    }
    let broker = format!(
        "process.roles=broker\nnode.id=4\ncontroller.quorum.voters={VOTERS}\n\
         listeners=PLAINTEXT://127.0.0.1:19100\ncontroller.listener.names=CONTROLLER\nbroker.rack=r1\n"
    );
    let c = load(&broker);
    let k = &c.cluster;
    assert_eq!((k.roles.broker, k.roles.controller), (true, false));
    assert!(!k.is_voter());
    assert_eq!(k.controller_listener(), None);
    assert_eq!(
        k.controller_endpoints(),
        vec![
            ep("127.0.0.1", 19093),
            ep("127.0.0.1", 19095),
            ep("127.0.0.1", 19097)
        ]
    );
    assert_eq!(k.rack.as_deref(), Some("r1"));
    assert_eq!(c.listen, "127.0.0.1:19100");
    assert_eq!(c.described["broker.rack"], ("r1".into(), Source::Static));
}

#[test]
fn settings_honoured_are_no_longer_ignored() {
    for name in [
        "process.roles",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "offsets.topic.replication.factor",
        "num.replica.fetchers",
    ] {
        assert!(!IGNORED_KAFKA_SETTINGS.contains(&name), "{name}");
        assert!(BROKER_SETTINGS.iter().any(|s| s.name == name), "{name}");
    }
    let c = load(&format!(
        "{}broker.session.timeout.ms=12000\nreplica.lag.time.max.ms=10000\nunclean.leader.election.enable=true\n",
        combined(1)
    ));
    assert_eq!(c.cluster.lease.session_timeout_ms, 12_000);
    assert_eq!(c.cluster.replication.replica_lag_time_max_ms, 10_000);
    assert!(c.cluster.replication.unclean_leader_election_enable);
    assert_eq!(
        c.described["broker.session.timeout.ms"],
        ("12000".into(), Source::Static)
    );
}

// One test per start-up error: each names the setting to fix.

#[test]
fn error_node_id_missing_from_voters() {
    let text = combined(1).replace("node.id=1", "node.id=5");
    error(&text, "controller.quorum.voters", "node.id=5");
}

#[test]
fn error_controller_node_without_its_controller_listener() {
    let text = combined(1).replace(",CONTROLLER://127.0.0.1:19093", "");
    error(&text, "controller.listener.names", "no CONTROLLER listener");
    let text = combined(1).replace("controller.listener.names=CONTROLLER\n", "");
    error(&text, "controller.listener.names", "required");
}

#[test]
fn error_broker_node_advertising_or_binding_a_controller_listener() {
    let broker = format!(
        "process.roles=broker\nnode.id=4\ncontroller.quorum.voters={VOTERS}\n\
         listeners=PLAINTEXT://127.0.0.1:19100\ncontroller.listener.names=CONTROLLER\n"
    );
    error(
        &format!("{broker}advertised.listeners=PLAINTEXT://127.0.0.1:19100,CONTROLLER://127.0.0.1:19101\n"),
        "advertised.listeners",
        "controller listener CONTROLLER",
    );
    error(
        &broker.replace(
            "PLAINTEXT://127.0.0.1:19100",
            "PLAINTEXT://127.0.0.1:19100,CONTROLLER://127.0.0.1:19101",
        ),
        "listeners",
        "process.roles=broker runs no controller",
    );
    error(
        &broker.replace("node.id=4", "node.id=2"),
        "controller.quorum.voters",
        "node.id=2",
    );
    error(
        &broker.replace("controller.listener.names=CONTROLLER\n", ""),
        "controller.listener.names",
        "broker-only",
    );
}

#[test]
fn error_duplicate_voters() {
    error(
        &combined(1).replace(VOTERS, "1@127.0.0.1:19093,1@127.0.0.1:19095"),
        "controller.quorum.voters",
        "listed twice",
    );
    error(
        &combined(1).replace(VOTERS, "1@127.0.0.1:19093,2@127.0.0.1:19093"),
        "controller.quorum.voters",
        "share the address",
    );
    error(
        &combined(1).replace(VOTERS, "1@127.0.0.1"),
        "controller.quorum.voters",
        "HOST:PORT",
    );
}

#[test]
fn error_listener_not_in_protocol_map() {
    error(
        &combined(1).replace("CONTROLLER:PLAINTEXT,", ""),
        "listener.security.protocol.map",
        "add CONTROLLER:PLAINTEXT",
    );
    error(
        &combined(1).replace("CONTROLLER:PLAINTEXT", "CONTROLLER:TLS"),
        "listener.security.protocol.map",
        "unknown security protocol",
    );
}

#[test]
fn error_sasl_on_the_controller_listener() {
    // The controller listener may speak SSL (secured_controller_listener); SASL on it is not supported yet.
    for protocol in ["SASL_SSL", "SASL_PLAINTEXT"] {
        let e = error(
            &combined(1).replace("CONTROLLER:PLAINTEXT", &format!("CONTROLLER:{protocol}")),
            "listener.security.protocol.map",
            &format!("is the controller listener and uses {protocol}"),
        );
        assert!(e.contains("CONTROLLER:SSL"), "says what works: {e}");
    }
    // A broker-only node reaches the controllers by the name's protocol: refused there too.
    let broker = format!(
        "process.roles=broker\nnode.id=4\ncontroller.quorum.voters={VOTERS}\n\
         listeners=PLAINTEXT://127.0.0.1:19100\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL\n"
    );
    error(
        &broker,
        "listener.security.protocol.map",
        "is the controller listener and uses SASL_SSL",
    );
}

#[test]
fn secured_controller_listener() {
    // CONTROLLER:SSL with the listener's own settings (Kafka's listener.name.controller.ssl.*): the controller's
    // server side and this node's client side of the quorum and controller channel.
    let ssl = "listener.name.controller.ssl.keystore.type=PEM\n\
               listener.name.controller.ssl.keystore.location=/x/node.pem\n\
               listener.name.controller.ssl.truststore.type=PEM\n\
               listener.name.controller.ssl.truststore.location=/x/ca.pem\n\
               listener.name.controller.ssl.client.auth=required\n";
    let c = load(&(combined(1).replace("CONTROLLER:PLAINTEXT", "CONTROLLER:SSL") + ssl));
    assert_eq!(
        c.cluster.listeners.controller_protocol,
        SecurityProtocol::Ssl
    );
    let tls = c
        .security
        .controller_ssl
        .expect("the controller listener's TLS");
    assert_eq!(tls.client_auth, ClientAuth::Required);
    assert_eq!(
        tls.truststore,
        Some(PemSource::File {
            setting: "listener.name.controller.ssl.truststore.location".into(),
            path: "/x/ca.pem".into()
        })
    );
    assert!(
        !c.security.listeners.contains_key("CONTROLLER"),
        "not served as a broker listener"
    );
    // A PLAINTEXT controller listener has none.
    assert!(load(&combined(1)).security.controller_ssl.is_none());
    // A broker-only node reads the same settings for its connections to the controllers.
    let broker = format!(
        "process.roles=broker\nnode.id=4\ncontroller.quorum.voters={VOTERS}\n\
         listeners=PLAINTEXT://127.0.0.1:19100\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL\n{ssl}"
    );
    let c = load(&broker);
    assert_eq!(
        c.cluster.listeners.controller_protocol,
        SecurityProtocol::Ssl
    );
    assert!(c.security.controller_ssl.is_some());
    // An SSL controller listener needs a keystore, as any SSL listener.
    error(
        &combined(1).replace("CONTROLLER:PLAINTEXT", "CONTROLLER:SSL"),
        "ssl.keystore",
        "PEM",
    );
}

#[test]
fn secured_inter_broker_listener() {
    // SSL: the listener's keystore and truststore are the broker's client side too (files load at start).
    let c = load(&(combined(1).replace("PLAINTEXT:PLAINTEXT", "PLAINTEXT:SSL")
        + "ssl.keystore.type=PEM\nssl.keystore.location=/x/server.pem\nssl.truststore.type=PEM\n\
           ssl.truststore.location=/x/ca.pem\n"));
    assert_eq!(c.cluster.listeners.inter_broker_name, "PLAINTEXT");
    assert!(c.security.inter_broker_sasl.is_none());
    // SASL: the broker logs in with sasl.mechanism.inter.broker.protocol and its JAAS entry's username/password.
    let sasl = combined(1).replace("PLAINTEXT:PLAINTEXT", "PLAINTEXT:SASL_PLAINTEXT")
        + "listener.name.plaintext.sasl.enabled.mechanisms=PLAIN\n\
           listener.name.plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
           required username=\"broker\" password=\"b-secret\" user_broker=\"b-secret\";\n";
    error(&sasl, "sasl.mechanism.inter.broker.protocol", "GSSAPI");
    let c = load(&(sasl.clone() + "sasl.mechanism.inter.broker.protocol=PLAIN\n"));
    let login = c.security.inter_broker_sasl.expect("a SASL login");
    assert_eq!(
        (
            login.mechanism,
            login.username.as_str(),
            login.password.as_str()
        ),
        (SaslMechanism::Plain, "broker", "b-secret")
    );
    assert!(
        !format!("{login:?}").contains("b-secret"),
        "Debug hides the password"
    );
    error(
        &(sasl.clone() + "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n"),
        "sasl.mechanism.inter.broker.protocol",
        "not enabled on the inter-broker listener PLAINTEXT",
    );
    error(
        &(sasl.replace("username=\"broker\" password=\"b-secret\" ", "")
            + "sasl.mechanism.inter.broker.protocol=PLAIN\n"),
        "listener.name.plaintext.plain.sasl.jaas.config",
        "username",
    );
}

#[test]
fn error_inter_broker_listener_not_among_listeners() {
    error(
        &combined(1).replace(
            "inter.broker.listener.name=PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
        ),
        "inter.broker.listener.name",
        "INTERNAL is not one of this broker's listeners",
    );
    // The default (PLAINTEXT) when the listeners have other names, as Kafka refuses too.
    error(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n\
         listeners=CLIENT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT\n",
        "inter.broker.listener.name",
        "(the default)",
    );
}

#[test]
fn error_unknown_process_role() {
    error(
        &combined(1).replace("broker,controller", "broker,leader"),
        "process.roles",
        "leader",
    );
}

#[test]
fn error_two_listeners_on_one_port() {
    error(
        &combined(1).replace(
            "CONTROLLER://127.0.0.1:19093",
            "CONTROLLER://127.0.0.1:19092",
        ),
        "listeners",
        "both use port 19092",
    );
}

#[test]
fn error_quorum_missing_or_dynamic() {
    error(
        &combined(1).replace(&format!("controller.quorum.voters={VOTERS}\n"), ""),
        "controller.quorum.voters",
        "set controller.quorum.voters",
    );
    // KIP-853 with several bootstrap servers: Annal needs the static voters for now.
    let e = error(
        &combined(1).replace(
            &format!("controller.quorum.voters={VOTERS}"),
            "controller.quorum.bootstrap.servers=127.0.0.1:19093,127.0.0.1:19095",
        ),
        "controller.quorum.voters",
        "set controller.quorum.voters",
    );
    assert!(e.contains("KIP-853"), "{e}");
    error(
        &format!("controller.quorum.voters={VOTERS}\n"),
        "controller.quorum.voters",
        "process.roles is not",
    );
}

#[test]
fn error_node_id_required_and_consistent() {
    error(
        &combined(1).replace("node.id=1\n", ""),
        "node.id",
        "required",
    );
    error(
        &format!("{}broker.id=2\n", combined(1)),
        "node.id",
        "differ",
    );
}

#[test]
fn error_voter_address_disagrees_with_controller_listener() {
    error(
        &combined(1).replace(
            "CONTROLLER://127.0.0.1:19093",
            "CONTROLLER://127.0.0.1:19099",
        ),
        "controller.quorum.voters",
        "binds port 19099",
    );
}

#[test]
fn error_bad_advertised_listeners() {
    error(
        &combined(1).replace(
            "advertised.listeners=PLAINTEXT://127.0.0.1:",
            "advertised.listeners=PLAINTEXT://0.0.0.0:",
        ),
        "advertised.listeners",
        "routable",
    );
    error(
        &combined(1).replace(
            "advertised.listeners=PLAINTEXT",
            "advertised.listeners=EXTERNAL",
        ),
        "advertised.listeners",
        "EXTERNAL, which is not in listeners",
    );
}

#[test]
fn error_controller_only_node_with_a_client_listener() {
    error(
        &format!(
            "process.roles=controller\nnode.id=1\ncontroller.quorum.voters={VOTERS}\n\
             listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\n"
        ),
        "listeners",
        "serves only controller listeners",
    );
    let text = format!(
        "process.roles=controller\nnode.id=1\ncontroller.quorum.voters={VOTERS}\n\
         listeners=CONTROLLER://127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\n"
    );
    let e = load_with(&text, &[], Some("127.0.0.1:9092")).unwrap_err();
    assert!(format!("{e:#}").contains("--listen"), "{e:#}");
}

#[test]
fn error_lease_and_fetch_timeouts_that_cannot_work() {
    error(
        &format!("{}broker.heartbeat.interval.ms=9000\n", combined(1)),
        "broker.heartbeat.interval.ms",
        "below broker.session.timeout.ms=9000",
    );
    error(
        &format!("{}replica.fetch.wait.max.ms=40000\n", combined(1)),
        "replica.fetch.wait.max.ms",
        "replica.lag.time.max.ms=30000",
    );
}
