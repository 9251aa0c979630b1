//! `annal-log`: Annal's storage engine, a Kafka-format partition log.
//!
//! A partition is a directory of segments. Each segment is a `<base offset>.log` file holding Kafka v2 record
//! batches byte for byte, with a sparse offset index (`.index`) and time index (`.timeindex`) beside it, so
//! Kafka's own tools (`kafka-dump-log`) read our files. See `docs/on-disk-format.md`.
//!
//! The engine knows nothing of the network and needs no async runtime: [`Log`] is a plain value with a
//! synchronous API. Mutations take `&mut self`; reads take `&self` and return a [`FileSlice`] that can be read
//! (or sent with `sendfile`) after the caller has released whatever lock guards the log.
//!
//! ```
//! use annal_log::{Log, LogConfig, AppendOptions, batch};
//! let dir = tempfile::tempdir().unwrap();
//! let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
//! let mut bytes = batch::build_uncompressed_batch(&[(None, Some(b"hello".as_slice()))], 1_700_000_000_000);
//! let info = log.append(&mut bytes, &AppendOptions::default()).unwrap();
//! assert_eq!((info.first_offset, info.last_offset), (0, 0));
//! let read = log.read(0, 1 << 20, None).unwrap();
//! assert_eq!(read.slice.unwrap().read_to_vec().unwrap(), bytes);
//! ```

pub mod batch;
mod checkpoint;
mod cleaner;
mod config;
pub mod control;
pub mod dir_failures;
mod dir_listing;
pub mod disk_faults;
mod error;
mod file_handles;
mod fsync_stats;
mod group_commit;
mod index;
pub mod key_index;
mod key_lookup;
mod log;
#[doc(hidden)]
pub mod page_cache;
pub mod producer;
pub mod records;
mod roll_flush;
mod segment;
mod slice;
mod txn_index;

pub use crate::cleaner::{
    CleanOutcome, CleanStats, CleanTask, Cleanable, CleanedLog, Cleaner, CleanerConfig,
};
pub use crate::config::LogConfig;
pub use crate::error::LogError;
pub use crate::file_handles::{
    nofile_soft_limit, raise_nofile_soft_limit, FileHandleStats, FileHandles, FILE_HANDLES_MIN,
    NON_LOG_DESCRIPTORS_RESERVE,
};
pub use crate::fsync_stats::{fsync_snapshot, FsyncSnapshot};
pub use crate::group_commit::{DurableError, DurableLog, DurableWait, GroupCommit};
pub use crate::key_lookup::{
    KeyIndexProgress, KeyIndexStats, KeyLookup, KeyQuery, LOOKUP_CATCH_UP_BYTES_MAX,
    REJECTED_CANDIDATES_MAX,
};
pub use crate::log::{
    AppendInfo, AppendOptions, AppendOrigin, Log, LogRead, RetentionGuard, RetentionOutcome,
    SegmentInfo, SyncHandle, TimestampType,
};
pub use crate::records::OwnedRecord;
pub use crate::slice::FileSlice;
pub use crate::txn_index::AbortedTxn;

/// Result alias for engine operations.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
