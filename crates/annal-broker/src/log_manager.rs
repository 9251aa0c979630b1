//! Partition logs on disk and the topic registry: names, topic ids, partition counts and config overrides,
//! persisted in `<data>/topics.json` (write-temp + fsync + rename); each partition's [`Log`] in
//! `<data>/<topic>-<p>/`. No protocol knowledge and no replication state: the [`crate::replica`] module wraps
//! the logs this opens in `Partition`s. (The registry stands in for the cluster metadata image until it lands.)
//!
//! Order of durable steps, so a crash never leaves a registered topic without its data or data without a topic:
//! create = persist the registry, then open the logs (opening creates the directories, also at the next start);
//! delete = persist the registry without the topic, then remove the directories (leftovers of a crash in between
//! are removed at the next start).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use annal_log::Log;
use anyhow::Context;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::durable::write_atomic;
use crate::topic_config;

pub const REGISTRY_FILE: &str = "topics.json";

/// The data directory's record that every partition log was closed cleanly at the last stop (the shape of
/// Apache Kafka's `.kafka_cleanshutdown` for its log directories; the KIP-966 file of that name is
/// `clean_shutdown.rs`, written on other conditions). Present: logs skip recovery. Removed, durably, once
/// every log is open and before any can change; written by [`crate::replica::ReplicaManager::close_all`]
/// only once every log was closed. One file instead of clearing each log's own flag with an atomic write
/// (a file fsync, a rename, a directory fsync) at every open: at 10,000 partitions, most of a clean restart.
pub const LOGS_CLEAN_MARKER: &str = ".annal_logs_clean";

/// One registered topic. Immutable; changes replace the `Arc<Topic>` in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub partition_count: i32,
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

/// The logs a registry change opened: one per new partition, in index order, starting at `first_index`.
pub struct OpenedLogs {
    pub topic: Arc<Topic>,
    pub first_index: i32,
    pub logs: Vec<Log>,
}

pub struct LogManager {
    data_dir: PathBuf,
    config: BrokerConfig,
    by_name: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serializes registry changes so persisted state and memory change in the same order.
    admin: Mutex<()>,
}

/// Why a topic name is not legal in Kafka (and so not here), or `None` if it is: the controller's rule, which
/// a single node applies too.
pub use annal_metadata::controller::invalid_topic_name;

pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

impl LogManager {
    /// Loads the registry, opens every partition's log (recovering it if the last shutdown was not clean) and
    /// removes directories of partitions no longer registered. Returns the opened logs too.
    pub fn open(config: &BrokerConfig) -> anyhow::Result<(LogManager, Vec<OpenedLogs>)> {
        // Every partition's segment files share the process's budget (`log.open.files.max`): the engine opens
        // them on demand and closes the least recently used, so partitions never run out of descriptors.
        annal_log::FileHandles::process_default().set_limit(config.open_files_max);
        tracing::info!(
            log_open_files_max = config.open_files_max,
            nofile_soft_limit = annal_log::nofile_soft_limit(),
            "segment files share an open-file budget"
        );
        let data_dir = config.data_dir.clone();
        let path = data_dir.join(REGISTRY_FILE);
        let persisted: Persisted = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is corrupt; restore it from a backup (the partition directories are intact)", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let marker = data_dir.join(LOGS_CLEAN_MARKER);
        let clean = match std::fs::metadata(&marker) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", marker.display())),
        };
        let mut by_name = BTreeMap::new();
        let mut opened = Vec::new();
        for t in persisted.topics {
            let id = Uuid::parse_str(&t.id).with_context(|| {
                format!(
                    "{}: topic '{}' has an invalid id '{}'",
                    path.display(),
                    t.name,
                    t.id
                )
            })?;
            let topic = Arc::new(Topic {
                name: t.name,
                id,
                partition_count: t.partitions,
                configs: t.configs,
            });
            let logs = open_logs(&data_dir, &topic, 0..topic.partition_count, config, clean)?;
            by_name.insert(topic.name.clone(), topic.clone());
            opened.push(OpenedLogs {
                topic,
                first_index: 0,
                logs,
            });
        }
        remove_orphans(&data_dir, &by_name);
        if clean {
            // Before anything can change a log: from here on, a crash is an unclean stop for all of them.
            std::fs::remove_file(&marker).with_context(|| {
                format!(
                    "cannot remove {}; remove it by hand or fix the data directory's permissions",
                    marker.display()
                )
            })?;
            crate::durable::sync_dir(&data_dir)?;
        }
        let manager = LogManager {
            data_dir,
            config: config.clone(),
            by_name: RwLock::new(by_name),
            admin: Mutex::new(()),
        };
        Ok((manager, opened))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Records that every partition log was closed cleanly ([`LOGS_CLEAN_MARKER`]); call only when each was
    /// closed with `Log::close_for_marker`. Blocking.
    pub fn mark_logs_clean(&self) -> anyhow::Result<()> {
        write_atomic(&self.data_dir.join(LOGS_CLEAN_MARKER), b"")
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.by_name.read().values().find(|t| t.id == id).cloned()
    }

