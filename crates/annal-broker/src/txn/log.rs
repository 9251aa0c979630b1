//! `__transaction_state` as the coordinator reads and writes it: loading (replaying) the partitions this broker
//! leads, and appending one transactional id's record with acks=all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::records;
use super::state::{TxnMetadata, TxnState};
use super::{code, Owned, Shared, TXN_TOPIC};
use crate::group::store::{self, Record};
use crate::replica::{AppendEntry, Partition, PartitionError};

/// Marks the partitions newly led here as loading, drops those no longer led; starts a replay for each new one.
pub(super) fn reconcile(shared: &Arc<Shared>) -> Vec<tokio::task::JoinHandle<()>> {
    let parts = shared.replicas.partitions_of(TXN_TOPIC);
    let mut to_load = Vec::new();
    {
        let mut state = shared.state.lock();
        if state.closed {
            return Vec::new();
        }
        if !parts.is_empty() {
            state.num_partitions = parts.len() as u32;
        }
        let mut led = BTreeSet::new();
        for part in parts {
            let Ok(partition) = u32::try_from(part.index()) else {
                continue;
            };
            if !part.is_leader() {
                continue;
            }
            led.insert(partition);
            let leader_epoch = part.leader_epoch();
            if state.owned.get(&partition).map(|o| o.leader_epoch()) != Some(leader_epoch) {
                tracing::info!(partition = %part.name(), leader_epoch, "becoming the transaction coordinator: loading");
                state.unload(partition);
                state
                    .owned
                    .insert(partition, Owned::Loading { leader_epoch });
                to_load.push((partition, leader_epoch, part));
            }
        }
        let lost: Vec<u32> = state
            .owned
            .keys()
            .copied()
            .filter(|p| !led.contains(p))
            .collect();
        for partition in lost {
            tracing::info!(
                partition,
                "no longer the transaction coordinator of {TXN_TOPIC}-{partition}"
            );
            state.unload(partition);
        }
    }
    to_load
        .into_iter()
        .map(|(partition, leader_epoch, part)| {
            let shared = shared.clone();
            tokio::spawn(async move { load(shared, partition, leader_epoch, part).await })
        })
        .collect()
}

/// Replays `part` into transactional ids and installs them unless leadership moved meanwhile; then resumes the
/// markers of every transaction found prepared (the previous coordinator may have died before writing them).
async fn load(shared: Arc<Shared>, partition: u32, leader_epoch: i32, part: Arc<Partition>) {
    // Nothing is appended while the partition loads, so the replay reads exactly up to here.
    let loaded_end = part.log_end_offset();
    let replayed = crate::blocking({
        let part = part.clone();
        move || replay(&part)
    })
    .await;
    let txns = match replayed {
        Ok(txns) => txns,
        Err(e) => {
            tracing::error!(partition = %part.name(), error = %format!("{e:#}"), "cannot load the transaction coordinator's partition");
            let mut state = shared.state.lock();
            if state.owned.get(&partition) == Some(&Owned::Loading { leader_epoch }) {
                state.owned.remove(&partition);
            }
            return;
        }
    };
    let prepared: Vec<TxnMetadata> = {
        let mut state = shared.state.lock();
        if state.closed || state.owned.get(&partition) != Some(&Owned::Loading { leader_epoch }) {
            return;
        }
        let prepared = txns
            .values()
            .filter(|m| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .cloned()
            .collect();
        let count = txns.len();
        state.txns.extend(txns);
        state
            .owned
            .insert(partition, Owned::Active { leader_epoch });
        tracing::info!(partition = %part.name(), transactional_ids = count, "transaction coordinator loaded");
        prepared
    };
    if prepared.is_empty() {
        return;
    }
    // A Prepare record above the high watermark is on this new leader only: should the leadership move before a
    // follower has it, the next leader never saw the decision and may decide the other way (annal-sim seed 467:
    // COMMIT written to one partition, then the transaction aborted by the next coordinator's timeout). Markers
    // are a decision other partitions act on, so they go out only once everything loaded is committed, as they
    // do after this coordinator's own Prepare writes.
    tokio::spawn(async move {
        loop {
            if part.high_watermark() >= loaded_end {
                break;
            }
            if !shared.state.lock().still_active(partition, leader_epoch) {
                return;
            }
            tokio::time::sleep(LOADED_COMMIT_POLL).await;
        }
        for m in prepared {
            super::ops::complete_in_background(&shared, partition, leader_epoch, m);
        }
    });
}

/// How often a freshly loaded coordinator looks whether what it loaded is committed yet (only while a loaded
/// transaction is prepared, and only until it is or the leadership moves).
const LOADED_COMMIT_POLL: Duration = Duration::from_millis(20);

/// Every transactional id of a partition, as its last record says (tombstones and Dead remove it). Blocking.
fn replay(part: &Partition) -> anyhow::Result<BTreeMap<String, TxnMetadata>> {
    let mut txns = BTreeMap::new();
    store::replay(part, |key, value| {
        let Some(id) = records::parse_key(key) else {
            tracing::warn!(partition = %part.name(), "skipping a record whose key is not a TransactionLogKey");
            return;
        };
        match value.map(records::parse_value) {
            None => {
                txns.remove(&id);
            }
            Some(None) => {
                tracing::warn!(partition = %part.name(), transactional_id = %id, "skipping a TransactionLogValue that does not decode");
            }
            Some(Some(v)) if v.state == TxnState::Dead => {
                txns.remove(&id);
            }
            Some(Some(v)) => {
                txns.insert(id.clone(), TxnMetadata::from_log(&id, &v));
            }
        }
    })?;
    Ok(txns)
}

/// Appends `next`'s record (a tombstone for Dead) to `partition` with acks=all and waits until the ISR has it;
/// then checks that this broker still coordinates the partition at `leader_epoch`. Kafka's mapping of append
/// errors: a lost leadership is NOT_COORDINATOR, a short ISR or a timeout COORDINATOR_NOT_AVAILABLE.
pub(super) async fn write(
    shared: &Shared,
    partition: u32,
    leader_epoch: i32,
    next: &TxnMetadata,
) -> Result<(), i16> {
    let record = Record {
        key: records::key(&next.transactional_id),
        value: (next.state != TxnState::Dead).then(|| records::value(&next.to_log())),
    };
    let bytes = store::build(std::slice::from_ref(&record), crate::now_ms());
    let entry = AppendEntry {
        topic: TXN_TOPIC.to_string(),
        partition: partition as i32,
        records: Some(Bytes::from(bytes)),
    };
    let timeout = Duration::from_millis(shared.config.write_timeout_ms);
    let result = shared
        .replicas
        .append_records(timeout, -1, vec![entry])
        .await
        .pop()
        .unwrap_or(Err(PartitionError::NullRecords));
    if let Err(e) = result {
        tracing::warn!(transactional_id = %next.transactional_id, error = %e, "cannot write to {TXN_TOPIC}");
        return Err(match e.code() {
            code::NOT_LEADER_OR_FOLLOWER | code::KAFKA_STORAGE_ERROR => code::NOT_COORDINATOR,
            code::UNKNOWN_TOPIC_OR_PARTITION
            | code::NOT_ENOUGH_REPLICAS
            | code::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | code::REQUEST_TIMED_OUT => code::COORDINATOR_NOT_AVAILABLE,
            _ => code::UNKNOWN_SERVER_ERROR,
        });
    }
    if !shared.state.lock().still_active(partition, leader_epoch) {
        return Err(code::NOT_COORDINATOR);
    }
    Ok(())
}
