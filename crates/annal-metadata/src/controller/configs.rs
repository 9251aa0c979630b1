//! IncrementalAlterConfigs and AlterConfigs for topic and broker resources.

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::*;
use super::Controller;
use crate::image::{ConfigResource, MetadataImage};
use crate::records::{ConfigRecord, ConfigResourceType, MetadataRecord};

/// Topic config names Kafka defines; the default validator accepts these (numbers must parse). The broker
/// passes its own, stricter table through `ControllerConfig::topic_config_validator`.
const KNOWN_TOPIC_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
];

pub fn default_topic_config_validator(name: &str, value: &str) -> Result<String, String> {
    if !KNOWN_TOPIC_CONFIGS.contains(&name) {
        return Err(format!("unknown topic config '{name}'"));
    }
    let numeric = name.ends_with(".ms")
        || name.ends_with(".bytes")
        || name.ends_with(".messages")
        || name == "min.insync.replicas";
    if numeric && value.trim().parse::<i64>().is_err() {
        return Err(format!(
            "topic config '{name}' must be an integer, not '{value}'"
        ));
    }
    if name == "min.insync.replicas" && value.trim().parse::<i64>().is_ok_and(|v| v < 1) {
        return Err("min.insync.replicas must be at least 1".into());
    }
    Ok(value.trim().to_string())
}

pub fn default_broker_config_validator(name: &str, value: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("a broker config needs a name".into());
    }
    Ok(value.to_string())
}

/// Kafka's `AlterConfigOp.OpType`.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Most config entries one resource may change in one request (bounds the records a request produces).
const CONFIGS_PER_RESOURCE_MAX: usize = 1000;

