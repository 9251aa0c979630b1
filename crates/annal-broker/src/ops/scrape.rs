//! `/metrics`: the always-on registry ([`super::metrics`]) followed by gauges read from state at scrape time:
//! topics, partitions this broker holds a replica of, the cluster as this broker sees it, groups, the process
//! and the data directory's disk. OpenMetrics text (Prometheus reads it). Blocking: run it off the async workers.

use std::collections::BTreeMap;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::groups::GroupReport;
use super::metrics::{GaugeF64, Labels};
use super::process;
use crate::Broker;

/// The OpenMetrics content type `/metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn gauge_family() -> Family<Labels, Gauge> {
    Family::default()
}

/// Encodes every metric. `reports` are the group reports (computed by the caller, shared with other views).
pub fn encode(broker: &Broker, reports: &[GroupReport]) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(64 * 1024);
    encode_registry(&mut out, broker.replica_manager().metrics().registry())?;
    let dynamic = state_registry(broker, reports);
    encode_registry(&mut out, &dynamic)?;
    encode_eof(&mut out)?;
    Ok(out)
}

fn state_registry(broker: &Broker, reports: &[GroupReport]) -> Registry {
    let mut r = Registry::default();
    partitions(&mut r, broker);
    cluster(&mut r, broker);
    groups(&mut r, reports);
    retention_guard(&mut r, broker);
    if broker.config().ops.lag_metrics_per_partition {
        partition_lag(&mut r, reports);
    }
    process_and_disk(&mut r, broker);
    super::records::register_key_index_gauges(&mut r, broker);
    r
}

fn partitions(r: &mut Registry, broker: &Broker) {
    let records_produced = Family::<Labels, Counter>::default();
    let bytes_produced = Family::<Labels, Counter>::default();
    let bytes_fetched = Family::<Labels, Counter>::default();
    let (hw, log_start, log_end, size, segments) = (
        gauge_family(),
        gauge_family(),
        gauge_family(),
        gauge_family(),
        gauge_family(),
    );
    let local = broker.replica_manager().local_broker_id();
    // Per topic sums: a BTreeMap so output order is stable.
    let mut per_topic: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for p in broker.replica_manager().all_partitions() {
        if !p.is_leader() && !p.replicas().contains(&local) {
            continue; // an empty placeholder log: this broker holds no replica of it
        }
        let t = per_topic.entry(p.topic().to_string()).or_default();
        t.0 += p.stats.records_produced();
        t.1 += p.stats.bytes_produced();
        t.2 += p.stats.bytes_fetched();
        let labels: Labels = vec![
            ("topic", p.topic().to_string()),
            ("partition", p.index().to_string()),
        ];
        let (segs, _, _) = p.segments_and_retention();
        hw.get_or_create(&labels).set(p.high_watermark());
        log_start.get_or_create(&labels).set(p.log_start_offset());
        log_end.get_or_create(&labels).set(p.log_end_offset());
        size.get_or_create(&labels)
            .set(segs.iter().map(|s| s.size_bytes).sum::<u64>() as i64);
        segments.get_or_create(&labels).set(segs.len() as i64);
    }
    for (topic, (records, bytes_in, bytes_out)) in per_topic {
        let labels: Labels = vec![("topic", topic)];
        records_produced.get_or_create(&labels).inc_by(records);
        bytes_produced.get_or_create(&labels).inc_by(bytes_in);
        bytes_fetched.get_or_create(&labels).inc_by(bytes_out);
    }
    r.register(
        "annal_topic_records_produced",
        "Records appended by produce requests (this broker's leaders), per topic",
        records_produced,
    );
    r.register(
        "annal_topic_bytes_produced",
        "Bytes of record batches appended by produce requests, per topic",
        bytes_produced,
    );
    r.register(
        "annal_topic_bytes_fetched",
        "Bytes of record batches sent to consumers (not followers), per topic",
        bytes_fetched,
    );
    r.register(
        "annal_partition_high_watermark",
        "High watermark of each partition this broker holds",
        hw,
    );
    r.register(
        "annal_partition_log_start_offset",
        "Log start offset of each partition this broker holds",
        log_start,
    );
    r.register(
        "annal_partition_log_end_offset",
        "Log end offset of each partition this broker holds",
        log_end,
    );
    r.register(
        "annal_partition_size_bytes",
        "Bytes of segment files of each partition this broker holds",
        size,
    );
    r.register(
        "annal_partition_segments",
        "Segment count of each partition this broker holds",
        segments,
    );
}

