//! Transactional offset commits (TxnOffsetCommit): offsets written to `__consumer_offsets` as transactional
//! batches of the producer, held pending per (partition, producer id), and made the group's committed offsets
//! only when the transaction's COMMIT marker reaches that partition ([`State::complete_transaction`]); an ABORT
//! drops them. Replaying a partition does the same with the markers in its log.

use std::collections::BTreeMap;
use std::time::Instant;

use annal_log::batch::ProducerFields;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;

use super::classic::{wall_ms, CommitWait, OffsetEntry, Owned, State, Writer};
use super::store::Record;
use super::{code, TopicCatalog};

/// (group, topic, partition) -> the offset a transaction would commit.
pub(super) type PendingOffsets = BTreeMap<(String, String, i32), OffsetEntry>;

/// The open transactions' offsets of the partitions this coordinator owns, by (partition, producer id).
#[derive(Default)]
pub(super) struct TxnPending {
    pub by_producer: BTreeMap<(u32, i64), PendingOffsets>,
}

impl TxnPending {
    pub fn drop_partition(&mut self, partition: u32) {
        self.by_producer.retain(|(p, _), _| *p != partition);
    }
}

impl Writer {
    /// Appends `records` as one transactional batch of `producer_id` at `producer_epoch`. The coordinator owns
    /// this producer's sequence numbers in `__consumer_offsets` (the producer itself never writes there), so it
    /// continues from what the partition's producer state holds. Returns the error code to answer on failure:
    /// the log's (INVALID_PRODUCER_EPOCH for a fenced producer) or COORDINATOR_NOT_AVAILABLE.
    pub fn append_transactional(
        &mut self,
        partition: u32,
        records: &[Record],
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(), i16> {
        if self.closed {
            return Err(code::NOT_COORDINATOR);
        }
        let Some(Owned::Active {
            part,
            records: count,
            ..
        }) = self.owned.get_mut(&partition)
        else {
            return Err(code::NOT_COORDINATOR);
        };
        let base_sequence = part.with_producer_state(|s| {
            s.producers()
                .find(|p| p.producer_id == producer_id && p.epoch == producer_epoch)
                .and_then(|p| p.last_sequence())
                .map_or(0, |last| annal_log::batch::add_sequence(last, 1))
        });
        let now = wall_ms();
        let producer = ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence,
            transactional: true,
        };
        let mut bytes = super::store::build_with(records, now, producer);
        match part.append_records_to_leader(&mut bytes, -1, now) {
            Ok(appended) => {
                *count += records.len() as u64;
                self.waits.push(CommitWait {
                    part: part.clone(),
                    last_offset: appended.info.last_offset,
                    durable: appended.durable,
                });
                Ok(())
            }
            Err(e) => {
                tracing::warn!(partition = %part.name(), producer_id, error = %e, "cannot write transactional offsets");
                Err(match e.code() {
                    47 | 90 => e.code(),
                    6 => code::NOT_COORDINATOR,
                    _ => code::COORDINATOR_NOT_AVAILABLE,
                })
            }
        }
    }
}

impl State {
    /// TxnOffsetCommit: validated like OffsetCommit when the request names a member (v3+, KIP-447), written as
    /// the producer's transactional batch, visible only once the transaction commits.
    pub fn txn_offset_commit(
        &mut self,
        req: TxnOffsetCommitRequest,
        topics: &dyn TopicCatalog,
        now: Instant,
    ) -> TxnOffsetCommitResponse {
        let group_id = req.group_id.0.to_string();
        let exists = |topic: &str, p: i32| topics.has_partition(topic, p);
        let mut error = if group_id.is_empty() {
            code::INVALID_GROUP_ID
        } else if req.generation_id >= 0 || !req.member_id.is_empty() {
            let as_commit = OffsetCommitRequest::default()
                .with_group_id(req.group_id.clone())
                .with_generation_id_or_member_epoch(req.generation_id)
                .with_member_id(req.member_id.clone())
                .with_group_instance_id(req.group_instance_id.clone());
            self.validate_commit(&as_commit, 8, now)
        } else {
            code::NONE
        };
        let now_ms = wall_ms();
        let mut to_write: Vec<(String, i32, OffsetEntry)> = Vec::new();
        let mut positions: Vec<(usize, i32, Option<i16>)> = Vec::new();
        for (ti, topic) in req.topics.iter().enumerate() {
            for p in &topic.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or("");
                let refused = if !exists(topic.name.0.as_str(), p.partition_index) {
                    Some(code::UNKNOWN_TOPIC_OR_PARTITION)
                } else if metadata.len() > self.config.offset_metadata_max_bytes {
                    Some(code::OFFSET_METADATA_TOO_LARGE)
                } else {
                    to_write.push((
                        topic.name.0.to_string(),
                        p.partition_index,
                        OffsetEntry {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: metadata.to_string(),
                            commit_timestamp: now_ms,
                            expire_timestamp: None,
                        },
                    ));
                    None
                };
                positions.push((ti, p.partition_index, refused));
            }
        }
        if error == code::NONE && !to_write.is_empty() {
            let partition = self.partition_for_group(&group_id);
            let group = self.group_mut_or_create(&group_id);
            let records: Vec<Record> = to_write
                .iter()
                .map(|(t, p, e)| group.offset_record(t, *p, e))
                .collect();
            match self.writer.append_transactional(
                partition,
                &records,
                req.producer_id.0,
                req.producer_epoch,
            ) {
                Ok(()) => {
                    let pending = self
                        .txn_pending
                        .by_producer
                        .entry((partition, req.producer_id.0))
                        .or_default();
                    for (t, p, e) in to_write {
                        pending.insert((group_id.clone(), t, p), e);
                    }
                }
                Err(e) => error = e,
            }
        }
        let mut resp = TxnOffsetCommitResponse::default();
        for topic in &req.topics {
            resp.topics
                .push(TxnOffsetCommitResponseTopic::default().with_name(topic.name.clone()));
        }
        for (ti, index, refused) in positions {
            resp.topics[ti].partitions.push(
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(index)
                    .with_error_code(refused.unwrap_or(error)),
            );
        }
        resp
    }

    /// Whether an open transaction holds an offset of `group` for `topic`-`partition` (OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for it, KIP-447).
    pub fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        let key = (group.to_string(), topic.to_string(), partition);
        self.txn_pending
            .by_producer
            .values()
            .any(|pending| pending.contains_key(&key))
    }

    /// A transaction marker of `producer_id` reached `partition`: its pending offsets become the groups'
    /// committed offsets (COMMIT) or are dropped (ABORT). Returns how many offsets it applied.
    pub fn complete_transaction(
        &mut self,
        partition: u32,
        producer_id: i64,
        commit: bool,
    ) -> usize {
        let Some(pending) = self
            .txn_pending
            .by_producer
            .remove(&(partition, producer_id))
        else {
            return 0;
        };
        if !commit {
            return 0;
        }
        let applied = pending.len();
        for ((group, topic, p), entry) in pending {
            self.group_mut_or_create(&group)
                .offsets
                .insert((topic, p), entry);
        }
        applied
    }
}

/// What replaying a partition found of transactions: offsets of transactions still open at the log end.
pub(super) fn open_at_end(
    partition: u32,
    pending: BTreeMap<i64, PendingOffsets>,
) -> impl Iterator<Item = ((u32, i64), PendingOffsets)> {
    pending
        .into_iter()
        .filter(|(_, offsets)| !offsets.is_empty())
        .map(move |(producer, offsets)| ((partition, producer), offsets))
}
