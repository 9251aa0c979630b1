//! ElectLeaders (43): preferred and unclean elections on request (`kafka-leader-election.sh`), answered as
//! Kafka's `ReplicationControlManager.electLeaders` answers.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::election;
use super::errors::*;
use super::partition_change::Election;
use super::Controller;
use crate::image::MetadataImage;
use crate::records::{MetadataRecord, NO_LEADER};

/// Kafka's `ElectionType`: 0 preferred, 1 unclean.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// Most partitions one request may elect (bounds the batch, as Kafka's MAX_RECORDS_PER_USER_OP = 10000).
const MAX_ELECTIONS_PER_REQUEST: usize = 10_000;

impl Controller {
    /// ElectLeaders (43). A null partition list means every partition, and then partitions that already have
    /// the wanted leader are left out of the answer.
    pub async fn elect_leaders(&self, req: ElectLeadersRequest) -> ElectLeadersResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let election = match req.election_type {
            PREFERRED => Election::Preferred,
            UNCLEAN => Election::Unclean,
            other => {
                tracing::info!(
                    election_type = other,
                    "ElectLeaders with an unknown election type"
                );
                return ElectLeadersResponse::default().with_error_code(INVALID_REQUEST);
            }
        };
        let requested: Vec<(String, Vec<i32>, bool)> = match &req.topic_partitions {
            Some(topics) => topics
                .iter()
                .map(|t| (t.topic.to_string(), t.partitions.clone(), true))
                .collect(),
            None => image
                .topics
                .values()
                .map(|t| {
                    (
                        t.name.clone(),
                        t.partitions.keys().copied().collect(),
                        false,
                    )
                })
                .collect(),
        };
        let mut records = Vec::new();
        let mut results = Vec::new();
        for (topic, partitions, explicit) in requested {
            let mut result = ReplicaElectionResult::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())));
            for partition in partitions {
                let outcome = if records.len() >= MAX_ELECTIONS_PER_REQUEST {
                    Err(ApiError::new(
                        INVALID_REQUEST,
                        format!(
                            "more than {MAX_ELECTIONS_PER_REQUEST} elections in one request; send fewer partitions"
                        ),
                    ))
                } else {
                    self.elect_one(&image, &topic, partition, election)
                };
                let (code, message) = match outcome {
                    Ok(Some(record)) => {
                        records.push(MetadataRecord::PartitionChange(record));
                        (NONE, None)
                    }
                    Ok(None) => (NONE, None),
                    Err(e) => (e.code, Some(e.message)),
                };
                if !explicit && code == ELECTION_NOT_NEEDED {
                    continue;
                }
                result.partition_result.push(
                    PartitionResult::default()
                        .with_partition_id(partition)
                        .with_error_code(code)
                        .with_error_message(message.map(StrBytes::from_string)),
                );
            }
            results.push(result);
        }
        if !records.is_empty() {
            if let Err(e) = self.writer.write_in_batches(records).await {
                for r in &mut results {
                    for p in &mut r.partition_result {
                        if p.error_code == NONE {
                            p.error_code = e.code();
                            p.error_message = Some(StrBytes::from_string(e.to_string()));
                        }
                    }
                }
            }
        }
        ElectLeadersResponse::default().with_replica_election_results(results)
    }

    /// One partition: the record to write, or the error Kafka answers.
    fn elect_one(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        election: Election,
    ) -> Result<Option<crate::records::PartitionChangeRecord>, ApiError> {
        let t = image.topic_by_name(topic).ok_or_else(|| {
            ApiError::new(
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("No such topic as {topic}"),
            )
        })?;
        let p = t.partitions.get(&partition).ok_or_else(|| {
            ApiError::new(
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("No such partition as {topic}-{partition}"),
            )
        })?;
        let preferred = p.replicas.first().copied();
        let not_needed = match election {
            Election::Preferred => Some(p.leader) == preferred,
            _ => p.leader != NO_LEADER,
        };
        if not_needed {
            return Err(ApiError::new(
                ELECTION_NOT_NEEDED,
                "Leader election not needed for topic partition.",
            ));
        }
        let policies = self.policies(image);
        match election::elect_one(image, &policies, t, partition, election) {
            Some(record) => Ok(Some(record)),
            None if election == Election::Preferred => Err(ApiError::new(
                PREFERRED_LEADER_NOT_AVAILABLE,
                format!(
                    "the preferred replica {} of {topic}-{partition} is not live or not in sync; retry once it \
                     has caught up",
                    preferred.unwrap_or(NO_LEADER)
                ),
            )),
            None => Err(ApiError::new(
                ELIGIBLE_LEADERS_NOT_AVAILABLE,
                format!("no live replica of {topic}-{partition} can be elected"),
            )),
        }
    }
}
