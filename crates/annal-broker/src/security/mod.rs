//! Security of client connections: TLS (`tls`), SASL (`sasl`, `scram`) and what a listener needs of them.
//!
//! Where it sits: `server::serve` accepts a TCP connection, performs the TLS handshake on SSL and SASL_SSL
//! listeners (bounded by [`TLS_HANDSHAKE_TIMEOUT`]), and runs each frame through the connection's
//! [`sasl::AuthState`] before `apis::dispatch` sees it. Handlers never see an unauthenticated request.
//! Design: docs/decisions/0017-security.md.

pub mod authorizer;
pub mod sasl;
pub mod scram;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use crate::config::{ListenerSecurity, SaslMechanism, SaslSettings, SecurityProtocol};

/// The longest a TLS handshake may take before the connection is dropped (a peer that opens a connection and
/// sends nothing, or plaintext that never completes a ClientHello, holds a socket this long at most).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a SASL connection may take from accept to authenticated.
pub const AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// A user's stored SCRAM credential for `mechanism`, from the metadata image (UserScramCredentialRecord).
pub fn scram_credential(
    broker: &crate::Broker,
    user: &str,
    mechanism: SaslMechanism,
) -> Option<scram::ScramCredential> {
    let code = scram::mechanism_code(mechanism)?;
    let image = broker.cluster().image();
    let c = image.scram_credential(user, code)?;
    Some(scram::ScramCredential {
        salt: c.salt.clone(),
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
        iterations: c.iterations,
    })
}

/// How this broker's own connections to the other brokers' inter-broker listener (`inter.broker.listener.name`)
/// authenticate: TLS on an SSL or SASL_SSL listener ([`tls::client_config`]), a SASL login on a SASL one
/// (`sasl.mechanism.inter.broker.protocol`). Every connection to an inter-broker endpoint is opened with
/// [`InterBrokerClient::apply`]: the replica fetchers, the transaction markers and verifications, the retention
/// guard's offset lookups. The controller channel goes to the CONTROLLER listener, which stays PLAINTEXT.
#[derive(Clone, Debug, Default)]
pub struct InterBrokerClient {
    pub tls: Option<annal_client::ClientTls>,
    pub sasl: Option<annal_client::SaslCredentials>,
}

impl InterBrokerClient {
    /// Loads the inter-broker listener's certificates; the error names the setting to fix. PLAINTEXT (and a
    /// controller-only node) needs nothing.
    pub fn build(config: &crate::config::BrokerConfig) -> anyhow::Result<InterBrokerClient> {
        let name = &config.cluster.listeners.inter_broker_name;
        let tls = match config
            .security
            .listeners
            .get(name)
            .and_then(|l| l.ssl.as_ref())
        {
            Some(ssl) => Some(annal_client::ClientTls {
                config: Arc::new(tls::client_config(name, ssl)?),
            }),
            None => None,
        };
        let sasl =
            config
                .security
                .inter_broker_sasl
                .as_ref()
                .map(|s| annal_client::SaslCredentials {
                    mechanism: s.mechanism,
                    username: s.username.clone(),
                    password: s.password.clone(),
                });
        Ok(InterBrokerClient { tls, sasl })
    }

    /// `options` with this broker's TLS and SASL for the inter-broker listener.
    pub fn apply(
        &self,
        options: annal_client::ConnectionOptions,
    ) -> annal_client::ConnectionOptions {
        annal_client::ConnectionOptions {
            tls: self.tls.clone(),
            sasl: self.sasl.clone(),
            ..options
        }
    }
}

/// The TLS of this node's own connections to the controllers' CONTROLLER listener when it speaks SSL (the
/// quorum's transport between controllers, the brokers' controller channel): the controller listener's
/// truststore checks the controllers' certificates and its keystore is this node's client certificate, as
/// Kafka's controller clients use `listener.name.<controller>.ssl.*`. `None` on a PLAINTEXT controller listener.
pub fn controller_client_tls(
    config: &crate::config::BrokerConfig,
) -> anyhow::Result<Option<annal_client::ClientTls>> {
    let Some(ssl) = &config.security.controller_ssl else {
        return Ok(None);
    };
    let name = config
        .cluster
        .listeners
        .controller_names
        .first()
        .map(String::as_str)
        .unwrap_or("CONTROLLER");
    Ok(Some(annal_client::ClientTls {
        config: Arc::new(tls::client_config(name, ssl)?),
    }))
}

/// What a connection needs to know about the listener it came in on.
pub struct ListenerContext {
    /// Upper case, as in `listeners`.
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    pub tls: Option<Arc<tls::TlsListener>>,
    pub sasl: Option<Arc<SaslSettings>>,
}

impl ListenerContext {
    /// Loads the listener's certificates; the error names the setting to fix.
    pub fn build(security: &ListenerSecurity) -> anyhow::Result<ListenerContext> {
        let tls = match &security.ssl {
            Some(ssl) => Some(Arc::new(tls::TlsListener::new(&security.name, ssl)?)),
            None => None,
        };
        Ok(ListenerContext {
            name: Arc::from(security.name.as_str()),
            protocol: security.protocol,
            tls,
            sasl: security.sasl.clone().map(Arc::new),
        })
    }

    /// A PLAINTEXT listener (zero configuration, and tests).
    pub fn plaintext(name: &str) -> ListenerContext {
        ListenerContext {
            name: Arc::from(name),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }
}
