//! The authorizer: Kafka's `StandardAuthorizer` (`StandardAuthorizerData.authorize`) over the ACLs of the
//! metadata image. What each API asks of it is in `apis::authz`; this module only answers "may this principal,
//! from this host, perform this operation on this resource?".
//!
//! Kafka's rules, exactly:
//! - a principal in `super.users` may do anything;
//! - the ACLs that apply to a resource are its LITERAL ACLs, the LITERAL `*` ACLs of its type, and the PREFIXED
//!   ACLs whose name is a prefix of the resource's name;
//! - an ACL matches when its principal is the caller's or `User:*`, its host is `*` or the caller's IP address
//!   (as Java prints it), and its operation is the one asked, or ALL, or (ALLOW ACLs only) one that implies it:
//!   READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
//! - a matching DENY wins over any ALLOW; a matching ALLOW allows;
//! - when nothing matches: denied if the resource has any ACL at all, otherwise `allow.everyone.if.no.acl.found`.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use annal_metadata::acl::{op, pattern, permission, WILDCARD, WILDCARD_PRINCIPAL};
use annal_metadata::image::MetadataImage;
use annal_metadata::records::AccessControlEntryRecord;

/// Kafka's `StandardAuthorizer` class name, the one `authorizer.class.name` accepts.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthorizerConfig {
    /// Principals as Kafka prints them (`User:admin`).
    pub super_users: BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

/// The image's ACLs, indexed by resource for the lookups a check makes.
#[derive(Debug, Default)]
pub struct AclIndex {
    /// LITERAL ACLs by resource type and name (the `*` wildcard included).
    literal: HashMap<i8, HashMap<String, Vec<AccessControlEntryRecord>>>,
    /// PREFIXED ACLs by resource type and prefix.
    prefixed: HashMap<i8, HashMap<String, Vec<AccessControlEntryRecord>>>,
}

impl AclIndex {
    pub fn build(acls: impl IntoIterator<Item = AccessControlEntryRecord>) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in acls {
            let (rt, name) = (acl.resource_type, acl.resource_name.clone());
            match acl.pattern_type {
                pattern::LITERAL => index
                    .literal
                    .entry(rt)
                    .or_default()
                    .entry(name)
                    .or_default()
                    .push(acl),
                pattern::PREFIXED => index
                    .prefixed
                    .entry(rt)
                    .or_default()
                    .entry(name)
                    .or_default()
                    .push(acl),
                _ => {} // the image only holds LITERAL and PREFIXED ACLs
            }
        }
        index
    }

    /// Every ACL that applies to the resource (see the module's rules), each once.
    fn applicable<'a>(
        &'a self,
        resource_type: i8,
        name: &str,
    ) -> impl Iterator<Item = &'a AccessControlEntryRecord> + 'a {
        let mut sections: Vec<&'a Vec<AccessControlEntryRecord>> = Vec::new();
        if let Some(literal) = self.literal.get(&resource_type) {
            sections.extend(literal.get(name));
            if name != WILDCARD {
                sections.extend(literal.get(WILDCARD));
            }
        }
        if let Some(prefixed) = self.prefixed.get(&resource_type) {
            for (end, _) in name
                .char_indices()
                .skip(1)
                .chain(std::iter::once((name.len(), ' ')))
            {
                sections.extend(prefixed.get(&name[..end]));
            }
        }
        sections.into_iter().flatten()
    }

    fn of_type<'a>(
        &'a self,
        resource_type: i8,
    ) -> impl Iterator<Item = &'a AccessControlEntryRecord> + 'a {
        self.literal
            .get(&resource_type)
            .into_iter()
            .chain(self.prefixed.get(&resource_type))
            .flat_map(|m| m.values().flatten())
    }
}

/// Who is asking, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `User:alice`, `User:ANONYMOUS`, `User:CN=...`.
    pub principal: String,
    /// The client's address as Java's `InetAddress.getHostAddress()` prints it (what ACL hosts are compared to).
    pub host: String,
}

/// An IP address as Java's `InetAddress.getHostAddress()` prints it: dotted IPv4; IPv6 as eight uncompressed
/// lower-case hex groups without leading zeros (`0:0:0:0:0:0:0:1`). An IPv4-mapped IPv6 address is IPv4, as
/// Java's socket layer reports it.
pub fn java_host_address(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6
                .segments()
                .iter()
                .map(|s| format!("{s:x}"))
                .collect::<Vec<_>>()
                .join(":"),
        },
    }
}

/// Kafka's `findResult`: whether one ACL (whose resource applies) allows, denies, or says nothing.
fn find_result(acl: &AccessControlEntryRecord, caller: &Caller, operation: i8) -> Option<bool> {
    if acl.principal != caller.principal && acl.principal != WILDCARD_PRINCIPAL {
        return None;
    }
    if acl.host != WILDCARD && acl.host != caller.host {
        return None;
    }
    let allow = acl.permission_type == permission::ALLOW;
    if acl.operation != op::ALL {
        let matches = if allow {
            match operation {
                op::DESCRIBE => matches!(
                    acl.operation,
                    op::DESCRIBE | op::READ | op::WRITE | op::DELETE | op::ALTER
                ),
                op::DESCRIBE_CONFIGS => {
                    matches!(acl.operation, op::DESCRIBE_CONFIGS | op::ALTER_CONFIGS)
                }
                other => other == acl.operation,
            }
        } else {
            operation == acl.operation
        };
        if !matches {
            return None;
        }
    }
    Some(allow)
}

