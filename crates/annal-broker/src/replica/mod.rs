//! Replicas of partitions, in Kafka's broker shape: [`ReplicaManager`] owns produce (`append_records`) and fetch
//! (`fetch_messages`, with long polls parked per partition in [`delayed_fetch`]) and the map of partitions;
//! [`Partition`] owns the leader epoch, replicas, ISR, high watermark and the only lock on its `Log`.
//!
//! Locking order: a partition's state lock, then its log lock; never the reverse. Neither is held across an
//! `await`; blocking engine calls run off the async workers.

mod checkpoints;
mod delayed_fetch;
mod error;
mod fetcher;
mod manager;
mod partition;

/// The checkpoint files' readers and writers, for the fuzz targets (fuzz/).
#[doc(hidden)]
pub mod checkpoint_files {
    pub use super::checkpoints::{
        read_high_watermarks, read_leader_epochs, write_high_watermarks, write_leader_epochs,
    };
}
pub use error::PartitionError;
pub use fetcher::ReplicaFetchers;
pub use manager::{
    AppendEntry, FetchParams, FetchPartition, FetchPartitionResult, ReplicaManager, RetentionMove,
};
pub use partition::{
    durable_sync_count, high_watermark, FollowerProgress, IsrChange, LeaderAppend, OffsetAndEpoch,
    OffsetSpec, Partition, PartitionConfig, PartitionRead, ReplicaFetch,
};
