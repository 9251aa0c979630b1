//! Consumer lag health, by Burrow's rules (https://github.com/linkedin/Burrow/wiki/Consumer-Lag-Evaluation-Rules).
//!
//! For each group and partition the coordinator keeps a window of the last `lag.window.commits` commits
//! ([`CommitWindows`]: offset, time, lag at commit). [`evaluate_partition`] applies Burrow's rules to a window and
//! the partition's lag now, in Burrow's order, the worst first:
//!
//! 1. If the lag now is zero, or any commit in the window had zero lag: OK (the consumer caught up meanwhile).
//! 2. An offset lower than the one before it: REWIND.
//! 3. The time since the last commit exceeds the time the window spans (last commit - first commit): STOP (the
//!    consumer stopped committing while it still has lag).
//! 4. Every commit in the window is the same offset: STALL (committing, not advancing).
//! 5. Offsets advance but the lag never decreased from one commit to the next: WARN (falling behind, "no sign of
//!    recovery").
//! 6. Otherwise OK.
//!
//! A group is ERR if any partition is STOP, STALL or REWIND, else WARN if any is WARN, else OK (Burrow's group
//! status caps partition statuses above ERROR at ERROR). Everything here is pure and takes time as an argument.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use serde::Serialize;

/// One commit of a group for a partition, as the window keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CommitSample {
    pub offset: i64,
    /// Wall-clock ms of the commit.
    pub timestamp_ms: i64,
    /// The partition's high watermark minus `offset` when the commit arrived (never negative).
    pub lag: i64,
}

/// A partition's health for one group (Burrow's partition statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PartitionStatus {
    Ok,
    Warn,
    Stop,
    Stall,
    Rewind,
}

impl PartitionStatus {
    pub fn name(self) -> &'static str {
        match self {
            PartitionStatus::Ok => "OK",
            PartitionStatus::Warn => "WARN",
            PartitionStatus::Stop => "STOP",
            PartitionStatus::Stall => "STALL",
            PartitionStatus::Rewind => "REWIND",
        }
    }
}

/// A group's health: the worst of its partitions, with STOP, STALL and REWIND counted as ERR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum GroupStatus {
    Ok,
    Warn,
    Err,
}

impl GroupStatus {
    pub fn name(self) -> &'static str {
        match self {
            GroupStatus::Ok => "OK",
            GroupStatus::Warn => "WARN",
            GroupStatus::Err => "ERR",
        }
    }

    /// The value of the `annal_group_status` gauge (0 OK, 1 WARN, 2 ERR).
    pub fn gauge(self) -> i64 {
        self as i64
    }
}

/// Burrow's partition evaluation (see the module docs for the rules, in the order they are checked).
/// `window` is oldest first; an empty window is OK (nothing to judge yet).
pub fn evaluate_partition(
    window: &[CommitSample],
    current_lag: i64,
    now_ms: i64,
) -> PartitionStatus {
    let (Some(first), Some(last)) = (window.first(), window.last()) else {
        return PartitionStatus::Ok;
    };
    // Rule 1: caught up now, or at some point in the window.
    if current_lag <= 0 || window.iter().any(|c| c.lag == 0) {
        return PartitionStatus::Ok;
    }
    let pairs = || window.windows(2).map(|w| (w[0], w[1]));
    // Rule 2: an offset went backwards.
    if pairs().any(|(a, b)| b.offset < a.offset) {
        return PartitionStatus::Rewind;
    }
    // Rule 3: no commit for longer than the window spans.
    if now_ms.saturating_sub(last.timestamp_ms)
        > last.timestamp_ms.saturating_sub(first.timestamp_ms)
    {
        return PartitionStatus::Stop;
    }
    // Rule 4: committing the same offset over and over while lagging.
    if pairs().all(|(a, b)| a.offset == b.offset) {
        return PartitionStatus::Stall;
    }
    // Rule 5: advancing, but the lag never went down.
    if pairs().all(|(a, b)| b.lag >= a.lag) {
        return PartitionStatus::Warn;
    }
    PartitionStatus::Ok
}

