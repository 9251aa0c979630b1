//! What a broker takes from the world around it, so the deterministic simulator (`crates/annal-sim`,
//! docs/decisions/0011-simulation.md) can run the real broker: the network (connections and listeners), the
//! metadata node's environment, and the seeds of what production draws from the OS.
//!
//! Production ([`BrokerEnv::production`]) binds the OS's TCP listeners itself (file ranges of a Fetch go out
//! with `sendfile(2)` on them) and connects with `annal_client::net::TokioNetwork`. A simulated broker gets
//! every listener and connection from [`BrokerEnv::network`] and writes file ranges by copying.
//!
//! Blocking disk work runs on tokio's blocking pool unless this thread's
//! `annal_metadata::env::testing::Testing::inline_disk_io` says otherwise ([`crate::blocking`]).

use std::sync::Arc;

use annal_client::net::{Listener, Network, TokioNetwork};
use annal_metadata::NodeEnv;

/// Everything a broker takes from its environment.
#[derive(Clone, Default)]
pub struct BrokerEnv {
    /// `None`: the OS's TCP (listeners bound by the broker, connections through `TokioNetwork`). `Some`: every
    /// listener and connection, the metadata node's included, goes through this network.
    pub network: Option<Arc<dyn Network>>,
    /// The metadata node's environment (its network should be the same as [`BrokerEnv::network`]).
    pub node: NodeEnv,
    /// `Some(s)`: the controller's seed and the broker's incarnation id derive from `s` instead of the OS's
    /// randomness (the simulator draws one per boot, so a restarted broker is a new incarnation).
    pub seed: Option<u64>,
    /// `Some(id)`: the machine boot this process runs on (the simulator's, which changes at a simulated power
    /// loss only); `None`: the kernel's boot id. See `clean_shutdown`: a restart on the same boot lost nothing.
    pub boot_id: Option<String>,
}

impl BrokerEnv {
    /// The operating system's network and randomness.
    pub fn production() -> BrokerEnv {
        BrokerEnv::default()
    }

    /// The machine boot this process runs on, if known.
    pub fn boot_id(&self) -> Option<String> {
        self.boot_id
            .clone()
            .or_else(crate::clean_shutdown::kernel_boot_id)
    }

    /// The network connections go through.
    pub fn connector(&self) -> Arc<dyn Network> {
        self.network
            .clone()
            .unwrap_or_else(|| Arc::new(TokioNetwork) as Arc<dyn Network>)
    }

    /// The controller's seed: from [`BrokerEnv::seed`], else the OS's randomness.
    pub fn controller_seed(&self) -> u64 {
        self.seed.unwrap_or_else(rand::random)
    }

    /// This broker process's incarnation id (BrokerRegistration): from [`BrokerEnv::seed`], else random.
    pub fn incarnation_id(&self, node_id: i32) -> uuid::Uuid {
        match self.seed {
            Some(s) => uuid::Uuid::from_u64_pair(s, node_id as u64 | 1 << 40),
            None => uuid::Uuid::new_v4(),
        }
    }
}

impl std::fmt::Debug for BrokerEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerEnv")
            .field("simulated_network", &self.network.is_some())
            .field("node", &self.node)
            .field("seed", &self.seed)
            .finish()
    }
}

/// A bound broker listener: the OS's (zero-copy `sendfile(2)` for Fetch) or one from [`BrokerEnv::network`].
pub enum BrokerListener {
    Tcp(tokio::net::TcpListener),
    Seam(Box<dyn Listener>),
}

impl BrokerListener {
    /// The bound address, when the listener is the OS's.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            BrokerListener::Tcp(l) => l.local_addr().ok(),
            BrokerListener::Seam(_) => None,
        }
    }
}

impl From<tokio::net::TcpListener> for BrokerListener {
    fn from(l: tokio::net::TcpListener) -> BrokerListener {
        BrokerListener::Tcp(l)
    }
}
