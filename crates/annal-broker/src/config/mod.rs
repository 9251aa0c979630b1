//! Broker configuration: Kafka's `server.properties` names, embedded defaults, overrides.
//!
//! Every setting Annal honours is declared once in [`BROKER_SETTINGS`] with its Kafka name, kind and default, so
//! parsing, validation and DescribeConfigs (broker resource) all read the same table. Kafka settings that make no
//! sense for an Annal node (thread counts, socket buffers, ZooKeeper) are accepted with a warning so that a Kafka
//! user's `server.properties` starts; anything else unknown is an error naming the setting.
//!
//! KRaft's settings (`process.roles`, `node.id`, `controller.quorum.voters`, named `listeners`, ...) resolve into
//! [`ClusterConfig`] (module `cluster`), checked as a whole at start-up; `endpoints` parses Kafka's address
//! syntaxes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};

mod cluster;
#[cfg(test)]
mod cluster_tests;
mod endpoints;
mod security;

pub use cluster::{
    ClusterConfig, LeaseConfig, Listeners, ProcessRoles, QuorumConfig, ReplicationConfig,
    VoterSource, DEFAULT_CLIENT_LISTENER, DEFAULT_CONTROLLER_LISTENER_NAME, DEFAULT_PROTOCOL_MAP,
};
pub use endpoints::{Endpoint, Listener, SecurityProtocol, SettingError};
pub use security::{
    parse_jaas, ClientAuth, JaasEntry, ListenerSecurity, PemSource, SaslMechanism, SaslSettings,
    SecurityConfig, SslSettings,
};

/// What values a setting accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Bool,
    /// A 32-bit integer in `[min, max]`.
    Int {
        min: i64,
        max: i64,
    },
    /// A 64-bit integer in `[min, max]`.
    Long {
        min: i64,
        max: i64,
    },
    /// One of the listed strings.
    Choice(&'static [&'static str]),
    /// Any string (paths, listeners).
    Text,
    /// A comma-separated list whose items are each one of the listed strings.
    List(&'static [&'static str]),
}

impl Kind {
    /// Checks `value` and returns it normalized (trimmed); the error says what is accepted.
    pub fn validate(&self, name: &str, value: &str) -> anyhow::Result<String> {
        let v = value.trim();
        match *self {
            Kind::Bool => match v.to_ascii_lowercase().as_str() {
                "true" | "false" => Ok(v.to_ascii_lowercase()),
                _ => bail!("invalid value '{value}' for {name}: expected true or false"),
            },
            Kind::Int { min, max } | Kind::Long { min, max } => {
                let n: i64 = v.parse().map_err(|_| {
                    anyhow!("invalid value '{value}' for {name}: expected an integer")
                })?;
                if n < min || n > max {
                    bail!("invalid value {n} for {name}: must be between {min} and {max}");
                }
                Ok(n.to_string())
            }
            Kind::Choice(options) => {
                if options.contains(&v) {
                    Ok(v.to_string())
                } else {
                    bail!(
                        "invalid value '{value}' for {name}: expected one of {}",
                        options.join(", ")
                    )
                }
            }
            Kind::Text => Ok(v.to_string()),
            Kind::List(options) => {
                let items: Vec<&str> = v.split(',').map(str::trim).collect();
                for item in &items {
                    if !options.contains(item) {
                        bail!(
                            "invalid value '{value}' for {name}: each item must be one of {}",
                            options.join(", ")
                        );
                    }
                }
                Ok(items.join(","))
            }
        }
    }

    /// Kafka's ConfigType code for DescribeConfigs v3+ (1 BOOLEAN, 2 STRING, 3 INT, 5 LONG, 7 LIST).
    pub fn config_type(&self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Choice(_) | Kind::Text => 2,
            Kind::List(_) => 7,
        }
    }
}

const I32: (i64, i64) = (i32::MIN as i64, i32::MAX as i64);
const fn int(min: i64) -> Kind {
    Kind::Int { min, max: I32.1 }
}
const fn long(min: i64) -> Kind {
    Kind::Long { min, max: i64::MAX }
}

/// One broker setting Annal honours.
pub struct Setting {
    pub name: &'static str,
    pub kind: Kind,
    /// Kafka's default, as Kafka prints it; `None` when the default is computed (e.g. from `listeners`).
    pub default: Option<&'static str>,
}

const fn setting(name: &'static str, kind: Kind, default: &'static str) -> Setting {
    Setting {
        name,
        kind,
        default: Some(default),
    }
}

