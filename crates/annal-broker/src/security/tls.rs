//! TLS listeners with rustls: Kafka's PEM keystore and truststore settings turned into a `ServerConfig`, the
//! client certificate's subject turned into Kafka's default principal, and reload when the PEM files change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{anyhow, Context};
use parking_lot::RwLock;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::config::{ClientAuth, PemSource, SslSettings};

/// How often the PEM files of a listener are checked for changes (certificate rotation without a restart).
pub const RELOAD_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A TLS listener's current rustls configuration; swapped whole when its files change, so a connection always
/// handshakes with one consistent key, chain and truststore.
pub struct TlsListener {
    listener: String,
    settings: SslSettings,
    config: RwLock<Arc<ServerConfig>>,
    /// The modification times of the files the current config was built from.
    loaded_from: parking_lot::Mutex<Vec<Option<SystemTime>>>,
}

impl TlsListener {
    /// Loads the listener's PEM material; the error names the setting and the file.
    pub fn new(listener: &str, settings: &SslSettings) -> anyhow::Result<TlsListener> {
        let config = build_config(settings)
            .with_context(|| format!("listener {listener}: cannot set up TLS"))?;
        Ok(TlsListener {
            listener: listener.to_string(),
            settings: settings.clone(),
            config: RwLock::new(Arc::new(config)),
            loaded_from: parking_lot::Mutex::new(file_times(settings)),
        })
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.read().clone())
    }

    pub fn client_auth(&self) -> ClientAuth {
        self.settings.client_auth
    }

    /// Rebuilds the configuration if a PEM file changed since it was loaded. A file that does not load (half
    /// written, wrong key) keeps the current configuration and is logged; the next check tries again.
    pub fn reload_if_changed(&self) -> bool {
        let now = file_times(&self.settings);
        if *self.loaded_from.lock() == now {
            return false;
        }
        match build_config(&self.settings) {
            Ok(config) => {
                *self.config.write() = Arc::new(config);
                *self.loaded_from.lock() = now;
                tracing::info!(listener = %self.listener, "TLS certificates reloaded from changed PEM files");
                true
            }
            Err(e) => {
                tracing::warn!(listener = %self.listener, error = %format!("{e:#}"),
                    "PEM files changed but do not load; still serving the previous certificates");
                false
            }
        }
    }
}

fn files(settings: &SslSettings) -> Vec<PathBuf> {
    [
        Some(&settings.chain),
        Some(&settings.key),
        settings.truststore.as_ref(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|s| match s {
        PemSource::File { path, .. } => Some(path.clone()),
        PemSource::Inline { .. } => None,
    })
    .collect()
}

fn file_times(settings: &SslSettings) -> Vec<Option<SystemTime>> {
    files(settings)
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// PEM text of a source, with the setting (and file) it came from for errors.
fn read_pem(source: &PemSource) -> anyhow::Result<(Vec<u8>, String)> {
    match source {
        PemSource::File { setting, path } => std::fs::read(path)
            .map(|b| (b, format!("{setting}={}", path.display())))
            .map_err(|e| anyhow!("{setting}: cannot read {}: {e}", path.display())),
        PemSource::Inline { setting, pem } => Ok((pem.clone().into_bytes(), setting.clone())),
    }
}

fn certificates(source: &PemSource) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let (pem, from) = read_pem(source)?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{from}: not valid PEM: {e}"))?;
    if certs.is_empty() {
        anyhow::bail!("{from}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    Ok(certs)
}

fn private_key(source: &PemSource) -> anyhow::Result<PrivateKeyDer<'static>> {
    let (pem, from) = read_pem(source)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| anyhow!("{from}: not valid PEM: {e}"))?
        .ok_or_else(|| {
            anyhow!(
                "{from}: holds no unencrypted private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC \
                 PRIVATE KEY); encrypted keys are not supported yet"
            )
        })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build_config(settings: &SslSettings) -> anyhow::Result<ServerConfig> {
    let chain = certificates(&settings.chain)?;
    let key = private_key(&settings.key)?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        settings.tls12.then_some(&rustls::version::TLS12),
        settings.tls13.then_some(&rustls::version::TLS13),
    ]
    .into_iter()
    .flatten()
    .collect();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions)
        .context("ssl.enabled.protocols")?;
    let builder = match (&settings.truststore, settings.client_auth) {
        (_, ClientAuth::None) | (None, _) => builder.with_no_client_auth(),
        (Some(trust), auth) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(trust)? {
                roots.add(cert).map_err(|e| {
                    anyhow!("{}: a CA certificate is not usable: {e}", setting_of(trust))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| anyhow!("{}: {e}", setting_of(trust)))?,
            )
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        anyhow!(
            "{}: the private key does not match the certificate, or is of a kind rustls does not use: {e}",
            setting_of(&settings.key)
        )
    })
}

