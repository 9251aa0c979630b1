//! annal-metadata's network seams (`annal_metadata::env`) over turmoil's simulated TCP.

use std::io;
use std::net::SocketAddr;

use annal_metadata::env::{BoxConnection, BoxFuture, Listener, Network};

/// Connections through turmoil: delivered, delayed, held or dropped as the simulated topology says.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimNetwork;

impl Network for SimNetwork {
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr.as_str()).await?;
            Ok(Box::new(stream) as BoxConnection)
        })
    }

    fn bind(&self, addr: String) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            // turmoil binds a port on the current host; the host part of `addr` is this host's name.
            let port = addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("no port in {addr}"))
                })?;
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
            Ok(Box::new(SimListener(listener)) as Box<dyn Listener>)
        })
    }
}

/// A turmoil listener behind annal-metadata's [`Listener`] seam (a local wrapper: both are foreign here).
pub struct SimListener(pub turmoil::net::TcpListener);

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            Ok((Box::new(stream) as BoxConnection, peer))
        })
    }
}

/// A listening socket as the kernel keeps one: connections are accepted at once into a bounded backlog, whether
/// or not the application has started accepting, and a connection past the backlog is dropped (Linux drops the
/// SYN; here the accepted stream is closed, and the client sees its connection fail). turmoil instead keeps every
/// connection attempt waiting on the bound port until the application accepts it, and panics when 64 wait: a
/// broker that binds its port and then takes seconds to register (a restart under faults) while clients and
/// other brokers keep connecting took the whole run down (`annal-sim --brokers --seed 144 --seconds 60`,
/// seed 75 too, both with the transactional workload).
pub struct BacklogListener {
    accepted: tokio::sync::mpsc::Receiver<(turmoil::net::TcpStream, SocketAddr)>,
    task: tokio::task::JoinHandle<()>,
}

/// The backlog of the broker's OS listener in production (`tokio::net::TcpListener::bind` asks for 1024).
pub const BACKLOG: usize = 1024;

impl BacklogListener {
    /// Binds `port` on the current host and accepts its connections into a backlog of `backlog`.
    pub async fn bind(port: u16, backlog: usize) -> io::Result<BacklogListener> {
        let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
        let (queue, accepted) = tokio::sync::mpsc::channel(backlog.max(1));
        let task = tokio::spawn(async move {
            while let Ok(connection) = listener.accept().await {
                // Full: dropped, as a connection past the kernel's backlog is.
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                    queue.try_send(connection)
                {
                    return;
                }
            }
        });
        Ok(BacklogListener { accepted, task })
    }
}

impl Drop for BacklogListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener for BacklogListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConnection, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self
                .accepted
                .recv()
                .await
                .ok_or_else(|| io::Error::other("the listening socket is closed"))?;
            Ok((Box::new(stream) as BoxConnection, peer))
        })
    }
}