/// Broker settings Annal honours, with Kafka's names and defaults.
pub const BROKER_SETTINGS: &[Setting] = &[
    setting("node.id", int(0), "0"),
    setting("broker.id", int(0), "0"),
    Setting {
        name: "log.dirs",
        kind: Kind::Text,
        default: None,
    },
    Setting {
        name: "log.dir",
        kind: Kind::Text,
        default: None,
    },
    Setting {
        name: "listeners",
        kind: Kind::Text,
        default: None,
    },
    Setting {
        name: "advertised.listeners",
        kind: Kind::Text,
        default: None,
    },
    setting("num.partitions", int(1), "1"),
    setting(
        "default.replication.factor",
        Kind::Int {
            min: 1,
            max: i16::MAX as i64,
        },
        "1",
    ),
    setting("min.insync.replicas", int(1), "1"),
    setting("auto.create.topics.enable", Kind::Bool, "true"),
    setting("delete.topic.enable", Kind::Bool, "true"),
    setting("message.max.bytes", int(0), "1048588"),
    setting("log.retention.ms", long(-1), "604800000"),
    Setting {
        name: "log.retention.minutes",
        kind: int(-1),
        default: None,
    },
    setting("log.retention.hours", int(-1), "168"),
    setting("log.retention.bytes", long(-1), "-1"),
    setting("log.segment.bytes", int(14), "1073741824"),
    setting("log.roll.ms", long(1), "604800000"),
    setting("log.roll.hours", int(1), "168"),
    setting("log.retention.check.interval.ms", long(1), "300000"),
    setting(
        "log.cleanup.policy",
        Kind::List(&["delete", "compact"]),
        "delete",
    ),
    setting(
        "log.message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
        "CreateTime",
    ),
    setting("log.index.interval.bytes", int(0), "4096"),
    // The log cleaner (compaction).
    setting("log.cleaner.threads", int(0), "1"),
    setting("log.cleaner.dedupe.buffer.size", long(1), "134217728"),
    setting(
        "log.cleaner.io.max.bytes.per.second",
        Kind::Text,
        "1.7976931348623157E308",
    ),
    setting("log.cleaner.backoff.ms", long(0), "15000"),
    setting("log.cleaner.delete.retention.ms", long(0), "86400000"),
    setting("log.cleaner.min.cleanable.ratio", Kind::Text, "0.5"),
    setting("log.cleaner.min.compaction.lag.ms", long(0), "0"),
    setting(
        "log.cleaner.max.compaction.lag.ms",
        long(1),
        "9223372036854775807",
    ),
    setting("log.index.size.max.bytes", int(4), "10485760"),
    // Annal's own: the open-file budget of segment files (annal_log::FileHandles); unset or 0 sizes it from
    // the process's RLIMIT_NOFILE (see `open_files_max`).
    Setting {
        name: "log.open.files.max",
        kind: long(0),
        default: None,
    },
    setting(
        "log.flush.interval.messages",
        long(1),
        "9223372036854775807",
    ),
    setting("log.flush.interval.ms", long(0), "9223372036854775807"),
    setting("socket.request.max.bytes", int(1), "104857600"),
    setting("fetch.max.bytes", int(0), "57671680"),
    setting("max.incremental.fetch.session.cache.slots", int(0), "1000"),
    setting("connections.max.idle.ms", long(1), "600000"),
    // Client quotas (decision 0017-quotas): the windows a client's byte rate is sampled over.
    setting("quota.window.num", int(1), "11"),
    setting("quota.window.size.seconds", int(1), "1"),
    setting("producer.id.expiration.ms", int(1), "86400000"),
    setting("transactional.id.expiration.ms", int(1), "604800000"),
    // Transaction coordinator.
    setting("transaction.state.log.num.partitions", int(1), "50"),
    setting(
        "transaction.state.log.replication.factor",
        Kind::Int {
            min: 1,
            max: i16::MAX as i64,
        },
        "3",
    ),
    setting(
        "transaction.state.log.min.isr",
        Kind::Int {
            min: 1,
            max: i16::MAX as i64,
        },
        "2",
    ),
    setting("transaction.state.log.segment.bytes", int(1), "104857600"),
    setting("transaction.max.timeout.ms", int(1), "900000"),
    // The `transaction.version` feature level ApiVersions finalizes (Kafka sets it with kafka-features / at format):
    // 2 = KIP-890 part 2 (Kafka 4.x's default), which Java clients 4.x then use; 0 or 1 keeps them at version 1.
    setting("transaction.version", Kind::Int { min: 0, max: 2 }, "2"),
    // KIP-890 part 1: partition leaders check with the coordinator before a producer's first transactional batch.
    setting(
        "transaction.partition.verification.enable",
        Kind::Bool,
        "true",
    ),
    setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        int(1),
        "10000",
    ),
    setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        int(1),
        "3600000",
    ),
    // Group coordinator.
    setting("offsets.topic.num.partitions", int(1), "50"),
    setting("offsets.topic.segment.bytes", int(1), "104857600"),
    setting("offsets.commit.timeout.ms", int(1), "5000"),
    setting("group.initial.rebalance.delay.ms", int(0), "3000"),
    setting("group.min.session.timeout.ms", int(0), "6000"),
    setting("group.max.session.timeout.ms", int(0), "1800000"),
    setting("group.max.size", int(1), "2147483647"),
    setting("offsets.retention.minutes", int(1), "10080"),
    setting("offsets.retention.check.interval.ms", long(1), "600000"),
    setting("offset.metadata.max.bytes", int(0), "4096"),
    setting("group.consumer.session.timeout.ms", int(1), "45000"),
    setting("group.consumer.heartbeat.interval.ms", int(1), "5000"),
    // KRaft: roles, quorum and listeners (resolved and cross-checked in `cluster`).
    computed("process.roles", Kind::List(&["broker", "controller"])),
    computed("controller.quorum.voters", Kind::Text),
    computed("controller.quorum.bootstrap.servers", Kind::Text),
    computed("controller.listener.names", Kind::Text),
    setting("inter.broker.listener.name", Kind::Text, "PLAINTEXT"),
    setting(
        "listener.security.protocol.map",
        Kind::Text,
        cluster::DEFAULT_PROTOCOL_MAP,
    ),
    computed("broker.rack", Kind::Text),
    setting("broker.session.timeout.ms", int(1), "9000"),
    setting("broker.heartbeat.interval.ms", int(1), "2000"),
    setting("controller.quorum.election.timeout.ms", int(1), "1000"),
    setting("controller.quorum.fetch.timeout.ms", int(1), "2000"),
    setting("controlled.shutdown.enable", Kind::Bool, "true"),
    // Controller: preferred leader rebalancing.
    setting("auto.leader.rebalance.enable", Kind::Bool, "true"),
    setting("leader.imbalance.check.interval.seconds", long(1), "300"),
    setting(
        "leader.imbalance.per.broker.percentage",
        Kind::Int { min: 0, max: 100 },
        "10",
    ),
    // Replication.
    setting(
        "offsets.topic.replication.factor",
        Kind::Int {
            min: 1,
            max: i16::MAX as i64,
        },
        "3",
    ),
    setting("replica.lag.time.max.ms", long(1), "30000"),
    setting("num.replica.fetchers", int(1), "1"),
    setting("replica.fetch.max.bytes", int(0), "1048576"),
    setting("replica.fetch.wait.max.ms", int(0), "500"),
    setting("replica.fetch.min.bytes", int(1), "1"),
    setting("replica.fetch.response.max.bytes", int(0), "10485760"),
    setting("replica.fetch.backoff.ms", int(0), "1000"),
    setting("unclean.leader.election.enable", Kind::Bool, "false"),
    // Security (`security`; per listener: listener.name.<name>.<setting>).
    setting("ssl.keystore.type", Kind::Text, "JKS"),
    computed("ssl.keystore.location", Kind::Text),
    computed("ssl.keystore.password", Kind::Text),
    computed("ssl.keystore.certificate.chain", Kind::Text),
    computed("ssl.keystore.key", Kind::Text),
    computed("ssl.key.password", Kind::Text),
    setting("ssl.truststore.type", Kind::Text, "JKS"),
    computed("ssl.truststore.location", Kind::Text),
    computed("ssl.truststore.password", Kind::Text),
    computed("ssl.truststore.certificates", Kind::Text),
    setting(
        "ssl.client.auth",
        Kind::Choice(&["none", "requested", "required"]),
        "none",
    ),
    setting("ssl.enabled.protocols", Kind::Text, "TLSv1.2,TLSv1.3"),
    setting("ssl.protocol", Kind::Text, "TLSv1.3"),
    setting("ssl.endpoint.identification.algorithm", Kind::Text, "https"),
    setting("sasl.enabled.mechanisms", Kind::Text, "GSSAPI"),
    setting("sasl.mechanism.inter.broker.protocol", Kind::Text, "GSSAPI"),
    setting(
        "security.inter.broker.protocol",
        Kind::Choice(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
        "PLAINTEXT",
    ),
    setting("sasl.server.max.receive.size", int(1), "524288"),
    setting("connection.failed.authentication.delay.ms", int(0), "100"),
    setting("authorizer.class.name", Kind::Text, ""),
    setting("super.users", Kind::Text, ""),
    setting("allow.everyone.if.no.acl.found", Kind::Bool, "false"),
    // Operations (Annal's own): the HTTP listener, lag health, the retention guard (`crate::ops`).
    setting("http.listen", Kind::Text, crate::ops::DEFAULT_HTTP_LISTEN),
    setting("lag.window.commits", Kind::Int { min: 1, max: 1000 }, "10"),
    setting("lag.retention.warning.ms", long(0), "3600000"),
    setting("lag.metrics.per.partition", Kind::Bool, "false"),
];