/// The client side of a TLS listener, for this broker's own connections to the other brokers' inter-broker
/// listener (replica fetchers, transaction markers): the listener's truststore decides which broker certificates
/// are trusted (it must be set), and the listener's keystore is this broker's client certificate, as Kafka's
/// inter-broker client uses the listener's `ssl.*` settings. The broker's name is checked against the address it
/// is reached at (the advertised host, an IP address or DNS name).
pub fn client_config(
    listener: &str,
    settings: &SslSettings,
) -> anyhow::Result<rustls::ClientConfig> {
    let setup = || -> anyhow::Result<rustls::ClientConfig> {
        let Some(trust) = &settings.truststore else {
            anyhow::bail!(
                "it is the inter-broker or controller listener, so this node connects to it too, and it has no \
                 truststore to check the other nodes' certificates with: set ssl.truststore.location (PEM CA \
                 certificates) or ssl.truststore.certificates (per listener: listener.name.{}.ssl.truststore.*)",
                listener.to_ascii_lowercase()
            );
        };
        let mut roots = RootCertStore::empty();
        for cert in certificates(trust)? {
            roots.add(cert).map_err(|e| {
                anyhow!("{}: a CA certificate is not usable: {e}", setting_of(trust))
            })?;
        }
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            settings.tls12.then_some(&rustls::version::TLS12),
            settings.tls13.then_some(&rustls::version::TLS13),
        ]
        .into_iter()
        .flatten()
        .collect();
        let chain = certificates(&settings.chain)?;
        let key = private_key(&settings.key)?;
        rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .context("ssl.enabled.protocols")?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| {
                anyhow!(
                    "{}: the private key does not match the certificate, or is of a kind rustls does not use: {e}",
                    setting_of(&settings.key)
                )
            })
    };
    setup().with_context(|| {
        format!("listener {listener}: cannot set up TLS for this node's own connections to it")
    })
}

/// TLS connections handshaken at once on a [`TlsAccepting`] listener; more are closed unanswered.
const HANDSHAKES_MAX: usize = 64;

/// A listener whose connections come out after their TLS handshake: the controller listener on SSL, which the
/// metadata quorum serves itself (`annal_metadata::listener::serve` reads plain frames). A task accepts from the
/// inner listener and runs every handshake apart (bounded by [`super::TLS_HANDSHAKE_TIMEOUT`] and
/// [`HANDSHAKES_MAX`]), so a peer that connects and stays silent holds up nobody; it stops when this listener is
/// dropped. With `ssl.client.auth=required` a node without a certificate the truststore vouches for is refused
/// in the handshake (any such certificate is accepted: the controller listener does not authorize by principal).
pub struct TlsAccepting {
    accepted: tokio::sync::mpsc::Receiver<(annal_client::net::BoxConnection, std::net::SocketAddr)>,
}

