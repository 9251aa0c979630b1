//! The network seam: every connection Annal's nodes open or accept goes through [`Network`] and [`Listener`],
//! so the deterministic simulator (`crates/annal-sim`, docs/decisions/0011-simulation.md) can put its
//! simulated TCP underneath the same code that runs in production.
//!
//! It lives here, at the bottom of the crate graph, because both sides of the broker's data path need it:
//! [`crate::Connection`] (the replica fetchers, the broker's controller channel, transaction markers) and
//! `annal_metadata` (the Raft transport, the CONTROLLER listener, the crash probes), which re-exports it as
//! `annal_metadata::env`. Production: tokio's TCP ([`TokioNetwork`], `tokio::net::TcpListener`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed, sendable future (the seams are object-safe so nothing above them turns generic).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream to or from a peer: a TCP connection in production, a simulated one in the simulator.
pub trait Connection: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Connection for T {}

/// An owned [`Connection`].
pub type BoxConnection = Box<dyn Connection>;

/// How a node opens connections and binds listeners.
pub trait Network: Send + Sync + 'static {
    /// Connects to `addr` ("host:port"; an IPv6 literal in brackets). Timeouts are the caller's.
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>>;

    /// Binds a listener on `addr` ("host:port"). Production code that needs the OS socket itself (the broker's
    /// `sendfile(2)` path, ephemeral ports) binds `tokio::net::TcpListener` directly; this is for a node whose
    /// network is not the OS's.
    fn bind(&self, addr: String) -> BoxFuture<'static, io::Result<Box<dyn Listener>>>;
}

/// How a server accepts connections.
pub trait Listener: Send + 'static {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>>;
}

impl Listener for Box<dyn Listener> {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>> {
        (**self).accept()
    }
}

/// The operating system's TCP, through tokio.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioNetwork;

impl Network for TokioNetwork {
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            // Kafka and Raft RPCs are request/response exchanges: no Nagle delay.
            let _ = stream.set_nodelay(true);
            Ok(Box::new(stream) as BoxConnection)
        })
    }

    fn bind(&self, addr: String) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(listener) as Box<dyn Listener>)
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
