//! TLS for a [`crate::Connection`] to an SSL or SASL_SSL listener, with rustls. The caller builds the
//! `rustls::ClientConfig` (the CAs it trusts and, for a listener with `ssl.client.auth`, its own certificate);
//! the connection checks the broker's certificate against the host of the address it connects to, an IP address
//! or a DNS name, as Kafka's default `ssl.endpoint.identification.algorithm=https` does.

use std::io;
use std::sync::Arc;

use crate::net::BoxConnection;

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
