//! The server side of a SASL connection before it is authenticated: Kafka's SaslServerAuthenticator rules.
//!
//! A connection on a SASL listener starts in [`AuthState::AwaitHandshake`]: ApiVersions and SaslHandshake are
//! answered, anything else closes it. A SaslHandshake names a mechanism; with handshake v1 the tokens then come
//! wrapped in SaslAuthenticate requests ([`AuthState::Authenticating`] with `raw = false`), with v0 as bare
//! size-prefixed tokens (`raw = true`, what clients from before KIP-152 send). Once the mechanism's exchange
//! succeeds the connection is [`AuthState::Authenticated`] and served like any other. A failed exchange is
//! answered with SASL_AUTHENTICATION_FAILED (or, in raw mode, not answered) and the connection closed after
//! `connection.failed.authentication.delay.ms`.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::scram::{ScramCredential, ScramServer, ScramStep};
use crate::config::{SaslMechanism, SaslSettings};

/// Where a connection is in authentication.
pub enum AuthState {
    /// PLAINTEXT/SSL, or a SASL exchange that succeeded: requests are served.
    Authenticated,
    /// A SASL listener before SaslHandshake.
    AwaitHandshake,
    /// After SaslHandshake: the mechanism's exchange.
    Authenticating { exchange: Exchange, raw: bool },
}

/// One mechanism's server-side exchange.
pub enum Exchange {
    Plain,
    Scram(Box<ScramServer>),
}

/// What one client token led to.
pub enum Outcome {
    /// Send this token and wait for the next.
    Continue(Vec<u8>),
    /// Authenticated as `principal`; send the last token (possibly empty).
    Done { principal: String, token: Vec<u8> },
    /// Authentication failed: send this message with SASL_AUTHENTICATION_FAILED, then close.
    Failed(String),
}

impl Exchange {
    pub fn new(mechanism: SaslMechanism) -> Exchange {
        match mechanism {
            SaslMechanism::Plain => Exchange::Plain,
            m => Exchange::Scram(Box::new(ScramServer::new(m))),
        }
    }

    pub fn step(
        &mut self,
        token: &[u8],
        settings: &SaslSettings,
        scram_lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Outcome {
        match self {
            Exchange::Plain => match plain(token, settings) {
                Ok(user) => Outcome::Done {
                    principal: format!("User:{user}"),
                    token: Vec::new(),
                },
                Err(e) => Outcome::Failed(e),
            },
            Exchange::Scram(server) => match server.step(token, scram_lookup) {
                Ok(ScramStep::Continue(t)) => Outcome::Continue(t),
                Ok(ScramStep::Done {
                    username,
                    server_final,
                }) => Outcome::Done {
                    principal: format!("User:{username}"),
                    token: server_final,
                },
                Err(e) => Outcome::Failed(e),
            },
        }
    }
}

/// The longest PLAIN message accepted: `authzid NUL authcid NUL password`.
const PLAIN_MESSAGE_MAX_BYTES: usize = 4096;

/// PLAIN (RFC 4616) against the listener's JAAS users. Kafka's rules: the authorization id, if given, must be
/// the username; the message is exactly three NUL-separated parts.
fn plain(token: &[u8], settings: &SaslSettings) -> Result<String, String> {
    if token.len() > PLAIN_MESSAGE_MAX_BYTES {
        return Err(format!(
            "SASL/PLAIN message of {} bytes exceeds the limit of {PLAIN_MESSAGE_MAX_BYTES}",
            token.len()
        ));
    }
    let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
    let [authzid, user, password] = parts.as_slice() else {
        return Err("Invalid SASL/PLAIN response: expected 3 tokens separated by NUL".into());
    };
    let user =
        std::str::from_utf8(user).map_err(|_| "SASL/PLAIN username is not UTF-8".to_string())?;
    if user.is_empty() {
        return Err("Authentication failed: username not specified".into());
    }
    if !authzid.is_empty() && *authzid != user.as_bytes() {
        return Err("Authentication failed: Client requested an authorization id that is different from username".into());
    }
    // Compared as digests, in constant time, and against a dummy for unknown users: neither the comparison
    // nor the lookup's outcome shows in the time taken.
    let expected = settings.plain_users.get(user);
    let want = Sha256::digest(
        expected
            .map(String::as_bytes)
            .unwrap_or(b"\0no such user\0"),
    );
    let got = Sha256::digest(password);
    let matches: bool = want.ct_eq(&got).into();
    if matches && expected.is_some() {
        Ok(user.to_string())
    } else {
        Err("Authentication failed: Invalid username or password".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SaslSettings {
        SaslSettings {
            mechanisms: vec![SaslMechanism::Plain],
            plain_users: [("alice".to_string(), "alice-secret".to_string())].into(),
        }
    }

    #[test]
    fn plain_accepts_only_the_right_password() {
        let s = settings();
        assert_eq!(plain(b"\0alice\0alice-secret", &s), Ok("alice".into()));
        assert_eq!(plain(b"alice\0alice\0alice-secret", &s), Ok("alice".into()));
        for bad in [
            &b"\0alice\0wrong"[..],
            b"\0bob\0alice-secret",
            b"bob\0alice\0alice-secret",
            b"\0\0",
            b"alice-secret",
            b"\0alice\0alice-secret\0",
            b"\0\xff\0x",
        ] {
            assert!(plain(bad, &s).is_err(), "{bad:?}");
        }
    }
}
