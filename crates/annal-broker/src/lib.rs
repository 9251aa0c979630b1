//! Annal's broker: the Kafka wire protocol, partitions and their replicas, and the group coordinator.
//!
//! Entry point: [`run`] serves the Kafka protocol on the configured listener until `shutdown` resolves.
//! Storage is delegated to [`annal_log`]; this crate knows the network, the engine knows the disk.
//!
//! Layers, in Kafka's shape: `server` (framing, limits, connections) -> `apis` (one module per group of Kafka
//! APIs: decode, call a manager, encode) -> [`ReplicaManager`] (produce, fetch, long polls, the partitions map)
//! -> [`Partition`] (leader epoch, ISR, high watermark, the only lock on its log) -> `annal_log::Log`.
//! [`LogManager`] opens, creates and deletes logs on disk and keeps the topic registry. [`group`] is the group
//! coordinator, writing to the `__consumer_offsets` partitions this broker leads.

mod apis;
mod clean_shutdown;
pub mod cluster;
mod cluster_meta;
pub mod config;
pub mod console;
mod data_dir_lock;
mod durable;
pub mod env;
pub mod group;
mod kafka_code;
mod log_cleaner;
mod log_io;
mod log_manager;
pub mod ops;
mod producer_ids;
mod quota;
mod replica;
pub mod security;
mod server;
pub mod storage_failure;
mod topic_config;
pub mod txn;

use std::sync::Arc;
use std::time::Duration;

pub use apis::fetch::zero_copy_counts;
pub use config::BrokerConfig;
pub use env::{BrokerEnv, BrokerListener};
pub use log_manager::{invalid_topic_name, LogManager, Topic};
#[doc(hidden)]
pub use replica::checkpoint_files;
pub use replica::{
    durable_sync_count, high_watermark, AppendEntry, FetchParams, FetchPartition,
    FetchPartitionResult, FollowerProgress, IsrChange, LeaderAppend, OffsetAndEpoch, OffsetSpec,
    Partition, PartitionConfig, PartitionError, PartitionRead, ReplicaFetch, ReplicaFetchers,
    ReplicaManager,
};
pub use server::decode_request_frame;

/// Everything a request handler needs. Fields are private to this crate; [`Broker`]'s accessors are the
/// outside view.
pub struct Broker {
    config: BrokerConfig,
    cluster_id: String,
    replica_manager: Arc<ReplicaManager>,
    /// The broker's side of the cluster (every broker is in one: zero configuration is a one-voter cluster).
    cluster: Arc<cluster::ClusterRuntime>,
    /// Consumer groups and committed offsets (the `__consumer_offsets` partitions this broker leads).
    groups: Arc<group::GroupCoordinator>,
    /// Transactions (the `__transaction_state` partitions this broker leads).
    txn: Arc<txn::TxnCoordinator>,
    /// The host and port clients are told to connect to.
    advertised: (String, u16),
    /// KIP-227 incremental fetch sessions.
    fetch_sessions: apis::fetch_session::FetchSessions,
    /// Lag health and retention-guard state between evaluations (`ops::groups`).
    health: ops::groups::GroupHealth,
    /// What `/readyz` checks that the managers do not know.
    readiness: ops::http::Readiness,
    /// `authorizer.class.name`: checks every request against the image's ACLs (`apis::authz`); `None` allows all.
    authorizer: Option<security::authorizer::Authorizer>,
    /// The web console's sessions and the client listener it connects to (`console::api`).
    console: console::api::ConsoleState,
    /// Produce and fetch byte-rate quotas (`quota`), enforced from the image's ClientQuotaRecords.
    quotas: quota::ClientQuotas,
    /// Failed fsyncs under the data directory: the broker halts on the first (`storage_failure`).
    storage_failure: Arc<storage_failure::StorageFailure>,
}

