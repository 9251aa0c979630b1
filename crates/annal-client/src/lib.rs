//! `annal-client`: Annal's async Kafka-protocol client, for any Kafka-compatible broker.
//!
//! It is shared by the `annal` CLI, the end-to-end tests, and the broker's own connections to other nodes
//! (replica fetcher, broker-to-controller channel). Two levels:
//!
//! - [`Connection`]: one TCP connection to one broker. It connects within a timeout, negotiates versions with
//!   ApiVersions (KIP-511 downgrade included), and sends any `kafka_protocol` request type: [`Connection::send`]
//!   picks the highest version both sides speak, [`Connection::send_version`] uses the caller's. Responses are
//!   bounded by [`ConnectionOptions::max_response_bytes`]; any failure mid-exchange closes the connection and
//!   the caller reconnects (see [`Connection`]).
//! - [`Client`]: a cluster client over connections: topic admin (partitions added with
//!   [`Client::create_partitions`], records trimmed with [`Client::delete_records`]), ListOffsets, Produce and
//!   Fetch routed to partition leaders, consumer group administration, and cluster description
//!   ([`Client::describe_cluster`], [`Client::describe_quorum`]).
//! - [`GroupConsumer`]: one member of a classic consumer group (JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
//!   LeaveGroup) with Kafka's range assignor ([`range_assign`]); the caller fetches what it is assigned.
//!
//! Around them: record batches ([`encode_batch`], [`decode_fetched`], with decompression bounded per batch so a
//! small hostile batch cannot expand to gigabytes), consumer assignments ([`decode_assignment`], counts checked
//! before allocating), and Kafka error codes as names a person can search for ([`errors`]).
//!
//! Errors are `anyhow::Error`s whose messages say what failed and what to do; they are meant to be shown.
//!
//! ```no_run
//! use annal_client::{Connection, ConnectionOptions};
//! use kafka_protocol::messages::MetadataRequest;
//! use std::time::Duration;
//!
//! # async fn example() -> anyhow::Result<()> {
//! let options = ConnectionOptions {
//!     connect_timeout: Duration::from_secs(2),
//!     max_response_bytes: 8 * 1024 * 1024,
//!     client_id: "annal-broker-1".to_string(),
//!     ..ConnectionOptions::default()
//! };
//! let mut conn = Connection::connect_with("127.0.0.1:9092", options).await?;
//! // Highest common Metadata version between 4 and 12; `send_version` would force one.
//! let (metadata, version) = conn.send(&MetadataRequest::default(), (4, 12)).await?;
//! println!("Metadata v{version}: {} brokers", metadata.brokers.len());
//! # Ok(())
//! # }
//! ```

mod assignment;
mod batch;
mod client;
mod cluster;
mod codec;
mod connection;
pub mod errors;
mod group_consumer;
mod groups;
pub mod hex;
pub mod net;
mod partition_admin;
pub mod partitioner;
mod sasl;
pub mod scram;
mod tls;

pub use crate::assignment::{decode_assignment, Assignment};
pub use crate::batch::{
    decode_fetched, encode_batch, DecodedRecords, FetchedRecord, OutgoingRecord,
};
pub use crate::client::{
    Client, ConfigEntry, ConfigSource, CreatedTopic, FetchedPartition, ListedOffset,
    PartitionMetadata, ProduceResult, TopicMetadata, EARLIEST, LATEST,
};
pub use crate::cluster::{ClusterBroker, ClusterDescription, QuorumDescription, QuorumReplica};
pub use crate::connection::{pick_common_version, Connection, ConnectionOptions};
pub use crate::group_consumer::{
    range_assign, GroupConsumer, GroupConsumerOptions, Membership, RANGE_ASSIGNOR,
};
pub use crate::groups::{
    group_error, CommittedOffset, Coordinator, GroupDescription, GroupMember, GroupOffsets,
    ListedGroup, MemberAssignment, ProducerInfo,
};
pub use crate::partition_admin::{delete_records_error, DeletedRecords};
pub use crate::sasl::{SaslCredentials, SaslMechanism};
pub use crate::tls::{ClientTls, TlsNetwork};
