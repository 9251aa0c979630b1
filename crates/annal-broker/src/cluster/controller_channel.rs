//! The broker's channel to the active controller: one connection at a time, to the voter the local quorum names
//! as leader, re-resolved whenever a request fails or the controller answers NOT_CONTROLLER.
//!
//! Requests go one at a time (a tokio Mutex around the connection): broker-to-controller traffic is a heartbeat
//! every couple of seconds plus rare admin requests, so a pipeline would buy nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use kafka_protocol::protocol::Request;
use tokio::sync::{watch, Mutex};

use annal_client::net::{Network, TokioNetwork};
use annal_client::{Connection, ConnectionOptions};

/// Kafka's NOT_CONTROLLER: the node asked is not (or no longer) the active controller.
pub const NOT_CONTROLLER: i16 = 41;

/// How long one attempt to reach a controller may take before the next voter is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub struct ControllerChannel {
    /// Voter id -> "host:port" of its CONTROLLER listener.
    voters: BTreeMap<u64, String>,
    /// The quorum leader as the local Raft node knows it.
    leader: watch::Receiver<Option<u64>>,
    conn: Mutex<Option<(u64, Connection)>>,
    /// Which voter to try while no leader is known; advanced after every failure, so a dead first voter does
    /// not hide the others.
    guess: std::sync::atomic::AtomicUsize,
    /// How long one request may wait for its answer (the lease channel's is below the session timeout, so a
    /// hung controller costs a heartbeat or two, never the lease).
    request_timeout: Duration,
    /// How connections are opened (the OS's TCP unless the broker runs in the simulator).
    network: Arc<dyn Network>,
}

impl ControllerChannel {
    pub fn new(
        voters: BTreeMap<u64, String>,
        leader: watch::Receiver<Option<u64>>,
        request_timeout: Duration,
    ) -> Self {
        assert!(!voters.is_empty(), "a cluster has at least one voter");
        assert!(
            request_timeout > Duration::ZERO,
            "a request timeout is positive"
        );
        ControllerChannel {
            voters,
            leader,
            conn: Mutex::new(None),
            guess: std::sync::atomic::AtomicUsize::new(0),
            request_timeout,
            network: Arc::new(TokioNetwork),
        }
    }

    /// Opens its connections through `network` instead of the OS's TCP.
    pub fn with_network(mut self, network: Arc<dyn Network>) -> Self {
        self.network = network;
        self
    }

    /// The controller this channel would talk to now: the known leader, else the first voter.
    fn target(&self) -> (u64, String) {
        let leader = *self.leader.borrow();
        match leader.and_then(|id| self.voters.get(&id).map(|a| (id, a.clone()))) {
            Some(t) => t,
            None => {
                let n = self.guess.load(std::sync::atomic::Ordering::Relaxed) % self.voters.len();
                let (id, addr) = self.voters.iter().nth(n).expect("n < voters.len()");
                (*id, addr.clone())
            }
        }
    }

    /// Sends `request` at `version` to the active controller. Connection errors drop the connection so the next
    /// call reconnects (to whichever voter leads by then).
    pub async fn send<R: Request>(&self, request: &R, version: i16) -> Result<R::Response> {
        let mut guard = self.conn.lock().await;
        let (want_id, addr) = self.target();
        let stale = !matches!(&*guard, Some((id, c)) if *id == want_id && !c.is_closed());
        if stale {
            *guard = None;
            let connected = tokio::time::timeout(
                CONNECT_TIMEOUT,
                Connection::connect_with(&addr, self.options()),
            )
            .await
            .map_err(|_| {
                anyhow!("controller {want_id} at {addr} did not answer within {CONNECT_TIMEOUT:?}")
            })
            .and_then(|r| {
                r.with_context(|| format!("cannot reach controller {want_id} at {addr}"))
            });
            match connected {
                Ok(conn) => *guard = Some((want_id, conn)),
                Err(e) => {
                    self.guess
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        let (_, conn) = guard.as_mut().expect("connected above");
        match conn.send_version(request, version).await {
            Ok(r) => Ok(r),
            Err(e) => {
                *guard = None;
                self.guess
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(e.context(format!("request to controller {want_id} at {addr} failed")))
            }
        }
    }

    fn options(&self) -> ConnectionOptions {
        ConnectionOptions {
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: self.request_timeout,
            client_id: "annal-broker".into(),
            network: self.network.clone(),
            ..ConnectionOptions::default()
        }
    }

    /// Forget the connection (after NOT_CONTROLLER) so the next request resolves the leader again.
    pub async fn reset(&self) {
        self.guess
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.conn.lock().await = None;
    }
}
