//! Kafka's metadata records (apache/kafka `metadata/src/main/resources/common/metadata/*.json`) and their framing
//! (`MetadataRecordSerde`): a record is `frame version (unsigned varint, 1) | api key (unsigned varint) |
//! version (unsigned varint) | message`, the message in Kafka's flexible encoding (compact strings and arrays,
//! a tagged-field section closing every struct). docs/metadata-log.md describes the format.
//!
//! Each record is one opaque value of the quorum's payload. Decoding never panics and never allocates more than
//! the input justifies: every declared length and count is checked against the bytes left first.

mod wire;

use uuid::Uuid;

use wire::{Reader, Writer};

/// The only frame version Kafka writes and reads (`AbstractApiMessageSerde.DEFAULT_FRAME_VERSION`).
pub const FRAME_VERSION: u32 = 1;

/// Why bytes are not a metadata record. A record that fails to decode means the log is corrupt or was written by
/// a newer Annal: stop applying and report it rather than skip it, or the image would silently diverge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("metadata record truncated: {field} needs {needed} byte(s), {left} left")]
    Truncated {
        field: &'static str,
        needed: usize,
        left: usize,
    },
    #[error("metadata record frame version {0} is unknown (only 1 is supported; 0 was KRaft's 2.8 preview)")]
    UnknownFrameVersion(u32),
    #[error("metadata record type (api key) {0} is unknown to this Annal")]
    UnknownRecordType(u32),
    #[error("{record} version {version} is not supported (this Annal reads versions {min}-{max})")]
    UnsupportedVersion {
        record: &'static str,
        version: u32,
        min: u16,
        max: u16,
    },
    #[error("metadata record malformed: {0}")]
    Malformed(String),
    #[error("{count} byte(s) of garbage after a {record}")]
    TrailingBytes { record: &'static str, count: usize },
}

/// One listener of a broker (`RegisterBrokerRecord.EndPoints`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's `SecurityProtocol` id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL.
    pub security_protocol: i16,
}

/// A feature range a broker supports (`RegisterBrokerRecord.Features`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerFeature {
    pub name: String,
    pub min_supported_version: i16,
    pub max_supported_version: i16,
}

/// api key 0, versions 0-3 (written as 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBrokerRecord {
    pub broker_id: i32,
    pub is_migrating_zk_broker: bool,
    pub incarnation_id: Uuid,
    pub broker_epoch: i64,
    pub end_points: Vec<BrokerEndpoint>,
    pub features: Vec<BrokerFeature>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// Tag 0 (v3+).
    pub log_dirs: Vec<Uuid>,
}

/// api key 1, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnregisterBrokerRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
}

/// api key 2, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    pub name: String,
    pub topic_id: Uuid,
}

/// api key 3, versions 0-2: written as 0 unless it carries directories or eligible leader replicas (then 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub leader: i32,
    /// Tag 0: 1 if recovering from an unclean election, else 0.
    pub leader_recovery_state: i8,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// v1+.
    pub directories: Vec<Uuid>,
    /// Tag 1 (v2+).
    pub eligible_leader_replicas: Option<Vec<i32>>,
    /// Tag 2 (v2+).
    pub last_known_elr: Option<Vec<i32>>,
}

impl PartitionRecord {
    /// A new partition at leader epoch and partition epoch 0, nothing being reassigned.
    pub fn new(
        topic_id: Uuid,
        partition_id: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
    ) -> Self {
        PartitionRecord {
            partition_id,
            topic_id,
            replicas,
            isr,
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
        }
    }
}

/// `PartitionChangeRecord.Leader` when the leader did not change.
pub const LEADER_UNCHANGED: i32 = -2;
/// A partition's leader when it has none (offline).
pub const NO_LEADER: i32 = -1;

/// api key 5, versions 0-2: written as 0 unless it carries directories or eligible leader replicas (then 2).
/// Every field but the ids is "unchanged" by default (null, or -2 for the leader, -1 for the recovery state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChangeRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    /// Tag 0.
    pub isr: Option<Vec<i32>>,
    /// Tag 1: -1 no leader now, -2 unchanged ([`LEADER_UNCHANGED`]), else the new leader.
    pub leader: i32,
    /// Tag 2.
    pub replicas: Option<Vec<i32>>,
    /// Tag 3.
    pub removing_replicas: Option<Vec<i32>>,
    /// Tag 4.
    pub adding_replicas: Option<Vec<i32>>,
    /// Tag 5: -1 unchanged.
    pub leader_recovery_state: i8,
    /// Tag 8 (v1+).
    pub directories: Option<Vec<Uuid>>,
    /// Tag 6 (v2+).
    pub eligible_leader_replicas: Option<Vec<i32>>,
    /// Tag 7 (v2+).
    pub last_known_elr: Option<Vec<i32>>,
}