/// A setting whose default is computed (from other settings or the node's roles), so the table has none.
const fn computed(name: &'static str, kind: Kind) -> Setting {
    Setting {
        name,
        kind,
        default: None,
    }
}

/// A setting's effective text: the explicit value, else the table's default.
pub(crate) fn effective(explicit: &BTreeMap<String, String>, name: &str) -> Option<String> {
    explicit.get(name).cloned().or_else(|| {
        BROKER_SETTINGS
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.default.map(str::to_string))
    })
}

/// Kafka settings that have no effect on an Annal node; accepted (with a warning) so a Kafka
/// `server.properties` can be used as is.
pub const IGNORED_KAFKA_SETTINGS: &[&str] = &[
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir",
    "zookeeper.connect",
    "zookeeper.connection.timeout.ms",
    "log.cleaner.enable",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
];

/// Where a resolved setting's value came from (Kafka's DescribeConfigs source codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Set in the config file or an override: STATIC_BROKER_CONFIG (4).
    Static,
    /// Kafka's default: DEFAULT_CONFIG (5).
    Default,
}

/// Most fetcher tasks per source broker (`num.replica.fetchers` is capped here).
pub const REPLICA_FETCHERS_MAX: i64 = 16;

/// How followers fetch and when the leader drops them from the ISR, Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct ReplicaFetchConfig {
    /// `num.replica.fetchers`: fetcher tasks per source broker; partitions are spread over them by hash.
    pub num_fetchers: usize,
    /// `replica.fetch.max.bytes`: per partition per fetch (the first batch is sent whole even if larger).
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per fetch response.
    pub fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`: how long the leader may hold a follower's fetch for new data.
    pub fetch_wait_max_ms: i32,
    /// `replica.fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after a failed fetch.
    pub fetch_backoff_ms: u64,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub lag_time_max_ms: i64,
}

