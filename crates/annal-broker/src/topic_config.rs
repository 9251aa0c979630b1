//! Topic-level configs: Kafka's names, validation, defaults from the broker's settings, and the mapping to the
//! engine's [`LogConfig`].

use std::collections::BTreeMap;

use annal_log::LogConfig;

use crate::config::{BrokerConfig, Kind};

/// One topic config Annal accepts.
pub struct TopicSetting {
    pub name: &'static str,
    pub kind: Kind,
    /// The broker setting that provides the default (Kafka's synonym), if any.
    pub broker_synonym: Option<&'static str>,
}

const fn ts(name: &'static str, kind: Kind, broker_synonym: Option<&'static str>) -> TopicSetting {
    TopicSetting {
        name,
        kind,
        broker_synonym,
    }
}

const INT_MAX: i64 = i32::MAX as i64;

/// Topic configs Annal accepts. Settings that only matter to features Annal does not have (compaction tuning,
/// tiered storage, throttles) are stored and described so tools that set them keep working.
pub const TOPIC_SETTINGS: &[TopicSetting] = &[
    ts(
        "cleanup.policy",
        Kind::List(&["delete", "compact"]),
        Some("log.cleanup.policy"),
    ),
    ts(
        "retention.ms",
        Kind::Long {
            min: -1,
            max: i64::MAX,
        },
        Some("log.retention.ms"),
    ),
    ts(
        "retention.bytes",
        Kind::Long {
            min: -1,
            max: i64::MAX,
        },
        Some("log.retention.bytes"),
    ),
    ts(
        "segment.bytes",
        Kind::Int {
            min: 14,
            max: INT_MAX,
        },
        Some("log.segment.bytes"),
    ),
    ts(
        "segment.ms",
        Kind::Long {
            min: 1,
            max: i64::MAX,
        },
        Some("log.roll.ms"),
    ),
    ts(
        "max.message.bytes",
        Kind::Int {
            min: 0,
            max: INT_MAX,
        },
        Some("message.max.bytes"),
    ),
    ts(
        "message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
        Some("log.message.timestamp.type"),
    ),
    ts(
        "min.insync.replicas",
        Kind::Int {
            min: 1,
            max: INT_MAX,
        },
        Some("min.insync.replicas"),
    ),
    ts(
        "index.interval.bytes",
        Kind::Int {
            min: 0,
            max: INT_MAX,
        },
        Some("log.index.interval.bytes"),
    ),
    ts(
        "segment.index.bytes",
        Kind::Int {
            min: 4,
            max: INT_MAX,
        },
        Some("log.index.size.max.bytes"),
    ),
    ts(
        "flush.messages",
        Kind::Long {
            min: 1,
            max: i64::MAX,
        },
        Some("log.flush.interval.messages"),
    ),
    ts(
        "flush.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        Some("log.flush.interval.ms"),
    ),
    ts(
        "compression.type",
        Kind::Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        None,
    ),
    ts(
        "compression.gzip.level",
        Kind::Int { min: -1, max: 9 },
        None,
    ),
    ts("compression.lz4.level", Kind::Int { min: 1, max: 17 }, None),
    ts(
        "compression.zstd.level",
        Kind::Int {
            min: -131072,
            max: 22,
        },
        None,
    ),
    ts(
        "file.delete.delay.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        None,
    ),
    ts(
        "delete.retention.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        Some("log.cleaner.delete.retention.ms"),
    ),
    ts(
        "min.compaction.lag.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        Some("log.cleaner.min.compaction.lag.ms"),
    ),
    ts(
        "max.compaction.lag.ms",
        Kind::Long {
            min: 1,
            max: i64::MAX,
        },
        Some("log.cleaner.max.compaction.lag.ms"),
    ),
    ts(
        "min.cleanable.dirty.ratio",
        Kind::Text,
        Some("log.cleaner.min.cleanable.ratio"),
    ),
    ts("unclean.leader.election.enable", Kind::Bool, None),
    ts(
        "message.timestamp.before.max.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        None,
    ),
    ts(
        "message.timestamp.after.max.ms",
        Kind::Long {
            min: 0,
            max: i64::MAX,
        },
        None,
    ),
    ts("preallocate", Kind::Bool, None),
    ts(
        "local.retention.ms",
        Kind::Long {
            min: -2,
            max: i64::MAX,
        },
        None,
    ),
    ts(
        "local.retention.bytes",
        Kind::Long {
            min: -2,
            max: i64::MAX,
        },
        None,
    ),
    ts("remote.storage.enable", Kind::Choice(&["false"]), None),
    // Annal's own: keep a key index beside each segment (`GET /v1/topics/{topic}/records?key=`, `annal lookup`).
    ts("key.index.enable", Kind::Bool, None),
    // Annal's own: the retention guard (`ops/retention_guard.rs`).
    ts(crate::ops::retention_guard::GROUPS, Kind::Text, None),
    ts(
        crate::ops::retention_guard::MAX_BYTES,
        Kind::Long {
            min: -1,
            max: i64::MAX,
        },
        None,
    ),
    ts("leader.replication.throttled.replicas", Kind::Text, None),
    ts("follower.replication.throttled.replicas", Kind::Text, None),
];

