//! The broker in a cluster: the metadata node it runs (the quorum, the image, and the controller on voters),
//! its lease with the active controller ([`lifecycle`]), its channel to that controller
//! ([`controller_channel`]), and the watcher that applies every new image to the partitions ([`apply`]).
//!
//! A zero-configuration node runs it too, as a one-voter cluster (docs/decisions/0005-cluster-shape.md); the
//! first time it starts on a data directory written before Annal was a cluster, its topics and producer ids
//! are imported into the new metadata log ([`ClusterRuntime::import_single_node`]).

pub mod apply;
pub mod controller_channel;
mod isr;
pub mod lifecycle;
mod offsets_topic;
mod txn_routes;

pub use offsets_topic::ControllerOffsetsTopic;
pub use txn_routes::ClusterTxnRoutes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use annal_metadata::controller::ControllerConfig;
use annal_metadata::image::MetadataImage;
use annal_metadata::{MetadataNode, MetadataNodeConfig};
use anyhow::Context;
use tokio::sync::watch;

use crate::config::BrokerConfig;
use crate::replica::{ReplicaFetchers, ReplicaManager};
use controller_channel::ControllerChannel;
use lifecycle::{Endpoint, LeaseState, LifecycleConfig};

/// The longest a controlled shutdown waits for the controller to move this broker's leaderships away.
const CONTROLLED_SHUTDOWN_MAX: Duration = Duration::from_secs(30);
/// The longest start-up waits for this broker's first registration (a quorum without a majority yet keeps
/// it waiting; the broker serves anyway, with whatever metadata it has).
const REGISTRATION_WAIT_MAX: Duration = Duration::from_secs(10);