impl PartitionChangeRecord {
    /// A change that changes nothing yet; set the fields that change.
    pub fn new(topic_id: Uuid, partition_id: i32) -> Self {
        PartitionChangeRecord {
            partition_id,
            topic_id,
            isr: None,
            leader: LEADER_UNCHANGED,
            replicas: None,
            removing_replicas: None,
            adding_replicas: None,
            leader_recovery_state: -1,
            directories: None,
            eligible_leader_replicas: None,
            last_known_elr: None,
        }
    }
}

/// Kafka's `ConfigResource.Type` ids, as `ConfigRecord.ResourceType` stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResourceType {
    Topic,
    Broker,
    BrokerLogger,
    ClientMetrics,
    Group,
}

impl ConfigResourceType {
    pub fn id(self) -> i8 {
        match self {
            ConfigResourceType::Topic => 2,
            ConfigResourceType::Broker => 4,
            ConfigResourceType::BrokerLogger => 8,
            ConfigResourceType::ClientMetrics => 16,
            ConfigResourceType::Group => 32,
        }
    }
    pub fn from_id(id: i8) -> Option<Self> {
        Some(match id {
            2 => ConfigResourceType::Topic,
            4 => ConfigResourceType::Broker,
            8 => ConfigResourceType::BrokerLogger,
            16 => ConfigResourceType::ClientMetrics,
            32 => ConfigResourceType::Group,
            _ => return None,
        })
    }
}

/// api key 4, version 0. `resource_type` is Kafka's id (see [`ConfigResourceType`]); a broker resource named ""
/// is the cluster-wide default. A null value deletes the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRecord {
    pub resource_type: i8,
    pub resource_name: String,
    pub name: String,
    pub value: Option<String>,
}

/// api key 7, version 0: the broker is fenced and leaves every ISR it can leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceBrokerRecord {
    pub id: i32,
    pub epoch: i64,
}

/// api key 8, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfenceBrokerRecord {
    pub id: i32,
    pub epoch: i64,
}

/// api key 9, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveTopicRecord {
    pub topic_id: Uuid,
}

/// api key 12, version 0 (Kafka pins it at 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureLevelRecord {
    pub name: String,
    pub feature_level: i16,
}

/// api key 15, version 0: the block `[previous next id, next_producer_id)` went to `broker_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerIdsRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub next_producer_id: i64,
}

/// api key 17, versions 0-2 (written as 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationChangeRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    /// Tag 0: -1 unfenced, 0 no change, 1 fenced.
    pub fenced: i8,
    /// Tag 1 (v1+): 0 no change, 1 in controlled shutdown.
    pub in_controlled_shutdown: i8,
    /// Tag 2 (v2+).
    pub log_dirs: Vec<Uuid>,
}

/// api key 11, version 0: a user's SCRAM credential for one mechanism (Kafka's `ScramMechanism` code: 1
/// SCRAM-SHA-256, 2 SCRAM-SHA-512), as Kafka stores it: never the password.
#[derive(Clone, PartialEq, Eq)]
pub struct UserScramCredentialRecord {
    pub name: String,
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for UserScramCredentialRecord {
    // Keys stay out of logs and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserScramCredentialRecord")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// api key 22, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveUserScramCredentialRecord {
    pub name: String,
    pub mechanism: i8,
}

/// api key 18, version 0: one ACL (Kafka's `StandardAcl` with its id). Codes are Kafka's: `ResourceType` (2 TOPIC,
/// 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID, 6 DELEGATION_TOKEN, 7 USER), `PatternType` (3 LITERAL, 4 PREFIXED),
/// `AclOperation` (2 ALL .. 14 CREATE_TOKENS), `AclPermissionType` (2 DENY, 3 ALLOW). The principal is
/// `Type:name` (`User:alice`, `User:*`), the host an IP address or `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessControlEntryRecord {
    pub id: Uuid,
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// api key 19, version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveAccessControlEntryRecord {
    pub id: Uuid,
}

