//! ACLs (Describe/Create/DeleteAcls) and SCRAM users (Describe/AlterUserScramCredentials).
//!
//! Every call goes through the session's client, so the broker's authorizer decides what the principal may see
//! and change, exactly as for `kafka-acls` and `kafka-configs`. Names in and out are Kafka's own (the enum names
//! `kafka-acls --list` prints: `TOPIC`, `READ`, `ALLOW`, `LITERAL`...). A SCRAM password never leaves the
//! console's process: it is salted and hashed here (Kafka's `AlterUserScramCredentials` carries the salted
//! password, as the Java admin client sends it).

use annal_client::scram::salted_password;
use annal_client::{Client, SaslMechanism};
use annal_metadata::acl::{op, pattern, permission, resource};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde::{Deserialize, Serialize};

use super::{parse_body, within_timeout, ApiError, ApiResult, Ctx, Query};

/// Our versions of the APIs used here (the broker's ranges; DescribeAcls..DeleteAcls v1-3, SCRAM v0).
const ACL_VERSIONS: (i16, i16) = (1, 3);
const SCRAM_VERSIONS: (i16, i16) = (0, 0);
/// Kafka's default and the floor `AlterUserScramCredentials` accepts (ScramMechanism.minIterations = 4096).
const SCRAM_ITERATIONS_DEFAULT: i32 = 8192;
const SCRAM_ITERATIONS_MIN: i32 = 4096;
const SCRAM_ITERATIONS_MAX: i32 = 16384;
/// A SCRAM user name or password longer than this is refused before any work is done.
const CREDENTIAL_TEXT_MAX: usize = 1024;

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    principal: String,
    host: String,
    operation: String,
    permission: String,
    resource_type: String,
    resource_name: String,
    pattern_type: String,
}

/// Kafka's names of one code table (`AclOperation`, `ResourceType`...), both ways.
struct Names(&'static [(i8, &'static str)]);

impl Names {
    fn name(&self, code: i8) -> String {
        self.0
            .iter()
            .find(|(c, _)| *c == code)
            .map_or_else(|| format!("UNKNOWN({code})"), |(_, n)| n.to_string())
    }

    /// A name from the page (any case) to its code; the error lists what is accepted.
    fn code(&self, field: &str, text: &str, allowed: &[i8]) -> ApiResult<i8> {
        let upper = text.trim().to_ascii_uppercase().replace(['-', ' '], "_");
        self.0
            .iter()
            .find(|(c, n)| *n == upper && allowed.contains(c))
            .map(|(c, _)| *c)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .0
                    .iter()
                    .filter(|(c, _)| allowed.contains(c))
                    .map(|(_, n)| *n)
                    .collect();
                ApiError::bad_request(format!("{field}='{text}': one of {}", names.join(", ")))
            })
    }
}

const OPERATIONS: Names = Names(&[
    (op::ANY, "ANY"),
    (op::ALL, "ALL"),
    (op::READ, "READ"),
    (op::WRITE, "WRITE"),
    (op::CREATE, "CREATE"),
    (op::DELETE, "DELETE"),
    (op::ALTER, "ALTER"),
    (op::DESCRIBE, "DESCRIBE"),
    (op::CLUSTER_ACTION, "CLUSTER_ACTION"),
    (op::DESCRIBE_CONFIGS, "DESCRIBE_CONFIGS"),
    (op::ALTER_CONFIGS, "ALTER_CONFIGS"),
    (op::IDEMPOTENT_WRITE, "IDEMPOTENT_WRITE"),
    (op::CREATE_TOKENS, "CREATE_TOKENS"),
    (op::DESCRIBE_TOKENS, "DESCRIBE_TOKENS"),
]);
const RESOURCE_TYPES: Names = Names(&[
    (resource::ANY, "ANY"),
    (resource::TOPIC, "TOPIC"),
    (resource::GROUP, "GROUP"),
    (resource::CLUSTER, "CLUSTER"),
    (resource::TRANSACTIONAL_ID, "TRANSACTIONAL_ID"),
    (resource::DELEGATION_TOKEN, "DELEGATION_TOKEN"),
    (resource::USER, "USER"),
]);
const PERMISSIONS: Names = Names(&[
    (permission::ANY, "ANY"),
    (permission::DENY, "DENY"),
    (permission::ALLOW, "ALLOW"),
]);
const PATTERNS: Names = Names(&[
    (pattern::ANY, "ANY"),
    (pattern::MATCH, "MATCH"),
    (pattern::LITERAL, "LITERAL"),
    (pattern::PREFIXED, "PREFIXED"),
]);