/// How long an admin request forwarded to the controller may wait for its answer.
const ADMIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A heartbeat that has not been answered within half the session timeout is abandoned (the connection is
/// dropped and the next heartbeat tries the leader again), so one hung attempt never costs the lease.
fn heartbeat_request_timeout(lease: &crate::config::LeaseConfig) -> Duration {
    Duration::from_millis(
        (lease.session_timeout_ms / 2)
            .max(lease.heartbeat_interval_ms)
            .max(100),
    )
}

/// A broker as clients see it in Metadata and DescribeCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerView {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// A running broker's cluster side.
pub struct ClusterRuntime {
    node: Arc<MetadataNode>,
    /// Admin requests, producer id blocks and DescribeQuorum go to the controller on this channel ...
    channel: Arc<ControllerChannel>,
    /// ... and the lease on its own, so a slow admin request never delays a heartbeat past the session timeout.
    lease_channel: Arc<ControllerChannel>,
    /// ... and ISR changes (AlterPartition) on a third, as Kafka's `AlterPartitionManager` has its own channel:
    /// a channel carries one request at a time, and an admin request forwarded into a partition holds the
    /// shared one for up to `ADMIN_REQUEST_TIMEOUT` (60 s). The ISR loop waited behind it, so no caught-up
    /// follower could rejoin any ISR of this leader for a minute after the faults healed, and with
    /// min.insync.replicas 2 the high watermark stood still (found by the simulator: `annal-sim --brokers
    /// --seed 1 --seconds 30`, a CreateTopics forwarded by n1 just before n1 was isolated).
    isr_channel: Arc<ControllerChannel>,
    lease: watch::Receiver<LeaseState>,
    want_shutdown: watch::Sender<bool>,
    lifecycle: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The task applying metadata images to the partitions: shutdown waits for it, so no apply (which opens,
    /// creates and holds partitions) runs while the partitions are closed.
    image_watcher: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Stops the controller listener and the image watcher.
    stop: watch::Sender<bool>,
    /// The listener name clients use (Metadata answers each broker's endpoint of this name).
    client_listener_name: String,
    /// The block of producer ids the controller gave this broker: (next, end). Blocks come from the metadata
    /// log (AllocateProducerIds -> ProducerIdsRecord), so no two brokers ever hand out the same id.
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    /// The fetchers copying the partitions this broker follows (set by `attach`).
    fetchers: parking_lot::Mutex<Option<Arc<ReplicaFetchers>>>,
    /// Bumped after every image applied to the partitions (the group coordinator follows leadership on it).
    applied: watch::Sender<u64>,
    /// TLS and SASL of this broker's connections to the other brokers' inter-broker listener.
    inter_broker: crate::security::InterBrokerClient,
}

impl ClusterRuntime {
    /// How connections to the other brokers' inter-broker listener authenticate.
    pub fn inter_broker_client(&self) -> &crate::security::InterBrokerClient {
        &self.inter_broker
    }

    /// Starts the metadata node (binding the controller listener on a voter) and the controller listener.
    /// The replica manager is not needed yet: [`ClusterRuntime::attach`] starts the parts that use it.
    pub async fn start(
        config: &BrokerConfig,
        cluster_id: &str,
        env: &crate::BrokerEnv,
    ) -> anyhow::Result<ClusterRuntime> {
        let cluster = &config.cluster;
        let inter_broker = crate::security::InterBrokerClient::build(config)?;
        let (stop, stop_rx) = watch::channel(false);
        let mut voters: BTreeMap<i32, String> = cluster
            .quorum
            .voters
            .iter()
            .map(|(id, e)| (*id, e.to_string()))
            .collect();
        anyhow::ensure!(
            !voters.is_empty(),
            "controller.quorum.voters is empty: Annal needs a static voter set (id@host:port,...)"
        );
        let controller_listener = match cluster.controller_listener() {
            Some(l) if cluster.roles.controller => Some(match &env.network {
                None => crate::BrokerListener::Tcp(
                    bind_controller_listener(l, cluster.implicit_single_node).await?,
                ),
                Some(network) => {
                    let bind = l.bind.to_string();
                    crate::BrokerListener::Seam(network.bind(bind.clone()).await.with_context(
                        || format!("cannot bind the controller listener {} on {bind}", l.name),
                    )?)
                }
            }),
            _ => None,
        };
        if let Some(addr) = controller_listener.as_ref().and_then(|l| l.local_addr()) {
            // A zero-configuration node's own listener may have moved to an ephemeral port (it is loopback
            // and only this process uses it): the one voter is wherever it is bound.
            if cluster.implicit_single_node {
                voters.insert(cluster.node_id, addr.to_string());
            }
        }
        let advertised_addr = match (&controller_listener, cluster.controller_listener()) {
            (Some(_), Some(l)) => voters
                .get(&cluster.node_id)
                .cloned()
                .unwrap_or_else(|| l.bind.to_string()),
            // A broker-only node is a learner: the leader pushes the metadata log to its broker listener.
            _ => match &config.advertised {
                Some((host, port)) => format!("{host}:{port}"),
                None => config.listen.clone(),
            },
        };
        let defaults = ControllerConfig::default();
        let mut node_env = env.node.clone();
        if let Some(network) = &env.network {
            node_env.network = network.clone();
        }
        // An SSL controller listener: the quorum's transport speaks TLS to the voters (a broker-only learner is
        // pushed to on its broker listener, as before) and the controller channel to every controller.
        let controller_tls = crate::security::controller_client_tls(config)?;
        let controller_network =
            |inner: Arc<dyn annal_client::net::Network>, only| match &controller_tls {
                None => inner,
                Some(tls) => Arc::new(annal_client::TlsNetwork {
                    inner,
                    tls: tls.clone(),
                    only,
                }) as Arc<dyn annal_client::net::Network>,
            };
        node_env.network = controller_network(
            node_env.network.clone(),
            Some(voters.values().cloned().collect()),
        );
        let node = MetadataNode::start_in(
            MetadataNodeConfig {
                node_id: cluster.node_id,
                cluster_id: cluster_id.to_string(),
                voters: voters.clone(),
                advertised_addr,
                data_dir: config.data_dir.clone(),
                election_timeout_ms: cluster.quorum.election_timeout_ms,
                controller: ControllerConfig {
                    session_timeout: Duration::from_millis(cluster.lease.session_timeout_ms),
                    heartbeat_interval: Duration::from_millis(cluster.lease.heartbeat_interval_ms),
                    default_replication_factor: config.default_replication_factor,
                    num_partitions: config.num_partitions,
                    seed: env.controller_seed(),
                    local_node_id: cluster.roles.broker.then_some(cluster.node_id),
                    // The broker's own table of topic settings, so a bad value gets the same answer in a cluster as
                    // it did on a single node.
                    topic_config_validator: |name, value| {
                        crate::topic_config::validate(name, Some(value))
                    },
                    min_insync_replicas: config.min_insync_replicas,
                    unclean_leader_election_enable: cluster
                        .replication
                        .unclean_leader_election_enable,
                    auto_leader_rebalance_enable: cluster.elections.auto_leader_rebalance_enable,
                    leader_imbalance_check_interval: Duration::from_secs(
                        cluster.elections.leader_imbalance_check_interval_seconds,
                    ),
                    leader_imbalance_per_broker_percentage: cluster
                        .elections
                        .leader_imbalance_per_broker_percentage,
                    ..defaults
                },
            },
            node_env,
        )
        .await?;
        let controller_listener =
            match (controller_listener, config.security.controller_ssl.as_ref()) {
                (Some(listener), Some(ssl)) => {
                    let name = cluster
                        .controller_listener()
                        .map(|l| l.name.as_str())
                        .unwrap_or("CONTROLLER");
                    let tls = Arc::new(crate::security::tls::TlsListener::new(name, ssl)?);
                    if let Some(addr) = listener.local_addr() {
                        tracing::info!(%addr, "controller listener started (SSL)");
                    }
                    tokio::spawn(crate::tls_reload_loop(vec![tls.clone()], stop_rx.clone()));
                    let accepting: Box<dyn annal_client::net::Listener> = match listener {
                        crate::BrokerListener::Tcp(l) => {
                            Box::new(crate::security::tls::TlsAccepting::spawn(l, tls))
                        }
                        crate::BrokerListener::Seam(l) => {
                            Box::new(crate::security::tls::TlsAccepting::spawn(l, tls))
                        }
                    };
                    Some(crate::BrokerListener::Seam(accepting))
                }
                (listener, _) => listener,
            };
        match controller_listener {
            Some(crate::BrokerListener::Tcp(listener)) => {
                tracing::info!(addr = %listener.local_addr()?, "controller listener started");
                tokio::spawn(annal_metadata::listener::serve(
                    listener,
                    node.clone(),
                    stop_rx.clone(),
                ));
            }
            Some(crate::BrokerListener::Seam(listener)) => {
                tokio::spawn(annal_metadata::listener::serve(
                    listener,
                    node.clone(),
                    stop_rx.clone(),
                ));
            }
            None => {}
        }
        // One connection to the active controller per kind of traffic, each carrying one request at a time, so
        // none waits behind another: admin requests wait for the controller's commit and the broker's own
        // timeouts (30 s and more for CreateTopics with many partitions), a heartbeat must fail well within the
        // session timeout, and ISR changes must not queue behind a forwarded admin request (see `isr_channel`).
        let new_channel = |timeout| {
            Arc::new(
                ControllerChannel::new(
                    voters
                        .iter()
                        .map(|(id, a)| (*id as u64, a.clone()))
                        .collect(),
                    node.watch_leader(),
                    timeout,
                )
                .with_network(controller_network(env.connector(), None)),
            )
        };
        let channel = new_channel(ADMIN_REQUEST_TIMEOUT);
        let lease_channel = new_channel(heartbeat_request_timeout(&cluster.lease));
        let isr_channel = new_channel(isr::ALTER_PARTITION_TIMEOUT);
        let (want_shutdown, _) = watch::channel(false);
        let (_, lease) = watch::channel(LeaseState::default());
        let client_listener_name = cluster
            .client_listener()
            .map(|l| l.name.clone())
            .unwrap_or_else(|| "PLAINTEXT".into());
        Ok(ClusterRuntime {
            node,
            channel,
            lease_channel,
            isr_channel,
            lease,
            want_shutdown,
            lifecycle: parking_lot::Mutex::new(None),
            image_watcher: parking_lot::Mutex::new(None),
            stop,
            client_listener_name,
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            fetchers: parking_lot::Mutex::new(None),
            applied: watch::channel(0).0,
            inter_broker,
        })
    }

    /// Starts the image watcher (image -> partitions) and the broker's lease with the controller, and waits a
    /// bounded time for the first registration.
    pub async fn attach(
        &mut self,
        config: &BrokerConfig,
        cluster_id: &str,
        replica_manager: Arc<ReplicaManager>,
        listeners: Vec<Endpoint>,
        previous_broker_epoch: i64,
        env: &crate::BrokerEnv,
    ) -> anyhow::Result<()> {
        let (offset_tx, offset_rx) = watch::channel(-1i64);
        let (lease_tx, lease_rx) = watch::channel(LeaseState::default());
        self.lease = lease_rx.clone();
        tokio::spawn(report_offsets(
            self.node.watch_image(),
            offset_tx,
            self.stop.subscribe(),
        ));
        let mut applied_rx = self.applied.subscribe();
        let epoch_of = lease_rx.clone();
        let fetchers = Arc::new(
            ReplicaFetchers::new(
                config.cluster.node_id,
                config.replica_fetch.clone(),
                Arc::new(move || epoch_of.borrow().broker_epoch),
                tokio::runtime::Handle::current(),
                self.stop.subscribe(),
            )
            .with_network(env.connector())
            .with_security(self.inter_broker.clone()),
        );
        *self.fetchers.lock() = Some(fetchers.clone());
        tokio::spawn(isr::run(
            replica_manager.clone(),
            self.isr_channel.clone(),
            self.node.watch_image(),
            lease_rx.clone(),
            config.replica_fetch.lag_time_max_ms,
            self.stop.subscribe(),
        ));
        let image_watcher = tokio::spawn(watch_image(
            self.node.watch_image(),
            replica_manager,
            fetchers,
            config.cluster.listeners.inter_broker_name.clone(),
            self.applied.clone(),
            lease_rx.clone(),
            self.stop.subscribe(),
        ));
        *self.image_watcher.lock() = Some(image_watcher);
        let lifecycle = LifecycleConfig {
            node_id: config.cluster.node_id,
            cluster_id: cluster_id.to_string(),
            incarnation_id: env.incarnation_id(config.cluster.node_id),
            listeners,
            rack: config.cluster.rack.clone(),
            previous_broker_epoch,
            running_record: env.boot_id().map(|boot| (config.data_dir.clone(), boot)),
            heartbeat_interval: Duration::from_millis(config.cluster.lease.heartbeat_interval_ms),
            controlled_shutdown_max: if config.cluster.controlled_shutdown_enable {
                CONTROLLED_SHUTDOWN_MAX
            } else {
                Duration::ZERO
            },
        };
        let task = tokio::spawn(lifecycle::run(
            lifecycle,
            self.lease_channel.clone(),
            offset_rx,
            self.want_shutdown.subscribe(),
            lease_tx,
        ));
        *self.lifecycle.lock() = Some(task);
        // Serve once the partitions are what the metadata says (clients connecting meanwhile wait in the
        // listen backlog rather than being told no partition has a leader), but never wait forever: a quorum
        // without a majority must not keep the broker from answering at all.
        let ready =
            tokio::time::timeout(REGISTRATION_WAIT_MAX, applied_rx.wait_for(|n| *n > 0)).await;
        if ready.is_err() {
            let lease = self.lease.borrow().clone();
            tracing::warn!(
                waited_s = REGISTRATION_WAIT_MAX.as_secs(),
                registered = lease.broker_epoch >= 0,
                fenced = lease.fenced,
                "not registered and unfenced by a controller yet (is a majority of controller.quorum.voters \
                 up?); serving with the metadata this node has, and registering in the background"
            );
        }
        Ok(())
    }

    /// On a sole voter, imports the topics and producer ids a single node kept outside the metadata log
    /// (`topics.json`, `producer-id-block`) into it, once: see [`annal_metadata::controller::SingleNodeImport`].
    /// Other nodes never import: a cluster's topics come from its controller.
    pub async fn import_single_node(
        &self,
        config: &BrokerConfig,
        replica_manager: &ReplicaManager,
        next_producer_id: i64,
    ) -> anyhow::Result<()> {
        if !config.cluster.is_sole_voter() {
            return Ok(());
        }
        let topics = replica_manager
            .topics()
            .iter()
            .map(|t| annal_metadata::controller::ImportedTopic {
                name: t.name.clone(),
                id: t.id,
                partitions: t.partition_count,
                configs: t.configs.clone(),
            })
            .collect();
        let import = annal_metadata::controller::SingleNodeImport {
            node_id: config.cluster.node_id,
            topics,
            next_producer_id,
        };
        match self
            .node
            .import_single_node(import, REGISTRATION_WAIT_MAX)
            .await?
        {
            annal_metadata::controller::ImportOutcome::Imported { offset, topics } => {
                tracing::info!(offset, topics = topics.len(), names = ?topics, next_producer_id, "imported this single node's topics into the new metadata log");
            }
            outcome => tracing::debug!(?outcome, "no single-node import"),
        }
        Ok(())
    }

    pub fn node(&self) -> &Arc<MetadataNode> {
        &self.node
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.node.image()
    }

    pub fn channel(&self) -> &Arc<ControllerChannel> {
        &self.channel
    }

    pub fn lease(&self) -> LeaseState {
        self.lease.borrow().clone()
    }

    /// Changes after every metadata image applied to this broker's partitions.
    pub fn watch_applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    pub fn client_listener_name(&self) -> &str {
        &self.client_listener_name
    }

    /// The brokers clients may use, as Metadata lists them (Kafka lists unfenced brokers only): id, the endpoint
    /// of this node's client listener name (or the broker's first endpoint), rack.
    pub fn live_brokers(&self) -> Vec<BrokerView> {
        // The listener the request came in on (Kafka answers with the same listener's endpoints), else the
        // client listener.
        let listener = crate::server::LISTENER
            .try_with(|l| l.to_string())
            .unwrap_or_else(|_| self.client_listener_name.clone());
        self.image()
            .live_brokers()
            .filter_map(|b| {
                let endpoint = b
                    .listeners
                    .iter()
                    .find(|l| l.name == listener)
                    .or_else(|| b.listeners.first())?;
                Some(BrokerView {
                    id: b.id,
                    host: endpoint.host.clone(),
                    port: endpoint.port,
                    rack: b.rack.clone(),
                })
            })
            .collect()
    }

    /// A producer id no broker of the cluster has handed out, from this broker's block (a new block from the
    /// controller when it runs out).
    pub async fn next_producer_id(&self, node_id: i32) -> anyhow::Result<i64> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            let epoch = self.lease().broker_epoch;
            anyhow::ensure!(
                epoch >= 0,
                "this broker is not registered with the controller yet; retry"
            );
            let req = kafka_protocol::messages::AllocateProducerIdsRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(node_id))
                .with_broker_epoch(epoch);
            let resp = self.channel.send(&req, 0).await?;
            anyhow::ensure!(
                resp.error_code == 0,
                "the controller refused a producer id block (error code {}); retry",
                resp.error_code
            );
            let start = resp.producer_id_start.0;
            let end = start
                .checked_add(i64::from(resp.producer_id_len))
                .filter(|end| *end > start)
                .ok_or_else(|| {
                    anyhow::anyhow!("the controller sent an empty or overflowing producer id block")
                })?;
            *ids = (start, end);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// The id Metadata and DescribeCluster give clients as the controller: the active controller if it is also a
    /// live broker, else this broker (which forwards admin requests to it). Clients send admin requests to that
    /// id and can only reach brokers they were told about, so a controller-only node must never be named (Kafka's
    /// brokers name a live broker too, KIP-590).
    pub fn controller_id_for_clients(&self, brokers: &[BrokerView], own_id: i32) -> i32 {
        match self.node.controller_id() {
            Some(id) if brokers.iter().any(|b| b.id == id) => id,
            _ => own_id,
        }
    }

    /// Controlled shutdown: asks the controller to move this broker's leaderships away and waits (bounded) for
    /// it to release the broker. Clients keep being served meanwhile, with NOT_LEADER_OR_FOLLOWER for what moved.
    pub async fn controlled_shutdown(&self) {
        let _ = self.want_shutdown.send(true);
        let task = self.lifecycle.lock().take();
        if let Some(task) = task {
            let _ =
                tokio::time::timeout(CONTROLLED_SHUTDOWN_MAX + Duration::from_secs(5), task).await;
        }
    }

    /// Stops the controller listener, the watcher and the metadata node.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        if let Some(f) = self.fetchers.lock().take() {
            f.shutdown();
        }
        // An apply in progress finishes (the watcher sees the stop only between images): at 100,000 partitions
        // one image can take seconds, and closing partitions under it left every log not marked clean.
        let watcher = self.image_watcher.lock().take();
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
        self.node.shutdown().await;
    }
}

