//! Transactions as the cleaner sees them, Kafka's `CleanedTransactionMetadata`: walking a pass's batches in offset
//! order, it says which data batches belong to aborted transactions (their records go) and which transaction
//! markers no longer guard any data (they may go once their delete horizon has passed).
//!
//! The aborted transactions come from the log's transaction indexes (snapshotted by `Log::begin_clean`), sorted by
//! first offset. A transaction is "entered" when the walk reaches its first offset; a producer's transactional
//! batches from then until its ABORT marker are aborted. A marker may go only when the walk saw no batch of its
//! transaction in this pass: all of its data has been removed by earlier passes, so no consumer needs the marker
//! to skip or end anything. Since every pass walks the log from its start, the data always comes before the
//! marker in the walk.

use std::collections::{HashMap, HashSet};

use crate::batch::BatchHeader;
use crate::control::{self, TxnOutcome};
use crate::txn_index::AbortedTxn;

/// What a control batch is, for the cleaner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ControlKind {
    /// A control batch whose record an earlier pass removed: nothing depends on it.
    Empty,
    Marker(TxnOutcome),
    /// Another control type (or one that does not read): kept as it is.
    Other,
}

impl ControlKind {
    pub(crate) fn of(bytes: &[u8], header: &BatchHeader) -> ControlKind {
        if header.records_count == 0 {
            return ControlKind::Empty;
        }
        match control::parse_marker(bytes) {
            Ok(Some(marker)) => ControlKind::Marker(marker.outcome),
            Ok(None) | Err(_) => ControlKind::Other,
        }
    }
}

/// What the walk knows about one aborted transaction it has entered.
#[derive(Debug)]
struct OngoingAbort {
    entry: AbortedTxn,
    /// Whether a batch of the transaction was seen in this pass (then the marker and its index entry stay).
    data_seen: bool,
}

#[derive(Debug)]
pub(crate) struct TxnTracker<'a> {
    /// Sorted by first offset; `next` is the first not entered yet.
    aborted: &'a [AbortedTxn],
    next: usize,
    /// Producers whose committed (or still undecided, which cannot happen below the LSO) transaction had a batch
    /// in this pass since their last marker.
    committed_with_data: HashSet<i64>,
    aborted_open: HashMap<i64, OngoingAbort>,
}

/// What a control batch's cleaning may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ControlDecision {
    /// No data of its transaction is left: the marker may go once its delete horizon has passed.
    pub can_discard: bool,
    /// The aborted transaction to index in the cleaned segment (its data is still there).
    pub index_entry: Option<AbortedTxn>,
}