impl Broker {
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The authorizer, when `authorizer.class.name` is set.
    pub fn authorizer(&self) -> Option<&security::authorizer::Authorizer> {
        self.authorizer.as_ref()
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn replica_manager(&self) -> &ReplicaManager {
        &self.replica_manager
    }

    /// The cluster side of this broker: its metadata image, lease and channel to the controller.
    pub fn cluster(&self) -> &Arc<cluster::ClusterRuntime> {
        &self.cluster
    }

    pub(crate) fn quotas(&self) -> &quota::ClientQuotas {
        &self.quotas
    }

    pub fn groups(&self) -> &Arc<group::GroupCoordinator> {
        &self.groups
    }

    pub fn txn(&self) -> &Arc<txn::TxnCoordinator> {
        &self.txn
    }

    /// The host and port clients are told to connect to.
    pub fn advertised(&self) -> (&str, u16) {
        (&self.advertised.0, self.advertised.1)
    }

    /// The web console's state (sessions, where its Kafka client connects).
    pub fn console(&self) -> &console::api::ConsoleState {
        &self.console
    }

    /// The broker's always-on metrics (`ops::metrics`).
    pub fn metrics(&self) -> &ops::metrics::BrokerMetrics {
        self.replica_manager.metrics()
    }

    /// Whether (and why) an fsync under the data directory failed, which stops the broker.
    pub fn storage_failure(&self) -> &Arc<storage_failure::StorageFailure> {
        &self.storage_failure
    }
}

/// Runs the broker until `shutdown` resolves, then stops accepting, finishes in-flight requests, flushes every
/// partition and marks a clean shutdown.
pub async fn run(
    config: BrokerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if config.cluster.roles.controller && !config.cluster.roles.broker {
        return run_controller_only(config, shutdown).await;
    }
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}: {e}; pick another address with --listen HOST:PORT",
                config.listen
            )
        })?;
    run_with_listener(config, listener, shutdown).await
}

/// Creates the data directory if needed and returns its cluster id (`meta.properties`): the id given with
/// `--cluster-id` for a new directory, checked against an existing one; a multi-voter cluster must be given one.
/// Creates the data directory if needed, locks it (`lock`: on the operating system's disk; a simulated node's
/// lifetime is the simulator's business) and reads or writes its cluster id.
fn open_data_dir(
    config: &BrokerConfig,
    lock: bool,
) -> anyhow::Result<(String, Option<data_dir_lock::DataDirLock>)> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create data directory {}: {e}",
            config.data_dir.display()
        )
    })?;
    // Before anything in the directory is read or written: a second process must not even rewrite
    // meta.properties.
    let lock = lock
        .then(|| data_dir_lock::DataDirLock::acquire(&config.data_dir))
        .transpose()?;
    let cluster_id = cluster_meta::load_or_create(
        &config.data_dir,
        config.node_id,
        config.cluster_id.as_deref(),
        config.cluster.quorum.voters.len() > 1,
    )?;
    Ok((cluster_id, lock))
}

/// `process.roles=controller`: a metadata node and its CONTROLLER listener, no broker (no client listener, no
/// partitions, no registration).
async fn run_controller_only(
    config: BrokerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (cluster_id, _data_dir_lock) = open_data_dir(&config, true)?;
    let runtime =
        cluster::ClusterRuntime::start(&config, &cluster_id, &BrokerEnv::production()).await?;
    tracing::info!(node = config.cluster.node_id, data_dir = %config.data_dir.display(), %cluster_id, "annal controller started");
    shutdown.await;
    runtime.shutdown().await;
    tracing::info!("annal controller stopped");
    Ok(())
}

/// Like [`run`], on a listener the caller bound (tests bind 127.0.0.1:0 and read the port first).
pub async fn run_with_listener(
    config: BrokerConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    start(config, listener).await?.serve(shutdown).await
}

/// A broker whose data is open but which does not serve yet: [`Started::broker`] reaches its managers (the
/// cluster code, and tests that change leadership), [`Started::serve`] runs it.
pub struct Started {
    broker: Arc<Broker>,
    /// Every broker listener, bound, with its security (the first is the client listener of `start`).
    listeners: Vec<(BrokerListener, Arc<security::ListenerContext>)>,
    /// The HTTP listener (`http.listen`), if on and bound.
    http: Option<tokio::net::TcpListener>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    stop_rx: tokio::sync::watch::Receiver<bool>,
    /// Released when `serve` returns, after the partitions are closed (not when the last `Arc<Broker>` goes).
    data_dir_lock: Option<data_dir_lock::DataDirLock>,
}

/// How [`Started::serve`]'s error begins when an fsync of the broker's data failed.
pub const STORAGE_FAILED: &str = "an fsync under the data directory failed";

