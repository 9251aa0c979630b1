//! Consumer lag and retention risk for one partition: pure arithmetic, kept apart so it is tested on its own.
//!
//! Kafka's tools report lag = log end offset - committed offset. Annal adds where the committed offset sits in
//! the retained range [log start, log end): a group whose committed offset is below the log start has lost
//! records to retention without reading them; one close to the log start will lose records at the next
//! retention deletion unless it catches up.

/// "Close to the log start": within this fraction of the retained range (log end - log start).
pub const AT_RISK_FRACTION_PERCENT: i128 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Nothing committed for this partition.
    NoCommit,
    /// The committed offset is comfortably inside the retained range, or caught up.
    Ok,
    /// Within 10% of the retained range from the log start: the next retention deletion may remove records
    /// the group has not read.
    AtRisk,
    /// Below the log start: `unread_deleted` records were deleted before the group read them.
    Lost { unread_deleted: i64 },
    /// Beyond the log end (the log was truncated or recreated after the commit).
    AheadOfLogEnd,
}

impl Retention {
    pub fn label(&self) -> &'static str {
        match self {
            Retention::NoCommit => "-",
            Retention::Ok => "ok",
            Retention::AtRisk => "AT-RISK",
            Retention::Lost { .. } => "LOST",
            Retention::AheadOfLogEnd => "AHEAD",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLag {
    pub committed: Option<i64>,
    pub log_start: i64,
    pub log_end: i64,
    /// log end - committed, as Kafka reports it (negative when the commit is beyond the log end).
    pub lag: Option<i64>,
    pub retention: Retention,
}

/// Whether a topic's configs let retention delete old records: cleanup.policy includes "delete" and at least
/// one of retention.ms / retention.bytes is not -1 (unknown values count as "it may delete").
pub fn retention_deletes(
    cleanup_policy: Option<&str>,
    retention_ms: Option<&str>,
    retention_bytes: Option<&str>,
) -> bool {
    let deletes_by_policy =
        cleanup_policy.is_none_or(|p| p.split(',').any(|p| p.trim() == "delete"));
    let unlimited = |v: Option<&str>| v.is_some_and(|v| v.trim().parse::<i64>() == Ok(-1));
    deletes_by_policy && !(unlimited(retention_ms) && unlimited(retention_bytes))
}

/// Like `assess`, for a topic whose retention never deletes (`retention_deletes` false): nothing is at risk
/// then, though records below the log start (removed by DeleteRecords, say) are still reported lost.
pub fn assess_for_topic(
    committed: Option<i64>,
    log_start: i64,
    log_end: i64,
    retention_deletes: bool,
) -> PartitionLag {
    let mut lag = assess(committed, log_start, log_end);
    if !retention_deletes && lag.retention == Retention::AtRisk {
        lag.retention = Retention::Ok;
    }
    lag
}

/// Lag and retention status of a partition. `committed` is None when the group has no offset there
/// (OffsetFetch answers -1).
pub fn assess(committed: Option<i64>, log_start: i64, log_end: i64) -> PartitionLag {
    let committed = committed.filter(|&c| c >= 0);
    let Some(c) = committed else {
        return PartitionLag {
            committed,
            log_start,
            log_end,
            lag: None,
            retention: Retention::NoCommit,
        };
    };
    let retention = if c < log_start {
        Retention::Lost {
            unread_deleted: log_start.saturating_sub(c),
        }
    } else if c > log_end {
        Retention::AheadOfLogEnd
    } else if c == log_end {
        Retention::Ok
    } else {
        // log_start <= c < log_end, so the retained range is at least 1. i128: no overflow for any offsets.
        let retained = i128::from(log_end) - i128::from(log_start);
        let headroom = i128::from(c) - i128::from(log_start);
        if headroom * 100 < retained * AT_RISK_FRACTION_PERCENT {
            Retention::AtRisk
        } else {
            Retention::Ok
        }
    };
    PartitionLag {
        committed,
        log_start,
        log_end,
        lag: Some(log_end.saturating_sub(c)),
        retention,
    }
}

/// Sum of the known lags (partitions without a commit count nothing, as in Kafka's tools). Negative lags
/// (commits beyond the log end) do not reduce the total.
pub fn total_lag<'a>(lags: impl IntoIterator<Item = &'a PartitionLag>) -> i64 {
    lags.into_iter()
        .filter_map(|l| l.lag)
        .map(|l| l.max(0))
        .fold(0i64, |sum, l| sum.saturating_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_log_end_minus_committed() {
        let l = assess(Some(70), 0, 100);
        assert_eq!(l.lag, Some(30));
        assert_eq!(l.retention, Retention::Ok);
        assert_eq!(assess(Some(100), 0, 100).lag, Some(0));
    }

    #[test]
    fn no_commit_has_no_lag() {
        for c in [None, Some(-1)] {
            let l = assess(c, 0, 100);
            assert_eq!(
                (l.committed, l.lag, l.retention),
                (None, None, Retention::NoCommit)
            );
        }
    }

    #[test]
    fn below_log_start_is_lost_with_the_count_of_deleted_records() {
        let l = assess(Some(40), 100, 500);
        assert_eq!(l.retention, Retention::Lost { unread_deleted: 60 });
        assert_eq!(l.lag, Some(460));
        // Even when the whole log has been deleted (start == end).
        assert_eq!(
            assess(Some(0), 10, 10).retention,
            Retention::Lost { unread_deleted: 10 }
        );
    }

    #[test]
    fn at_risk_means_within_ten_percent_of_the_retained_range() {
        // Retained [100, 1100): 1000 records; 10% = 100 records from the start.
        assert_eq!(assess(Some(100), 100, 1100).retention, Retention::AtRisk);
        assert_eq!(assess(Some(199), 100, 1100).retention, Retention::AtRisk);
        assert_eq!(assess(Some(200), 100, 1100).retention, Retention::Ok);
        assert_eq!(assess(Some(1099), 100, 1100).retention, Retention::Ok);
        // A tiny range: one record retained and unread.
        assert_eq!(assess(Some(5), 5, 6).retention, Retention::AtRisk);
    }

    #[test]
    fn caught_up_is_never_at_risk() {
        assert_eq!(assess(Some(5), 5, 5).retention, Retention::Ok);
        assert_eq!(assess(Some(0), 0, 0).retention, Retention::Ok);
    }

    #[test]
    fn beyond_log_end_is_flagged_and_lag_is_negative() {
        let l = assess(Some(120), 0, 100);
        assert_eq!(l.retention, Retention::AheadOfLogEnd);
        assert_eq!(l.lag, Some(-20));
    }

    #[test]
    fn extreme_offsets_do_not_overflow() {
        let l = assess(Some(0), i64::MAX - 10, i64::MAX);
        assert!(matches!(l.retention, Retention::Lost { .. }));
        let l = assess(Some(1), 0, i64::MAX);
        assert_eq!(l.retention, Retention::AtRisk);
        assert_eq!(l.lag, Some(i64::MAX - 1));
    }

    #[test]
    fn no_risk_where_retention_never_deletes() {
        assert!(retention_deletes(
            Some("delete"),
            Some("604800000"),
            Some("-1")
        ));
        assert!(retention_deletes(
            Some("compact,delete"),
            Some("-1"),
            Some("1073741824")
        ));
        assert!(
            retention_deletes(None, None, None),
            "unknown configs: assume it deletes"
        );
        assert!(!retention_deletes(
            Some("compact"),
            Some("604800000"),
            Some("-1")
        ));
        assert!(!retention_deletes(Some("delete"), Some("-1"), Some("-1")));
        assert_eq!(
            assess_for_topic(Some(0), 0, 100, false).retention,
            Retention::Ok
        );
        assert_eq!(
            assess_for_topic(Some(0), 0, 100, true).retention,
            Retention::AtRisk
        );
        assert_eq!(
            assess_for_topic(Some(0), 10, 100, false).retention,
            Retention::Lost { unread_deleted: 10 }
        );
    }

    #[test]
    fn totals_ignore_missing_and_negative_lags() {
        let lags = [
            assess(Some(70), 0, 100),
            assess(None, 0, 50),
            assess(Some(120), 0, 100),
            assess(Some(0), 0, 5),
        ];
        assert_eq!(total_lag(&lags), 35);
        let huge = [assess(Some(0), 0, i64::MAX), assess(Some(0), 0, i64::MAX)];
        assert_eq!(total_lag(&huge), i64::MAX);
    }
}
