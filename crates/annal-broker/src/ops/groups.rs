//! The per-group report behind `/v1/groups`, the group metrics and `annal group health`: lag in records and in
//! time (the timestamp of the first unconsumed record, read from its batch: exact, not interpolated), Burrow's
//! status over the commit window, and the retention guard: how long until retention deletes the group's next
//! unconsumed record, with a warning below `lag.retention.warning.ms`. Also counts the records retention deletes
//! before a group with committed offsets consumed them ([`account_retention`]).
//!
//! Scope: a broker reports the groups it coordinates, over the partitions it holds (all of them on a single
//! node). Everything here is blocking (it reads segment lists and one batch per lagging partition): call it off
//! the async workers.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;
use serde::Serialize;

use super::lag_health::{self, CommitSample, GroupStatus, PartitionStatus};
use crate::group::GroupOverview;
use crate::replica::RetentionMove;
use crate::Broker;

/// One partition of a group's report.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Records not consumed: high watermark - committed offset (never negative).
    pub lag: i64,
    /// Now minus the timestamp of the first unconsumed record; 0 without lag.
    pub time_lag_ms: i64,
    pub status: PartitionStatus,
    /// How long until retention deletes the first unconsumed record (`None`: no lag, or no retention limit
    /// that will reach it at the current produce rate).
    pub retention_time_to_loss_ms: Option<i64>,
    /// `retention_time_to_loss_ms` is below `lag.retention.warning.ms`.
    pub retention_warning: bool,
    /// The commit window the status was computed from, oldest first.
    pub window: Vec<CommitSample>,
}

/// One group's report.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub group: String,
    pub state: &'static str,
    pub kind: &'static str,
    pub members: usize,
    pub status: GroupStatus,
    pub lag_records_sum: i64,
    pub lag_records_max: i64,
    pub time_lag_ms_max: i64,
    pub retention_time_to_loss_ms_min: Option<i64>,
    pub retention_warning: bool,
    /// Records retention deleted before this group consumed them, since this broker started.
    pub records_lost_to_retention: u64,
    pub partitions: Vec<PartitionReport>,
}

impl GroupReport {
    /// Whether `annal group health` should fail for this group: WARN or ERR, or a retention warning.
    pub fn unhealthy(&self) -> bool {
        self.status != GroupStatus::Ok || self.retention_warning
    }
}

/// How far back a produce-rate sample may be before it is replaced.
const RATE_SAMPLE_MAX_AGE_MS: i64 = 60_000;
/// Most partitions whose produce rate is tracked (one small entry each).
const RATE_ENTRIES_MAX: usize = 100_000;

/// (sample time ms, bytes produced then, last rate in bytes/s).
type RateSample = (i64, u64, f64);

/// State the reports keep between calls: produce-rate samples (for `retention.bytes`) and the partitions already
/// warned about (so a log line is written when a warning starts, not at every evaluation).
#[derive(Default)]
pub struct GroupHealth {
    /// (topic, partition) -> (sample time ms, bytes produced then, last rate in bytes/s).
    rates: Mutex<HashMap<(String, i32), RateSample>>,
    warned: Mutex<HashSet<(String, String, i32)>>,
}

impl GroupHealth {
    /// Bytes per second produced to a partition, from samples at least a second apart.
    fn produce_rate(&self, topic: &str, partition: i32, bytes_now: u64, now_ms: i64) -> f64 {
        let mut rates = self.rates.lock();
        let key = (topic.to_string(), partition);
        match rates.get_mut(&key) {
            Some((at, bytes, rate)) => {
                let dt = now_ms.saturating_sub(*at);
                if dt >= 1000 {
                    *rate = bytes_now.saturating_sub(*bytes) as f64 * 1000.0 / dt as f64;
                }
                if dt >= RATE_SAMPLE_MAX_AGE_MS {
                    *at = now_ms;
                    *bytes = bytes_now;
                }
                *rate
            }
            None => {
                if rates.len() < RATE_ENTRIES_MAX {
                    rates.insert(key, (now_ms, bytes_now, 0.0));
                }
                0.0
            }
        }
    }
}