/// The authorizer: its settings and the ACL index of the latest image it has seen.
pub struct Authorizer {
    config: AuthorizerConfig,
    /// The image the index was built from (compared by pointer) and the index.
    cache: Mutex<Option<(Arc<MetadataImage>, Arc<AclIndex>)>>,
}

impl Authorizer {
    pub fn new(config: AuthorizerConfig) -> Authorizer {
        Authorizer {
            config,
            cache: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// The index of `image`'s ACLs, rebuilt only when the ACLs changed.
    pub fn index(&self, image: &Arc<MetadataImage>) -> Arc<AclIndex> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, index)) = cache.as_ref() {
            if Arc::ptr_eq(seen, image) || seen.acls == image.acls {
                let index = index.clone();
                *cache = Some((image.clone(), index.clone()));
                return index;
            }
        }
        let index = Arc::new(AclIndex::build(image.acls.values().cloned()));
        *cache = Some((image.clone(), index.clone()));
        index
    }

    pub fn is_super_user(&self, caller: &Caller) -> bool {
        self.config.super_users.contains(&caller.principal)
    }

    /// Kafka's `StandardAuthorizerData.authorize` for one (operation, resource type, literal resource name).
    pub fn authorize(
        &self,
        index: &AclIndex,
        caller: &Caller,
        operation: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        if self.is_super_user(caller) {
            return true;
        }
        let mut allowed = false;
        let mut has_resource_acls = false;
        for acl in index.applicable(resource_type, name) {
            has_resource_acls = true;
            match find_result(acl, caller, operation) {
                Some(false) => return false, // DENY beats ALLOW
                Some(true) => allowed = true,
                None => {}
            }
        }
        allowed || (!has_resource_acls && self.config.allow_everyone_if_no_acl_found)
    }

    /// Kafka's `Authorizer.authorizeByResourceType`: whether the caller may perform `operation` on at least one
    /// resource of the type (InitProducerId without a transactional id asks it for WRITE on topics). Allowed for
    /// super users and by the default when no ACL names the resource type; otherwise an ALLOW (LITERAL or
    /// PREFIXED) not covered by a DENY of the caller: a LITERAL `*` DENY covers all, a DENY on a literal name that
    /// name, a PREFIXED DENY every name it prefixes.
    pub fn authorize_by_resource_type(
        &self,
        index: &AclIndex,
        caller: &Caller,
        operation: i8,
        resource_type: i8,
    ) -> bool {
        if self.is_super_user(caller) {
            return true;
        }
        let matching: Vec<(&AccessControlEntryRecord, bool)> = index
            .of_type(resource_type)
            .filter_map(|a| find_result(a, caller, operation).map(|allow| (a, allow)))
            .collect();
        let denied = |name: &str, prefixed: bool| {
            matching.iter().any(|(d, allow)| {
                !allow
                    && ((d.pattern_type == pattern::LITERAL
                        && (d.resource_name == WILDCARD || (!prefixed && d.resource_name == name)))
                        || (d.pattern_type == pattern::PREFIXED
                            && name.starts_with(&d.resource_name)))
            })
        };
        if matching.iter().any(|(a, allow)| {
            *allow && !denied(&a.resource_name, a.pattern_type == pattern::PREFIXED)
        }) {
            return true;
        }
        // Kafka checks a made-up literal resource first, which is where super users and the default apply.
        self.config.allow_everyone_if_no_acl_found && index.of_type(resource_type).next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_metadata::acl::resource;
    use uuid::Uuid;

    fn acl(
        rt: i8,
        name: &str,
        pt: i8,
        principal: &str,
        host: &str,
        op: i8,
        perm: i8,
    ) -> AccessControlEntryRecord {
        AccessControlEntryRecord {
            id: Uuid::new_v4(),
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission_type: perm,
        }
    }

    fn alice() -> Caller {
        Caller {
            principal: "User:alice".into(),
            host: "127.0.0.1".into(),
        }
    }

    #[test]
    fn java_prints_ipv6_uncompressed() {
        assert_eq!(java_host_address("::1".parse().unwrap()), "0:0:0:0:0:0:0:1");
        assert_eq!(
            java_host_address("::ffff:10.0.0.1".parse().unwrap()),
            "10.0.0.1"
        );
        assert_eq!(
            java_host_address("fe80::1:abcd".parse().unwrap()),
            "fe80:0:0:0:0:0:1:abcd"
        );
    }

    #[test]
    fn implied_operations_only_for_allow() {
        let a = Authorizer::new(AuthorizerConfig::default());
        let allow_read = AclIndex::build([acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:alice",
            "*",
            op::READ,
            permission::ALLOW,
        )]);
        assert!(a.authorize(&allow_read, &alice(), op::DESCRIBE, resource::TOPIC, "t"));
        assert!(!a.authorize(&allow_read, &alice(), op::WRITE, resource::TOPIC, "t"));
        let deny_read = AclIndex::build([
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:alice",
                "*",
                op::DESCRIBE,
                permission::ALLOW,
            ),
            acl(
                resource::TOPIC,
                "t",
                pattern::LITERAL,
                "User:alice",
                "*",
                op::READ,
                permission::DENY,
            ),
        ]);
        assert!(a.authorize(&deny_read, &alice(), op::DESCRIBE, resource::TOPIC, "t"));
        assert!(!a.authorize(&deny_read, &alice(), op::READ, resource::TOPIC, "t"));
        let alter_configs = AclIndex::build([acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:*",
            "*",
            op::ALTER_CONFIGS,
            permission::ALLOW,
        )]);
        assert!(a.authorize(
            &alter_configs,
            &alice(),
            op::DESCRIBE_CONFIGS,
            resource::TOPIC,
            "t"
        ));
        assert!(!a.authorize(&alter_configs, &alice(), op::DESCRIBE, resource::TOPIC, "t"));
    }

    #[test]
    fn prefixed_wildcard_and_deny_beats_allow() {
        let a = Authorizer::new(AuthorizerConfig::default());
        let index = AclIndex::build([
            acl(
                resource::TOPIC,
                "orders-",
                pattern::PREFIXED,
                "User:alice",
                "*",
                op::ALL,
                permission::ALLOW,
            ),
            acl(
                resource::TOPIC,
                "orders-secret",
                pattern::LITERAL,
                "User:alice",
                "*",
                op::READ,
                permission::DENY,
            ),
            acl(
                resource::GROUP,
                "*",
                pattern::LITERAL,
                "User:*",
                "*",
                op::READ,
                permission::ALLOW,
            ),
        ]);
        assert!(a.authorize(&index, &alice(), op::WRITE, resource::TOPIC, "orders-eu"));
        assert!(!a.authorize(&index, &alice(), op::WRITE, resource::TOPIC, "order"));
        assert!(!a.authorize(&index, &alice(), op::READ, resource::TOPIC, "orders-secret"));
        assert!(a.authorize(
            &index,
            &alice(),
            op::WRITE,
            resource::TOPIC,
            "orders-secret"
        ));
        assert!(a.authorize(&index, &alice(), op::READ, resource::GROUP, "anything"));
        // A literal ACL does not match a longer name it is a prefix of.
        let lit = AclIndex::build([acl(
            resource::TOPIC,
            "ord",
            pattern::LITERAL,
            "User:alice",
            "*",
            op::ALL,
            permission::ALLOW,
        )]);
        assert!(!a.authorize(&lit, &alice(), op::READ, resource::TOPIC, "orders"));
    }

    #[test]
    fn hosts_super_users_and_the_default() {
        let a = Authorizer::new(AuthorizerConfig {
            super_users: ["User:admin".to_string()].into(),
            allow_everyone_if_no_acl_found: true,
        });
        let index = AclIndex::build([acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:alice",
            "10.0.0.1",
            op::READ,
            permission::ALLOW,
        )]);
        assert!(
            !a.authorize(&index, &alice(), op::READ, resource::TOPIC, "t"),
            "wrong host, resource has ACLs"
        );
        let from_there = Caller {
            host: "10.0.0.1".into(),
            ..alice()
        };
        assert!(a.authorize(&index, &from_there, op::READ, resource::TOPIC, "t"));
        assert!(
            a.authorize(&index, &alice(), op::READ, resource::TOPIC, "no-acls"),
            "allow.everyone"
        );
        let admin = Caller {
            principal: "User:admin".into(),
            ..alice()
        };
        assert!(a.authorize(&index, &admin, op::DELETE, resource::TOPIC, "t"));
        let strict = Authorizer::new(AuthorizerConfig::default());
        assert!(!strict.authorize(&index, &alice(), op::READ, resource::TOPIC, "no-acls"));
    }

    #[test]
    fn by_resource_type() {
        let a = Authorizer::new(AuthorizerConfig::default());
        let some = AclIndex::build([acl(
            resource::TOPIC,
            "p-",
            pattern::PREFIXED,
            "User:alice",
            "*",
            op::WRITE,
            permission::ALLOW,
        )]);
        assert!(a.authorize_by_resource_type(&some, &alice(), op::WRITE, resource::TOPIC));
        let denied = AclIndex::build([
            acl(
                resource::TOPIC,
                "p-",
                pattern::PREFIXED,
                "User:alice",
                "*",
                op::WRITE,
                permission::ALLOW,
            ),
            acl(
                resource::TOPIC,
                "p",
                pattern::PREFIXED,
                "User:alice",
                "*",
                op::WRITE,
                permission::DENY,
            ),
        ]);
        assert!(!a.authorize_by_resource_type(&denied, &alice(), op::WRITE, resource::TOPIC));
        assert!(!a.authorize_by_resource_type(
            &AclIndex::default(),
            &alice(),
            op::WRITE,
            resource::TOPIC
        ));
    }
}
