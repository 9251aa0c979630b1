//! annal-metadata's network seams (`annal_metadata::env`) over turmoil's simulated TCP.
//!
//! One difference from turmoil is made here: turmoil answers a connection attempt whose SYN a partition (or a
//! lossy link) drops with an immediate "connection refused", where real TCP retransmits the SYN and, while the
//! link stays cut, times out. A refusal proves the peer's process is gone (decision 0010's crash probes fence a
//! broker on it), so a cut link must not produce one: [`SimNetwork::connect`] waits and tries again, as TCP
//! retransmits, for as long as the driver says the link drops (`cut`, `mend`), and the caller's connect timeout
//! decides. A refusal over a healthy link (nothing listens there) is returned as it is. On by default;
//! `--turmoil-refusals` ([`set_tcp_timeouts`]) turns it off, to replay seeds found before (with refusals, the
//! crash probes of decision 0010 fenced cut-off brokers early, which cannot happen on a real network;
//! docs/decisions/0011-simulation.md).
//!
//! What turmoil still does unlike TCP: a cut link drops the bytes of established connections for good, where TCP
//! would retransmit them once the link heals. Such a connection hangs until its user's request timeout, as one
//! black-holed by a middlebox would; the checks allow for the longest such timeout (30.5 s) after healing.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use annal_metadata::env::{BoxConnection, BoxFuture, Listener, Network};
use parking_lot::Mutex;

/// Directed host pairs whose link drops everything (or loses messages at random), each with how many active
/// faults cut it. The simulation runs one seed at a time per process, on one thread; `reset` starts each run.
static CUT: Mutex<BTreeMap<(String, String), u32>> = Mutex::new(BTreeMap::new());
/// Whether refusals over cut links become timeouts ([`set_tcp_timeouts`]).
static TCP_TIMEOUTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns refusals over cut links into timeouts, as real TCP's, for the runs that follow (the default; off with
/// `--turmoil-refusals`).
pub fn set_tcp_timeouts(on: bool) {
    TCP_TIMEOUTS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Linux's first SYN retransmission comes after one second.
const SYN_RETRANSMIT: Duration = Duration::from_secs(1);

/// Forgets every cut link (before a run).
pub fn reset() {
    CUT.lock().clear();
}

/// Nothing from host `from` reaches host `to` (until as many `mend`s).
pub fn cut(from: &str, to: &str) {
    *CUT.lock()
        .entry((from.to_string(), to.to_string()))
        .or_insert(0) += 1;
}

/// Undoes one `cut(from, to)`.
pub fn mend(from: &str, to: &str) {
    let mut cut = CUT.lock();
    let key = (from.to_string(), to.to_string());
    if let Some(n) = cut.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            cut.remove(&key);
        }
    }
}

/// Whether a TCP handshake between `a` and `b` can be lost: a SYN or its answer dropped.
fn drops(a: &str, b: &str) -> bool {
    if !TCP_TIMEOUTS.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    let cut = CUT.lock();
    cut.contains_key(&(a.to_string(), b.to_string()))
        || cut.contains_key(&(b.to_string(), a.to_string()))
}

/// Connections through turmoil from host `me`: delivered, delayed, held or dropped as the simulated topology says.
#[derive(Debug, Clone)]
pub struct SimNetwork {
    me: String,
}

impl SimNetwork {
    /// The network as host `me` (a turmoil host name) sees it.
    pub fn from_host(me: impl Into<String>) -> SimNetwork {
        SimNetwork { me: me.into() }
    }
}

impl Network for SimNetwork {
    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>> {
        let me = self.me.clone();
        Box::pin(async move {
            let peer = addr
                .rsplit_once(':')
                .map_or(addr.as_str(), |(h, _)| h)
                .to_string();
            loop {
                match turmoil::net::TcpStream::connect(addr.as_str()).await {
                    Ok(stream) => return Ok(Box::new(stream) as BoxConnection),
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && drops(&me, &peer) => {
                        tokio::time::sleep(SYN_RETRANSMIT).await;
                    }
                    Err(e) => return Err(e),
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_stays_cut_until_every_fault_on_it_ends() {
        reset();
        set_tcp_timeouts(true);
        cut("c1", "c2");
        cut("c1", "c2");
        assert!(drops("c2", "c1"), "a handshake needs both directions");
        mend("c1", "c2");
        assert!(drops("c1", "c2"));
        mend("c1", "c2");
        assert!(!drops("c1", "c2"));
        mend("c1", "c2");
        assert!(!drops("c1", "c2"));
        cut("c1", "c2");
        set_tcp_timeouts(false);
        assert!(!drops("c1", "c2"), "off: turmoil's refusals pass through");
        reset();
    }
}
