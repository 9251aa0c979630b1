//! Client quotas as KRaft stores them (KIP-546): an entity is a set of (entity type, name or default) parts,
//! each entity holds quota keys with float64 values, and `ClientQuotaRecord`s set or remove one key at a time.
//!
//! This module is the vocabulary the image, the controller (`controller/quotas.rs`, Kafka's
//! `ClientQuotaControlManager`) and the broker (DescribeClientQuotas, throttling) share: entity types, the keys
//! each kind of entity accepts with their types, validation with Kafka's messages, and DescribeClientQuotas'
//! filter matching (Kafka's `ClientQuotasImage.describe`).

use std::collections::{BTreeMap, BTreeSet};

/// Kafka's `ClientQuotaEntity.USER`.
pub const USER: &str = "user";
/// Kafka's `ClientQuotaEntity.CLIENT_ID`.
pub const CLIENT_ID: &str = "client-id";
/// Kafka's `ClientQuotaEntity.IP`.
pub const IP: &str = "ip";

/// Bytes per second a (user, client-id) may produce (`QuotaConfig.PRODUCER_BYTE_RATE_OVERRIDE_CONFIG`).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Bytes per second a (user, client-id) may fetch.
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Percentage of one request handler thread's time over the quota window.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Partition mutations per second (CreateTopics, CreatePartitions, DeleteTopics).
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// Connections per second from one IP.
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// Most entities one AlterClientQuotas may change, and most filter components one DescribeClientQuotas may
/// carry: bounds one metadata batch and one scan.
pub const ENTITIES_PER_REQUEST_MAX: usize = 10_000;

/// A quota entity: entity type -> name, `None` for the type's default entity. Ordered, so that equal entities
/// compare equal however a request listed their parts.
pub type QuotaEntity = BTreeMap<String, Option<String>>;

/// A quota value, compared bit for bit so that images stay `Eq` (values are validated finite and positive).
#[derive(Debug, Clone, Copy)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for QuotaValue {}

/// How a quota key's value is checked (Kafka's `ConfigDef.Type` of the key in `QuotaConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Long,
    Int,
    Double,
}

/// The keys an entity of this shape accepts: user and client-id entities take the byte rates, request
/// percentage and mutation rate; ip entities take only the connection rate (`QuotaConfig.ipConfigs`).
fn key_type(entity: &QuotaEntity, key: &str) -> Option<KeyType> {
    if entity.contains_key(IP) {
        return (key == CONNECTION_CREATION_RATE).then_some(KeyType::Int);
    }
    match key {
        PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE => Some(KeyType::Long),
        REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE => Some(KeyType::Double),
        _ => None,
    }
}

/// Why an entity cannot hold quotas, in Kafka's words (`ClientQuotaControlManager.validateEntity` and
/// `configKeysForEntityType`); `parts` is the entity as the request listed it, duplicates included.
pub fn entity_error(parts: &[(String, Option<String>)]) -> Option<String> {
    if parts.is_empty() {
        return Some("Invalid empty client quota entity".into());
    }
    let mut seen = BTreeSet::new();
    for (entity_type, name) in parts {
        if !seen.insert(entity_type.as_str()) {
            return Some(format!(
                "Invalid client quota entity, duplicate entity entry {entity_type}"
            ));
        }
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Some(format!("Unhandled client quota entity type: {entity_type}"));
        }
        if name.as_deref() == Some("") {
            return Some(format!("Empty {entity_type} not supported"));
        }
    }
    if seen.contains(IP) {
        if seen.len() > 1 {
            // Kafka's message, missing space included.
            return Some(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
                    .into(),
            );
        }
        let ip = parts[0].1.as_deref();
        if let Some(ip) = ip {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Some(format!("{ip} is not a valid IP or resolvable host."));
            }
        }
    }
    None
}

/// Why `value` is not a valid setting of `key` for `entity` (Kafka's `validateQuotaKeyValue`).
pub fn value_error(entity: &QuotaEntity, key: &str, value: f64) -> Option<String> {
    let Some(kind) = key_type(entity, key) else {
        return Some(format!("Invalid configuration key {key}"));
    };
    // NaN fails `> 0` too; Kafka would store it, but a NaN quota can neither throttle nor be compared.
    if !value.is_finite() || value <= 0.0 {
        return Some(format!("Quota {key} must be greater than 0"));
    }
    let too_large = match kind {
        KeyType::Double => return None,
        KeyType::Int => (value > f64::from(i32::MAX)).then_some("an INT"),
        KeyType::Long => (value > i64::MAX as f64).then_some("a LONG"),
    };
    if let Some(what) = too_large {
        return Some(format!("Proposed value for {key} is too large for {what}."));
    }
    if (value % 1.0).abs() > 1e-6 {
        return Some(format!("{key} cannot be a fractional value."));
    }
    None
}

