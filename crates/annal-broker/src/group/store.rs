//! The `__consumer_offsets` partitions: Annal's own [`Log`]s under `<dir>/__consumer_offsets-<n>/`, opened
//! lazily (a partition's directory exists only once a group hashed to it has written something), replayed on
//! open, and rewritten on open when mostly dead records (the engine has no compaction yet).
//!
//! Each record is one key/value in Kafka's schemas (see [`super::records`]); a null value is a tombstone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use annal_log::batch::{self, BatchHeader, Compression, ProducerFields, HEADER_SIZE};
use annal_log::{AppendOptions, AppendOrigin, Log, LogConfig};
use anyhow::Context;

/// Kafka's internal topic name; our directories carry it so a Kafka user recognises them.
pub const TOPIC: &str = "__consumer_offsets";
/// Records per batch when rewriting a partition.
const REWRITE_BATCH_RECORDS: usize = 512;
/// Bytes read per step while replaying.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// A record's key and value as slices of a batch (`None` = null).
type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// One key/value record; `value: None` is a tombstone.
pub struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// An fsync to run outside the coordinator's lock (many appends then share one fsync).
pub struct PendingSync {
    pub partition: u32,
    /// The partition's rewrite count when the fsync was taken; a rewrite in between makes `upto` meaningless.
    pub epoch: u64,
    pub upto: i64,
    pub sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>,
}

/// The open partitions.
pub struct Store {
    dir: PathBuf,
    num_partitions: u32,
    logs: BTreeMap<u32, Log>,
    /// Records in each partition's log (replayed plus appended), for the rewrite decision.
    records: BTreeMap<u32, u64>,
    /// How many times each partition was rewritten.
    epochs: BTreeMap<u32, u64>,
}

/// What replaying a partition found, for the rewrite decision.
pub struct ReplayStats {
    pub records: u64,
}

