//! The broker's integration tests, one test binary: each module below was its own binary, and on CI's two cores
//! compiling and linking ~20 copies of the broker and the shared helpers cost more than running the tests.
//! Tests that assert on process-wide state (the sync and zero-copy counters in durable_produce.rs and
//! zero_copy_fetch.rs, RSS growth in robustness.rs) stay separate binaries, because here other tests run in the
//! same process at the same time.

mod common;
mod group_support;

mod admin;
mod data;
mod group_admin;
mod group_consumer_protocol;
mod group_coordinator_leadership;
mod group_durability;
mod group_membership;
mod group_offsets;
mod group_txn_offsets;
mod offsets_compaction;
mod persistence;
mod quotas;
mod replica;
mod security;
mod transactions;
mod txn_coordinator;
mod txn_v2;
mod versions;