/// The broker's resolved configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where partitions, metadata and the cluster id live.
    pub data_dir: PathBuf,
    /// The cluster id a new data directory gets (`annal serve --cluster-id`); a random one when `None` on a
    /// single node. An existing directory must hold the same id.
    pub cluster_id: Option<String>,
    /// `HOST:PORT` to serve the Kafka protocol on: the client listener ([`ClusterConfig::client_listener`]), or
    /// on a controller-only node its controller listener. The full set of listeners is in `cluster.listeners`.
    pub listen: String,
    /// `HOST:PORT` clients are told to connect to (that listener's `advertised.listeners` entry); `None` means
    /// the listener's bound address (see [`Listener::advertised_endpoint`]).
    pub advertised: Option<(String, u16)>,
    pub node_id: i32,
    /// Roles, quorum, named listeners, lease and replication settings, resolved and cross-checked.
    pub cluster: ClusterConfig,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub min_insync_replicas: i32,
    pub auto_create_topics: bool,
    pub delete_topic_enable: bool,
    pub message_max_bytes: i32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: i32,
    pub roll_ms: i64,
    pub retention_check_interval_ms: i64,
    pub cleanup_policy: String,
    pub message_timestamp_type: String,
    pub index_interval_bytes: i32,
    pub segment_index_bytes: i32,
    pub flush_messages: i64,
    pub flush_ms: i64,
    /// `log.open.files.max` (Annal's own): the most segment files (log, index, timeindex, txnindex,
    /// keyindex) held open at once by all partitions; the least recently used are closed and reopened on
    /// demand. Unset or 0: the soft RLIMIT_NOFILE less 1024 for sockets and other files
    /// ([`annal_log::FileHandles::default_limit`]).
    pub open_files_max: usize,
    pub socket_request_max_bytes: i32,
    /// `fetch.max.bytes`: the most a fetch response carries, whatever the client asks (one batch may exceed it).
    pub fetch_max_bytes: i32,
    /// `max.incremental.fetch.session.cache.slots`: KIP-227 sessions kept; 0 serves every fetch sessionless.
    pub fetch_session_slots: usize,
    /// How followers fetch and when the leader drops them from the ISR (`replica.*`).
    pub replica_fetch: ReplicaFetchConfig,
    pub connections_max_idle_ms: i64,
    /// `quota.window.num` and `quota.window.size.seconds`: how client byte rates are sampled.
    pub quota: crate::quota::QuotaSettings,
    pub producer_id_expiration_ms: i64,
    /// The log cleaner's settings (`log.cleaner.*`).
    pub cleaner: CleanerSettings,
    /// The group coordinator's settings (`offsets.*`, `group.*`, `lag.window.commits`).
    pub groups: crate::group::GroupConfig,
    /// The HTTP listener, lag health and the retention guard (`http.listen`, `lag.*`).
    pub ops: crate::ops::OpsConfig,
    /// The transaction coordinator's settings (`transaction.*`, `transactional.id.expiration.ms`).
    pub transactions: crate::txn::TxnConfig,
    /// TLS and SASL per broker listener (`ssl.*`, `sasl.*`, `listener.name.<name>.*`).
    pub security: SecurityConfig,
    /// Every honoured setting's effective value and source, for DescribeConfigs on the broker resource.
    /// Secrets (passwords, keys, JAAS configs) are never in it.
    pub described: BTreeMap<String, (String, Source)>,
}

