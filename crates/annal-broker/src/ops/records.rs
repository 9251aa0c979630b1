//! `GET /v1/topics/{topic}/records?key=...`: records by key, from the key index (`key.index.enable`; see
//! annal-log's `key_lookup.rs` and docs/decisions/0015-key-index.md).
//!
//! Parameters: `key` (UTF-8) or `key_hex`; `latest=true` (the newest record only); `partition=N` (default: the
//! key's murmur2 partition, as Kafka's default partitioner puts it) or `partition=all` (custom partitioners);
//! `from=OFFSET` (resume a page: a partition's `next_offset`); `since`/`until` (ms since the epoch);
//! `limit` (records, default [`LIMIT_DEFAULT`], at most [`LIMIT_MAX`]); `max_bytes` (default and at most
//! [`MAX_BYTES_MAX`]); `isolation=read_committed` (no records of aborted or open transactions).
//!
//! The partition's leader or any in-sync follower answers, from records below its own high watermark (a
//! follower's is what the leader last told it, capped by its log end: never above the leader's), so an answer
//! never shows a record a new leader might not have; a follower's may trail the leader's by a fetch. A broker
//! that holds no in-sync replica of the partition answers 421 with the leader's id; with `partition=all` it
//! answers the partitions it serves and lists the others under `not_leader`.
//!
//! Metrics ([`KeyLookupMetrics`], [`register_key_index_gauges`]): lookups by outcome and their latency, and per
//! topic the index's backlog, file bytes and in-memory entries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use annal_log::{KeyQuery, LogError, OwnedRecord};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::metrics::Labels;
use crate::replica::PartitionError;
use crate::Broker;

/// Records per answer unless `limit` says otherwise.
pub const LIMIT_DEFAULT: usize = 100;
/// The most records one answer holds.
pub const LIMIT_MAX: usize = 1000;
/// The most key + value + header bytes one answer holds (the first record is returned whatever its size).
pub const MAX_BYTES_MAX: usize = 4 << 20;
/// The longest key accepted (a key lookup's URL stays within the header limit anyway).
const KEY_BYTES_MAX: usize = 4096;

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordsRequest {
    pub key: Vec<u8>,
    pub latest: bool,
    pub partition: PartitionChoice,
    pub from: i64,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub limit: usize,
    pub max_bytes: usize,
    pub read_committed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionChoice {
    /// The key's murmur2 partition.
    Default,
    One(i32),
    All,
}

/// Parses the query string; the error is the 400 answer's text.
pub fn parse_request(raw: Option<&str>) -> Result<RecordsRequest, String> {
    let mut request = RecordsRequest {
        key: Vec::new(),
        latest: false,
        partition: PartitionChoice::Default,
        from: 0,
        since_ms: None,
        until_ms: None,
        limit: LIMIT_DEFAULT,
        max_bytes: MAX_BYTES_MAX,
        read_committed: false,
    };
    let mut key = None;
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| format!("{name}: bad percent-encoding"))?;
        let text = || String::from_utf8(value.clone()).map_err(|_| format!("{name}: not UTF-8"));
        let number = |what: &str| -> Result<i64, String> {
            text()?.parse::<i64>().map_err(|_| {
                format!(
                    "{name}: '{}' is not {what}",
                    String::from_utf8_lossy(&value)
                )
            })
        };
        match name {
            "key" => key = Some(value.clone()),
            "key_hex" => {
                key = Some(annal_client::hex::decode(&text()?).ok_or("key_hex: not an even number of hex digits")?)
            }
            "latest" => request.latest = parse_bool(&text()?).ok_or("latest: true or false")?,
            "partition" => {
                let t = text()?;
                request.partition = if t == "all" {
                    PartitionChoice::All
                } else {
                    let p: i32 = t.parse().map_err(|_| format!("partition: '{t}' is not a partition number or 'all'"))?;
                    if p < 0 {
                        return Err(format!("partition: {p} is negative"));
                    }
                    PartitionChoice::One(p)
                };
            }
            "from" => request.from = number("an offset")?.max(0),
            "since" => request.since_ms = Some(number("milliseconds since the epoch")?),
            "until" => request.until_ms = Some(number("milliseconds since the epoch")?),
            "limit" => {
                let n = number("a record count")?;
                if n < 1 {
                    return Err("limit: at least 1".into());
                }
                request.limit = (n as u64).min(LIMIT_MAX as u64) as usize;
            }
            "max_bytes" => {
                let n = number("a byte count")?;
                if n < 1 {
                    return Err("max_bytes: at least 1".into());
                }
                request.max_bytes = (n as u64).min(MAX_BYTES_MAX as u64) as usize;
            }
            "isolation" => {
                request.read_committed = match text()?.as_str() {
                    "read_committed" => true,
                    "read_uncommitted" => false,
                    other => return Err(format!("isolation: '{other}' is not read_committed or read_uncommitted")),
                }
            }
            other => return Err(format!("unknown parameter '{other}' (key, key_hex, latest, partition, from, since, until, limit, max_bytes, isolation)")),
        }
    }
    request.key = key.ok_or("key (or key_hex) is required: /v1/topics/{topic}/records?key=...")?;
    if request.key.len() > KEY_BYTES_MAX {
        return Err(format!("key: longer than {KEY_BYTES_MAX} bytes"));
    }
    Ok(request)
}

