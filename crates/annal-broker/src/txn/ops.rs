//! The coordinator's operations, Kafka's `TransactionCoordinator.handle*`: each validates against the metadata
//! under the state lock, marks the transition pending, writes it outside the lock and installs it once written.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::markers::Marker;
use super::state::{TxnMetadata, TxnState, NO_PRODUCER_EPOCH};
use super::{code, log, Shared, TxnCoordinator};

/// DescribeTransactions' view of one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTxn {
    pub transactional_id: String,
    pub error_code: i16,
    pub state: &'static str,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: BTreeSet<(String, i32)>,
}

/// ListTransactions' filters (empty = any).
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// v1 (KIP-994): only transactions running longer than this; -1 = any.
    pub duration_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: &'static str,
}

/// The common checks of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn: the id maps to this producer at this
/// epoch and no write is in flight.
fn check_producer(m: &TxnMetadata, producer_id: i64, producer_epoch: i16) -> Result<(), i16> {
    if m.producer_id != producer_id {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if m.producer_epoch != producer_epoch {
        return Err(code::PRODUCER_FENCED);
    }
    if m.pending.is_some() {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    Ok(())
}

impl TxnCoordinator {
    /// Whether this broker coordinates `transactional_id` now: (partition, coordinator epoch).
    async fn ready(&self, transactional_id: &str) -> Result<(u32, i32), i16> {
        self.ensure_topic().await?;
        self.shared.state.lock().coordinator_epoch(transactional_id)
    }

    /// InitProducerId with a transactional id: a producer id and a bumped epoch, fencing older producers of the
    /// id. A transaction left open by a previous producer is aborted first (the answer is then
    /// CONCURRENT_TRANSACTIONS and the producer retries). `expected` is KIP-360's current producer id and epoch.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), i16> {
        if transactional_id.is_empty() {
            return Err(code::INVALID_REQUEST);
        }
        if timeout_ms <= 0 || timeout_ms > self.shared.config.max_timeout_ms {
            return Err(code::INVALID_TRANSACTION_TIMEOUT);
        }
        let (partition, leader_epoch) = self.ready(transactional_id).await?;
        let shared = &self.shared;
        // A new id, or an exhausted epoch, needs a fresh producer id: allocate it before taking the lock.
        let needs_id = {
            let state = shared.state.lock();
            state
                .txns
                .get(transactional_id)
                .is_none_or(|m| m.epoch_exhausted())
        };
        let fresh_id = if needs_id {
            Some(shared.ids.next_producer_id().await.map_err(|e| {
                tracing::warn!(error = %format!("{e:#}"), "cannot get a producer id block from the controller");
                code::COORDINATOR_NOT_AVAILABLE
            })?)
        } else {
            None
        };
        let now = crate::now_ms();
        let (next, fence) = {
            let mut state = shared.state.lock();
            if !state.still_active(partition, leader_epoch) {
                return Err(code::NOT_COORDINATOR);
            }
            let m = match state.txns.get_mut(transactional_id) {
                Some(m) => m,
                None => {
                    let Some(id) = fresh_id else {
                        return Err(code::CONCURRENT_TRANSACTIONS); // removed meanwhile: retry
                    };
                    state
                        .txns
                        .entry(transactional_id.to_string())
                        .or_insert_with(|| TxnMetadata::new(transactional_id, id, timeout_ms, now))
                }
            };
            if m.pending.is_some() {
                return Err(code::CONCURRENT_TRANSACTIONS);
            }
            if let Some((pid, epoch)) = expected {
                let current = pid == m.producer_id && epoch == m.producer_epoch;
                // A retried InitProducerId whose answer was lost: the producer still has the previous epoch.
                let retried =
                    pid == m.producer_id && epoch == m.last_producer_epoch && m.state.is_complete();
                if retried {
                    return Ok((m.producer_id, m.producer_epoch));
                }
                if !current {
                    return Err(code::PRODUCER_FENCED);
                }
            }
            match m.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                    return Err(code::CONCURRENT_TRANSACTIONS)
                }
                TxnState::Dead => return Err(code::CONCURRENT_TRANSACTIONS),
                TxnState::Ongoing => {
                    // Kafka's prepareFenceProducerEpoch, then an abort at the bumped epoch.
                    let next = fenced_abort(m, now);
                    m.pending = Some(TxnState::PrepareEpochFence);
                    (next, true)
                }
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    let mut next = m.clone();
                    if m.epoch_exhausted() {
                        let Some(id) = fresh_id else {
                            return Err(code::CONCURRENT_TRANSACTIONS);
                        };
                        next.previous_producer_id = m.producer_id;
                        next.producer_id = id;
                        next.producer_epoch = 0;
                        next.last_producer_epoch = NO_PRODUCER_EPOCH;
                    } else {
                        next.last_producer_epoch = m.producer_epoch;
                        next.producer_epoch = if m.producer_epoch == NO_PRODUCER_EPOCH {
                            0
                        } else {
                            m.producer_epoch + 1
                        };
                    }
                    next.state = TxnState::Empty;
                    next.partitions.clear();
                    next.timeout_ms = timeout_ms;
                    next.start_ms = -1;
                    next.last_update_ms = now;
                    m.pending = Some(TxnState::Empty);
                    (next, false)
                }
            }
        };
        let written = log::write(shared, partition, leader_epoch, &next).await;
        install(shared, &next, written)?;
        if fence {
            tracing::info!(
                transactional_id,
                producer_epoch = next.producer_epoch,
                "fenced the previous producer and aborting its transaction"
            );
            complete_in_background(shared, partition, leader_epoch, next);
            return Err(code::CONCURRENT_TRANSACTIONS);
        }
        Ok((next.producer_id, next.producer_epoch))
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn's `__consumer_offsets` partition): the transaction becomes
    /// Ongoing with these partitions.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<(), i16> {
        if transactional_id.is_empty() {
            return Err(code::INVALID_REQUEST);
        }
        let (partition, leader_epoch) = self.ready(transactional_id).await?;
        let shared = &self.shared;
        let now = crate::now_ms();
        let next = {
            let mut state = shared.state.lock();
            let m = state
                .txns
                .get_mut(transactional_id)
                .ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
            check_producer(m, producer_id, producer_epoch)?;
            match m.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                    return Err(code::CONCURRENT_TRANSACTIONS)
                }
                TxnState::Dead => return Err(code::INVALID_PRODUCER_ID_MAPPING),
                TxnState::Ongoing if partitions.iter().all(|p| m.partitions.contains(p)) => {
                    return Ok(());
                }
                _ => {}
            }
            let mut next = m.clone();
            if m.state != TxnState::Ongoing {
                next.start_ms = now;
                next.partitions.clear();
            }
            next.state = TxnState::Ongoing;
            next.partitions.extend(partitions.iter().cloned());
            next.last_update_ms = now;
            m.pending = Some(TxnState::Ongoing);
            next
        };
        let written = log::write(shared, partition, leader_epoch, &next).await;
        install(shared, &next, written)
    }

    /// AddPartitionsToTxn v4+ with verifyOnly (KIP-890 part 1, sent by partition leaders): each partition's
    /// error, NONE where the transaction already contains it, INVALID_TXN_STATE where it does not.
    pub async fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<i16>, i16> {
        self.ready(transactional_id).await?;
        let state = self.shared.state.lock();
        let m = state
            .txns
            .get(transactional_id)
            .ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
        if m.producer_id != producer_id {
            return Err(code::INVALID_PRODUCER_ID_MAPPING);
        }
        if m.producer_epoch != producer_epoch {
            return Err(code::PRODUCER_FENCED);
        }
        let ongoing = m.state == TxnState::Ongoing;
        Ok(partitions
            .iter()
            .map(|p| {
                if ongoing && m.partitions.contains(p) {
                    code::NONE
                } else {
                    code::INVALID_TXN_STATE
                }
            })
            .collect())
    }

    /// EndTxn: writes PrepareCommit or PrepareAbort and answers; the markers and the Complete record follow in
    /// the background. A retried EndTxn of a finished transaction succeeds; the opposite outcome is
    /// INVALID_TXN_STATE.
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), i16> {
        if transactional_id.is_empty() {
            return Err(code::INVALID_REQUEST);
        }
        let (partition, leader_epoch) = self.ready(transactional_id).await?;
        let shared = &self.shared;
        let now = crate::now_ms();
        let next = {
            let mut state = shared.state.lock();
            let m = state
                .txns
                .get_mut(transactional_id)
                .ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
            if m.pending == Some(TxnState::PrepareEpochFence) {
                return Err(code::PRODUCER_FENCED);
            }
            check_producer(m, producer_id, producer_epoch)?;
            use TxnState::*;
            match (m.state, commit) {
                (Ongoing, _) => {}
                (CompleteCommit, true) | (CompleteAbort, false) => return Ok(()),
                (PrepareCommit, true) | (PrepareAbort, false) => {
                    return Err(code::CONCURRENT_TRANSACTIONS)
                }
                (PrepareEpochFence, _) => return Err(code::CONCURRENT_TRANSACTIONS),
                _ => return Err(code::INVALID_TXN_STATE),
            }
            let mut next = m.clone();
            next.state = if commit { PrepareCommit } else { PrepareAbort };
            next.last_update_ms = now;
            m.pending = Some(next.state);
            next
        };
        let written = log::write(shared, partition, leader_epoch, &next).await;
        install(shared, &next, written)?;
        complete_in_background(shared, partition, leader_epoch, next);
        Ok(())
    }

    /// DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND for ids this coordinator does not know.
    pub async fn describe(&self, transactional_ids: &[String]) -> Vec<DescribedTxn> {
        let mut out = Vec::with_capacity(transactional_ids.len());
        for id in transactional_ids {
            let ready = self.ready(id).await;
            let state = self.shared.state.lock();
            let mut d = DescribedTxn {
                transactional_id: id.clone(),
                error_code: code::NONE,
                state: "",
                timeout_ms: 0,
                start_ms: -1,
                producer_id: -1,
                producer_epoch: -1,
                partitions: BTreeSet::new(),
            };
            match (ready, state.txns.get(id)) {
                (Err(e), _) => d.error_code = e,
                (Ok(_), None) => d.error_code = code::TRANSACTIONAL_ID_NOT_FOUND,
                (Ok(_), Some(m)) => {
                    d.state = m.state.name();
                    d.timeout_ms = m.timeout_ms;
                    d.start_ms = m.start_ms;
                    d.producer_id = m.producer_id;
                    d.producer_epoch = m.producer_epoch;
                    d.partitions = m.partitions.clone();
                }
            }
            out.push(d);
        }
        out
    }

    /// ListTransactions over the ids this broker coordinates, and the state names it did not recognise.
    pub fn list(&self, filter: &ListFilter) -> (Vec<ListedTxn>, Vec<String>) {
        let unknown: Vec<String> = filter
            .states
            .iter()
            .filter(|s| TxnState::from_name(s).is_none())
            .cloned()
            .collect();
        let now = crate::now_ms();
        let state = self.shared.state.lock();
        let listed = state
            .txns
            .values()
            .filter(|m| {
                filter.states.is_empty() || filter.states.iter().any(|s| s == m.state.name())
            })
            .filter(|m| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|m| {
                filter.duration_ms < 0
                    || (m.state == TxnState::Ongoing && now - m.start_ms > filter.duration_ms)
            })
            .map(|m| ListedTxn {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                state: m.state.name(),
            })
            .collect();
        (listed, unknown)
    }
}

