//! The topic registry: names, topic ids, partition counts and config overrides, persisted in
//! `<data>/topics.json` (write-temp + fsync + rename), and each partition's [`Log`] in `<data>/<topic>-<p>/`.
//!
//! Order of durable steps, so a crash never leaves a registered topic without its data or data without a topic:
//! create = persist the registry, then open the logs (opening creates the directories, also at the next start);
//! delete = persist the registry without the topic, then remove the directories (leftovers of a crash in between
//! are removed at the next start).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use annal_log::{DurableLog, GroupCommit, Log, SyncHandle};
use anyhow::Context;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::durable::write_atomic;
use crate::topic_config;

pub const REGISTRY_FILE: &str = "topics.json";

/// One partition: its log and what the broker needs beside it.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    /// Lock it (`p.log.lock()`) for short engine calls; never hold it across an fsync the caller waits for.
    pub log: Arc<PartitionLog>,
    /// Group commit for durable acknowledgements (`flush.messages=1`), started at the first durable produce so
    /// that partitions which never need it cost no thread.
    commit: OnceLock<GroupCommit>,
}

impl Partition {
    /// The partition's group commit (started on first use): register a wait with [`GroupCommit::durable`] under
    /// the log's lock, right after the append, and await it after releasing the lock.
    pub fn group_commit(&self) -> &GroupCommit {
        self.commit
            .get_or_init(|| GroupCommit::start(Arc::clone(&self.log)))
    }

    /// Stops the group commit (its flusher thread holds the log) and returns the log if nothing else holds it.
    fn into_log(self) -> Option<Log> {
        drop(self.commit);
        Arc::try_unwrap(self.log).ok().map(|l| l.0.into_inner())
    }
}

/// The high watermark of a partition: what consumers may see and ListOffsets LATEST answers. For durable topics
/// (`flush.messages=1`, see [`topic_config::durable_acks`]) it is the flushed offset, so no consumer sees a record
/// before its fsync (as Kafka's high watermark would not expose it); otherwise the log end.
pub fn high_watermark(log: &Log, durable: bool) -> i64 {
    if durable {
        log.flushed_offset().min(log.log_end_offset())
    } else {
        log.log_end_offset()
    }
}

/// A partition's engine log behind its mutex. Derefs to the mutex; as a [`DurableLog`] it counts the group
/// commit fsyncs it runs (see [`durable_sync_count`]).
pub struct PartitionLog(Mutex<Log>);

impl Deref for PartitionLog {
    type Target = Mutex<Log>;

    fn deref(&self) -> &Mutex<Log> {
        &self.0
    }
}

static DURABLE_SYNCS: AtomicU64 = AtomicU64::new(0);

/// How many group-commit fsyncs (rounds, each covering every durable append waiting for it) this process has
/// run, over all partitions: for metrics, and for tests that check appends share fsyncs.
pub fn durable_sync_count() -> u64 {
    DURABLE_SYNCS.load(Ordering::Relaxed)
}

impl DurableLog for PartitionLog {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.0.lock())
    }

    fn sync(&self, handle: &SyncHandle) -> std::io::Result<()> {
        DURABLE_SYNCS.fetch_add(1, Ordering::Relaxed);
        handle.sync()
    }
}

/// One topic. Immutable; changes replace the `Arc<Topic>` in the registry (partitions are shared).
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<Arc<Partition>>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct PersistedTopic {
    name: String,
    id: String,
    partitions: i32,
    configs: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Default)]
struct Persisted {
    topics: Vec<PersistedTopic>,
}

pub struct Topics {
    data_dir: PathBuf,
    by_name: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serializes registry changes so persisted state and memory change in the same order.
    admin: Mutex<()>,
}