/// One part of a client quota entity (`ClientQuotaRecord.Entity`): Kafka's entity types are `user`,
/// `client-id` and `ip`; a `None` name is the type's default entity (`<default>` in `kafka-configs`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntityPart {
    pub entity_type: String,
    pub entity_name: Option<String>,
}

/// api key 14, version 0: sets (or, with `remove`, removes) one quota key of one entity. The value is Kafka's
/// float64, compared bit for bit so that records and images stay `Eq`.
#[derive(Debug, Clone)]
pub struct ClientQuotaRecord {
    pub entity: Vec<QuotaEntityPart>,
    pub key: String,
    pub value: f64,
    pub remove: bool,
}

impl PartialEq for ClientQuotaRecord {
    fn eq(&self, other: &Self) -> bool {
        self.entity == other.entity
            && self.key == other.key
            && self.value.to_bits() == other.value.to_bits()
            && self.remove == other.remove
    }
}
impl Eq for ClientQuotaRecord {}

/// One metadata record of a kind Annal understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    RegisterBroker(RegisterBrokerRecord),
    UnregisterBroker(UnregisterBrokerRecord),
    Topic(TopicRecord),
    Partition(PartitionRecord),
    Config(ConfigRecord),
    PartitionChange(PartitionChangeRecord),
    FenceBroker(FenceBrokerRecord),
    UnfenceBroker(UnfenceBrokerRecord),
    RemoveTopic(RemoveTopicRecord),
    FeatureLevel(FeatureLevelRecord),
    ProducerIds(ProducerIdsRecord),
    BrokerRegistrationChange(BrokerRegistrationChangeRecord),
    UserScramCredential(UserScramCredentialRecord),
    RemoveUserScramCredential(RemoveUserScramCredentialRecord),
    AccessControlEntry(AccessControlEntryRecord),
    RemoveAccessControlEntry(RemoveAccessControlEntryRecord),
    ClientQuota(ClientQuotaRecord),
}

/// (name, api key, lowest and highest version read).
const REGISTER_BROKER: (&str, u32, u16, u16) = ("RegisterBrokerRecord", 0, 0, 3);
const UNREGISTER_BROKER: (&str, u32, u16, u16) = ("UnregisterBrokerRecord", 1, 0, 0);
const TOPIC: (&str, u32, u16, u16) = ("TopicRecord", 2, 0, 0);
const PARTITION: (&str, u32, u16, u16) = ("PartitionRecord", 3, 0, 2);
const CONFIG: (&str, u32, u16, u16) = ("ConfigRecord", 4, 0, 0);
const PARTITION_CHANGE: (&str, u32, u16, u16) = ("PartitionChangeRecord", 5, 0, 2);
const FENCE_BROKER: (&str, u32, u16, u16) = ("FenceBrokerRecord", 7, 0, 0);
const UNFENCE_BROKER: (&str, u32, u16, u16) = ("UnfenceBrokerRecord", 8, 0, 0);
const REMOVE_TOPIC: (&str, u32, u16, u16) = ("RemoveTopicRecord", 9, 0, 0);
const FEATURE_LEVEL: (&str, u32, u16, u16) = ("FeatureLevelRecord", 12, 0, 0);
const PRODUCER_IDS: (&str, u32, u16, u16) = ("ProducerIdsRecord", 15, 0, 0);
const BROKER_REGISTRATION_CHANGE: (&str, u32, u16, u16) =
    ("BrokerRegistrationChangeRecord", 17, 0, 2);
const USER_SCRAM_CREDENTIAL: (&str, u32, u16, u16) = ("UserScramCredentialRecord", 11, 0, 0);
const REMOVE_USER_SCRAM_CREDENTIAL: (&str, u32, u16, u16) =
    ("RemoveUserScramCredentialRecord", 22, 0, 0);
const CLIENT_QUOTA: (&str, u32, u16, u16) = ("ClientQuotaRecord", 14, 0, 0);
const ACCESS_CONTROL_ENTRY: (&str, u32, u16, u16) = ("AccessControlEntryRecord", 18, 0, 0);
const REMOVE_ACCESS_CONTROL_ENTRY: (&str, u32, u16, u16) =
    ("RemoveAccessControlEntryRecord", 19, 0, 0);

impl MetadataRecord {
    /// Kafka's record type id (`MetadataRecordType`).
    pub fn api_key(&self) -> u16 {
        self.kind().1 as u16
    }

