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