/// Opens the data directory (cluster id, producer ids, partitions, groups) for serving on `listener`.
pub async fn start(
    config: BrokerConfig,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Started> {
    start_in(
        config,
        BrokerListener::Tcp(listener),
        BrokerEnv::production(),
    )
    .await
}

/// [`start`] in an environment: the simulator's network, seeds and metadata node environment
/// ([`BrokerEnv`]). A broker on a simulated network needs `config.advertised` (there is no OS address to
/// fall back on) and has no HTTP listener.
pub async fn start_in(
    config: BrokerConfig,
    listener: BrokerListener,
    env: BrokerEnv,
) -> anyhow::Result<Started> {
    let mut phases = StartPhases::new();
    let (cluster_id, data_dir_lock) = open_data_dir(&config, env.network.is_none())?;
    // Before any log is opened: a failed fsync from here on stops the broker (`Started::serve`).
    let storage_failure = Arc::new(storage_failure::StorageFailure::watch(&config.data_dir));
    // Bound first: an explicit http.listen that cannot be bound stops start-up before anything else runs.
    let http = if env.network.is_some() {
        None
    } else {
        ops::http::bind(&config.ops).await?
    };
    // Taken before anything is served: from here on, a crash is an unclean stop.
    let mut previous_broker_epoch = clean_shutdown::take(&config.data_dir)?;
    let boot_id = env.boot_id();
    if previous_broker_epoch == clean_shutdown::UNKNOWN_EPOCH {
        if let Some(epoch) = boot_id
            .as_deref()
            .and_then(|boot| clean_shutdown::process_crash_epoch(&config.data_dir, boot))
        {
            tracing::info!(
                broker_epoch = epoch,
                "the last process crashed but the machine did not (same boot id): every write it made is in \
                 the page cache, so this restart counts as clean for the controller (KIP-966)"
            );
            previous_broker_epoch = epoch;
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every broker is part of a cluster: zero configuration makes a one-voter one (docs/decisions/0005).
    let mut cluster = cluster::ClusterRuntime::start(&config, &cluster_id, &env).await?;
    phases.done("metadata quorum started (its log replayed)");
    let replica_manager = Arc::new(ReplicaManager::open(&config, stop_rx.clone())?);
    phases.done("partition logs opened");
    let mut groups_config = config.groups.clone();
    groups_config.member_id_seed = env
        .seed
        .map(|s| s ^ 0x6d65_6d62_6572 ^ config.node_id as u64);
    groups_config.offsets_topic_replication_factor =
        config.cluster.replication.offsets_topic_replication_factor;
    if config.cluster.is_sole_voter() {
        // Before the import: the `__consumer_offsets-<n>` logs a single node's coordinator kept as its own
        // become that topic's partitions, so the import carries them into the metadata log with the rest.
        group::adopt_legacy_partitions(&replica_manager, &groups_config)?;
    }
    cluster
        .import_single_node(
            &config,
            &replica_manager,
            producer_ids::single_node_floor(&config.data_dir)?,
        )
        .await?;
    let creator = Arc::new(cluster::ControllerOffsetsTopic::new(
        &cluster,
        replica_manager.clone(),
    ));
    phases.done("single-node topics imported");
    let groups =
        group::GroupCoordinator::start(replica_manager.clone(), creator, groups_config, false)?;
    let advertised = match (&config.advertised, listener.local_addr()) {
        (Some(a), _) => a.clone(),
        (None, None) => anyhow::bail!(
            "a broker on a simulated network needs an advertised address (BrokerConfig::advertised)"
        ),
        (None, Some(local)) => {
            // A wildcard bind is not an address clients can use; 127.0.0.1 (not "localhost", which librdkafka
            // may resolve to ::1) is right for the zero-configuration single-machine case.
            let host = if local.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                local.ip().to_string()
            };
            (host, local.port())
        }
    };
    let (bound, endpoints) = bind_listeners(&config, listener, &advertised, &env).await?;
    phases.done("listeners bound");
    cluster
        .attach(
            &config,
            &cluster_id,
            replica_manager.clone(),
            endpoints,
            previous_broker_epoch,
            &env,
        )
        .await?;
    phases.done("registered, unfenced and the first metadata image applied");
    let cluster = Arc::new(cluster);
    let txn_routes = Arc::new(
        cluster::ClusterTxnRoutes::new(
            cluster.clone(),
            config.node_id,
            config.cluster.listeners.inter_broker_name.clone(),
        )
        .with_network(env.connector()),
    );
    let txn = txn::TxnCoordinator::start(
        replica_manager.clone(),
        Arc::new(cluster::ControllerOffsetsTopic::new(
            &cluster,
            replica_manager.clone(),
        )),
        txn_routes.clone(),
        txn_routes,
        config.transactions.clone(),
    )?;
    {
        // The coordinator follows leadership: each applied image may make this broker leader (or not) of
        // `__consumer_offsets` partitions.
        let mut applied = cluster.watch_applied();
        let groups = groups.clone();
        let txn = txn.clone();
        tokio::spawn(async move {
            // The images applied before this subscription (start-up waited for the first) count too.
            groups.reconcile();
            txn.reconcile();
            while applied.changed().await.is_ok() {
                groups.reconcile();
                txn.reconcile();
            }
        });
    }
    let fetch_sessions = apis::fetch_session::FetchSessions::new(config.fetch_session_slots);
    let authorizer = config
        .security
        .authorizer
        .clone()
        .map(security::authorizer::Authorizer::new);
    let quotas = quota::ClientQuotas::new(config.quota);
    let broker = Arc::new(Broker {
        authorizer,
        quotas,
        config,
        cluster_id,
        replica_manager,
        cluster,
        groups,
        txn,
        advertised,
        fetch_sessions,
        health: Default::default(),
        readiness: Default::default(),
        console: console::api::ConsoleState::new(console_target(&bound)),
        storage_failure,
    });
    phases.done("coordinators started");
    tracing::info!(
        listen = %broker.config.listen, advertised = %format!("{}:{}", broker.advertised.0, broker.advertised.1),
        data_dir = %broker.config.data_dir.display(), cluster_id = %broker.cluster_id,
        "annal broker started"
    );
    if let Some(addr) = http.as_ref().and_then(ops::http::local_addr) {
        tracing::info!(http = %addr, "HTTP listener: /metrics, /healthz, /readyz, /v1/groups, /v1/topics");
    }
    for (l, ctx) in &bound {
        if let Some(addr) = l.local_addr() {
            tracing::info!(listener = %ctx.name, protocol = ctx.protocol.name(), %addr, "listening");
        }
    }
    Ok(Started {
        broker,
        listeners: bound,
        http,
        stop_tx,
        stop_rx,
        data_dir_lock,
    })
}

impl Started {
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Every broker listener's name and bound address, in `listeners` order.
    pub fn listener_addrs(&self) -> Vec<(String, std::net::SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(l, ctx)| Some((ctx.name.to_string(), l.local_addr()?)))
            .collect()
    }

    /// Where the HTTP listener (`http.listen`) is bound; `None` when it is off or its default was taken.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.as_ref().and_then(ops::http::local_addr)
    }

    /// Serves until `shutdown` resolves; see [`run`]. Drop every clone of [`Started::broker`] before shutdown
    /// or the partitions still referenced are flushed but not marked clean.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Started {
            broker,
            listeners,
            http,
            stop_tx,
            stop_rx,
            data_dir_lock,
        } = self;
        let http = http.map(|l| {
            let limits = ops::http::HttpLimits::default();
            let app = ops::http::router(broker.clone(), &limits);
            let b = broker.clone();
            tokio::spawn(ops::http::serve(
                l,
                app,
                limits,
                stop_rx.clone(),
                move || {
                    b.metrics().http_connections_refused.inc();
                },
            ))
        });
        let groups = broker.groups.clone();
        let retention = tokio::spawn(retention_loop(broker.clone(), stop_rx.clone()));
        let cleaner =
            log_cleaner::LogCleaner::start(&broker.config.cleaner, broker.replica_manager.clone());
        let cluster = broker.cluster.clone();
        let stop_tx = Arc::new(stop_tx);
        tokio::spawn({
            let stop_tx = stop_tx.clone();
            async move {
                shutdown.await;
                // Leaderships move away while clients are still served (they get NOT_LEADER_OR_FOLLOWER and
                // follow the new leader), then the listeners close.
                cluster.controlled_shutdown().await;
                let _ = stop_tx.send(true);
            }
        });
        // A node whose part of the metadata quorum failed (the metadata log could not be written: a full or
        // failing disk) can never learn metadata again, and openraft does not restart: the broker stops and
        // says why, as Kafka halts on a metadata log error, so that its supervisor restarts it once the disk
        // is fixed. Left running, it would serve stale leaderships and fence nobody, indefinitely.
        // A failed fsync under the data directory stops the broker too, at once, as Kafka halts when its only
        // log directory fails (`storage_failure`). One task watches both.
        let quorum_failure: Arc<parking_lot::Mutex<Option<String>>> = Arc::default();
        let quorum_watch = tokio::spawn({
            let (node, storage, stop_tx, failure) = (
                broker.cluster.node().clone(),
                broker.storage_failure.clone(),
                stop_tx.clone(),
                quorum_failure.clone(),
            );
            async move {
                tokio::select! {
                    biased;
                    reason = storage.failed() => {
                        tracing::error!(%reason, "an fsync of this broker's data failed; stopping the broker without flushing");
                    }
                    reason = node.failed() => {
                        tracing::error!(%reason, "this node's metadata quorum stopped on a fault; stopping the broker");
                        *failure.lock() = Some(reason);
                    }
                }
                let _ = stop_tx.send(true);
            }
        });
        let tls: Vec<_> = listeners
            .iter()
            .filter_map(|(_, ctx)| ctx.tls.clone())
            .collect();
        let reload = (!tls.is_empty()).then(|| tokio::spawn(tls_reload_loop(tls, stop_rx.clone())));
        server::serve_all(listeners, broker.clone(), stop_rx).await;
        if let Some(r) = reload {
            r.abort();
        }
        if let Some(h) = http {
            let _ = h.await;
        }
        retention.abort();
        let _ = retention.await;
        cleaner.shutdown().await;

        broker.cluster.shutdown().await;
        tracing::info!("flushing and closing partitions");
        groups.shutdown().await;
        broker.txn.shutdown().await;
        let broker_epoch = broker.cluster.lease().broker_epoch;
        let data_dir = broker.config.data_dir.clone();
        if let Some(reason) = broker.storage_failure.reason() {
            quorum_watch.abort();
            // No flush, no clean-shutdown file: what the disk holds is unknown, so the next start recovers
            // every log from it and the controller counts this stop as unclean (KIP-966).
            tracing::error!("annal broker stopped: an fsync of its data failed");
            drop(broker);
            drop(data_dir_lock);
            anyhow::bail!(
                "{STORAGE_FAILED} ({reason}), so the broker stopped without flushing: data written since the last \
                 good fsync may not be on the disk. Check the disk under {} (I/O errors in the kernel log), then \
                 start the broker again: it recovers every log from the disk and catches up from the other \
                 replicas",
                data_dir.display()
            );
        }
        let broker = Arc::try_unwrap(broker).map_err(|_| ()).ok();
        match broker {
            Some(b) => {
                blocking(move || b.replica_manager.close_all()).await;
                // Only once every partition is flushed and closed: the file tells the controller that this
                // node's logs hold everything it acknowledged (KIP-966; see clean_shutdown.rs).
                if broker_epoch >= 0 {
                    if let Err(e) = clean_shutdown::write(&data_dir, broker_epoch) {
                        tracing::warn!(
                            dir = %data_dir.display(), error = %e,
                            "cannot write the clean-shutdown file; the next start counts as unclean"
                        );
                    }
                }
            }
            None => {
                tracing::warn!(
                    "requests still running at shutdown; partitions were not closed cleanly"
                )
            }
        }
        quorum_watch.abort();
        let failure = quorum_failure.lock().take();
        if let Some(reason) = failure {
            let metadata_dir = data_dir.join(annal_metadata::raft::METADATA_LOG_DIR);
            tracing::error!("annal broker stopped: its metadata quorum failed");
            drop(data_dir_lock);
            anyhow::bail!(
                "the metadata quorum stopped on this node ({reason}), so the broker stopped too: check the disk \
                 under {} (free space, I/O errors in the kernel log), then start the broker again; it recovers \
                 the metadata log and catches up from the other voters",
                metadata_dir.display()
            );
        }
        tracing::info!("annal broker stopped");
        drop(data_dir_lock);
        Ok(())
    }
}

