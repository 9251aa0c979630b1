//! openraft's state machine ([`RaftStateMachine`]) around the caller's [`StateMachine`], and the snapshot
//! files. A snapshot is `<20-digit index>-<10-digit term>.checkpoint` in the metadata log directory (Kafka's
//! naming); its content is: magic, the openraft snapshot meta (JSON, length-prefixed), the state machine's
//! bytes (length-prefixed), and a CRC32C of everything before it.

// openraft's trait methods return its `StorageError` (over 200 bytes); the helpers share that type.
#![allow(clippy::result_large_err)]

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;

use super::types::{Entry, StorageError, TypeConfig};
use super::StateMachine;
use crate::env::DiskIo;

const MAGIC: &[u8; 8] = b"ANSNAP01";
const SUFFIX: &str = ".checkpoint";

type Meta = SnapshotMeta<u64, BasicNode>;

fn sm_err(context: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(openraft::AnyError::error(format!("{context}: {e}"))).into()
}

fn snap_err(context: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(None, openraft::AnyError::error(format!("{context}: {e}")))
        .into()
}

/// What has been applied to the caller's state machine, as openraft sees it.
struct Applied {
    last: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
}

#[derive(Clone)]
pub(crate) struct SmStore {
    shared: Arc<Shared>,
    /// Where snapshot files are written and read (`env::DiskIo`).
    disk_io: DiskIo,
}

struct Shared {
    dir: PathBuf,
    sm: Arc<dyn StateMachine>,
    /// Held while applying and while taking a snapshot, so a snapshot's bytes match its log id exactly.
    applied: Mutex<Applied>,
    /// Bytes of records applied since the last snapshot was built (or since start-up, the replay included):
    /// what `Quorum` compares with `snapshot_every_bytes`.
    bytes_since_snapshot: Arc<AtomicU64>,
}

impl SmStore {
    /// Bytes of records applied since the last snapshot was built.
    pub fn bytes_since_snapshot(&self) -> Arc<AtomicU64> {
        self.shared.bytes_since_snapshot.clone()
    }