    /// The record type's Kafka name, e.g. "TopicRecord".
    pub fn type_name(&self) -> &'static str {
        self.kind().0
    }

    fn kind(&self) -> (&'static str, u32, u16, u16) {
        match self {
            MetadataRecord::RegisterBroker(_) => REGISTER_BROKER,
            MetadataRecord::UnregisterBroker(_) => UNREGISTER_BROKER,
            MetadataRecord::Topic(_) => TOPIC,
            MetadataRecord::Partition(_) => PARTITION,
            MetadataRecord::Config(_) => CONFIG,
            MetadataRecord::PartitionChange(_) => PARTITION_CHANGE,
            MetadataRecord::FenceBroker(_) => FENCE_BROKER,
            MetadataRecord::UnfenceBroker(_) => UNFENCE_BROKER,
            MetadataRecord::RemoveTopic(_) => REMOVE_TOPIC,
            MetadataRecord::FeatureLevel(_) => FEATURE_LEVEL,
            MetadataRecord::ProducerIds(_) => PRODUCER_IDS,
            MetadataRecord::BrokerRegistrationChange(_) => BROKER_REGISTRATION_CHANGE,
            MetadataRecord::UserScramCredential(_) => USER_SCRAM_CREDENTIAL,
            MetadataRecord::RemoveUserScramCredential(_) => REMOVE_USER_SCRAM_CREDENTIAL,
            MetadataRecord::AccessControlEntry(_) => ACCESS_CONTROL_ENTRY,
            MetadataRecord::RemoveAccessControlEntry(_) => REMOVE_ACCESS_CONTROL_ENTRY,
            MetadataRecord::ClientQuota(_) => CLIENT_QUOTA,
        }
    }

    /// The version this record is written at: the lowest that carries every field it sets.
    pub fn version(&self) -> u16 {
        match self {
            MetadataRecord::RegisterBroker(_) => 3,
            MetadataRecord::Partition(p) => {
                let needs_v2 = !p.directories.is_empty()
                    || p.eligible_leader_replicas.is_some()
                    || p.last_known_elr.is_some();
                if needs_v2 {
                    2
                } else {
                    0
                }
            }
            MetadataRecord::PartitionChange(c) => {
                let needs_v2 = c.directories.is_some()
                    || c.eligible_leader_replicas.is_some()
                    || c.last_known_elr.is_some();
                if needs_v2 {
                    2
                } else {
                    0
                }
            }
            MetadataRecord::BrokerRegistrationChange(_) => 2,
            _ => 0,
        }
    }

    /// The framed record, as Kafka's `MetadataRecordSerde` writes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.uvarint(FRAME_VERSION);
        w.uvarint(u32::from(self.api_key()));
        let version = self.version();
        w.uvarint(u32::from(version));
        match self {
            MetadataRecord::RegisterBroker(r) => encode_register_broker(&mut w, r),
            MetadataRecord::UnregisterBroker(r) => {
                w.i32(r.broker_id);
                w.i64(r.broker_epoch);
                w.tagged_fields(&[]);
            }
            MetadataRecord::Topic(r) => {
                w.string(&r.name);
                w.uuid(&r.topic_id);
                w.tagged_fields(&[]);
            }
            MetadataRecord::Partition(r) => encode_partition(&mut w, r, version),
            MetadataRecord::Config(r) => {
                w.i8(r.resource_type);
                w.string(&r.resource_name);
                w.string(&r.name);
                w.nullable_string(r.value.as_deref());
                w.tagged_fields(&[]);
            }
            MetadataRecord::PartitionChange(r) => encode_partition_change(&mut w, r, version),
            MetadataRecord::FenceBroker(FenceBrokerRecord { id, epoch })
            | MetadataRecord::UnfenceBroker(UnfenceBrokerRecord { id, epoch }) => {
                w.i32(*id);
                w.i64(*epoch);
                w.tagged_fields(&[]);
            }
            MetadataRecord::RemoveTopic(r) => {
                w.uuid(&r.topic_id);
                w.tagged_fields(&[]);
            }
            MetadataRecord::FeatureLevel(r) => {
                w.string(&r.name);
                w.i16(r.feature_level);
                w.tagged_fields(&[]);
            }
            MetadataRecord::ProducerIds(r) => {
                w.i32(r.broker_id);
                w.i64(r.broker_epoch);
                w.i64(r.next_producer_id);
                w.tagged_fields(&[]);
            }
            MetadataRecord::BrokerRegistrationChange(r) => {
                w.i32(r.broker_id);
                w.i64(r.broker_epoch);
                let mut tags = Vec::new();
                if r.fenced != 0 {
                    tags.push((0, vec![r.fenced as u8]));
                }
                if r.in_controlled_shutdown != 0 {
                    tags.push((1, vec![r.in_controlled_shutdown as u8]));
                }
                if !r.log_dirs.is_empty() {
                    tags.push((2, Writer::encode_with(|t| t.uuid_array(&r.log_dirs))));
                }
                w.tagged_fields(&tags);
            }
            MetadataRecord::UserScramCredential(r) => {
                w.string(&r.name);
                w.i8(r.mechanism);
                w.bytes(&r.salt);
                w.bytes(&r.stored_key);
                w.bytes(&r.server_key);
                w.i32(r.iterations);
                w.tagged_fields(&[]);
            }
            MetadataRecord::RemoveUserScramCredential(r) => {
                w.string(&r.name);
                w.i8(r.mechanism);
                w.tagged_fields(&[]);
            }
            MetadataRecord::AccessControlEntry(r) => {
                w.uuid(&r.id);
                w.i8(r.resource_type);
                w.string(&r.resource_name);
                w.i8(r.pattern_type);
                w.string(&r.principal);
                w.string(&r.host);
                w.i8(r.operation);
                w.i8(r.permission_type);
                w.tagged_fields(&[]);
            }
            MetadataRecord::RemoveAccessControlEntry(r) => {
                w.uuid(&r.id);
                w.tagged_fields(&[]);
            }
            MetadataRecord::ClientQuota(r) => {
                w.array(&r.entity, |w, e| {
                    w.string(&e.entity_type);
                    w.nullable_string(e.entity_name.as_deref());
                    w.tagged_fields(&[]);
                });
                w.string(&r.key);
                w.f64(r.value);
                w.bool(r.remove);
                w.tagged_fields(&[]);
            }
        }
        w.bytes
    }

    /// Decodes one framed record; the whole input must be that record.
    pub fn decode(bytes: &[u8]) -> Result<MetadataRecord, RecordError> {
        let mut r = Reader::new(bytes);
        let frame = r.uvarint("frame version")?;
        if frame != FRAME_VERSION {
            return Err(RecordError::UnknownFrameVersion(frame));
        }
        let api_key = r.uvarint("api key")?;
        let version = r.uvarint("version")?;
        let kind = match api_key {
            0 => REGISTER_BROKER,
            1 => UNREGISTER_BROKER,
            2 => TOPIC,
            3 => PARTITION,
            4 => CONFIG,
            5 => PARTITION_CHANGE,
            7 => FENCE_BROKER,
            8 => UNFENCE_BROKER,
            9 => REMOVE_TOPIC,
            12 => FEATURE_LEVEL,
            15 => PRODUCER_IDS,
            17 => BROKER_REGISTRATION_CHANGE,
            11 => USER_SCRAM_CREDENTIAL,
            22 => REMOVE_USER_SCRAM_CREDENTIAL,
            18 => ACCESS_CONTROL_ENTRY,
            19 => REMOVE_ACCESS_CONTROL_ENTRY,
            14 => CLIENT_QUOTA,
            other => return Err(RecordError::UnknownRecordType(other)),
        };
        let (record_name, _, min, max) = kind;
        if version < u32::from(min) || version > u32::from(max) {
            return Err(RecordError::UnsupportedVersion {
                record: record_name,
                version,
                min,
                max,
            });
        }
        let v = version as u16;
        let record = match api_key {
            0 => MetadataRecord::RegisterBroker(decode_register_broker(&mut r, v)?),
            1 => {
                let broker_id = r.i32("BrokerId")?;
                let broker_epoch = r.i64("BrokerEpoch")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::UnregisterBroker(UnregisterBrokerRecord {
                    broker_id,
                    broker_epoch,
                })
            }
            2 => {
                let name = r.string("Name")?;
                let topic_id = r.uuid("TopicId")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::Topic(TopicRecord { name, topic_id })
            }
            3 => MetadataRecord::Partition(decode_partition(&mut r, v)?),
            4 => {
                let resource_type = r.i8("ResourceType")?;
                let resource_name = r.string("ResourceName")?;
                let name = r.string("Name")?;
                let value = r.nullable_string("Value")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::Config(ConfigRecord {
                    resource_type,
                    resource_name,
                    name,
                    value,
                })
            }
            5 => MetadataRecord::PartitionChange(decode_partition_change(&mut r, v)?),
            7 | 8 => {
                let id = r.i32("Id")?;
                let epoch = r.i64("Epoch")?;
                r.tagged_fields(|_, _| Ok(false))?;
                if api_key == 7 {
                    MetadataRecord::FenceBroker(FenceBrokerRecord { id, epoch })
                } else {
                    MetadataRecord::UnfenceBroker(UnfenceBrokerRecord { id, epoch })
                }
            }
            9 => {
                let topic_id = r.uuid("TopicId")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id })
            }
            12 => {
                let name = r.string("Name")?;
                let feature_level = r.i16("FeatureLevel")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::FeatureLevel(FeatureLevelRecord {
                    name,
                    feature_level,
                })
            }
            15 => {
                let broker_id = r.i32("BrokerId")?;
                let broker_epoch = r.i64("BrokerEpoch")?;
                let next_producer_id = r.i64("NextProducerId")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::ProducerIds(ProducerIdsRecord {
                    broker_id,
                    broker_epoch,
                    next_producer_id,
                })
            }
            17 => MetadataRecord::BrokerRegistrationChange(decode_broker_registration_change(
                &mut r, v,
            )?),
            11 => {
                let name = r.string("Name")?;
                let mechanism = r.i8("Mechanism")?;
                let salt = r.bytes("Salt")?;
                let stored_key = r.bytes("StoredKey")?;
                let server_key = r.bytes("ServerKey")?;
                let iterations = r.i32("Iterations")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                    name,
                    mechanism,
                    salt,
                    stored_key,
                    server_key,
                    iterations,
                })
            }
            22 => {
                let name = r.string("Name")?;
                let mechanism = r.i8("Mechanism")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
                    name,
                    mechanism,
                })
            }
            18 => {
                let id = r.uuid("Id")?;
                let resource_type = r.i8("ResourceType")?;
                let resource_name = r.string("ResourceName")?;
                let pattern_type = r.i8("PatternType")?;
                let principal = r.string("Principal")?;
                let host = r.string("Host")?;
                let operation = r.i8("Operation")?;
                let permission_type = r.i8("PermissionType")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
                    id,
                    resource_type,
                    resource_name,
                    pattern_type,
                    principal,
                    host,
                    operation,
                    permission_type,
                })
            }
            19 => {
                let id = r.uuid("Id")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id })
            }
            14 => {
                // An entity part is at least a type length, a name length and a tag count.
                let entity = r.array(3, "Entity", |r| {
                    let entity_type = r.string("EntityType")?;
                    let entity_name = r.nullable_string("EntityName")?;
                    r.tagged_fields(|_, _| Ok(false))?;
                    Ok(QuotaEntityPart {
                        entity_type,
                        entity_name,
                    })
                })?;
                let key = r.string("Key")?;
                let value = r.f64("Value")?;
                let remove = r.bool("Remove")?;
                r.tagged_fields(|_, _| Ok(false))?;
                MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity,
                    key,
                    value,
                    remove,
                })
            }
            _ => unreachable!("api key {api_key} was matched above"),
        };
        if r.remaining() > 0 {
            return Err(RecordError::TrailingBytes {
                record: record_name,
                count: r.remaining(),
            });
        }
        Ok(record)
    }
}

