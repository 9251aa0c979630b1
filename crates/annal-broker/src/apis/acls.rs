//! DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's `AclApis`: ALTER (create, delete) or DESCRIBE
//! (describe) on the cluster first; SECURITY_DISABLED without an authorizer; codes Kafka does not know close the
//! connection (Kafka's request parser refuses them). DescribeAcls answers from this broker's image; CreateAcls and
//! DeleteAcls go to the controller (the only writer of the metadata log) and are answered once this broker's
//! image shows the change, so a check right after the answer sees it.

use std::sync::Arc;

use annal_metadata::acl::{any_code_unknown, creation_has_filter_value, op, AclFilter};
use annal_metadata::controller::acls::delete_filter;
use annal_metadata::records::AccessControlEntryRecord;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;

use super::authz::Authz;
use super::forward::{wait_until, NOT_CONTROLLER};
use super::{code, s};
use crate::server::Close;
use crate::Broker;

const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

fn unknown_codes(what: &str) -> Close {
    Close(format!(
        "{what} contain unknown resource type, pattern type, operation or permission codes"
    ))
}

pub async fn describe_acls(
    broker: &Arc<Broker>,
    _header: &RequestHeader,
    req: DescribeAclsRequest,
) -> Result<DescribeAclsResponse, Close> {
    if any_code_unknown(
        req.resource_type_filter,
        req.pattern_type_filter,
        req.operation,
        req.permission_type,
    ) {
        return Err(unknown_codes("DescribeAcls filters"));
    }
    let Some(a) = Authz::of(broker) else {
        return Ok(DescribeAclsResponse::default()
            .with_error_code(code::SECURITY_DISABLED)
            .with_error_message(Some(s(NO_AUTHORIZER))));
    };
    if !a.cluster(op::DESCRIBE) {
        return Ok(DescribeAclsResponse::default()
            .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(s("Cluster authorization failed."))));
    }
    let filter = AclFilter {
        resource_type: req.resource_type_filter,
        resource_name: req.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter.as_ref().map(|n| n.to_string()),
        host: req.host_filter.as_ref().map(|n| n.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    let image = broker.cluster().image();
    // Grouped by resource pattern, as Kafka's `DescribeAclsResponse.aclsResources`.
    let mut resources: std::collections::BTreeMap<(i8, String, i8), Vec<AclDescription>> =
        Default::default();
    for acl in image.acls.values().filter(|a| filter.matches(a)) {
        resources
            .entry((
                acl.resource_type,
                acl.resource_name.clone(),
                acl.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(s(acl.principal.clone()))
                    .with_host(s(acl.host.clone()))
                    .with_operation(acl.operation)
                    .with_permission_type(acl.permission_type),
            );
    }
    Ok(DescribeAclsResponse::default().with_resources(
        resources
            .into_iter()
            .map(|((t, n, p), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(t)
                    .with_resource_name(s(n))
                    .with_pattern_type(p)
                    .with_acls(acls)
            })
            .collect(),
    ))
}

pub async fn create_acls(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: CreateAclsRequest,
) -> Result<CreateAclsResponse, Close> {
    if req.creations.iter().any(|c| {
        any_code_unknown(
            c.resource_type,
            c.resource_pattern_type,
            c.operation,
            c.permission_type,
        )
    }) {
        return Err(unknown_codes("CreateAcls creations"));
    }
    let every = |code: i16, message: &str| {
        CreateAclsResponse::default().with_results(
            req.creations
                .iter()
                .map(|_| {
                    AclCreationResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(s(message)))
                })
                .collect(),
        )
    };
    let Some(a) = Authz::of(broker) else {
        return Ok(every(
            code::SECURITY_DISABLED,
            "No Authorizer is configured.",
        ));
    };
    if !a.cluster(op::ALTER) {
        return Ok(every(
            code::CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        ));
    }
    let wanted: Vec<AccessControlEntryRecord> = req
        .creations
        .iter()
        .map(|c| AccessControlEntryRecord {
            id: uuid::Uuid::nil(),
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission_type: c.permission_type,
        })
        .collect();
    if wanted.iter().any(creation_has_filter_value) {
        // Kafka's broker fails the whole request this way (see `creation_has_filter_value`).
        return Ok(every(
            code::UNKNOWN_SERVER_ERROR,
            "an ACL to create names ANY or MATCH where a resource type, pattern type, operation or permission is \
             needed; nothing was created",
        ));
    }
    let cluster = broker.cluster();
    match cluster
        .channel()
        .send(&req, header.request_api_version)
        .await
    {
        Ok(resp) => {
            let created: Vec<&AccessControlEntryRecord> = wanted
                .iter()
                .zip(resp.results.iter())
                .filter(|(_, r)| r.error_code == code::NONE)
                .map(|(w, _)| w)
                .collect();
            wait_until(|| {
                let image = cluster.image();
                created.iter().all(|w| image.acl_like(w).is_some())
            })
            .await;
            Ok(resp)
        }
        Err(e) => Ok(every(
            NOT_CONTROLLER,
            &format!("the active controller could not be reached ({e:#}); retry"),
        )),
    }
}

pub async fn delete_acls(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DeleteAclsRequest,
) -> Result<DeleteAclsResponse, Close> {
    let filters: Vec<AclFilter> = req.filters.iter().map(delete_filter).collect();
    if filters
        .iter()
        .any(|f| any_code_unknown(f.resource_type, f.pattern_type, f.operation, f.permission))
    {
        return Err(unknown_codes("DeleteAcls filters"));
    }
    let every = |code: i16, message: &str| {
        DeleteAclsResponse::default().with_filter_results(
            req.filters
                .iter()
                .map(|_| {
                    DeleteAclsFilterResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(s(message)))
                })
                .collect(),
        )
    };
    let Some(a) = Authz::of(broker) else {
        return Ok(every(
            code::SECURITY_DISABLED,
            "No Authorizer is configured.",
        ));
    };
    if !a.cluster(op::ALTER) {
        return Ok(every(
            code::CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        ));
    }
    let cluster = broker.cluster();
    match cluster
        .channel()
        .send(&req, header.request_api_version)
        .await
    {
        Ok(resp) => {
            let applied: Vec<&AclFilter> = filters
                .iter()
                .zip(resp.filter_results.iter())
                .filter(|(_, r)| r.error_code == code::NONE && !r.matching_acls.is_empty())
                .map(|(f, _)| f)
                .collect();
            wait_until(|| {
                let image = cluster.image();
                applied
                    .iter()
                    .all(|f| !image.acls.values().any(|a| f.matches(a)))
            })
            .await;
            Ok(resp)
        }
        Err(e) => Ok(every(
            NOT_CONTROLLER,
            &format!("the active controller could not be reached ({e:#}); retry"),
        )),
    }
}
