//! The Kafka error codes the controller answers with (clients/src/main/java/.../protocol/Errors.java).

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const NOT_CONTROLLER: i16 = 41;
pub const INVALID_REQUEST: i16 = 42;
pub const STALE_BROKER_EPOCH: i16 = 77;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
pub const INCONSISTENT_CLUSTER_ID: i16 = 104;

/// A per-item failure: the code and a message saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: i16,
    pub message: String,
}

impl ApiError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const FENCED_LEADER_EPOCH: i16 = 74;
pub const INVALID_UPDATE_VERSION: i16 = 96;
pub const INELIGIBLE_REPLICA: i16 = 107;
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
pub const ELECTION_NOT_NEEDED: i16 = 84;
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
pub const NEW_LEADER_ELECTED: i16 = 108;

// SCRAM credentials (AlterUserScramCredentials, DescribeUserScramCredentials).
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
