//! The `__consumer_offsets` records as log bytes: batches to append, the replay of a partition this broker
//! leads, and the one-time preparation of a data directory written when the coordinator kept its own logs.
//! The partitions themselves are ordinary [`Partition`]s of the replica manager.
//!
//! Each record is one key/value in Kafka's schemas (see [`super::records`]); a null value is a tombstone.

use std::path::{Path, PathBuf};

use annal_log::batch::{self, BatchHeader, Compression, ProducerFields, HEADER_SIZE};
use anyhow::Context;

use crate::replica::Partition;

/// Kafka's internal topic name; our directories carry it so a Kafka user recognises them.
pub const TOPIC: &str = "__consumer_offsets";
/// Bytes read per step while replaying.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// A record's key and value as slices of a batch (`None` = null).
type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// One key/value record; `value: None` is a tombstone.
pub struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// What replaying a partition found.
pub struct ReplayStats {
    pub records: u64,
}

/// Reads every record of a `__consumer_offsets` partition this broker leads, from its log start up to its log
/// end (see [`Partition::read_to_log_end`]), in order, calling `apply(key, value)`. Blocking. Fails if the partition stops being led here.
pub fn replay(
    part: &Partition,
    mut apply: impl FnMut(&[u8], Option<&[u8]>),
) -> anyhow::Result<ReplayStats> {
    replay_with_markers(part, |_, key, value| apply(key, value), |_, _| {})
}

/// [`replay`] that also says which records are transactional (`Some(producer id)`) and calls
/// `marker(producer_id, commit)` for each transaction marker (control batch), in log order.
pub fn replay_with_markers(
    part: &Partition,
    mut apply: impl FnMut(Option<i64>, &[u8], Option<&[u8]>),
    mut marker: impl FnMut(i64, bool),
) -> anyhow::Result<ReplayStats> {
    let name = part.name();
    let mut offset = part.log_start_offset();
    let mut stats = ReplayStats { records: 0 };
    loop {
        let read = part
            .read_to_log_end(offset, REPLAY_READ_BYTES)
            .with_context(|| format!("cannot load {name}"))?;
        let slice = read
            .records
            .with_context(|| format!("cannot read {name} at offset {offset}"))?;
        let Some(slice) = slice else { break };
        let bytes = slice
            .read_to_vec()
            .with_context(|| format!("cannot read {name} at offset {offset}"))?;
        let mut rest = bytes.as_slice();
        let before = offset;
        while let Some(header) = BatchHeader::parse(rest) {
            let size = header.size();
            if size > rest.len() {
                break;
            }
            let batch_bytes = &rest[..size];
            rest = &rest[size..];
            if header.next_offset() <= offset {
                continue; // a batch before the one we asked for
            }
            offset = header.next_offset();
            if header.is_control() {
                if let Some(commit) = control_marker(batch_bytes) {
                    marker(header.producer_id, commit);
                }
                continue;
            }
            if header.compression() != Some(Compression::None) {
                tracing::warn!(
                    partition = %name,
                    base_offset = header.base_offset,
                    "skipping a compressed batch in {TOPIC}: Annal writes this log uncompressed"
                );
                continue;
            }
            let producer = header.is_transactional().then_some(header.producer_id);
            stats.records +=
                for_each_record(batch_bytes, &mut |key: &[u8], value: Option<&[u8]>| {
                    apply(producer, key, value)
                });
        }
        if offset == before {
            break; // no progress: a torn or foreign batch; recovery in Log::open already cut torn tails
        }
    }
    Ok(stats)
}

/// A control batch's marker: `Some(true)` COMMIT, `Some(false)` ABORT (its record key: version i16, type i16),
/// `None` for another control type or a malformed record.
fn control_marker(batch: &[u8]) -> Option<bool> {
    let mut found = None;
    for_each_record(batch, &mut |key: &[u8], _| {
        if found.is_none() && key.len() >= 4 {
            found = match i16::from_be_bytes([key[2], key[3]]) {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            };
        }
    });
    found
}

/// Prepares a single-node data directory written before `__consumer_offsets` was a registered topic: finishes
/// or rolls back a rewrite the old coordinator left half done, and returns the partitions present (their
/// directories are already in a topic partition's layout, `<dir>/__consumer_offsets-<n>/`). A partition number
/// at or above `num_partitions` means the setting was lowered, which would move groups to other partitions:
/// refuse, as Kafka does not allow changing it either.
pub fn prepare_legacy_dir(dir: &Path, num_partitions: u32) -> anyhow::Result<Vec<u32>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    for name in list_names(dir)? {
        if let Some((p, Some("rewrite" | "old"))) = parse_name(&name) {
            recover_rewrite(dir, p)?;
        }
    }
    let mut present: Vec<u32> = list_names(dir)?
        .iter()
        .filter_map(|name| match parse_name(name) {
            Some((p, None)) if partition_dir(dir, p).is_dir() => Some(p),
            _ => None,
        })
        .collect();
    present.sort_unstable();
    present.dedup();
    if let Some(&p) = present.iter().find(|&&p| p >= num_partitions) {
        anyhow::bail!(
            "{} holds {TOPIC} partition {p} but offsets.topic.num.partitions is {num_partitions}; groups would \
             move to other partitions and lose their offsets. Set offsets.topic.num.partitions back to its \
             previous value (at least {})",
            dir.display(),
            p + 1
        );
    }
    Ok(present)
}