/// The codes an ACL (not a filter) may carry.
const CONCRETE_OPERATIONS: &[i8] = &[
    op::ALL,
    op::READ,
    op::WRITE,
    op::CREATE,
    op::DELETE,
    op::ALTER,
    op::DESCRIBE,
    op::CLUSTER_ACTION,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
    op::IDEMPOTENT_WRITE,
    op::CREATE_TOKENS,
    op::DESCRIBE_TOKENS,
];
const CONCRETE_RESOURCE_TYPES: &[i8] = &[
    resource::TOPIC,
    resource::GROUP,
    resource::CLUSTER,
    resource::TRANSACTIONAL_ID,
    resource::DELEGATION_TOKEN,
    resource::USER,
];
const CONCRETE_PERMISSIONS: &[i8] = &[permission::DENY, permission::ALLOW];
const CONCRETE_PATTERNS: &[i8] = &[pattern::LITERAL, pattern::PREFIXED];

/// A Kafka answer's error code as a result: the error names what failed (`what`) and what the code means.
fn kafka_result(
    code: i16,
    message: &Option<StrBytes>,
    what: impl FnOnce() -> String,
) -> ApiResult<()> {
    if code == 0 {
        return Ok(());
    }
    let detail = annal_client::errors::describe(code, message.as_deref());
    Err(ApiError::kafka(code, format!("{}: {detail}", what())))
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A filter over ACLs, as DescribeAcls and DeleteAcls take it; a missing field matches anything.
#[derive(Debug, Clone, PartialEq)]
struct Filter {
    resource_type: i8,
    resource_name: Option<String>,
    pattern_type: i8,
    principal: Option<String>,
    host: Option<String>,
    operation: i8,
    permission: i8,
}

impl Filter {
    fn parse(q: &Query) -> ApiResult<Filter> {
        let all_ops: Vec<i8> = OPERATIONS.0.iter().map(|(c, _)| *c).collect();
        let all_types: Vec<i8> = RESOURCE_TYPES.0.iter().map(|(c, _)| *c).collect();
        let all_perms: Vec<i8> = PERMISSIONS.0.iter().map(|(c, _)| *c).collect();
        let all_patterns: Vec<i8> = PATTERNS.0.iter().map(|(c, _)| *c).collect();
        let code = |field: &str, names: &Names, allowed: &[i8], any: i8| match q.get(field) {
            None => Ok(any),
            Some(text) => names.code(field, text, allowed),
        };
        let resource_name = q.get("resource_name").map(str::to_string);
        // MATCH (literal, wildcard and prefixed ACLs that apply to the name) when a name is given, as
        // `kafka-acls --list --topic t` asks; ANY otherwise.
        let default_pattern = if resource_name.is_some() {
            pattern::MATCH
        } else {
            pattern::ANY
        };
        Ok(Filter {
            resource_type: code("resource_type", &RESOURCE_TYPES, &all_types, resource::ANY)?,
            pattern_type: code("pattern_type", &PATTERNS, &all_patterns, default_pattern)?,
            resource_name,
            principal: q.get("principal").map(str::to_string),
            host: q.get("host").map(str::to_string),
            operation: code("operation", &OPERATIONS, &all_ops, op::ANY)?,
            permission: code("permission", &PERMISSIONS, &all_perms, permission::ANY)?,
        })
    }

    fn describe_request(&self) -> DescribeAclsRequest {
        DescribeAclsRequest::default()
            .with_resource_type_filter(self.resource_type)
            .with_resource_name_filter(self.resource_name.as_deref().map(s))
            .with_pattern_type_filter(self.pattern_type)
            .with_principal_filter(self.principal.as_deref().map(s))
            .with_host_filter(self.host.as_deref().map(s))
            .with_operation(self.operation)
            .with_permission_type(self.permission)
    }
}

/// The ACLs a filter matches, through DescribeAcls.
async fn describe(client: &mut Client, filter: &Filter) -> ApiResult<Vec<Acl>> {
    let response = client
        .admin_request(&filter.describe_request(), ACL_VERSIONS)
        .await
        .map_err(ApiError::from_client)?;
    kafka_result(response.error_code, &response.error_message, || {
        "cannot list ACLs".into()
    })?;
    let mut acls: Vec<Acl> = response
        .resources
        .iter()
        .flat_map(|r| {
            r.acls.iter().map(move |a| Acl {
                principal: a.principal.to_string(),
                host: a.host.to_string(),
                operation: OPERATIONS.name(a.operation),
                permission: PERMISSIONS.name(a.permission_type),
                resource_type: RESOURCE_TYPES.name(r.resource_type),
                resource_name: r.resource_name.to_string(),
                pattern_type: PATTERNS.name(r.pattern_type),
            })
        })
        .collect();
    acls.sort_by(|a, b| {
        (
            &a.resource_type,
            &a.resource_name,
            &a.principal,
            &a.operation,
        )
            .cmp(&(
                &b.resource_type,
                &b.resource_name,
                &b.principal,
                &b.operation,
            ))
    });
    Ok(acls)
}

/// The ACLs that apply to a topic (literal, prefixed and wildcard); empty when the cluster has no authorizer
/// or the principal may not describe ACLs (the topic page shows the rest of the topic either way).
pub async fn for_topic(client: &mut Client, topic: &str) -> Vec<Acl> {
    let filter = Filter {
        resource_type: resource::TOPIC,
        resource_name: Some(topic.to_string()),
        pattern_type: pattern::MATCH,
        principal: None,
        host: None,
        operation: op::ANY,
        permission: permission::ANY,
    };
    describe(client, &filter).await.unwrap_or_default()
}

/// `GET /v1/acls?principal=&resource_type=&resource_name=&pattern_type=&operation=&permission=&host=`.
pub async fn list(ctx: Ctx, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    let filter = Filter::parse(&Query::parse(raw.as_deref())?)?;
    let acls = within_timeout("listing ACLs", async {
        let mut client = ctx.client().await?;
        describe(&mut client, &filter).await
    })
    .await?;
    Ok(Json(acls).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AclBody {
    principal: String,
    #[serde(default)]
    host: Option<String>,
    operation: String,
    permission: String,
    resource_type: String,
    resource_name: String,
    #[serde(default)]
    pattern_type: Option<String>,
}

/// An ACL from the page, checked as `kafka-acls --add` checks it before it sends anything.
fn creation(body: &AclBody) -> ApiResult<(AclCreation, Acl)> {
    let principal = body.principal.trim();
    if !principal.contains(':') || principal.starts_with(':') || principal.ends_with(':') {
        return Err(ApiError::bad_request(format!(
            "principal='{principal}': a principal is TYPE:NAME, such as User:alice (or User:* for everyone)"
        )));
    }
    let resource_name = body.resource_name.trim();
    if resource_name.is_empty() {
        return Err(ApiError::bad_request(
            "resource_name is empty: name the topic, group or transactional id (kafka-cluster for CLUSTER, * for all)",
        ));
    }
    let host = body
        .host
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .unwrap_or("*");
    let operation = OPERATIONS.code("operation", &body.operation, CONCRETE_OPERATIONS)?;
    let permission_type = PERMISSIONS.code("permission", &body.permission, CONCRETE_PERMISSIONS)?;
    let resource_type = RESOURCE_TYPES.code(
        "resource_type",
        &body.resource_type,
        CONCRETE_RESOURCE_TYPES,
    )?;
    let pattern_type = PATTERNS.code(
        "pattern_type",
        body.pattern_type.as_deref().unwrap_or("LITERAL"),
        CONCRETE_PATTERNS,
    )?;
    let request = AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(resource_name))
        .with_resource_pattern_type(pattern_type)
        .with_principal(s(principal))
        .with_host(s(host))
        .with_operation(operation)
        .with_permission_type(permission_type);
    let shown = Acl {
        principal: principal.to_string(),
        host: host.to_string(),
        operation: OPERATIONS.name(operation),
        permission: PERMISSIONS.name(permission_type),
        resource_type: RESOURCE_TYPES.name(resource_type),
        resource_name: resource_name.to_string(),
        pattern_type: PATTERNS.name(pattern_type),
    };
    Ok((request, shown))
}

/// `POST /v1/acls` (one ACL): CreateAcls. 201 with the ACL.
pub async fn create(ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let body: AclBody = parse_body(&body)?;
    let (creation, shown) = creation(&body)?;
    within_timeout("creating an ACL", async {
        let mut client = ctx.client().await?;
        let request = CreateAclsRequest::default().with_creations(vec![creation]);
        let response = client
            .admin_request(&request, ACL_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        match response.results.first() {
            Some(r) => kafka_result(r.error_code, &r.error_message, || {
                format!(
                    "cannot create the ACL for {} on {} '{}'",
                    shown.principal, shown.resource_type, shown.resource_name
                )
            }),
            None => Err(ApiError::from_client(anyhow::anyhow!(
                "the broker answered CreateAcls without a result"
            ))),
        }
    })
    .await?;
    Ok((StatusCode::CREATED, Json(shown)).into_response())
}

/// `DELETE /v1/acls?...` (a filter, as `GET /v1/acls` takes it; the body may carry the same fields as JSON
/// instead): DeleteAcls. Answers the ACLs it removed. A filter that names nothing at all is refused: deleting
/// every ACL of the cluster takes a filter that says so (`resource_type=ANY&pattern_type=ANY&confirm=all`).
pub async fn delete_acls(ctx: Ctx, RawQuery(raw): RawQuery, body: Bytes) -> ApiResult<Response> {
    let query = if body.iter().all(u8::is_ascii_whitespace) {
        Query::parse(raw.as_deref())?
    } else {
        let fields: std::collections::BTreeMap<String, serde_json::Value> = parse_body(&body)?;
        let pairs = fields
            .into_iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(text) => Some((k, text)),
                serde_json::Value::Null => None,
                other => Some((k, other.to_string())),
            })
            .collect();
        Query::from_pairs(pairs)
    };
    let filter = Filter::parse(&query)?;
    let names_nothing = filter.resource_name.is_none()
        && filter.principal.is_none()
        && filter.host.is_none()
        && filter.resource_type == resource::ANY
        && filter.operation == op::ANY
        && filter.permission == permission::ANY;
    if names_nothing && query.get("confirm") != Some("all") {
        return Err(ApiError::bad_request(
            "this filter matches every ACL of the cluster; narrow it, or add confirm=all to delete them all",
        ));
    }
    // A removal from the page names an exact ACL: LITERAL or PREFIXED, not MATCH (which DeleteAcls refuses).
    if filter.pattern_type == pattern::MATCH {
        return Err(ApiError::bad_request(
            "pattern_type=MATCH cannot delete; give LITERAL, PREFIXED or ANY",
        ));
    }
    let removed = within_timeout("deleting ACLs", async {
        let mut client = ctx.client().await?;
        let request = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_type_filter(filter.resource_type)
            .with_resource_name_filter(filter.resource_name.as_deref().map(s))
            .with_pattern_type_filter(filter.pattern_type)
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(filter.operation)
            .with_permission_type(filter.permission)]);
        let response = client
            .admin_request(&request, ACL_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        let Some(result) = response.filter_results.into_iter().next() else {
            return Err(ApiError::from_client(anyhow::anyhow!(
                "the broker answered DeleteAcls without a result"
            )));
        };
        kafka_result(result.error_code, &result.error_message, || {
            "cannot delete ACLs".into()
        })?;
        Ok(result
            .matching_acls
            .iter()
            .filter(|m| m.error_code == 0)
            .map(|m| Acl {
                principal: m.principal.to_string(),
                host: m.host.to_string(),
                operation: OPERATIONS.name(m.operation),
                permission: PERMISSIONS.name(m.permission_type),
                resource_type: RESOURCE_TYPES.name(m.resource_type),
                resource_name: m.resource_name.to_string(),
                pattern_type: PATTERNS.name(m.pattern_type),
            })
            .collect::<Vec<Acl>>())
    })
    .await?;
    Ok(Json(serde_json::json!({ "deleted": removed })).into_response())
}