/// Kafka's defaults for topic configs without a broker synonym.
fn static_default(name: &str) -> &'static str {
    match name {
        "compression.type" => "producer",
        "compression.gzip.level" => "-1",
        "compression.lz4.level" => "9",
        "compression.zstd.level" => "3",
        "file.delete.delay.ms" => "60000",
        "delete.retention.ms" => "86400000",
        "min.compaction.lag.ms" => "0",
        "max.compaction.lag.ms" => "9223372036854775807",
        "min.cleanable.dirty.ratio" => "0.5",
        "unclean.leader.election.enable" => "false",
        "message.timestamp.before.max.ms" => "9223372036854775807",
        "message.timestamp.after.max.ms" => "3600000",
        "preallocate" => "false",
        "local.retention.ms" => "-2",
        "local.retention.bytes" => "-2",
        "remote.storage.enable" => "false",
        "key.index.enable" => "false",
        "retention.guard.groups" => "",
        "retention.guard.max.bytes" => crate::ops::retention_guard::MAX_BYTES_DEFAULT,
        _ => "",
    }
}

/// DescribeConfigs' documentation for the configs Annal adds (Kafka's own are documented by Kafka).
pub fn documentation(name: &str) -> Option<&'static str> {
    Some(match name {
        "key.index.enable" => {
            "Annal: keep a key index beside each segment, for records by key (GET /v1/topics/{topic}/records?key=, annal lookup)."
        }
        "retention.guard.groups" => {
            "Annal: comma-separated consumer groups whose unconsumed records retention.ms and retention.bytes do not delete, on each partition where the group has a committed offset, up to retention.guard.max.bytes held per partition. Empty (the default): off."
        }
        "retention.guard.max.bytes" => {
            "Annal: the most bytes per partition the retention guard keeps beyond what retention would; past it the oldest held segments are deleted and the loss is counted in annal_group_records_lost_to_retention_total. -1: no cap (the disk may fill)."
        }
        _ => return None,
    })
}

pub fn find(name: &str) -> Option<&'static TopicSetting> {
    TOPIC_SETTINGS.iter().find(|s| s.name == name)
}

/// Validates one topic config; the error text is sent to the client (INVALID_CONFIG).
pub fn validate(name: &str, value: Option<&str>) -> Result<String, String> {
    let setting = find(name).ok_or_else(|| format!("unknown topic config '{name}'"))?;
    let value = value.ok_or_else(|| format!("topic config '{name}' needs a value"))?;
    let v = setting
        .kind
        .validate(name, value)
        .map_err(|e| e.to_string())?;
    if name == crate::ops::retention_guard::GROUPS {
        return crate::ops::retention_guard::validate_groups(&v);
    }
    if name == "min.cleanable.dirty.ratio"
        && !v
            .trim()
            .parse::<f64>()
            .is_ok_and(|r| (0.0..=1.0).contains(&r))
    {
        return Err(format!(
            "min.cleanable.dirty.ratio: '{v}' is not a number between 0 and 1"
        ));
    }
    Ok(v)
}

/// A topic config's effective value: the override, else the broker's value for its synonym, else Kafka's default.
/// Returns (value, is_override, broker synonym value source).
pub fn effective(
    name: &str,
    overrides: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> (String, ConfigSource) {
    if let Some(v) = overrides.get(name) {
        return (v.clone(), ConfigSource::Topic);
    }
    let setting = match find(name) {
        Some(s) => s,
        None => return (String::new(), ConfigSource::Default),
    };
    if let Some(syn) = setting.broker_synonym {
        if let Some((v, src)) = broker.described.get(syn) {
            let source = match src {
                crate::config::Source::Static => ConfigSource::StaticBroker,
                crate::config::Source::Default => ConfigSource::Default,
            };
            return (v.clone(), source);
        }
    }
    (static_default(name).to_string(), ConfigSource::Default)
}

/// Kafka's DescribeConfigs source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Topic = 1,
    StaticBroker = 4,
    Default = 5,
}

