//! The broker's lease with the controller (KIP-631): BrokerRegistration once per incarnation, then
//! BrokerHeartbeat every `broker.heartbeat.interval.ms`, carrying how far this broker has applied the metadata log.
//!
//! The controller fences a broker whose heartbeats stop for `broker.session.timeout.ms` and unfences it once its
//! reported metadata offset has reached its own registration. Shutdown is controlled: heartbeats ask
//! WantShutDown until the controller answers ShouldShutDown (it has moved this broker's leaderships away), or
//! until a bounded wait runs out.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;
use uuid::Uuid;

use super::controller_channel::{ControllerChannel, NOT_CONTROLLER};

const REGISTRATION_VERSION: i16 = 3;
const HEARTBEAT_VERSION: i16 = 1;
/// Kafka's STALE_BROKER_EPOCH: the controller has a newer registration for this id (or none): register again.
const STALE_BROKER_EPOCH: i16 = 77;
/// How long to wait between failed attempts to reach the controller.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's `SecurityProtocol` id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL.
    pub security_protocol: i16,
}

pub struct LifecycleConfig {
    pub node_id: i32,
    pub cluster_id: String,
    pub incarnation_id: Uuid,
    pub listeners: Vec<Endpoint>,
    pub rack: Option<String>,
    /// The epoch the last process of this node stopped cleanly at (`.kafka_cleanshutdown`), or -1: sent as
    /// PreviousBrokerEpoch by this process's first registration only.
    pub previous_broker_epoch: i64,
    /// Where to record each registration's epoch with the machine's boot id (`clean_shutdown::record_running`):
    /// the data directory and the boot id, when the boot id is known.
    pub running_record: Option<(std::path::PathBuf, String)>,
    pub heartbeat_interval: Duration,
    /// The longest a controlled shutdown waits for the controller to move leaderships away.
    pub controlled_shutdown_max: Duration,
}

/// What the broker knows of its own standing, published for the rest of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// -1 until the first registration is accepted.
    pub broker_epoch: i64,
    pub fenced: bool,
    pub should_shut_down: bool,
}

impl Default for LeaseState {
    fn default() -> Self {
        LeaseState {
            broker_epoch: -1,
            fenced: true,
            should_shut_down: false,
        }
    }
}