/// Kafka's SCRAM mechanism codes (`ScramMechanism`).
fn scram_code(m: SaslMechanism) -> Option<i8> {
    match m {
        SaslMechanism::ScramSha256 => Some(1),
        SaslMechanism::ScramSha512 => Some(2),
        SaslMechanism::Plain => None,
    }
}

fn scram_name(code: i8) -> String {
    match code {
        1 => "SCRAM-SHA-256".to_string(),
        2 => "SCRAM-SHA-512".to_string(),
        other => format!("UNKNOWN({other})"),
    }
}

#[derive(Serialize)]
struct User {
    name: String,
    mechanisms: Vec<String>,
    iterations: Vec<i32>,
}

/// `GET /v1/users`: every user with a SCRAM credential, through DescribeUserScramCredentials.
pub async fn list_users(ctx: Ctx) -> ApiResult<Response> {
    let users = within_timeout("listing SCRAM users", async {
        let mut client = ctx.client().await?;
        let request = DescribeUserScramCredentialsRequest::default().with_users(None);
        let response = client
            .admin_request(&request, SCRAM_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        kafka_result(response.error_code, &response.error_message, || {
            "cannot list SCRAM users".into()
        })?;
        let mut users: Vec<User> = response
            .results
            .iter()
            .filter(|r| r.error_code == 0)
            .map(|r| User {
                name: r.user.to_string(),
                mechanisms: r
                    .credential_infos
                    .iter()
                    .map(|c| scram_name(c.mechanism))
                    .collect(),
                iterations: r.credential_infos.iter().map(|c| c.iterations).collect(),
            })
            .collect();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(users)
    })
    .await?;
    Ok(Json(users).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserBody {
    name: String,
    password: String,
    #[serde(default)]
    mechanism: Option<String>,
    #[serde(default)]
    iterations: Option<i32>,
}

/// The first error of an AlterUserScramCredentials answer, as an API error.
fn alter_error(
    response: &kafka_protocol::messages::AlterUserScramCredentialsResponse,
    what: &str,
) -> ApiResult<()> {
    match response.results.iter().find(|r| r.error_code != 0) {
        Some(r) => kafka_result(r.error_code, &r.error_message, || {
            format!("cannot {what} user '{}'", r.user)
        }),
        None => Ok(()),
    }
}

/// `POST /v1/users` `{"name", "password", "mechanism", "iterations"}`: adds or replaces the user's credential
/// for that mechanism (AlterUserScramCredentials upsertion). 201.
pub async fn upsert_user(ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let body: UserBody = parse_body(&body)?;
    let name = body.name.trim().to_string();
    if name.is_empty() || name.len() > CREDENTIAL_TEXT_MAX {
        return Err(ApiError::bad_request(format!(
            "name: 1 to {CREDENTIAL_TEXT_MAX} bytes"
        )));
    }
    if body.password.is_empty() || body.password.len() > CREDENTIAL_TEXT_MAX {
        return Err(ApiError::bad_request(format!(
            "password: 1 to {CREDENTIAL_TEXT_MAX} bytes"
        )));
    }
    let mechanism_name = body.mechanism.as_deref().unwrap_or("SCRAM-SHA-256");
    let mechanism = SaslMechanism::parse(mechanism_name)
        .filter(|m| scram_code(*m).is_some())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "mechanism='{mechanism_name}': SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN users live in the listener's JAAS config)"
            ))
        })?;
    let iterations = body.iterations.unwrap_or(SCRAM_ITERATIONS_DEFAULT);
    if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
        return Err(ApiError::bad_request(format!(
            "iterations={iterations}: from {SCRAM_ITERATIONS_MIN} to {SCRAM_ITERATIONS_MAX}"
        )));
    }
    let salt: [u8; 32] = {
        use rand::Rng;
        rand::thread_rng().gen()
    };
    let password = body.password.clone();
    let salted = crate::blocking(move || {
        salted_password(mechanism, password.as_bytes(), &salt, iterations as u32)
    })
    .await;
    let code = scram_code(mechanism).expect("checked above");
    within_timeout(&format!("saving SCRAM user '{name}'"), async {
        let mut client = ctx.client().await?;
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s(&name))
                .with_mechanism(code)
                .with_iterations(iterations)
                .with_salt(Bytes::copy_from_slice(&salt))
                .with_salted_password(Bytes::from(salted)),
        ]);
        let response = client
            .admin_request(&request, SCRAM_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        alter_error(&response, "save")
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "name": name, "mechanism": mechanism.name(), "iterations": iterations })),
    )
        .into_response())
}