fn list_names(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// `__consumer_offsets-<n>` → `(n, None)`; `__consumer_offsets-<n>.<suffix>` → `(n, Some(suffix))`.
fn parse_name(name: &str) -> Option<(u32, Option<&str>)> {
    let rest = name.strip_prefix(TOPIC)?.strip_prefix('-')?;
    let (number, suffix) = match rest.split_once('.') {
        Some((n, s)) => (n, Some(s)),
        None => (rest, None),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((number.parse().ok()?, suffix))
}

pub fn partition_dir(dir: &Path, partition: u32) -> PathBuf {
    dir.join(format!("{TOPIC}-{partition}"))
}

/// Finishes or rolls back a rewrite interrupted by a crash. Order of a rewrite: (1) complete `.rewrite`,
/// (2) rename the partition to `.old`, (3) rename `.rewrite` to the partition, (4) remove `.old`.
fn recover_rewrite(dir: &Path, partition: u32) -> anyhow::Result<()> {
    let target = partition_dir(dir, partition);
    let temp = dir.join(format!("{TOPIC}-{partition}.rewrite"));
    let old = dir.join(format!("{TOPIC}-{partition}.old"));
    if target.exists() {
        // Crashed in (1) or (4): the partition directory is complete; drop the leftovers.
        for leftover in [&temp, &old] {
            if leftover.exists() {
                std::fs::remove_dir_all(leftover)
                    .with_context(|| format!("cannot remove {}", leftover.display()))?;
            }
        }
    } else if temp.exists() {
        // Crashed between (2) and (3): the rewrite was complete.
        std::fs::rename(&temp, &target)
            .with_context(|| format!("cannot rename {}", temp.display()))?;
        if old.exists() {
            std::fs::remove_dir_all(&old)
                .with_context(|| format!("cannot remove {}", old.display()))?;
        }
    } else if old.exists() {
        std::fs::rename(&old, &target)
            .with_context(|| format!("cannot rename {}", old.display()))?;
    }
    Ok(())
}

pub fn build(records: &[Record], now_ms: i64) -> Vec<u8> {
    build_with(records, now_ms, ProducerFields::default())
}

/// [`build`] with producer fields (a transactional offset commit is a batch of the producer's).
pub fn build_with(records: &[Record], now_ms: i64, producer: ProducerFields) -> Vec<u8> {
    let pairs: Vec<KeyValue> = records
        .iter()
        .map(|r| (Some(r.key.as_slice()), r.value.as_deref()))
        .collect();
    let timestamps = vec![now_ms; records.len()];
    batch::build_batch(&pairs, &timestamps, producer)
}

/// Calls `apply(key, value)` for each record of an uncompressed batch; stops at the first malformed record.
/// Returns the number of records applied.
fn for_each_record(batch: &[u8], apply: &mut impl FnMut(&[u8], Option<&[u8]>)) -> u64 {
    let Some(header) = BatchHeader::parse(batch) else {
        return 0;
    };
    let mut rest = batch
        .get(HEADER_SIZE..header.size().min(batch.len()))
        .unwrap_or(&[]);
    let mut applied = 0;
    for _ in 0..header.records_count.max(0) {
        let Some((length, used)) = batch::read_varint(rest) else {
            break;
        };
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        let Some(body) = rest.get(used..used.saturating_add(length)) else {
            break;
        };
        rest = &rest[used + length..];
        let Some((key, value)) = parse_record_body(body) else {
            break;
        };
        // A record without a key is not ours; ignore it.
        if let Some(key) = key {
            apply(key, value);
            applied += 1;
        }
    }
    applied
}

/// attributes i8, timestampDelta varlong, offsetDelta varint, key, value, headers.
fn parse_record_body(body: &[u8]) -> Option<KeyValue<'_>> {
    let mut pos = 1usize;
    let (_, used) = batch::read_varlong(body.get(pos..)?)?;
    pos += used;
    let (_, used) = batch::read_varint(body.get(pos..)?)?;
    pos += used;
    let mut field = || -> Option<Option<&[u8]>> {
        let (len, used) = batch::read_varint(body.get(pos..)?)?;
        pos += used;
        if len < 0 {
            return Some(None);
        }
        let bytes = body.get(pos..pos.checked_add(len as usize)?)?;
        pos += len as usize;
        Some(Some(bytes))
    };
    let key = field()?;
    let value = field()?;
    Some((key, value))
}
