//! Partition administration: CreatePartitions (grow a topic) and DeleteRecords (move a partition's log start
//! offset forward, deleting the records before it).
//!
//! CreatePartitions is a controller request (the bootstrap broker forwards it); DeleteRecords must reach each
//! partition's leader, like ListOffsets.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::{
    create_partitions_request::CreatePartitionsTopic,
    delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic},
    ApiKey, CreatePartitionsRequest, DeleteRecordsRequest,
};

use crate::client::{group_by_leader, topic_name, Client, TopicMetadata};
use crate::errors::{self, describe, error_name};

mod versions {
    pub const CREATE_PARTITIONS: (i16, i16) = (0, 3);
    pub const DELETE_RECORDS: (i16, i16) = (0, 2);
}

/// How long the broker may take for either request.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// Metadata polls while waiting for new partitions to get leaders (about 15 s with the delays used).
const NEW_PARTITION_POLLS: u32 = 40;

const INVALID_PARTITIONS: i16 = 37;
const POLICY_VIOLATION: i16 = 44;
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// The outcome of DeleteRecords for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletedRecords {
    /// The partition's log start offset after the deletion (its "low watermark").
    LogStart(i64),
    /// The broker's error code for this partition.
    Failed(i16),
}

impl Client {
    /// Grows `topic` to `total` partitions (CreatePartitions), then waits until the broker's metadata shows them
    /// all with leaders, so the next command finds them. Kafka cannot shrink a topic; asking for fewer or the
    /// same number of partitions is refused with the current count in the message.
    pub async fn create_partitions(&mut self, topic: &str, total: i32) -> Result<TopicMetadata> {
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(total)
                .with_assignments(None)])
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_validate_only(false);
        let conn = self.bootstrap_conn();
        let version = conn
            .pick_version(ApiKey::CreatePartitions, versions::CREATE_PARTITIONS)
            .map_err(|_| {
                anyhow!(
                    "broker at {} does not support CreatePartitions, so it cannot add partitions",
                    conn.addr()
                )
            })?;
        let response = conn.send_version(&request, version).await?;
        let result = response
            .results
            .into_iter()
            .find(|r| r.name.0.as_str() == topic)
            .ok_or_else(|| anyhow!("broker answered CreatePartitions without topic '{topic}'"))?;
        let message = result.error_message.as_ref().map(|m| m.as_str());
        match result.error_code {
            0 => {}
            errors::UNKNOWN_TOPIC_OR_PARTITION => return Err(errors::topic_missing(topic)),
            INVALID_PARTITIONS | POLICY_VIOLATION => bail!(
                "cannot grow topic '{topic}' to {total} partitions: {}; Kafka can only add partitions, \
                 see the current count with `annal topic describe {topic}`",
                describe(result.error_code, message)
            ),
            code => bail!(
                "cannot add partitions to topic '{topic}': {}",
                describe(code, message)
            ),
        }
        let mut delay = Duration::from_millis(20);
        for poll in 1..=NEW_PARTITION_POLLS {
            let mut topics = self.metadata(Some(&[topic])).await?;
            if let Some((0, meta)) = topics.pop() {
                let ready = meta.partitions.len() >= usize::try_from(total).unwrap_or(usize::MAX)
                    && meta.partitions.iter().all(|p| p.leader >= 0);
                if ready {
                    return Ok(meta);
                }
            }
            if poll < NEW_PARTITION_POLLS {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
        bail!(
            "the broker accepted growing topic '{topic}' to {total} partitions, but its metadata does not show \
             them all with a leader yet; check with `annal topic describe {topic}` in a moment"
        )
    }

    /// DeleteRecords: for each partition, deletes the records before the given offset (the new log start), at
    /// the partition's leader. Offset -1 means "up to the high watermark" (everything). Per partition: the new
    /// log start offset or the broker's error code.
    pub async fn delete_records(
        &mut self,
        topic: &TopicMetadata,
        offsets: &BTreeMap<i32, i64>,
    ) -> Result<BTreeMap<i32, DeletedRecords>> {
        let partitions: Vec<i32> = offsets.keys().copied().collect();
        let mut out = BTreeMap::new();
        for (leader, parts) in group_by_leader(topic, &partitions)? {
            let request = DeleteRecordsRequest::default()
                .with_timeout_ms(ADMIN_TIMEOUT_MS)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(topic_name(&topic.name))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|p| {
                                DeleteRecordsPartition::default()
                                    .with_partition_index(p.index)
                                    .with_offset(offsets.get(&p.index).copied().unwrap_or(-1))
                            })
                            .collect(),
                    )]);
            let conn = self.node(leader).await?;
            if conn
                .pick_version(ApiKey::DeleteRecords, versions::DELETE_RECORDS)
                .is_err()
            {
                bail!(
                    "broker {leader} does not support DeleteRecords, so it cannot trim partitions"
                );
            }
            let response = match conn.send(&request, versions::DELETE_RECORDS).await {
                Ok((r, _)) => r,
                Err(e) => {
                    self.forget_node(leader);
                    return Err(e.context(format!(
                        "DeleteRecords for topic '{}' at broker {leader}",
                        topic.name
                    )));
                }
            };
            for p in response.topics.into_iter().flat_map(|t| t.partitions) {
                let result = match p.error_code {
                    0 => DeletedRecords::LogStart(p.low_watermark),
                    code => DeletedRecords::Failed(code),
                };
                out.insert(p.partition_index, result);
            }
        }
        for p in &partitions {
            if !out.contains_key(p) {
                bail!(
                    "broker did not answer DeleteRecords for partition {p} of topic '{}'",
                    topic.name
                );
            }
        }
        Ok(out)
    }
}

/// What a DeleteRecords error means for the person who asked, naming the partition.
pub fn delete_records_error(topic: &str, partition: i32, offset: i64, code: i16) -> String {
    match code {
        OFFSET_OUT_OF_RANGE => format!(
            "cannot trim partition {partition} of topic '{topic}' to offset {offset}: it is beyond the high \
             watermark (OFFSET_OUT_OF_RANGE); see the partition's end with `annal topic describe {topic}`"
        ),
        code if errors::is_retriable(code) => format!(
            "cannot trim partition {partition} of topic '{topic}': {} (the leader may have moved); try again",
            error_name(code)
        ),
        code => format!(
            "cannot trim partition {partition} of topic '{topic}': {}",
            error_name(code)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_errors_name_the_partition_and_the_fix() {
        let e = delete_records_error("orders", 2, 500, OFFSET_OUT_OF_RANGE);
        assert!(
            e.contains("partition 2 of topic 'orders'")
                && e.contains("annal topic describe orders"),
            "{e}"
        );
        assert!(delete_records_error("t", 0, 1, 6).contains("try again"));
    }
}
