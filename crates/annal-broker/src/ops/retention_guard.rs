//! The retention guard, a topic config beyond Kafka: `retention.guard.groups` names consumer groups whose
//! unconsumed records retention (`retention.ms`, `retention.bytes`) waits for, up to `retention.guard.max.bytes`
//! per partition beyond what retention would keep. Past the cap the oldest held segments go anyway and the loss is
//! counted and logged as any other ([`super::groups::account_retention`]). Off by default (no groups).
//!
//! A listed group guards a partition only where it has a committed offset: with none, the broker cannot know
//! where it is. The guard is applied by the broker that coordinates the group, to the replicas it holds (exact on
//! a single node; see docs/decisions/0014-operability.md for clusters).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use annal_log::RetentionGuard;

use crate::config::BrokerConfig;
use crate::group::CommittedOffset;
use crate::replica::Partition;
use crate::topic_config;
use crate::Broker;

pub const GROUPS: &str = "retention.guard.groups";
pub const MAX_BYTES: &str = "retention.guard.max.bytes";
/// `retention.guard.max.bytes`' default: 1 GiB per partition, so a forgotten guarded group cannot fill the disk.
pub const MAX_BYTES_DEFAULT: &str = "1073741824";
/// Most groups one topic may name (each is looked up at every retention pass).
pub const GROUPS_MAX: usize = 100;

/// A topic's guard settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardSettings {
    pub groups: Vec<String>,
    /// `None`: `retention.guard.max.bytes=-1`, no cap.
    pub max_bytes: Option<u64>,
}

/// The groups of a `retention.guard.groups` value (comma-separated, blanks around names ignored).
pub fn parse_groups(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect()
}

/// Checks a `retention.guard.groups` value; returns it normalized. The error text goes to the client.
pub fn validate_groups(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Ok(String::new());
    }
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    if items.iter().any(|g| g.is_empty()) {
        return Err(format!(
            "{GROUPS}: '{value}' has an empty group name; give comma-separated group ids, e.g. 'billing,audit'"
        ));
    }
    if items.len() > GROUPS_MAX {
        return Err(format!(
            "{GROUPS}: {} groups named, at most {GROUPS_MAX}",
            items.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = items.iter().find(|g| !seen.insert(**g)) {
        return Err(format!("{GROUPS}: group '{dup}' is named twice"));
    }
    Ok(items.join(","))
}

/// The guard settings of a topic with these overrides; `None` when no group is named (the default).
pub fn settings(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> Option<GuardSettings> {
    let groups = parse_groups(&topic_config::effective(GROUPS, overrides, broker).0);
    if groups.is_empty() {
        return None;
    }
    let max = topic_config::effective(MAX_BYTES, overrides, broker).0;
    // Validated when set; an unreadable stored value falls back to the default cap, never to no cap.
    let max_bytes = match max.trim().parse::<i64>() {
        Ok(-1) => None,
        Ok(n) if n >= 0 => Some(n as u64),
        _ => MAX_BYTES_DEFAULT.parse().ok(),
    };
    Some(GuardSettings { groups, max_bytes })
}

/// What one retention pass needs: each topic's settings and each guarded group's committed offsets, looked up
/// once per pass.
pub struct Guards<'a> {
    broker: &'a Broker,
    settings: RefCell<HashMap<String, Option<GuardSettings>>>,
    offsets: RefCell<HashMap<String, Vec<CommittedOffset>>>,
}

impl<'a> Guards<'a> {
    pub fn new(broker: &'a Broker) -> Self {
        Guards {
            broker,
            settings: RefCell::default(),
            offsets: RefCell::default(),
        }
    }

    /// The topic's guard settings (cached for this pass).
    pub fn settings_of(&self, topic: &str) -> Option<GuardSettings> {
        self.settings
            .borrow_mut()
            .entry(topic.to_string())
            .or_insert_with(|| {
                let t = self.broker.replica_manager().topic(topic)?;
                settings(&t.configs, self.broker.config())
            })
            .clone()
    }

    /// The guard for one partition: keep from the lowest committed offset of its topic's guarded groups there.
    /// `None` when the topic has no guard or no guarded group has an offset on this partition.
    pub fn guard_for(&self, p: &Partition) -> Option<RetentionGuard> {
        let settings = self.settings_of(p.topic())?;
        let mut offsets = self.offsets.borrow_mut();
        let keep_from = settings
            .groups
            .iter()
            .filter_map(|g| {
                offsets
                    .entry(g.clone())
                    .or_insert_with(|| self.broker.groups().committed_offsets(g))
                    .iter()
                    .find(|o| o.topic == p.topic() && o.partition == p.index())
                    .map(|o| o.offset)
            })
            .min()?;
        Some(RetentionGuard {
            keep_from,
            max_bytes: settings.max_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lists_are_checked_and_normalized() {
        assert_eq!(validate_groups(""), Ok(String::new()));
        assert_eq!(validate_groups(" a , b"), Ok("a,b".to_string()));
        assert!(validate_groups("a,,b")
            .unwrap_err()
            .contains("empty group name"));
        assert!(validate_groups("a,b,a")
            .unwrap_err()
            .contains("'a' is named twice"));
        let many = (0..=GROUPS_MAX)
            .map(|i| format!("g{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(validate_groups(&many).unwrap_err().contains("at most"));
        assert_eq!(parse_groups(" a ,b,"), vec!["a", "b"]);
    }

    #[test]
    fn settings_are_off_by_default_and_capped_unless_minus_one() {
        let broker = BrokerConfig::load(None, &[], None, None).unwrap();
        let mut overrides = BTreeMap::new();
        assert_eq!(settings(&overrides, &broker), None);
        overrides.insert(GROUPS.to_string(), "billing".to_string());
        assert_eq!(
            settings(&overrides, &broker),
            Some(GuardSettings {
                groups: vec!["billing".to_string()],
                max_bytes: Some(1 << 30),
            })
        );
        overrides.insert(MAX_BYTES.to_string(), "-1".to_string());
        assert_eq!(settings(&overrides, &broker).unwrap().max_bytes, None);
    }
}
