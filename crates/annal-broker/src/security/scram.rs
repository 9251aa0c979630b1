//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's `ScramSaslServer` speaks them: the exchange
//! is ours, the primitives (HMAC, SHA-2, PBKDF2) come from RustCrypto. Credentials are stored as Kafka stores them
//! (salt, StoredKey, ServerKey, iterations), never the password.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::config::SaslMechanism;
use annal_client::scram::{hash, hmac};
/// The SCRAM math both sides share lives in the client crate (the console logs in with it).
pub use annal_client::scram::{salted_password, ScramClient};

/// Kafka's bounds on `iterations` (`ScramMechanism.minIterations` 4096, and at most 16384 in
/// AlterUserScramCredentials).
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;

/// The longest client message accepted in a SCRAM exchange: usernames and nonces are short.
pub const MESSAGE_MAX_BYTES: usize = 4096;

/// Kafka's ScramMechanism type codes (AlterUserScramCredentials, UserScramCredentialRecord).
pub fn mechanism_code(m: SaslMechanism) -> Option<i8> {
    match m {
        SaslMechanism::ScramSha256 => Some(1),
        SaslMechanism::ScramSha512 => Some(2),
        SaslMechanism::Plain => None,
    }
}

pub fn mechanism_of_code(code: i8) -> Option<SaslMechanism> {
    match code {
        1 => Some(SaslMechanism::ScramSha256),
        2 => Some(SaslMechanism::ScramSha512),
        _ => None,
    }
}

/// A stored SCRAM credential.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// The credential Kafka stores for a password: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
/// HMAC(SaltedPassword, "Server Key").
pub fn credential_from_salted(
    m: SaslMechanism,
    salted: &[u8],
    salt: Vec<u8>,
    iterations: i32,
) -> ScramCredential {
    let client_key = hmac(m, salted, b"Client Key");
    ScramCredential {
        salt,
        stored_key: hash(m, &client_key),
        server_key: hmac(m, salted, b"Server Key"),
        iterations,
    }
}

pub fn credential(
    m: SaslMechanism,
    password: &[u8],
    salt: Vec<u8>,
    iterations: i32,
) -> ScramCredential {
    let salted = salted_password(m, password, &salt, iterations.max(1) as u32);
    credential_from_salted(m, &salted, salt, iterations)
}

/// Where the exchange is.
enum State {
    ClientFirst,
    ClientFinal {
        client_first_bare: String,
        server_first: String,
        nonce: String,
        gs2_header: String,
        credential: ScramCredential,
    },
    Done,
}

/// What a client message led to.
pub enum ScramStep {
    /// Send this and wait for the next client message.
    Continue(Vec<u8>),
    /// Authenticated as `username`; send the server-final message.
    Done {
        username: String,
        server_final: Vec<u8>,
    },
}

/// The server side of one SCRAM exchange. `lookup` finds a user's stored credential.
pub struct ScramServer {
    mechanism: SaslMechanism,
    state: State,
    username: String,
}

/// Kafka's message for every credential failure (the same for an unknown user, a wrong password or a bad proof,
/// so the answer does not tell which usernames exist beyond what Kafka itself tells).
pub fn invalid_credentials(m: SaslMechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        m.name()
    )
}

impl ScramServer {
    pub fn new(mechanism: SaslMechanism) -> Self {
        debug_assert!(mechanism_code(mechanism).is_some());
        ScramServer {
            mechanism,
            state: State::ClientFirst,
            username: String::new(),
        }
    }

    pub fn mechanism(&self) -> SaslMechanism {
        self.mechanism
    }