/// The abort Kafka's `prepareFenceProducerEpoch` leads to: the epoch bumped (unless exhausted: the reserve bump
/// is this one) so the old producer is fenced on every partition by the markers, state PrepareAbort.
pub(super) fn fenced_abort(m: &TxnMetadata, now: i64) -> TxnMetadata {
    let mut next = m.clone();
    if m.producer_epoch < i16::MAX {
        next.last_producer_epoch = m.producer_epoch;
        next.producer_epoch = m.producer_epoch + 1;
    }
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = now;
    next
}

/// Installs a written transition, or clears the pending state of one that failed.
pub(super) fn install(
    shared: &Shared,
    next: &TxnMetadata,
    written: Result<(), i16>,
) -> Result<(), i16> {
    let mut state = shared.state.lock();
    let Some(m) = state.txns.get_mut(&next.transactional_id) else {
        return Err(written.err().unwrap_or(code::NOT_COORDINATOR));
    };
    match written {
        Ok(()) => {
            m.complete_transition(next.clone());
            if next.state == TxnState::Dead {
                state.txns.remove(&next.transactional_id);
            }
            Ok(())
        }
        Err(e) => {
            m.pending = None;
            Err(e)
        }
    }
}

/// Sends the markers of a prepared transaction to every partition's leader and then writes CompleteCommit or
/// CompleteAbort, in a task of its own. Stops (leaving the Prepare record for the next coordinator) if this broker
/// stops coordinating the partition.
pub(super) fn complete_in_background(
    shared: &Arc<Shared>,
    partition: u32,
    leader_epoch: i32,
    prepared: TxnMetadata,
) {
    let shared = shared.clone();
    tokio::spawn(async move {
        let commit = prepared.state == TxnState::PrepareCommit;
        assert!(
            commit || prepared.state == TxnState::PrepareAbort,
            "markers for a transaction that is not prepared"
        );
        let marker = Marker {
            transactional_id: prepared.transactional_id.clone(),
            producer_id: prepared.producer_id,
            producer_epoch: prepared.producer_epoch,
            commit,
            coordinator_epoch: leader_epoch,
            partitions: prepared.partitions.clone(),
        };
        let still = || shared.state.lock().still_active(partition, leader_epoch);
        if !shared.markers.send(&marker, &still).await {
            return;
        }
        let next = {
            let mut state = shared.state.lock();
            let Some(m) = state.txns.get_mut(&prepared.transactional_id) else {
                return;
            };
            if m.state != prepared.state || m.producer_epoch != prepared.producer_epoch {
                return;
            }
            // Nothing but this task moves a prepared transaction (requests answer CONCURRENT_TRANSACTIONS without
            // touching it), so no write of another can be in flight.
            debug_assert!(
                m.pending.is_none(),
                "a write in flight on a prepared transaction"
            );
            let mut next = m.clone();
            next.state = if commit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
            next.partitions.clear();
            next.last_update_ms = crate::now_ms();
            m.pending = Some(next.state);
            next
        };
        let written = log::write(&shared, partition, leader_epoch, &next).await;
        match install(&shared, &next, written) {
            Ok(()) => {
                tracing::debug!(transactional_id = %next.transactional_id, state = next.state.name(), "transaction completed")
            }
            Err(e) => {
                tracing::warn!(transactional_id = %next.transactional_id, error = e, "cannot write the transaction's completion; the next coordinator will")
            }
        }
    });
}
