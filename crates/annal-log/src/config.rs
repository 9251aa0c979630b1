//! Per-partition log settings, named after Kafka's topic configs.

use std::sync::Arc;

use crate::file_handles::FileHandles;

/// Settings of one partition's log. Field names follow Kafka's topic configs (`segment.bytes` is
/// `segment_bytes`); defaults are Kafka's.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll to a new segment when the active one would exceed this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: i64,
    /// `retention.ms`: delete segments whose newest timestamp is older than this; -1 keeps them forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log exceeds this; -1 means no limit.
    pub retention_bytes: i64,
    /// `max.message.bytes`: the largest record batch accepted.
    pub max_message_bytes: u32,
    /// `index.interval.bytes`: bytes of log between two offset (and time) index entries.
    pub index_interval_bytes: u32,
    /// `segment.index.bytes`: an index larger than this forces a roll.
    pub segment_index_bytes: u32,
    /// `flush.messages`: fsync after this many appended records; `u64::MAX` leaves it to the page cache.
    pub flush_messages: u64,
    /// `flush.ms`: fsync when the oldest unflushed append is older than this (checked by [`crate::Log::flush_if_due`]).
    pub flush_ms: i64,
    /// `producer.id.expiration.ms`: forget an idle idempotent producer's state after this.
    pub producer_id_expiration_ms: i64,
    /// `cleanup.policy` contains `compact`: the cleaner keeps the latest record per key (see `cleaner.rs`).
    /// Retention (`retention.ms`, `retention.bytes`) applies as set, so `compact,delete` is both.
    pub compact: bool,
    /// `delete.retention.ms`: how long the cleaner keeps a tombstone after first keeping it.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean when dirty bytes / (clean + dirty bytes) reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment whose newest record is younger than this is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment whose first batch is older than this is cleaned whatever the
    /// ratio.
    pub max_compaction_lag_ms: i64,
    /// `key.index.enable` (Annal's own): keep a key index beside each segment, so records can be found by key
    /// (`Log::lookup_key`) without scanning. Derived data; see `key_index.rs`.
    pub key_index: bool,
    /// The open-file budget segment files are reached through, shared by every log of the process by
    /// default ([`FileHandles::process_default`]); see `file_handles.rs`.
    pub file_handles: Arc<FileHandles>,
}

impl LogConfig {
    /// Kafka's default `max.message.bytes`: 1 MiB plus the record batch overhead.
    pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1_048_588;
    /// The largest segment we can address: index positions are 32-bit, as in Kafka.
    pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;

    /// The most one batch's records may decompress to when the engine reads them (timestamp lookups, the
    /// cleaner, recompression): 16 times `max.message.bytes`, at least 64 MiB and at most 1 GiB. Producers cap
    /// a batch's uncompressed size near `max.message.bytes`, so only a decompression bomb reaches this; it is
    /// an error, never an allocation.
    pub fn decompressed_batch_limit(&self) -> usize {
        (self.max_message_bytes as usize)
            .saturating_mul(16)
            .clamp(64 << 20, 1 << 30)
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            flush_messages: u64::MAX,
            flush_ms: i64::MAX,
            producer_id_expiration_ms: 24 * 60 * 60 * 1000,
            compact: false,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            key_index: false,
            file_handles: FileHandles::process_default(),
        }
    }
}
