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