/// A quorum payload (one value per record) for a batch of records.
pub fn encode_batch(records: &[MetadataRecord]) -> Vec<Vec<u8>> {
    records.iter().map(MetadataRecord::encode).collect()
}

/// The records of a quorum payload; the first value that is not a record fails the whole batch.
pub fn decode_batch(values: &[Vec<u8>]) -> Result<Vec<MetadataRecord>, RecordError> {
    values.iter().map(|v| MetadataRecord::decode(v)).collect()
}

fn encode_register_broker(w: &mut Writer, r: &RegisterBrokerRecord) {
    w.i32(r.broker_id);
    w.bool(r.is_migrating_zk_broker);
    w.uuid(&r.incarnation_id);
    w.i64(r.broker_epoch);
    w.array(&r.end_points, |w, e| {
        w.string(&e.name);
        w.string(&e.host);
        w.u16(e.port);
        w.i16(e.security_protocol);
        w.tagged_fields(&[]);
    });
    w.array(&r.features, |w, f| {
        w.string(&f.name);
        w.i16(f.min_supported_version);
        w.i16(f.max_supported_version);
        w.tagged_fields(&[]);
    });
    w.nullable_string(r.rack.as_deref());
    w.bool(r.fenced);
    w.bool(r.in_controlled_shutdown);
    let mut tags = Vec::new();
    if !r.log_dirs.is_empty() {
        tags.push((0, Writer::encode_with(|t| t.uuid_array(&r.log_dirs))));
    }
    w.tagged_fields(&tags);
}

