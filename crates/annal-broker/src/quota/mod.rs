//! Client quotas: Kafka's `ClientQuotaManager` for produce and fetch byte rates (decision 0017-quotas).
//!
//! A request's (user, client-id) resolves to a quota through Kafka's eight levels, most specific first
//! ([`resolve`]); the level found also says which clients share a rate (its metric tags: a quota on
//! `/config/users/alice` is shared by all of alice's client ids, one on `/config/users/<default>` is kept per
//! user). Each shared rate is a [`rate::SampledRate`] over `quota.window.num` windows of
//! `quota.window.size.seconds`. Recording a request's bytes that take the rate over the bound gives a throttle
//! time, Kafka's `(rate - bound) / bound * window`: the response carries it in `throttle_time_ms` and the
//! connection is muted that long ([`throttle_connection`]; `server.rs` does not read the connection's next
//! request until it has passed), so a client cannot go faster by ignoring it.
//!
//! Quotas come from the broker's metadata image (ClientQuotaRecords), so a change applies on every broker as it
//! applies the record. Nothing here is consulted when the image holds no quota for the kind (the common case).

pub mod rate;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use annal_metadata::image::MetadataImage;
use annal_metadata::quota::{
    QuotaEntity, CLIENT_ID, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER,
};
use parking_lot::Mutex;

use rate::{throttle_time_ms, SampledRate};

/// `quota.window.num` and `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSettings {
    pub window_num: usize,
    pub window_size_seconds: i64,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            window_num: 11,
            window_size_seconds: 1,
        }
    }
}

/// Most shared rates kept per kind: a bound on the memory clients with distinct ids can make the broker hold.
/// When it is reached the least recently recorded rate is forgotten (it restarts from zero if used again).
pub const SENSORS_MAX: usize = 50_000;

/// A rate nothing was recorded in for this long is dropped (Kafka's `InactiveSensorExpirationTimeSeconds`,
/// one hour), checked at most once per [`SENSOR_SWEEP_INTERVAL_MS`].
pub const SENSOR_EXPIRY_MS: i64 = 3_600_000;
pub const SENSOR_SWEEP_INTERVAL_MS: i64 = 60_000;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// producer_byte_rate: the bytes of Produce requests.
    Produce,
    /// consumer_byte_rate: the bytes of consumers' Fetch responses.
    Fetch,
    /// request_percentage: the time spent handling a client's requests, in percent of one thread over the
    /// window (Kafka's request handler threads; here the time the request's handler was being polled).
    Request,
}

impl QuotaKind {
    /// The quota key in ClientQuotaRecords.
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => PRODUCER_BYTE_RATE,
            QuotaKind::Fetch => CONSUMER_BYTE_RATE,
            QuotaKind::Request => REQUEST_PERCENTAGE,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Request => "request",
        }
    }
}

/// The rate a quota is enforced on: (user tag, client-id tag), "" where the level does not distinguish.
pub type SensorKey = (String, String);

/// A quota found for a client: which rate it shares, and the bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub sensor: SensorKey,
    pub bound: f64,
}

fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> QuotaEntity {
    let mut e = QuotaEntity::new();
    if let Some(u) = user {
        e.insert(USER.to_string(), u.map(str::to_string));
    }
    if let Some(c) = client {
        e.insert(CLIENT_ID.to_string(), c.map(str::to_string));
    }
    e
}