/// Binds this node's controller listener. A zero-configuration node's listener (client port + 1 on loopback,
/// used only by the node itself) falls back to an ephemeral port when that one is taken: zero configuration must
/// not fail because some other program holds 9093.
async fn bind_controller_listener(
    listener: &crate::config::Listener,
    implicit: bool,
) -> anyhow::Result<tokio::net::TcpListener> {
    let bind = listener.bind.to_string();
    match tokio::net::TcpListener::bind(&bind).await {
        Ok(l) => Ok(l),
        Err(e) if implicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            tracing::info!(wanted = %bind, bound = %l.local_addr()?, "the controller listener's port is taken; using an ephemeral loopback port");
            Ok(l)
        }
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot bind the controller listener {} on {bind}; free the port or change `listeners`",
                listener.name
            )
        }),
    }
}

/// Reports how far this node has applied the metadata log (what heartbeats tell the controller, which unfences
/// the broker once that reaches its own registration).
async fn report_offsets(
    mut images: watch::Receiver<Arc<MetadataImage>>,
    offset: watch::Sender<i64>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let applied = images
            .borrow_and_update()
            .last_applied_offset
            .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
        offset.send_replace(applied);
        tokio::select! {
            biased;
            changed = images.changed() => if changed.is_err() { return },
            _ = crate::stopped(&mut stop) => return,
        }
    }
}

