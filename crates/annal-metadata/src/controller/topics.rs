//! CreateTopics, CreatePartitions, DeleteTopics.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use uuid::Uuid;

use super::errors::*;
use super::placement::place_replicas;
use super::{Controller, State};
use crate::image::MetadataImage;
use crate::records::{
    ConfigRecord, ConfigResourceType, MetadataRecord, PartitionRecord, RemoveTopicRecord,
    TopicRecord,
};

/// Most partitions one topic may have (bounds the records one request can produce).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// The ISR a new partition starts with: every replica that is active (unfenced, not shutting down), as Kafka
/// does. A new partition has no records, so every replica holds all of them; a follower that then does not keep
/// up is shrunk out of the ISR by its leader (AlterPartition) after `replica.lag.time.max.ms`.
pub fn initial_isr(replicas: &[i32], active: impl Fn(i32) -> bool) -> Vec<i32> {
    replicas.iter().copied().filter(|r| active(*r)).collect()
}

/// Why a topic name is not legal in Kafka, or `None` if it is.
pub fn invalid_topic_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Some(format!("topic name '{name}' is not allowed"));
    }
    if name.len() > 249 {
        return Some(format!(
            "topic name is {} characters long; the maximum is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "topic name '{name}' contains '{c}'; legal characters are ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    None
}

fn msg(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

/// The partitions records for `assignments` (leader = first usable replica, else the first replica offline).
fn partition_records(
    image: &MetadataImage,
    topic_id: Uuid,
    first: i32,
    assignments: &[Vec<i32>],
) -> Vec<MetadataRecord> {
    assignments
        .iter()
        .enumerate()
        .map(|(i, replicas)| {
            let leader = replicas
                .iter()
                .copied()
                .find(|r| image.broker(*r).is_some_and(|b| b.is_usable()))
                .expect("assignments are checked to have a usable replica");
            MetadataRecord::Partition(PartitionRecord {
                partition_id: first + i as i32,
                topic_id,
                replicas: replicas.clone(),
                isr: initial_isr(replicas, |r| image.broker(r).is_some_and(|b| b.is_usable())),
                removing_replicas: vec![],
                adding_replicas: vec![],
                leader,
                leader_recovery_state: 0,
                leader_epoch: 0,
                partition_epoch: 0,
                directories: vec![],
                eligible_leader_replicas: None,
                last_known_elr: None,
            })
        })
        .collect()
}

/// Checks explicit assignments: every partition has `rf` distinct registered replicas, one of them usable.
fn check_assignments(image: &MetadataImage, assignments: &[Vec<i32>]) -> Result<(), ApiError> {
    let bad = |m: String| ApiError::new(INVALID_REPLICA_ASSIGNMENT, m);
    let rf = assignments.first().map_or(0, Vec::len);
    for (i, replicas) in assignments.iter().enumerate() {
        if replicas.is_empty() {
            return Err(bad(format!("partition {i} has no replicas")));
        }
        if replicas.len() != rf {
            return Err(bad(format!(
                "partition {i} has {} replicas but partition 0 has {rf}; every partition needs the same count",
                replicas.len()
            )));
        }
        if replicas.iter().collect::<BTreeSet<_>>().len() != replicas.len() {
            return Err(bad(format!(
                "partition {i} names a broker twice: {replicas:?}"
            )));
        }
        if let Some(unknown) = replicas.iter().find(|r| image.broker(**r).is_none()) {
            return Err(bad(format!(
                "partition {i} names broker {unknown}, which is not registered"
            )));
        }
        if !replicas
            .iter()
            .any(|r| image.broker(*r).is_some_and(|b| b.is_usable()))
        {
            return Err(bad(format!(
                "every broker of partition {i} ({replicas:?}) is fenced or shutting down; it could have no leader"
            )));
        }
    }
    Ok(())
}

fn usable_brokers(image: &MetadataImage) -> Vec<(i32, Option<String>)> {
    image
        .usable_brokers()
        .map(|b| (b.id, b.rack.clone()))
        .collect()
}

fn rf_error(rf: usize, brokers: usize) -> ApiError {
    ApiError::new(
        INVALID_REPLICATION_FACTOR,
        format!(
            "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be \
             reached because only {brokers} broker(s) are registered and unfenced. Lower the replication factor \
             or start more brokers."
        ),
    )
}

impl Controller {
    /// CreateTopics (19).
    pub async fn create_topics(&self, req: CreateTopicsRequest) -> CreateTopicsResponse {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in &req.topics {
            *counts.entry(t.name.as_str()).or_default() += 1;
        }
        let mut results = Vec::new();
        let mut records = Vec::new();
        let mut written = Vec::new();
        for t in &req.topics {
            let name = t.name.as_str();
            let mut result = CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_num_partitions(-1)
                .with_replication_factor(-1);
            let outcome = if counts[name] > 1 {
                Err(ApiError::new(
                    INVALID_REQUEST,
                    format!("topic '{name}' appears more than once in the request"),
                ))
            } else {
                self.plan_topic(&mut state, &image, t)
            };
            match outcome {
                Err(e) => {
                    result = result
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message));
                }
                Ok((topic_id, partitions, rf, topic_records)) => {
                    result = result
                        .with_topic_id(topic_id)
                        .with_num_partitions(partitions)
                        .with_replication_factor(rf);
                    if !req.validate_only {
                        records.extend(topic_records);
                        written.push(results.len());
                    }
                }
            }
            results.push(result);
        }
        if !records.is_empty() {
            if let Err(e) = self.writer.write(records).await {
                for i in written {
                    let r = std::mem::take(&mut results[i]);
                    results[i] = r
                        .with_topic_id(Uuid::nil())
                        .with_error_code(e.code())
                        .with_error_message(msg(e.to_string()));
                }
            }
        }
        CreateTopicsResponse::default().with_topics(results)
    }

    /// Decides one topic: (id, partitions, rf, records) or the error.
    fn plan_topic(
        &self,
        state: &mut State,
        image: &MetadataImage,
        t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    ) -> Result<(Uuid, i32, i16, Vec<MetadataRecord>), ApiError> {
        let name = t.name.as_str();
        if let Some(why) = invalid_topic_name(name) {
            return Err(ApiError::new(INVALID_TOPIC_EXCEPTION, why));
        }
        if image.topic_by_name(name).is_some() {
            return Err(ApiError::new(
                TOPIC_ALREADY_EXISTS,
                format!("Topic '{name}' already exists."),
            ));
        }
        // Kafka's rule: '.' and '_' collide in metric names, so "a.b" and "a_b" cannot both exist.
        let normalized = name.replace('.', "_");
        if let Some(other) = image
            .topic_ids_by_name
            .keys()
            .find(|other| other.replace('.', "_") == normalized)
        {
            return Err(ApiError::new(
                INVALID_TOPIC_EXCEPTION,
                format!("Topic '{name}' collides with existing topic: {other}"),
            ));
        }
        let assignments: Vec<Vec<i32>> = if !t.assignments.is_empty() {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                return Err(ApiError::new(
                    INVALID_REQUEST,
                    "both numPartitions or replicationFactor and replicasAssignments were set; send -1 for both \
                     with an explicit assignment",
                ));
            }
            if t.assignments.len() > PARTITIONS_PER_TOPIC_MAX as usize {
                return Err(ApiError::new(
                    INVALID_PARTITIONS,
                    format!(
                        "{} partitions exceed the limit of {PARTITIONS_PER_TOPIC_MAX}",
                        t.assignments.len()
                    ),
                ));
            }
            let mut by_index: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
            for a in &t.assignments {
                let ids = a.broker_ids.iter().map(|b| b.0).collect();
                if by_index.insert(a.partition_index, ids).is_some() {
                    return Err(ApiError::new(
                        INVALID_REPLICA_ASSIGNMENT,
                        format!("partition {} is assigned twice", a.partition_index),
                    ));
                }
            }
            if by_index.keys().copied().ne(0..by_index.len() as i32) {
                return Err(ApiError::new(
                    INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "partition indexes {:?} are not 0..{}; assign every partition from 0 up",
                        by_index.keys().collect::<Vec<_>>(),
                        by_index.len()
                    ),
                ));
            }
            let assignments: Vec<Vec<i32>> = by_index.into_values().collect();
            check_assignments(image, &assignments)?;
            assignments
        } else {
            let partitions = if t.num_partitions == -1 {
                self.config.num_partitions
            } else {
                t.num_partitions
            };
            if partitions < 1 {
                return Err(ApiError::new(
                    INVALID_PARTITIONS,
                    format!("Number of partitions was set to an invalid non-positive value ({partitions})."),
                ));
            }
            if partitions > PARTITIONS_PER_TOPIC_MAX {
                return Err(ApiError::new(
                    INVALID_PARTITIONS,
                    format!(
                        "{partitions} partitions exceed the limit of {PARTITIONS_PER_TOPIC_MAX}"
                    ),
                ));
            }
            let rf = if t.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                t.replication_factor
            };
            if rf < 1 {
                return Err(ApiError::new(
                    INVALID_REPLICATION_FACTOR,
                    format!("Replication factor must be larger than 0, not {rf}."),
                ));
            }
            let brokers = usable_brokers(image);
            if rf as usize > brokers.len() {
                return Err(rf_error(rf as usize, brokers.len()));
            }
            place_replicas(
                &brokers,
                partitions as usize,
                rf as usize,
                0,
                &mut state.rng,
            )
            .map_err(|_| rf_error(rf as usize, brokers.len()))?
        };
        let mut configs = Vec::new();
        for c in &t.configs {
            let Some(value) = c.value.as_ref() else {
                return Err(ApiError::new(
                    INVALID_CONFIG,
                    format!("config '{}' has a null value", c.name.as_str()),
                ));
            };
            let value = (self.config.topic_config_validator)(c.name.as_str(), value.as_str())
                .map_err(|m| ApiError::new(INVALID_CONFIG, m))?;
            configs.push((c.name.to_string(), value));
        }
        let topic_id = loop {
            // Random (version 4) like Kafka's, but drawn from the seeded RNG so placement runs are reproducible.
            let id = uuid::Builder::from_random_bytes(state.rng.gen()).into_uuid();
            if !id.is_nil() && image.topic_by_id(&id).is_none() {
                break id;
            }
        };
        let mut records = vec![MetadataRecord::Topic(TopicRecord {
            name: name.to_string(),
            topic_id,
        })];
        records.extend(partition_records(image, topic_id, 0, &assignments));
        records.extend(configs.into_iter().map(|(n, v)| {
            MetadataRecord::Config(ConfigRecord {
                resource_type: ConfigResourceType::Topic.id(),
                resource_name: name.to_string(),
                name: n,
                value: Some(v),
            })
        }));
        let rf = assignments.first().map_or(0, Vec::len) as i16;
        Ok((topic_id, assignments.len() as i32, rf, records))
    }

    /// CreatePartitions (37).
    pub async fn create_partitions(
        &self,
        req: CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let mut state = self.lock_state().await;
        let image = self.writer.image();
        let mut results = Vec::new();
        let mut records = Vec::new();
        let mut written = Vec::new();
        let mut seen = BTreeSet::new();
        for t in &req.topics {
            let mut result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let outcome = if !seen.insert(t.name.as_str()) {
                Err(ApiError::new(
                    INVALID_REQUEST,
                    "the topic appears more than once in the request",
                ))
            } else {
                self.plan_partitions(&mut state, &image, t)
            };
            match outcome {
                Err(e) => {
                    result = result
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message))
                }
                Ok(r) => {
                    if !req.validate_only {
                        records.extend(r);
                        written.push(results.len());
                    }
                }
            }
            results.push(result);
        }
        if !records.is_empty() {
            if let Err(e) = self.writer.write(records).await {
                for i in written {
                    let r = std::mem::take(&mut results[i]);
                    results[i] = r
                        .with_error_code(e.code())
                        .with_error_message(msg(e.to_string()));
                }
            }
        }
        CreatePartitionsResponse::default().with_results(results)
    }

    fn plan_partitions(
        &self,
        state: &mut State,
        image: &MetadataImage,
        t: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
    ) -> Result<Vec<MetadataRecord>, ApiError> {
        let name = t.name.as_str();
        let topic = image.topic_by_name(name).ok_or_else(|| {
            ApiError::new(
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic '{name}' does not exist"),
            )
        })?;
        let current = topic.partitions.len() as i32;
        if t.count <= current {
            return Err(ApiError::new(
                INVALID_PARTITIONS,
                format!("Topic currently has {current} partitions, which is higher than or equal to the requested {}.", t.count),
            ));
        }
        if t.count > PARTITIONS_PER_TOPIC_MAX {
            return Err(ApiError::new(
                INVALID_PARTITIONS,
                format!(
                    "{} partitions exceed the limit of {PARTITIONS_PER_TOPIC_MAX}",
                    t.count
                ),
            ));
        }
        let added = (t.count - current) as usize;
        let rf = topic
            .partitions
            .values()
            .next()
            .map_or(1, |p| p.replicas.len());
        // An empty list is what clients (and the message's default) send for "no explicit assignment".
        let explicit = t.assignments.as_ref().filter(|a| !a.is_empty());
        let assignments = match explicit {
            Some(assignments) => {
                if assignments.len() != added {
                    return Err(ApiError::new(
                        INVALID_REPLICA_ASSIGNMENT,
                        format!(
                            "{} assignments were given for {added} new partitions",
                            assignments.len()
                        ),
                    ));
                }
                let assignments: Vec<Vec<i32>> = assignments
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect();
                check_assignments(image, &assignments)?;
                if assignments[0].len() != rf {
                    return Err(ApiError::new(
                        INVALID_REPLICA_ASSIGNMENT,
                        format!(
                            "new partitions have {} replicas; the topic's have {rf}",
                            assignments[0].len()
                        ),
                    ));
                }
                assignments
            }
            None => {
                let brokers = usable_brokers(image);
                place_replicas(&brokers, added, rf, current as usize, &mut state.rng)
                    .map_err(|_| rf_error(rf, brokers.len()))?
            }
        };
        Ok(partition_records(image, topic.id, current, &assignments))
    }

    /// DeleteTopics (20): by name (v0-5 `topic_names`, v6+ `topics` by name or id).
    pub async fn delete_topics(&self, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut results = Vec::new();
        let mut records = Vec::new();
        let mut written = Vec::new();
        let mut removed = BTreeSet::new();
        let by_name = req
            .topic_names
            .iter()
            .map(|n| (Some(n.clone()), Uuid::nil()));
        let by_state = req.topics.iter().map(|t| (t.name.clone(), t.topic_id));
        for (name, id) in by_name.chain(by_state) {
            let found = match &name {
                Some(n) if id.is_nil() => image.topic_by_name(n.as_str()).ok_or_else(|| {
                    ApiError::new(
                        UNKNOWN_TOPIC_OR_PARTITION,
                        format!("topic '{}' does not exist", n.as_str()),
                    )
                }),
                _ => image.topic_by_id(&id).ok_or_else(|| {
                    ApiError::new(UNKNOWN_TOPIC_ID, format!("no topic has id {id}"))
                }),
            };
            let mut result = DeletableTopicResult::default()
                .with_name(name.clone())
                .with_topic_id(id);
            match found {
                Err(e) => {
                    result = result
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message))
                }
                Ok(topic) => {
                    result = result
                        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
                        .with_topic_id(topic.id);
                    if removed.insert(topic.id) {
                        records.push(MetadataRecord::RemoveTopic(RemoveTopicRecord {
                            topic_id: topic.id,
                        }));
                    }
                    written.push(results.len());
                }
            }
            results.push(result);
        }
        if !records.is_empty() {
            if let Err(e) = self.writer.write(records).await {
                for i in written {
                    let r = std::mem::take(&mut results[i]);
                    results[i] = r
                        .with_error_code(e.code())
                        .with_error_message(msg(e.to_string()));
                }
            }
        }
        DeleteTopicsResponse::default().with_responses(results)
    }
}