/// The open-file budget `log.open.files.max` asks for: `configured` if positive (at least
/// [`annal_log::FILE_HANDLES_MIN`]), else sized from the process's soft RLIMIT_NOFILE.
fn open_files_max(configured: i64) -> usize {
    match usize::try_from(configured) {
        Ok(n) if n > 0 => n.max(annal_log::FILE_HANDLES_MIN),
        _ => annal_log::FileHandles::default_limit(),
    }
}

/// `log.cleaner.*`: the background cleaner of compacted topics (`log_cleaner.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerSettings {
    /// `log.cleaner.threads`: passes that run at once; 0 disables cleaning.
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: key-map memory of all threads together.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.io.max.bytes.per.second`: read plus write rate of all threads together.
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms`: sleep when no log needs cleaning.
    pub backoff_ms: i64,
}

impl BrokerConfig {
    /// Builds the configuration from embedded defaults, then `config_file` (server.properties format), then each
    /// `key=value` in `overrides`, then the explicit `data_dir` and `listen` flags. Unknown or invalid settings
    /// are an error that names the setting.
    pub fn load(
        config_file: Option<&Path>,
        overrides: &[String],
        data_dir: Option<PathBuf>,
        listen: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut explicit: BTreeMap<String, String> = BTreeMap::new();
        if let Some(path) = config_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            for (line_no, key, value) in parse_properties(&text) {
                set(&mut explicit, &key, &value)
                    .with_context(|| format!("{}:{line_no}", path.display()))?;
            }
        }
        for entry in overrides {
            let (key, value) = entry.split_once('=').ok_or_else(|| {
                anyhow!("invalid --override '{entry}': expected key=value, e.g. --override num.partitions=3")
            })?;
            set(&mut explicit, key.trim(), value).with_context(|| format!("--override {entry}"))?;
        }
        Self::resolve(explicit, data_dir, listen)
    }

    fn resolve(
        explicit: BTreeMap<String, String>,
        data_dir: Option<PathBuf>,
        listen: Option<String>,
    ) -> anyhow::Result<Self> {
        let get = |name: &str| effective(&explicit, name);
        let num = |name: &str| -> i64 { get(name).and_then(|v| v.parse().ok()).unwrap_or(0) };

        let node_id = if explicit.contains_key("node.id") {
            num("node.id")
        } else {
            num("broker.id")
        };
        let dirs = explicit.get("log.dirs").or_else(|| explicit.get("log.dir"));
        let data_dir = match (data_dir, dirs) {
            (Some(d), _) => d,
            (None, Some(dirs)) => {
                let list: Vec<&str> = dirs
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                if list.len() != 1 {
                    bail!("log.dirs='{dirs}': Annal stores a node's data in exactly one directory; give one path");
                }
                PathBuf::from(list[0])
            }
            (None, None) => PathBuf::from("annal-data"),
        };
        let (cluster, cluster_described) =
            cluster::resolve(&explicit, listen.as_deref(), node_id as i32)?;
        let served = cluster
            .client_listener()
            .or_else(|| cluster.controller_listener())
            .ok_or_else(|| anyhow!("listeners: this node has no listener to serve"))?;
        let listen = served.bind.to_string();
        let advertised = served.advertised.clone().map(|e| (e.host, e.port));
        let mut security = security::resolve(
            &explicit,
            &cluster.listeners.broker,
            cluster
                .listeners
                .controller_names
                .first()
                .map(|n| (n.as_str(), cluster.listeners.controller_protocol)),
        )?;
        security.inter_broker_sasl = security::inter_broker_sasl(
            &explicit,
            &security,
            &cluster.listeners.inter_broker_name,
        )?;
        // Kafka's precedence: log.retention.ms, then .minutes, then .hours.
        let retention_ms = if explicit.contains_key("log.retention.ms") {
            num("log.retention.ms")
        } else if let Some(m) = explicit.get("log.retention.minutes") {
            let m: i64 = m.parse().unwrap_or(0);
            if m < 0 {
                -1
            } else {
                m * 60_000
            }
        } else if explicit.contains_key("log.retention.hours") {
            let h = num("log.retention.hours");
            if h < 0 {
                -1
            } else {
                h * 3_600_000
            }
        } else {
            num("log.retention.ms")
        };
        let roll_ms = if explicit.contains_key("log.roll.ms") {
            num("log.roll.ms")
        } else if explicit.contains_key("log.roll.hours") {
            num("log.roll.hours") * 3_600_000
        } else {
            num("log.roll.ms")
        };
        let replication_factor = num("default.replication.factor");
        if replication_factor > 1 && cluster.implicit_single_node {
            bail!("default.replication.factor={replication_factor} cannot be met: this Annal node is a single broker; use 1 (or configure a cluster with process.roles and controller.quorum.voters)");
        }

        let mut described = BTreeMap::new();
        for s in BROKER_SETTINGS {
            if security::is_sensitive(s.name) {
                continue;
            }
            let (value, source) = match explicit.get(s.name) {
                Some(v) => (v.clone(), Source::Static),
                None => match s.default {
                    Some(d) => (d.to_string(), Source::Default),
                    None => continue,
                },
            };
            described.insert(s.name.to_string(), (value, source));
        }
        described.insert(
            "log.retention.ms".into(),
            (
                retention_ms.to_string(),
                source_of(&explicit, "log.retention"),
            ),
        );
        described.insert(
            "log.roll.ms".into(),
            (roll_ms.to_string(), source_of(&explicit, "log.roll")),
        );
        described.insert(
            "node.id".into(),
            (node_id.to_string(), source_of(&explicit, "node.id")),
        );
        described.insert(
            "broker.id".into(),
            (node_id.to_string(), source_of(&explicit, "broker.id")),
        );
        let open_files_max = open_files_max(num("log.open.files.max"));
        described.insert(
            "log.open.files.max".into(),
            (
                open_files_max.to_string(),
                source_of(&explicit, "log.open.files.max"),
            ),
        );
        described.insert(
            "log.dirs".into(),
            (data_dir.display().to_string(), Source::Static),
        );
        for (name, value, source) in cluster_described {
            described.insert(name.to_string(), (value, source));
        }

        Ok(BrokerConfig {
            cluster_id: None,
            data_dir,
            listen,
            advertised,
            node_id: node_id as i32,
            cluster,
            num_partitions: num("num.partitions") as i32,
            default_replication_factor: replication_factor as i16,
            min_insync_replicas: num("min.insync.replicas") as i32,
            auto_create_topics: get("auto.create.topics.enable").as_deref() == Some("true"),
            delete_topic_enable: get("delete.topic.enable").as_deref() == Some("true"),
            message_max_bytes: num("message.max.bytes") as i32,
            retention_ms,
            retention_bytes: num("log.retention.bytes"),
            segment_bytes: num("log.segment.bytes") as i32,
            roll_ms,
            retention_check_interval_ms: num("log.retention.check.interval.ms"),
            cleanup_policy: get("log.cleanup.policy").unwrap_or_default(),
            message_timestamp_type: get("log.message.timestamp.type").unwrap_or_default(),
            index_interval_bytes: num("log.index.interval.bytes") as i32,
            segment_index_bytes: num("log.index.size.max.bytes") as i32,
            flush_messages: num("log.flush.interval.messages"),
            flush_ms: num("log.flush.interval.ms"),
            open_files_max,
            socket_request_max_bytes: num("socket.request.max.bytes") as i32,
            fetch_max_bytes: num("fetch.max.bytes") as i32,
            fetch_session_slots: num("max.incremental.fetch.session.cache.slots") as usize,
            replica_fetch: ReplicaFetchConfig {
                num_fetchers: num("num.replica.fetchers").clamp(1, REPLICA_FETCHERS_MAX) as usize,
                fetch_max_bytes: num("replica.fetch.max.bytes") as i32,
                fetch_response_max_bytes: num("replica.fetch.response.max.bytes") as i32,
                fetch_wait_max_ms: num("replica.fetch.wait.max.ms") as i32,
                fetch_min_bytes: num("replica.fetch.min.bytes") as i32,
                fetch_backoff_ms: num("replica.fetch.backoff.ms") as u64,
                lag_time_max_ms: num("replica.lag.time.max.ms"),
            },
            connections_max_idle_ms: num("connections.max.idle.ms"),
            quota: crate::quota::QuotaSettings {
                window_num: num("quota.window.num").max(1) as usize,
                window_size_seconds: num("quota.window.size.seconds").max(1),
            },
            producer_id_expiration_ms: num("producer.id.expiration.ms"),
            cleaner: CleanerSettings {
                threads: num("log.cleaner.threads").max(0) as usize,
                dedupe_buffer_size: num("log.cleaner.dedupe.buffer.size").max(1) as u64,
                io_max_bytes_per_second: get("log.cleaner.io.max.bytes.per.second")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|v| *v > 0.0)
                    .unwrap_or(f64::MAX),
                backoff_ms: num("log.cleaner.backoff.ms").max(0),
            },
            groups: crate::group::GroupConfig {
                offsets_topic_num_partitions: num("offsets.topic.num.partitions") as u32,
                offsets_topic_segment_bytes: num("offsets.topic.segment.bytes"),
                offsets_commit_timeout_ms: num("offsets.commit.timeout.ms") as u64,
                initial_rebalance_delay_ms: num("group.initial.rebalance.delay.ms") as u64,
                min_session_timeout_ms: num("group.min.session.timeout.ms") as i32,
                max_session_timeout_ms: num("group.max.session.timeout.ms") as i32,
                max_size: num("group.max.size") as u32,
                offsets_retention_ms: num("offsets.retention.minutes").saturating_mul(60_000),
                offsets_retention_check_interval_ms: num("offsets.retention.check.interval.ms")
                    as u64,
                offset_metadata_max_bytes: num("offset.metadata.max.bytes") as usize,
                consumer_session_timeout_ms: num("group.consumer.session.timeout.ms") as i32,
                consumer_heartbeat_interval_ms: num("group.consumer.heartbeat.interval.ms") as i32,
                lag_window_commits: num("lag.window.commits").max(1) as usize,
                ..crate::group::GroupConfig::default()
            },
            ops: crate::ops::OpsConfig {
                http_listen: get("http.listen").filter(|v| !v.trim().is_empty()),
                http_listen_explicit: explicit.contains_key("http.listen"),
                lag_retention_warning_ms: num("lag.retention.warning.ms"),
                lag_metrics_per_partition: get("lag.metrics.per.partition").as_deref()
                    == Some("true"),
            },
            transactions: crate::txn::TxnConfig {
                num_partitions: num("transaction.state.log.num.partitions") as u32,
                replication_factor: num("transaction.state.log.replication.factor")
                    .clamp(1, i16::MAX as i64) as i16,
                min_isr: num("transaction.state.log.min.isr").clamp(1, i16::MAX as i64) as i16,
                segment_bytes: num("transaction.state.log.segment.bytes"),
                max_timeout_ms: num("transaction.max.timeout.ms").clamp(1, i32::MAX as i64) as i32,
                partition_verification: get("transaction.partition.verification.enable").as_deref()
                    == Some("true"),
                transaction_version: num("transaction.version").clamp(0, 2) as i16,
                id_expiration_ms: num("transactional.id.expiration.ms"),
                abort_timed_out_interval_ms: num(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                ) as u64,
                remove_expired_interval_ms: num(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                ) as u64,
                ..crate::txn::TxnConfig::default()
            },
            security,
            described,
        })
    }
}

