//! The broker's always-on metrics: request counts, errors and latency per API, network bytes, connections, ISR
//! changes, retention deletions and records lost to retention. Names and meanings: docs/metrics.md.
//!
//! The hot path touches only atomics and handles created up front: each supported API's request counter and
//! latency histogram are looked up by API key in a fixed table (no map, no lock); an error code's counter is
//! looked up in its family only when a response carries an error. Gauges that describe state (partitions, groups,
//! process, disk) are not kept here: they are read from the state itself at scrape time (`ops::scrape`).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels as (name, value) pairs: prometheus-client encodes a `Vec` of them as a label set.
pub type Labels = Vec<(&'static str, String)>;

/// One slot per API key (keys are small non-negative numbers; anything outside is not counted per API).
const API_KEYS_MAX: usize = 128;

/// Latency buckets: 100 µs to ~52 s, doubling (a long poll Fetch waits up to its max wait).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

/// Per-API handles, created once.
struct ApiHandles {
    name: &'static str,
    requests: Counter,
    latency: Histogram,
}

pub struct BrokerMetrics {
    registry: Registry,
    apis: Vec<Option<ApiHandles>>,
    errors: Family<Labels, Counter>,
    pub network_received_bytes: Counter,
    pub network_sent_bytes: Counter,
    pub connections: Gauge,
    pub connections_accepted: Counter,
    pub connections_closed_on_error: Counter,
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub retention_deleted_segments: Counter,
    records_lost_to_retention: Family<Labels, Counter>,
    /// Requests throttled by a client quota and the throttle time given, per quota (`produce`, `fetch`).
    quota_throttled: Family<Labels, Counter>,
    quota_throttle_ms: Family<Labels, Counter>,
    pub http_requests: Counter,
    pub http_connections_refused: Counter,
    /// Key lookups (`/v1/topics/{topic}/records`), by outcome, and their latency.
    pub key_lookups: super::records::KeyLookupMetrics,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    pub fn new() -> BrokerMetrics {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        let latency =
            Family::<Labels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        let errors = Family::<Labels, Counter>::default();
        let mut apis: Vec<Option<ApiHandles>> = (0..API_KEYS_MAX).map(|_| None).collect();
        for (key, _, _) in crate::apis::SUPPORTED
            .iter()
            .chain(crate::apis::CLUSTER_ONLY.iter())
        {
            let index = *key as i16 as usize;
            if index >= API_KEYS_MAX {
                continue;
            }
            let name = api_name(*key);
            let labels: Labels = vec![("api", name.to_string())];
            apis[index] = Some(ApiHandles {
                name,
                requests: requests.get_or_create(&labels).clone(),
                latency: latency.get_or_create(&labels).clone(),
            });
        }
        registry.register(
            "annal_requests",
            "Kafka requests answered (or closed on), per API",
            requests,
        );
        registry.register(
            "annal_request_duration_seconds",
            "Time from a request's decode to its response being ready, per API",
            latency,
        );
        registry.register(
            "annal_request_errors",
            "Error codes in responses, per API and Kafka error code (top-level and per partition)",
            errors.clone(),
        );
        let m = BrokerMetrics {
            apis,
            errors,
            network_received_bytes: Counter::default(),
            network_sent_bytes: Counter::default(),
            connections: Gauge::default(),
            connections_accepted: Counter::default(),
            connections_closed_on_error: Counter::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            retention_deleted_segments: Counter::default(),
            records_lost_to_retention: Family::default(),
            quota_throttled: Family::default(),
            quota_throttle_ms: Family::default(),
            http_requests: Counter::default(),
            http_connections_refused: Counter::default(),
            key_lookups: super::records::KeyLookupMetrics::default(),
            registry,
        };
        let mut registry = m.registry;
        let c = |r: &mut Registry, name: &str, help: &str, counter: &Counter| {
            r.register(name, help, counter.clone())
        };
        c(
            &mut registry,
            "annal_network_received_bytes",
            "Bytes of Kafka requests received (size prefix included)",
            &m.network_received_bytes,
        );
        c(
            &mut registry,
            "annal_network_sent_bytes",
            "Bytes of Kafka responses sent (size prefix included)",
            &m.network_sent_bytes,
        );
        registry.register(
            "annal_connections",
            "Open Kafka client connections",
            m.connections.clone(),
        );
        c(
            &mut registry,
            "annal_connections_accepted",
            "Kafka client connections accepted",
            &m.connections_accepted,
        );
        c(
            &mut registry,
            "annal_connections_closed_on_error",
            "Connections closed because a frame broke a rule (size, decoding, idle)",
            &m.connections_closed_on_error,
        );
        c(
            &mut registry,
            "annal_isr_shrinks",
            "ISR shrinks of partitions this broker leads, confirmed by the controller",
            &m.isr_shrinks,
        );
        c(
            &mut registry,
            "annal_isr_expands",
            "ISR expansions of partitions this broker leads, confirmed by the controller",
            &m.isr_expands,
        );
        c(
            &mut registry,
            "annal_retention_deleted_segments",
            "Segments deleted by retention.ms / retention.bytes",
            &m.retention_deleted_segments,
        );
        registry.register(
            "annal_group_records_lost_to_retention",
            "Records retention deleted that a group with committed offsets had not consumed, per group and topic",
            m.records_lost_to_retention.clone(),
        );
        registry.register(
            "annal_quota_throttled_requests",
            "Requests whose client went over its byte-rate quota and was throttled, per quota (produce, fetch)",
            m.quota_throttled.clone(),
        );
        registry.register(
            "annal_quota_throttle_time_ms",
            "Throttle time given to clients over their byte-rate quota (their connection muted that long), per quota",
            m.quota_throttle_ms.clone(),
        );
        c(
            &mut registry,
            "annal_http_requests",
            "Requests served by the HTTP listener",
            &m.http_requests,
        );
        c(
            &mut registry,
            "annal_http_connections_refused",
            "HTTP connections refused at the connection limit",
            &m.http_connections_refused,
        );
        m.key_lookups.register(&mut registry);
        BrokerMetrics { registry, ..m }
    }

    /// The registry of the always-on metrics, encoded at every scrape before the scrape-time ones.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// One request of `key` answered (or failed) after `elapsed`. Lock-free apart from the histogram's own.
    pub fn observe_request(&self, key: ApiKey, elapsed: Duration) {
        if let Some(Some(api)) = self.apis.get(key as i16 as usize) {
            api.requests.inc();
            api.latency.observe(elapsed.as_secs_f64());
        }
    }

    /// Counts a response's non-zero error codes under `key`.
    pub fn count_errors(&self, key: ApiKey, codes: impl IntoIterator<Item = i16>) {
        let Some(Some(api)) = self.apis.get(key as i16 as usize) else {
            return;
        };
        for code in codes.into_iter().filter(|c| *c != 0) {
            let labels: Labels = vec![
                ("api", api.name.to_string()),
                ("error_code", code.to_string()),
            ];
            self.errors.get_or_create(&labels).inc();
        }
    }

    /// A request of quota `kind` throttled for `ms`.
    pub fn quota_throttled(&self, kind: &'static str, ms: u32) {
        let labels: Labels = vec![("quota", kind.to_string())];
        self.quota_throttled.get_or_create(&labels).inc();
        self.quota_throttle_ms
            .get_or_create(&labels)
            .inc_by(u64::from(ms));
    }

    /// Records lost to retention: `count` records of `topic` that `group` had not consumed.
    pub fn records_lost(&self, group: &str, topic: &str, count: u64) {
        let labels: Labels = vec![("group", group.to_string()), ("topic", topic.to_string())];
        self.records_lost_to_retention
            .get_or_create(&labels)
            .inc_by(count);
    }

    /// The lost-record counter of `group` and `topic` (0 if none); tests and the group views read it.
    pub fn records_lost_of(&self, group: &str, topic: &str) -> u64 {
        let labels: Labels = vec![("group", group.to_string()), ("topic", topic.to_string())];
        self.records_lost_to_retention
            .get(&labels)
            .map_or(0, |c| c.get())
    }

    /// Forgets the lost-record series of groups that `keep` says are gone (bounded cardinality).
    pub fn forget_lost(&self, keep: impl Fn(&str) -> bool) {
        // prometheus-client's families cannot be iterated; the series are few (one per group and topic that
        // lost records) and stay until restart, like Kafka's per-topic meters.
        let _ = keep;
    }
}

/// The API's name as Kafka spells it in its docs and JMX (`Produce`, `Fetch`, `OffsetCommit`, ...).
pub fn api_name(key: ApiKey) -> &'static str {
    // `ApiKey`'s Debug is its variant name; leak-free because the table of names is built once per key.
    static NAMES: std::sync::OnceLock<Vec<(i16, &'static str)>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..API_KEYS_MAX as i16)
            .filter_map(|k| ApiKey::try_from(k).ok().map(|key| (k, key)))
            .map(|(k, key)| (k, &*Box::leak(format!("{key:?}").into_boxed_str())))
            .collect()
    });
    names
        .iter()
        .find(|(k, _)| *k == key as i16)
        .map_or("Unknown", |(_, n)| n)
}

