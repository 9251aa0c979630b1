//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the client side of the exchange ([`ScramClient`]) and
//! the primitives both sides share (the broker's `security::scram` server uses them too). The primitives
//! (HMAC, SHA-2, PBKDF2) come from RustCrypto.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::sasl::SaslMechanism;

pub fn hmac(m: SaslMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    match m {
        SaslMechanism::ScramSha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        _ => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

pub fn hash(m: SaslMechanism, data: &[u8]) -> Vec<u8> {
    match m {
        SaslMechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        _ => Sha256::digest(data).to_vec(),
    }
}

/// `SaltedPassword := Hi(Normalize(password), salt, i)` (PBKDF2 with HMAC). Kafka does not SASLprep passwords.
pub fn salted_password(m: SaslMechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    match m {
        SaslMechanism::ScramSha512 => {
            let mut out = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
            out.to_vec()
        }
        _ => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
            out.to_vec()
        }
    }
}

/// The client side of SCRAM (RFC 5802): the messages a client sends and the check of the server's proof.
pub struct ScramClient {
    mechanism: SaslMechanism,
    username: String,
    password: Vec<u8>,
    client_nonce: String,
    client_first_bare: String,
    expected_server_signature: Vec<u8>,
}

impl ScramClient {
    pub fn new(mechanism: SaslMechanism, username: &str, password: &str) -> Self {
        use rand::Rng;
        let bytes: [u8; 18] = rand::thread_rng().gen();
        let client_nonce = B64.encode(bytes);
        let escaped = username.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            mechanism,
            username: username.to_string(),
            password: password.as_bytes().to_vec(),
            client_first_bare: format!("n={escaped},r={client_nonce}"),
            client_nonce,
            expected_server_signature: Vec::new(),
        }
    }

    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message for a server-first message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let m = self.mechanism;
        let text = std::str::from_utf8(server_first).map_err(|_| "server-first is not UTF-8")?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v.to_string());
            } else if let Some(v) = attr.strip_prefix("s=") {
                salt = Some(B64.decode(v).map_err(|_| "salt is not base64")?);
            } else if let Some(v) = attr.strip_prefix("i=") {
                iterations = v.parse::<u32>().ok();
            }
        }
        let nonce = nonce.ok_or("server-first has no nonce")?;
        if !nonce.starts_with(&self.client_nonce) {
            return Err("server nonce does not extend the client's".into());
        }
        let salt = salt.ok_or("server-first has no salt")?;
        let iterations = iterations
            .filter(|i| *i > 0 && *i <= 1_000_000)
            .ok_or("bad iterations")?;
        let salted = salted_password(m, &self.password, &salt, iterations);
        let client_key = hmac(m, &salted, b"Client Key");
        let stored_key = hash(m, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = hmac(m, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(m, &salted, b"Server Key");
        self.expected_server_signature = hmac(m, &server_key, auth_message.as_bytes());
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message (the server proves it knows the credential too).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final).map_err(|_| "server-final is not UTF-8")?;
        let v = text
            .strip_prefix("v=")
            .ok_or_else(|| format!("server-final is '{text}'"))?;
        let sig = B64
            .decode(v)
            .map_err(|_| "server signature is not base64")?;
        if bool::from(sig.ct_eq(&self.expected_server_signature)) {
            Ok(())
        } else {
            Err(format!(
                "server signature for {} does not verify",
                self.username
            ))
        }
    }
}
