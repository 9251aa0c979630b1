//! Kafka metadata records. See lib.rs.
