//! Messages: browse (ListOffsets + Fetch through the console's client) and produce (Produce, acks=all).
//!
//! A browse is bounded: at most `max_scan` records read ([`limits::BROWSE_MAX_SCAN_MAX`]), at most
//! [`limits::BROWSE_MAX_BYTES`] fetched and [`limits::BROWSE_FETCH_ROUNDS_MAX`] Fetch requests; `truncated`
//! says a bound stopped it before it found `limit` matches or reached the end. "Newest" reads backwards in
//! windows from the high watermark, so a filter that matches rarely still finds the newest matches first.

use std::collections::BTreeMap;

use annal_client::{
    decode_fetched, encode_batch, Client, FetchedRecord, OutgoingRecord, TopicMetadata, EARLIEST,
    LATEST,
};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{limits, parse_body, within_timeout, ApiError, ApiResult, Ctx, Query};

/// Text as the page shows it.
#[derive(Serialize, Debug, PartialEq)]
pub struct Data {
    encoding: &'static str,
    text: String,
    /// The text was cut at [`limits::RENDER_TEXT_BYTES_MAX`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cut: bool,
}

/// JSON (pretty-printed) when the bytes are a JSON object or array, UTF-8 text when they are text, else hex.
pub fn render(bytes: &[u8]) -> Data {
    let cut_to = |mut s: String| {
        if s.len() <= limits::RENDER_TEXT_BYTES_MAX {
            return (s, false);
        }
        let mut end = limits::RENDER_TEXT_BYTES_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        (s, true)
    };
    if let Ok(text) = std::str::from_utf8(bytes) {
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
                let (text, cut) = cut_to(serde_json::to_string_pretty(&v).unwrap_or_default());
                return Data {
                    encoding: "json",
                    text,
                    cut,
                };
            }
        }
        let (text, cut) = cut_to(text.to_string());
        return Data {
            encoding: "utf8",
            text,
            cut,
        };
    }
    let shown = &bytes[..bytes.len().min(limits::RENDER_TEXT_BYTES_MAX / 2)];
    Data {
        encoding: "hex",
        text: annal_client::hex::encode(shown),
        cut: shown.len() < bytes.len(),
    }
}

/// What a filter compares: the UTF-8 text, or the hex form of bytes that are not text.
fn searchable(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(t) => t.into(),
        Err(_) => annal_client::hex::encode(bytes).into(),
    }
}

#[derive(Serialize)]
struct Message {
    partition: i32,
    offset: i64,
    timestamp_ms: i64,
    key: Option<Data>,
    value: Option<Data>,
    headers: Vec<HeaderView>,
    /// Bytes of key, value and headers (the record's payload, not its encoded batch size).
    size_bytes: usize,
}

#[derive(Serialize)]
struct HeaderView {
    key: String,
    value: Option<Data>,
}

struct Filters {
    key: Option<String>,
    value: Option<String>,
    header: Option<String>,
}

impl Filters {
    fn matches(&self, r: &FetchedRecord) -> bool {
        let has = |bytes: &Option<Bytes>, needle: &str| {
            bytes
                .as_ref()
                .is_some_and(|b| searchable(b).contains(needle))
        };
        self.key.as_deref().is_none_or(|k| has(&r.key, k))
            && self.value.as_deref().is_none_or(|v| has(&r.value, v))
            && self
                .header
                .as_deref()
                .is_none_or(|h| r.headers.iter().any(|(k, v)| k.contains(h) || has(v, h)))
    }
}

fn message(partition: i32, r: FetchedRecord) -> Message {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, |b| b.len());
    Message {
        partition,
        offset: r.offset,
        timestamp_ms: r.timestamp,
        size_bytes: len(&r.key)
            + len(&r.value)
            + r.headers
                .iter()
                .map(|(k, v)| k.len() + len(v))
                .sum::<usize>(),
        key: r.key.as_deref().map(render),
        value: r.value.as_deref().map(render),
        headers: r
            .headers
            .into_iter()
            .map(|(key, v)| HeaderView {
                key,
                value: v.as_deref().map(render),
            })
            .collect(),
    }
}