/// Binds every broker listener (the first is `first`, bound by the caller) and loads its TLS material; returns
/// them with the endpoints this broker registers (each listener's advertised address and protocol).
/// Where the console's Kafka client connects: a SASL_PLAINTEXT listener when there is one (then the console
/// requires a login, so it never reaches more than the user could), else a PLAINTEXT one. TLS listeners are
/// not used (the console would need a client certificate or trust store of its own). A wildcard bind is
/// reached on loopback.
fn console_target(
    bound: &[(BrokerListener, Arc<security::ListenerContext>)],
) -> Option<console::api::session::Target> {
    use config::SecurityProtocol::{Plaintext, SaslPlaintext};
    let pick = |protocol| {
        bound
            .iter()
            .find(|(_, ctx)| ctx.protocol == protocol && ctx.tls.is_none())
            .and_then(|(l, _)| l.local_addr())
    };
    let (addr, sasl) = match pick(SaslPlaintext) {
        Some(a) => (a, true),
        None => (pick(Plaintext)?, false),
    };
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    Some(console::api::session::Target {
        addr: std::net::SocketAddr::new(ip, addr.port()).to_string(),
        sasl,
    })
}

async fn bind_listeners(
    config: &BrokerConfig,
    first: BrokerListener,
    first_advertised: &(String, u16),
    env: &BrokerEnv,
) -> anyhow::Result<(
    Vec<(BrokerListener, Arc<security::ListenerContext>)>,
    Vec<cluster::lifecycle::Endpoint>,
)> {
    let mut first = Some(first);
    let mut bound = Vec::new();
    let mut endpoints = Vec::new();
    for l in &config.cluster.listeners.broker {
        let ctx = match config.security.listeners.get(&l.name) {
            Some(sec) => security::ListenerContext::build(sec)?,
            None => security::ListenerContext::plaintext(&l.name),
        };
        let (socket, host, port) = match first.take() {
            Some(socket) => (socket, first_advertised.0.clone(), first_advertised.1),
            None => {
                let addr = l.bind.to_string();
                let cannot = |e: std::io::Error| {
                    anyhow::anyhow!(
                        "listeners: cannot listen on {addr} for listener {}: {e}",
                        l.name
                    )
                };
                match &env.network {
                    None => {
                        let socket = tokio::net::TcpListener::bind(&addr).await.map_err(cannot)?;
                        let a = l.advertised_endpoint(socket.local_addr()?);
                        (BrokerListener::Tcp(socket), a.host, a.port)
                    }
                    Some(network) => {
                        let socket = network.bind(addr.clone()).await.map_err(cannot)?;
                        let a = l.advertised.clone().unwrap_or_else(|| l.bind.clone());
                        (BrokerListener::Seam(socket), a.host, a.port)
                    }
                }
            }
        };
        endpoints.push(cluster::lifecycle::Endpoint {
            name: l.name.clone(),
            host,
            port,
            security_protocol: l.protocol.id(),
        });
        bound.push((socket, Arc::new(ctx)));
    }
    if let Some(socket) = first {
        // No broker listener in the config (cannot happen on a broker node; kept total rather than asserted).
        let name = config.cluster.listeners.inter_broker_name.clone();
        endpoints.push(cluster::lifecycle::Endpoint {
            name: name.clone(),
            host: first_advertised.0.clone(),
            port: first_advertised.1,
            security_protocol: 0,
        });
        bound.push((
            socket,
            Arc::new(security::ListenerContext::plaintext(&name)),
        ));
    }
    Ok((bound, endpoints))
}

