//! The retention guard, a topic config beyond Kafka: `retention.guard.groups` names consumer groups whose
//! unconsumed records retention (`retention.ms`, `retention.bytes`) waits for, up to `retention.guard.max.bytes`
//! per partition beyond what retention would keep. Past the cap the oldest held segments go anyway and the loss is
//! counted and logged as any other ([`super::groups::account_retention`]). Off by default (no groups).
//!
//! A listed group guards a partition only where it has a committed offset: with none, the broker cannot know
//! where it is. Every broker applies the guard to the replicas it holds, leaders and followers alike, so a new
//! leader after a failover has kept what the old one kept: groups coordinated here are read from the local
//! coordinator, the others' offsets are fetched from their coordinators (OffsetFetch over the inter-broker
//! listener, [`remote_offsets`]) before each retention pass. A group whose coordinator cannot be asked holds
//! everything (up to the cap) for that pass: not knowing never deletes.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use annal_client::{Connection, ConnectionOptions};
use annal_log::RetentionGuard;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{GroupId, OffsetFetchRequest};
use kafka_protocol::protocol::StrBytes;

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

/// Guarded groups' committed offsets from coordinators on other brokers, for one retention pass: `None` for a
/// group whose coordinator could not be asked (no leader, unreachable, loading), which then holds everything.
pub type RemoteOffsets = HashMap<String, Option<Vec<CommittedOffset>>>;

/// OffsetFetch versions asked for (the groups form, v8+; every Annal broker speaks it).
const OFFSET_FETCH_VERSIONS: (i16, i16) = (8, 9);
/// Bounds on asking a coordinator: a retention pass never waits long for one.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);
const REMOTE_RESPONSE_BYTES_MAX: usize = 16 << 20;

/// All of a retention pass's asking together: the broker's housekeeping (flushes, checkpoints) waits for it, so
/// however many groups are guarded and however many coordinators do not answer, it ends within this.
const REMOTE_PASS_MAX: Duration = Duration::from_secs(10);

/// Fetches the committed offsets of every guarded group of the topics this broker holds replicas of, for the
/// groups another broker coordinates. One connection per coordinator, one OffsetFetch per group (at most
/// [`GROUPS_MAX`] per topic), each bounded by [`REMOTE_TIMEOUT`] and all by [`REMOTE_PASS_MAX`]; a coordinator
/// that failed once is not asked again this pass. Groups not answered hold (`None`).
pub async fn remote_offsets(broker: &Broker) -> RemoteOffsets {
    let rm = broker.replica_manager();
    let mut groups = BTreeSet::new();
    for topic in rm.topics() {
        if let Some(settings) = settings(&topic.configs, broker.config()) {
            if !rm.partitions_of(&topic.name).is_empty() {
                groups.extend(settings.groups);
            }
        }
    }
    let routes = crate::cluster::ClusterTxnRoutes::new(
        broker.cluster().clone(),
        broker.config().node_id,
        broker.config().cluster.listeners.inter_broker_name.clone(),
    );
    let security = broker.cluster().inter_broker_client().clone();
    let mut connections: HashMap<String, Connection> = HashMap::new();
    let mut failed: BTreeSet<String> = BTreeSet::new();
    let mut found = RemoteOffsets::new();
    let deadline = tokio::time::Instant::now() + REMOTE_PASS_MAX;
    for group in groups {
        let partition = broker.groups().partition_for(&group) as i32;
        use crate::txn::LeaderRoutes;
        let addr = match routes.leader(crate::group::store::TOPIC, partition) {
            Ok(Some((leader, _))) if leader == broker.config().node_id => continue, // coordinated here
            Ok(Some((_, addr))) => addr,
            Ok(None) | Err(()) => {
                found.insert(group, None);
                continue;
            }
        };
        if failed.contains(&addr) {
            found.insert(group, None);
            continue;
        }
        let offsets = match tokio::time::timeout_at(
            deadline,
            fetch_group_offsets(&mut connections, &addr, &group, &security),
        )
        .await
        {
            Ok(offsets) => offsets,
            Err(_) => Err(anyhow::anyhow!(
                "the retention pass's {} s for asking coordinators ran out",
                REMOTE_PASS_MAX.as_secs()
            )),
        };
        if offsets.is_err() {
            failed.insert(addr.clone());
            connections.remove(&addr);
        }
        if let Err(e) = &offsets {
            tracing::warn!(group = %group, coordinator = %addr, error = %format!("{e:#}"),
                "retention guard: cannot fetch the group's committed offsets from its coordinator; \
                 its guarded partitions keep everything (up to retention.guard.max.bytes) this pass");
        }
        found.insert(group, offsets.ok());
    }
    found
}