/// Why a topic name is not legal in Kafka (and so not here), or `None` if it is.
pub fn invalid_topic_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Some(format!("topic name '{name}' is not allowed"));
    }
    if name.len() > 249 {
        return Some(format!(
            "topic name is {} characters long; the maximum is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "topic name '{name}' contains '{c}'; legal characters are ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    None
}

pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

impl Topics {
    /// Loads the registry and opens every partition's log (recovering it if the last shutdown was not clean).
    pub fn open(config: &BrokerConfig) -> anyhow::Result<Topics> {
        let data_dir = config.data_dir.clone();
        let path = data_dir.join(REGISTRY_FILE);
        let persisted: Persisted = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is corrupt; restore it from a backup (the partition directories are intact)", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let mut by_name = BTreeMap::new();
        for t in persisted.topics {
            let id = Uuid::parse_str(&t.id).with_context(|| {
                format!(
                    "{}: topic '{}' has an invalid id '{}'",
                    path.display(),
                    t.name,
                    t.id
                )
            })?;
            let mut partitions = Vec::new();
            for p in 0..t.partitions {
                partitions.push(open_partition(&data_dir, &t.name, p, &t.configs, config)?);
            }
            by_name.insert(
                t.name.clone(),
                Arc::new(Topic {
                    name: t.name,
                    id,
                    partitions,
                    configs: t.configs,
                }),
            );
        }
        remove_orphans(&data_dir, &by_name);
        Ok(Topics {
            data_dir,
            by_name: RwLock::new(by_name),
            admin: Mutex::new(()),
        })
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn get_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.by_name.read().values().find(|t| t.id == id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Topic>> {
        self.by_name.read().values().cloned().collect()
    }

    fn persist(&self, topics: &BTreeMap<String, Arc<Topic>>) -> anyhow::Result<()> {
        let p = Persisted {
            topics: topics
                .values()
                .map(|t| PersistedTopic {
                    name: t.name.clone(),
                    id: t.id.to_string(),
                    partitions: t.partitions.len() as i32,
                    configs: t.configs.clone(),
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&p)?;
        write_atomic(&self.data_dir.join(REGISTRY_FILE), &bytes)
    }

    /// Creates a topic; the caller has validated name, count and configs. Returns `Ok(None)` if it already exists.
    pub fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        broker: &BrokerConfig,
    ) -> anyhow::Result<Option<Arc<Topic>>> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        if next.contains_key(name) {
            return Ok(None);
        }
        // Registry first: the persisted topic is reopened (and its directories created) at the next start.
        let placeholder = Arc::new(Topic {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions: Vec::new(),
            configs,
        });
        next.insert(name.to_string(), placeholder.clone());
        self.persist_with_counts(&next, name, partitions)?;
        let mut parts = Vec::new();
        for p in 0..partitions {
            parts.push(open_partition(
                &self.data_dir,
                name,
                p,
                &placeholder.configs,
                broker,
            )?);
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id: placeholder.id,
            partitions: parts,
            configs: placeholder.configs.clone(),
        });
        next.insert(name.to_string(), topic.clone());
        *self.by_name.write() = next;
        Ok(Some(topic))
    }

    /// Persists `topics`, with `name` recorded as having `count` partitions (its partitions are not open yet).
    fn persist_with_counts(
        &self,
        topics: &BTreeMap<String, Arc<Topic>>,
        name: &str,
        count: i32,
    ) -> anyhow::Result<()> {
        let p = Persisted {
            topics: topics
                .values()
                .map(|t| PersistedTopic {
                    name: t.name.clone(),
                    id: t.id.to_string(),
                    partitions: if t.name == name {
                        count
                    } else {
                        t.partitions.len() as i32
                    },
                    configs: t.configs.clone(),
                })
                .collect(),
        };
        write_atomic(
            &self.data_dir.join(REGISTRY_FILE),
            &serde_json::to_vec_pretty(&p)?,
        )
    }

    /// Deletes a topic and its data. Returns false if it did not exist.
    pub fn delete(&self, name: &str) -> anyhow::Result<Option<Uuid>> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(topic) = next.remove(name) else {
            return Ok(None);
        };
        self.persist(&next)?;
        *self.by_name.write() = next;
        let id = topic.id;
        let (name, partitions) = match Arc::try_unwrap(topic) {
            Ok(t) => (t.name, t.partitions),
            Err(shared) => (shared.name.clone(), shared.partitions.clone()),
        };
        for p in partitions {
            let dir = partition_dir(&self.data_dir, &name, p.index);
            // Sole owner: let the engine delete its files. A request still holding the partition finishes
            // against the open files; the directory goes now either way.
            let removed = match Arc::try_unwrap(p).ok().and_then(Partition::into_log) {
                Some(log) => log.delete().map_err(|e| e.to_string()),
                None => Err("partition in use".to_string()),
            };
            if removed.is_err() {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(dir = %dir.display(), error = %e, "could not remove a deleted topic's partition directory; remove it by hand");
                    }
                }
            }
        }
        Ok(Some(id))
    }

    /// Grows a topic to `count` partitions.
    pub fn add_partitions(
        &self,
        name: &str,
        count: i32,
        broker: &BrokerConfig,
    ) -> anyhow::Result<()> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(old) = next.get(name).cloned() else {
            anyhow::bail!("topic '{name}' does not exist")
        };
        self.persist_with_counts(&next, name, count)?;
        let mut parts = old.partitions.clone();
        for p in old.partitions.len() as i32..count {
            parts.push(open_partition(
                &self.data_dir,
                name,
                p,
                &old.configs,
                broker,
            )?);
        }
        next.insert(
            name.to_string(),
            Arc::new(Topic {
                name: old.name.clone(),
                id: old.id,
                partitions: parts,
                configs: old.configs.clone(),
            }),
        );
        *self.by_name.write() = next;
        Ok(())
    }

    /// Replaces a topic's config overrides and applies them to its logs.
    pub fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        broker: &BrokerConfig,
    ) -> anyhow::Result<()> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(old) = next.get(name).cloned() else {
            anyhow::bail!("topic '{name}' does not exist")
        };
        let topic = Arc::new(Topic {
            name: old.name.clone(),
            id: old.id,
            partitions: old.partitions.clone(),
            configs,
        });
        next.insert(name.to_string(), topic.clone());
        self.persist(&next)?;
        *self.by_name.write() = next;
        let log_config = topic_config::log_config(&topic.configs, broker);
        let durable = topic_config::durable_acks(&topic.configs, broker);
        for p in &topic.partitions {
            let mut log = p.log.lock();
            log.set_config(log_config.clone());
            // Becoming durable: flush what was appended before, so the high watermark (now the flushed offset)
            // does not step back.
            if durable && log.flushed_offset() < log.log_end_offset() {
                if let Err(e) = log.flush() {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "flush after config change failed");
                }
            }
        }
        Ok(())
    }

    /// Closes every log cleanly (marks clean shutdown). Logs still referenced elsewhere are flushed instead.
    pub fn close_all(&self) {
        let topics = std::mem::take(&mut *self.by_name.write());
        for (_, topic) in topics {
            for p in &topic.partitions {
                if let Err(e) = p.log.lock().flush() {
                    tracing::error!(topic = %topic.name, partition = p.index, error = %e, "flush at shutdown failed");
                }
            }
            let Ok(topic) = Arc::try_unwrap(topic) else {
                continue;
            };
            for p in topic.partitions {
                let (name, index) = (p.topic.clone(), p.index);
                match Arc::try_unwrap(p).ok().and_then(Partition::into_log) {
                    Some(log) => {
                        if let Err(e) = log.close() {
                            tracing::error!(topic = %name, partition = index, error = %e, "clean close failed");
                        }
                    }
                    None => {
                        tracing::warn!(topic = %name, partition = index, "partition still in use at shutdown; flushed but not marked clean")
                    }
                }
            }
        }
    }
}