enum From {
    Newest,
    Oldest,
    Offset(i64),
    Timestamp(i64),
}

/// The reading budget of one browse.
struct Budget {
    records_left: usize,
    bytes_left: usize,
    rounds_left: usize,
}

impl Budget {
    fn exhausted(&self) -> bool {
        self.records_left == 0 || self.bytes_left == 0 || self.rounds_left == 0
    }
}

/// Reads `partition` forward from `from` up to `until` (exclusive), keeping matches, until `want` matches, the
/// end, or the budget. Returns the matches and the number of records read.
async fn scan_forward(
    client: &mut Client,
    meta: &TopicMetadata,
    partition: i32,
    from: i64,
    until: i64,
    want: usize,
    filters: &Filters,
    budget: &mut Budget,
) -> ApiResult<(Vec<FetchedRecord>, usize)> {
    let mut position = from;
    let mut found = Vec::new();
    let mut scanned = 0;
    while position < until && found.len() < want && !budget.exhausted() {
        budget.rounds_left -= 1;
        let positions = BTreeMap::from([(partition, position)]);
        let fetched = client
            .fetch(meta, &positions, 0, limits::BROWSE_FETCH_PARTITION_BYTES)
            .await
            .map_err(ApiError::from_client)?;
        let Some(p) = fetched.into_iter().find(|p| p.partition == partition) else {
            break;
        };
        if p.error_code != 0 {
            return Err(ApiError::kafka(
                p.error_code,
                format!(
                    "fetching partition {partition} of '{}' at offset {position} from broker {}: {}",
                    meta.name,
                    p.leader,
                    annal_client::errors::error_name(p.error_code)
                ),
            ));
        }
        let Some(bytes) = p.records.filter(|b| !b.is_empty()) else {
            break;
        };
        budget.bytes_left = budget.bytes_left.saturating_sub(bytes.len());
        let decoded = decode_fetched(bytes, position).map_err(ApiError::from_client)?;
        let next = decoded
            .next_offset
            .or_else(|| decoded.records.last().map(|r| r.offset + 1));
        for r in decoded.records {
            if r.offset >= until || budget.records_left == 0 {
                break;
            }
            budget.records_left -= 1;
            scanned += 1;
            if filters.matches(&r) {
                found.push(r);
                if found.len() >= want {
                    break;
                }
            }
        }
        match next {
            Some(n) if n > position => position = n,
            _ => break,
        }
    }
    Ok((found, scanned))
}