/// The group's status from its partitions' (OK for a group with none).
pub fn group_status(partitions: impl IntoIterator<Item = PartitionStatus>) -> GroupStatus {
    partitions
        .into_iter()
        .map(|p| match p {
            PartitionStatus::Ok => GroupStatus::Ok,
            PartitionStatus::Warn => GroupStatus::Warn,
            PartitionStatus::Stop | PartitionStatus::Stall | PartitionStatus::Rewind => {
                GroupStatus::Err
            }
        })
        .max()
        .unwrap_or(GroupStatus::Ok)
}

/// Most (group, topic, partition) windows kept: a bound on memory whatever clients commit. Past it, commits of
/// new partitions are not tracked (their status reads OK) until windows of deleted groups are forgotten.
pub const WINDOWS_MAX: usize = 200_000;

type Key = (String, String, i32);

/// The last commits of every (group, topic, partition), each window at most `capacity` long. One lock, taken
/// once per OffsetCommit request (not per record) and by the health views.
pub struct CommitWindows {
    capacity: usize,
    windows: Mutex<HashMap<Key, VecDeque<CommitSample>>>,
}

impl CommitWindows {
    /// `capacity` is `lag.window.commits` (at least 1).
    pub fn new(capacity: usize) -> CommitWindows {
        CommitWindows {
            capacity: capacity.max(1),
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records one commit per `(topic, partition, sample)`.
    pub fn record(
        &self,
        group: &str,
        commits: impl IntoIterator<Item = (String, i32, CommitSample)>,
    ) {
        let mut windows = self.windows.lock();
        for (topic, partition, sample) in commits {
            let key = (group.to_string(), topic, partition);
            let full = windows.len() >= WINDOWS_MAX;
            let Some(window) = (match windows.get_mut(&key) {
                Some(w) => Some(w),
                None if full => None,
                None => Some(
                    windows
                        .entry(key)
                        .or_insert_with(|| VecDeque::with_capacity(self.capacity)),
                ),
            }) else {
                continue;
            };
            if window.len() == self.capacity {
                window.pop_front();
            }
            window.push_back(sample);
            debug_assert!(window.len() <= self.capacity);
        }
    }

    /// The window of one (group, topic, partition), oldest first (empty if none).
    pub fn window(&self, group: &str, topic: &str, partition: i32) -> Vec<CommitSample> {
        self.windows
            .lock()
            .get(&(group.to_string(), topic.to_string(), partition))
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets the windows `keep` says no (groups or offsets that are gone).
    pub fn retain(&self, mut keep: impl FnMut(&str, &str, i32) -> bool) {
        self.windows.lock().retain(|(g, t, p), _| keep(g, t, *p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window from (offset, seconds, lag) triples.
    fn w(commits: &[(i64, i64, i64)]) -> Vec<CommitSample> {
        commits
            .iter()
            .map(|&(offset, s, lag)| CommitSample {
                offset,
                timestamp_ms: s * 1000,
                lag,
            })
            .collect()
    }

    const NOW_AFTER_10S: i64 = 10_000;

    #[test]
    fn rule_1_zero_lag_anywhere_is_ok() {
        // Lag zero at one commit: OK even though the offsets then stall.
        let window = w(&[(10, 0, 0), (10, 2, 5), (10, 4, 5), (10, 6, 5)]);
        assert_eq!(evaluate_partition(&window, 5, 7_000), PartitionStatus::Ok);
        // No lag now: OK whatever the window says.
        let window = w(&[(10, 0, 5), (10, 2, 5)]);
        assert_eq!(evaluate_partition(&window, 0, 99_000), PartitionStatus::Ok);
        assert_eq!(evaluate_partition(&[], 100, 0), PartitionStatus::Ok);
    }

    #[test]
    fn rule_2_an_offset_going_back_is_rewind() {
        let window = w(&[(100, 0, 5), (120, 2, 5), (50, 4, 80), (60, 6, 75)]);
        assert_eq!(
            evaluate_partition(&window, 75, 7_000),
            PartitionStatus::Rewind
        );
    }

    #[test]
    fn rule_3_no_commit_for_longer_than_the_window_spans_is_stop() {
        // Commits spanning 6 s, the last 7 s ago: stopped.
        let window = w(&[(10, 0, 5), (20, 2, 4), (30, 4, 3), (40, 6, 2)]);
        assert_eq!(
            evaluate_partition(&window, 2, 13_001),
            PartitionStatus::Stop
        );
        // The same window evaluated 5 s after the last commit: advancing with lag decreasing, OK.
        assert_eq!(evaluate_partition(&window, 2, 11_000), PartitionStatus::Ok);
        // A single commit spans nothing: any later moment with lag is STOP, as in Burrow.
        assert_eq!(
            evaluate_partition(&w(&[(5, 0, 3)]), 3, 1),
            PartitionStatus::Stop
        );
    }

    #[test]
    fn rule_4_the_same_offset_every_commit_is_stall() {
        let window = w(&[(10, 0, 5), (10, 2, 6), (10, 4, 7), (10, 6, 9)]);
        assert_eq!(
            evaluate_partition(&window, 9, 7_000),
            PartitionStatus::Stall
        );
    }

    #[test]
    fn rule_5_advancing_without_the_lag_going_down_is_warn() {
        let window = w(&[(10, 0, 5), (20, 2, 5), (30, 4, 8), (40, 6, 9)]);
        assert_eq!(evaluate_partition(&window, 9, 7_000), PartitionStatus::Warn);
        // One decrease anywhere in the window: OK.
        let window = w(&[(10, 0, 5), (20, 2, 4), (30, 4, 8), (40, 6, 9)]);
        assert_eq!(evaluate_partition(&window, 9, 7_000), PartitionStatus::Ok);
    }

    #[test]
    fn rules_are_checked_worst_first() {
        // Rewound and stopped: REWIND wins (rule 2 before rule 3).
        let window = w(&[(100, 0, 5), (50, 2, 55)]);
        assert_eq!(
            evaluate_partition(&window, 55, NOW_AFTER_10S * 10),
            PartitionStatus::Rewind
        );
        // Stalled and stopped: STOP wins (rule 3 before rule 4).
        let window = w(&[(10, 0, 5), (10, 2, 5)]);
        assert_eq!(
            evaluate_partition(&window, 5, NOW_AFTER_10S),
            PartitionStatus::Stop
        );
    }

    #[test]
    fn group_status_is_the_worst_partition() {
        use PartitionStatus::*;
        assert_eq!(group_status([]), GroupStatus::Ok);
        assert_eq!(group_status([Ok, Ok]), GroupStatus::Ok);
        assert_eq!(group_status([Ok, Warn]), GroupStatus::Warn);
        for err in [Stop, Stall, Rewind] {
            assert_eq!(group_status([Warn, err, Ok]), GroupStatus::Err);
        }
    }

    #[test]
    fn windows_keep_the_last_n_commits() {
        let windows = CommitWindows::new(3);
        for i in 0..5 {
            let sample = CommitSample {
                offset: i,
                timestamp_ms: i,
                lag: 10 - i,
            };
            windows.record("g", [("t".to_string(), 0, sample)]);
        }
        let offsets: Vec<i64> = windows
            .window("g", "t", 0)
            .iter()
            .map(|c| c.offset)
            .collect();
        assert_eq!(offsets, vec![2, 3, 4]);
        assert!(windows.window("g", "t", 1).is_empty());
        windows.retain(|g, _, _| g != "g");
        assert!(windows.window("g", "t", 0).is_empty());
    }
}