fn source_of(explicit: &BTreeMap<String, String>, prefix: &str) -> Source {
    if explicit.keys().any(|k| k.starts_with(prefix)) {
        Source::Static
    } else {
        Source::Default
    }
}

/// Validates and records one `key=value`; unknown keys are an error unless Kafka-only and harmless.
fn set(explicit: &mut BTreeMap<String, String>, key: &str, value: &str) -> anyhow::Result<()> {
    if let Some(s) = BROKER_SETTINGS.iter().find(|s| s.name == key) {
        let v = s.kind.validate(key, value)?;
        explicit.insert(key.to_string(), v);
        Ok(())
    } else if key.starts_with("listener.name.") {
        let v = match security::listener_setting(key).map_err(|e| anyhow!(e))? {
            Some(base) => match BROKER_SETTINGS.iter().find(|s| s.name == base) {
                Some(s) => s.kind.validate(key, value)?,
                None => value.trim().to_string(),
            },
            None => value.trim().to_string(),
        };
        explicit.insert(key.to_string(), v);
        Ok(())
    } else if IGNORED_KAFKA_SETTINGS.contains(&key) {
        tracing::warn!(
            setting = key,
            "Kafka setting has no effect on an Annal node; ignored"
        );
        Ok(())
    } else {
        let close: Vec<&str> = BROKER_SETTINGS
            .iter()
            .map(|s| s.name)
            .filter(|n| {
                n.split('.')
                    .any(|part| part.len() > 3 && key.contains(part))
            })
            .take(3)
            .collect();
        let hint = if close.is_empty() {
            String::new()
        } else {
            format!(" (did you mean {}?)", close.join(" or "))
        };
        bail!("unknown setting '{key}'{hint}; Annal uses Kafka's broker setting names")
    }
}