/// One group's committed offsets, asked of the coordinator at `addr`.
async fn fetch_group_offsets(
    connections: &mut HashMap<String, Connection>,
    addr: &str,
    group: &str,
    security: &crate::security::InterBrokerClient,
) -> anyhow::Result<Vec<CommittedOffset>> {
    if connections.get(addr).is_none_or(Connection::is_closed) {
        let options = ConnectionOptions {
            connect_timeout: REMOTE_TIMEOUT,
            request_timeout: REMOTE_TIMEOUT,
            max_response_bytes: REMOTE_RESPONSE_BYTES_MAX,
            client_id: "annal-retention-guard".to_string(),
            version_caps: None,
            // The OS's TCP: the simulator runs no guarded topics yet (transaction peers connect the same way).
            ..ConnectionOptions::default()
        };
        connections.insert(
            addr.to_string(),
            Connection::connect_with(addr, security.apply(options)).await?,
        );
    }
    let Some(conn) = connections.get_mut(addr) else {
        anyhow::bail!("no connection to {addr}");
    };
    let request = OffsetFetchRequest::default()
        .with_require_stable(false)
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_epoch(-1)
            .with_topics(None)]);
    let (response, _) = conn.send(&request, OFFSET_FETCH_VERSIONS).await?;
    let Some(g) = response.groups.into_iter().next() else {
        anyhow::bail!("OffsetFetch answered without group '{group}'");
    };
    if g.error_code != crate::kafka_code::NONE {
        anyhow::bail!(
            "OffsetFetch of group '{group}' answered error code {}",
            g.error_code
        );
    }
    let mut offsets = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            // -1: no committed offset there (guards nothing); a partition error: not known, so hold.
            if p.error_code != crate::kafka_code::NONE {
                anyhow::bail!(
                    "OffsetFetch of group '{group}' answered error code {} for {}-{}",
                    p.error_code,
                    t.name.0,
                    p.partition_index
                );
            }
            if p.committed_offset >= 0 {
                offsets.push(CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.map(|m| m.to_string()).unwrap_or_default(),
                    commit_timestamp_ms: -1,
                });
            }
        }
    }
    Ok(offsets)
}

/// What one retention pass needs: each topic's settings and each guarded group's committed offsets, looked up
/// once per pass (locally, or from `remote` for groups another broker coordinates).
pub struct Guards<'a> {
    broker: &'a Broker,
    remote: RemoteOffsets,
    settings: RefCell<HashMap<String, Option<GuardSettings>>>,
    offsets: RefCell<HashMap<String, Vec<CommittedOffset>>>,
}

impl<'a> Guards<'a> {
    /// Guards from this broker's own coordinator only (what the metrics need: the settings).
    pub fn new(broker: &'a Broker) -> Self {
        Guards::with_remote(broker, RemoteOffsets::new())
    }

    /// Guards that take the groups in `remote` from there ([`remote_offsets`]).
    pub fn with_remote(broker: &'a Broker, remote: RemoteOffsets) -> Self {
        Guards {
            broker,
            remote,
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

    /// The guard for one partition: keep from the lowest committed offset of its topic's guarded groups there
    /// (from the partition's start when a guarded group's coordinator could not be asked). `None` when the topic
    /// has no guard or no guarded group has an offset on this partition.
    pub fn guard_for(&self, p: &Partition) -> Option<RetentionGuard> {
        let settings = self.settings_of(p.topic())?;
        let mut offsets = self.offsets.borrow_mut();
        let keep_from = settings
            .groups
            .iter()
            .filter_map(|g| {
                let committed = match self.remote.get(g) {
                    Some(None) => return Some(p.log_start_offset()),
                    Some(Some(remote)) => remote,
                    None => offsets
                        .entry(g.clone())
                        .or_insert_with(|| self.broker.groups().committed_offsets(g)),
                };
                committed
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