/// Applies each newly published image to the partitions.
///
/// Nothing is applied before the controller first unfences this broker. At start the image is a prefix of the
/// metadata log still being replayed or fetched: acting on it could delete topics the rest of the log still has,
/// or lead partitions whose leadership has since moved. The controller unfences a broker only once its image has
/// reached its own registration, so everything committed before this incarnation is in it. After that first
/// unfence every image is applied, fenced or not: a fenced broker must still learn that its leaderships moved.
async fn watch_image(
    mut images: watch::Receiver<Arc<MetadataImage>>,
    replica_manager: Arc<ReplicaManager>,
    fetchers: Arc<ReplicaFetchers>,
    inter_broker_listener: String,
    applied_tx: watch::Sender<u64>,
    mut lease: watch::Receiver<LeaseState>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        biased;
        caught_up = lease.wait_for(|l| l.broker_epoch >= 0 && !l.fenced) => if caught_up.is_err() { return },
        _ = crate::stopped(&mut stop) => return,
    }
    loop {
        let image = images.borrow_and_update().clone();
        let rm = replica_manager.clone();
        let img = image.clone();
        let (f, listener) = (fetchers.clone(), inter_broker_listener.clone());
        let started = std::time::Instant::now();
        let result = crate::blocking_caught(move || {
            apply::apply_image(&rm, &img, Some((&f, listener.as_str())))
        })
        .await;
        match result {
            Ok(Ok((applied, epochs))) => {
                applied_tx.send_modify(|n| *n += 1);
                if applied != apply::Applied::default() {
                    tracing::info!(
                        offset = ?image.last_applied_offset,
                        created = applied.topics_created,
                        deleted = applied.topics_deleted,
                        leadership_changes = applied.leadership_changes,
                        took_ms = started.elapsed().as_millis() as u64,
                        "applied metadata"
                    );
                }
                // After the image is reported applied (start-up serves from then on), before the next one.
                if !epochs.is_empty() {
                    let (count, started) = (epochs.len(), std::time::Instant::now());
                    if let Err(e) = crate::blocking_caught(move || epochs.sync()).await {
                        tracing::error!(error = %e, "the leader-epoch checkpoint sync panicked");
                        return;
                    }
                    tracing::debug!(
                        partitions = count,
                        took_ms = started.elapsed().as_millis() as u64,
                        "synced leader-epoch checkpoints"
                    );
                }
            }
            Ok(Err(e)) => {
                // Not reported as caught up: the controller keeps this broker fenced until a retry succeeds.
                tracing::error!(error = %format!("{e:#}"), "applying metadata to the partitions failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "the metadata apply task panicked");
                return;
            }
        }
        tokio::select! {
            biased;
            changed = images.changed() => if changed.is_err() { return },
            _ = crate::stopped(&mut stop) => return,
        }
    }
}