impl TlsAccepting {
    pub fn spawn<L: annal_client::net::Listener>(
        mut inner: L,
        tls: Arc<TlsListener>,
    ) -> TlsAccepting {
        let (tx, accepted) = tokio::sync::mpsc::channel(HANDSHAKES_MAX);
        let slots = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_MAX));
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    biased;
                    _ = tx.closed() => return,
                    a = inner.accept() => match a {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(listener = %tls.listener, error = %e, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(listener = %tls.listener, %peer, "too many TLS handshakes at once; closing a new connection");
                    continue;
                };
                let (acceptor, tx, name) = (tls.acceptor(), tx.clone(), tls.listener.clone());
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(super::TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await;
                    drop(slot);
                    match handshake {
                        Ok(Ok(stream)) => {
                            let _ = tx
                                .send((Box::new(stream) as annal_client::net::BoxConnection, peer))
                                .await;
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(listener = %name, %peer, error = %e, "TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::warn!(listener = %name, %peer, "TLS handshake did not finish in time")
                        }
                    }
                });
            }
        });
        TlsAccepting { accepted }
    }
}

impl annal_client::net::Listener for TlsAccepting {
    fn accept(
        &mut self,
    ) -> annal_client::net::BoxFuture<
        '_,
        std::io::Result<(annal_client::net::BoxConnection, std::net::SocketAddr)>,
    > {
        Box::pin(async move {
            self.accepted.recv().await.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the TLS accept task ended")
            })
        })
    }
}

fn setting_of(s: &PemSource) -> &str {
    match s {
        PemSource::File { setting, .. } | PemSource::Inline { setting, .. } => setting,
    }
}

/// Kafka's default principal for a TLS connection (`DefaultKafkaPrincipalBuilder` with the DEFAULT
/// `ssl.principal.mapping.rules`): `User:` and the client certificate's subject as Java's
/// `X500Principal.getName()` (RFC 2253) prints it, or `User:ANONYMOUS` without a client certificate.
pub fn principal_of(peer_certificates: Option<&[CertificateDer<'_>]>) -> String {
    let Some(first) = peer_certificates.and_then(|c| c.first()) else {
        return "User:ANONYMOUS".into();
    };
    match x509_parser::parse_x509_certificate(first.as_ref()) {
        Ok((_, cert)) => format!("User:{}", rfc2253(cert.subject())),
        // rustls verified the certificate, so this cannot happen; never panic on it anyway.
        Err(_) => "User:ANONYMOUS".into(),
    }
}

/// RFC 2253 as Java writes it: RDNs last to first, `,` between them, `+` inside a multi-valued one, Java's
/// keywords for the attributes it knows and `OID=#hex` (the value's DER) for others.
pub fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let keyword = match oid.as_str() {
                        "2.5.4.3" => Some("CN"),
                        "2.5.4.6" => Some("C"),
                        "2.5.4.7" => Some("L"),
                        "2.5.4.8" => Some("ST"),
                        "2.5.4.9" => Some("STREET"),
                        "2.5.4.10" => Some("O"),
                        "2.5.4.11" => Some("OU"),
                        "0.9.2342.19200300.100.1.25" => Some("DC"),
                        "0.9.2342.19200300.100.1.1" => Some("UID"),
                        _ => None,
                    };
                    match (keyword, atv.as_str()) {
                        (Some(k), Ok(v)) => format!("{k}={}", escape_rfc2253(v)),
                        _ => {
                            let value = atv.attr_value();
                            let mut der = vec![value.header.tag().0 as u8];
                            let len = value.data.len();
                            if len < 128 {
                                der.push(len as u8);
                            } else {
                                let bytes = (len as u64).to_be_bytes();
                                let skip = bytes.iter().take_while(|b| **b == 0).count();
                                der.push(0x80 | (8 - skip) as u8);
                                der.extend_from_slice(&bytes[skip..]);
                            }
                            der.extend_from_slice(value.data);
                            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{oid}=#{hex}")
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn escape_rfc2253(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_print_as_java_prints_them() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        dn.push(rcgen::DnType::OrganizationalUnitName, "eng");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der().clone();
        assert_eq!(
            principal_of(Some(&[der])),
            "User:CN=alice,OU=eng,O=Acme\\, Inc,C=US"
        );
        assert_eq!(principal_of(None), "User:ANONYMOUS");
    }
}