/// Error codes a response carries (top level and per partition), for `annal_request_errors_total`.
pub trait ErrorCodes {
    fn error_codes(&self, out: &mut Vec<i16>);
}

/// Dispatch helper: counts the error codes of a response whose type implements [`ErrorCodes`], and nothing for
/// other types (responses without error codes, or APIs added later without an impl). The choice is made at
/// compile time by method resolution: the impl on `ErrorProbe<T>` needs `T: ErrorCodes`, and the fallback on
/// `&ErrorProbe<T>` takes any `T` one auto-reference later.
pub struct ErrorProbe<'a, T>(pub &'a T);

pub trait CountErrors {
    fn codes(&self) -> Vec<i16>;
}

impl<T: ErrorCodes> CountErrors for ErrorProbe<'_, T> {
    fn codes(&self) -> Vec<i16> {
        let mut out = Vec::new();
        self.0.error_codes(&mut out);
        out
    }
}

pub trait CountNoErrors {
    fn codes(&self) -> Vec<i16>;
}

impl<T> CountNoErrors for &ErrorProbe<'_, T> {
    fn codes(&self) -> Vec<i16> {
        Vec::new()
    }
}

macro_rules! top_level_error_code {
    ($($t:ty),* $(,)?) => {$(
        impl ErrorCodes for $t {
            fn error_codes(&self, out: &mut Vec<i16>) {
                out.push(self.error_code);
            }
        }
    )*};
}

