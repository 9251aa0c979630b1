//! Kafka's `Rate` over a `SampledStat` (clients/.../metrics/stats): the sum of what was recorded in the last
//! `samples` windows of `window_ms` each, divided by the time those windows cover. Kept exactly as Kafka computes
//! it, because the throttle time a client is told is derived from it (`QuotaUtils.throttleTime`).

/// One window: when it started and what was recorded in it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    value: f64,
}

/// A rate sampled over at most `samples` windows (Kafka's `quota.window.num`) of `window_ms`
/// (`quota.window.size.seconds`). Memory is fixed: the ring holds at most `samples` entries.
#[derive(Debug, Clone)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
    samples_max: usize,
    window_ms: i64,
}

impl SampledRate {
    pub fn new(samples_max: usize, window_ms: i64) -> Self {
        assert!(samples_max >= 1 && window_ms >= 1, "a rate needs a window");
        SampledRate {
            samples: Vec::with_capacity(samples_max),
            current: 0,
            samples_max,
            window_ms,
        }
    }

    /// `SampledStat.record`: into the current window, or a new one once it has run its length.
    pub fn record(&mut self, value: f64, now_ms: i64) {
        let complete = match self.samples.get(self.current) {
            None => true,
            Some(s) => now_ms - s.start_ms >= self.window_ms,
        };
        if complete {
            self.advance(now_ms);
        }
        self.samples[self.current].value += value;
    }

    /// `SampledStat.advance`: the next slot of the ring, reset to start now.
    fn advance(&mut self, now_ms: i64) {
        let fresh = Sample {
            start_ms: now_ms,
            value: 0.0,
        };
        if self.samples.is_empty() {
            self.samples.push(fresh);
            self.current = 0;
            return;
        }
        self.current = (self.current + 1) % self.samples_max;
        if self.current >= self.samples.len() {
            self.samples.push(fresh);
        } else {
            self.samples[self.current] = fresh;
        }
    }

    /// `SampledStat.purgeObsoleteSamples`: windows older than the whole span are reset to now, empty.
    fn purge(&mut self, now_ms: i64) {
        let expire_age = self.samples_max as i64 * self.window_ms;
        for s in &mut self.samples {
            if now_ms - s.start_ms >= expire_age {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
    }

    /// `Rate.windowSize`: the time since the oldest window started, but never less than `samples - 1` full
    /// windows, so that a first burst is not measured over a few milliseconds.
    pub fn window_size_ms(&mut self, now_ms: i64) -> i64 {
        self.purge(now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms - oldest;
        let full_windows = elapsed / self.window_ms;
        let min_full_windows = self.samples_max as i64 - 1;
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * self.window_ms;
        }
        elapsed.max(1)
    }

    /// `Rate.measure` in units per second.
    pub fn measure(&mut self, now_ms: i64) -> f64 {
        let window = self.window_size_ms(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window as f64 / 1000.0)
    }
}

/// `QuotaUtils.throttleTime`: how long until the rate, with nothing more recorded, is back at the bound.
pub fn throttle_time_ms(rate: f64, bound: f64, window_ms: i64) -> i64 {
    if bound <= 0.0 || rate <= bound {
        return 0;
    }
    let ms = (rate - bound) / bound * window_ms as f64;
    // i32 is what a response's throttle_time_ms can carry.
    ms.round().clamp(0.0, f64::from(i32::MAX)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_burst_is_measured_over_the_minimum_span() {
        // 11 windows of 1 s: a burst at t=0 is spread over 10 s, as Kafka does.
        let mut r = SampledRate::new(11, 1000);
        r.record(100_000.0, 0);
        assert_eq!(r.window_size_ms(0), 10_000);
        assert!((r.measure(0) - 10_000.0).abs() < 1e-9);
    }

    #[test]
    fn the_rate_follows_steady_traffic_and_forgets_old_windows() {
        let mut r = SampledRate::new(11, 1000);
        for t in 0..30 {
            r.record(1000.0, t * 1000);
        }
        // The last 11 windows hold 11 000 over 10 s (+ the current partial window).
        let rate = r.measure(29_000);
        assert!((rate - 1100.0).abs() < 1e-9, "{rate}");
        // A long silence empties every window.
        assert_eq!(r.measure(100_000), 0.0);
    }

    #[test]
    fn throttle_time_is_kafkas() {
        // 2x over the bound over a 10 s window: wait 10 s for the average to come back down.
        assert_eq!(throttle_time_ms(2000.0, 1000.0, 10_000), 10_000);
        assert_eq!(throttle_time_ms(1500.0, 1000.0, 10_000), 5_000);
        assert_eq!(throttle_time_ms(900.0, 1000.0, 10_000), 0);
        assert_eq!(throttle_time_ms(1e300, 1.0, 10_000), i64::from(i32::MAX));
    }
}