    /// Restores the caller's state machine from the newest snapshot in `dir`, if there is one.
    pub fn open(dir: &Path, sm: Arc<dyn StateMachine>) -> Result<SmStore, String> {
        let mut applied = Applied {
            last: None,
            membership: StoredMembership::default(),
        };
        if let Some(path) =
            newest_checkpoint(dir).map_err(|e| format!("list {}: {e}", dir.display()))?
        {
            let (meta, data) = read_checkpoint(&path)?;
            let index = meta.last_log_id.map_or(0, |l| l.index);
            sm.restore(index, &data)
                .map_err(|e| format!("restore the state machine from {}: {e}", path.display()))?;
            applied.last = meta.last_log_id;
            applied.membership = meta.last_membership;
        }
        Ok(SmStore {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                sm,
                applied: Mutex::new(applied),
                bytes_since_snapshot: Arc::new(AtomicU64::new(0)),
            }),
            disk_io: DiskIo::default(),
        })
    }

    /// Writes and reads snapshot files per `disk_io` (the blocking pool unless a simulation says inline).
    pub fn with_disk_io(mut self, disk_io: DiskIo) -> SmStore {
        self.disk_io = disk_io;
        self
    }

    pub fn has_snapshot(&self) -> bool {
        self.shared.applied.lock().last.is_some()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SmStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (meta, data) = {
            let applied = self.shared.applied.lock();
            self.shared.bytes_since_snapshot.store(0, Ordering::Relaxed);
            let (sm_index, data) = self.shared.sm.snapshot();
            // Blank and membership entries are not shown to the state machine, so it may be behind by those.
            let raft_index = applied.last.map_or(0, |l| l.index);
            assert!(
                sm_index <= raft_index,
                "the state machine applied {sm_index}, past raft's {raft_index}"
            );
            let meta = Meta {
                last_log_id: applied.last,
                last_membership: applied.membership.clone(),
                snapshot_id: applied.last.map_or_else(
                    || "empty".to_string(),
                    |l| format!("{}-{}", l.index, l.leader_id.term),
                ),
            };
            (meta, data)
        };
        if meta.last_log_id.is_some() {
            // A snapshot of nothing is not worth a file: a restart starts from nothing anyway.
            let dir = self.shared.dir.clone();
            let (meta2, data2) = (meta.clone(), data.clone());
            self.disk_io
                .run(move || write_checkpoint(&dir, &meta2, &data2))
                .await
                .map_err(|e| snap_err("snapshot task", e))?
                .map_err(|e| snap_err("write the snapshot", e))?;
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for SmStore {
    type SnapshotBuilder = SmStore;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError> {
        let applied = self.shared.applied.lock();
        Ok((applied.last, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.shared.applied.lock();
        let mut responses = Vec::new();
        // Runs of normal entries go to the state machine together; a membership entry ends a run.
        let mut run: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        for entry in entries {
            assert!(
                !matches!(applied.last, Some(l) if l.index >= entry.log_id.index),
                "entry {} applied twice",
                entry.log_id.index
            );
            match entry.payload {
                EntryPayload::Normal(records) => {
                    let bytes: usize = records.iter().map(Vec::len).sum();
                    self.shared
                        .bytes_since_snapshot
                        .fetch_add(bytes as u64, Ordering::Relaxed);
                    run.push((entry.log_id.index, records))
                }
                EntryPayload::Membership(m) => {
                    self.shared.sm.apply_run(&std::mem::take(&mut run));
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                }
                EntryPayload::Blank => {}
            }
            applied.last = Some(entry.log_id);
            responses.push(());
        }
        self.shared.sm.apply_run(&run);
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let dir = self.shared.dir.clone();
        let (meta2, data2) = (meta.clone(), data.clone());
        // Durable before the state changes: a restart then restores this snapshot, never an older one plus a
        // log that has been purged under it.
        self.disk_io
            .run(move || write_checkpoint(&dir, &meta2, &data2))
            .await
            .map_err(|e| snap_err("snapshot task", e))?
            .map_err(|e| snap_err("write the received snapshot", e))?;
        let mut applied = self.shared.applied.lock();
        let index = meta.last_log_id.map_or(0, |l| l.index);
        self.shared
            .sm
            .restore(index, &data)
            .map_err(|e| sm_err("restore the state machine from the leader's snapshot", e))?;
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let dir = self.shared.dir.clone();
        let found = self
            .disk_io
            .run(move || -> Result<Option<(Meta, Vec<u8>)>, String> {
                match newest_checkpoint(&dir).map_err(|e| e.to_string())? {
                    Some(path) => read_checkpoint(&path).map(Some),
                    None => Ok(None),
                }
            })
            .await
            .map_err(|e| snap_err("snapshot task", e))?
            .map_err(|e| snap_err("read the snapshot", e))?;
        Ok(found.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

pub(crate) fn checkpoint_name(last: LogId<u64>) -> String {
    format!("{:020}-{:010}{SUFFIX}", last.index, last.leader_id.term)
}

/// Parses `<20 digits>-<10 digits>.checkpoint` into (index, term).
fn parse_checkpoint_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (index, term) = stem.split_once('-')?;
    if index.len() != 20 || term.len() != 10 {
        return None;
    }
    Some((index.parse().ok()?, term.parse().ok()?))
}

fn checkpoints(dir: &Path) -> std::io::Result<Vec<((u64, u64), PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(key) = entry.file_name().to_str().and_then(parse_checkpoint_name) {
            found.push((key, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

fn newest_checkpoint(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    Ok(checkpoints(dir)?.pop().map(|(_, p)| p))
}

/// Writes the snapshot atomically (temp, fsync, rename, fsync dir), then deletes older ones.
fn write_checkpoint(dir: &Path, meta: &Meta, data: &[u8]) -> std::io::Result<()> {
    let last = meta
        .last_log_id
        .ok_or_else(|| std::io::Error::other("a snapshot without a last log id"))?;
    let bytes = encode_checkpoint(meta, data)?;
    let name = checkpoint_name(last);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(&name))?;
    super::state_file::sync_dir(dir)?;
    for (key, path) in checkpoints(dir)? {
        if key < (last.index, last.leader_id.term) {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

/// A snapshot file's bytes: magic, meta (JSON, u32 length), the state machine's bytes (u64 length), CRC-32C.
fn encode_checkpoint(meta: &Meta, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let meta_bytes = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let meta_len = u32::try_from(meta_bytes.len()).map_err(std::io::Error::other)?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 16 + meta_bytes.len() + data.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&meta_len.to_be_bytes());
    bytes.extend_from_slice(&meta_bytes);
    bytes.extend_from_slice(&(data.len() as u64).to_be_bytes());
    bytes.extend_from_slice(data);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    Ok(bytes)
}

/// Parses a whole snapshot file as start-up does and checks that what parses encodes back to the same meta and
/// data; `Ok` is the state machine's bytes. The fuzz targets' entry (fuzz/), through
/// [`super::decode_snapshot_file_checked`].
pub(crate) fn parse_checkpoint_checked(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (meta, data) = parse_checkpoint(bytes)?;
    let again = encode_checkpoint(&meta, &data).expect("a parsed snapshot meta encodes");
    let (meta_again, data_again) = parse_checkpoint(&again).expect("an encoded snapshot parses");
    assert_eq!(
        meta_again, meta,
        "snapshot meta changed through encode + parse"
    );
    assert_eq!(
        data_again, data,
        "snapshot data changed through encode + parse"
    );
    Ok(data)
}

/// A valid snapshot file (at log id 1-1) around `data`: lets a fuzzer reach the state machine's
/// snapshot decoder past the CRC.
pub(crate) fn checkpoint_around(data: &[u8]) -> Vec<u8> {
    let last = LogId::new(openraft::CommittedLeaderId::new(1, 1), 1);
    let meta = Meta {
        last_log_id: Some(last),
        last_membership: StoredMembership::default(),
        snapshot_id: checkpoint_name(last),
    };
    encode_checkpoint(&meta, data).expect("a fixed snapshot meta encodes")
}

fn read_checkpoint(path: &Path) -> Result<(Meta, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    parse_checkpoint(&bytes).map_err(|e| {
        format!("snapshot {} is damaged ({e}); remove this node's metadata log directory and let the leader send it a new snapshot", path.display())
    })
}

fn parse_checkpoint(bytes: &[u8]) -> Result<(Meta, Vec<u8>), String> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or("shorter than its checksum")?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().map_err(|_| "checksum")?) {
        return Err("checksum mismatch".into());
    }
    let rest = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a quorum snapshot (bad magic)")?;
    let (len, rest) = split_len::<4>(rest)?;
    let meta_bytes = rest.get(..len).ok_or("truncated meta")?;
    let meta: Meta = serde_json::from_slice(meta_bytes).map_err(|e| format!("meta: {e}"))?;
    let (len, rest) = split_len::<8>(&rest[len..])?;
    if rest.len() != len {
        return Err(format!("data of {} bytes, header says {len}", rest.len()));
    }
    Ok((meta, rest.to_vec()))
}

fn split_len<const N: usize>(bytes: &[u8]) -> Result<(usize, &[u8]), String> {
    let head = bytes.get(..N).ok_or("truncated length")?;
    let mut be = [0u8; 8];
    be[8 - N..].copy_from_slice(head);
    let len = usize::try_from(u64::from_be_bytes(be)).map_err(|_| "length too large")?;
    Ok((len, &bytes[N..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    #[test]
    fn checkpoint_round_trips_and_damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let last = LogId::new(CommittedLeaderId::new(4, 2), 17);
        let meta = Meta {
            last_log_id: Some(last),
            last_membership: StoredMembership::default(),
            snapshot_id: "17-4".into(),
        };
        write_checkpoint(dir.path(), &meta, b"state bytes").unwrap();
        let path = newest_checkpoint(dir.path()).unwrap().unwrap();
        assert_eq!(
            path.file_name().unwrap().to_str().unwrap(),
            "00000000000000000017-0000000004.checkpoint"
        );
        let (read_meta, data) = read_checkpoint(&path).unwrap();
        assert_eq!(
            (read_meta, data.as_slice()),
            (meta, b"state bytes".as_slice())
        );
        let bytes = std::fs::read(&path).unwrap();
        for cut in 0..bytes.len() {
            assert!(parse_checkpoint(&bytes[..cut]).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[12] ^= 1;
        assert!(parse_checkpoint(&flipped).is_err());
    }
}
