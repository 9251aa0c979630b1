//! What a metadata node takes from the world around it, behind seams small enough that production and the
//! deterministic simulator (`crates/annal-sim`, docs/decisions/0011-simulation.md) use the same code:
//!
//! - [`Network`] and [`Listener`]: every connection the quorum, the CONTROLLER listener and the crash probes
//!   make or accept. Production: tokio's TCP ([`TokioNetwork`], `tokio::net::TcpListener`); the simulator:
//!   turmoil's simulated TCP.
//! - [`DiskIo`]: where the blocking metadata-log I/O runs. Production: tokio's blocking pool, off the async
//!   workers; the simulator: inline, because a real thread finishing at a wall-clock moment would make the
//!   order of wake-ups, and so the run, depend on the machine.
//! - the clock: time is read only as `tokio::time::Instant` (virtual under a paused runtime, the real
//!   monotonic clock otherwise), never `std::time::Instant::now()`.
//! - randomness: openraft 0.9 draws each election timeout with `rand::thread_rng`, which no seed reaches;
//!   [`NodeEnv::fixed_election_timeout_ms`] replaces the draw with a value the simulator picks from its seed.
//!
//! [`NodeEnv::production`] is what `MetadataNode::start` uses.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed, sendable future (the seams are object-safe so nothing above them turns generic).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream to or from a peer: a TCP connection in production, a simulated one in the simulator.
pub trait Connection: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Connection for T {}

/// An owned [`Connection`].
pub type BoxConnection = Box<dyn Connection>;

/// How a node opens connections.
pub trait Network: Send + Sync + 'static {
    /// Connects to `addr` ("host:port"; an IPv6 literal in brackets). Timeouts are the caller's.
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>>;
}

/// How a server accepts connections.
pub trait Listener: Send + 'static {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>>;
}

/// The operating system's TCP, through tokio.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioNetwork;

impl Network for TokioNetwork {
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            // Raft RPCs and controller requests are small request/response exchanges: no Nagle delay.
            let _ = stream.set_nodelay(true);
            Ok(Box::new(stream) as BoxConnection)
        })
    }
}

impl Listener for tokio::net::TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
            let _ = stream.set_nodelay(true);
            Ok((Box::new(stream) as BoxConnection, peer))
        })
    }
}

/// Where blocking disk I/O (appends and fsyncs of the metadata log, snapshots) runs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum DiskIo {
    /// tokio's blocking pool: the async workers never wait on a disk.
    #[default]
    BlockingPool,
    /// On the calling task. Only for a single-threaded simulation, where the disk must not race the
    /// scheduler.
    Inline,
}

impl DiskIo {
    /// Runs `f` where this mode says; `Err` only when the blocking task panicked or was cancelled.
    pub(crate) async fn run<T, F>(self, f: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self {
            DiskIo::BlockingPool => tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| format!("blocking disk task: {e}")),
            DiskIo::Inline => Ok(f()),
        }
    }
}

/// Called with (index, records) for every committed normal entry a node applies, after its image has it.
pub type ApplyObserver = Arc<dyn Fn(u64, &[Vec<u8>]) + Send + Sync>;

/// Everything a metadata node takes from its environment.
#[derive(Clone)]
pub struct NodeEnv {
    pub network: Arc<dyn Network>,
    pub disk_io: DiskIo,
    /// `Some(t)`: every election timeout is `t` ms (openraft is given the range `[t, t + 1)`), instead of a draw
    /// from `[min, max)` with the OS's randomness. For the simulator, which picks `t` per node from its seed.
    pub fixed_election_timeout_ms: Option<u64>,
    /// Sees every applied entry (the simulator's invariant checks); `None` in production.
    pub on_apply: Option<ApplyObserver>,
}

impl NodeEnv {
    /// The operating system's network, the blocking pool, openraft's own election timeout draw.
    pub fn production() -> NodeEnv {
        NodeEnv {
            network: Arc::new(TokioNetwork),
            disk_io: DiskIo::BlockingPool,
            fixed_election_timeout_ms: None,
            on_apply: None,
        }
    }
}

impl Default for NodeEnv {
    fn default() -> Self {
        NodeEnv::production()
    }
}

impl fmt::Debug for NodeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeEnv")
            .field("disk_io", &self.disk_io)
            .field("fixed_election_timeout_ms", &self.fixed_election_timeout_ms)
            .field("on_apply", &self.on_apply.is_some())
            .finish_non_exhaustive()
    }
}

/// The monotonic clock every decision reads: tokio's, so a paused (simulated) runtime controls it.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
