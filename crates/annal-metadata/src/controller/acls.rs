//! CreateAcls (30) and DeleteAcls (31): Kafka's `AclControlManager`. Every created ACL is one
//! AccessControlEntryRecord with a fresh id (from the controller's seeded RNG, so a simulation replays it); an ACL
//! equal to one that exists (or to one earlier in the same request) succeeds without a record, as Kafka keeps one
//! copy of each binding. A deletion removes, by id, every ACL one of the filters matches. Each request is one
//! atomic batch.
//!
//! The broker in front does what Kafka's `AclApis` does before the controller: the caller's ALTER on the cluster,
//! and refusing requests with codes Kafka does not know (the connection is closed, as Kafka's parser does).

use std::collections::BTreeSet;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use uuid::Uuid;

use super::errors::*;
use super::Controller;
use crate::acl::{creation_error, AclFilter};
use crate::records::{AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord};

/// Most ACLs one CreateAcls may create, and most one DeleteAcls may remove: bounds one metadata batch.
pub const ACLS_PER_REQUEST_MAX: usize = 10_000;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The filter a DeleteAcls (or DescribeAcls) entry describes.
pub fn delete_filter(
    f: &kafka_protocol::messages::delete_acls_request::DeleteAclsFilter,
) -> AclFilter {
    AclFilter {
        resource_type: f.resource_type_filter,
        resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: f.pattern_type_filter,
        principal: f.principal_filter.as_ref().map(|n| n.to_string()),
        host: f.host_filter.as_ref().map(|n| n.to_string()),
        operation: f.operation,
        permission: f.permission_type,
    }
}

impl Controller {
    /// CreateAcls (30).
    pub async fn create_acls(&self, req: CreateAclsRequest) -> CreateAclsResponse {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        let mut results: Vec<Option<(i16, String)>> = Vec::with_capacity(req.creations.len());
        let mut batch: Vec<AccessControlEntryRecord> = Vec::new();
        let mut ids: BTreeSet<Uuid> = BTreeSet::new();
        for c in &req.creations {
            let mut acl = AccessControlEntryRecord {
                id: Uuid::nil(),
                resource_type: c.resource_type,
                resource_name: c.resource_name.to_string(),
                pattern_type: c.resource_pattern_type,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: c.operation,
                permission_type: c.permission_type,
            };
            if let Some(why) = creation_error(&acl) {
                results.push(Some((INVALID_REQUEST, why)));
                continue;
            }
            let same = |a: &AccessControlEntryRecord| {
                AccessControlEntryRecord {
                    id: acl.id,
                    ..a.clone()
                } == acl
            };
            if image.acl_like(&acl).is_some() || batch.iter().any(same) {
                results.push(None);
                continue;
            }
            if batch.len() >= ACLS_PER_REQUEST_MAX {
                results.push(Some((
                    INVALID_REQUEST,
                    format!("at most {ACLS_PER_REQUEST_MAX} ACLs may be created in one request"),
                )));
                continue;
            }
            acl.id = loop {
                let id = uuid::Builder::from_random_bytes(state.rng.gen()).into_uuid();
                if !id.is_nil() && !image.acls.contains_key(&id) && ids.insert(id) {
                    break id;
                }
            };
            batch.push(acl);
            results.push(None);
        }
        let write_error = if batch.is_empty() {
            None
        } else {
            let records = batch
                .into_iter()
                .map(MetadataRecord::AccessControlEntry)
                .collect();
            self.writer.write(records).await.err()
        };
        drop(state);
        let results = results
            .into_iter()
            .map(|r| {
                let (code, message) = match (r, &write_error) {
                    (Some((code, message)), _) => (code, Some(message)),
                    (None, Some(e)) => (e.code(), Some(e.to_string())),
                    (None, None) => (NONE, None),
                };
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
            })
            .collect();
        CreateAclsResponse::default().with_results(results)
    }

    /// DeleteAcls (31).
    pub async fn delete_acls(&self, req: DeleteAclsRequest) -> DeleteAclsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut removed: BTreeSet<Uuid> = BTreeSet::new();
        let mut results: Vec<DeleteAclsFilterResult> = Vec::with_capacity(req.filters.len());
        for f in &req.filters {
            let filter = delete_filter(f);
            if filter.is_unknown() {
                results.push(
                    DeleteAclsFilterResult::default()
                        .with_error_code(INVALID_REQUEST)
                        .with_error_message(Some(s(filter.unknown_message()))),
                );
                continue;
            }
            let matching: Vec<&AccessControlEntryRecord> =
                image.acls.values().filter(|a| filter.matches(a)).collect();
            if removed.len() + matching.len() > ACLS_PER_REQUEST_MAX {
                results.push(
                    DeleteAclsFilterResult::default()
                        .with_error_code(INVALID_REQUEST)
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "at most {ACLS_PER_REQUEST_MAX} ACLs may be deleted in one request; narrow the filter"
                        )))),
                );
                continue;
            }
            removed.extend(matching.iter().map(|a| a.id));
            results.push(
                DeleteAclsFilterResult::default().with_matching_acls(
                    matching
                        .into_iter()
                        .map(|a| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(a.resource_type)
                                .with_resource_name(s(&a.resource_name))
                                .with_pattern_type(a.pattern_type)
                                .with_principal(s(&a.principal))
                                .with_host(s(&a.host))
                                .with_operation(a.operation)
                                .with_permission_type(a.permission_type)
                        })
                        .collect(),
                ),
            );
        }
        if !removed.is_empty() {
            let records = removed
                .into_iter()
                .map(|id| {
                    MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id })
                })
                .collect();
            if let Err(e) = self.writer.write(records).await {
                for r in results.iter_mut().filter(|r| r.error_code == NONE) {
                    r.error_code = e.code();
                    r.error_message = Some(StrBytes::from_string(e.to_string()));
                    r.matching_acls.clear();
                }
            }
        }
        DeleteAclsResponse::default().with_filter_results(results)
    }
}