/// Kafka's precedence (`DefaultQuotaCallback.quotaMetricTags` and `quotaLimit`), first match wins:
/// 1 `/config/users/<user>/clients/<client-id>`, 2 `/config/users/<user>/clients/<default>`,
/// 3 `/config/users/<user>`, 4 `/config/users/<default>/clients/<client-id>`,
/// 5 `/config/users/<default>/clients/<default>`, 6 `/config/users/<default>`, 7 `/config/clients/<client-id>`,
/// 8 `/config/clients/<default>`.
pub fn resolve(image: &MetadataImage, key: &str, user: &str, client_id: &str) -> Option<Resolved> {
    let (u, c) = (Some(user), Some(client_id));
    let both = (user.to_string(), client_id.to_string());
    let user_only = (user.to_string(), String::new());
    let client_only = (String::new(), client_id.to_string());
    let levels: [(QuotaEntity, &SensorKey); 8] = [
        (entity(Some(u), Some(c)), &both),
        (entity(Some(u), Some(None)), &both),
        (entity(Some(u), None), &user_only),
        (entity(Some(None), Some(c)), &both),
        (entity(Some(None), Some(None)), &both),
        (entity(Some(None), None), &user_only),
        (entity(None, Some(c)), &client_only),
        (entity(None, Some(None)), &client_only),
    ];
    levels.iter().find_map(|(e, sensor)| {
        image.client_quota(e, key).map(|bound| Resolved {
            sensor: (*sensor).clone(),
            bound,
        })
    })
}

struct Sensor {
    rate: SampledRate,
    last_record_ms: i64,
}

struct Sensors {
    by_key: HashMap<SensorKey, Sensor>,
    last_sweep_ms: i64,
    /// [`SENSORS_MAX`] (smaller in tests).
    max: usize,
}

impl Sensors {
    /// Drops rates idle for [`SENSOR_EXPIRY_MS`] (at most once a minute), and makes room for `key` under
    /// [`SENSORS_MAX`].
    fn make_room(&mut self, key: &SensorKey, now_ms: i64) {
        if now_ms - self.last_sweep_ms >= SENSOR_SWEEP_INTERVAL_MS {
            self.last_sweep_ms = now_ms;
            self.by_key
                .retain(|_, s| now_ms - s.last_record_ms < SENSOR_EXPIRY_MS);
        }
        if self.by_key.len() >= self.max && !self.by_key.contains_key(key) {
            // The least recently recorded sixteenth goes at once, so a flood of new client ids costs one scan
            // per SENSORS_MAX / 16 of them rather than one per request.
            let mut ages: Vec<(i64, SensorKey)> = self
                .by_key
                .iter()
                .map(|(k, s)| (s.last_record_ms, k.clone()))
                .collect();
            let evicted = (self.max / 16).max(1).min(ages.len());
            ages.select_nth_unstable_by_key(evicted - 1, |(t, _)| *t);
            for (_, k) in ages.drain(..evicted) {
                self.by_key.remove(&k);
            }
        }
        debug_assert!(self.by_key.len() < self.max || self.by_key.contains_key(key));
    }
}

/// The rates of one kind of quota.
pub struct QuotaManager {
    kind: QuotaKind,
    settings: QuotaSettings,
    clock_base: tokio::time::Instant,
    sensors: Mutex<Sensors>,
}

impl QuotaManager {
    pub fn new(kind: QuotaKind, settings: QuotaSettings) -> Self {
        Self::with_sensors_max(kind, settings, SENSORS_MAX)
    }