fn cluster(r: &mut Registry, broker: &Broker) {
    let local = broker.replica_manager().local_broker_id();
    let (mut leaders, mut under, mut at_min) = (0i64, 0i64, 0i64);
    for p in broker.replica_manager().all_partitions() {
        if !p.is_leader() {
            continue;
        }
        leaders += 1;
        let (isr, replicas) = (p.isr().len(), p.replicas().len());
        if isr < replicas {
            under += 1;
        }
        let min_isr = p.config().min_insync_replicas.max(1) as usize;
        if replicas > 1 && isr == min_isr {
            at_min += 1;
        }
    }
    let image = broker.cluster().image();
    let offline = image
        .topics
        .values()
        .flat_map(|t| t.partitions.values())
        .filter(|p| p.leader < 0)
        .count() as i64;
    let active = broker.cluster().node().is_active_controller();
    let lease = broker.cluster().lease();
    let g = |r: &mut Registry, name: &str, help: &str, v: i64| {
        let gauge = Gauge::<i64>::default();
        gauge.set(v);
        r.register(name, help, gauge);
    };
    g(
        r,
        "annal_leader_partitions",
        "Partitions this broker leads",
        leaders,
    );
    g(
        r,
        "annal_under_replicated_partitions",
        "Partitions this broker leads whose ISR is smaller than their replica set",
        under,
    );
    g(
        r,
        "annal_at_min_isr_partitions",
        "Partitions this broker leads whose ISR is exactly min.insync.replicas",
        at_min,
    );
    g(
        r,
        "annal_offline_partitions",
        "Partitions without a leader in the metadata image",
        offline,
    );
    g(
        r,
        "annal_active_controller",
        "1 if this node is the active controller (Raft leader of the metadata quorum)",
        active.into(),
    );
    g(
        r,
        "annal_metadata_applied_offset",
        "Offset of the last metadata record in this node's image (-1 before the first)",
        image.last_applied_offset.map_or(-1, |o| o as i64),
    );
    g(
        r,
        "annal_broker_fenced",
        "1 while the controller has this broker fenced (not registered, or lease lost)",
        lease.fenced.into(),
    );
    let _ = local;
}

fn groups(r: &mut Registry, reports: &[GroupReport]) {
    let members = gauge_family();
    let state = gauge_family();
    let status = gauge_family();
    let lag_sum = gauge_family();
    let lag_max = gauge_family();
    let time_lag = Family::<Labels, GaugeF64>::default();
    let to_loss = Family::<Labels, GaugeF64>::default();
    let warning = gauge_family();
    let by_status = gauge_family();
    for g in reports {
        let labels: Labels = vec![("group", g.group.clone())];
        members.get_or_create(&labels).set(g.members as i64);
        state
            .get_or_create(&vec![
                ("group", g.group.clone()),
                ("state", g.state.to_string()),
            ])
            .set(1);
        status.get_or_create(&labels).set(g.status.gauge());
        lag_sum.get_or_create(&labels).set(g.lag_records_sum);
        lag_max.get_or_create(&labels).set(g.lag_records_max);
        time_lag
            .get_or_create(&labels)
            .set(g.time_lag_ms_max as f64 / 1000.0);
        if let Some(ms) = g.retention_time_to_loss_ms_min {
            to_loss.get_or_create(&labels).set(ms as f64 / 1000.0);
        }
        warning
            .get_or_create(&labels)
            .set(g.retention_warning.into());
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for p in &g.partitions {
            *counts.entry(p.status.name()).or_default() += 1;
        }
        for (s, n) in counts {
            by_status
                .get_or_create(&vec![("group", g.group.clone()), ("status", s.to_string())])
                .set(n);
        }
    }
    r.register(
        "annal_group_members",
        "Members of each group this broker coordinates",
        members,
    );
    r.register(
        "annal_group_state",
        "1 for each group's current state (Kafka's state names)",
        state,
    );
    r.register(
        "annal_group_status",
        "Lag health of each group by Burrow's rules: 0 OK, 1 WARN, 2 ERR",
        status,
    );
    r.register(
        "annal_group_partitions_by_status",
        "Partitions of each group per Burrow status (OK, WARN, STOP, STALL, REWIND)",
        by_status,
    );
    r.register("annal_group_lag_records_sum", "Records not consumed (high watermark - committed offset), summed over the group's partitions", lag_sum);
    r.register(
        "annal_group_lag_records_max",
        "Records not consumed, largest partition of the group",
        lag_max,
    );
    r.register(
        "annal_group_lag_seconds_max",
        "Age of the oldest unconsumed record over the group's partitions",
        time_lag,
    );
    r.register(
        "annal_group_retention_time_to_loss_seconds",
        "Time until retention deletes a record the group has not consumed, soonest partition",
        to_loss,
    );
    r.register(
        "annal_group_retention_warning",
        "1 if the time to loss is below lag.retention.warning.ms",
        warning,
    );
}