/// `GET /v1/topics/{topic}/messages`.
pub async fn browse(
    ctx: Ctx,
    Path(topic): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let q = Query::parse(raw.as_deref())?;
    let limit = q
        .number::<usize>("limit", 1..=limits::BROWSE_LIMIT_MAX)?
        .unwrap_or(limits::BROWSE_LIMIT_DEFAULT);
    let max_scan = q
        .number::<usize>("max_scan", 1..=limits::BROWSE_MAX_SCAN_MAX)?
        .unwrap_or(limits::BROWSE_MAX_SCAN_DEFAULT);
    let chosen: Option<i32> = match q.get("partition") {
        None | Some("all") => None,
        Some(_) => q.number::<i32>("partition", 0..=limits::PARTITIONS_MAX)?,
    };
    let from = match q.get("from").unwrap_or("newest") {
        "newest" => From::Newest,
        "oldest" => From::Oldest,
        "offset" => From::Offset(
            q.number::<i64>("offset", 0..=i64::MAX)?
                .ok_or_else(|| ApiError::bad_request("from=offset needs offset="))?,
        ),
        "timestamp" => From::Timestamp(
            q.number::<i64>("timestamp_ms", 0..=i64::MAX)?
                .ok_or_else(|| ApiError::bad_request("from=timestamp needs timestamp_ms="))?,
        ),
        other => {
            return Err(ApiError::bad_request(format!(
                "from={other}: use newest, oldest, offset or timestamp"
            )))
        }
    };
    let filters = Filters {
        key: q.get("key").map(str::to_string),
        value: q.get("value").map(str::to_string),
        header: q.get("header").map(str::to_string),
    };
    let answer = within_timeout(&format!("browsing '{topic}'"), async {
        let mut client = ctx.client().await?;
        let meta = client.topic(&topic).await.map_err(ApiError::from_client)?;
        let partitions: Vec<i32> = match chosen {
            Some(p) if meta.partitions.iter().any(|m| m.index == p) => vec![p],
            Some(p) => {
                return Err(ApiError::not_found(
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    format!(
                        "topic '{topic}' has no partition {p} (it has {})",
                        meta.partitions.len()
                    ),
                ))
            }
            None => meta.partitions.iter().map(|m| m.index).collect(),
        };
        let earliest = client
            .list_offsets(&meta, &partitions, EARLIEST)
            .await
            .map_err(ApiError::from_client)?;
        let latest = client
            .list_offsets(&meta, &partitions, LATEST)
            .await
            .map_err(ApiError::from_client)?;
        let by_time = match from {
            From::Timestamp(ts) => Some(
                client
                    .list_offsets(&meta, &partitions, ts)
                    .await
                    .map_err(ApiError::from_client)?,
            ),
            _ => None,
        };
        let mut budget = Budget {
            records_left: max_scan,
            bytes_left: limits::BROWSE_MAX_BYTES,
            rounds_left: limits::BROWSE_FETCH_ROUNDS_MAX,
        };
        let mut messages = Vec::new();
        let mut scanned = 0;
        let mut unfinished = false;
        for &p in &partitions {
            let start = earliest.get(&p).map_or(0, |o| o.offset);
            let end = latest.get(&p).map_or(start, |o| o.offset);
            if let From::Newest = from {
                // Backwards in windows of at least `limit` records, newest window first.
                let window = limit.max(500) as i64;
                let mut hi = end;
                let mut found: Vec<FetchedRecord> = Vec::new();
                while hi > start && found.len() < limit && !budget.exhausted() {
                    let lo = (hi - window).max(start);
                    let (mut got, n) = scan_forward(
                        &mut client,
                        &meta,
                        p,
                        lo,
                        hi,
                        usize::MAX,
                        &filters,
                        &mut budget,
                    )
                    .await?;
                    scanned += n;
                    got.extend(found);
                    found = got;
                    hi = lo;
                }
                unfinished |= hi > start && found.len() < limit;
                let skip = found.len().saturating_sub(limit);
                messages.extend(found.into_iter().skip(skip).map(|r| message(p, r)));
            } else {
                let position = match from {
                    From::Oldest => start,
                    From::Offset(o) => o.clamp(start, end),
                    From::Timestamp(_) => by_time
                        .as_ref()
                        .and_then(|m| m.get(&p))
                        .map(|o| o.offset)
                        .filter(|o| *o >= 0)
                        .unwrap_or(end),
                    From::Newest => unreachable!("handled above"),
                };
                let want = limit.saturating_sub(messages.len());
                if want == 0 {
                    break;
                }
                let (got, n) = scan_forward(
                    &mut client,
                    &meta,
                    p,
                    position,
                    end,
                    want,
                    &filters,
                    &mut budget,
                )
                .await?;
                scanned += n;
                let reached = got.last().map_or(position, |r| r.offset + 1);
                unfinished |= got.len() < want && reached < end && budget.exhausted();
                messages.extend(got.into_iter().map(|r| message(p, r)));
            }
        }
        if let From::Newest = from {
            messages.sort_by(|a, b| {
                b.timestamp_ms
                    .cmp(&a.timestamp_ms)
                    .then(b.offset.cmp(&a.offset))
                    .then(a.partition.cmp(&b.partition))
            });
        } else {
            messages.sort_by(|a, b| {
                a.timestamp_ms
                    .cmp(&b.timestamp_ms)
                    .then(a.partition.cmp(&b.partition))
                    .then(a.offset.cmp(&b.offset))
            });
        }
        messages.truncate(limit);
        Ok(serde_json::json!({
            "messages": messages,
            "scanned": scanned,
            "truncated": unfinished || budget.exhausted() && messages.len() < limit,
        }))
    })
    .await?;
    Ok(Json(answer).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceBody {
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    headers: Vec<ProduceHeader>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceHeader {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

/// `POST /v1/topics/{topic}/messages`: one record, acks=all. Without a partition the key chooses it (murmur2,
/// as the Java client does); a record with neither goes to a random partition.
pub async fn produce(ctx: Ctx, Path(topic): Path<String>, body: Bytes) -> ApiResult<Response> {
    let body: ProduceBody = parse_body(&body)?;
    if body.headers.len() > 1000 {
        return Err(ApiError::bad_request("at most 1000 headers"));
    }
    let answer = within_timeout(&format!("producing to '{topic}'"), async {
        let mut client = ctx.client().await?;
        let meta = client.topic(&topic).await.map_err(ApiError::from_client)?;
        let count = meta.partitions.len() as u32;
        if count == 0 {
            return Err(ApiError::not_found(
                "UNKNOWN_TOPIC_OR_PARTITION",
                format!("topic '{topic}' has no partitions"),
            ));
        }
        let partition = match (body.partition, &body.key) {
            (Some(p), _) if meta.partitions.iter().any(|m| m.index == p) => p,
            (Some(p), _) => {
                return Err(ApiError::not_found(
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    format!("topic '{topic}' has no partition {p} (it has {count})"),
                ))
            }
            (None, Some(k)) => {
                annal_client::partitioner::partition_for_key(k.as_bytes(), count) as i32
            }
            (None, None) => {
                use rand::Rng;
                rand::thread_rng().gen_range(0..count) as i32
            }
        };
        let record = OutgoingRecord {
            key: body.key.map(|k| Bytes::from(k.into_bytes())),
            value: body.value.map(|v| Bytes::from(v.into_bytes())),
            headers: body
                .headers
                .into_iter()
                .map(|h| (h.key, h.value.map(|v| Bytes::from(v.into_bytes()))))
                .collect(),
            timestamp: crate::now_ms(),
        };
        let batch = encode_batch(&[record], kafka_protocol::records::Compression::None)
            .map_err(ApiError::from_client)?;
        let results = client
            .produce(&meta, vec![(partition, batch)], -1, 15_000)
            .await
            .map_err(ApiError::from_client)?;
        let r = results
            .into_iter()
            .find(|r| r.partition == partition)
            .ok_or_else(|| {
                ApiError::from_client(anyhow::anyhow!(
                    "the leader answered Produce without partition {partition}"
                ))
            })?;
        if r.error_code != 0 {
            return Err(ApiError::kafka(
                r.error_code,
                format!(
                    "producing to partition {partition} of '{topic}': {}",
                    annal_client::errors::describe(r.error_code, r.error_message.as_deref())
                ),
            ));
        }
        Ok(serde_json::json!({"partition": partition, "offset": r.base_offset}))
    })
    .await?;
    Ok(Json(answer).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_json_text_and_binary() {
        let j = render(br#"{"a":1}"#);
        assert_eq!((j.encoding, j.text.as_str()), ("json", "{\n  \"a\": 1\n}"));
        assert_eq!(render(b"plain 42").encoding, "utf8");
        assert_eq!(
            render(b"42").encoding,
            "utf8",
            "a bare number is text, not JSON"
        );
        let h = render(&[0xff, 0x00, 0x10]);
        assert_eq!((h.encoding, h.text.as_str()), ("hex", "ff0010"));
        let long = "é".repeat(limits::RENDER_TEXT_BYTES_MAX);
        let cut = render(long.as_bytes());
        assert!(cut.cut && cut.text.len() <= limits::RENDER_TEXT_BYTES_MAX);
    }
}