/// The engine settings for a topic with these overrides.
pub fn log_config(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> LogConfig {
    let num = |name: &str| -> i64 { effective(name, overrides, broker).0.parse().unwrap_or(0) };
    let policy = effective("cleanup.policy", overrides, broker).0;
    let compact = policy.split(',').any(|p| p.trim() == "compact");
    let compact_only = compact && !policy.split(',').any(|p| p.trim() == "delete");
    let flush_messages = num("flush.messages");
    // Engine settings without a topic config keep their defaults (also any the engine adds later).
    #[allow(clippy::needless_update)]
    LogConfig {
        segment_bytes: (num("segment.bytes").max(14) as u64).min(LogConfig::SEGMENT_BYTES_MAX),
        segment_ms: num("segment.ms").max(1),
        // A compact-only topic is never trimmed by time or size; the cleaner keeps it small.
        retention_ms: if compact_only {
            -1
        } else {
            num("retention.ms")
        },
        retention_bytes: if compact_only {
            -1
        } else {
            num("retention.bytes")
        },
        max_message_bytes: num("max.message.bytes").clamp(0, i32::MAX as i64) as u32,
        index_interval_bytes: num("index.interval.bytes").clamp(0, i32::MAX as i64) as u32,
        segment_index_bytes: num("segment.index.bytes").clamp(4, i32::MAX as i64) as u32,
        // flush.messages=1 (fsync before acknowledging) is a group commit in the produce path
        // (`durable_acks`), outside the partition lock, not an fsync inside every append.
        flush_messages: if flush_messages <= 1 || flush_messages == i64::MAX {
            u64::MAX
        } else {
            flush_messages as u64
        },
        flush_ms: num("flush.ms"),
        producer_id_expiration_ms: broker.producer_id_expiration_ms,
        compact,
        delete_retention_ms: num("delete.retention.ms").max(0),
        min_cleanable_dirty_ratio: effective("min.cleanable.dirty.ratio", overrides, broker)
            .0
            .trim()
            .parse::<f64>()
            .unwrap_or(0.5)
            .clamp(0.0, 1.0),
        min_compaction_lag_ms: num("min.compaction.lag.ms").max(0),
        max_compaction_lag_ms: {
            let lag = effective("max.compaction.lag.ms", overrides, broker).0;
            lag.trim().parse::<i64>().unwrap_or(i64::MAX).max(1)
        },
        key_index: effective("key.index.enable", overrides, broker).0 == "true",
        ..LogConfig::default()
    }
}

/// What the produce path does to a topic's records before the engine appends them (`apis/produce_records.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPolicy {
    /// `cleanup.policy` has `compact`: every record needs a key (else INVALID_RECORD).
    pub require_keys: bool,
    /// `compression.type` other than `producer`: batches in another codec are recompressed to this one.
    pub codec: Option<annal_log::batch::Compression>,
    /// The codec's `compression.<codec>.level`; `None` is the codec's default.
    pub level: Option<i32>,
}

pub fn record_policy(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> RecordPolicy {
    use annal_log::batch::Compression;
    let value = |name: &str| effective(name, overrides, broker).0;
    let require_keys = value("cleanup.policy")
        .split(',')
        .any(|p| p.trim() == "compact");
    let codec = match value("compression.type").as_str() {
        "producer" | "" => None,
        other => Compression::from_name(other),
    };
    let level_of = |name: &str| value(name).trim().parse::<i32>().ok();
    let level = match codec {
        Some(Compression::Gzip) => level_of("compression.gzip.level").filter(|l| *l >= 1),
        Some(Compression::Lz4) => level_of("compression.lz4.level"),
        Some(Compression::Zstd) => level_of("compression.zstd.level"),
        _ => None,
    };
    RecordPolicy {
        require_keys,
        codec,
        level,
    }
}

/// True when the topic stamps LogAppendTime on appended batches.
/// Whether produce acknowledgements (acks=1/all) must wait for an fsync: `flush.messages=1`, Kafka's way to
/// ask for it (broker default `log.flush.interval.messages`). The produce path then waits for a group commit,
/// so concurrent producers share fsyncs.
pub fn durable_acks(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> bool {
    effective("flush.messages", overrides, broker)
        .0
        .trim()
        .parse::<i64>()
        .is_ok_and(|n| n == 1)
}

pub fn log_append_time(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> bool {
    effective("message.timestamp.type", overrides, broker).0 == "LogAppendTime"
}