/// `DELETE /v1/users/{name}`: removes every SCRAM credential of the user. 204; 404 when it has none.
pub async fn delete_user(ctx: Ctx, Path(name): Path<String>) -> ApiResult<Response> {
    within_timeout(&format!("deleting SCRAM user '{name}'"), async {
        let mut client = ctx.client().await?;
        let describe = DescribeUserScramCredentialsRequest::default()
            .with_users(Some(vec![UserName::default().with_name(s(&name))]));
        let described = client
            .admin_request(&describe, SCRAM_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        kafka_result(described.error_code, &described.error_message, || {
            format!("cannot look up SCRAM user '{name}'")
        })?;
        let mechanisms: Vec<i8> = described
            .results
            .iter()
            .filter(|r| r.error_code == 0 && r.user.as_str() == name)
            .flat_map(|r| r.credential_infos.iter().map(|c| c.mechanism))
            .collect();
        if mechanisms.is_empty() {
            return Err(ApiError::not_found(
                "RESOURCE_NOT_FOUND",
                format!("user '{name}' has no SCRAM credential"),
            ));
        }
        let request = AlterUserScramCredentialsRequest::default().with_deletions(
            mechanisms
                .iter()
                .map(|m| {
                    ScramCredentialDeletion::default()
                        .with_name(s(&name))
                        .with_mechanism(*m)
                })
                .collect(),
        );
        let response = client
            .admin_request(&request, SCRAM_VERSIONS)
            .await
            .map_err(ApiError::from_client)?;
        alter_error(&response, "delete")
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_refuse_filters_in_acls() {
        assert_eq!(
            OPERATIONS
                .code("operation", "describe-configs", CONCRETE_OPERATIONS)
                .unwrap(),
            op::DESCRIBE_CONFIGS
        );
        assert_eq!(OPERATIONS.name(op::IDEMPOTENT_WRITE), "IDEMPOTENT_WRITE");
        assert!(OPERATIONS
            .code("operation", "ANY", CONCRETE_OPERATIONS)
            .is_err());
        assert!(PATTERNS
            .code("pattern_type", "MATCH", CONCRETE_PATTERNS)
            .is_err());
        assert_eq!(RESOURCE_TYPES.name(42), "UNKNOWN(42)");
    }

    #[test]
    fn a_filter_with_a_name_matches_prefixed_and_wildcard_acls() {
        let q = Query::parse(Some("resource_type=topic&resource_name=orders")).unwrap();
        let f = Filter::parse(&q).unwrap();
        assert_eq!(f.resource_type, resource::TOPIC);
        assert_eq!(f.pattern_type, pattern::MATCH);
        assert_eq!(f.operation, op::ANY);
        let f = Filter::parse(&Query::parse(None).unwrap()).unwrap();
        assert_eq!(f.pattern_type, pattern::ANY);
    }

    #[test]
    fn an_acl_needs_a_typed_principal() {
        let body = AclBody {
            principal: "alice".into(),
            host: None,
            operation: "READ".into(),
            permission: "ALLOW".into(),
            resource_type: "TOPIC".into(),
            resource_name: "orders".into(),
            pattern_type: None,
        };
        assert!(creation(&body).is_err());
        let ok = AclBody {
            principal: "User:alice".into(),
            ..body
        };
        let (_, shown) = creation(&ok).unwrap();
        assert_eq!(shown.host, "*");
        assert_eq!(shown.pattern_type, "LITERAL");
    }
}