/// Reloads each TLS listener's certificates when its PEM files change (rotation without a restart).
async fn tls_reload_loop(
    listeners: Vec<Arc<security::tls::TlsListener>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(security::tls::RELOAD_CHECK_INTERVAL) => {}
            _ = crate::stopped(&mut stop) => return,
        }
        let l = listeners.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for t in &l {
                t.reload_if_changed();
            }
        })
        .await;
    }
}

/// Housekeeping: every second, fsync logs whose `flush.ms` is due; every `log.retention.check.interval.ms`,
/// apply retention.
/// Housekeeping ticks (of at most a second) between writes of `replication-offset-checkpoint` (Kafka's
/// replica.high.watermark.checkpoint.interval.ms is 5 s).
const HW_CHECKPOINT_TICKS: u64 = 5;

/// Housekeeping ticks between evaluations of the retention guard's warnings.
const HEALTH_TICKS: u64 = 10;

async fn retention_loop(broker: Arc<Broker>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let retention_every = config_duration(broker.config.retention_check_interval_ms);
    let tick = retention_every.min(Duration::from_secs(1));
    let mut next_retention = tokio::time::Instant::now() + retention_every;
    let mut checkpoint_tick = 0u64;
    let mut health_tick = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(tick) => {}
            _ = crate::stopped(&mut stop) => return,
        }
        let run_retention = tokio::time::Instant::now() >= next_retention;
        if run_retention {
            next_retention = tokio::time::Instant::now() + retention_every;
        }
        // Guarded groups coordinated elsewhere: their offsets are asked for before the blocking pass.
        let remote = if run_retention {
            ops::retention_guard::remote_offsets(&broker).await
        } else {
            ops::retention_guard::RemoteOffsets::new()
        };
        let b = broker.clone();
        checkpoint_tick += 1;
        let checkpoint = checkpoint_tick.is_multiple_of(HW_CHECKPOINT_TICKS);
        health_tick += 1;
        let health = health_tick.is_multiple_of(HEALTH_TICKS);
        let _ = blocking_caught(move || {
            flush_due(&b);
            // Off the produce path, in bounded steps; lookups index whatever tail is left themselves.
            b.replica_manager.index_keys();
            if checkpoint {
                b.replica_manager.checkpoint_high_watermarks();
            }
            if run_retention {
                apply_retention(&b, remote);
            }
            if health || run_retention {
                // The retention guard's warnings are logged whether or not anyone looks at /metrics.
                let reports = ops::groups::reports(&b, None);
                ops::groups::log_retention_warnings(&b, &reports);
            }
        })
        .await;
    }
}