fn open_partition(
    data_dir: &Path,
    topic: &str,
    index: i32,
    configs: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> anyhow::Result<Arc<Partition>> {
    let dir = partition_dir(data_dir, topic, index);
    let mut log = Log::open(&dir, topic_config::log_config(configs, broker))
        .with_context(|| format!("cannot open partition {topic}-{index} in {}", dir.display()))?;
    if topic_config::durable_acks(configs, broker) && log.flushed_offset() < log.log_end_offset() {
        // Durable partitions expose only flushed records (see `high_watermark`): after a kill -9 the tail that
        // recovery kept is flushed now, so the high watermark is not stuck below the log end.
        log.flush().with_context(|| {
            format!(
                "cannot flush partition {topic}-{index} in {}",
                dir.display()
            )
        })?;
    }
    Ok(Arc::new(Partition {
        topic: topic.to_string(),
        index,
        log: Arc::new(PartitionLog(Mutex::new(log))),
        commit: OnceLock::new(),
    }))
}

/// Removes partition directories of topics that are not registered (left by a crash during a delete).
fn remove_orphans(data_dir: &Path, topics: &BTreeMap<String, Arc<Topic>>) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some((topic, part)) = name.rsplit_once('-') else {
            continue;
        };
        let Ok(part) = part.parse::<i32>() else {
            continue;
        };
        // The group coordinator's own logs are not registered topics.
        if topic == crate::group::OFFSETS_TOPIC {
            continue;
        }
        if !entry.path().is_dir() || invalid_topic_name(topic).is_some() {
            continue;
        }
        let known = topics
            .get(topic)
            .is_some_and(|t| (part as usize) < t.partitions.len());
        if !known && !looks_like_partition_dir(&entry.path()) {
            tracing::warn!(dir = %entry.path().display(), "directory in the data directory is not a known partition; left alone");
            continue;
        }
        if !known {
            tracing::warn!(dir = %entry.path().display(), "removing the directory of a deleted partition");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// True if every file in `dir` is one the engine writes (segments, indexes, snapshots, checkpoints), so removing
/// it cannot destroy anything else that happens to be named like `<name>-<number>`.
fn looks_like_partition_dir(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|e| {
        let name = e.file_name().to_string_lossy().to_string();
        let segment_file = name.len() > 21
            && name.as_bytes()[..20].iter().all(u8::is_ascii_digit)
            && name.as_bytes()[20] == b'.';
        e.path().is_file()
            && (segment_file
                || name.ends_with("checkpoint")
                || name.ends_with(".tmp")
                || name == "partition.metadata")
    })
}