    /// Handles one client message. `Err` is the message to send with SASL_AUTHENTICATION_FAILED.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<ScramStep, String> {
        if message.len() > MESSAGE_MAX_BYTES {
            return Err(format!(
                "SCRAM message of {} bytes exceeds the limit of {MESSAGE_MAX_BYTES}",
                message.len()
            ));
        }
        let text =
            std::str::from_utf8(message).map_err(|_| "SCRAM message is not UTF-8".to_string())?;
        match std::mem::replace(&mut self.state, State::Done) {
            State::ClientFirst => self.client_first(text, lookup),
            State::ClientFinal {
                client_first_bare,
                server_first,
                nonce,
                gs2_header,
                credential,
            } => self.client_final(
                text,
                &client_first_bare,
                &server_first,
                &nonce,
                &gs2_header,
                &credential,
            ),
            State::Done => Err("SCRAM exchange already finished".into()),
        }
    }

    fn client_first(
        &mut self,
        text: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<ScramStep, String> {
        // gs2-header: "n,," or "y,," (no channel binding) or with "a=authzid".
        let mut parts = text.splitn(3, ',');
        let cbind = parts.next().unwrap_or_default();
        let authzid = parts
            .next()
            .ok_or("SCRAM client-first message has no GS2 header")?;
        let bare = parts
            .next()
            .ok_or("SCRAM client-first message has no client-first-message-bare")?;
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => return Err("SCRAM channel binding is not supported".into()),
            _ => return Err(format!("SCRAM GS2 header '{cbind}' is invalid")),
        }
        let mut username = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            if let Some(u) = attr.strip_prefix("n=") {
                username = Some(sasl_name(u)?);
            } else if let Some(r) = attr.strip_prefix("r=") {
                client_nonce = Some(r.to_string());
            } else if attr.starts_with("m=") {
                return Err("SCRAM mandatory extensions are not supported".into());
            }
            // Other attributes are extensions (Kafka's tokenauth=true among them): ignored.
        }
        let username = username.ok_or("SCRAM client-first message has no username (n=)")?;
        let client_nonce = client_nonce
            .filter(|n| !n.is_empty())
            .ok_or("SCRAM client-first message has no nonce (r=)")?;
        if let Some(a) = authzid.strip_prefix("a=") {
            if sasl_name(a)? != username {
                return Err("SCRAM authorization id differs from the username; impersonation is not supported".into());
            }
        }
        let credential = lookup(&username).ok_or_else(|| invalid_credentials(self.mechanism))?;
        let server_nonce: String = {
            use rand::Rng;
            let bytes: [u8; 24] = rand::thread_rng().gen();
            B64.encode(bytes)
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        self.username = username;
        let gs2_header = format!("{cbind},{authzid},");
        self.state = State::ClientFinal {
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
            gs2_header,
            credential,
        };
        Ok(ScramStep::Continue(server_first.into_bytes()))
    }

    fn client_final(
        &mut self,
        text: &str,
        client_first_bare: &str,
        server_first: &str,
        nonce: &str,
        gs2_header: &str,
        credential: &ScramCredential,
    ) -> Result<ScramStep, String> {
        let m = self.mechanism;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or("SCRAM client-final message has no proof (p=)")?;
        let mut channel = None;
        let mut final_nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                channel = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                final_nonce = Some(r);
            }
        }
        if channel != Some(B64.encode(gs2_header.as_bytes()).as_str()) {
            return Err("SCRAM channel binding (c=) does not match the GS2 header".into());
        }
        if final_nonce != Some(nonce) {
            return Err("SCRAM nonce (r=) does not match the server's".into());
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| "SCRAM proof is not base64".to_string())?;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = hmac(m, &credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(invalid_credentials(m));
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let stored = hash(m, &client_key);
        if !bool::from(stored.ct_eq(&credential.stored_key)) {
            return Err(invalid_credentials(m));
        }
        let server_signature = hmac(m, &credential.server_key, auth_message.as_bytes());
        Ok(ScramStep::Done {
            username: std::mem::take(&mut self.username),
            server_final: format!("v={}", B64.encode(server_signature)).into_bytes(),
        })
    }
}

/// RFC 5802's saslname: `=2C` is `,`, `=3D` is `=`; any other `=` is malformed.
fn sasl_name(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3);
        match esc {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(format!("SCRAM username '{s}' has a bad '=' escape")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err("SCRAM username is empty".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, run through our server with a fixed server nonce check skipped: the
    /// stored credential must be the RFC's.
    #[test]
    fn rfc7677_credential() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let c = credential(SaslMechanism::ScramSha256, b"pencil", salt, 4096);
        // ServerSignature of the RFC's exchange, recomputed from our ServerKey.
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                    s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let sig = hmac(SaslMechanism::ScramSha256, &c.server_key, auth.as_bytes());
        assert_eq!(
            B64.encode(sig),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn exchanges_succeed_and_fail_as_they_should() {
        for m in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
            let stored = credential(m, b"alice-secret", b"0123456789abcdef".to_vec(), 4096);
            for (password, ok) in [("alice-secret", true), ("wrong", false)] {
                let mut server = ScramServer::new(m);
                let mut client = ScramClient::new(m, "alice", password);
                let first = match server.step(&client.client_first(), |u| {
                    (u == "alice").then(|| stored.clone())
                }) {
                    Ok(ScramStep::Continue(f)) => f,
                    _ => panic!("server-first"),
                };
                let fin = client.client_final(&first).unwrap();
                match server.step(&fin, |_| None) {
                    Ok(ScramStep::Done {
                        username,
                        server_final,
                    }) => {
                        assert!(ok);
                        assert_eq!(username, "alice");
                        client.verify_server_final(&server_final).unwrap();
                    }
                    Err(e) => {
                        assert!(!ok);
                        assert_eq!(e, invalid_credentials(m));
                    }
                    Ok(ScramStep::Continue(_)) => panic!("no third step"),
                }
            }
            // Unknown user fails at the first message.
            let mut server = ScramServer::new(m);
            let client = ScramClient::new(m, "bob", "x");
            assert!(server.step(&client.client_first(), |_| None).is_err());
        }
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for msg in [
            &b""[..],
            b"n",
            b"n,,",
            b"p=tls-unique,,n=a,r=b",
            b"n,,n=a",
            b"n,,r=x",
            b"n,,n=a=ZZ,r=x",
            b"n,a=bob,n=alice,r=x",
            &[0xff, 0xfe][..],
        ] {
            let mut server = ScramServer::new(SaslMechanism::ScramSha256);
            assert!(server.step(msg, |_| None).is_err(), "{msg:?}");
        }
        let big = vec![b'a'; MESSAGE_MAX_BYTES + 1];
        assert!(ScramServer::new(SaslMechanism::ScramSha512)
            .step(&big, |_| None)
            .is_err());
    }
}