mod impls {
    use super::ErrorCodes;
    use kafka_protocol::messages::*;

    top_level_error_code!(
        ApiVersionsResponse,
        DescribeClusterResponse,
        JoinGroupResponse,
        SyncGroupResponse,
        HeartbeatResponse,
        LeaveGroupResponse,
        OffsetDeleteResponse,
        ListGroupsResponse,
        ConsumerGroupHeartbeatResponse,
        InitProducerIdResponse,
    );

    impl ErrorCodes for ProduceResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            for t in &self.responses {
                out.extend(t.partition_responses.iter().map(|p| p.error_code));
            }
        }
    }

    impl ErrorCodes for FetchResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.push(self.error_code);
            for t in &self.responses {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }

    impl ErrorCodes for ListOffsetsResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            for t in &self.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }

    impl ErrorCodes for OffsetCommitResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            for t in &self.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }

    impl ErrorCodes for OffsetFetchResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.push(self.error_code);
            for t in &self.topics {
                out.extend(t.partitions.iter().map(|p| p.error_code));
            }
            for g in &self.groups {
                out.push(g.error_code);
                for t in &g.topics {
                    out.extend(t.partitions.iter().map(|p| p.error_code));
                }
            }
        }
    }

    impl ErrorCodes for FindCoordinatorResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.push(self.error_code);
            out.extend(self.coordinators.iter().map(|c| c.error_code));
        }
    }

    impl ErrorCodes for CreateTopicsResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.extend(self.topics.iter().map(|t| t.error_code));
        }
    }

    impl ErrorCodes for DeleteTopicsResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.extend(self.responses.iter().map(|t| t.error_code));
        }
    }

    impl ErrorCodes for DescribeConfigsResponse {
        fn error_codes(&self, out: &mut Vec<i16>) {
            out.extend(self.results.iter().map(|r| r.error_code));
        }
    }
}

/// A gauge of f64 (seconds, ratios) for the scrape-time registry.
pub type GaugeF64 = Gauge<f64, AtomicU64>;

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchResponse, MetadataResponse};

    #[test]
    fn requests_latency_and_errors_are_counted_per_api() {
        let m = BrokerMetrics::new();
        m.observe_request(ApiKey::Produce, Duration::from_millis(3));
        m.observe_request(ApiKey::Produce, Duration::from_millis(5));
        m.count_errors(ApiKey::Produce, [0, 6, 6, 0]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, m.registry()).unwrap();
        assert!(
            text.contains("annal_requests_total{api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("annal_request_duration_seconds_count{api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("annal_request_errors_total{api=\"Produce\",error_code=\"6\"} 2"),
            "{text}"
        );
        assert!(!text.contains("error_code=\"0\""), "{text}");
    }

    #[test]
    // The borrow is how `count_errors!` calls it: the fallback impl is one auto-reference away.
    #[allow(clippy::needless_borrow)]
    fn the_probe_counts_only_types_with_error_codes() {
        let mut fetch = FetchResponse::default();
        fetch.error_code = 71;
        assert_eq!((&ErrorProbe(&fetch)).codes(), vec![71]);
        // MetadataResponse has no ErrorCodes impl: the fallback answers nothing.
        let metadata = MetadataResponse::default();
        assert!((&ErrorProbe(&metadata)).codes().is_empty());
    }
}
