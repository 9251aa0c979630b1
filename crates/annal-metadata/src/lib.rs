//! Annal's cluster metadata, in KRaft's shape.
//!
//! - [`raft`]: the metadata quorum. Consensus is openraft's (docs/decisions/0004-metadata-quorum.md); Annal
//!   supplies its log storage (an `annal-log` log, so the metadata log is stored like every other log), its
//!   snapshots and its transport. It replicates opaque payloads and knows nothing of what they mean.
//! - [`records`]: Kafka's metadata record schemas (TopicRecord, PartitionRecord, RegisterBrokerRecord, ...) and
//!   their framing; a payload is a batch of them.
//! - [`image`]: the metadata image, the state every node rebuilds by applying committed records in order.
//! - [`controller`]: the controller, the only writer of metadata: broker registration and leases, topic
//!   creation and placement, leader election, producer id blocks. It decides records against the image and
//!   writes them through the quorum.
//! - [`node`]: a running node: the quorum, the image it applies, and the controller while it leads.
//! - [`env`]: the seams to the world (network, disk I/O, clock, election-timeout draw) that production and the
//!   deterministic simulator (`crates/annal-sim`) both go through.

pub use env::NodeEnv;
pub use node::{MetadataNode, MetadataNodeConfig};

pub mod acl;
pub mod controller;
pub mod crash_probe;
pub mod env;
pub mod image;
pub mod listener;
pub mod node;
pub mod quota;
pub mod raft;
pub mod records;
