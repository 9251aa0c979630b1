//! The metadata image: the cluster's state as of one offset of the metadata log, rebuilt on every node by applying
//! committed records in order ([`MetadataImage::apply`]). It is a plain value: the controller decides against
//! one, brokers answer Metadata from one, and a snapshot is its records ([`MetadataImage::to_records`]).
//!
//! Architecture invariant: the image changes only through records. Nothing here reads a clock or does I/O, so
//! two nodes that applied the same records hold equal images.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::quota::{QuotaEntity, QuotaValue};
use crate::records::{
    AccessControlEntryRecord, BrokerEndpoint, BrokerFeature, ClientQuotaRecord, ConfigRecord,
    ConfigResourceType, FeatureLevelRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord,
    ProducerIdsRecord, RecordError, RegisterBrokerRecord, TopicRecord, UserScramCredentialRecord,
    LEADER_UNCHANGED, NO_LEADER,
};

/// A record that does not fit the image it is applied to. In a committed log this is a controller bug: the
/// node stops applying rather than diverge from its peers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{record} does not apply: {reason}")]
pub struct ImageError {
    pub record: &'static str,
    pub reason: String,
}

/// Why a snapshot could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("metadata snapshot: {0}")]
    Record(#[from] RecordError),
    #[error("metadata snapshot: {0}")]
    Image(#[from] ImageError),
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: i32,
    pub incarnation_id: Uuid,
    pub epoch: i64,
    pub listeners: Vec<BrokerEndpoint>,
    pub features: Vec<BrokerFeature>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// Registered, unfenced: may lead partitions and be in ISRs.
    pub fn is_live(&self) -> bool {
        !self.fenced
    }
    /// Live and not shutting down: may be given new leaderships and replicas.
    pub fn is_usable(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// One partition's state; the controller is its only writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    /// -1 ([`NO_LEADER`]) when offline.
    pub leader: i32,
    pub leader_recovery_state: i8,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// Eligible leader replicas (KIP-966): replicas that left the ISR while it was below `min.insync.replicas`,
    /// so they hold every committed record and may be elected once the ISR is empty.
    pub elr: Vec<i32>,
    /// Kafka's LastKnownElr: the leader the partition had when its ISR became empty (Kafka keeps only that one
    /// replica here), so a leaderless partition can recover on it after an unclean shutdown.
    pub last_known_elr: Vec<i32>,
}

impl PartitionState {
    fn check(&self) -> Result<(), String> {
        if self.replicas.is_empty() {
            return Err("a partition needs at least one replica".into());
        }
        if has_duplicates(&self.replicas) || has_duplicates(&self.isr) || has_duplicates(&self.elr)
        {
            return Err(format!(
                "replicas {:?}, ISR {:?} or ELR {:?} name a broker twice",
                self.replicas, self.isr, self.elr
            ));
        }
        if let Some(both) = self.elr.iter().find(|b| self.isr.contains(b)) {
            return Err(format!(
                "broker {both} is in both the ISR {:?} and the ELR {:?}",
                self.isr, self.elr
            ));
        }
        if let Some(stray) = self.elr.iter().find(|b| !self.replicas.contains(b)) {
            return Err(format!(
                "ELR member {stray} is not a replica ({:?})",
                self.replicas
            ));
        }
        if let Some(stray) = self.isr.iter().find(|b| !self.replicas.contains(b)) {
            return Err(format!(
                "ISR member {stray} is not a replica ({:?})",
                self.replicas
            ));
        }
        // KIP-966: the ISR may become empty (its members move to the ELR), but only a leaderless partition has
        // an empty ISR.
        if self.isr.is_empty() && self.leader != NO_LEADER {
            return Err(format!("leader {} with an empty ISR", self.leader));
        }
        if self.leader != NO_LEADER && !self.isr.contains(&self.leader) {
            return Err(format!(
                "leader {} is not in the ISR {:?}",
                self.leader, self.isr
            ));
        }
        Ok(())
    }
}

fn has_duplicates(ids: &[i32]) -> bool {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0] == w[1])
}

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionState>,
}

