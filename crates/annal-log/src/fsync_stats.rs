//! Process-wide fsync latency of the log's data files (segment flushes, roll flushes, the group commit's durable
//! syncs): a fixed-bucket histogram of atomic counters, cheap enough for every fsync and readable by whoever
//! exports metrics (the broker's `/metrics`), without annal-log depending on a metrics crate. Slow fsyncs are the
//! first sign of a failing or saturated disk, and they bound acks=all latency with `durable` appends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Upper bounds of the buckets, in seconds (100 µs to 2.5 s; slower ones land in the +Inf bucket).
pub const BUCKET_BOUNDS_SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const BUCKETS: usize = BUCKET_BOUNDS_SECONDS.len() + 1;

static COUNTS: [AtomicU64; BUCKETS] = [const { AtomicU64::new(0) }; BUCKETS];
static SUM_NANOS: AtomicU64 = AtomicU64::new(0);

/// What the histogram holds: per-bucket (not cumulative) counts with their upper bounds, +Inf last.
#[derive(Debug, Clone, PartialEq)]
pub struct FsyncSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

/// Runs `sync` and records how long it took, whether it failed or not.
pub(crate) fn timed<T>(sync: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = sync();
    observe(start.elapsed());
    out
}

pub(crate) fn observe(elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    let bucket = BUCKET_BOUNDS_SECONDS
        .iter()
        .position(|bound| seconds <= *bound)
        .unwrap_or(BUCKETS - 1);
    COUNTS[bucket].fetch_add(1, Ordering::Relaxed);
    let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    SUM_NANOS.fetch_add(nanos, Ordering::Relaxed);
}

/// The fsyncs recorded so far in this process.
pub fn fsync_snapshot() -> FsyncSnapshot {
    let mut buckets = Vec::with_capacity(BUCKETS);
    let mut count = 0;
    for (i, c) in COUNTS.iter().enumerate() {
        let n = c.load(Ordering::Relaxed);
        count += n;
        let bound = BUCKET_BOUNDS_SECONDS
            .get(i)
            .copied()
            .unwrap_or(f64::INFINITY);
        buckets.push((bound, n));
    }
    FsyncSnapshot {
        buckets,
        count,
        sum_seconds: SUM_NANOS.load(Ordering::Relaxed) as f64 / 1e9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_its_bucket_and_the_sum() {
        let before = fsync_snapshot();
        observe(Duration::from_micros(700)); // (0.5 ms, 1 ms]
        observe(Duration::from_secs(3)); // +Inf
        let after = fsync_snapshot();
        let grew = |i: usize| after.buckets[i].1 - before.buckets[i].1;
        let ms = BUCKET_BOUNDS_SECONDS
            .iter()
            .position(|b| *b == 0.001)
            .unwrap();
        assert!(grew(ms) >= 1);
        assert!(grew(BUCKETS - 1) >= 1);
        assert_eq!(after.buckets.len(), BUCKETS);
        assert!(after.buckets[BUCKETS - 1].0.is_infinite());
        assert!(after.count >= before.count + 2);
        assert!(after.sum_seconds >= before.sum_seconds + 3.0);
    }
}