impl<'a> TxnTracker<'a> {
    /// `aborted` must be sorted by first offset and hold only transactions whose marker is at or past the first
    /// batch walked (an earlier marker would never be seen to end its transaction).
    pub(crate) fn new(aborted: &'a [AbortedTxn]) -> TxnTracker<'a> {
        debug_assert!(aborted
            .windows(2)
            .all(|w| w[0].first_offset <= w[1].first_offset));
        TxnTracker {
            aborted,
            next: 0,
            committed_with_data: HashSet::new(),
            aborted_open: HashMap::new(),
        }
    }

    fn enter_up_to(&mut self, offset: i64) {
        while let Some(entry) = self.aborted.get(self.next) {
            if entry.first_offset > offset {
                break;
            }
            self.aborted_open
                .entry(entry.producer_id)
                .or_insert(OngoingAbort {
                    entry: *entry,
                    data_seen: false,
                });
            self.next += 1;
        }
    }

    /// A data batch: true if it belongs to an aborted transaction (its records go).
    pub(crate) fn on_data_batch(&mut self, header: &BatchHeader) -> bool {
        self.enter_up_to(header.last_offset());
        if !header.is_transactional() {
            return false;
        }
        match self.aborted_open.get_mut(&header.producer_id) {
            Some(abort) => {
                abort.data_seen = true;
                true
            }
            None => {
                self.committed_with_data.insert(header.producer_id);
                false
            }
        }
    }

    /// A control batch of `kind`.
    pub(crate) fn on_control_batch(
        &mut self,
        header: &BatchHeader,
        kind: ControlKind,
    ) -> ControlDecision {
        self.enter_up_to(header.last_offset());
        let producer_id = header.producer_id;
        match kind {
            ControlKind::Empty => ControlDecision {
                can_discard: true,
                index_entry: None,
            },
            ControlKind::Other => ControlDecision {
                can_discard: false,
                index_entry: None,
            },
            ControlKind::Marker(TxnOutcome::Abort) => {
                match self.aborted_open.remove(&producer_id) {
                    Some(abort) if abort.data_seen => ControlDecision {
                        can_discard: false,
                        index_entry: Some(abort.entry),
                    },
                    _ => ControlDecision {
                        can_discard: true,
                        index_entry: None,
                    },
                }
            }
            ControlKind::Marker(TxnOutcome::Commit) => ControlDecision {
                can_discard: !self.committed_with_data.remove(&producer_id),
                index_entry: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{build_batch, ProducerFields};
    use crate::control::{build_marker_batch, EndTxnMarker};

    fn data(producer_id: i64, base_offset: i64, transactional: bool) -> BatchHeader {
        let mut header = BatchHeader::parse(&build_batch(
            &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
            &[0],
            ProducerFields {
                producer_id,
                producer_epoch: 0,
                base_sequence: 0,
                transactional,
            },
        ))
        .unwrap();
        header.base_offset = base_offset;
        header
    }

    fn marker(producer_id: i64, offset: i64, outcome: TxnOutcome) -> (BatchHeader, ControlKind) {
        let bytes = build_marker_batch(
            producer_id,
            0,
            EndTxnMarker {
                outcome,
                coordinator_epoch: 0,
            },
            0,
        );
        let mut header = BatchHeader::parse(&bytes).unwrap();
        let kind = ControlKind::of(&bytes, &header);
        assert_eq!(kind, ControlKind::Marker(outcome));
        header.base_offset = offset;
        (header, kind)
    }

    #[test]
    fn aborted_data_goes_and_markers_stay_while_their_data_does() {
        // Producer 1 aborts [0, 3], producer 2 commits [1, 4], producer 1 aborts again at [5, 6] with no data
        // left (an earlier pass removed it), producer 3 is not transactional.
        let aborted = [
            AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 3,
                last_stable_offset: 1,
            },
            AbortedTxn {
                producer_id: 1,
                first_offset: 5,
                last_offset: 6,
                last_stable_offset: 7,
            },
        ];
        let mut txns = TxnTracker::new(&aborted);
        assert!(txns.on_data_batch(&data(1, 0, true)));
        assert!(!txns.on_data_batch(&data(2, 1, true)));
        assert!(!txns.on_data_batch(&data(3, 2, false)));
        let (h, k) = marker(1, 3, TxnOutcome::Abort);
        assert_eq!(
            txns.on_control_batch(&h, k),
            ControlDecision {
                can_discard: false,
                index_entry: Some(aborted[0])
            }
        );
        let (h, k) = marker(2, 4, TxnOutcome::Commit);
        assert!(!txns.on_control_batch(&h, k).can_discard);
        let (h, k) = marker(1, 6, TxnOutcome::Abort);
        assert_eq!(
            txns.on_control_batch(&h, k),
            ControlDecision {
                can_discard: true,
                index_entry: None
            }
        );
        let (h, k) = marker(2, 7, TxnOutcome::Commit);
        assert!(
            txns.on_control_batch(&h, k).can_discard,
            "a commit with no data seen since the last marker"
        );
        // Producer 1's next transaction is not aborted: its data stays.
        assert!(!txns.on_data_batch(&data(1, 8, true)));
    }
}
