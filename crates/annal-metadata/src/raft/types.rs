//! openraft's type configuration for the metadata quorum.

use std::io::Cursor;

use openraft::{BasicNode, TokioRuntime};

use super::Payload;

openraft::declare_raft_types!(
    /// Node ids are Kafka's `node.id`; a node's address is its CONTROLLER listener; an entry carries a
    /// [`Payload`] of opaque metadata records.
    pub TypeConfig:
        D = Payload,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = TokioRuntime,
);

pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type Raft = openraft::Raft<TypeConfig>;
pub(crate) type StorageError = openraft::StorageError<u64>;
