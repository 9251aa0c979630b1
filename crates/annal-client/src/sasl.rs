//! SASL authentication of a [`crate::Connection`] (KIP-43 SaslHandshake, then KIP-152 SaslAuthenticate frames):
//! PLAIN and SCRAM-SHA-256/512 ([`crate::scram::ScramClient`]). A connection whose options carry
//! [`SaslCredentials`] authenticates right after ApiVersions, so every connection a [`crate::Client`] opens (to
//! the bootstrap broker and to partition leaders) runs as the same principal.

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use crate::connection::Connection;
use crate::errors::describe;
use crate::scram::ScramClient;

const SASL_HANDSHAKE: (i16, i16) = (1, 1);
const SASL_AUTHENTICATE: (i16, i16) = (0, 2);

/// A SASL mechanism (Kafka's names are case-sensitive upper case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Some(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(SaslMechanism::ScramSha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Who a connection authenticates as. `Debug` leaves the password out.
#[derive(Clone)]
pub struct SaslCredentials {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Runs the SASL exchange on a connection that has negotiated versions.
pub(crate) async fn authenticate(conn: &mut Connection, c: &SaslCredentials) -> Result<()> {
    let who = format!(
        "SASL authentication as '{}' with {} at {}",
        c.username,
        c.mechanism.name(),
        conn.addr()
    );
    let (handshake, _) = conn
        .send(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(c.mechanism.name())),
            SASL_HANDSHAKE,
        )
        .await?;
    if handshake.error_code != 0 {
        let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        bail!(
            "{who} failed: {} (the listener offers {})",
            describe(handshake.error_code, None),
            offered.join(", ")
        );
    }
    match c.mechanism {
        SaslMechanism::Plain => {
            let token = format!("\0{}\0{}", c.username, c.password);
            step(conn, &who, token.into_bytes()).await?;
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            let mut scram = ScramClient::new(c.mechanism, &c.username, &c.password);
            let server_first = step(conn, &who, scram.client_first()).await?;
            let client_final = scram
                .client_final(&server_first)
                .map_err(|e| anyhow!("{who} failed: {e}"))?;
            let server_final = step(conn, &who, client_final).await?;
            scram
                .verify_server_final(&server_final)
                .map_err(|e| anyhow!("{who} failed: {e}"))?;
        }
    }
    Ok(())
}

/// One SaslAuthenticate round: our token out, the server's back.
async fn step(conn: &mut Connection, who: &str, token: Vec<u8>) -> Result<Bytes> {
    let (r, _) = conn
        .send(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            SASL_AUTHENTICATE,
        )
        .await?;
    if r.error_code != 0 {
        bail!(
            "{who} failed: {}",
            describe(r.error_code, r.error_message.as_ref().map(|m| m.as_str()))
        );
    }
    Ok(r.auth_bytes)
}
