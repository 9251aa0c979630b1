//! The coordinator's operations, Kafka's `TransactionCoordinator.handle*`: each validates against the metadata
//! under the state lock, marks the transition pending, writes it outside the lock and installs it once written.

use std::collections::BTreeSet;
use std::sync::Arc;

use annal_metadata::env::testing::{planted, PlantedBug};

use super::markers::Marker;
use super::state::{TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
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
                // An id whose metadata was just created (its first InitProducerId is being written, or it expired)
                // has no producer to fence: the producer continues under the id's producer id, as in Kafka.
                let fresh = m.producer_epoch == NO_PRODUCER_EPOCH;
                let current = pid == m.producer_id && epoch == m.producer_epoch;
                // A retried InitProducerId whose answer was lost: the producer still has the previous epoch. Safe
                // only because a new producer's InitProducerId and a fence clear `last_producer_epoch`: otherwise a
                // fenced zombie claiming the epoch before the new producer's would be handed the new producer's
                // epoch (Kafka's `prepareIncrementProducerEpoch`).
                let retried = pid == m.producer_id
                    && epoch == m.last_producer_epoch
                    && m.last_producer_epoch != NO_PRODUCER_EPOCH
                    && m.state.is_complete();
                if retried {
                    return Ok((m.producer_id, m.producer_epoch));
                }
                if !current && !fresh {
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
                        // The producer that asked with its current epoch may retry with it if this answer is lost;
                        // a new producer (no expected epoch) leaves nothing to retry, and no epoch a zombie could
                        // claim.
                        next.last_producer_epoch = if expected.is_some()
                            || planted(PlantedBug::FencedEpochCountsAsRetry)
                        {
                            m.producer_epoch
                        } else {
                            NO_PRODUCER_EPOCH
                        };
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
    /// Ongoing with these partitions. `client_version` is the transaction version of the request: 2 for the
    /// implicit add a partition leader or group coordinator makes for a transaction-version-2 client
    /// (AddPartitionsToTxn v5 without verifyOnly), else 0.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        client_version: i16,
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
                next.timeout_origin_monotonic_ms = crate::monotonic_ms();
                next.partitions.clear();
                next.client_version = client_version;
            }
            next.client_version = next.client_version.max(client_version);
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
    /// INVALID_TXN_STATE. `tv2` is transaction version 2 (EndTxn v5, KIP-890 part 2): the epoch is bumped by
    /// every EndTxn and the answer is the producer id and epoch the producer continues with.
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        tv2: bool,
    ) -> Result<(i64, i16), i16> {
        if transactional_id.is_empty() {
            return Err(code::INVALID_REQUEST);
        }
        let (partition, leader_epoch) = self.ready(transactional_id).await?;
        let shared = &self.shared;
        // An exhausted epoch at transaction version 2 hands over to a fresh producer id: allocate it first.
        let needs_id = tv2 && {
            let state = shared.state.lock();
            state.txns.get(transactional_id).is_some_and(|m| {
                m.producer_id == producer_id
                    && m.producer_epoch == producer_epoch
                    && m.epoch_exhausted()
            })
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
        let next = {
            let mut state = shared.state.lock();
            if !state.still_active(partition, leader_epoch) {
                return Err(code::NOT_COORDINATOR);
            }
            let m = state
                .txns
                .get_mut(transactional_id)
                .ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
            let next = if tv2 {
                match end_tv2(m, producer_id, producer_epoch, commit, fresh_id, now)? {
                    EndTv2::Retried => return Ok((m.producer_id, m.producer_epoch)),
                    EndTv2::Prepare(next) => next,
                }
            } else {
                match end_tv1(m, producer_id, producer_epoch, commit, now)? {
                    None => return Ok((m.producer_id, m.producer_epoch)),
                    Some(next) => next,
                }
            };
            m.pending = Some(next.state);
            next
        };
        let written = log::write(shared, partition, leader_epoch, &next).await;
        install(shared, &next, written)?;
        // The producer continues with the bumped epoch, or epoch 0 of the next producer id (epoch exhausted).
        let continues_with = if next.next_producer_id != NO_PRODUCER_ID {
            (next.next_producer_id, 0)
        } else {
            (next.producer_id, next.producer_epoch)
        };
        complete_in_background(shared, partition, leader_epoch, next);
        Ok(continues_with)
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

/// Transaction version 1's EndTxn (Kafka's `endTransactionWithTV1`): the producer's epoch must be the current one
/// and is not bumped. `None`: a retry of an EndTxn that already took effect.
fn end_tv1(
    m: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    now: i64,
) -> Result<Option<TxnMetadata>, i16> {
    use TxnState::*;
    if m.pending == Some(PrepareEpochFence) {
        return Err(code::PRODUCER_FENCED);
    }
    check_producer(m, producer_id, producer_epoch)?;
    match (m.state, commit) {
        (Ongoing, _) => {}
        (CompleteCommit, true) | (CompleteAbort, false) => return Ok(None),
        (PrepareCommit, true) | (PrepareAbort, false) => return Err(code::CONCURRENT_TRANSACTIONS),
        (PrepareEpochFence, _) => return Err(code::CONCURRENT_TRANSACTIONS),
        _ => return Err(code::INVALID_TXN_STATE),
    }
    let mut next = m.clone();
    next.state = if commit { PrepareCommit } else { PrepareAbort };
    next.last_update_ms = now;
    Ok(Some(next))
}

/// What a transaction-version-2 EndTxn leads to.
enum EndTv2 {
    /// A retry of an EndTxn that already took effect: answer the current producer id and epoch.
    Retried,
    Prepare(TxnMetadata),
}

/// Transaction version 2's EndTxn (Kafka's `endTransaction` at TV2): every EndTxn bumps the epoch, so a retry is
/// recognised by the epoch one below the current one (or, after an exhausted epoch handed over to a new producer
/// id, by the previous id at the last epoch), and an abort of a transaction that added nothing is allowed (the
/// client cannot know whether its produce requests added a partition).
fn end_tv2(
    m: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    fresh_id: Option<i64>,
    now: i64,
) -> Result<EndTv2, i16> {
    use TxnState::*;
    if m.pending == Some(PrepareEpochFence) {
        return Err(code::PRODUCER_FENCED);
    }
    let retry_on_overflow = m.previous_producer_id == producer_id
        && producer_epoch == i16::MAX - 1
        && m.producer_epoch == 0;
    let retry_on_bump = producer_epoch < i16::MAX && m.producer_epoch == producer_epoch + 1;
    let current = m.producer_epoch == producer_epoch;
    let valid_epoch = match m.state {
        Ongoing | Empty | Dead | PrepareEpochFence => current,
        PrepareCommit | PrepareAbort => retry_on_bump,
        CompleteCommit | CompleteAbort => retry_on_bump || retry_on_overflow || current,
    };
    if m.producer_id != producer_id && !retry_on_overflow {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if !valid_epoch {
        return Err(code::PRODUCER_FENCED);
    }
    if m.pending.is_some() {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    let retry = retry_on_bump || retry_on_overflow;
    let abort_empty = match (m.state, commit) {
        (Ongoing, _) => false,
        (CompleteCommit, true) | (CompleteAbort, false) if retry => return Ok(EndTv2::Retried),
        (Empty | CompleteCommit | CompleteAbort, false) if !retry => true,
        (PrepareCommit, true) | (PrepareAbort, false) => return Err(code::CONCURRENT_TRANSACTIONS),
        _ => return Err(code::INVALID_TXN_STATE),
    };
    let mut next = m.clone();
    if abort_empty {
        next.partitions.clear();
        next.start_ms = now;
        next.timeout_origin_monotonic_ms = crate::monotonic_ms();
    }
    next.client_version = 2;
    next.state = if commit { PrepareCommit } else { PrepareAbort };
    next.last_update_ms = now;
    // The bump: markers carry the new epoch, which fences this producer's late batches of the transaction just
    // ended, and the producer continues with it. An exhausted epoch takes its last bump and hands over to a
    // fresh producer id when the transaction completes.
    next.last_producer_epoch = m.producer_epoch;
    next.producer_epoch = m.producer_epoch.saturating_add(1);
    if m.epoch_exhausted() {
        next.next_producer_id = fresh_id.ok_or(code::CONCURRENT_TRANSACTIONS)?;
    }
    Ok(EndTv2::Prepare(next))
}

/// The abort Kafka's `prepareFenceProducerEpoch` leads to: the epoch bumped (unless exhausted: the reserve bump
/// is this one) so the old producer is fenced on every partition by the markers, state PrepareAbort.
pub(super) fn fenced_abort(m: &TxnMetadata, now: i64) -> TxnMetadata {
    let mut next = m.clone();
    if m.producer_epoch < i16::MAX {
        next.producer_epoch = m.producer_epoch + 1;
    }
    // The fenced producer's epoch must never count as a retry of a bump (Kafka's `prepareFenceProducerEpoch`).
    next.last_producer_epoch = if planted(PlantedBug::FencedEpochCountsAsRetry) {
        m.producer_epoch
    } else {
        NO_PRODUCER_EPOCH
    };
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
            if next.next_producer_id != NO_PRODUCER_ID {
                // Transaction version 2 with an exhausted epoch: the producer continues as the new id.
                next.previous_producer_id = next.producer_id;
                next.producer_id = next.next_producer_id;
                next.next_producer_id = NO_PRODUCER_ID;
                next.producer_epoch = 0;
                next.last_producer_epoch = NO_PRODUCER_EPOCH;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(state: TxnState, epoch: i16) -> TxnMetadata {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        m.state = state;
        m.producer_epoch = epoch;
        m.client_version = 2;
        m
    }

    fn outcome(m: &TxnMetadata, pid: i64, epoch: i16, commit: bool) -> Result<Option<i16>, i16> {
        end_tv2(m, pid, epoch, commit, Some(99), 1).map(|r| match r {
            EndTv2::Retried => None,
            EndTv2::Prepare(next) => Some(next.producer_epoch),
        })
    }

    /// Kafka's table for Empty / CompleteAbort / CompleteCommit at transaction version 2 (PF = PRODUCER_FENCED,
    /// ITS = INVALID_TXN_STATE, NONE = retry answered, EB = epoch bump); Retry is the epoch one below.
    #[test]
    fn transaction_version_2_end_txn_follows_kafkas_table() {
        use TxnState::*;
        const PF: i16 = code::PRODUCER_FENCED;
        const ITS: i16 = code::INVALID_TXN_STATE;
        let eb = Ok(Some(6));
        let cases = [
            // state, commit, retry?, expected
            (Empty, false, true, Err(PF)),
            (Empty, false, false, eb),
            (Empty, true, true, Err(PF)),
            (Empty, true, false, Err(ITS)),
            (CompleteAbort, false, true, Ok(None)),
            (CompleteAbort, false, false, eb),
            (CompleteAbort, true, true, Err(ITS)),
            (CompleteAbort, true, false, Err(ITS)),
            (CompleteCommit, false, true, Err(ITS)),
            (CompleteCommit, false, false, eb),
            (CompleteCommit, true, true, Ok(None)),
            (CompleteCommit, true, false, Err(ITS)),
        ];
        for (state, commit, retry, expected) in cases {
            let m = at(state, 5);
            let epoch = if retry { 4 } else { 5 };
            assert_eq!(
                outcome(&m, 7, epoch, commit),
                expected,
                "{state:?} commit={commit} retry={retry}"
            );
        }
        // Ongoing bumps either way; a Prepare state answers its retry with CONCURRENT_TRANSACTIONS.
        assert_eq!(outcome(&at(Ongoing, 5), 7, 5, true), Ok(Some(6)));
        assert_eq!(outcome(&at(Ongoing, 5), 7, 4, true), Err(PF));
        assert_eq!(
            outcome(&at(PrepareCommit, 6), 7, 5, true),
            Err(code::CONCURRENT_TRANSACTIONS)
        );
        assert_eq!(outcome(&at(PrepareCommit, 6), 7, 6, true), Err(PF));
        assert_eq!(
            outcome(&at(Ongoing, 5), 8, 5, true),
            Err(code::INVALID_PRODUCER_ID_MAPPING)
        );
    }

    #[test]
    fn an_exhausted_epoch_hands_over_to_a_new_producer_id() {
        let m = at(TxnState::Ongoing, i16::MAX - 1);
        let Ok(EndTv2::Prepare(next)) = end_tv2(&m, 7, i16::MAX - 1, true, Some(99), 1) else {
            panic!("the commit is prepared");
        };
        assert_eq!(
            (next.producer_id, next.producer_epoch, next.next_producer_id),
            (7, i16::MAX, 99),
            "the markers carry the last epoch; the next id waits for the Complete record"
        );
        assert!(matches!(
            end_tv2(&m, 7, i16::MAX - 1, true, None, 1),
            Err(code::CONCURRENT_TRANSACTIONS)
        ));
        // After the hand-over (id 99, epoch 0, previous 7) the retry at the old id is recognised.
        let mut done = at(TxnState::CompleteCommit, 0);
        done.producer_id = 99;
        done.previous_producer_id = 7;
        assert!(matches!(
            end_tv2(&done, 7, i16::MAX - 1, true, None, 1),
            Ok(EndTv2::Retried)
        ));
    }
}
