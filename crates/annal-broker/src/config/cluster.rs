//! This node's place in the cluster, resolved from KRaft's settings: process roles, node id, the controller
//! quorum's voters, named listeners and what each advertises, and the lease and replication settings.
//!
//! [`ClusterConfig`] is built once at start-up by [`super::BrokerConfig::load`] and checked as a whole: every rule
//! that relates one setting to another (a controller must be one of the voters, a broker must not bind a
//! controller listener, ...) lives in [`resolve`] and fails with a [`SettingError`] naming the setting to fix.
//! Nothing here opens a socket or a file.
//!
//! Zero configuration (no `process.roles`) is a single node with both roles that is the only voter: its client
//! listener is `listeners` / `--listen` (default `PLAINTEXT://127.0.0.1:9092`) and its controller listener is
//! `CONTROLLER://127.0.0.1:<client port + 1>` (9093 by default, as in Kafka's own examples; port 0 when the
//! client port is 0), unless the file names one through `controller.listener.names`.

use std::collections::BTreeMap;

use super::endpoints::{
    normalise_listener_name, parse_host_port, parse_listener_list, parse_name_list,
    parse_protocol_map, parse_servers, parse_voters, Endpoint, Listener, ListenerEntry,
    SecurityProtocol, SettingError,
};
use super::{effective, Source};

/// Kafka's default `listener.security.protocol.map`.
pub const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";
/// The client listener when neither `listeners` nor `--listen` says otherwise (loopback: safe by default).
pub const DEFAULT_CLIENT_LISTENER: &str = "PLAINTEXT://127.0.0.1:9092";
/// The controller listener name zero configuration uses, as Kafka's example files do.
pub const DEFAULT_CONTROLLER_LISTENER_NAME: &str = "CONTROLLER";

/// Which of Kafka's roles this process plays (`process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    pub broker: bool,
    pub controller: bool,
}

impl ProcessRoles {
    pub const COMBINED: ProcessRoles = ProcessRoles {
        broker: true,
        controller: true,
    };

    /// Kafka's spelling, e.g. `broker,controller`.
    pub fn as_setting(self) -> &'static str {
        match (self.broker, self.controller) {
            (true, true) => "broker,controller",
            (true, false) => "broker",
            (false, true) => "controller",
            (false, false) => "",
        }
    }
}

/// Where the voter set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoterSource {
    /// Zero configuration: this node alone.
    Implicit,
    /// `controller.quorum.voters`.
    Static,
    /// KIP-853 standalone: no static voters, and `controller.quorum.bootstrap.servers` is just this node's own
    /// controller endpoint (Kafka 4's default `server.properties`, formatted with `kafka-storage format
    /// --standalone`). This node is the only voter, with its `node.id`.
    Standalone,
    /// A broker-only node given only `controller.quorum.bootstrap.servers`: the voters' ids are learnt from the
    /// quorum; `voters` is empty and brokers contact the bootstrap servers.
    Bootstrap,
}

/// The controller quorum, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// Voter node id -> the controller endpoint other nodes connect to. Empty only with [`VoterSource::Bootstrap`].
    pub voters: BTreeMap<i32, Endpoint>,
    pub voter_source: VoterSource,
    /// `controller.quorum.bootstrap.servers`, as given (may be empty).
    pub bootstrap_servers: Vec<Endpoint>,
    /// `controller.quorum.election.timeout.ms` (1000).
    pub election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms` (2000): a follower that hears nothing for this long starts an election.
    pub fetch_timeout_ms: u64,
}

/// This node's listeners, split by role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// Client-facing listeners (every listener not named in `controller.listener.names`), in `listeners` order.
    /// Empty for a controller-only node; never empty for a node with the broker role.
    pub broker: Vec<Listener>,
    /// This node's controller listeners, in `controller.listener.names` order. Empty for a broker-only node; never
    /// empty for a node with the controller role.
    pub controller: Vec<Listener>,
    /// `controller.listener.names`: on a broker-only node, the first one is the name (and protocol) it uses to
    /// reach the controllers.
    pub controller_names: Vec<String>,
    /// The security protocol of the first of `controller_names` (PLAINTEXT or SSL): what the quorum's transport
    /// and the brokers' controller channel speak.
    pub controller_protocol: SecurityProtocol,
    /// `inter.broker.listener.name` (PLAINTEXT): the listener other brokers fetch from. On a node with the broker
    /// role it names one of [`Listeners::broker`].
    pub inter_broker_name: String,
}

/// Broker lease settings (BrokerRegistration / BrokerHeartbeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// `broker.session.timeout.ms` (9000): a broker without a heartbeat for this long is fenced.
    pub session_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms` (2000); always below the session timeout.
    pub heartbeat_interval_ms: u64,
}

