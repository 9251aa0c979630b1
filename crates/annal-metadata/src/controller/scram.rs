//! AlterUserScramCredentials (51): Kafka's `ScramControlManager`. The client sends a salt and the salted
//! password (never the password); the controller derives Kafka's StoredKey and ServerKey from it and writes a
//! UserScramCredentialRecord, or a RemoveUserScramCredentialRecord for a deletion. Users are validated as Kafka
//! does: a user named twice in one request, even for two mechanisms, fails entirely (DUPLICATE_RESOURCE), iterations outside
//! [4096, 16384] are UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist is RESOURCE_NOT_FOUND.

use std::collections::{BTreeMap, BTreeSet};

use hmac::{Hmac, Mac};
use kafka_protocol::messages::{
    alter_user_scram_credentials_response::AlterUserScramCredentialsResult,
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};

use super::errors::*;
use super::Controller;
use crate::records::{MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord};

/// Kafka's bounds on SCRAM iterations (`ScramMechanism`'s minimum, the controller's maximum).
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;
/// Longest salt and salted password accepted (SHA-512's output is 64 bytes; salts are 16-64 in practice).
const BYTES_MAX: usize = 1024;

/// StoredKey and ServerKey from a salted password, for Kafka's mechanism code (1 SHA-256, 2 SHA-512).
pub fn derive_keys(mechanism: i8, salted_password: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    macro_rules! keys {
        ($d:ty) => {{
            let mac = |data: &[u8]| {
                let mut m =
                    Hmac::<$d>::new_from_slice(salted_password).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            };
            let client_key = mac(b"Client Key");
            (<$d>::digest(&client_key).to_vec(), mac(b"Server Key"))
        }};
    }
    match mechanism {
        1 => Some(keys!(Sha256)),
        2 => Some(keys!(Sha512)),
        _ => None,
    }
}

fn result(user: &str, code: i16, message: Option<String>) -> AlterUserScramCredentialsResult {
    AlterUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_error_code(code)
        .with_error_message(message.map(StrBytes::from_string))
}

impl Controller {
    /// AlterUserScramCredentials (51).
    pub async fn alter_user_scram_credentials(
        &self,
        req: AlterUserScramCredentialsRequest,
    ) -> AlterUserScramCredentialsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        // A user named more than once (in deletions and upsertions together, whatever the mechanisms) fails as a
        // whole, as in Kafka: one mechanism per user per request.
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for name in req
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(req.upsertions.iter().map(|u| &u.name))
        {
            *seen.entry(name.to_string()).or_default() += 1;
        }
        let duplicated: BTreeSet<String> = seen
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(u, _)| u)
            .collect();
        // One result per user, in first-mention order; a user's first error wins.
        let mut order: Vec<String> = Vec::new();
        let mut errors: BTreeMap<String, (i16, String)> = BTreeMap::new();
        let mut records: BTreeMap<String, Vec<MetadataRecord>> = BTreeMap::new();
        let mut fail = |user: &str, code: i16, message: String| {
            errors.entry(user.to_string()).or_insert((code, message));
        };
        for d in &req.deletions {
            let user = d.name.to_string();
            if !order.contains(&user) {
                order.push(user.clone());
            }
            if duplicated.contains(&user) {
                fail(
                    &user,
                    DUPLICATE_RESOURCE,
                    format!(
                        "A user credential cannot be altered twice in the same request: {user}"
                    ),
                );
            } else if user.is_empty() {
                fail(
                    &user,
                    UNACCEPTABLE_CREDENTIAL,
                    "Username must not be empty".into(),
                );
            } else if !(1..=2).contains(&d.mechanism) {
                fail(
                    &user,
                    UNSUPPORTED_SASL_MECHANISM,
                    format!("Unknown SCRAM mechanism {}", d.mechanism),
                );
            } else if image.scram_credential(&user, d.mechanism).is_none() {
                fail(
                    &user,
                    RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist".into(),
                );
            } else {
                records.entry(user.clone()).or_default().push(
                    MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                        name: user,
                        mechanism: d.mechanism,
                    }),
                );
            }
        }
        for u in &req.upsertions {
            let user = u.name.to_string();
            if !order.contains(&user) {
                order.push(user.clone());
            }
            if duplicated.contains(&user) {
                fail(
                    &user,
                    DUPLICATE_RESOURCE,
                    format!(
                        "A user credential cannot be altered twice in the same request: {user}"
                    ),
                );
                continue;
            }
            if user.is_empty() {
                fail(
                    &user,
                    UNACCEPTABLE_CREDENTIAL,
                    "Username must not be empty".into(),
                );
                continue;
            }
            if u.iterations < ITERATIONS_MIN {
                fail(
                    &user,
                    UNACCEPTABLE_CREDENTIAL,
                    format!(
                        "Too few iterations: {} (at least {ITERATIONS_MIN})",
                        u.iterations
                    ),
                );
                continue;
            }
            if u.iterations > ITERATIONS_MAX {
                fail(
                    &user,
                    UNACCEPTABLE_CREDENTIAL,
                    format!(
                        "Too many iterations: {} (at most {ITERATIONS_MAX})",
                        u.iterations
                    ),
                );
                continue;
            }
            if u.salt.is_empty()
                || u.salt.len() > BYTES_MAX
                || u.salted_password.is_empty()
                || u.salted_password.len() > BYTES_MAX
            {
                fail(
                    &user,
                    UNACCEPTABLE_CREDENTIAL,
                    format!("salt and salted password must be 1 to {BYTES_MAX} bytes"),
                );
                continue;
            }
            let Some((stored_key, server_key)) = derive_keys(u.mechanism, &u.salted_password)
            else {
                fail(
                    &user,
                    UNSUPPORTED_SASL_MECHANISM,
                    format!("Unknown SCRAM mechanism {}", u.mechanism),
                );
                continue;
            };
            records
                .entry(user.clone())
                .or_default()
                .push(MetadataRecord::UserScramCredential(
                    UserScramCredentialRecord {
                        name: user,
                        mechanism: u.mechanism,
                        salt: u.salt.to_vec(),
                        stored_key,
                        server_key,
                        iterations: u.iterations,
                    },
                ));
        }
        // Only users without an error are written, in one batch.
        let ok: Vec<String> = order
            .iter()
            .filter(|u| !errors.contains_key(*u))
            .cloned()
            .collect();
        let batch: Vec<MetadataRecord> = ok
            .iter()
            .flat_map(|u| records.remove(u).unwrap_or_default())
            .collect();
        let write_error = if batch.is_empty() {
            None
        } else {
            self.writer.write(batch).await.err()
        };
        let results = order
            .iter()
            .map(|u| match (errors.get(u), &write_error) {
                (Some((code, message)), _) => result(u, *code, Some(message.clone())),
                (None, Some(e)) => result(u, e.code(), Some(e.to_string())),
                (None, None) => result(u, NONE, None),
            })
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(results)
    }
}