    /// Every topic, by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.by_name.read().values().cloned().collect()
    }

    fn persist(&self, topics: &BTreeMap<String, Arc<Topic>>) -> anyhow::Result<()> {
        let p = Persisted {
            topics: topics
                .values()
                .map(|t| PersistedTopic {
                    name: t.name.clone(),
                    id: t.id.to_string(),
                    partitions: t.partition_count,
                    configs: t.configs.clone(),
                })
                .collect(),
        };
        write_atomic(
            &self.data_dir.join(REGISTRY_FILE),
            &serde_json::to_vec_pretty(&p)?,
        )
    }

    /// Registers a topic and opens its logs; the caller has validated name, count and configs. `Ok(None)` if it
    /// already exists. The topic is visible in the registry once its logs are open. Blocking.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<Option<OpenedLogs>> {
        self.create_topic_with_id(name, Uuid::new_v4(), partitions, configs)
    }

    /// [`LogManager::create_topic`] with the topic id the cluster metadata gave it.
    pub fn create_topic_with_id(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<Option<OpenedLogs>> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        if next.contains_key(name) {
            return Ok(None);
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            partition_count: partitions,
            configs,
        });
        next.insert(name.to_string(), topic.clone());
        // Registry first: the persisted topic is reopened (and its directories created) at the next start.
        self.persist(&next)?;
        let logs = open_logs(&self.data_dir, &topic, 0..partitions, &self.config, false)?;
        *self.by_name.write() = next;
        Ok(Some(OpenedLogs {
            topic,
            first_index: 0,
            logs,
        }))
    }

    /// Grows a topic to `count` partitions; returns the new partitions' logs. Blocking.
    pub fn add_partitions(&self, name: &str, count: i32) -> anyhow::Result<OpenedLogs> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(old) = next.get(name).cloned() else {
            anyhow::bail!("topic '{name}' does not exist")
        };
        anyhow::ensure!(
            count > old.partition_count,
            "topic '{name}' already has {} partitions; it can only grow",
            old.partition_count
        );
        let topic = Arc::new(Topic {
            partition_count: count,
            ..(*old).clone()
        });
        next.insert(name.to_string(), topic.clone());
        self.persist(&next)?;
        let logs = open_logs(
            &self.data_dir,
            &topic,
            old.partition_count..count,
            &self.config,
            false,
        )?;
        *self.by_name.write() = next;
        Ok(OpenedLogs {
            topic,
            first_index: old.partition_count,
            logs,
        })
    }

    /// Replaces a topic's config overrides in the registry; returns the updated topic (the caller applies the
    /// settings to its open logs). Blocking.
    pub fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> anyhow::Result<Arc<Topic>> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(old) = next.get(name).cloned() else {
            anyhow::bail!("topic '{name}' does not exist")
        };
        let topic = Arc::new(Topic {
            configs,
            ..(*old).clone()
        });
        next.insert(name.to_string(), topic.clone());
        self.persist(&next)?;
        *self.by_name.write() = next;
        Ok(topic)
    }

    /// Unregisters a topic (persisted first). Its data goes with [`remove_partition_data`]
    /// (Self::remove_partition_data) once its logs are closed. `Ok(None)` if it did not exist. Blocking.
    pub fn delete_topic(&self, name: &str) -> anyhow::Result<Option<Arc<Topic>>> {
        let _admin = self.admin.lock();
        let mut next = self.by_name.read().clone();
        let Some(topic) = next.remove(name) else {
            return Ok(None);
        };
        self.persist(&next)?;
        *self.by_name.write() = next;
        Ok(Some(topic))
    }

    /// Removes a deleted partition's files: through the engine if the caller got the log back (it was the sole
    /// owner), or by removing the directory (a request still holding the partition finishes against the open
    /// files). Blocking.
    pub fn remove_partition_data(&self, topic: &str, index: i32, log: Option<Log>) {
        let dir = partition_dir(&self.data_dir, topic, index);
        let removed = match log {
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
}

/// Opens (or creates) the logs of `indexes`, several at once ([`crate::log_io`]); the first error, in index
/// order, if any failed. `clean`: the [`LOGS_CLEAN_MARKER`] was found.
fn open_logs(
    data_dir: &Path,
    topic: &Topic,
    indexes: std::ops::Range<i32>,
    broker: &BrokerConfig,
    clean: bool,
) -> anyhow::Result<Vec<Log>> {
    crate::log_io::map_in_parallel(indexes.collect(), |p| {
        open_log(data_dir, topic, p, broker, clean)
    })
    .into_iter()
    .collect()
}

/// Opens (or creates) one partition's log with the topic's settings.
fn open_log(
    data_dir: &Path,
    topic: &Topic,
    index: i32,
    broker: &BrokerConfig,
    clean: bool,
) -> anyhow::Result<Log> {
    let name = &topic.name;
    let dir = partition_dir(data_dir, name, index);
    let config = topic_config::log_config(&topic.configs, broker);
    let mut log = Log::open_with_marker(&dir, config, clean)
        .with_context(|| format!("cannot open partition {name}-{index} in {}", dir.display()))?;
    if topic_config::durable_acks(&topic.configs, broker)
        && log.flushed_offset() < log.log_end_offset()
    {
        // Durable partitions expose only flushed records (see `replica::high_watermark`): after a kill -9 the
        // tail that recovery kept is flushed now, so the high watermark is not stuck below the log end.
        log.flush().with_context(|| {
            format!("cannot flush partition {name}-{index} in {}", dir.display())
        })?;
    }
    Ok(log)
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
        // Partitions the group coordinator kept as its own logs before `__consumer_offsets` was a registered topic
        // (it adopts them at start), and the cluster's metadata log.
        if topic == crate::group::OFFSETS_TOPIC || is_metadata_log_dir(&name) {
            continue;
        }
        if !entry.path().is_dir() || invalid_topic_name(topic).is_some() {
            continue;
        }
        let known = topics
            .get(topic)
            .is_some_and(|t| (0..t.partition_count).contains(&part));
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

/// The metadata quorum's log (`__cluster_metadata-0`): named like a partition, owned by annal-metadata.
fn is_metadata_log_dir(dir_name: &str) -> bool {
    dir_name == annal_metadata::raft::METADATA_LOG_DIR
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata log lives beside the partitions and is named like one; opening the partitions must never
    /// take it for a deleted partition's leftovers.
    #[test]
    fn the_metadata_log_is_not_an_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let meta = dir.path().join(annal_metadata::raft::METADATA_LOG_DIR);
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(meta.join("00000000000000000000.log"), b"").unwrap();
        let orphan = dir.path().join("gone-0");
        std::fs::create_dir_all(&orphan).unwrap();
        std::fs::write(orphan.join("00000000000000000000.log"), b"").unwrap();
        let config = BrokerConfig::load(None, &[], Some(dir.path().to_path_buf()), None).unwrap();
        let _ = LogManager::open(&config).unwrap();
        assert!(meta.exists(), "the metadata log was removed");
        assert!(!orphan.exists(), "a real orphan is still removed");
    }
}
