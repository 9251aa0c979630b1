//! The engine's error type. Every message says what failed, where, and what to do about it.

use std::path::PathBuf;

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Bytes that do not frame as v2 record batches, or whose CRC does not match (Kafka: CORRUPT_MESSAGE).
    #[error("corrupt record batch at byte {position} of the request: {reason}")]
    CorruptRecord { position: usize, reason: String },
    /// Well-framed batches that break a rule (Kafka: INVALID_RECORD).
    #[error("invalid record batch at byte {position} of the request: {reason}")]
    InvalidRecord { position: usize, reason: String },
    /// A batch larger than `max.message.bytes` (Kafka: MESSAGE_TOO_LARGE).
    #[error("record batch of {size} bytes exceeds max.message.bytes={max}; raise the topic's max.message.bytes or send smaller batches")]
    MessageTooLarge { size: usize, max: u32 },
    /// A read outside `[log_start, log_end]` (Kafka: OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is out of range: the log holds [{log_start}, {log_end})")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// An idempotent producer's batch does not follow its previous one (Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER).
    #[error("producer {producer_id} epoch {epoch}: sequence {sequence} is out of order, expected {expected}")]
    OutOfOrderSequence {
        producer_id: i64,
        epoch: i16,
        sequence: i32,
        expected: i32,
    },
    /// A batch from an older epoch of a producer (Kafka: INVALID_PRODUCER_EPOCH).
    #[error("producer {producer_id}: epoch {epoch} is older than the current epoch {current}; the producer was fenced")]
    InvalidProducerEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    /// A producer broke the transaction protocol, such as a non-transactional batch while its transaction is
    /// open (Kafka: INVALID_TXN_STATE).
    #[error("producer {producer_id}: {reason}; end the transaction (commit or abort) before writing outside it")]
    InvalidTxnState { producer_id: i64, reason: String },
    /// A transaction marker from a coordinator older than the last one that wrote for this producer
    /// (Kafka: TRANSACTION_COORDINATOR_FENCED; the stale coordinator must stop).
    #[error("producer {producer_id}: a marker from coordinator epoch {coordinator_epoch} is older than epoch {current}, which already wrote one; the sending coordinator was fenced")]
    TransactionCoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
    /// A producer whose state this partition does not know, sending a non-initial sequence
    /// (Kafka: UNKNOWN_PRODUCER_ID; clients reset their sequence).
    #[error("producer {producer_id} is unknown to this partition (its state expired or was removed) and sent sequence {sequence}")]
    UnknownProducerId { producer_id: i64, sequence: i32 },
    /// The filesystem failed; the log is left consistent.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A key lookup on a log whose topic does not have `key.index.enable=true`.
    #[error("the log {dir} has no key index; set the topic config key.index.enable=true (existing segments are then indexed in the background)")]
    KeyIndexDisabled { dir: PathBuf },
    /// A key lookup while the key index of the range asked for is still being built (just enabled, or
    /// rebuilding after a restart or a compaction).
    #[error("the key index of {dir} is still being built ({pending_segments} of {segments} segments to go); retry shortly")]
    KeyIndexBuilding {
        dir: PathBuf,
        pending_segments: usize,
        segments: usize,
    },
    /// The process is out of file descriptors (EMFILE, or ENFILE for the whole system) even after the engine
    /// closed half of its cached handles (Kafka: KAFKA_STORAGE_ERROR, retriable).
    #[error("{op} {path}: out of file descriptors ({source}); the engine caches at most {limit} open segment files (the broker's log.open.files.max) and the process's limit (`ulimit -n`, systemd LimitNOFILE) must leave room for them and every socket: raise the limit or lower log.open.files.max")]
    TooManyOpenFiles {
        op: &'static str,
        path: PathBuf,
        limit: usize,
        #[source]
        source: std::io::Error,
    },
    /// Files on disk that cannot be made sense of and cannot be repaired automatically.
    #[error("unrecoverable log directory {path}: {reason}")]
    Unrecoverable { path: PathBuf, reason: String },
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if crate::file_handles::is_out_of_descriptors(&source) {
            return LogError::TooManyOpenFiles {
                op,
                path: path.into(),
                limit: crate::file_handles::FileHandles::process_default().limit(),
                source,
            };
        }
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True when the process (or system) ran out of file descriptors.
    pub fn is_too_many_open_files(&self) -> bool {
        matches!(self, LogError::TooManyOpenFiles { .. })
    }

    /// True when the disk is full: the append failed, nothing was kept, and it will work once space is freed.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, LogError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
    }
}