fn msg(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

impl Controller {
    /// Checks a resource exists and is one configs may be set on.
    fn config_resource(
        &self,
        image: &MetadataImage,
        resource_type: i8,
        name: &str,
    ) -> Result<ConfigResource, ApiError> {
        match ConfigResourceType::from_id(resource_type) {
            Some(ConfigResourceType::Topic) => {
                if image.topic_by_name(name).is_none() {
                    return Err(ApiError::new(UNKNOWN_TOPIC_OR_PARTITION, format!("topic '{name}' does not exist")));
                }
                Ok(ConfigResource {
                    resource_type: ConfigResourceType::Topic,
                    name: name.to_string(),
                })
            }
            Some(ConfigResourceType::Broker) => {
                if !name.is_empty() && name.parse::<i32>().is_err() {
                    return Err(ApiError::new(
                        INVALID_REQUEST,
                        format!("broker resource '{name}' is not a broker id (or \"\" for the cluster default)"),
                    ));
                }
                Ok(ConfigResource {
                    resource_type: ConfigResourceType::Broker,
                    name: name.to_string(),
                })
            }
            _ => Err(ApiError::new(
                INVALID_REQUEST,
                format!("configs of resource type {resource_type} cannot be altered here (only topics and brokers)"),
            )),
        }
    }

    fn validate(
        &self,
        resource: &ConfigResource,
        name: &str,
        value: &str,
    ) -> Result<String, ApiError> {
        let validator = match resource.resource_type {
            ConfigResourceType::Topic => self.config.topic_config_validator,
            _ => self.config.broker_config_validator,
        };
        validator(name, value).map_err(|m| ApiError::new(INVALID_CONFIG, m))
    }

    /// The records for one resource's incremental ops.
    fn plan_incremental(
        &self,
        image: &MetadataImage,
        r: &kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource,
    ) -> Result<Vec<MetadataRecord>, ApiError> {
        let resource = self.config_resource(image, r.resource_type, r.resource_name.as_str())?;
        if r.configs.len() > CONFIGS_PER_RESOURCE_MAX {
            return Err(ApiError::new(
                INVALID_REQUEST,
                format!("more than {CONFIGS_PER_RESOURCE_MAX} configs"),
            ));
        }
        let current = image.configs.get(&resource).cloned().unwrap_or_default();
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for c in &r.configs {
            let name = c.name.as_str();
            if !seen.insert(name) {
                return Err(ApiError::new(
                    INVALID_REQUEST,
                    format!("config '{name}' appears more than once"),
                ));
            }
            let value = match c.config_operation {
                OP_SET => {
                    let v = c.value.as_ref().ok_or_else(|| {
                        ApiError::new(INVALID_CONFIG, format!("SET of '{name}' has no value"))
                    })?;
                    Some(self.validate(&resource, name, v.as_str())?)
                }
                OP_DELETE => None,
                OP_APPEND | OP_SUBTRACT => {
                    let v = c.value.as_ref().map(|v| v.as_str()).unwrap_or("");
                    let mut items: Vec<String> = current
                        .get(name)
                        .map(|s| {
                            s.split(',')
                                .filter(|x| !x.is_empty())
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    for item in v.split(',').filter(|x| !x.is_empty()) {
                        if c.config_operation == OP_APPEND {
                            if !items.iter().any(|x| x == item) {
                                items.push(item.to_string());
                            }
                        } else {
                            items.retain(|x| x != item);
                        }
                    }
                    Some(self.validate(&resource, name, &items.join(","))?)
                }
                other => {
                    return Err(ApiError::new(
                        INVALID_REQUEST,
                        format!("config operation {other} is unknown"),
                    ));
                }
            };
            out.push(config_record(&resource, name, value));
        }
        Ok(out)
    }

    /// IncrementalAlterConfigs (44).
    pub async fn incremental_alter_configs(
        &self,
        req: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut responses = Vec::new();
        let mut records = Vec::new();
        let mut written = Vec::new();
        for r in &req.resources {
            let mut resp =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
            match self.plan_incremental(&image, r) {
                Err(e) => {
                    resp = resp
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message))
                }
                Ok(recs) => {
                    if !req.validate_only {
                        records.extend(recs);
                        written.push(responses.len());
                    }
                }
            }
            responses.push(resp);
        }
        if let Some(e) = self.write_if_any(records).await {
            for i in written {
                let r = std::mem::take(&mut responses[i]);
                responses[i] = r
                    .with_error_code(e.code())
                    .with_error_message(msg(e.to_string()));
            }
        }
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }

    /// AlterConfigs (33): replaces a resource's whole config set.
    pub async fn alter_configs(&self, req: AlterConfigsRequest) -> AlterConfigsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut responses = Vec::new();
        let mut records = Vec::new();
        let mut written = Vec::new();
        for r in &req.resources {
            let mut resp = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let plan = (|| {
                let resource =
                    self.config_resource(&image, r.resource_type, r.resource_name.as_str())?;
                if r.configs.len() > CONFIGS_PER_RESOURCE_MAX {
                    return Err(ApiError::new(
                        INVALID_REQUEST,
                        format!("more than {CONFIGS_PER_RESOURCE_MAX} configs"),
                    ));
                }
                let mut new: BTreeMap<String, String> = BTreeMap::new();
                for c in &r.configs {
                    let name = c.name.as_str();
                    let v = c.value.as_ref().ok_or_else(|| {
                        ApiError::new(INVALID_CONFIG, format!("'{name}' has no value"))
                    })?;
                    new.insert(
                        name.to_string(),
                        self.validate(&resource, name, v.as_str())?,
                    );
                }
                let current = image.configs.get(&resource).cloned().unwrap_or_default();
                let mut recs: Vec<MetadataRecord> = current
                    .keys()
                    .filter(|k| !new.contains_key(*k))
                    .map(|k| config_record(&resource, k, None))
                    .collect();
                recs.extend(
                    new.into_iter()
                        .map(|(k, v)| config_record(&resource, &k, Some(v))),
                );
                Ok(recs)
            })();
            match plan {
                Err(e) => {
                    resp = resp
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message))
                }
                Ok(recs) => {
                    if !req.validate_only {
                        records.extend(recs);
                        written.push(responses.len());
                    }
                }
            }
            responses.push(resp);
        }
        if let Some(e) = self.write_if_any(records).await {
            for i in written {
                let r = std::mem::take(&mut responses[i]);
                responses[i] = r
                    .with_error_code(e.code())
                    .with_error_message(msg(e.to_string()));
            }
        }
        AlterConfigsResponse::default().with_responses(responses)
    }

    /// Writes `records` unless there are none; the error, if the write failed.
    async fn write_if_any(&self, records: Vec<MetadataRecord>) -> Option<super::WriteError> {
        if records.is_empty() {
            return None;
        }
        self.writer.write(records).await.err()
    }
}

fn config_record(resource: &ConfigResource, name: &str, value: Option<String>) -> MetadataRecord {
    MetadataRecord::Config(ConfigRecord {
        resource_type: resource.resource_type.id(),
        resource_name: resource.name.clone(),
        name: name.to_string(),
        value,
    })
}