/// Parses Java properties text: `key=value` or `key: value`, `#`/`!` comments, `\` line continuations.
/// Returns (line number, key, value).
pub fn parse_properties(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        let (start, mut logical) = match pending.take() {
            Some((start, acc)) => (start, acc + line),
            None => {
                if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                    continue;
                }
                (i + 1, line.to_string())
            }
        };
        if logical.ends_with('\\') && !logical.ends_with("\\\\") {
            logical.pop();
            pending = Some((start, logical));
            continue;
        }
        let logical = logical.trim_end();
        let split = logical.find(['=', ':']);
        let (key, value) = match split {
            Some(p) => (&logical[..p], &logical[p + 1..]),
            None => (logical, ""),
        };
        out.push((start, key.trim().to_string(), value.trim().to_string()));
    }
    if let Some((start, acc)) = pending {
        if let Some(p) = acc.find(['=', ':']) {
            out.push((
                start,
                acc[..p].trim().to_string(),
                acc[p + 1..].trim().to_string(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let c = BrokerConfig::load(None, &[], None, None).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9092");
        assert_eq!(c.num_partitions, 1);
        assert_eq!(c.message_max_bytes, 1_048_588);
        assert_eq!(c.retention_ms, 168 * 3_600_000);
        assert_eq!(c.socket_request_max_bytes, 104_857_600);
        assert!(c.auto_create_topics);
        assert_eq!(c.ops.http_listen.as_deref(), Some("127.0.0.1:9644"));
        assert!(!c.ops.http_listen_explicit);
        assert_eq!(c.ops.lag_retention_warning_ms, 3_600_000);
        assert!(!c.ops.lag_metrics_per_partition);
        assert_eq!(c.groups.lag_window_commits, 10);
    }

    #[test]
    fn the_http_listener_can_be_moved_or_turned_off() {
        let c =
            BrokerConfig::load(None, &["http.listen=0.0.0.0:19644".into()], None, None).unwrap();
        assert_eq!(c.ops.http_listen.as_deref(), Some("0.0.0.0:19644"));
        assert!(c.ops.http_listen_explicit);
        let c = BrokerConfig::load(None, &["http.listen=".into()], None, None).unwrap();
        assert_eq!(c.ops.http_listen, None);
        let c = BrokerConfig::load(
            None,
            &[
                "lag.window.commits=3".into(),
                "lag.retention.warning.ms=5000".into(),
            ],
            None,
            None,
        )
        .unwrap();
        assert_eq!(c.groups.lag_window_commits, 3);
        assert_eq!(c.ops.lag_retention_warning_ms, 5000);
        assert!(BrokerConfig::load(None, &["lag.window.commits=0".into()], None, None).is_err());
    }

    #[test]
    fn file_then_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.properties");
        std::fs::write(
            &path,
            "# comment\nnum.partitions=3\nlog.retention.hours = 1\nnum.io.threads=8\nlisteners=PLAINTEXT://:9093\nlog.dirs=/tmp/x\n",
        )
        .unwrap();
        let c = BrokerConfig::load(Some(&path), &["num.partitions=5".into()], None, None).unwrap();
        assert_eq!(c.num_partitions, 5);
        assert_eq!(c.retention_ms, 3_600_000);
        assert_eq!(c.listen, "0.0.0.0:9093");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(
            c.described["num.partitions"],
            ("5".to_string(), Source::Static)
        );
    }

    #[test]
    fn kafka_kraft_server_properties_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.properties");
        std::fs::write(
            &path,
            "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19093\n\
             listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:19092\ninter.broker.listener.name=PLAINTEXT\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nlog.dirs=/tmp/kraft\n\
             offsets.topic.replication.factor=1\ngroup.initial.rebalance.delay.ms=0\n",
        )
        .unwrap();
        let c = BrokerConfig::load(Some(&path), &[], None, None).unwrap();
        assert_eq!(c.listen, "127.0.0.1:19092");
        assert_eq!(c.advertised, Some(("127.0.0.1".to_string(), 19092)));
        assert_eq!(c.node_id, 1);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/kraft"));
        let e =
            BrokerConfig::load(None, &["listeners=SSL://:9093".into()], None, None).unwrap_err();
        // An SSL listener (the inter-broker one here) needs Kafka's PEM keystore settings.
        assert!(format!("{e:#}").contains("Annal reads PEM only"), "{e:#}");
    }

    #[test]
    fn unknown_and_invalid_settings_are_errors() {
        let e = BrokerConfig::load(None, &["num.partition=3".into()], None, None).unwrap_err();
        assert!(
            format!("{e:#}").contains("unknown setting 'num.partition'"),
            "{e:#}"
        );
        let e = BrokerConfig::load(None, &["num.partitions=zero".into()], None, None).unwrap_err();
        assert!(format!("{e:#}").contains("expected an integer"), "{e:#}");
        let e = BrokerConfig::load(None, &["num.partitions=0".into()], None, None).unwrap_err();
        assert!(format!("{e:#}").contains("between 1"), "{e:#}");
        let e = BrokerConfig::load(None, &["auto.create.topics.enable=yes".into()], None, None)
            .unwrap_err();
        assert!(format!("{e:#}").contains("true or false"), "{e:#}");
        let e = BrokerConfig::load(None, &["default.replication.factor=3".into()], None, None)
            .unwrap_err();
        assert!(format!("{e:#}").contains("single broker"), "{e:#}");
        assert!(BrokerConfig::load(None, &["novalue".into()], None, None).is_err());
    }
}