/// Whether a record's entity and key could have been written by a controller (what the image accepts).
pub fn record_valid(entity: &QuotaEntity, key: &str) -> bool {
    let parts: Vec<(String, Option<String>)> =
        entity.iter().map(|(t, n)| (t.clone(), n.clone())).collect();
    entity_error(&parts).is_none() && key_type(entity, key).is_some()
}

/// DescribeClientQuotas `MatchType`: 0 exact name, 1 the default entity, 2 any entity of the type.
pub const MATCH_EXACT: i8 = 0;
pub const MATCH_DEFAULT: i8 = 1;
pub const MATCH_SPECIFIED: i8 = 2;

/// Why a filter is refused, with the Kafka error it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// INVALID_REQUEST.
    Invalid(String),
    /// UNSUPPORTED_VERSION (Kafka's answer for an unknown entity type).
    UnsupportedEntityType(String),
}

/// A parsed DescribeClientQuotas filter (Kafka's `ClientQuotasImage.describe`).
#[derive(Debug, Clone, Default)]
pub struct QuotaFilter {
    exact: BTreeMap<String, Option<String>>,
    of_type: BTreeSet<String>,
    strict: bool,
}

impl QuotaFilter {
    /// `components` as (entity type, match type, match).
    pub fn parse(
        components: &[(String, i8, Option<String>)],
        strict: bool,
    ) -> Result<QuotaFilter, FilterError> {
        if components.len() > ENTITIES_PER_REQUEST_MAX {
            return Err(FilterError::Invalid(format!(
                "at most {ENTITIES_PER_REQUEST_MAX} filter components are allowed"
            )));
        }
        let mut f = QuotaFilter {
            strict,
            ..Default::default()
        };
        for (entity_type, match_type, m) in components {
            if entity_type.is_empty() {
                return Err(FilterError::Invalid("Invalid empty entity type.".into()));
            }
            if f.exact.contains_key(entity_type) || f.of_type.contains(entity_type) {
                return Err(FilterError::Invalid(format!(
                    "Entity type {entity_type} cannot appear more than once in the filter."
                )));
            }
            if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
                return Err(FilterError::UnsupportedEntityType(format!(
                    "Unsupported entity type {entity_type}"
                )));
            }
            match *match_type {
                MATCH_EXACT => {
                    let Some(name) = m else {
                        return Err(FilterError::Invalid(
                            "Request specified MATCH_TYPE_EXACT, but set match string to null."
                                .into(),
                        ));
                    };
                    f.exact.insert(entity_type.clone(), Some(name.clone()));
                }
                MATCH_DEFAULT => {
                    if m.is_some() {
                        return Err(FilterError::Invalid(
                            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                                .into(),
                        ));
                    }
                    f.exact.insert(entity_type.clone(), None);
                }
                MATCH_SPECIFIED => {
                    if m.is_some() {
                        return Err(FilterError::Invalid(
                            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                                .into(),
                        ));
                    }
                    f.of_type.insert(entity_type.clone());
                }
                other => {
                    return Err(FilterError::Invalid(format!("Unknown match type {other}")));
                }
            }
        }
        let has = |t: &str| f.exact.contains_key(t) || f.of_type.contains(t);
        if has(IP) && (has(USER) || has(CLIENT_ID)) {
            return Err(FilterError::Invalid(
                "Invalid entity filter component combination. IP filter component should not be used with \
                 user or clientId filter component."
                    .into(),
            ));
        }
        Ok(f)
    }

    /// Kafka's `ClientQuotasImage.matches`: every exact component names the entity's part, every "specified"
    /// type is present, and a strict filter also wants no other parts.
    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        if self.strict && entity.len() != self.exact.len() + self.of_type.len() {
            return false;
        }
        self.exact
            .iter()
            .all(|(t, name)| entity.get(t).is_some_and(|n| n == name))
            && self.of_type.iter().all(|t| entity.contains_key(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        parts
            .iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect()
    }

    fn c(t: &str, m: i8, name: Option<&str>) -> (String, i8, Option<String>) {
        (t.to_string(), m, name.map(str::to_string))
    }

    #[test]
    fn entities_are_validated_as_kafka_does() {
        let p = |v: &[(&str, Option<&str>)]| -> Vec<(String, Option<String>)> {
            v.iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect()
        };
        assert_eq!(entity_error(&p(&[("user", Some("a"))])), None);
        assert_eq!(
            entity_error(&p(&[("user", None), ("client-id", Some("c"))])),
            None
        );
        assert_eq!(
            entity_error(&[]).as_deref(),
            Some("Invalid empty client quota entity")
        );
        assert!(
            entity_error(&p(&[("user", Some("a")), ("user", Some("b"))]))
                .unwrap()
                .contains("duplicate entity entry user")
        );
        assert!(entity_error(&p(&[("group", Some("g"))]))
            .unwrap()
            .contains("Unhandled client quota entity type: group"));
        assert_eq!(
            entity_error(&p(&[("user", Some(""))])).as_deref(),
            Some("Empty user not supported")
        );
        assert!(entity_error(&p(&[("ip", Some("1.2.3.4")), ("user", Some("a"))])).is_some());
        assert_eq!(entity_error(&p(&[("ip", Some("::1"))])), None);
        assert!(entity_error(&p(&[("ip", Some("not an ip"))])).is_some());
    }

    #[test]
    fn values_are_validated_by_key_type() {
        let user = entity(&[("user", Some("a"))]);
        let ip = entity(&[("ip", None)]);
        assert_eq!(value_error(&user, PRODUCER_BYTE_RATE, 1024.0), None);
        assert_eq!(value_error(&user, REQUEST_PERCENTAGE, 12.5), None);
        assert_eq!(
            value_error(&user, PRODUCER_BYTE_RATE, 0.5).as_deref(),
            Some("producer_byte_rate cannot be a fractional value.")
        );
        assert_eq!(
            value_error(&user, CONSUMER_BYTE_RATE, 0.0).as_deref(),
            Some("Quota consumer_byte_rate must be greater than 0")
        );
        assert!(value_error(&user, PRODUCER_BYTE_RATE, f64::NAN).is_some());
        assert_eq!(
            value_error(&user, CONNECTION_CREATION_RATE, 5.0).as_deref(),
            Some("Invalid configuration key connection_creation_rate")
        );
        assert_eq!(value_error(&ip, CONNECTION_CREATION_RATE, 5.0), None);
        assert!(value_error(&ip, CONNECTION_CREATION_RATE, 3e9)
            .unwrap()
            .contains("too large for an INT"));
        assert!(value_error(&ip, PRODUCER_BYTE_RATE, 5.0).is_some());
    }

    #[test]
    fn filters_match_exact_default_and_any() {
        let alice = entity(&[("user", Some("alice"))]);
        let alice_c1 = entity(&[("user", Some("alice")), ("client-id", Some("c1"))]);
        let default_user = entity(&[("user", None)]);
        let c1 = entity(&[("client-id", Some("c1"))]);
        let all = [&alice, &alice_c1, &default_user, &c1];
        let matching = |components: &[(String, i8, Option<String>)], strict: bool| {
            let f = QuotaFilter::parse(components, strict).unwrap();
            all.iter().filter(|e| f.matches(e)).count()
        };
        assert_eq!(matching(&[], false), 4);
        assert_eq!(matching(&[], true), 0);
        assert_eq!(matching(&[c("user", MATCH_EXACT, Some("alice"))], false), 2);
        assert_eq!(matching(&[c("user", MATCH_EXACT, Some("alice"))], true), 1);
        assert_eq!(matching(&[c("user", MATCH_DEFAULT, None)], false), 1);
        assert_eq!(matching(&[c("user", MATCH_SPECIFIED, None)], false), 3);
        assert_eq!(matching(&[c("client-id", MATCH_SPECIFIED, None)], true), 1);
        assert!(matches!(
            QuotaFilter::parse(&[c("user", MATCH_EXACT, None)], false),
            Err(FilterError::Invalid(_))
        ));
        assert!(matches!(
            QuotaFilter::parse(&[c("topic", MATCH_SPECIFIED, None)], false),
            Err(FilterError::UnsupportedEntityType(_))
        ));
        assert!(matches!(
            QuotaFilter::parse(
                &[
                    c("user", MATCH_SPECIFIED, None),
                    c("user", MATCH_DEFAULT, None)
                ],
                false
            ),
            Err(FilterError::Invalid(_))
        ));
        assert!(matches!(
            QuotaFilter::parse(
                &[
                    c("ip", MATCH_SPECIFIED, None),
                    c("user", MATCH_DEFAULT, None)
                ],
                false
            ),
            Err(FilterError::Invalid(_))
        ));
    }
}
