//! Idempotent producer state: per producer id, its epoch and its last batches' sequence ranges, so retries are
//! recognised and gaps refused. Kept per partition, snapshotted to `<offset>.snapshot` files in Kafka's format
//! and rebuilt from batch headers after a crash.

use std::collections::{HashMap, VecDeque};

use crate::batch::{self, BatchHeader};
use crate::error::LogError;

/// How many recent batches per producer are remembered for deduplication (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence).
pub const BATCHES_REMEMBERED_MAX: usize = 5;

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// What a partition knows about one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// Oldest first; at most [`BATCHES_REMEMBERED_MAX`].
    pub batches: VecDeque<BatchMetadata>,
    /// Max timestamp of the producer's last batch (drives expiration).
    pub last_timestamp: i64,
    /// The epoch of the last transaction coordinator that wrote a marker for this producer (-1: none).
    pub coordinator_epoch: i32,
    /// First offset of the producer's open transaction, if any.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn new(producer_id: i64, epoch: i16) -> Self {
        ProducerEntry {
            producer_id,
            epoch,
            batches: VecDeque::new(),
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    pub fn last_sequence(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_sequence)
    }
}

/// The outcome of checking a batch against producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// A new batch in order: append it.
    Append,
    /// A retry of a batch already in the log: answer with its original offsets, append nothing.
    Duplicate(BatchMetadata),
}

