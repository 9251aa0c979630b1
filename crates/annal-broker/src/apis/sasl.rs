//! SASL and SCRAM credential APIs as the dispatcher sees them. The exchange itself happens before dispatch
//! (`server::sasl_frame`), so SaslHandshake or SaslAuthenticate reaching a handler come from a connection that
//! needs no authentication (PLAINTEXT, SSL) or already has it: Kafka answers ILLEGAL_SASL_STATE, and so do we.
//! DescribeUserScramCredentials is answered from this broker's metadata image; AlterUserScramCredentials is
//! forwarded to the controller, which alone writes the UserScramCredentialRecords.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;

use super::forward::{wait_until, NOT_CONTROLLER};
use super::{code, s};
use crate::Broker;

const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;

pub async fn sasl_handshake(
    _broker: &Arc<Broker>,
    _header: &RequestHeader,
    _req: SaslHandshakeRequest,
) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(code::ILLEGAL_SASL_STATE)
}

pub async fn sasl_authenticate(
    _broker: &Arc<Broker>,
    _header: &RequestHeader,
    _req: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(code::ILLEGAL_SASL_STATE)
        .with_error_message(Some(s(
            "SaslAuthenticate request received on a connection that is not authenticating (a listener without \
             SASL, or after a successful authentication)",
        )))
}

/// DescribeUserScramCredentials (50): every user with a credential when `users` is null or empty; mechanisms
/// and iterations only (never salts or keys).
pub async fn describe_user_scram_credentials(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let image = broker.cluster().image();
    let info = |user: &str| -> Vec<CredentialInfo> {
        image
            .scram_credentials
            .range((user.to_string(), i8::MIN)..=(user.to_string(), i8::MAX))
            .map(|((_, m), c)| {
                CredentialInfo::default()
                    .with_mechanism(*m)
                    .with_iterations(c.iterations)
            })
            .collect()
    };
    let asked: Vec<String> = req
        .users
        .unwrap_or_default()
        .iter()
        .map(|u| u.name.to_string())
        .collect();
    let users: Vec<String> = if asked.is_empty() {
        image
            .scram_credentials
            .keys()
            .map(|(u, _)| u.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        asked.clone()
    };
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<&String> = asked.iter().filter(|u| !seen.insert(*u)).collect();
    let mut results = Vec::new();
    let mut done = BTreeSet::new();
    for user in &users {
        if !done.insert(user) {
            continue;
        }
        let mut r = DescribeUserScramCredentialsResult::default().with_user(s(user.clone()));
        if duplicates.contains(user) {
            r.error_code = DUPLICATE_RESOURCE;
            r.error_message = Some(s(format!("Cannot describe SCRAM credentials for the same user twice in a single request: {user}")));
        } else {
            let infos = info(user);
            if infos.is_empty() {
                r.error_code = RESOURCE_NOT_FOUND;
                r.error_message = Some(s(format!(
                    "Attempt to describe a user credential that does not exist: {user}"
                )));
            }
            r.credential_infos = infos;
        }
        results.push(r);
    }
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// AlterUserScramCredentials (51), forwarded to the controller; answered once this broker's image shows the
/// change (so the user can authenticate here right away).
pub async fn alter_user_scram_credentials(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let upserted: Vec<(String, i8, Vec<u8>)> = req
        .upsertions
        .iter()
        .map(|u| (u.name.to_string(), u.mechanism, u.salt.to_vec()))
        .collect();
    let deleted: Vec<(String, i8)> = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let users: Vec<String> = deleted
        .iter()
        .map(|d| d.0.clone())
        .chain(upserted.iter().map(|u| u.0.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let cluster = broker.cluster();
    match cluster
        .channel()
        .send(&req, header.request_api_version)
        .await
    {
        Ok(resp) => {
            let ok: BTreeSet<String> = resp
                .results
                .iter()
                .filter(|r| r.error_code == code::NONE)
                .map(|r| r.user.to_string())
                .collect();
            wait_until(|| {
                let image = cluster.image();
                upserted
                    .iter()
                    .filter(|u| ok.contains(&u.0))
                    .all(|(u, m, salt)| {
                        image
                            .scram_credential(u, *m)
                            .is_some_and(|c| &c.salt == salt)
                    })
                    && deleted
                        .iter()
                        .filter(|d| ok.contains(&d.0))
                        .all(|(u, m)| image.scram_credential(u, *m).is_none())
            })
            .await;
            resp
        }
        Err(e) => {
            let message = format!("the active controller could not be reached ({e:#}); retry");
            AlterUserScramCredentialsResponse::default().with_results(
                users
                    .into_iter()
                    .map(|u| {
                        alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                            .with_user(s(u))
                            .with_error_code(NOT_CONTROLLER)
                            .with_error_message(Some(s(message.clone())))
                    })
                    .collect(),
            )
        }
    }
}
