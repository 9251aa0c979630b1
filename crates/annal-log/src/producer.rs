//! Idempotent producer state: per producer id, its epoch and its last batches' sequence ranges, so retries are
//! recognised and gaps refused. Kept per partition, snapshotted to `<offset>.snapshot` files in Kafka's format
//! and rebuilt from batch headers after a crash.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::batch::{self, BatchHeader};
use crate::control::{EndTxnMarker, TxnOutcome};
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

/// A transaction a marker ended: the producer's records in `[first_offset, last_offset]`, `last_offset` being
/// the marker's offset (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub outcome: TxnOutcome,
}

/// Completed transactions whose markers the high watermark has not passed yet are remembered (for the first
/// unstable offset) up to this many; past it the oldest are forgotten, which can only let the LSO advance
/// early on a leader that is about to lose its uncommitted tail.
pub const UNREPLICATED_TXNS_MAX: usize = 65_536;

/// Producer state of one partition.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    /// (first offset, producer id) of every open transaction: the smallest first offset is the first unstable
    /// offset. Kept in step with `ProducerEntry::current_txn_first_offset`.
    ongoing: BTreeSet<(i64, i64)>,
    /// Completed transactions in marker order whose marker may still be at or past the high watermark
    /// (Kafka's `unreplicatedTxns`): until the marker is committed, a failover can bring the transaction back,
    /// so the LSO stays at its start.
    unreplicated: VecDeque<CompletedTxn>,
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
        let committed = self.producers.get(&header.producer_id);
        let Some(in_request) = staged.get(&header.producer_id) else {
            return check_against(committed, header);
        };
        // A duplicate is a retry of a batch already in the log, found in the state before this request (as
        // Kafka's `ProducerStateManager.lastEntry`). A batch that repeats one earlier in the same request is
        // not a retry of anything written: reporting it as a duplicate would acknowledge the request while
        // appending none of it, so it is out of sequence.
        if let Some(SequenceCheck::Duplicate(meta)) =
            committed.and_then(|c| check_against(Some(c), header).ok())
        {
            return Ok(SequenceCheck::Duplicate(meta));
        }
        match check_against(Some(in_request), header)? {
            SequenceCheck::Duplicate(_) => Err(LogError::OutOfOrderSequence {
                producer_id: header.producer_id,
                epoch: header.producer_epoch,
                sequence: header.base_sequence,
                expected: batch::add_sequence(
                    in_request
                        .last_sequence()
                        .expect("a duplicate was found among its batches"),
                    1,
                ),
            }),
            append => Ok(append),
        }
    }

    /// Checks a transaction marker the coordinator writes, as Kafka's `ProducerAppendInfo.appendEndTxnMarker`:
    /// an older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch
    /// TRANSACTION_COORDINATOR_FENCED. A marker for a producer without state here is accepted.
    pub fn check_marker(
        &self,
        header: &BatchHeader,
        marker: &EndTxnMarker,
        staged: &HashMap<i64, ProducerEntry>,
    ) -> crate::Result<()> {
        let producer_id = header.producer_id;
        let Some(entry) = staged
            .get(&producer_id)
            .or_else(|| self.producers.get(&producer_id))
        else {
            return Ok(());
        };
        if header.producer_epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id,
                epoch: header.producer_epoch,
                current: entry.epoch,
            });
        }
        if marker.coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced {
                producer_id,
                coordinator_epoch: marker.coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records an appended batch (offsets final). `staged` is updated, to be committed with [`Self::commit`].
    /// `marker` is the batch's transaction marker, for a control batch. Returns the transaction it ended.
    pub fn stage(
        &self,
        header: &BatchHeader,
        marker: Option<&EndTxnMarker>,
        staged: &mut HashMap<i64, ProducerEntry>,
    ) -> Option<CompletedTxn> {
        if !header.has_producer_id() {
            return None;
        }
        let entry = staged.entry(header.producer_id).or_insert_with(|| {
            self.producers
                .get(&header.producer_id)
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(header.producer_id, header.producer_epoch))
        });
        apply(entry, header, marker)
    }

    pub fn commit(&mut self, staged: HashMap<i64, ProducerEntry>) {
        for (producer_id, entry) in staged {
            let before = self
                .producers
                .get(&producer_id)
                .and_then(|e| e.current_txn_first_offset);
            self.track_ongoing(producer_id, before, entry.current_txn_first_offset);
            self.producers.insert(producer_id, entry);
        }
    }

    /// Applies a batch read back from the log (recovery and replication): no checks, the log is the truth.
    /// Returns the transaction a marker ended; the caller records it ([`Self::record_completed`]).
    pub fn replay(
        &mut self,
        header: &BatchHeader,
        marker: Option<&EndTxnMarker>,
    ) -> Option<CompletedTxn> {
        if !header.has_producer_id() {
            return None;
        }
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry::new(header.producer_id, header.producer_epoch));
        let before = entry.current_txn_first_offset;
        let completed = apply(entry, header, marker);
        let after = entry.current_txn_first_offset;
        self.track_ongoing(header.producer_id, before, after);
        completed
    }

    fn track_ongoing(&mut self, producer_id: i64, before: Option<i64>, after: Option<i64>) {
        if before == after {
            return;
        }
        if let Some(first) = before {
            self.ongoing.remove(&(first, producer_id));
        }
        if let Some(first) = after {
            self.ongoing.insert((first, producer_id));
        }
    }

    /// Remembers a transaction a marker ended until the high watermark passes its marker
    /// ([`Self::on_high_watermark`]).
    pub fn record_completed(&mut self, completed: CompletedTxn) {
        debug_assert!(self
            .unreplicated
            .back()
            .is_none_or(|c| c.last_offset < completed.last_offset));
        if self.unreplicated.len() == UNREPLICATED_TXNS_MAX {
            self.unreplicated.pop_front();
        }
        self.unreplicated.push_back(completed);
    }

    /// Forgets completed transactions whose marker is below `high_watermark` (committed on every replica).
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        while self
            .unreplicated
            .front()
            .is_some_and(|c| c.last_offset < high_watermark)
        {
            self.unreplicated.pop_front();
        }
    }

    /// The first unstable offset: the smallest first offset of an open transaction, or of a completed one whose
    /// marker is at or past `high_watermark`. `None` when nothing is unstable. The last stable offset is
    /// `min(high watermark, this)`.
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let open = self.ongoing.first().map(|(first, _)| *first);
        let unreplicated = self
            .unreplicated
            .iter()
            .filter(|c| c.last_offset >= high_watermark)
            .map(|c| c.first_offset)
            .min();
        match (open, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The partition's first unstable offset right after `completed` ended (Kafka's `lastStableOffset(completedTxn)`),
    /// for its transaction index entry: the first offset of another open transaction, else the marker's next.
    pub fn last_stable_offset_after(&self, completed: &CompletedTxn) -> i64 {
        self.ongoing
            .iter()
            .find(|(_, producer_id)| *producer_id != completed.producer_id)
            .map_or(completed.last_offset + 1, |(first, _)| *first)
    }

    /// How many transactions are open.
    pub fn ongoing_count(&self) -> usize {
        self.ongoing.len()
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
    /// coordinator epoch, current transaction first offset). Like Kafka, only the last batch is kept per producer;
    /// a producer with no batch at its epoch (a marker bumped it) is written with last sequence and last offset
    /// -1, so its epoch and coordinator epoch still fence after a restart. Open transactions are kept through
    /// the current transaction first offset.
    pub fn snapshot_bytes(&self) -> Vec<u8> {
        let mut producers: Vec<&ProducerEntry> = self.producers.values().collect();
        producers.sort_by_key(|e| e.producer_id);
        let mut body = Vec::with_capacity(4 + producers.len() * 46);
        body.extend_from_slice(&(producers.len() as i32).to_be_bytes());
        for entry in producers {
            let (last_sequence, last_offset, offset_delta, timestamp) = match entry.batches.back() {
                Some(last) => (
                    last.last_sequence,
                    last.last_offset,
                    (last.last_offset - last.first_offset) as i32,
                    last.max_timestamp,
                ),
                None => (-1, -1, 0, entry.last_timestamp),
            };
            body.extend_from_slice(&entry.producer_id.to_be_bytes());
            body.extend_from_slice(&entry.epoch.to_be_bytes());
            body.extend_from_slice(&last_sequence.to_be_bytes());
            body.extend_from_slice(&last_offset.to_be_bytes());
            body.extend_from_slice(&offset_delta.to_be_bytes());
            body.extend_from_slice(&timestamp.to_be_bytes());
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
            // A producer without a batch at its epoch (a marker bumped it) has last sequence and offset -1.
            let no_batch = last_sequence == -1 && last_offset == -1 && offset_delta == 0;
            // The batch's first offset, last_offset - offset_delta, must be an offset (>= 0): a larger delta
            // would restore a batch that starts before the log does (and, from i64::MIN, overflow).
            let malformed = producer_id < 0
                || txn_first < -1
                || (!no_batch
                    && (offset_delta < 0
                        || last_sequence < 0
                        || last_offset < i64::from(offset_delta)));
            if malformed || state.producers.contains_key(&producer_id) {
                return Err(format!(
                    "snapshot entry for producer {producer_id} is malformed"
                ));
            }
            let mut entry = ProducerEntry::new(producer_id, epoch);
            if !no_batch {
                entry.batches.push_back(BatchMetadata {
                    first_sequence: batch::sub_sequence(last_sequence, offset_delta),
                    last_sequence,
                    first_offset: last_offset - i64::from(offset_delta),
                    last_offset,
                    max_timestamp: timestamp,
                });
            }
            entry.last_timestamp = timestamp;
            entry.coordinator_epoch = coordinator_epoch;
            entry.current_txn_first_offset = (txn_first >= 0).then_some(txn_first);
            if let Some(first) = entry.current_txn_first_offset {
                state.ongoing.insert((first, producer_id));
            }
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
    if !header.is_transactional()
        && entry.current_txn_first_offset.is_some()
        && epoch == entry.epoch
    {
        return Err(LogError::InvalidTxnState {
            producer_id,
            reason: "a non-transactional batch arrived while the producer's transaction is open"
                .into(),
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

/// Folds a batch into its producer's entry; returns the transaction a marker ended.
fn apply(
    entry: &mut ProducerEntry,
    header: &BatchHeader,
    marker: Option<&EndTxnMarker>,
) -> Option<CompletedTxn> {
    if header.is_control() {
        // Only transaction markers mean anything to producer state (other control types are KRaft's).
        let marker = marker?;
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        // The marker ends the producer's open transaction; it carries no sequence. Like Kafka, a marker with
        // no open transaction still completes one, spanning just the marker.
        let first_offset = entry
            .current_txn_first_offset
            .take()
            .unwrap_or(header.base_offset);
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = header.max_timestamp;
        return Some(CompletedTxn {
            producer_id: entry.producer_id,
            first_offset,
            last_offset: header.base_offset,
            outcome: marker.outcome,
        });
    }
    if header.producer_epoch != entry.epoch {
        entry.epoch = header.producer_epoch;
        entry.batches.clear();
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
    None
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
            state.stage(h, None, &mut staged);
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

    #[test]
    fn snapshot_keeps_open_transactions_and_epochs_bumped_by_markers() {
        let mut state = ProducerStateManager::default();
        let mut txn = header(7, 0, 0, 2, 10);
        txn.attributes |= crate::batch::ATTR_TRANSACTIONAL;
        let mut staged = HashMap::new();
        state.stage(&txn, None, &mut staged);
        state.commit(staged);
        // Producer 8: a marker at a new epoch, no batch at that epoch.
        let mut marker = header(8, 5, -1, 1, 20);
        marker.attributes |= crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
        let end = EndTxnMarker {
            outcome: TxnOutcome::Abort,
            coordinator_epoch: 3,
        };
        assert!(state.replay(&marker, Some(&end)).is_some());
        assert_eq!(state.first_unstable_offset(i64::MAX), Some(10));
        let restored = ProducerStateManager::from_snapshot_bytes(&state.snapshot_bytes()).unwrap();
        assert_eq!(restored.get(7).unwrap().current_txn_first_offset, Some(10));
        assert_eq!(restored.first_unstable_offset(i64::MAX), Some(10));
        let fenced = restored.get(8).unwrap();
        assert_eq!((fenced.epoch, fenced.coordinator_epoch), (5, 3));
        assert!(fenced.batches.is_empty());
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