/// Producer state of one partition.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStateManager {
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// All producers with state here, for `DescribeProducers`.
    pub fn producers(&self) -> impl Iterator<Item = &ProducerEntry> {
        self.producers.values()
    }

    /// Checks a producer's batch against what is known, as Kafka's `ProducerAppendInfo.checkSequence` does.
    /// `staged` holds entries already updated by earlier batches of the same append.
    pub fn check(
        &self,
        header: &BatchHeader,
        staged: &HashMap<i64, ProducerEntry>,
    ) -> crate::Result<SequenceCheck> {
        if !header.has_producer_id() {
            return Ok(SequenceCheck::Append);
        }
        let entry = staged
            .get(&header.producer_id)
            .or_else(|| self.producers.get(&header.producer_id));
        check_against(entry, header)
    }

    /// Records an appended batch (offsets final). `staged` is updated, to be committed with [`Self::commit`].
    pub fn stage(&self, header: &BatchHeader, staged: &mut HashMap<i64, ProducerEntry>) {
        if !header.has_producer_id() {
            return;
        }
        let entry = staged.entry(header.producer_id).or_insert_with(|| {
            self.producers
                .get(&header.producer_id)
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(header.producer_id, header.producer_epoch))
        });
        apply(entry, header);
    }

    pub fn commit(&mut self, staged: HashMap<i64, ProducerEntry>) {
        self.producers.extend(staged);
    }

    /// Applies a batch read back from the log (recovery and replication): no checks, the log is the truth.
    pub fn replay(&mut self, header: &BatchHeader) {
        if !header.has_producer_id() {
            return;
        }
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry::new(header.producer_id, header.producer_epoch));
        apply(entry, header);
    }

    /// Forgets producers idle for longer than `expiration_ms` that have no open transaction.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) <= expiration_ms
        });
        before - self.producers.len()
    }

    /// Encodes the state in Kafka's producer snapshot format (version 1): version i16, CRC-32C u32 of the rest,
    /// then an array of entries (producer id, epoch, last sequence, last offset, offset delta, timestamp,
    /// coordinator epoch, current transaction first offset). Like Kafka, only the last batch is kept per producer.
    pub fn snapshot_bytes(&self) -> Vec<u8> {
        let mut producers: Vec<&ProducerEntry> = self
            .producers
            .values()
            .filter(|e| !e.batches.is_empty())
            .collect();
        producers.sort_by_key(|e| e.producer_id);
        let mut body = Vec::with_capacity(4 + producers.len() * 46);
        body.extend_from_slice(&(producers.len() as i32).to_be_bytes());
        for entry in producers {
            let last = entry.batches.back().expect("filtered non-empty");
            body.extend_from_slice(&entry.producer_id.to_be_bytes());
            body.extend_from_slice(&entry.epoch.to_be_bytes());
            body.extend_from_slice(&last.last_sequence.to_be_bytes());
            body.extend_from_slice(&last.last_offset.to_be_bytes());
            body.extend_from_slice(&((last.last_offset - last.first_offset) as i32).to_be_bytes());
            body.extend_from_slice(&last.max_timestamp.to_be_bytes());
            body.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&entry.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&1i16.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a snapshot written by [`Self::snapshot_bytes`]; every length is checked against the bytes.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<ProducerStateManager, String> {
        const ENTRY_SIZE: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
        if bytes.len() < 10 {
            return Err(format!("{} bytes is too short for a snapshot", bytes.len()));
        }
        let version = batch::read_i16(bytes, 0);
        if version != 1 {
            return Err(format!("unsupported snapshot version {version}"));
        }
        let crc = batch::read_i32(bytes, 2) as u32;
        if crc32c::crc32c(&bytes[6..]) != crc {
            return Err("snapshot CRC mismatch".into());
        }
        let count = batch::read_i32(bytes, 6);
        let body = &bytes[10..];
        if count < 0 || body.len() != count as usize * ENTRY_SIZE {
            return Err(format!(
                "snapshot declares {count} entries but holds {} bytes",
                body.len()
            ));
        }
        let mut state = ProducerStateManager::default();
        for chunk in body.chunks_exact(ENTRY_SIZE) {
            let producer_id = batch::read_i64(chunk, 0);
            let epoch = batch::read_i16(chunk, 8);
            let last_sequence = batch::read_i32(chunk, 10);
            let last_offset = batch::read_i64(chunk, 14);
            let offset_delta = batch::read_i32(chunk, 22);
            let timestamp = batch::read_i64(chunk, 26);
            let coordinator_epoch = batch::read_i32(chunk, 34);
            let txn_first = batch::read_i64(chunk, 38);
            // The batch's first offset, last_offset - offset_delta, must be an offset (>= 0): a larger delta
            // would restore a batch that starts before the log does (and, from i64::MIN, overflow).
            if producer_id < 0
                || offset_delta < 0
                || last_sequence < 0
                || last_offset < i64::from(offset_delta)
            {
                return Err(format!(
                    "snapshot entry for producer {producer_id} is malformed"
                ));
            }
            let mut entry = ProducerEntry::new(producer_id, epoch);
            entry.batches.push_back(BatchMetadata {
                first_sequence: batch::sub_sequence(last_sequence, offset_delta),
                last_sequence,
                first_offset: last_offset - i64::from(offset_delta),
                last_offset,
                max_timestamp: timestamp,
            });
            entry.last_timestamp = timestamp;
            entry.coordinator_epoch = coordinator_epoch;
            entry.current_txn_first_offset = (txn_first >= 0).then_some(txn_first);
            state.producers.insert(producer_id, entry);
        }
        Ok(state)
    }
}

fn check_against(
    entry: Option<&ProducerEntry>,
    header: &BatchHeader,
) -> crate::Result<SequenceCheck> {
    let producer_id = header.producer_id;
    let epoch = header.producer_epoch;
    let sequence = header.base_sequence;
    let Some(entry) = entry else {
        // A producer we know nothing about must start at sequence 0.
        if sequence != 0 {
            return Err(LogError::UnknownProducerId {
                producer_id,
                sequence,
            });
        }
        return Ok(SequenceCheck::Append);
    };
    if epoch < entry.epoch {
        return Err(LogError::InvalidProducerEpoch {
            producer_id,
            epoch,
            current: entry.epoch,
        });
    }
    if epoch > entry.epoch || entry.batches.is_empty() {
        // A new epoch (or a producer with no batches yet) starts its sequences over.
        if sequence != 0 {
            return Err(LogError::OutOfOrderSequence {
                producer_id,
                epoch,
                sequence,
                expected: 0,
            });
        }
        return Ok(SequenceCheck::Append);
    }
    if let Some(duplicate) = entry
        .batches
        .iter()
        .find(|b| b.first_sequence == sequence && b.last_sequence == header.last_sequence())
    {
        return Ok(SequenceCheck::Duplicate(*duplicate));
    }
    let expected = batch::add_sequence(entry.last_sequence().expect("non-empty"), 1);
    if sequence != expected {
        return Err(LogError::OutOfOrderSequence {
            producer_id,
            epoch,
            sequence,
            expected,
        });
    }
    Ok(SequenceCheck::Append)
}

fn apply(entry: &mut ProducerEntry, header: &BatchHeader) {
    if header.producer_epoch != entry.epoch {
        entry.epoch = header.producer_epoch;
        entry.batches.clear();
    }
    if header.is_control() {
        // A transaction marker ends the producer's open transaction; it carries no sequence.
        entry.current_txn_first_offset = None;
        entry.last_timestamp = header.max_timestamp;
        return;
    }
    if header.is_transactional() && entry.current_txn_first_offset.is_none() {
        entry.current_txn_first_offset = Some(header.base_offset);
    }
    if entry.batches.len() == BATCHES_REMEMBERED_MAX {
        entry.batches.pop_front();
    }
    entry.batches.push_back(BatchMetadata {
        first_sequence: header.base_sequence,
        last_sequence: header.last_sequence(),
        first_offset: header.base_offset,
        last_offset: header.last_offset(),
        max_timestamp: header.max_timestamp,
    });
    entry.last_timestamp = header.max_timestamp;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{build_batch, ProducerFields};

    fn header(
        producer_id: i64,
        epoch: i16,
        base_sequence: i32,
        records: usize,
        base_offset: i64,
    ) -> BatchHeader {
        let values: Vec<crate::batch::KeyValue> = vec![(None, Some(b"v".as_slice())); records];
        let mut bytes = build_batch(
            &values,
            &vec![1000; records],
            ProducerFields {
                producer_id,
                producer_epoch: epoch,
                base_sequence,
                transactional: false,
            },
        );
        batch::assign_offset(&mut bytes, base_offset, 0);
        BatchHeader::parse(&bytes).unwrap()
    }

    fn append(state: &mut ProducerStateManager, h: &BatchHeader) -> crate::Result<SequenceCheck> {
        let mut staged = HashMap::new();
        let check = state.check(h, &staged)?;
        if check == SequenceCheck::Append {
            state.stage(h, &mut staged);
            state.commit(staged);
        }
        Ok(check)
    }

    #[test]
    fn in_order_batches_append_and_retries_are_duplicates() {
        let mut state = ProducerStateManager::default();
        assert_eq!(
            append(&mut state, &header(7, 0, 0, 3, 0)).unwrap(),
            SequenceCheck::Append
        );
        assert_eq!(
            append(&mut state, &header(7, 0, 3, 2, 3)).unwrap(),
            SequenceCheck::Append
        );
        match append(&mut state, &header(7, 0, 0, 3, 99)).unwrap() {
            SequenceCheck::Duplicate(meta) => {
                assert_eq!((meta.first_offset, meta.last_offset), (0, 2))
            }
            other => panic!("expected a duplicate, got {other:?}"),
        }
    }

    #[test]
    fn gaps_old_epochs_and_unknown_producers_are_refused() {
        let mut state = ProducerStateManager::default();
        append(&mut state, &header(7, 1, 0, 1, 0)).unwrap();
        assert!(matches!(
            append(&mut state, &header(7, 1, 5, 1, 1)),
            Err(LogError::OutOfOrderSequence { expected: 1, .. })
        ));
        assert!(matches!(
            append(&mut state, &header(7, 0, 1, 1, 1)),
            Err(LogError::InvalidProducerEpoch { current: 1, .. })
        ));
        assert!(matches!(
            append(&mut state, &header(8, 0, 4, 1, 1)),
            Err(LogError::UnknownProducerId { .. })
        ));
        assert_eq!(
            append(&mut state, &header(7, 2, 0, 1, 1)).unwrap(),
            SequenceCheck::Append
        );
    }

    #[test]
    fn snapshot_round_trips_the_last_batch() {
        let mut state = ProducerStateManager::default();
        append(&mut state, &header(7, 3, 0, 4, 10)).unwrap();
        let restored = ProducerStateManager::from_snapshot_bytes(&state.snapshot_bytes()).unwrap();
        let entry = restored.get(7).unwrap();
        assert_eq!(entry.epoch, 3);
        assert_eq!(
            entry.batches.back().unwrap(),
            state.get(7).unwrap().batches.back().unwrap()
        );
        let mut corrupt = state.snapshot_bytes();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(ProducerStateManager::from_snapshot_bytes(&corrupt).is_err());
    }

    /// A snapshot whose single entry has `last_offset` and `offset_delta` as given, with a correct CRC.
    fn snapshot_with(last_offset: i64, offset_delta: i32) -> Vec<u8> {
        let mut body = 1i32.to_be_bytes().to_vec();
        body.extend_from_slice(&77i64.to_be_bytes()); // producer id
        body.extend_from_slice(&0i16.to_be_bytes()); // epoch
        body.extend_from_slice(&5i32.to_be_bytes()); // last sequence
        body.extend_from_slice(&last_offset.to_be_bytes());
        body.extend_from_slice(&offset_delta.to_be_bytes());
        body.extend_from_slice(&1000i64.to_be_bytes()); // timestamp
        body.extend_from_slice(&(-1i32).to_be_bytes()); // coordinator epoch
        body.extend_from_slice(&(-1i64).to_be_bytes()); // no open transaction
        let mut out = 1i16.to_be_bytes().to_vec();
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Found by the producer_snapshot fuzz target: an offset delta larger than the last offset restored a batch
    /// starting at a negative offset (-65485..=51), and from i64::MIN the subtraction overflowed (a panic in
    /// debug builds).
    #[test]
    fn snapshot_entry_starting_before_offset_zero_is_refused() {
        assert!(ProducerStateManager::from_snapshot_bytes(&snapshot_with(51, 65_536)).is_err());
        assert!(ProducerStateManager::from_snapshot_bytes(&snapshot_with(-1, 0)).is_err());
        assert!(ProducerStateManager::from_snapshot_bytes(&snapshot_with(i64::MIN, 1)).is_err());
        let ok = ProducerStateManager::from_snapshot_bytes(&snapshot_with(51, 51)).unwrap();
        assert_eq!(ok.get(77).unwrap().batches.back().unwrap().first_offset, 0);
    }
}
