//! AlterPartitionReassignments (45) and ListPartitionReassignments (46), as Kafka's
//! `ReplicationControlManager.alterPartitionReassignment` / `listPartitionReassignments`.
//!
//! A reassignment to target replicas T of a partition with replicas C writes Replicas = T then C - T, Adding =
//! T - C, Removing = C - T. The adding replicas follow the leader, and its AlterPartition adds them to the ISR once
//! they caught up; the AlterPartition that makes every target replica in sync completes the reassignment (removing
//! replicas leave replicas and ISR, a leader among them is replaced: [`super::partition_change`]). A null replica
//! list cancels: the adding replicas leave, the original assignment is back.

use std::collections::BTreeSet;

use kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::*;
use super::partition_change::{Election, PartitionChange};
use super::Controller;
use crate::image::{MetadataImage, PartitionState, TopicImage};
use crate::records::{MetadataRecord, PartitionChangeRecord};

/// Most partitions one request may reassign (bounds the batch, as Kafka's MAX_RECORDS_PER_USER_OP).
const MAX_REASSIGNMENTS_PER_REQUEST: usize = 10_000;

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(*b)).collect()
}

/// (replicas, adding, removing) for a move from `current` to `target` (Kafka's `PartitionReassignmentReplicas`).
pub fn reassignment_replicas(current: &[i32], target: &[i32]) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let removing: Vec<i32> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    (replicas, adding, removing)
}

impl Controller {
    /// AlterPartitionReassignments (45).
    pub async fn alter_partition_reassignments(
        &self,
        req: AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut records = Vec::new();
        let mut responses = Vec::new();
        for t in &req.topics {
            let mut topic = ReassignableTopicResponse::default().with_name(t.name.clone());
            for p in &t.partitions {
                let outcome = if records.len() >= MAX_REASSIGNMENTS_PER_REQUEST {
                    Err(ApiError::new(
                        INVALID_REQUEST,
                        format!(
                            "more than {MAX_REASSIGNMENTS_PER_REQUEST} reassignments in one request; send fewer"
                        ),
                    ))
                } else {
                    self.plan_reassignment(
                        &image,
                        t.name.as_str(),
                        p,
                        req.allow_replication_factor_change,
                    )
                };
                let mut result = ReassignablePartitionResponse::default()
                    .with_partition_index(p.partition_index);
                match outcome {
                    Ok(change) => records.extend(change.map(MetadataRecord::PartitionChange)),
                    Err(e) => {
                        tracing::info!(
                            topic = t.name.as_str(),
                            partition = p.partition_index,
                            "reassignment refused: {}",
                            e.message
                        );
                        result = result
                            .with_error_code(e.code)
                            .with_error_message(Some(StrBytes::from_string(e.message)));
                    }
                }
                topic.partitions.push(result);
            }
            responses.push(topic);
        }
        let mut resp = AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(req.allow_replication_factor_change);
        if !records.is_empty() {
            if let Err(e) = self.writer.write(records).await {
                resp = resp
                    .with_error_code(e.code())
                    .with_error_message(Some(StrBytes::from_string(e.to_string())));
            }
        }
        resp.with_responses(responses)
    }

    fn plan_reassignment(
        &self,
        image: &MetadataImage,
        topic: &str,
        target: &ReassignablePartition,
        allow_rf_change: bool,
    ) -> Result<Option<PartitionChangeRecord>, ApiError> {
        let index = target.partition_index;
        let t = image.topic_by_name(topic).ok_or_else(|| {
            ApiError::new(
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("Unable to find a topic named {topic}."),
            )
        })?;
        let p = t.partitions.get(&index).ok_or_else(|| {
            ApiError::new(
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("Unable to find partition {topic}:{index}."),
            )
        })?;
        match &target.replicas {
            None => self.cancel(image, t, index, p),
            Some(replicas) => {
                let replicas: Vec<i32> = replicas.iter().map(|b| b.0).collect();
                self.change(image, t, index, p, &replicas, allow_rf_change)
            }
        }
    }