fn parse_bool(t: &str) -> Option<bool> {
    match t {
        "true" | "1" | "" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// `%XX` and `+` (a space) decoded; `None` on a malformed escape.
pub(crate) fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Bytes as JSON: the text when it is UTF-8, else hex (the `*_encoding` field says which).
#[derive(Serialize)]
struct Bytes {
    data: String,
    encoding: &'static str,
}

fn json_bytes(bytes: &[u8]) -> Bytes {
    match std::str::from_utf8(bytes) {
        Ok(t) => Bytes {
            data: t.to_string(),
            encoding: "utf8",
        },
        Err(_) => Bytes {
            data: annal_client::hex::encode(bytes),
            encoding: "hex",
        },
    }
}

#[derive(Serialize)]
struct RecordView {
    offset: i64,
    timestamp: i64,
    key: Option<Bytes>,
    /// `null` for a tombstone.
    value: Option<Bytes>,
    headers: Vec<HeaderView>,
}

#[derive(Serialize)]
struct HeaderView {
    key: String,
    value: Option<Bytes>,
}

impl From<&OwnedRecord> for RecordView {
    fn from(r: &OwnedRecord) -> RecordView {
        let headers = annal_log::key_index::parse_headers(&r.headers).unwrap_or_default();
        RecordView {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.as_deref().map(json_bytes),
            value: r.value.as_deref().map(json_bytes),
            headers: headers
                .iter()
                .map(|(k, v)| HeaderView {
                    key: k.clone(),
                    value: v.as_deref().map(json_bytes),
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct PartitionAnswer {
    partition: i32,
    /// Whether this broker answered as the partition's `leader` or as an in-sync `follower`.
    role: &'static str,
    /// Records below this offset were searched: the high watermark (the last stable offset with
    /// `isolation=read_committed`), or the upper end of the `until` range.
    end_offset: i64,
    records: Vec<RecordView>,
    /// Resume with `partition=N&from=next_offset`; `null` when this partition has nothing more.
    next_offset: Option<i64>,
}

#[derive(Serialize)]
struct NotLeader {
    partition: i32,
    /// -1 when the partition has no leader now.
    leader: i32,
}

#[derive(Serialize)]
struct Answer {
    topic: String,
    /// The broker that answered.
    broker: i32,
    partitions: Vec<PartitionAnswer>,
    /// Partitions (of `partition=all`) this broker does not lead: ask their leaders.
    not_leader: Vec<NotLeader>,
}

fn error(code: StatusCode, message: String) -> Response {
    (code, Json(serde_json::json!({ "error": message }))).into_response()
}

/// The answer to one request, counted and timed in [`KeyLookupMetrics`]. Blocking (each partition's lookup
/// holds its log lock).
pub fn answer(broker: &Arc<Broker>, topic: &str, raw_query: Option<&str>) -> Response {
    let started = Instant::now();
    let response = answer_untimed(broker, topic, raw_query);
    broker
        .replica_manager()
        .metrics()
        .key_lookups
        .observe(response.status(), started.elapsed());
    response
}

fn answer_untimed(broker: &Arc<Broker>, topic: &str, raw_query: Option<&str>) -> Response {
    let request = match parse_request(raw_query) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let image = broker.cluster().image();
    let Some(topic_image) = image.topic_by_name(topic) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("topic '{topic}' does not exist (annal topic list shows the topics)"),
        );
    };
    let count = topic_image.partitions.len() as u32;
    if count == 0 {
        return error(
            StatusCode::NOT_FOUND,
            format!("topic '{topic}' has no partitions"),
        );
    }
    let wanted: Vec<i32> = match request.partition {
        PartitionChoice::Default => {
            vec![annal_client::partitioner::partition_for_key(&request.key, count) as i32]
        }
        PartitionChoice::One(p) if (p as u32) < count => vec![p],
        PartitionChoice::One(p) => {
            return error(
                StatusCode::NOT_FOUND,
                format!("topic '{topic}' has {count} partitions; there is no partition {p}"),
            )
        }
        PartitionChoice::All => (0..count as i32).collect(),
    };
    let me = broker.replica_manager().local_broker_id();
    let mut answer = Answer {
        topic: topic.to_string(),
        broker: me,
        partitions: Vec::new(),
        not_leader: Vec::new(),
    };
    let (mut records_left, mut bytes_left) = (request.limit, request.max_bytes);
    for index in wanted {
        let leader = topic_image.partitions.get(&index).map_or(-1, |p| p.leader);
        let partition = broker.replica_manager().partition(topic, index);
        let Some(partition) = partition.filter(|p| p.serves_key_lookups()) else {
            answer.not_leader.push(NotLeader {
                partition: index,
                leader,
            });
            continue;
        };
        let role = if partition.is_leader() {
            "leader"
        } else {
            "follower"
        };
        if records_left == 0 || bytes_left == 0 {
            // The answer is full: the partition is listed, unread, from where it would start.
            answer.partitions.push(PartitionAnswer {
                partition: index,
                role,
                end_offset: partition.high_watermark(),
                records: Vec::new(),
                next_offset: Some(request.from),
            });
            continue;
        }
        let query = KeyQuery {
            key: request.key.clone(),
            latest: request.latest,
            from_offset: request.from,
            upper_offset: None,
            since_ms: request.since_ms,
            until_ms: request.until_ms,
            max_records: records_left,
            max_bytes: bytes_left,
            read_committed: request.read_committed,
        };
        let found = match partition.lookup_key(query) {
            Ok(found) => found,
            Err(e) => return lookup_error(topic, index, me, leader, e),
        };
        records_left = records_left.saturating_sub(found.records.len());
        let bytes: usize = found
            .records
            .iter()
            .map(|r| {
                r.key.as_ref().map_or(0, Vec::len)
                    + r.value.as_ref().map_or(0, Vec::len)
                    + r.headers.len()
            })
            .sum();
        bytes_left = bytes_left.saturating_sub(bytes);
        answer.partitions.push(PartitionAnswer {
            partition: index,
            role,
            end_offset: found.upper_offset,
            records: found.records.iter().map(RecordView::from).collect(),
            next_offset: found.next_offset,
        });
    }
    if answer.partitions.is_empty() && answer.not_leader.len() == 1 {
        let NotLeader { partition, leader } = answer.not_leader[0];
        return (
            StatusCode::MISDIRECTED_REQUEST,
            Json(serde_json::json!({
                "error": format!("broker {me} holds no in-sync replica of {topic}-{partition}; ask its leader, broker {leader} (annal topic describe shows leaders)"),
                "partition": partition,
                "leader": leader,
            })),
        )
            .into_response();
    }
    Json(answer).into_response()
}

fn lookup_error(topic: &str, partition: i32, me: i32, leader: i32, e: PartitionError) -> Response {
    match e {
        PartitionError::Log { source: LogError::KeyIndexDisabled { .. }, .. } => error(
            StatusCode::CONFLICT,
            format!("topic '{topic}' has no key index; enable it with kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name {topic} --add-config key.index.enable=true (existing segments are then indexed in the background), or create the topic with --config key.index.enable=true"),
        ),
        PartitionError::Log { source: e @ LogError::KeyIndexBuilding { .. }, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            Json(serde_json::json!({ "error": format!("{topic}-{partition}: {e}") })),
        )
            .into_response(),
        PartitionError::NotLeader { .. } => error(
            StatusCode::MISDIRECTED_REQUEST,
            format!("broker {me} holds no in-sync replica of {topic}-{partition} (any more); ask its leader, broker {leader}"),
        ),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{topic}-{partition}: {e}")),
    }
}

/// Key lookups answered over HTTP, by outcome, and their latency. Part of the always-on registry
/// (`BrokerMetrics::key_lookups`).
#[derive(Debug)]
pub struct KeyLookupMetrics {
    outcomes: Family<Labels, Counter>,
    latency: Histogram,
}

impl Default for KeyLookupMetrics {
    fn default() -> Self {
        KeyLookupMetrics {
            outcomes: Family::default(),
            // 50 µs to ~26 s, doubling: an indexed lookup takes well under a millisecond, a catch-up much longer.
            latency: Histogram::new(exponential_buckets(0.00005, 2.0, 20)),
        }
    }
}

impl KeyLookupMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "annal_key_lookups",
            "Key lookups answered by /v1/topics/{topic}/records, by outcome (ok, bad_request, not_found, no_key_index, not_in_sync, building, error)",
            self.outcomes.clone(),
        );
        registry.register(
            "annal_key_lookup_duration_seconds",
            "Time to answer a key lookup (/v1/topics/{topic}/records), index catch-up included",
            self.latency.clone(),
        );
    }

    /// Counts one answer by its status and records its latency.
    pub fn observe(&self, status: StatusCode, elapsed: std::time::Duration) {
        let outcome = match status {
            StatusCode::OK => "ok",
            StatusCode::BAD_REQUEST => "bad_request",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::CONFLICT => "no_key_index",
            StatusCode::MISDIRECTED_REQUEST => "not_in_sync",
            StatusCode::SERVICE_UNAVAILABLE => "building",
            _ => "error",
        };
        self.outcomes
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// Answers counted with `outcome` (tests).
    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .get()
    }
}

/// Scrape-time gauges of the key index, summed per topic over the replicas this broker holds of topics with
/// `key.index.enable`: log bytes not indexed yet (the background's backlog), bytes of `.keyindex` files, and
/// entries held in memory.
pub fn register_key_index_gauges(r: &mut Registry, broker: &Broker) {
    let (unindexed, file_bytes, memory) = (
        Family::<Labels, Gauge>::default(),
        Family::<Labels, Gauge>::default(),
        Family::<Labels, Gauge>::default(),
    );
    let local = broker.replica_manager().local_broker_id();
    let mut per_topic: BTreeMap<String, annal_log::KeyIndexStats> = BTreeMap::new();
    for p in broker.replica_manager().all_partitions() {
        if !p.key_index_enabled() || (!p.is_leader() && !p.replicas().contains(&local)) {
            continue;
        }
        let stats = p.key_index_stats();
        let t = per_topic.entry(p.topic().to_string()).or_default();
        t.unindexed_bytes += stats.unindexed_bytes;
        t.file_bytes += stats.file_bytes;
        t.memory_entries += stats.memory_entries;
    }
    let as_gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (topic, stats) in per_topic {
        let labels: Labels = vec![("topic", topic)];
        unindexed
            .get_or_create(&labels)
            .set(as_gauge(stats.unindexed_bytes));
        file_bytes
            .get_or_create(&labels)
            .set(as_gauge(stats.file_bytes));
        memory
            .get_or_create(&labels)
            .set(as_gauge(stats.memory_entries));
    }
    r.register(
        "annal_key_index_unindexed_bytes",
        "Log bytes the key index does not cover yet, per topic (the background indexing's backlog)",
        unindexed,
    );
    r.register(
        "annal_key_index_file_bytes",
        "Bytes of .keyindex files in use, per topic",
        file_bytes,
    );
    r.register(
        "annal_key_index_memory_entries",
        "Key index entries held in memory (active segments), per topic",
        memory,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_parameter_and_refuses_bad_ones() {
        let r = parse_request(Some(
            "key=user%2012&latest=true&partition=3&from=7&since=10&until=20&limit=5000&max_bytes=100&isolation=read_committed",
        ))
        .unwrap();
        assert_eq!(r.key, b"user 12");
        assert!(r.latest && r.read_committed);
        assert_eq!(r.partition, PartitionChoice::One(3));
        assert_eq!((r.from, r.since_ms, r.until_ms), (7, Some(10), Some(20)));
        assert_eq!((r.limit, r.max_bytes), (LIMIT_MAX, 100));
        assert_eq!(
            parse_request(Some("key_hex=00ff")).unwrap().key,
            vec![0, 255]
        );
        assert_eq!(
            parse_request(Some("key=a&partition=all"))
                .unwrap()
                .partition,
            PartitionChoice::All
        );
        for bad in [
            "",
            "latest=true",
            "key=a&partition=-1",
            "key=a&limit=0",
            "key=%zz",
            "key=a&nope=1",
            "key_hex=abc",
            "key=a&since=x",
        ] {
            assert!(parse_request(Some(bad)).is_err(), "{bad}");
        }
    }
}