/// Runs the lease until `want_shutdown` turns true and the controlled shutdown completes (or times out).
/// `metadata_offset` is the offset of the last metadata record this broker has applied.
pub async fn run(
    config: LifecycleConfig,
    channel: Arc<ControllerChannel>,
    metadata_offset: watch::Receiver<i64>,
    mut want_shutdown: watch::Receiver<bool>,
    state: watch::Sender<LeaseState>,
) {
    let mut shutdown_deadline: Option<tokio::time::Instant> = None;
    // Later registrations of this process (after STALE_BROKER_EPOCH) share its incarnation id, which is what
    // shows the controller they lost nothing; the file's epoch speaks for the previous process only.
    let mut previous_epoch = config.previous_broker_epoch;
    loop {
        let epoch = state.borrow().broker_epoch;
        if epoch < 0 {
            if *want_shutdown.borrow() {
                return; // never registered: nothing to hand over
            }
            match register(&config, &channel, previous_epoch).await {
                Ok(new_epoch) => {
                    previous_epoch = -1;
                    if let Some((dir, boot)) = config.running_record.clone() {
                        let recorded = crate::blocking(move || {
                            crate::clean_shutdown::record_running(&dir, new_epoch, &boot)
                        })
                        .await;
                        if let Err(e) = recorded {
                            // Only costs the next restart its proof of a process crash: it will count as unclean.
                            tracing::warn!(error = %e, file = crate::clean_shutdown::RUNNING_FILE_NAME, "cannot record the broker epoch and boot id");
                        }
                    }
                    tracing::info!(
                        node = config.node_id,
                        broker_epoch = new_epoch,
                        "registered with the controller"
                    );
                    state.send_modify(|s| {
                        s.broker_epoch = new_epoch;
                        s.fenced = true;
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "registration failed; retrying");
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep(RETRY_BACKOFF) => {}
                        _ = want_shutdown.changed() => {}
                    }
                    continue;
                }
            }
        }
        let shutting_down = *want_shutdown.borrow();
        if shutting_down && shutdown_deadline.is_none() {
            shutdown_deadline = Some(tokio::time::Instant::now() + config.controlled_shutdown_max);
            tracing::info!(
                "controlled shutdown: asking the controller to move this broker's leaderships"
            );
        }
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(config.node_id))
            .with_broker_epoch(state.borrow().broker_epoch)
            .with_current_metadata_offset(*metadata_offset.borrow())
            .with_want_fence(false)
            .with_want_shut_down(shutting_down);
        match channel.send(&request, HEARTBEAT_VERSION).await {
            Ok(r) if r.error_code == 0 => {
                state.send_if_modified(|s| {
                    let changed =
                        s.fenced != r.is_fenced || s.should_shut_down != r.should_shut_down;
                    if s.fenced && !r.is_fenced {
                        tracing::info!(node = config.node_id, "unfenced by the controller");
                    } else if !s.fenced && r.is_fenced {
                        tracing::warn!(node = config.node_id, "fenced by the controller");
                    }
                    s.fenced = r.is_fenced;
                    s.should_shut_down = r.should_shut_down;
                    changed
                });
                if shutting_down && r.should_shut_down {
                    tracing::info!("controlled shutdown: the controller released this broker");
                    return;
                }
            }
            Ok(r) if r.error_code == STALE_BROKER_EPOCH => {
                tracing::warn!(
                    node = config.node_id,
                    "the controller no longer knows this registration; registering again"
                );
                state.send_modify(|s| *s = LeaseState::default());
                continue;
            }
            Ok(r) => {
                if r.error_code == NOT_CONTROLLER {
                    channel.reset().await;
                }
                tracing::debug!(error_code = r.error_code, "heartbeat refused");
            }
            Err(e) => tracing::debug!(error = %format!("{e:#}"), "heartbeat failed"),
        }
        if let Some(deadline) = shutdown_deadline {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    waited_ms = config.controlled_shutdown_max.as_millis() as u64,
                    "controlled shutdown: the controller did not release this broker in time; stopping anyway"
                );
                return;
            }
        }
        // While shutting down, heartbeat quickly so the hand-over completes promptly.
        // While fenced too: a broker that just registered (or resumed) is unfenced at its first heartbeat
        // that shows it caught up, so waiting a whole interval would only delay serving.
        let pause = if shutting_down || state.borrow().fenced {
            RETRY_BACKOFF
        } else {
            config.heartbeat_interval
        };
        tokio::select! {
            biased;
            _ = tokio::time::sleep(pause) => {}
            _ = want_shutdown.changed(), if !shutting_down => {}
        }
    }
}

async fn register(
    config: &LifecycleConfig,
    channel: &ControllerChannel,
    previous_epoch: i64,
) -> anyhow::Result<i64> {
    let listeners = config
        .listeners
        .iter()
        .map(|l| {
            Listener::default()
                .with_name(StrBytes::from_string(l.name.clone()))
                .with_host(StrBytes::from_string(l.host.clone()))
                .with_port(l.port)
                .with_security_protocol(l.security_protocol)
        })
        .collect();
    let request = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(config.node_id))
        .with_cluster_id(StrBytes::from_string(config.cluster_id.clone()))
        .with_incarnation_id(config.incarnation_id)
        .with_listeners(listeners)
        .with_features(vec![Feature::default()
            .with_name(StrBytes::from_static_str("metadata.version"))
            .with_min_supported_version(1)
            .with_max_supported_version(1)])
        .with_rack(config.rack.clone().map(StrBytes::from_string))
        .with_previous_broker_epoch(previous_epoch);
    let response = channel.send(&request, REGISTRATION_VERSION).await?;
    if response.error_code == NOT_CONTROLLER {
        channel.reset().await;
    }
    anyhow::ensure!(
        response.error_code == 0,
        "the controller refused the registration of node {} with error code {}",
        config.node_id,
        response.error_code
    );
    Ok(response.broker_epoch)
}