    fn builder<'a>(
        &self,
        image: &'a MetadataImage,
        t: &TopicImage,
        index: i32,
        p: &'a PartitionState,
        acceptable: &'a dyn Fn(i32) -> bool,
    ) -> PartitionChange<'a> {
        let policy = self.policies(image).topic(t);
        let election = if policy.unclean {
            Election::Unclean
        } else {
            Election::Online
        };
        PartitionChange::new(p, t.id, index, acceptable, policy.min_isr).election(election)
    }

    /// A null target: revert to the replicas before the reassignment (Kafka's `PartitionReassignmentRevert`).
    fn cancel(
        &self,
        image: &MetadataImage,
        t: &TopicImage,
        index: i32,
        p: &PartitionState,
    ) -> Result<Option<PartitionChangeRecord>, ApiError> {
        if p.adding_replicas.is_empty() && p.removing_replicas.is_empty() {
            return Err(ApiError::new(
                NO_REASSIGNMENT_IN_PROGRESS,
                "No partition reassignment is in progress.",
            ));
        }
        let keep = |r: &i32| !p.adding_replicas.contains(r);
        let replicas: Vec<i32> = p.replicas.iter().copied().filter(keep).collect();
        let mut isr: Vec<i32> = p.isr.iter().copied().filter(keep).collect();
        if isr.is_empty() {
            // Every in-sync replica was being added: reverting needs an unclean election.
            if !self.policies(image).topic(t).unclean {
                return Err(ApiError::new(
                    INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "Unable to revert partition assignment for {}:{index} because it would require an unclean \
                         leader election.",
                        t.name
                    ),
                ));
            }
            isr = replicas.clone();
        }
        let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_usable());
        Ok(self
            .builder(image, t, index, p, &acceptable)
            .target_isr(isr)
            .target_assignment(replicas, Vec::new(), Vec::new())
            .build()
            .map(|d| d.record))
    }

    fn change(
        &self,
        image: &MetadataImage,
        t: &TopicImage,
        index: i32,
        p: &PartitionState,
        target: &[i32],
        allow_rf_change: bool,
    ) -> Result<Option<PartitionChangeRecord>, ApiError> {
        let bad = |m: String| ApiError::new(INVALID_REPLICA_ASSIGNMENT, m);
        if target.is_empty() {
            return Err(bad(
                "The manual partition assignment includes no replicas.".into()
            ));
        }
        if target.iter().collect::<BTreeSet<_>>().len() != target.len() {
            return Err(bad(format!(
                "The manual partition assignment {target:?} contains duplicate replicas."
            )));
        }
        if let Some(unknown) = target.iter().find(|r| image.broker(**r).is_none()) {
            return Err(bad(format!(
                "The manual partition assignment includes broker {unknown}, but no such broker is registered."
            )));
        }
        // The assignment before any reassignment in progress: replicas minus those being added.
        let original: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !p.adding_replicas.contains(r))
            .collect();
        if !allow_rf_change && target.len() != original.len() {
            return Err(ApiError::new(
                INVALID_REPLICATION_FACTOR,
                format!(
                    "The replication factor is changed from {} to {} but allowReplicationFactorChange is false",
                    original.len(),
                    target.len()
                ),
            ));
        }
        let (replicas, adding, removing) = reassignment_replicas(&p.replicas, target);
        let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_usable());
        Ok(self
            .builder(image, t, index, p, &acceptable)
            .target_assignment(replicas, removing, adding)
            .build()
            .map(|d| d.record))
    }

    /// ListPartitionReassignments (46): the partitions with a reassignment in progress (all of them when the
    /// topic list is null).
    pub async fn list_partition_reassignments(
        &self,
        req: ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
        let image = self.writer.image();
        let ongoing =
            |p: &PartitionState| !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty();
        let describe = |index: i32, p: &PartitionState| {
            OngoingPartitionReassignment::default()
                .with_partition_index(index)
                .with_replicas(ids(&p.replicas))
                .with_adding_replicas(ids(&p.adding_replicas))
                .with_removing_replicas(ids(&p.removing_replicas))
        };
        let mut topics = Vec::new();
        let wanted: Vec<(&TopicImage, Option<&Vec<i32>>)> = match &req.topics {
            None => image.topics.values().map(|t| (&**t, None)).collect(),
            Some(list) => list
                .iter()
                .filter_map(|w| {
                    image
                        .topic_by_name(w.name.as_str())
                        .map(|t| (t, Some(&w.partition_indexes)))
                })
                .collect(),
        };
        for (t, indexes) in wanted {
            let partitions: Vec<OngoingPartitionReassignment> = t
                .partitions
                .iter()
                .filter(|(i, p)| ongoing(p) && indexes.is_none_or(|w| w.contains(i)))
                .map(|(i, p)| describe(*i, p))
                .collect();
            if !partitions.is_empty() {
                topics.push(
                    OngoingTopicReassignment::default()
                        .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                            t.name.clone(),
                        )))
                        .with_partitions(partitions),
                );
            }
        }
        ListPartitionReassignmentsResponse::default().with_topics(topics)
    }
}