/// What a config applies to: a topic (by name), a broker (by id; "" = the cluster-wide broker default).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigResource {
    pub resource_type: ConfigResourceType,
    pub name: String,
}

/// A partition named by topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRef {
    pub topic_id: Uuid,
    pub topic: String,
    pub partition: i32,
}

/// The cluster's metadata as of `last_applied_offset`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataImage {
    pub cluster_id: String,
    /// The offset of the last record applied; `None` before the first.
    pub last_applied_offset: Option<u64>,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// Each topic behind an `Arc`, copied on write ([`Arc::make_mut`]): every applied entry makes a new image,
    /// and a copy of the image then shares every topic the entry does not touch (a full copy of a
    /// 100,000-partition image was tens of milliseconds per entry). An unchanged topic keeps its pointer, so a
    /// reader could skip it by `Arc::ptr_eq` (none does yet).
    pub topics: BTreeMap<Uuid, Arc<TopicImage>>,
    pub topic_ids_by_name: BTreeMap<String, Uuid>,
    pub configs: BTreeMap<ConfigResource, BTreeMap<String, String>>,
    /// The first producer id of the next block handed out.
    pub next_producer_id: i64,
    /// Finalized feature levels (e.g. metadata.version).
    pub features: BTreeMap<String, i16>,
    /// SCRAM credentials by (user, Kafka's mechanism code): what SASL/SCRAM listeners authenticate against.
    pub scram_credentials: BTreeMap<(String, i8), UserScramCredentialRecord>,
    /// ACLs by id (AccessControlEntryRecord): what the authorizer decides with.
    pub acls: BTreeMap<Uuid, AccessControlEntryRecord>,
    /// Client quotas (ClientQuotaRecord) by entity, then key: what brokers throttle with. An entity with no key
    /// left is removed.
    pub client_quotas: BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>,
}

impl MetadataImage {
    pub fn new(cluster_id: impl Into<String>) -> Self {
        MetadataImage {
            cluster_id: cluster_id.into(),
            ..Default::default()
        }
    }

    /// Applies one committed record. Records of one log entry share its offset; offsets never go backwards.
    /// Panics if the record breaks an invariant (see [`MetadataImage::try_apply`]): a committed record that does
    /// not fit is a controller bug, and applying past it would make this node's image diverge.
    pub fn apply(&mut self, offset: u64, record: &MetadataRecord) {
        if let Err(e) = self.try_apply(offset, record) {
            panic!("metadata log record at offset {offset} breaks an invariant: {e}");
        }
    }

    /// Applies one record, or leaves the image unchanged and says why it does not fit.
    pub fn try_apply(&mut self, offset: u64, record: &MetadataRecord) -> Result<(), ImageError> {
        let fail = |reason: String| ImageError {
            record: record.type_name(),
            reason,
        };
        if let Some(last) = self.last_applied_offset {
            if offset < last {
                return Err(fail(format!(
                    "offset {offset} is before the last applied {last}"
                )));
            }
        }
        self.apply_record(record).map_err(fail)?;
        self.last_applied_offset = Some(offset);
        Ok(())
    }

    /// Applies one committed batch (the records of one log entry) atomically: all of them, or, if one does not
    /// fit, none (the image is unchanged and the error says which record failed).
    pub fn try_apply_batch(
        &mut self,
        offset: u64,
        records: &[MetadataRecord],
    ) -> Result<(), ImageError> {
        let mut next = self.clone();
        for record in records {
            next.try_apply(offset, record)?;
        }
        *self = next;
        Ok(())
    }

