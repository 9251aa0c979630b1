//! The coordinator's background work (Kafka's `abortTimedOutTransactions` and `removeExpiredTransactionalIds`):
//! a transaction open longer than its `transaction.timeout.ms` is aborted at a bumped epoch (so its producer is
//! fenced), and an id idle in a finished state for `transactional.id.expiration.ms` is removed with a tombstone.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::state::{TxnMetadata, TxnState};
use super::{log, ops, Shared};

/// Most transactions aborted or ids expired per pass (the rest wait for the next pass).
const PER_PASS_MAX: usize = 1000;
/// The reconcile backstop and the shortest sleep between passes.
const TICK: Duration = Duration::from_secs(1);

pub(super) async fn run(shared: Weak<Shared>) {
    let mut next_abort = tokio::time::Instant::now();
    let mut next_expire = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(TICK).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if strong.state.lock().closed {
            return;
        }
        // A backstop for leadership changes nobody told us about.
        drop(log::reconcile(&strong));
        let now = tokio::time::Instant::now();
        if now >= next_abort {
            next_abort =
                now + Duration::from_millis(strong.config.abort_timed_out_interval_ms.max(1));
            abort_timed_out(&strong);
        }
        if now >= next_expire {
            next_expire =
                now + Duration::from_millis(strong.config.remove_expired_interval_ms.max(1));
            expire_ids(&strong).await;
        }
    }
}

/// Starts the abort of every Ongoing transaction past its timeout.
fn abort_timed_out(shared: &Arc<Shared>) {
    let now = crate::now_ms();
    // The decision reads the monotonic clock (see `TxnMetadata::timeout_origin_monotonic_ms`); the wall clock
    // only stamps the records.
    let now_monotonic = crate::monotonic_ms();
    let mut due = Vec::new();
    {
        let mut state = shared.state.lock();
        let owned = state.owned.clone();
        let n = state.num_partitions;
        for m in state.txns.values_mut() {
            if due.len() >= PER_PASS_MAX {
                break;
            }
            let timed_out =
                m.state == TxnState::Ongoing && m.pending.is_none() && m.timed_out(now_monotonic);
            if !timed_out {
                continue;
            }
            let partition = crate::group::records::partition_for(&m.transactional_id, n);
            let Some(super::Owned::Active { leader_epoch }) = owned.get(&partition).copied() else {
                continue;
            };
            let next = ops::fenced_abort(m, now);
            m.pending = Some(TxnState::PrepareEpochFence);
            due.push((partition, leader_epoch, next));
        }
    }
    for (partition, leader_epoch, next) in due {
        let shared = shared.clone();
        tokio::spawn(async move {
            tracing::info!(transactional_id = %next.transactional_id, timeout_ms = next.timeout_ms, "aborting a transaction past its timeout");
            let written = log::write(&shared, partition, leader_epoch, &next).await;
            if ops::install(&shared, &next, written).is_ok() {
                ops::complete_in_background(&shared, partition, leader_epoch, next);
            }
        });
    }
}

/// Removes ids idle in a finished state past `transactional.id.expiration.ms`.
async fn expire_ids(shared: &Arc<Shared>) {
    let now = crate::now_ms();
    let expiration = shared.config.id_expiration_ms;
    let mut due: Vec<(u32, i32, TxnMetadata)> = Vec::new();
    {
        let mut state = shared.state.lock();
        let owned = state.owned.clone();
        let n = state.num_partitions;
        for m in state.txns.values_mut() {
            if due.len() >= PER_PASS_MAX {
                break;
            }
            let expired = m.state.is_complete()
                && m.pending.is_none()
                && m.last_update_ms.saturating_add(expiration) < now;
            if !expired {
                continue;
            }
            let partition = crate::group::records::partition_for(&m.transactional_id, n);
            let Some(super::Owned::Active { leader_epoch }) = owned.get(&partition).copied() else {
                continue;
            };
            let mut next = m.clone();
            next.state = TxnState::Dead;
            next.last_update_ms = now;
            m.pending = Some(TxnState::Dead);
            due.push((partition, leader_epoch, next));
        }
    }
    for (partition, leader_epoch, next) in due {
        let written = log::write(shared, partition, leader_epoch, &next).await;
        if ops::install(shared, &next, written).is_ok() {
            tracing::info!(transactional_id = %next.transactional_id, "transactional id expired");
        }
    }
}