fn flush_due(broker: &Broker) {
    broker.replica_manager.flush_due(now_ms());
}

fn apply_retention(broker: &Broker, remote: ops::retention_guard::RemoteOffsets) {
    let guards = ops::retention_guard::Guards::with_remote(broker, remote);
    let moved = broker
        .replica_manager
        .apply_retention(now_ms(), &|p| guards.guard_for(p));
    ops::groups::account_retention(broker, &moved);
}

/// Milliseconds on the monotonic clock (tokio's: virtual under a paused runtime, the OS's monotonic clock
/// otherwise), from an arbitrary origin: for durations only, such as how long a follower has lagged. Unlike
/// [`now_ms`] it never jumps when the wall clock is stepped (NTP, an operator, the simulator's clock jumps).
pub fn monotonic_ms() -> i64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(|| {
        // Far enough in the past that no reading of a paused clock (which may start before this call) is
        // before it, and far enough from 0 that "never" (0) reads as long ago.
        let now = std::time::Instant::now();
        now.checked_sub(Duration::from_secs(365 * 24 * 3600))
            .unwrap_or(now)
    });
    let now = tokio::time::Instant::now().into_std();
    now.saturating_duration_since(origin).as_millis() as i64
}

/// Milliseconds since the Unix epoch on the wall clock: timestamps (records, commits, retention), never
/// durations that decide something (see [`monotonic_ms`]).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Logs to stderr; `RUST_LOG` filters (default `info`, openraft at `warn`). Safe to call more than once.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // openraft logs every vote and append at info; its warnings are what an operator needs.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): what `annal serve` passes to [`run`].
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    biased;
                    _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves once `stop` is true (or its sender is gone). Keeps the watch guard inside, so callers stay `Send`.
