//! Kafka's transaction state machine (`TransactionState` and `TransactionMetadata` in Kafka's
//! transaction-coordinator module): the states, their log ids, the legal transitions, and the metadata of one
//! transactional id with the transition in flight.

use std::collections::BTreeSet;

use super::records::TxnLogValue;

/// `TransactionState`, with Kafka's ids (the `TransactionStatus` byte of `TransactionLogValue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction in progress (a producer id is assigned).
    Empty,
    /// Partitions were added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) was accepted; markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fence; markers are being written.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// The transactional id expired; written as a tombstone.
    Dead,
    /// In memory only: the epoch is being bumped to fence a producer before aborting its transaction (Kafka
    /// writes it as PrepareAbort).
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions and ListTransactions use (Kafka's `TransactionState.stateName`).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Kafka's `validPreviousStates`: the states this one may be entered from.
    fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            // Transaction version 2 also aborts a transaction with no partitions (Empty or Complete*): the
            // client cannot know whether its produce requests added any, so it always ends what it began.
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn can_follow(self, previous: TxnState) -> bool {
        self.valid_previous().contains(&previous)
    }

    /// Whether the transaction is finished (markers written or nothing to write).
    pub fn is_complete(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// `RecordBatch.NO_PRODUCER_EPOCH`: a transactional id whose first InitProducerId is being written.
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_PRODUCER_ID: i64 = -1;

/// What the coordinator knows of one transactional id (Kafka's `TransactionMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (an exhausted epoch), -1 if none.
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a producer's retried InitProducerId (KIP-360) is recognised.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    pub start_ms: i64,
    /// In memory only: when the current transaction's timeout started, on [`crate::monotonic_ms`]'s clock: at
    /// its start, or when this coordinator loaded it. The timeout is measured from here, not from the wall-clock
    /// `start_ms`: a stepped wall clock (NTP, an operator) would abort every open transaction at once (forward)
    /// or leave a hanging one open for as long as the step (backward), and the deterministic simulator's wall
    /// clock runs at the machine's speed, not the simulation's (a 10 s timeout there never expired). A
    /// coordinator that takes a transaction over gives it its whole timeout again (Kafka would count from
    /// `start_ms`): a transaction is aborted at most one timeout later than in Kafka, never earlier.
    pub timeout_origin_monotonic_ms: i64,
    pub last_update_ms: i64,
    /// The state a write in flight moves to; while set, other requests get CONCURRENT_TRANSACTIONS.
    pub pending: Option<TxnState>,
    /// The transaction version the client of the current transaction speaks (Kafka's
    /// `clientTransactionVersion`): 2 once a transaction-version-2 request (AddPartitionsToTxn v5 from a partition
    /// leader, EndTxn v5) touched it, else 0. At 2 every EndTxn bumps the epoch.
    pub client_version: i16,
    /// At transaction version 2, the producer id a Prepare record hands over to when the epoch is exhausted
    /// (installed by the Complete record), -1 otherwise.
    pub next_producer_id: i64,
}

impl TxnMetadata {
    /// A new transactional id: no epoch yet (the first InitProducerId makes it 0).
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            timeout_origin_monotonic_ms: crate::monotonic_ms(),
            last_update_ms: now_ms,
            pending: None,
            client_version: 0,
            next_producer_id: NO_PRODUCER_ID,
        }
    }

    /// Rebuilt from a replayed record.
    pub fn from_log(transactional_id: &str, v: &TxnLogValue) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: v.timeout_ms,
            state: v.state,
            partitions: v.partitions.clone(),
            start_ms: v.start_ms,
            timeout_origin_monotonic_ms: crate::monotonic_ms(),
            last_update_ms: v.last_update_ms,
            pending: None,
            client_version: v.client_transaction_version,
            next_producer_id: v.next_producer_id,
        }
    }

    /// The record that persists this metadata. PrepareEpochFence is never written: Kafka persists the fence
    /// as the PrepareAbort that follows it.
    pub fn to_log(&self) -> TxnLogValue {
        debug_assert_ne!(self.state, TxnState::PrepareEpochFence);
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: if self.state == TxnState::Empty {
                BTreeSet::new()
            } else {
                self.partitions.clone()
            },
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: self.client_version,
        }
    }

    /// Whether the open transaction has run past its `timeout_ms` at `now_monotonic_ms` ([`crate::monotonic_ms`]).
    pub fn timed_out(&self, now_monotonic_ms: i64) -> bool {
        self.timeout_origin_monotonic_ms
            .saturating_add(i64::from(self.timeout_ms))
            < now_monotonic_ms
    }

    /// Kafka's `isProducerEpochExhausted`: one bump is kept in reserve for fencing.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= i16::MAX - 1
    }

    /// Installs `next` (the target of a write that succeeded). Panics on a transition Kafka forbids: that is a
    /// coordinator bug, and applying it would corrupt the log's story.
    pub fn complete_transition(&mut self, next: TxnMetadata) {
        assert!(
            next.state.can_follow(self.state)
                || (self.pending == Some(TxnState::PrepareEpochFence)
                    && next.state == TxnState::PrepareAbort),
            "illegal transaction transition {:?} -> {:?} for {}",
            self.state,
            next.state,
            self.transactional_id
        );
        assert_eq!(next.transactional_id, self.transactional_id);
        *self = TxnMetadata {
            pending: None,
            ..next
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_id(s.id()), Some(s));
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::from_id(8), None);
    }

    #[test]
    fn kafkas_transitions() {
        use TxnState::*;
        assert!(Ongoing.can_follow(Empty));
        assert!(PrepareCommit.can_follow(Ongoing));
        assert!(!PrepareCommit.can_follow(Empty));
        assert!(CompleteCommit.can_follow(PrepareCommit));
        assert!(!CompleteCommit.can_follow(PrepareAbort));
        assert!(PrepareAbort.can_follow(PrepareEpochFence));
        assert!(!Dead.can_follow(Ongoing));
        assert!(Empty.can_follow(CompleteAbort));
        assert!(
            PrepareAbort.can_follow(Empty),
            "transaction version 2 aborts an empty transaction"
        );
        assert!(!PrepareCommit.can_follow(CompleteCommit));
    }

    #[test]
    #[should_panic(expected = "illegal transaction transition")]
    fn an_illegal_transition_stops() {
        let mut m = TxnMetadata::new("t", 1, 1000, 0);
        let next = TxnMetadata {
            state: TxnState::CompleteCommit,
            ..m.clone()
        };
        m.complete_transition(next);
    }
}
