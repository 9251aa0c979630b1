//! Kafka's ACL model: the codes of `ResourceType`, `PatternType`, `AclOperation` and `AclPermissionType`, and
//! `AclBindingFilter`'s matching rules (what DescribeAcls lists and DeleteAcls removes). Shared by the controller
//! (CreateAcls/DeleteAcls) and the broker's authorizer, which decides with the image's ACLs.

use crate::records::AccessControlEntryRecord;

/// `ResourceType` codes.
pub mod resource {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// `PatternType` codes.
pub mod pattern {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// `AclOperation` codes.
pub mod op {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
}

/// `AclPermissionType` codes.
pub mod permission {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The name of the one cluster resource (`Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The wildcard resource name and host (`ResourcePattern.WILDCARD_RESOURCE`, `AclEntry.WILDCARD_HOST`).
pub const WILDCARD: &str = "*";
/// The wildcard principal (`AclEntry.WILDCARD_PRINCIPAL_STRING`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Whether each code is one Kafka knows (`fromCode` maps anything else to UNKNOWN).
pub fn codes_known(resource_type: i8, pattern_type: i8, operation: i8, permission: i8) -> bool {
    (resource::ANY..=resource::USER).contains(&resource_type)
        && (pattern::ANY..=pattern::PREFIXED).contains(&pattern_type)
        && (op::ANY..=op::DESCRIBE_TOKENS).contains(&operation)
        && (permission::ANY..=permission::ALLOW).contains(&permission)
}

/// Whether a code is UNKNOWN (0) itself: Kafka's request parser (`CreateAclsRequest`/`DeleteAclsRequest`/
/// `DescribeAclsRequest.validate`) refuses such a request whole and the connection is closed. Other codes it
/// does not know pass the parser and are refused per item.
pub fn any_code_unknown(
    resource_type: i8,
    pattern_type: i8,
    operation: i8,
    permission: i8,
) -> bool {
    [resource_type, pattern_type, operation, permission].contains(&0)
}

/// An `AclBindingFilter`: `None` for a null string (matches anything), ANY codes match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Kafka's `AclBindingFilter.isUnknown`: a filter with an UNKNOWN code matches nothing and is refused.
    pub fn is_unknown(&self) -> bool {
        !codes_known(
            self.resource_type,
            self.pattern_type,
            self.operation,
            self.permission,
        )
    }

    /// DeleteAcls' message for an unknown filter (Kafka's `AclControlManager.validateFilter`).
    pub fn unknown_message(&self) -> &'static str {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type)
            || !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type)
        {
            "Unknown patternFilter."
        } else {
            "Unknown entryFilter."
        }
    }

    /// Kafka's `AclBindingFilter.matches`: `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`.
    pub fn matches(&self, acl: &AccessControlEntryRecord) -> bool {
        self.pattern_matches(acl) && self.entry_matches(acl)
    }

    fn pattern_matches(&self, acl: &AccessControlEntryRecord) -> bool {
        if self.resource_type != resource::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        if self.pattern_type != pattern::ANY
            && self.pattern_type != pattern::MATCH
            && self.pattern_type != acl.pattern_type
        {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == pattern::ANY || self.pattern_type == acl.pattern_type {
            return *name == acl.resource_name;
        }
        // MATCH: every ACL that would apply to a resource of this (literal) name.
        match acl.pattern_type {
            pattern::LITERAL => *name == acl.resource_name || acl.resource_name == WILDCARD,
            pattern::PREFIXED => name.starts_with(&acl.resource_name),
            _ => false,
        }
    }

    fn entry_matches(&self, acl: &AccessControlEntryRecord) -> bool {
        if self.principal.as_ref().is_some_and(|p| *p != acl.principal) {
            return false;
        }
        if self.host.as_ref().is_some_and(|h| *h != acl.host) {
            return false;
        }
        if self.operation != op::ANY && self.operation != acl.operation {
            return false;
        }
        self.permission == permission::ANY || self.permission == acl.permission_type
    }
}

/// Why an ACL may not be created (Kafka's `AclApis.handleCreateAcls` and `AclControlManager.validateNewAcl`),
/// as the message Kafka gives with INVALID_REQUEST.
pub fn creation_error(acl: &AccessControlEntryRecord) -> Option<String> {
    if acl.resource_type == resource::CLUSTER && acl.resource_name != CLUSTER_NAME {
        return Some(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        ));
    }
    if acl.resource_name.is_empty() {
        return Some("Invalid empty resource name".into());
    }
    // Codes Kafka does not know read as UNKNOWN, and its messages name them so.
    if !(resource::TOPIC..=resource::USER).contains(&acl.resource_type) {
        return Some(format!(
            "Invalid resourceType {}",
            if acl.resource_type == resource::ANY {
                "ANY"
            } else {
                "UNKNOWN"
            }
        ));
    }
    if !(pattern::LITERAL..=pattern::PREFIXED).contains(&acl.pattern_type) {
        return Some(format!(
            "Invalid patternType {}",
            match acl.pattern_type {
                pattern::ANY => "ANY",
                pattern::MATCH => "MATCH",
                _ => "UNKNOWN",
            }
        ));
    }
    if !(op::ALL..=op::DESCRIBE_TOKENS).contains(&acl.operation) {
        return Some(format!(
            "Invalid operation {}",
            if acl.operation == op::ANY {
                "ANY"
            } else {
                "UNKNOWN"
            }
        ));
    }
    if !(permission::DENY..=permission::ALLOW).contains(&acl.permission_type) {
        return Some(format!(
            "Invalid permissionType {}",
            if acl.permission_type == permission::ANY {
                "ANY"
            } else {
                "UNKNOWN"
            }
        ));
    }
    if !acl.principal.contains(':') {
        return Some(format!(
            "Could not parse principal from `{}` (no colon is present separating the principal type from the \
             principal name)",
            acl.principal
        ));
    }
    None
}

/// Whether a creation names a filter value (ANY, MATCH) where a concrete one is needed. Kafka's broker cannot
/// turn such a creation into an ACL and fails the whole CreateAcls with UNKNOWN_SERVER_ERROR for every entry
/// (observed with Kafka 4.1: `StandardAcl.fromAclBinding` throws before anything is sent to the controller).
pub fn creation_has_filter_value(acl: &AccessControlEntryRecord) -> bool {
    acl.resource_type == resource::ANY
        || acl.pattern_type == pattern::ANY
        || acl.pattern_type == pattern::MATCH
        || acl.operation == op::ANY
        || acl.permission_type == permission::ANY
}