/// Lag per group, topic and partition (`lag.metrics.per.partition`): one pair of series per committed partition.
fn partition_lag(r: &mut Registry, reports: &[GroupReport]) {
    let records = gauge_family();
    let seconds = Family::<Labels, GaugeF64>::default();
    for g in reports {
        for p in &g.partitions {
            let labels: Labels = vec![
                ("group", g.group.clone()),
                ("topic", p.topic.clone()),
                ("partition", p.partition.to_string()),
            ];
            records.get_or_create(&labels).set(p.lag);
            seconds
                .get_or_create(&labels)
                .set(p.time_lag_ms as f64 / 1000.0);
        }
    }
    r.register(
        "annal_group_partition_lag_records",
        "Records not consumed (high watermark - committed offset) per group, topic and partition",
        records,
    );
    r.register(
        "annal_group_partition_lag_seconds",
        "Age of the first unconsumed record per group, topic and partition (0 without lag)",
        seconds,
    );
}

/// What the retention guard holds (`retention.guard.groups`), for the partitions of topics that set it only.
fn retention_guard(r: &mut Registry, broker: &Broker) {
    let held = gauge_family();
    let guards = super::retention_guard::Guards::new(broker);
    for p in broker.replica_manager().all_partitions() {
        if guards.settings_of(p.topic()).is_some() {
            held.get_or_create(&vec![
                ("topic", p.topic().to_string()),
                ("partition", p.index().to_string()),
            ])
            .set(p.stats.guard_held_bytes().min(i64::MAX as u64) as i64);
        }
    }
    r.register(
        "annal_partition_retention_guard_held_bytes",
        "Bytes retention would have deleted that retention.guard.groups kept, at the last retention pass",
        held,
    );
}

/// The engine's fsync histogram as a Prometheus histogram (its counters live in annal-log).
#[derive(Debug)]
struct FsyncHistogram(annal_log::FsyncSnapshot);

impl EncodeMetric for FsyncHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // prometheus-client writes the bucket bounded by f64::MAX as le="+Inf" (an infinite bound would come out
        // as "inf", which Prometheus's parser rejects).
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets
            .iter()
            .map(|&(bound, n)| (if bound.is_finite() { bound } else { f64::MAX }, n))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum_seconds, self.0.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn process_and_disk(r: &mut Registry, broker: &Broker) {
    r.register(
        "annal_log_fsync_duration_seconds",
        "Time of each fsync of a log data file (segment and roll flushes, durable group commits)",
        FsyncHistogram(annal_log::fsync_snapshot()),
    );
    if let Some((rss, cpu)) = process::rss_and_cpu() {
        let g = Gauge::<i64>::default();
        g.set(rss as i64);
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the broker process",
            g,
        );
        let c = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        c.inc_by(cpu);
        r.register(
            "process_cpu_seconds",
            "User and system CPU time of the broker process",
            c,
        );
    }
    if let Some((free, total)) = process::disk_free_and_total(&broker.config().data_dir) {
        let (f, t) = (Gauge::<i64>::default(), Gauge::<i64>::default());
        f.set(free as i64);
        t.set(total as i64);
        r.register(
            "annal_data_dir_free_bytes",
            "Bytes available on the data directory's file system",
            f,
        );
        r.register(
            "annal_data_dir_total_bytes",
            "Size of the data directory's file system",
            t,
        );
    }
    let info = Family::<Labels, Gauge>::default();
    info.get_or_create(&vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("node_id", broker.config().node_id.to_string()),
        ("cluster_id", broker.cluster_id().to_string()),
    ])
    .set(1);
    r.register(
        "annal_build_info",
        "1, labelled with the version, node id and cluster id",
        info,
    );
}