    fn apply_record(&mut self, record: &MetadataRecord) -> Result<(), String> {
        match record {
            MetadataRecord::RegisterBroker(r) => {
                if let Some(old) = self.brokers.get(&r.broker_id) {
                    if r.broker_epoch <= old.epoch {
                        return Err(format!(
                            "broker {} epoch {} does not exceed its current epoch {}",
                            r.broker_id, r.broker_epoch, old.epoch
                        ));
                    }
                }
                self.brokers.insert(
                    r.broker_id,
                    BrokerRegistration {
                        id: r.broker_id,
                        incarnation_id: r.incarnation_id,
                        epoch: r.broker_epoch,
                        listeners: r.end_points.clone(),
                        features: r.features.clone(),
                        rack: r.rack.clone(),
                        fenced: r.fenced,
                        in_controlled_shutdown: r.in_controlled_shutdown,
                    },
                );
            }
            MetadataRecord::UnregisterBroker(r) => {
                self.broker_with_epoch(r.broker_id, r.broker_epoch)?;
                self.brokers.remove(&r.broker_id);
            }
            MetadataRecord::FenceBroker(r) => self.broker_with_epoch(r.id, r.epoch)?.fenced = true,
            MetadataRecord::UnfenceBroker(r) => {
                self.broker_with_epoch(r.id, r.epoch)?.fenced = false
            }
            MetadataRecord::BrokerRegistrationChange(r) => {
                if !(-1..=1).contains(&r.fenced) || !(0..=1).contains(&r.in_controlled_shutdown) {
                    return Err(format!(
                        "Fenced {} / InControlledShutdown {}: only -1..1 / 0..1 mean something",
                        r.fenced, r.in_controlled_shutdown
                    ));
                }
                let broker = self.broker_with_epoch(r.broker_id, r.broker_epoch)?;
                match r.fenced {
                    -1 => broker.fenced = false,
                    0 => {}
                    1 => broker.fenced = true,
                    other => {
                        return Err(format!(
                            "Fenced is {other}; only -1, 0 and 1 mean something"
                        ))
                    }
                }
                match r.in_controlled_shutdown {
                    0 => {}
                    1 => broker.in_controlled_shutdown = true,
                    other => {
                        return Err(format!(
                            "InControlledShutdown is {other}; only 0 and 1 mean something"
                        ))
                    }
                }
            }
            MetadataRecord::Topic(r) => {
                if self.topic_ids_by_name.contains_key(&r.name)
                    || self.topics.contains_key(&r.topic_id)
                {
                    return Err(format!(
                        "topic '{}' ({}) already exists",
                        r.name, r.topic_id
                    ));
                }
                self.topic_ids_by_name.insert(r.name.clone(), r.topic_id);
                self.topics.insert(
                    r.topic_id,
                    Arc::new(TopicImage {
                        name: r.name.clone(),
                        id: r.topic_id,
                        partitions: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition(r) => self.apply_partition(r)?,
            MetadataRecord::PartitionChange(r) => self.apply_partition_change(r)?,
            MetadataRecord::RemoveTopic(r) => {
                let topic = self
                    .topics
                    .remove(&r.topic_id)
                    .ok_or_else(|| format!("no topic has id {}", r.topic_id))?;
                self.topic_ids_by_name.remove(&topic.name);
                // As Kafka does on replaying RemoveTopicRecord: a topic's configs go with it.
                self.configs.remove(&ConfigResource {
                    resource_type: ConfigResourceType::Topic,
                    name: topic.name.clone(),
                });
            }
            MetadataRecord::Config(r) => self.apply_config(r)?,
            MetadataRecord::ProducerIds(r) => {
                if r.next_producer_id <= self.next_producer_id {
                    return Err(format!(
                        "next producer id {} does not exceed the current {} (blocks would overlap)",
                        r.next_producer_id, self.next_producer_id
                    ));
                }
                self.next_producer_id = r.next_producer_id;
            }
            MetadataRecord::UserScramCredential(r) => {
                if !(1..=2).contains(&r.mechanism) || r.name.is_empty() || r.iterations <= 0 {
                    return Err(format!(
                        "SCRAM credential for '{}' has mechanism {} and {} iterations",
                        r.name, r.mechanism, r.iterations
                    ));
                }
                self.scram_credentials
                    .insert((r.name.clone(), r.mechanism), r.clone());
            }
            MetadataRecord::RemoveUserScramCredential(r) => {
                if self
                    .scram_credentials
                    .remove(&(r.name.clone(), r.mechanism))
                    .is_none()
                {
                    return Err(format!(
                        "no SCRAM credential for '{}' with mechanism {} to remove",
                        r.name, r.mechanism
                    ));
                }
            }
            MetadataRecord::AccessControlEntry(r) => {
                if !acl_codes_valid(r) {
                    return Err(format!("ACL {} has invalid codes: {r:?}", r.id));
                }
                self.acls.insert(r.id, r.clone());
            }
            MetadataRecord::RemoveAccessControlEntry(r) => {
                if self.acls.remove(&r.id).is_none() {
                    return Err(format!("no ACL with id {} to remove", r.id));
                }
            }
            MetadataRecord::ClientQuota(r) => self.apply_client_quota(r)?,
            MetadataRecord::FeatureLevel(r) => {
                if r.feature_level == 0 {
                    self.features.remove(&r.name);
                } else {
                    self.features.insert(r.name.clone(), r.feature_level);
                }
            }
        }
        Ok(())
    }

    fn broker_with_epoch(
        &mut self,
        id: i32,
        epoch: i64,
    ) -> Result<&mut BrokerRegistration, String> {
        let broker = self
            .brokers
            .get_mut(&id)
            .ok_or_else(|| format!("broker {id} is not registered"))?;
        if broker.epoch != epoch {
            return Err(format!(
                "broker {id} has epoch {}, not {epoch}",
                broker.epoch
            ));
        }
        Ok(broker)
    }

    fn apply_partition(&mut self, r: &PartitionRecord) -> Result<(), String> {
        let topic = Arc::make_mut(
            self.topics
                .get_mut(&r.topic_id)
                .ok_or_else(|| format!("no topic has id {}", r.topic_id))?,
        );
        if topic.partitions.contains_key(&r.partition_id) {
            return Err(format!(
                "partition {}-{} already exists",
                topic.name, r.partition_id
            ));
        }
        if r.partition_id < 0 {
            return Err(format!("partition id {} is negative", r.partition_id));
        }
        let state = PartitionState {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            removing_replicas: r.removing_replicas.clone(),
            adding_replicas: r.adding_replicas.clone(),
            leader: r.leader,
            leader_recovery_state: r.leader_recovery_state,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            elr: r.eligible_leader_replicas.clone().unwrap_or_default(),
            last_known_elr: r.last_known_elr.clone().unwrap_or_default(),
        };
        state.check()?;
        topic.partitions.insert(r.partition_id, state);
        Ok(())
    }

    /// Kafka's `PartitionRegistration.merge`: every change bumps the partition epoch; a leader change (to a broker
    /// or to none) bumps the leader epoch.
    fn apply_partition_change(&mut self, r: &PartitionChangeRecord) -> Result<(), String> {
        let topic = Arc::make_mut(
            self.topics
                .get_mut(&r.topic_id)
                .ok_or_else(|| format!("no topic has id {}", r.topic_id))?,
        );
        let name = topic.name.clone();
        let old = topic
            .partitions
            .get_mut(&r.partition_id)
            .ok_or_else(|| format!("partition {name}-{} does not exist", r.partition_id))?;
        let mut new = old.clone();
        if let Some(isr) = &r.isr {
            new.isr = isr.clone();
        }
        if let Some(replicas) = &r.replicas {
            new.replicas = replicas.clone();
        }
        if let Some(removing) = &r.removing_replicas {
            new.removing_replicas = removing.clone();
        }
        if let Some(adding) = &r.adding_replicas {
            new.adding_replicas = adding.clone();
        }
        if r.leader_recovery_state != -1 {
            new.leader_recovery_state = r.leader_recovery_state;
        }
        if let Some(elr) = &r.eligible_leader_replicas {
            new.elr = elr.clone();
        }
        if let Some(last_known) = &r.last_known_elr {
            new.last_known_elr = last_known.clone();
        }
        if r.leader != LEADER_UNCHANGED {
            if r.leader < NO_LEADER {
                return Err(format!(
                    "leader {} is neither a broker id nor -1/-2",
                    r.leader
                ));
            }
            new.leader = r.leader;
            new.leader_epoch = old
                .leader_epoch
                .checked_add(1)
                .ok_or("leader epoch overflows i32")?;
        }
        new.partition_epoch = old
            .partition_epoch
            .checked_add(1)
            .ok_or("partition epoch overflows i32")?;
        new.check()
            .map_err(|e| format!("{name}-{}: {e}", r.partition_id))?;
        assert!(new.leader_epoch >= old.leader_epoch && new.partition_epoch > old.partition_epoch);
        *old = new;
        Ok(())
    }

    fn apply_config(&mut self, r: &ConfigRecord) -> Result<(), String> {
        let resource_type = ConfigResourceType::from_id(r.resource_type)
            .ok_or_else(|| format!("config resource type {} is unknown", r.resource_type))?;
        if resource_type == ConfigResourceType::Topic
            && !self.topic_ids_by_name.contains_key(&r.resource_name)
        {
            return Err(format!("topic '{}' does not exist", r.resource_name));
        }
        let resource = ConfigResource {
            resource_type,
            name: r.resource_name.clone(),
        };
        match &r.value {
            Some(value) => {
                self.configs
                    .entry(resource)
                    .or_default()
                    .insert(r.name.clone(), value.clone());
            }
            None => {
                if let Some(configs) = self.configs.get_mut(&resource) {
                    configs.remove(&r.name);
                    if configs.is_empty() {
                        self.configs.remove(&resource);
                    }
                }
            }
        }
        Ok(())
    }

    // ---- queries ----

    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// Registered and unfenced brokers, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_live())
    }

    /// Live brokers not in controlled shutdown: where new replicas and leaderships may go.
    pub fn usable_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_usable())
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicImage> {
        self.topic_ids_by_name
            .get(name)
            .and_then(|id| self.topic_by_id(id))
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.topics.get(id).map(Arc::as_ref)
    }

    fn partitions_where(&self, keep: impl Fn(&PartitionState) -> bool) -> Vec<PartitionRef> {
        self.topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|(_, p)| keep(p))
                    .map(|(i, _)| PartitionRef {
                        topic_id: t.id,
                        topic: t.name.clone(),
                        partition: *i,
                    })
            })
            .collect()
    }

    /// Partitions whose leader is `broker`.
    pub fn partitions_led_by(&self, broker: i32) -> Vec<PartitionRef> {
        self.partitions_where(|p| p.leader == broker)
    }

    /// Partitions with a replica on `broker`.
    pub fn partitions_hosted_on(&self, broker: i32) -> Vec<PartitionRef> {
        self.partitions_where(|p| p.replicas.contains(&broker))
    }

    /// Partitions with no leader.
    pub fn offline_partitions(&self) -> Vec<PartitionRef> {
        self.partitions_where(|p| p.leader == NO_LEADER)
    }

    pub fn partition(&self, topic_id: &Uuid, partition: i32) -> Option<&PartitionState> {
        self.topics.get(topic_id)?.partitions.get(&partition)
    }

    /// A user's SCRAM credential for a mechanism (Kafka's code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: i8,
    ) -> Option<&UserScramCredentialRecord> {
        self.scram_credentials.get(&(user.to_string(), mechanism))
    }

    /// Applies a ClientQuotaRecord as Kafka's `ClientQuotaControlManager.replay` does: set the key, or remove it
    /// (removing a key the entity does not hold changes nothing) and drop an entity left empty.
    fn apply_client_quota(&mut self, r: &ClientQuotaRecord) -> Result<(), String> {
        let mut entity = QuotaEntity::new();
        for part in &r.entity {
            if entity
                .insert(part.entity_type.clone(), part.entity_name.clone())
                .is_some()
            {
                return Err(format!("entity type {} appears twice", part.entity_type));
            }
        }
        if !crate::quota::record_valid(&entity, &r.key) {
            return Err(format!(
                "quota key {} is not valid for entity {entity:?}",
                r.key
            ));
        }
        if r.remove {
            if let Some(keys) = self.client_quotas.get_mut(&entity) {
                keys.remove(&r.key);
                if keys.is_empty() {
                    self.client_quotas.remove(&entity);
                }
            }
        } else {
            if !r.value.is_finite() || r.value <= 0.0 {
                return Err(format!("quota {} has value {}", r.key, r.value));
            }
            self.client_quotas
                .entry(entity)
                .or_default()
                .insert(r.key.clone(), QuotaValue(r.value));
        }
        Ok(())
    }

    /// The quota `key` set on exactly `entity`, if any.
    pub fn client_quota(&self, entity: &QuotaEntity, key: &str) -> Option<f64> {
        self.client_quotas
            .get(entity)
            .and_then(|keys| keys.get(key))
            .map(|v| v.0)
    }

    /// A stored ACL equal to `acl` but for its id (Kafka keeps one copy of each binding).
    pub fn acl_like(&self, acl: &AccessControlEntryRecord) -> Option<&AccessControlEntryRecord> {
        self.acls.values().find(|a| {
            a.resource_type == acl.resource_type
                && a.resource_name == acl.resource_name
                && a.pattern_type == acl.pattern_type
                && a.principal == acl.principal
                && a.host == acl.host
                && a.operation == acl.operation
                && a.permission_type == acl.permission_type
        })
    }

    /// The epoch a broker registering now gets: above every epoch in use and above every offset applied, so it
    /// only grows, survives snapshots, and is the same on every node.
    pub fn next_broker_epoch(&self) -> i64 {
        let max_epoch = self.brokers.values().map(|b| b.epoch).max().unwrap_or(0);
        let offset = self
            .last_applied_offset
            .map_or(0, |o| i64::try_from(o).unwrap_or(i64::MAX));
        max_epoch.max(offset).saturating_add(1)
    }

    // ---- snapshots ----

    /// Records that rebuild this image when applied to an empty one with the same cluster id.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::new();
        for (name, level) in &self.features {
            out.push(MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: name.clone(),
                feature_level: *level,
            }));
        }
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: b.id,
                is_migrating_zk_broker: false,
                incarnation_id: b.incarnation_id,
                broker_epoch: b.epoch,
                end_points: b.listeners.clone(),
                features: b.features.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                log_dirs: Vec::new(),
            }));
        }
        for t in self.topics.values() {
            out.push(MetadataRecord::Topic(TopicRecord {
                name: t.name.clone(),
                topic_id: t.id,
            }));
            for (i, p) in &t.partitions {
                out.push(MetadataRecord::Partition(PartitionRecord {
                    partition_id: *i,
                    topic_id: t.id,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                    adding_replicas: p.adding_replicas.clone(),
                    leader: p.leader,
                    leader_recovery_state: p.leader_recovery_state,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    directories: Vec::new(),
                    eligible_leader_replicas: (!p.elr.is_empty()).then(|| p.elr.clone()),
                    last_known_elr: (!p.last_known_elr.is_empty())
                        .then(|| p.last_known_elr.clone()),
                }));
            }
        }
        for (resource, configs) in &self.configs {
            for (name, value) in configs {
                out.push(MetadataRecord::Config(ConfigRecord {
                    resource_type: resource.resource_type.id(),
                    resource_name: resource.name.clone(),
                    name: name.clone(),
                    value: Some(value.clone()),
                }));
            }
        }
        for c in self.scram_credentials.values() {
            out.push(MetadataRecord::UserScramCredential(c.clone()));
        }
        for a in self.acls.values() {
            out.push(MetadataRecord::AccessControlEntry(a.clone()));
        }
        for (entity, keys) in &self.client_quotas {
            for (key, value) in keys {
                out.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: entity
                        .iter()
                        .map(|(t, n)| crate::records::QuotaEntityPart {
                            entity_type: t.clone(),
                            entity_name: n.clone(),
                        })
                        .collect(),
                    key: key.clone(),
                    value: value.0,
                    remove: false,
                }));
            }
        }
        if self.next_producer_id > 0 {
            out.push(MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id,
            }));
        }
        out
    }

    /// A snapshot: `uvarint(len+1) cluster id | u64 BE (last applied offset + 1, 0 = none) | u32 BE record count |
    /// per record: u32 BE length, framed record`.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let records = self.to_records();
        let mut out = Vec::new();
        let id = self.cluster_id.as_bytes();
        let mut len = id.len() as u64 + 1;
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(id);
        out.extend_from_slice(&self.last_applied_offset.map_or(0, |o| o + 1).to_be_bytes());
        out.extend_from_slice(
            &u32::try_from(records.len())
                .expect("fewer than 2^32 records")
                .to_be_bytes(),
        );
        for r in records {
            let bytes = r.encode();
            out.extend_from_slice(
                &u32::try_from(bytes.len())
                    .expect("a record under 4 GiB")
                    .to_be_bytes(),
            );
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Reads a snapshot written by [`MetadataImage::encode_snapshot`]; hostile bytes give an error, never a panic.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<MetadataImage, SnapshotError> {
        let mut rest = bytes;
        let truncated = |field: &'static str, needed: usize, left: usize| {
            SnapshotError::Record(RecordError::Truncated {
                field,
                needed,
                left,
            })
        };
        let mut take = |n: usize, field: &'static str| -> Result<&[u8], SnapshotError> {
            if rest.len() < n {
                return Err(truncated(field, n, rest.len()));
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let mut id_len: u64 = 0;
        for i in 0..5 {
            let b = take(1, "snapshot cluster id length")?[0];
            id_len |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                break;
            }
            if i == 4 {
                return Err(SnapshotError::Record(RecordError::Malformed(
                    "snapshot cluster id length is not a varint".into(),
                )));
            }
        }
        let id_len = usize::try_from(id_len.saturating_sub(1)).unwrap_or(usize::MAX);
        let cluster_id = std::str::from_utf8(take(id_len, "snapshot cluster id")?)
            .map_err(|e| {
                SnapshotError::Record(RecordError::Malformed(format!("snapshot cluster id: {e}")))
            })?
            .to_owned();
        let mut u64_bytes = [0u8; 8];
        u64_bytes.copy_from_slice(take(8, "snapshot offset")?);
        let last_applied_offset = u64::from_be_bytes(u64_bytes).checked_sub(1);
        let mut u32_bytes = [0u8; 4];
        u32_bytes.copy_from_slice(take(4, "snapshot record count")?);
        let count = u32::from_be_bytes(u32_bytes);
        let mut image = MetadataImage::new(cluster_id);
        let apply_offset = last_applied_offset.unwrap_or(0);
        for _ in 0..count {
            u32_bytes.copy_from_slice(take(4, "snapshot record length")?);
            let len = u32::from_be_bytes(u32_bytes) as usize;
            let record = MetadataRecord::decode(take(len, "snapshot record")?)?;
            image.try_apply(apply_offset, &record)?;
        }
        if !rest.is_empty() {
            return Err(SnapshotError::Record(RecordError::TrailingBytes {
                record: "snapshot",
                count: rest.len(),
            }));
        }
        image.last_applied_offset = last_applied_offset;
        Ok(image)
    }
}

#[cfg(test)]
mod tests;

/// Whether an ACL's codes are ones a stored ACL may have (Kafka's `AclControlManager.validateNewAcl`): a concrete
/// resource type (TOPIC..USER), LITERAL or PREFIXED, a concrete operation (ALL..CREATE_TOKENS), DENY or ALLOW, a
/// non-empty resource name.
pub fn acl_codes_valid(r: &AccessControlEntryRecord) -> bool {
    (2..=7).contains(&r.resource_type)
        && (3..=4).contains(&r.pattern_type)
        && (2..=14).contains(&r.operation)
        && (2..=3).contains(&r.permission_type)
        && !r.resource_name.is_empty()
}