    fn with_sensors_max(kind: QuotaKind, settings: QuotaSettings, max: usize) -> Self {
        assert!(max >= 1);
        QuotaManager {
            kind,
            settings,
            clock_base: tokio::time::Instant::now(),
            sensors: Mutex::new(Sensors {
                by_key: HashMap::new(),
                last_sweep_ms: 0,
                max,
            }),
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock_base.elapsed().as_millis() as i64
    }

    fn window_ms(&self) -> i64 {
        self.settings
            .window_size_seconds
            .saturating_mul(1000)
            .max(1)
    }

    /// Kafka's `recordAndGetThrottleTimeMs`: records `value` against the client's quota (if it has one) and
    /// returns how long to throttle it, 0 if within the quota.
    pub fn record(&self, image: &MetadataImage, user: &str, client_id: &str, value: f64) -> u32 {
        self.record_at(image, user, client_id, value, self.now_ms())
    }

    /// [`record`](Self::record) at `now` (ms since this manager was made).
    fn record_at(
        &self,
        image: &MetadataImage,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) -> u32 {
        if image.client_quotas.is_empty() {
            return 0;
        }
        let Some(found) = resolve(image, self.kind.key(), user, client_id) else {
            return 0;
        };
        let mut sensors = self.sensors.lock();
        sensors.make_room(&found.sensor, now);
        let (samples, window) = (self.settings.window_num.max(1), self.window_ms());
        let sensor = sensors
            .by_key
            .entry(found.sensor)
            .or_insert_with(|| Sensor {
                rate: SampledRate::new(samples, window),
                last_record_ms: now,
            });
        sensor.last_record_ms = now;
        sensor.rate.record(value, now);
        let measured = sensor.rate.measure(now);
        let window_size = sensor.rate.window_size_ms(now);
        let ms = throttle_time_ms(measured, found.bound, window_size);
        // Kafka bounds a request-time throttle by one window (`ClientRequestQuotaManager.maxThrottleTimeMs`);
        // byte-rate throttles are not bounded (a fetch is capped instead, `max_value_in_window`).
        let ms = if self.kind == QuotaKind::Request {
            ms.min(self.window_ms())
        } else {
            ms
        };
        ms.clamp(0, i64::from(u32::MAX)) as u32
    }

    /// Kafka's `unrecordQuotaSensor`: takes back what [`record`](Self::record) counted for a response that was
    /// not sent after all (a throttled fetch is answered empty).
    pub fn unrecord(&self, image: &MetadataImage, user: &str, client_id: &str, value: f64) {
        self.unrecord_at(image, user, client_id, value, self.now_ms());
    }

    fn unrecord_at(
        &self,
        image: &MetadataImage,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) {
        let Some(found) = resolve(image, self.kind.key(), user, client_id) else {
            return;
        };
        if let Some(sensor) = self.sensors.lock().by_key.get_mut(&found.sensor) {
            sensor.rate.record(-value, now);
        }
    }

    /// How many rates are held (bounded by [`SENSORS_MAX`]).
    #[cfg(test)]
    fn sensors_count(&self) -> usize {
        self.sensors.lock().by_key.len()
    }

    /// Kafka's `getMaxValueInQuotaWindow`: the most one request may take without being throttled for sure
    /// (`bound * (window.num - 1) * window seconds`); what a fetch's max bytes is capped at.
    pub fn max_value_in_window(
        &self,
        image: &MetadataImage,
        user: &str,
        client_id: &str,
    ) -> Option<f64> {
        if image.client_quotas.is_empty() {
            return None;
        }
        resolve(image, self.kind.key(), user, client_id).map(|r| {
            r.bound
                * (self.settings.window_num.max(1) as f64 - 1.0).max(1.0)
                * self.settings.window_size_seconds.max(1) as f64
        })
    }
}

/// The produce and fetch quota managers of a broker.
pub struct ClientQuotas {
    pub produce: QuotaManager,
    pub fetch: QuotaManager,
    pub request: QuotaManager,
}

impl ClientQuotas {
    pub fn new(settings: QuotaSettings) -> Self {
        ClientQuotas {
            produce: QuotaManager::new(QuotaKind::Produce, settings),
            fetch: QuotaManager::new(QuotaKind::Fetch, settings),
            request: QuotaManager::new(QuotaKind::Request, settings),
        }
    }
}

/// Kafka's `nanosToPercentage`: handler time as what a request_percentage rate sums (percent-seconds).
pub fn busy_percent(busy: std::time::Duration) -> f64 {
    busy.as_secs_f64() * 100.0
}

/// Runs `f` and returns, beside its output, the time spent inside its `poll` calls: the thread time a handler
/// took, without the time it waited (a long-polling fetch, a forwarded request), as Kafka's request handler
/// thread time excludes purgatory.
pub async fn timed<F: std::future::Future>(f: F) -> (F::Output, std::time::Duration) {
    let mut f = std::pin::pin!(f);
    let mut busy = std::time::Duration::ZERO;
    let out = std::future::poll_fn(|cx| {
        let started = std::time::Instant::now();
        let r = f.as_mut().poll(cx);
        busy += started.elapsed();
        r
    })
    .await;
    (out, busy)
}

/// The user a principal stands for in quota entities: Kafka uses the principal's name (`User:alice` -> `alice`,
/// `User:ANONYMOUS` -> `ANONYMOUS`).
pub fn quota_user(principal: &str) -> &str {
    principal
        .split_once(':')
        .map_or(principal, |(_, name)| name)
}

/// How long the connection a request came on is to be muted after its response.
#[derive(Debug, Default)]
pub struct ConnectionThrottle {
    ms: AtomicU32,
}

impl ConnectionThrottle {
    /// The throttle the last request asked for, cleared.
    pub fn take(&self) -> u32 {
        self.ms.swap(0, Ordering::AcqRel)
    }
}

tokio::task_local! {
    /// The throttle slot of the connection a request came in on (set by `server.rs` for each request).
    pub static CONNECTION_THROTTLE: Arc<ConnectionThrottle>;
}

/// Mutes the current request's connection for `ms` after its response (the longest asked for wins). As in
/// Kafka since KIP-219, the response goes at once, whatever its version, carrying the throttle time; the
/// connection's next request is then not read until the time has passed (Kafka's channel mute), so a client
/// that ignores throttle_time_ms gains nothing. Outside a connection (handlers called directly) nothing happens.
pub fn throttle_connection(ms: u32) {
    if ms == 0 {
        return;
    }
    let _ = CONNECTION_THROTTLE.try_with(|t| {
        t.ms.fetch_max(ms, Ordering::AcqRel);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_metadata::records::{ClientQuotaRecord, MetadataRecord, QuotaEntityPart};

    fn set(image: &mut MetadataImage, offset: u64, parts: &[(&str, Option<&str>)], value: f64) {
        let record = MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: parts
                .iter()
                .map(|(t, n)| QuotaEntityPart {
                    entity_type: t.to_string(),
                    entity_name: n.map(str::to_string),
                })
                .collect(),
            key: PRODUCER_BYTE_RATE.into(),
            value,
            remove: false,
        });
        image.apply(offset, &record);
    }

    #[test]
    fn resolution_follows_kafkas_eight_levels() {
        let mut image = MetadataImage::new("c");
        let r = |image: &MetadataImage, u: &str, c: &str| {
            resolve(image, PRODUCER_BYTE_RATE, u, c).map(|r| (r.bound, r.sensor))
        };
        let tags = |u: &str, c: &str| (u.to_string(), c.to_string());
        assert_eq!(r(&image, "alice", "app"), None);
        // Added from the least specific to the most: each new level wins over the ones before.
        set(&mut image, 1, &[(CLIENT_ID, None)], 8.0);
        assert_eq!(r(&image, "alice", "app"), Some((8.0, tags("", "app"))));
        set(&mut image, 2, &[(CLIENT_ID, Some("app"))], 7.0);
        assert_eq!(r(&image, "alice", "app"), Some((7.0, tags("", "app"))));
        assert_eq!(r(&image, "alice", "other"), Some((8.0, tags("", "other"))));
        set(&mut image, 3, &[(USER, None)], 6.0);
        assert_eq!(r(&image, "alice", "app"), Some((6.0, tags("alice", ""))));
        set(&mut image, 4, &[(USER, None), (CLIENT_ID, None)], 5.0);
        assert_eq!(r(&image, "alice", "app"), Some((5.0, tags("alice", "app"))));
        set(
            &mut image,
            5,
            &[(USER, None), (CLIENT_ID, Some("app"))],
            4.0,
        );
        assert_eq!(r(&image, "alice", "app"), Some((4.0, tags("alice", "app"))));
        set(&mut image, 6, &[(USER, Some("alice"))], 3.0);
        assert_eq!(r(&image, "alice", "app"), Some((3.0, tags("alice", ""))));
        assert_eq!(r(&image, "bob", "app"), Some((4.0, tags("bob", "app"))));
        set(
            &mut image,
            7,
            &[(USER, Some("alice")), (CLIENT_ID, None)],
            2.0,
        );
        assert_eq!(r(&image, "alice", "app"), Some((2.0, tags("alice", "app"))));
        set(
            &mut image,
            8,
            &[(USER, Some("alice")), (CLIENT_ID, Some("app"))],
            1.0,
        );
        assert_eq!(r(&image, "alice", "app"), Some((1.0, tags("alice", "app"))));
        assert_eq!(r(&image, "alice", "x"), Some((2.0, tags("alice", "x"))));
        // A consumer quota is a different key: none of the above applies to fetches.
        assert_eq!(resolve(&image, CONSUMER_BYTE_RATE, "alice", "app"), None);
    }

    #[test]
    fn recording_over_the_bound_throttles_for_kafkas_time() {
        let mut image = MetadataImage::new("c");
        set(&mut image, 1, &[(USER, Some("alice"))], 1000.0);
        let m = QuotaManager::new(QuotaKind::Produce, QuotaSettings::default());
        // 5 000 bytes at once over the minimum 10 s window is 500 B/s: within 1000 B/s.
        assert_eq!(m.record_at(&image, "alice", "a", 5000.0, 0), 0);
        // Another 15 000 makes 2000 B/s, twice the bound: throttle for the window, 10 s.
        assert_eq!(m.record_at(&image, "alice", "b", 15_000.0, 0), 10_000);
        // Bob has no quota; alice's other client ids share her rate (level 3 has no client-id tag).
        assert_eq!(m.record_at(&image, "bob", "a", 1e9, 0), 0);
        assert!(m.record_at(&image, "alice", "c", 1.0, 0) > 0);
        assert_eq!(m.max_value_in_window(&image, "alice", "a"), Some(10_000.0));
        assert_eq!(m.max_value_in_window(&image, "bob", "a"), None);
    }

    #[test]
    fn rates_are_bounded_in_number_and_expire_after_an_idle_hour() {
        let mut image = MetadataImage::new("c");
        set(&mut image, 1, &[(CLIENT_ID, None)], 1e9);
        let m = QuotaManager::with_sensors_max(QuotaKind::Produce, QuotaSettings::default(), 32);
        // Every client id gets its own rate under the default client-id quota; at most 32 are kept.
        for i in 0..1000 {
            m.record_at(&image, "u", &format!("client-{i}"), 1.0, i);
            assert!(m.sensors_count() <= 32);
        }
        // An hour without a record: swept at the next record (of anyone).
        m.record_at(&image, "u", "fresh", 1.0, SENSOR_EXPIRY_MS + 1000);
        assert_eq!(m.sensors_count(), 1);
    }

    #[test]
    fn request_throttles_are_bounded_by_one_window_and_unrecord_takes_back() {
        let mut image = MetadataImage::new("c");
        let record = MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: vec![QuotaEntityPart {
                entity_type: CLIENT_ID.into(),
                entity_name: Some("busy".into()),
            }],
            key: REQUEST_PERCENTAGE.into(),
            value: 1.0,
            remove: false,
        });
        image.apply(1, &record);
        let m = QuotaManager::new(QuotaKind::Request, QuotaSettings::default());
        // 5 s of handler time over the 10 s span is 50 %, fifty times the bound: throttled one window (1 s).
        let busy = busy_percent(std::time::Duration::from_secs(5));
        assert_eq!(m.record_at(&image, "u", "busy", busy, 0), 1000);
        m.unrecord_at(&image, "u", "busy", busy, 0);
        assert_eq!(m.record_at(&image, "u", "busy", 0.0, 0), 0);
    }

    #[test]
    fn principals_map_to_quota_users() {
        assert_eq!(quota_user("User:alice"), "alice");
        assert_eq!(quota_user("User:ANONYMOUS"), "ANONYMOUS");
        assert_eq!(quota_user("nocolon"), "nocolon");
    }
}