/// A segment as the retention guard sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSpan {
    pub next_offset: i64,
    pub size_bytes: u64,
    pub max_timestamp: Option<i64>,
}

/// How long until retention deletes the record at `offset`, from the segments (oldest first) and the retention
/// limits; `None` if no limit will reach it (or it is not in the log).
///
/// - `retention.ms`: a segment goes once it and every older one are older than the limit (retention deletes
///   from the oldest, stopping at the first young segment), so at the newest max timestamp among them plus
///   `retention.ms`.
/// - `retention.bytes`: a segment goes once the log exceeds the limit by at least its size and every older
///   one's, so after that many more bytes, at the current produce rate.
pub fn time_to_loss_ms(
    segments: &[SegmentSpan],
    retention_ms: i64,
    retention_bytes: i64,
    offset: i64,
    now_ms: i64,
    produce_bytes_per_sec: f64,
) -> Option<i64> {
    let index = segments.iter().position(|s| offset < s.next_offset)?;
    let through = &segments[..=index];
    let by_time = (retention_ms >= 0)
        .then(|| through.iter().filter_map(|s| s.max_timestamp).max())
        .flatten()
        .map(|newest| {
            newest
                .saturating_add(retention_ms)
                .saturating_sub(now_ms)
                .max(0)
        });
    let by_bytes = (retention_bytes >= 0)
        .then(|| {
            let total: u64 = segments.iter().map(|s| s.size_bytes).sum();
            let through: u64 = through.iter().map(|s| s.size_bytes).sum();
            let more = through as i128 + retention_bytes as i128 - total as i128;
            if more <= 0 {
                Some(0)
            } else if produce_bytes_per_sec > 0.0 {
                Some((more as f64 / produce_bytes_per_sec * 1000.0).min(i64::MAX as f64) as i64)
            } else {
                None
            }
        })
        .flatten();
    match (by_time, by_bytes) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reports of every group this broker coordinates (or only `only`), sorted by group. Blocking.
pub fn reports(broker: &Broker, only: Option<&str>) -> Vec<GroupReport> {
    let overviews = match only {
        None => broker.groups().overview(),
        Some(g) => broker.groups().overview_of(&HashSet::from([g.to_string()])),
    };
    reports_from(broker, only.is_none(), overviews)
}

/// Reports of the groups named in `groups` that this broker coordinates, sorted by group: a page of a list
/// costs its own groups' reports, not every group's (lag, time lag and time to loss read each partition).
/// Blocking.
pub fn reports_of(broker: &Broker, groups: &HashSet<String>) -> Vec<GroupReport> {
    if groups.is_empty() {
        return Vec::new();
    }
    reports_from(broker, false, broker.groups().overview_of(groups))
}

/// The partition behind a committed offset when this broker holds a replica of it. An empty placeholder log
/// (no replica here) would read as zero lag; its leader's broker does not see this group's commits either; see
/// docs/decisions/0014-operability.md.
pub fn local_partition(
    broker: &Broker,
    topic: &str,
    partition: i32,
) -> Option<std::sync::Arc<crate::replica::Partition>> {
    let rm = broker.replica_manager();
    let part = rm.partition(topic, partition)?;
    (part.is_leader() || part.replicas().contains(&rm.local_broker_id())).then_some(part)
}

/// Reports of `overviews`. `full`: they are every group, so commit windows of groups or offsets that are gone
/// can be forgotten.
fn reports_from(broker: &Broker, full: bool, overviews: Vec<GroupOverview>) -> Vec<GroupReport> {
    let now = crate::now_ms();
    let windows = broker.groups().commit_windows();
    let warning_ms = broker.config().ops.lag_retention_warning_ms;
    let metrics = broker.replica_manager().metrics();
    if full {
        // Windows of groups or offsets that are gone are forgotten here (the full view sees them all).
        let live: HashSet<(&str, &str, i32)> = overviews
            .iter()
            .flat_map(|g| {
                g.offsets
                    .iter()
                    .map(move |o| (g.group.as_str(), o.topic.as_str(), o.partition))
            })
            .collect();
        windows.retain(|g, t, p| live.contains(&(g, t, p)));
    }
    let mut out = Vec::new();
    for g in &overviews {
        let mut partitions = Vec::new();
        let mut lost = 0u64;
        let mut topics_seen = HashSet::new();
        for o in &g.offsets {
            if topics_seen.insert(o.topic.as_str()) {
                lost += metrics.records_lost_of(&g.group, &o.topic);
            }
            let Some(part) = local_partition(broker, &o.topic, o.partition) else {
                continue;
            };
            let hw = part.high_watermark();
            let log_start = part.log_start_offset();
            let lag = (hw - o.offset).max(0);
            let next = o.offset.max(log_start);
            let time_lag_ms = if lag > 0 {
                part.record_timestamp(next)
                    .map_or(0, |ts| now.saturating_sub(ts).max(0))
            } else {
                0
            };
            let window = windows.window(&g.group, &o.topic, o.partition);
            let status = lag_health::evaluate_partition(&window, lag, now);
            let retention_time_to_loss_ms = if lag > 0 {
                let (segments, retention_ms, retention_bytes) = part.segments_and_retention();
                let spans: Vec<SegmentSpan> = segments
                    .iter()
                    .filter(|s| s.next_offset > log_start)
                    .map(|s| SegmentSpan {
                        next_offset: s.next_offset,
                        size_bytes: s.size_bytes,
                        max_timestamp: s.max_timestamp,
                    })
                    .collect();
                let rate = broker.health.produce_rate(
                    &o.topic,
                    o.partition,
                    part.stats.bytes_produced(),
                    now,
                );
                time_to_loss_ms(&spans, retention_ms, retention_bytes, next, now, rate)
            } else {
                None
            };
            let retention_warning = retention_time_to_loss_ms.is_some_and(|t| t < warning_ms);
            partitions.push(PartitionReport {
                topic: o.topic.clone(),
                partition: o.partition,
                committed_offset: o.offset,
                high_watermark: hw,
                log_start_offset: log_start,
                lag,
                time_lag_ms,
                status,
                retention_time_to_loss_ms,
                retention_warning,
                window,
            });
        }
        out.push(GroupReport {
            group: g.group.clone(),
            state: g.state,
            kind: g.kind,
            members: g.members,
            status: lag_health::group_status(partitions.iter().map(|p| p.status)),
            lag_records_sum: partitions.iter().map(|p| p.lag).sum(),
            lag_records_max: partitions.iter().map(|p| p.lag).max().unwrap_or(0),
            time_lag_ms_max: partitions.iter().map(|p| p.time_lag_ms).max().unwrap_or(0),
            retention_time_to_loss_ms_min: partitions
                .iter()
                .filter_map(|p| p.retention_time_to_loss_ms)
                .min(),
            retention_warning: partitions.iter().any(|p| p.retention_warning),
            records_lost_to_retention: lost,
            partitions,
        });
    }
    out
}

/// Writes a warning line for each partition whose retention warning has just started (and forgets those that
/// ended). Called by the housekeeping loop with fresh reports.
pub fn log_retention_warnings(broker: &Broker, reports: &[GroupReport]) {
    let mut warned = broker.health.warned.lock();
    let mut now_warned = HashSet::new();
    for g in reports {
        for p in g.partitions.iter().filter(|p| p.retention_warning) {
            let key = (g.group.clone(), p.topic.clone(), p.partition);
            if !warned.contains(&key) {
                tracing::warn!(
                    group = %g.group, partition = %format!("{}-{}", p.topic, p.partition),
                    next_offset = p.committed_offset.max(p.log_start_offset), lag = p.lag,
                    time_to_loss_ms = p.retention_time_to_loss_ms.unwrap_or(0),
                    warning_ms = broker.config().ops.lag_retention_warning_ms,
                    "retention will delete records this group has not consumed; speed the consumer up or raise the topic's retention.ms / retention.bytes"
                );
            }
            now_warned.insert(key);
        }
    }
    *warned = now_warned;
}

/// After retention moved log starts: counts, per group and topic, the records deleted that a group with
/// committed offsets had not consumed (its committed offset was below the new log start), with a log line
/// naming the group, partition and offset range. Blocking.
pub fn account_retention(broker: &Broker, moved: &[RetentionMove]) {
    if moved.is_empty() {
        return;
    }
    let metrics = broker.replica_manager().metrics();
    for g in broker.groups().overview() {
        for o in &g.offsets {
            let Some(m) = moved
                .iter()
                .find(|m| m.partition.topic() == o.topic && m.partition.index() == o.partition)
            else {
                continue;
            };
            let from = o.offset.max(m.log_start_before);
            let to = m.log_start_after;
            if to > from {
                let count = (to - from) as u64;
                metrics.records_lost(&g.group, &o.topic, count);
                let guard = broker
                    .replica_manager()
                    .topic(&o.topic)
                    .and_then(|t| super::retention_guard::settings(&t.configs, broker.config()))
                    .filter(|s| s.groups.contains(&g.group));
                match guard {
                    Some(guard) => tracing::warn!(
                        group = %g.group, partition = %format!("{}-{}", o.topic, o.partition),
                        from_offset = from, to_offset = to - 1, records = count,
                        max_bytes = guard.max_bytes.unwrap_or(0),
                        "retention deleted records this guarded group had not consumed: the partition held more than retention.guard.max.bytes for it; speed the consumer up or raise the cap"
                    ),
                    None => tracing::warn!(
                        group = %g.group, partition = %format!("{}-{}", o.topic, o.partition),
                        from_offset = from, to_offset = to - 1, records = count,
                        "retention deleted records this group had not consumed"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(next_offset: i64, size_bytes: u64, max_timestamp: i64) -> SegmentSpan {
        SegmentSpan {
            next_offset,
            size_bytes,
            max_timestamp: Some(max_timestamp),
        }
    }

    #[test]
    fn time_retention_waits_for_the_newest_of_the_segment_and_older_ones() {
        // Segments [0,100) at t=1000, [100,200) at t=5000, active [200,250) at t=9000; retention.ms = 10000.
        let segs = [
            seg(100, 1000, 1_000),
            seg(200, 1000, 5_000),
            seg(250, 500, 9_000),
        ];
        assert_eq!(
            time_to_loss_ms(&segs, 10_000, -1, 50, 6_000, 0.0),
            Some(5_000)
        );
        assert_eq!(
            time_to_loss_ms(&segs, 10_000, -1, 150, 6_000, 0.0),
            Some(9_000)
        );
        // Already expired: the next retention check deletes it.
        assert_eq!(time_to_loss_ms(&segs, 10_000, -1, 50, 60_000, 0.0), Some(0));
        // At the log end there is nothing to lose; without limits nothing is lost.
        assert_eq!(time_to_loss_ms(&segs, 10_000, -1, 250, 6_000, 0.0), None);
        assert_eq!(time_to_loss_ms(&segs, -1, -1, 50, 6_000, 0.0), None);
    }

    #[test]
    fn size_retention_uses_the_produce_rate() {
        let segs = [seg(100, 1000, 0), seg(200, 1000, 0), seg(250, 500, 0)];
        // Total 2500, retention.bytes 2000: the first segment goes after 500 more bytes, at 100 B/s in 5 s.
        assert_eq!(time_to_loss_ms(&segs, -1, 2000, 50, 0, 100.0), Some(5_000));
        // No production: never by size.
        assert_eq!(time_to_loss_ms(&segs, -1, 2000, 50, 0, 0.0), None);
        // Already over by more than the segment: at the next check.
        assert_eq!(time_to_loss_ms(&segs, -1, 1000, 50, 0, 0.0), Some(0));
        // Both limits: the sooner wins.
        assert_eq!(
            time_to_loss_ms(&segs, 3_000, 2000, 50, 0, 100.0),
            Some(3_000)
        );
    }
}