impl Store {
    /// Finds the partitions present under `dir` (finishing or discarding an interrupted rewrite) without opening
    /// them. A partition number at or above `num_partitions` means the setting was lowered, which would move
    /// groups to other partitions: refuse, as Kafka does not allow changing it either.
    pub fn new(dir: &Path, num_partitions: u32) -> anyhow::Result<(Store, Vec<u32>)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        // First finish or roll back interrupted rewrites, then list the partitions.
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
        Ok((
            Store {
                dir: dir.to_path_buf(),
                num_partitions,
                logs: BTreeMap::new(),
                records: BTreeMap::new(),
                epochs: BTreeMap::new(),
            },
            present,
        ))
    }

    pub fn num_partitions(&self) -> u32 {
        self.num_partitions
    }

    fn log(&mut self, partition: u32) -> anyhow::Result<&mut Log> {
        if !self.logs.contains_key(&partition) {
            let dir = partition_dir(&self.dir, partition);
            let old = self.dir.join(format!("{TOPIC}-{partition}.old"));
            // Never create an empty log in place of one a failed rewrite moved aside.
            anyhow::ensure!(
                dir.exists() || !old.exists(),
                "{TOPIC}-{partition} is missing but {} exists (an unfinished rewrite); restart the broker to \
                 finish it",
                old.display()
            );
            let log = Log::open(&dir, log_config())
                .with_context(|| format!("cannot open {TOPIC}-{partition} in {}", dir.display()))?;
            self.logs.insert(partition, log);
        }
        Ok(self.logs.get_mut(&partition).expect("inserted above"))
    }

    /// Reads every record of `partition` from its start, in order, calling `apply(key, value)`.
    pub fn replay(
        &mut self,
        partition: u32,
        mut apply: impl FnMut(&[u8], Option<&[u8]>),
    ) -> anyhow::Result<ReplayStats> {
        let log = self.log(partition)?;
        let mut offset = log.log_start_offset();
        let mut stats = ReplayStats { records: 0 };
        loop {
            let read = log
                .read(offset, REPLAY_READ_BYTES, None)
                .with_context(|| format!("cannot read {TOPIC}-{partition} at offset {offset}"))?;
            let Some(slice) = read.slice else { break };
            let bytes = slice
                .read_to_vec()
                .with_context(|| format!("cannot read {TOPIC}-{partition} at offset {offset}"))?;
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
                    continue;
                }
                if header.compression() != Some(Compression::None) {
                    tracing::warn!(
                        partition,
                        base_offset = header.base_offset,
                        "skipping a compressed batch in {TOPIC}: Annal writes this log uncompressed"
                    );
                    continue;
                }
                stats.records += for_each_record(batch_bytes, &mut apply);
            }
            if offset == before {
                break; // no progress: a torn or foreign batch; recovery in Log::open already cut torn tails
            }
        }
        self.records.insert(partition, stats.records);
        Ok(stats)
    }

    /// Records in `partition`'s log, live or superseded.
    pub fn record_count(&self, partition: u32) -> u64 {
        self.records.get(&partition).copied().unwrap_or(0)
    }

    /// Partitions that have a log (opened or replayed).
    pub fn partitions(&self) -> Vec<u32> {
        self.records.keys().copied().collect()
    }

    /// Appends `records` as one batch (written, not yet fsynced). Returns what must be fsynced to make them
    /// durable (run it outside any lock, then [`Store::mark_flushed`]), or `None` when nothing was written.
    pub fn append(
        &mut self,
        partition: u32,
        records: &[Record],
        now_ms: i64,
    ) -> anyhow::Result<Option<PendingSync>> {
        if records.is_empty() {
            return Ok(None);
        }
        let mut bytes = build(records, now_ms);
        let opts = AppendOptions {
            now_ms,
            origin: AppendOrigin::Coordinator,
            ..AppendOptions::default()
        };
        let log = self.log(partition)?;
        log.append(&mut bytes, &opts)
            .with_context(|| format!("cannot append to {TOPIC}-{partition}"))?;
        let handle = log.sync_handle();
        *self.records.entry(partition).or_default() += records.len() as u64;
        Ok(Some(PendingSync {
            partition,
            epoch: self.epochs.get(&partition).copied().unwrap_or(0),
            upto: handle.upto(),
            sync: Box::new(move || handle.sync()),
        }))
    }

    /// Records that a [`PendingSync`] of `partition` taken at `epoch` completed.
    pub fn mark_flushed(&mut self, partition: u32, epoch: u64, upto: i64) {
        if self.epochs.get(&partition).copied().unwrap_or(0) != epoch {
            return;
        }
        if let Some(log) = self.logs.get_mut(&partition) {
            log.mark_flushed(upto);
        }
    }

    /// Replaces `partition`'s log with one holding only `live` records (crash-safe: see [`recover_rewrite`]).
    pub fn rewrite(&mut self, partition: u32, live: &[Record], now_ms: i64) -> anyhow::Result<()> {
        let target = partition_dir(&self.dir, partition);
        let temp = self.dir.join(format!("{TOPIC}-{partition}.rewrite"));
        let old = self.dir.join(format!("{TOPIC}-{partition}.old"));
        if temp.exists() {
            std::fs::remove_dir_all(&temp)
                .with_context(|| format!("cannot remove {}", temp.display()))?;
        }
        let mut fresh = Log::open(&temp, log_config())
            .with_context(|| format!("cannot create {}", temp.display()))?;
        let opts = AppendOptions {
            now_ms,
            origin: AppendOrigin::Coordinator,
            ..AppendOptions::default()
        };
        for chunk in live.chunks(REWRITE_BATCH_RECORDS) {
            let mut bytes = build(chunk, now_ms);
            fresh
                .append(&mut bytes, &opts)
                .with_context(|| format!("cannot write {}", temp.display()))?;
        }
        fresh
            .close()
            .with_context(|| format!("cannot close {}", temp.display()))?;
        if let Some(log) = self.logs.remove(&partition) {
            log.close()
                .with_context(|| format!("cannot close {}", target.display()))?;
        }
        // The complete new log exists before the old one moves aside; recovery relies on that order.
        std::fs::rename(&target, &old)
            .with_context(|| format!("cannot rename {}", target.display()))?;
        if let Err(e) = std::fs::rename(&temp, &target) {
            // Put the old log back rather than leave the partition without one (a later lazy open would
            // create an empty log, and recovery would then discard both copies).
            std::fs::rename(&old, &target).with_context(|| {
                format!("cannot restore {} after a failed rewrite; move it back by hand before restarting", old.display())
            })?;
            return Err(e).with_context(|| format!("cannot rename {}", temp.display()));
        }
        sync_dir(&self.dir);
        std::fs::remove_dir_all(&old)
            .with_context(|| format!("cannot remove {}", old.display()))?;
        self.records.insert(partition, live.len() as u64);
        *self.epochs.entry(partition).or_default() += 1;
        Ok(())
    }

    /// fsyncs and closes every open partition, marking a clean shutdown.
    pub fn close_all(&mut self) {
        for (partition, log) in std::mem::take(&mut self.logs) {
            if let Err(e) = log.close() {
                tracing::error!(partition, error = %e, "closing {TOPIC} partition failed");
            }
        }
    }
}

/// The coordinator log's settings: never deleted by time or size (it is the only copy of the offsets), large
/// enough batches for a commit of many partitions, Kafka's `offsets.topic.segment.bytes` (100 MiB).
fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 100 * 1024 * 1024,
        retention_ms: -1,
        retention_bytes: -1,
        max_message_bytes: 100 * 1024 * 1024,
        ..LogConfig::default()
    }
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

fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

fn build(records: &[Record], now_ms: i64) -> Vec<u8> {
    let pairs: Vec<KeyValue> = records
        .iter()
        .map(|r| (Some(r.key.as_slice()), r.value.as_deref()))
        .collect();
    let timestamps = vec![now_ms; records.len()];
    batch::build_batch(&pairs, &timestamps, ProducerFields::default())
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
