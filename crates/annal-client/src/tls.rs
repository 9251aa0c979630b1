//! TLS for a [`crate::Connection`] to an SSL or SASL_SSL listener, with rustls. The caller builds the
//! `rustls::ClientConfig` (the CAs it trusts and, for a listener with `ssl.client.auth`, its own certificate);
//! the connection checks the broker's certificate against the host of the address it connects to, an IP address
//! or a DNS name, as Kafka's default `ssl.endpoint.identification.algorithm=https` does.

use std::io;
use std::sync::Arc;

use crate::net::{BoxConnection, BoxFuture, Network};

/// How connections speak TLS. `Debug` shows nothing of the keys.
#[derive(Clone)]
pub struct ClientTls {
    pub config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field(
                "client_certificate",
                &self.config.client_auth_cert_resolver.has_certs(),
            )
            .finish_non_exhaustive()
    }
}

/// The host part of "host:port" or "[v6]:port".
pub(crate) fn host_of(addr: &str) -> &str {
    let host = match addr.rfind(':') {
        Some(i) => &addr[..i],
        None => addr,
    };
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Runs the TLS handshake on a connected stream; the error says what failed (an untrusted or misnamed
/// certificate, a refused client certificate, a peer that does not speak TLS).
pub(crate) async fn handshake(
    stream: BoxConnection,
    addr: &str,
    tls: &ClientTls,
) -> io::Result<BoxConnection> {
    let host = host_of(addr);
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "'{host}' is neither an IP address nor a DNS name a certificate can match: {e}"
            ),
        )
    })?;
    let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(name, stream)
        .await?;
    Ok(Box::new(stream))
}

/// A [`Network`] whose connections speak TLS: `inner` connects, then the handshake runs (checking the peer's
/// certificate against the host of the address). With `only` set, just connections to those addresses are
/// secured and the rest go out as `inner` made them: the metadata quorum's transport speaks TLS to the voters'
/// CONTROLLER listener and plain to a broker-only learner's broker listener (docs/decisions/0017-security.md).
pub struct TlsNetwork {
    pub inner: Arc<dyn Network>,
    pub tls: ClientTls,
    pub only: Option<std::collections::BTreeSet<String>>,
}

impl Network for TlsNetwork {
    /// Listening is the inner network's: the server side of TLS is the listener owner's.
    fn bind(&self, addr: String) -> BoxFuture<'static, io::Result<Box<dyn crate::net::Listener>>> {
        self.inner.bind(addr)
    }

    fn connect(&self, addr: String) -> BoxFuture<'static, io::Result<BoxConnection>> {
        let connect = self.inner.connect(addr.clone());
        let secure = self.only.as_ref().is_none_or(|only| only.contains(&addr));
        let tls = self.tls.clone();
        Box::pin(async move {
            let stream = connect.await?;
            if !secure {
                return Ok(stream);
            }
            handshake(stream, &addr, &tls).await.map_err(|e| {
                io::Error::new(e.kind(), format!("TLS handshake with {addr} failed: {e}"))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_of_addresses() {
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
        assert_eq!(host_of("[::1]:9092"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