pub(crate) async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A millisecond setting as a Duration, capped at a year so deadline arithmetic can never overflow.
pub(crate) fn config_duration(ms: i64) -> Duration {
    Duration::from_millis(ms.clamp(1, 365 * 24 * 3_600_000) as u64)
}

/// Runs blocking work (disk, fsync) off the async workers; a panic in it resumes here.
///
/// In the deterministic simulator (`annal_metadata::env::testing`, set for the simulation's thread) it runs
/// inline instead: a blocking-pool thread finishing at a wall-clock moment would make the run depend on the
/// machine.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    if annal_metadata::env::testing::current().inline_disk_io {
        return f();
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Like [`blocking`], but a panic in `f` is returned as an error (for background loops that must go on).
/// Times the phases of [`start_in`] for the log: where a slow start-up (100,000 partitions, a cold page cache)
/// spends its time.
struct StartPhases {
    start: std::time::Instant,
    last: std::time::Instant,
}

impl StartPhases {
    fn new() -> StartPhases {
        let now = std::time::Instant::now();
        StartPhases {
            start: now,
            last: now,
        }
    }

    fn done(&mut self, phase: &str) {
        let now = std::time::Instant::now();
        tracing::info!(
            phase,
            took_ms = now.duration_since(self.last).as_millis() as u64,
            since_start_ms = now.duration_since(self.start).as_millis() as u64,
            "start-up phase"
        );
        self.last = now;
    }
}

pub(crate) async fn blocking_caught<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    if annal_metadata::env::testing::current().inline_disk_io {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .map_err(|_| "blocking task panicked".to_string());
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task: {e}"))
}
