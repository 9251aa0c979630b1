//! Operating Annal: the HTTP listener (`http.listen`: `/metrics`, `/healthz`, `/readyz`, `/v1/...`), the
//! metrics, consumer lag health by Burrow's rules, and the retention guard. docs/decisions/0014-operability.md
//! says why it is shaped this way; docs/metrics.md lists every metric.
//!
//! - [`metrics`]: always-on counters and histograms (requests, errors, bytes, connections, ISR changes).
//! - [`scrape`]: what is read from state at scrape time (partitions, cluster, groups, process, disk).
//! - [`lag_health`]: Burrow's rules over each group's window of commits (pure).
//! - [`groups`]: the per-group report (lag in records and time, status, time until retention deletes the next
//!   unconsumed record) shared by `/v1/groups`, the metrics and the CLI; and the count of records retention
//!   deleted before a group consumed them.
//! - [`http`]: the listener, bounded (connections, request size, time).
//! - [`retention_guard`]: `retention.guard.groups` / `retention.guard.max.bytes`, what retention keeps for
//!   groups that have not consumed it yet.
//! - [`records`]: `/v1/topics/{topic}/records?key=`, records by key from the key index (`key.index.enable`).
//!
//! Architecture invariant: nothing here is on the produce or fetch path except [`PartitionStats`]' atomics and
//! `metrics::BrokerMetrics::observe_request`; everything else runs when an operator (or Prometheus) asks.

pub mod groups;
pub mod http;
pub mod lag_health;
pub mod metrics;
pub(crate) mod process;
pub mod records;
pub mod retention_guard;
pub mod scrape;

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-partition produce and fetch counters, summed per topic at scrape time. Only relaxed atomic adds on the
/// hot path.
#[derive(Debug, Default)]
pub struct PartitionStats {
    records_produced: AtomicU64,
    bytes_produced: AtomicU64,
    /// Consumer fetches only (followers' fetches are replication, not consumption).
    bytes_fetched: AtomicU64,
    /// Bytes the retention guard kept at the last retention pass (retention would have deleted them).
    guard_held_bytes: AtomicU64,
}

impl PartitionStats {
    pub fn produced(&self, records: u64, bytes: u64) {
        self.records_produced.fetch_add(records, Ordering::Relaxed);
        self.bytes_produced.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn fetched(&self, bytes: u64) {
        self.bytes_fetched.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn records_produced(&self) -> u64 {
        self.records_produced.load(Ordering::Relaxed)
    }

    pub fn bytes_produced(&self) -> u64 {
        self.bytes_produced.load(Ordering::Relaxed)
    }

    pub fn bytes_fetched(&self) -> u64 {
        self.bytes_fetched.load(Ordering::Relaxed)
    }

    pub fn set_guard_held_bytes(&self, bytes: u64) {
        self.guard_held_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn guard_held_bytes(&self) -> u64 {
        self.guard_held_bytes.load(Ordering::Relaxed)
    }
}

/// Settings of this module, from `server.properties`.
#[derive(Debug, Clone, PartialEq)]
pub struct OpsConfig {
    /// `http.listen`: where the HTTP listener binds; `None` when set empty (off).
    pub http_listen: Option<String>,
    /// Whether `http.listen` was set explicitly (then failing to bind it stops start-up).
    pub http_listen_explicit: bool,
    /// `lag.retention.warning.ms` (1 h): warn when retention would delete a group's next unconsumed record
    /// sooner than this.
    pub lag_retention_warning_ms: i64,
    /// `lag.metrics.per.partition` (false): also export lag per group, topic and partition (one series per
    /// committed partition; off by default to keep series counts low, as Redpanda and kminion do).
    pub lag_metrics_per_partition: bool,
}

impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig {
            http_listen: Some(DEFAULT_HTTP_LISTEN.to_string()),
            http_listen_explicit: false,
            lag_retention_warning_ms: 3_600_000,
            lag_metrics_per_partition: false,
        }
    }
}

/// `http.listen`'s default: Redpanda's admin port, on loopback only.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9644";