fn decode_register_broker(r: &mut Reader<'_>, v: u16) -> Result<RegisterBrokerRecord, RecordError> {
    let broker_id = r.i32("BrokerId")?;
    let is_migrating_zk_broker = if v >= 2 {
        r.bool("IsMigratingZkBroker")?
    } else {
        false
    };
    let incarnation_id = r.uuid("IncarnationId")?;
    let broker_epoch = r.i64("BrokerEpoch")?;
    // An endpoint takes at least 7 bytes: two empty strings, port, protocol, empty tag section.
    let end_points = r.array(7, "EndPoints", |r| {
        let e = BrokerEndpoint {
            name: r.string("EndPoints.Name")?,
            host: r.string("EndPoints.Host")?,
            port: r.u16("EndPoints.Port")?,
            security_protocol: r.i16("EndPoints.SecurityProtocol")?,
        };
        r.tagged_fields(|_, _| Ok(false))?;
        Ok(e)
    })?;
    let features = r.array(6, "Features", |r| {
        let f = BrokerFeature {
            name: r.string("Features.Name")?,
            min_supported_version: r.i16("Features.MinSupportedVersion")?,
            max_supported_version: r.i16("Features.MaxSupportedVersion")?,
        };
        r.tagged_fields(|_, _| Ok(false))?;
        Ok(f)
    })?;
    let rack = r.nullable_string("Rack")?;
    let fenced = r.bool("Fenced")?;
    let in_controlled_shutdown = if v >= 1 {
        r.bool("InControlledShutdown")?
    } else {
        false
    };
    let mut log_dirs = Vec::new();
    r.tagged_fields(|tag, t| match tag {
        0 if v >= 3 => {
            log_dirs = t.uuid_array("LogDirs")?;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    Ok(RegisterBrokerRecord {
        broker_id,
        is_migrating_zk_broker,
        incarnation_id,
        broker_epoch,
        end_points,
        features,
        rack,
        fenced,
        in_controlled_shutdown,
        log_dirs,
    })
}

fn encode_partition(w: &mut Writer, r: &PartitionRecord, version: u16) {
    w.i32(r.partition_id);
    w.uuid(&r.topic_id);
    w.i32_array(&r.replicas);
    w.i32_array(&r.isr);
    w.i32_array(&r.removing_replicas);
    w.i32_array(&r.adding_replicas);
    w.i32(r.leader);
    w.i32(r.leader_epoch);
    w.i32(r.partition_epoch);
    if version >= 1 {
        w.uuid_array(&r.directories);
    }
    let mut tags = Vec::new();
    if r.leader_recovery_state != 0 {
        tags.push((0, vec![r.leader_recovery_state as u8]));
    }
    if let Some(elr) = &r.eligible_leader_replicas {
        tags.push((1, Writer::encode_with(|t| t.i32_array(elr))));
    }
    if let Some(lke) = &r.last_known_elr {
        tags.push((2, Writer::encode_with(|t| t.i32_array(lke))));
    }
    w.tagged_fields(&tags);
}

fn decode_partition(r: &mut Reader<'_>, v: u16) -> Result<PartitionRecord, RecordError> {
    let partition_id = r.i32("PartitionId")?;
    let topic_id = r.uuid("TopicId")?;
    let replicas = r.i32_array("Replicas")?;
    let isr = r.i32_array("Isr")?;
    let removing_replicas = r.i32_array("RemovingReplicas")?;
    let adding_replicas = r.i32_array("AddingReplicas")?;
    let leader = r.i32("Leader")?;
    let leader_epoch = r.i32("LeaderEpoch")?;
    let partition_epoch = r.i32("PartitionEpoch")?;
    let directories = if v >= 1 {
        r.uuid_array("Directories")?
    } else {
        Vec::new()
    };
    let mut leader_recovery_state = 0;
    let mut eligible_leader_replicas = None;
    let mut last_known_elr = None;
    r.tagged_fields(|tag, t| match tag {
        0 => {
            leader_recovery_state = t.i8("LeaderRecoveryState")?;
            Ok(true)
        }
        1 if v >= 2 => {
            eligible_leader_replicas = t.nullable_i32_array("EligibleLeaderReplicas")?;
            Ok(true)
        }
        2 if v >= 2 => {
            last_known_elr = t.nullable_i32_array("LastKnownElr")?;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    Ok(PartitionRecord {
        partition_id,
        topic_id,
        replicas,
        isr,
        removing_replicas,
        adding_replicas,
        leader,
        leader_recovery_state,
        leader_epoch,
        partition_epoch,
        directories,
        eligible_leader_replicas,
        last_known_elr,
    })
}

fn encode_partition_change(w: &mut Writer, r: &PartitionChangeRecord, version: u16) {
    w.i32(r.partition_id);
    w.uuid(&r.topic_id);
    let mut tags = Vec::new();
    let array = |a: &Vec<i32>| Writer::encode_with(|t| t.i32_array(a));
    if let Some(isr) = &r.isr {
        tags.push((0, array(isr)));
    }
    if r.leader != LEADER_UNCHANGED {
        tags.push((1, r.leader.to_be_bytes().to_vec()));
    }
    if let Some(a) = &r.replicas {
        tags.push((2, array(a)));
    }
    if let Some(a) = &r.removing_replicas {
        tags.push((3, array(a)));
    }
    if let Some(a) = &r.adding_replicas {
        tags.push((4, array(a)));
    }
    if r.leader_recovery_state != -1 {
        tags.push((5, vec![r.leader_recovery_state as u8]));
    }
    if version >= 2 {
        if let Some(a) = &r.eligible_leader_replicas {
            tags.push((6, array(a)));
        }
        if let Some(a) = &r.last_known_elr {
            tags.push((7, array(a)));
        }
    }
    if version >= 1 {
        if let Some(d) = &r.directories {
            tags.push((8, Writer::encode_with(|t| t.uuid_array(d))));
        }
    }
    w.tagged_fields(&tags);
}

fn decode_partition_change(
    r: &mut Reader<'_>,
    v: u16,
) -> Result<PartitionChangeRecord, RecordError> {
    let mut c = PartitionChangeRecord::new(Uuid::nil(), 0);
    c.partition_id = r.i32("PartitionId")?;
    c.topic_id = r.uuid("TopicId")?;
    r.tagged_fields(|tag, t| {
        match tag {
            0 => c.isr = t.nullable_i32_array("Isr")?,
            1 => c.leader = t.i32("Leader")?,
            2 => c.replicas = t.nullable_i32_array("Replicas")?,
            3 => c.removing_replicas = t.nullable_i32_array("RemovingReplicas")?,
            4 => c.adding_replicas = t.nullable_i32_array("AddingReplicas")?,
            5 => c.leader_recovery_state = t.i8("LeaderRecoveryState")?,
            6 if v >= 2 => {
                c.eligible_leader_replicas = t.nullable_i32_array("EligibleLeaderReplicas")?
            }
            7 if v >= 2 => c.last_known_elr = t.nullable_i32_array("LastKnownElr")?,
            8 if v >= 1 => c.directories = t.nullable_uuid_array("Directories")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(c)
}

fn decode_broker_registration_change(
    r: &mut Reader<'_>,
    v: u16,
) -> Result<BrokerRegistrationChangeRecord, RecordError> {
    let broker_id = r.i32("BrokerId")?;
    let broker_epoch = r.i64("BrokerEpoch")?;
    let mut fenced = 0;
    let mut in_controlled_shutdown = 0;
    let mut log_dirs = Vec::new();
    r.tagged_fields(|tag, t| {
        match tag {
            0 => fenced = t.i8("Fenced")?,
            1 if v >= 1 => in_controlled_shutdown = t.i8("InControlledShutdown")?,
            2 if v >= 2 => log_dirs = t.uuid_array("LogDirs")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(BrokerRegistrationChangeRecord {
        broker_id,
        broker_epoch,
        fenced,
        in_controlled_shutdown,
        log_dirs,
    })
}

#[cfg(test)]
mod tests;
