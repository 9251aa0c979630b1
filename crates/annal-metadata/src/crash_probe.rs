//! Fencing a crashed broker without waiting out its lease (docs/decisions/0010-crash-fencing.md).
//!
//! Kafka's controller learns that a broker died only when its lease lapses (`broker.session.timeout.ms`, 9 s by
//! default), so every partition the broker led is unwritable for that long. When a broker *process* dies (a
//! crash, kill -9, OOM) the kernel closes its sockets at once: the active controller sees the heartbeat
//! connection end, and nothing listens on the broker's endpoints any more. This module turns that into an
//! immediate fencing, with one rule that keeps it safe: a broker is fenced early only on proof that no process
//! listens where it registered, namely a refused TCP connection on every registered endpoint. A connection that
//! is accepted (the broker is alive, or paused: the kernel still completes handshakes from the listen backlog)
//! or that times out (a network partition, a full backlog) proves nothing, and the lease decides as in Kafka.
//! A zombie (SIGSTOP, a long stall) therefore keeps the lease path; only a process that is really gone is
//! fenced early. A false positive is impossible on a live process and harmless anyway: a fenced broker that
//! still heartbeats is unfenced again once caught up, as after any fencing.
//!
//! Probes happen when a connection that carried a broker's heartbeats closes, and once for every unfenced
//! broker when this node becomes the active controller (the previous one may have died together with a
//! broker, and that broker will never connect here). At most one probe per broker runs at a time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::controller::Controller;
use crate::env::{Network, TokioNetwork};

/// When to look, after the trigger: a dying process closes its connections and its listening socket within
/// moments of each other but in no set order, so the first look waits a little, and later looks catch a
/// process that took longer to go (each look that finds a listener ends the probe: the broker is alive).
const LOOKS_AFTER: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_millis(1000),
];
/// A connect that takes longer than this proves nothing either way.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Bounds the probes running at once (one per broker, and no more than this many brokers).
const PROBES_MAX: usize = 64;

/// What one look at an endpoint found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Something accepted the connection: a process listens there.
    Listening,
    /// Connection refused: nothing listens there.
    Refused,
    /// Timed out, unreachable, unresolvable: no proof either way.
    Unknown,
}

/// Connects to `host:port` once over the operating system's TCP and closes at once.
pub async fn reach(host: &str, port: u16) -> Reach {
    reach_over(&TokioNetwork, host, port).await
}

/// Connects to `host:port` once over `network` and closes at once.
pub async fn reach_over(network: &dyn Network, host: &str, port: u16) -> Reach {
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, network.connect(addr)).await {
        Ok(Ok(_)) => Reach::Listening,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Reach::Refused,
        Ok(Err(_)) | Err(_) => Reach::Unknown,
    }
}

/// The probes in flight, by broker id.
pub struct CrashProbes {
    running: Mutex<HashSet<i32>>,
    network: Arc<dyn Network>,
}

impl Default for CrashProbes {
    fn default() -> Self {
        CrashProbes::new(Arc::new(TokioNetwork))
    }
}

impl CrashProbes {
    /// Probes that look at endpoints over `network`.
    pub fn new(network: Arc<dyn Network>) -> CrashProbes {
        CrashProbes {
            running: Mutex::new(HashSet::new()),
            network,
        }
    }

    /// Starts a probe of broker `broker_id` (unless one runs already) that fences it through `controller` once
    /// every registered endpoint of the registration it holds now refuses connections.
    pub fn spawn(
        self: &Arc<Self>,
        controller: Arc<Controller>,
        broker_id: i32,
        trigger: &'static str,
    ) {
        {
            let mut running = self.running.lock();
            if running.len() >= PROBES_MAX || !running.insert(broker_id) {
                return;
            }
        }
        let probes = self.clone();
        tokio::spawn(async move {
            probe(&controller, &*probes.network, broker_id, trigger).await;
            probes.running.lock().remove(&broker_id);
        });
    }
}

async fn probe(
    controller: &Controller,
    network: &dyn Network,
    broker_id: i32,
    trigger: &'static str,
) {
    let Some((epoch, endpoints)) = unfenced_registration(controller, broker_id) else {
        return;
    };
    if endpoints.is_empty() {
        return;
    }
    for pause in LOOKS_AFTER {
        tokio::time::sleep(pause).await;
        // Re-registered (a new process) or fenced meanwhile: nothing left to decide here.
        if unfenced_registration(controller, broker_id).map(|(e, _)| e) != Some(epoch) {
            return;
        }
        let mut all_refused = true;
        for (host, port) in &endpoints {
            match reach_over(network, host, *port).await {
                Reach::Refused => {}
                Reach::Listening => return,
                Reach::Unknown => all_refused = false,
            }
        }
        if all_refused {
            match controller.fence_crashed(broker_id, epoch, crate::env::now()).await {
                Ok(true) => tracing::info!(
                    broker = broker_id,
                    broker_epoch = epoch,
                    trigger,
                    "fenced a broker whose process is gone: every endpoint it registered refuses connections"
                ),
                Ok(false) => {}
                Err(e) => tracing::debug!(broker = broker_id, error = %e, "early fencing did not commit; the lease will decide"),
            }
            return;
        }
    }
}

/// The broker's epoch and endpoints while it is registered and unfenced.
fn unfenced_registration(
    controller: &Controller,
    broker_id: i32,
) -> Option<(i64, Vec<(String, u16)>)> {
    let image = controller.image();
    let broker = image.broker(broker_id)?;
    if broker.fenced {
        return None;
    }
    let endpoints = broker
        .listeners
        .iter()
        .map(|l| (l.host.clone(), l.port))
        .collect();
    Some((broker.epoch, endpoints))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listener_a_closed_port_and_a_paused_process() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(reach("127.0.0.1", port).await, Reach::Listening);
        // A listener that never accepts (a SIGSTOPped process) still completes handshakes from its backlog:
        // it must read as alive, or a zombie would be fenced early.
        assert_eq!(reach("127.0.0.1", port).await, Reach::Listening);
        drop(listener);
        assert_eq!(reach("127.0.0.1", port).await, Reach::Refused);
        assert_eq!(reach("no-such-host.invalid", port).await, Reach::Unknown);
    }
}