/// Replication settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `offsets.topic.replication.factor` (3), to be capped at the number of live brokers when
    /// `__consumer_offsets` is created.
    pub offsets_topic_replication_factor: i16,
    /// `replica.lag.time.max.ms` (30000): a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `num.replica.fetchers` (1): fetcher tasks per source broker.
    pub num_replica_fetchers: u32,
    /// `replica.fetch.max.bytes` (1048576) per partition in a follower fetch.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.wait.max.ms` (500); at most `replica_lag_time_max_ms`.
    pub replica_fetch_wait_max_ms: u64,
    /// `unclean.leader.election.enable` (false).
    pub unclean_leader_election_enable: bool,
}

/// The active controller's preferred-leader rebalancing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionConfig {
    /// `auto.leader.rebalance.enable` (true).
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds` (300).
    pub leader_imbalance_check_interval_seconds: u64,
    /// `leader.imbalance.per.broker.percentage` (10).
    pub leader_imbalance_per_broker_percentage: u32,
}

/// This node's cluster identity and wiring, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `node.id` (or `broker.id`); required when `process.roles` is set.
    pub node_id: i32,
    pub roles: ProcessRoles,
    /// True when `process.roles` was not set: the zero-configuration single node. Its quorum is itself, so the
    /// controller may run in process without binding [`Listeners::controller`] at all.
    pub implicit_single_node: bool,
    /// `broker.rack`.
    pub rack: Option<String>,
    pub listeners: Listeners,
    pub quorum: QuorumConfig,
    pub lease: LeaseConfig,
    pub replication: ReplicationConfig,
    pub elections: ElectionConfig,
    /// `controlled.shutdown.enable` (true): on SIGTERM, move leaderships away before exiting.
    pub controlled_shutdown_enable: bool,
}

impl ClusterConfig {
    /// The listener clients are served on first: the first broker listener. `None` on a controller-only node.
    pub fn client_listener(&self) -> Option<&Listener> {
        self.listeners.broker.first()
    }

    /// The listener other brokers fetch from (`inter.broker.listener.name`). `None` on a controller-only node.
    pub fn inter_broker_listener(&self) -> Option<&Listener> {
        self.listener(&self.listeners.inter_broker_name)
            .filter(|_| self.roles.broker)
    }

    /// The controller listener this node binds for the quorum (the first of `controller.listener.names`).
    /// `None` on a broker-only node.
    pub fn controller_listener(&self) -> Option<&Listener> {
        self.listeners.controller.first()
    }

    /// Any listener of this node by name (case-insensitive).
    pub fn listener(&self, name: &str) -> Option<&Listener> {
        let name = name.to_ascii_uppercase();
        self.listeners
            .broker
            .iter()
            .chain(&self.listeners.controller)
            .find(|l| l.name == name)
    }

    /// The controller endpoints a broker contacts: the voters' endpoints, or the bootstrap servers when the voter
    /// ids are not configured ([`VoterSource::Bootstrap`]).
    pub fn controller_endpoints(&self) -> Vec<Endpoint> {
        if self.quorum.voters.is_empty() {
            self.quorum.bootstrap_servers.clone()
        } else {
            self.quorum.voters.values().cloned().collect()
        }
    }

    /// True when this node is one of the voters.
    pub fn is_voter(&self) -> bool {
        self.quorum.voters.contains_key(&self.node_id)
    }

    /// True when this node is the quorum's only voter (zero configuration, or a one-voter file): its metadata
    /// log is the cluster's, so it alone may import a single node's data directory into it.
    pub fn is_sole_voter(&self) -> bool {
        self.quorum.voters.len() == 1 && self.is_voter()
    }
}

/// Values to report through DescribeConfigs for settings whose effective value is computed here.
pub(super) type Described = Vec<(&'static str, String, Source)>;

/// Resolves and checks the cluster settings from `explicit` (validated `key=value`s from the file and overrides)
/// and the `--listen` flag. `node_id` is the already resolved `node.id`/`broker.id`.
pub(super) fn resolve(
    explicit: &BTreeMap<String, String>,
    listen_flag: Option<&str>,
    node_id: i32,
) -> Result<(ClusterConfig, Described), SettingError> {
    let mut described: Described = Vec::new();
    let implicit = !explicit.contains_key("process.roles");
    let roles = match explicit.get("process.roles") {
        None => ProcessRoles::COMBINED,
        Some(v) => parse_roles(v)?,
    };
    check_node_id(explicit, implicit)?;
    if implicit {
        for setting in [
            "controller.quorum.voters",
            "controller.quorum.bootstrap.servers",
        ] {
            if explicit.contains_key(setting) {
                return Err(SettingError::new(
                    setting,
                    "is set but process.roles is not; set process.roles=broker,controller (or broker, or \
                     controller) and node.id on every node of the cluster",
                ));
            }
        }
    }
    described.push((
        "process.roles",
        roles.as_setting().to_string(),
        source(implicit),
    ));

    let controller_names = match explicit.get("controller.listener.names") {
        Some(v) => parse_name_list("controller.listener.names", v)?,
        None if implicit => vec![DEFAULT_CONTROLLER_LISTENER_NAME.to_string()],
        None => Vec::new(),
    };
    let mut protocols = protocol_map(explicit, &controller_names)?;
    if implicit && !explicit.contains_key("controller.listener.names") {
        // Zero configuration's own controller listener speaks PLAINTEXT, whatever map the file gives for its
        // client listeners.
        protocols
            .entry(DEFAULT_CONTROLLER_LISTENER_NAME.to_string())
            .or_insert(SecurityProtocol::Plaintext);
    }
    let mut inter_broker_name = normalise_listener_name(
        "inter.broker.listener.name",
        &effective(explicit, "inter.broker.listener.name").unwrap_or_default(),
    )?;

    let mut entries = listener_entries(explicit, listen_flag, roles, &controller_names)?;
    if implicit && !entries.iter().any(|e| controller_names.contains(&e.name)) {
        entries.push(implicit_controller_listener(&entries, &controller_names)?);
    }
    check_distinct_ports(&entries)?;
    described.push((
        "listeners",
        entries
            .iter()
            .map(|e| format!("{}://{}", e.name, e.endpoint))
            .collect::<Vec<_>>()
            .join(","),
        if explicit.contains_key("listeners") || listen_flag.is_some() {
            Source::Static
        } else {
            Source::Default
        },
    ));
    described.push((
        "controller.listener.names",
        controller_names.join(","),
        if explicit.contains_key("controller.listener.names") {
            Source::Static
        } else {
            Source::Default
        },
    ));

    let advertised = advertised_entries(explicit, roles, &entries, &controller_names)?;
    let mut broker = Vec::new();
    let mut controller = Vec::new();
    for e in &entries {
        let protocol = protocol_of(&protocols, &e.name, "listeners")?;
        let listener = Listener {
            name: e.name.clone(),
            bind: e.endpoint.clone(),
            advertised: advertised.get(&e.name).cloned(),
            protocol,
        };
        if controller_names.contains(&e.name) {
            controller.push(listener);
        } else {
            broker.push(listener);
        }
    }
    // Controller listeners in controller.listener.names order: the first is the one the quorum uses.
    controller.sort_by_key(|l| controller_names.iter().position(|n| *n == l.name));
    check_role_listeners(roles, &broker, &controller, &controller_names)?;
    if !roles.controller {
        // A broker-only node reaches the controllers by this name's protocol, so it must be one Annal speaks.
        if let Some(name) = controller_names.first() {
            protocol_of(&protocols, name, "controller.listener.names")?;
        }
    }
    for l in &controller {
        require_no_sasl(l.name.as_str(), l.protocol)?;
    }
    // The protocol the quorum and the brokers speak to the controllers: the first controller listener's.
    let controller_protocol = match controller_names.first() {
        Some(name) => {
            let p = protocol_of(&protocols, name, "controller.listener.names")?;
            require_no_sasl(name, p)?;
            p
        }
        None => SecurityProtocol::Plaintext,
    };
    match (
        explicit.get("security.inter.broker.protocol"),
        explicit.contains_key("inter.broker.listener.name"),
    ) {
        (Some(_), true) => {
            return Err(SettingError::new(
                "security.inter.broker.protocol",
                "is set together with inter.broker.listener.name; set only one (Kafka refuses both too)",
            ))
        }
        // Kafka: the inter-broker listener is the one named like the protocol.
        (Some(p), false) => inter_broker_name = p.trim().to_ascii_uppercase(),
        _ => {}
    }
    if implicit
        && !explicit.contains_key("inter.broker.listener.name")
        && !explicit.contains_key("security.inter.broker.protocol")
    {
        // A single node has no other broker; its first PLAINTEXT client listener (else its first), whatever its
        // name, is the inter-broker one (as single-node Annal accepted `listeners=CLIENT://...` before it knew
        // about clusters). Transaction markers reach the node itself through it.
        if let Some(first) = broker
            .iter()
            .find(|l| l.protocol == SecurityProtocol::Plaintext)
            .or(broker.first())
        {
            inter_broker_name = first.name.clone();
        }
    }
    if roles.broker && !broker.iter().any(|l| l.name == inter_broker_name) {
        let names: Vec<&str> = broker.iter().map(|l| l.name.as_str()).collect();
        return Err(SettingError::new(
            "inter.broker.listener.name",
            format!(
                "{inter_broker_name}{} is not one of this broker's listeners ({}); set inter.broker.listener.name \
                 to one of them, or add a {inter_broker_name} listener to listeners",
                if explicit.contains_key("inter.broker.listener.name") { "" } else { " (the default)" },
                names.join(", ")
            ),
        ));
    }

    let listeners = Listeners {
        broker,
        controller,
        controller_names,
        controller_protocol,
        inter_broker_name,
    };
    let quorum = quorum(explicit, implicit, roles, node_id, &listeners)?;
    described.push((
        "controller.quorum.voters",
        quorum
            .voters
            .iter()
            .map(|(id, e)| format!("{id}@{e}"))
            .collect::<Vec<_>>()
            .join(","),
        if explicit.contains_key("controller.quorum.voters") {
            Source::Static
        } else {
            Source::Default
        },
    ));
    described.push((
        "listener.security.protocol.map",
        protocols
            .iter()
            .map(|(n, p)| format!("{n}:{}", p.name()))
            .collect::<Vec<_>>()
            .join(","),
        if explicit.contains_key("listener.security.protocol.map") {
            Source::Static
        } else {
            Source::Default
        },
    ));

    let num = |name: &str| -> i64 {
        effective(explicit, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let flag = |name: &str| effective(explicit, name).as_deref() == Some("true");
    let lease = LeaseConfig {
        session_timeout_ms: num("broker.session.timeout.ms").max(0) as u64,
        heartbeat_interval_ms: num("broker.heartbeat.interval.ms").max(0) as u64,
    };
    if lease.heartbeat_interval_ms >= lease.session_timeout_ms {
        return Err(SettingError::new(
            "broker.heartbeat.interval.ms",
            format!(
                "{} must be below broker.session.timeout.ms={} or every broker is fenced between heartbeats; \
                 Kafka's defaults are 2000 and 9000",
                lease.heartbeat_interval_ms, lease.session_timeout_ms
            ),
        ));
    }
    let replication = ReplicationConfig {
        offsets_topic_replication_factor: num("offsets.topic.replication.factor")
            .clamp(1, i16::MAX as i64) as i16,
        replica_lag_time_max_ms: num("replica.lag.time.max.ms").max(0) as u64,
        num_replica_fetchers: num("num.replica.fetchers").clamp(1, u32::MAX as i64) as u32,
        replica_fetch_max_bytes: num("replica.fetch.max.bytes").clamp(0, i32::MAX as i64) as i32,
        replica_fetch_wait_max_ms: num("replica.fetch.wait.max.ms").max(0) as u64,
        unclean_leader_election_enable: flag("unclean.leader.election.enable"),
    };
    if replication.replica_fetch_wait_max_ms > replication.replica_lag_time_max_ms {
        return Err(SettingError::new(
            "replica.fetch.wait.max.ms",
            format!(
                "{} must be at most replica.lag.time.max.ms={}, or followers waiting on an idle leader drop out \
                 of the ISR",
                replication.replica_fetch_wait_max_ms, replication.replica_lag_time_max_ms
            ),
        ));
    }
    let quorum = QuorumConfig {
        election_timeout_ms: num("controller.quorum.election.timeout.ms").max(0) as u64,
        fetch_timeout_ms: num("controller.quorum.fetch.timeout.ms").max(0) as u64,
        ..quorum
    };
    let config = ClusterConfig {
        node_id,
        roles,
        implicit_single_node: implicit,
        rack: explicit
            .get("broker.rack")
            .filter(|r| !r.is_empty())
            .cloned(),
        listeners,
        quorum,
        lease,
        replication,
        elections: ElectionConfig {
            auto_leader_rebalance_enable: flag("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_seconds: num("leader.imbalance.check.interval.seconds")
                .max(1) as u64,
            leader_imbalance_per_broker_percentage: num("leader.imbalance.per.broker.percentage")
                .clamp(0, 100) as u32,
        },
        controlled_shutdown_enable: flag("controlled.shutdown.enable"),
    };
    debug_assert_invariants(&config);
    Ok((config, described))
}

fn source(default: bool) -> Source {
    if default {
        Source::Default
    } else {
        Source::Static
    }
}

fn parse_roles(value: &str) -> Result<ProcessRoles, SettingError> {
    let mut roles = ProcessRoles {
        broker: false,
        controller: false,
    };
    for role in value.split(',').map(str::trim) {
        match role {
            "broker" => roles.broker = true,
            "controller" => roles.controller = true,
            other => {
                return Err(SettingError::new(
                    "process.roles",
                    format!("unknown role '{other}'; use broker, controller, or broker,controller"),
                ))
            }
        }
    }
    Ok(roles)
}

/// Kafka requires `node.id` in KRaft mode: two nodes defaulting to one id would be one voter twice.
fn check_node_id(explicit: &BTreeMap<String, String>, implicit: bool) -> Result<(), SettingError> {
    match (explicit.get("node.id"), explicit.get("broker.id")) {
        (Some(n), Some(b)) if n != b => Err(SettingError::new(
            "node.id",
            format!("node.id={n} and broker.id={b} differ; set one of them (Kafka requires them equal)"),
        )),
        (None, None) if !implicit => Err(SettingError::new(
            "node.id",
            "is required when process.roles is set; give every node of the cluster its own node.id \
             (the id it has in controller.quorum.voters if it is a controller)",
        )),
        _ => Ok(()),
    }
}

/// The effective protocol map: Kafka's default (plus PLAINTEXT for each controller listener name, as Kafka does in
/// KRaft mode) unless the map is given explicitly.
fn protocol_map(
    explicit: &BTreeMap<String, String>,
    controller_names: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, SettingError> {
    match explicit.get("listener.security.protocol.map") {
        Some(v) => parse_protocol_map(v),
        None => {
            let mut map = parse_protocol_map(DEFAULT_PROTOCOL_MAP)?;
            for name in controller_names {
                map.entry(name.clone())
                    .or_insert(SecurityProtocol::Plaintext);
            }
            Ok(map)
        }
    }
}

fn protocol_of(
    map: &BTreeMap<String, SecurityProtocol>,
    name: &str,
    setting: &'static str,
) -> Result<SecurityProtocol, SettingError> {
    match map.get(name) {
        None => Err(SettingError::new(
            "listener.security.protocol.map",
            format!(
                "listener {name} (from {setting}) has no security protocol; add {name}:PLAINTEXT to \
                 listener.security.protocol.map"
            ),
        )),
        Some(p) => Ok(*p),
    }
}

/// The controller listener may speak PLAINTEXT or SSL (with mutual TLS); SASL is not supported on it yet: the
/// quorum's transport and the brokers' controller channel would have to log in, and the controller listener to
/// run the SASL exchange (docs/decisions/0017-security.md).
fn require_no_sasl(name: &str, protocol: SecurityProtocol) -> Result<(), SettingError> {
    if matches!(
        protocol,
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl
    ) {
        return Ok(());
    }
    Err(SettingError::new(
        "listener.security.protocol.map",
        format!(
            "listener {name} is the controller listener and uses {}; Annal secures the controller listener with \
             SSL only for now (set ssl.client.auth=required on it to authenticate the nodes): map {name}:SSL or \
             {name}:PLAINTEXT (the client and inter-broker listeners can use SASL)",
            protocol.name()
        ),
    ))
}

/// `listeners` (or the default), with `--listen` replacing the client listener's address. Empty hosts bind to
/// every interface.
fn listener_entries(
    explicit: &BTreeMap<String, String>,
    listen_flag: Option<&str>,
    roles: ProcessRoles,
    controller_names: &[String],
) -> Result<Vec<ListenerEntry>, SettingError> {
    let text = explicit
        .get("listeners")
        .map(String::as_str)
        .unwrap_or(DEFAULT_CLIENT_LISTENER);
    let mut entries = parse_listener_list("listeners", text)?;
    if let Some(flag) = listen_flag {
        if !roles.broker {
            return Err(SettingError::new(
                "--listen",
                "sets the client listener, but process.roles=controller serves no clients; set the controller \
                 listener in listeners (e.g. listeners=CONTROLLER://127.0.0.1:9093) instead",
            ));
        }
        let flag = if flag.trim().starts_with(':') {
            format!("0.0.0.0{}", flag.trim())
        } else {
            flag.trim().to_string()
        };
        let endpoint = parse_host_port("--listen", &flag)?;
        match entries
            .iter_mut()
            .find(|e| !controller_names.contains(&e.name))
        {
            Some(client) => client.endpoint = endpoint,
            None => entries.insert(
                0,
                ListenerEntry {
                    name: "PLAINTEXT".into(),
                    endpoint,
                },
            ),
        }
    }
    for e in &mut entries {
        if e.endpoint.host.is_empty() {
            e.endpoint.host = "0.0.0.0".into();
        }
    }
    Ok(entries)
}

/// Zero configuration's controller listener: loopback (the quorum port is never exposed by accident), on the
/// client port + 1 (Kafka's habit: 9092 and 9093), or the next port no other listener uses; port 0 stays 0.
fn implicit_controller_listener(
    entries: &[ListenerEntry],
    controller_names: &[String],
) -> Result<ListenerEntry, SettingError> {
    let name = controller_names
        .first()
        .cloned()
        .unwrap_or_else(|| DEFAULT_CONTROLLER_LISTENER_NAME.to_string());
    let client_port = entries.first().map_or(9092, |e| e.endpoint.port);
    let port = if client_port == 0 {
        0
    } else {
        (1..=16u16)
            .filter_map(|d| client_port.checked_add(d))
            .find(|p| entries.iter().all(|e| e.endpoint.port != *p))
            .ok_or_else(|| {
                SettingError::new(
                    "listeners",
                    format!(
                        "no free port after {client_port} for the controller listener; add \
                         {name}://127.0.0.1:PORT to listeners"
                    ),
                )
            })?
    };
    Ok(ListenerEntry {
        name,
        endpoint: Endpoint::new("127.0.0.1", port),
    })
}

/// Two listeners cannot bind one port (port 0, "any free port", excepted).
fn check_distinct_ports(entries: &[ListenerEntry]) -> Result<(), SettingError> {
    for (i, a) in entries.iter().enumerate() {
        if let Some(b) = entries[..i]
            .iter()
            .find(|b| b.endpoint.port == a.endpoint.port && a.endpoint.port != 0)
        {
            return Err(SettingError::new(
                "listeners",
                format!(
                    "listeners {} and {} both use port {}; give each listener its own port",
                    b.name, a.name, a.endpoint.port
                ),
            ));
        }
    }
    Ok(())
}

/// `advertised.listeners` by listener name. Every name must be one of `listeners`; no advertised host may be a
/// wildcard; a broker-only node must not advertise a controller listener (it runs none).
fn advertised_entries(
    explicit: &BTreeMap<String, String>,
    roles: ProcessRoles,
    entries: &[ListenerEntry],
    controller_names: &[String],
) -> Result<BTreeMap<String, Endpoint>, SettingError> {
    const SETTING: &str = "advertised.listeners";
    let Some(text) = explicit.get(SETTING) else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for a in parse_listener_list(SETTING, text)? {
        if !roles.controller && controller_names.contains(&a.name) {
            return Err(SettingError::new(
                SETTING,
                format!(
                    "lists controller listener {}, but process.roles=broker runs no controller; remove it \
                     (brokers reach the controllers through controller.quorum.voters)",
                    a.name
                ),
            ));
        }
        if !entries.iter().any(|e| e.name == a.name) {
            return Err(SettingError::new(
                SETTING,
                format!(
                    "names listener {}, which is not in listeners ({}); advertise only listeners this node binds",
                    a.name,
                    entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if a.endpoint.host.is_empty() || a.endpoint.is_wildcard() {
            return Err(SettingError::new(
                SETTING,
                format!(
                    "{}://{} is not an address anyone can connect to; advertise a routable host name or IP",
                    a.name, a.endpoint
                ),
            ));
        }
        out.insert(a.name, a.endpoint);
    }
    Ok(out)
}

/// Kafka's rules tying roles to listeners.
fn check_role_listeners(
    roles: ProcessRoles,
    broker: &[Listener],
    controller: &[Listener],
    controller_names: &[String],
) -> Result<(), SettingError> {
    if roles.controller {
        if controller_names.is_empty() {
            return Err(SettingError::new(
                "controller.listener.names",
                "is required on a node with the controller role; name its controller listener, e.g. \
                 controller.listener.names=CONTROLLER with listeners=...,CONTROLLER://127.0.0.1:9093",
            ));
        }
        if let Some(missing) = controller_names
            .iter()
            .find(|n| !controller.iter().any(|l| l.name == **n))
        {
            return Err(SettingError::new(
                "controller.listener.names",
                format!(
                    "names {missing}, but listeners has no {missing} listener; a node with the controller role \
                     must bind it, e.g. add {missing}://127.0.0.1:9093 to listeners"
                ),
            ));
        }
    } else {
        if controller_names.is_empty() {
            return Err(SettingError::new(
                "controller.listener.names",
                "is required on a broker-only node: it names the listener (and so the protocol) used to reach \
                 the controllers, e.g. controller.listener.names=CONTROLLER",
            ));
        }
        if let Some(l) = controller.first() {
            return Err(SettingError::new(
                "listeners",
                format!(
                    "binds controller listener {}, but process.roles=broker runs no controller; remove it from \
                     listeners (or add controller to process.roles)",
                    l.name
                ),
            ));
        }
    }
    if roles.broker && broker.is_empty() {
        return Err(SettingError::new(
            "listeners",
            "has no broker listener (every listener is named in controller.listener.names); add one for \
             clients, e.g. PLAINTEXT://127.0.0.1:9092",
        ));
    }
    if !roles.broker {
        if let Some(l) = broker.first() {
            return Err(SettingError::new(
                "listeners",
                format!(
                    "has listener {}, but process.roles=controller serves only controller listeners; remove it or \
                     add it to controller.listener.names",
                    l.name
                ),
            ));
        }
    }
    Ok(())
}

/// The voter set, from `controller.quorum.voters`, the KIP-853 standalone form, or zero configuration.
fn quorum(
    explicit: &BTreeMap<String, String>,
    implicit: bool,
    roles: ProcessRoles,
    node_id: i32,
    listeners: &Listeners,
) -> Result<QuorumConfig, SettingError> {
    let mut voters = parse_voters(
        explicit
            .get("controller.quorum.voters")
            .map_or("", String::as_str),
    )?;
    let bootstrap_servers = parse_servers(
        "controller.quorum.bootstrap.servers",
        explicit
            .get("controller.quorum.bootstrap.servers")
            .map_or("", String::as_str),
    )?;
    let own = listeners.controller.first();
    let voter_source = if implicit {
        let own = own.ok_or_else(|| {
            SettingError::new(
                "listeners",
                "zero configuration needs a controller listener",
            )
        })?;
        voters.insert(
            node_id,
            own.advertised.clone().unwrap_or_else(|| {
                if own.bind.is_wildcard() {
                    Endpoint::new("127.0.0.1", own.bind.port)
                } else {
                    own.bind.clone()
                }
            }),
        );
        VoterSource::Implicit
    } else if !voters.is_empty() {
        VoterSource::Static
    } else if bootstrap_servers.is_empty() {
        return Err(SettingError::new(
            "controller.quorum.voters",
            "process.roles is set, so this node needs the controller quorum: set \
             controller.quorum.voters=ID@HOST:PORT,... (the same list on every node)",
        ));
    } else if let Some(own) = own {
        match bootstrap_servers.as_slice() {
            [only] if is_own_endpoint(own, only) => {
                voters.insert(node_id, only.clone());
                VoterSource::Standalone
            }
            _ => {
                return Err(SettingError::new(
                    "controller.quorum.voters",
                    format!(
                        "controller.quorum.bootstrap.servers={} without static voters is a dynamic quorum \
                         (KIP-853): its voter ids come from the quorum itself, which Annal does not support for \
                         more than one controller yet; set controller.quorum.voters=ID@HOST:PORT,... naming every \
                         controller",
                        explicit
                            .get("controller.quorum.bootstrap.servers")
                            .map_or("", String::as_str)
                    ),
                ))
            }
        }
    } else {
        VoterSource::Bootstrap
    };

    if roles.controller {
        let Some(mine) = voters.get(&node_id) else {
            return Err(SettingError::new(
                "controller.quorum.voters",
                format!(
                    "does not list this node's node.id={node_id}, but the node has the controller role; add \
                     {node_id}@HOST:PORT (its controller listener) to controller.quorum.voters on every node, or \
                     fix node.id"
                ),
            ));
        };
        if let Some(own) = own {
            if own.advertised.is_none() && own.bind.port != 0 && mine.port != own.bind.port {
                return Err(SettingError::new(
                    "controller.quorum.voters",
                    format!(
                        "says node.id={node_id} is at {mine}, but this node's {} listener binds port {}: either \
                         another node already has node.id={node_id} (give this one its own id) or the voters entry \
                         is wrong (other nodes would call a port nobody listens on); make them agree",
                        own.name, own.bind.port
                    ),
                ));
            }
        }
    } else if voters.contains_key(&node_id) {
        return Err(SettingError::new(
            "controller.quorum.voters",
            format!(
                "lists node.id={node_id}, but process.roles=broker runs no controller; give the broker an id that \
                 is not a voter, or add controller to process.roles"
            ),
        ));
    }
    Ok(QuorumConfig {
        voters,
        voter_source,
        bootstrap_servers,
        election_timeout_ms: 0,
        fetch_timeout_ms: 0,
    })
}

/// Whether a bootstrap server is this node's own controller listener: its advertised endpoint, or its bound port
/// on the same host (or any host, for a wildcard bind).
fn is_own_endpoint(own: &Listener, server: &Endpoint) -> bool {
    match &own.advertised {
        Some(a) => a == server,
        None => {
            own.bind.port == server.port
                && (own.bind.is_wildcard() || own.bind.host.eq_ignore_ascii_case(&server.host))
        }
    }
}

fn debug_assert_invariants(c: &ClusterConfig) {
    debug_assert!(c.roles.broker || c.roles.controller);
    debug_assert_eq!(c.roles.broker, !c.listeners.broker.is_empty());
    debug_assert_eq!(c.roles.controller, !c.listeners.controller.is_empty());
    debug_assert_eq!(c.roles.controller, c.is_voter());
    debug_assert!(c.quorum.voters.is_empty() == (c.quorum.voter_source == VoterSource::Bootstrap));
    debug_assert!(!c.roles.broker || c.inter_broker_listener().is_some());
    debug_assert!(c.lease.heartbeat_interval_ms < c.lease.session_timeout_ms);
}
