//! `annal lookup TOPIC KEY [--latest] [--since TIME] [--until TIME] [--partition N|all] [--http HOST:PORT]`:
//! the records with a key, found by the broker's key index (topic config `key.index.enable=true`) through its
//! HTTP JSON API (`/v1/topics/{topic}/records?key=`), without scanning the topic.
//!
//! By default the broker searches the key's murmur2 partition (where Kafka's default partitioner puts it);
//! `--partition all` searches every partition (custom partitioners). A partition's leader or any in-sync follower
//! answers for it (below its own high watermark); with several `--http` addresses (comma-separated) each partition
//! is asked of the addresses in turn until one holds an in-sync replica of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::Deserialize;

use super::health::{get, HttpArgs};
use super::output::{escape, format_timestamp};

/// The most records `--limit` may ask for.
const LIMIT_MAX: usize = 100_000;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal lookup orders user-12345
  annal lookup orders user-12345 --latest
  annal lookup orders user-12345 --since 1h --partition all --format json

The topic needs its key index: annal topic create orders --config key.index.enable=true
(or kafka-configs.sh --alter --entity-type topics --entity-name orders --add-config key.index.enable=true).")]
pub struct LookupArgs {
    pub topic: String,
    /// The key, as UTF-8 text (with --hex: hex digits).
    pub key: String,
    /// The key is hex (binary keys).
    #[arg(long)]
    pub hex: bool,
    /// Only the newest record with the key.
    #[arg(long)]
    pub latest: bool,
    /// Records at or after TIME: RFC 3339 (2026-11-30T08:00:00Z), a date, milliseconds since the epoch, or an
    /// age (30s, 10m, 2h, 7d).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<i64>,
    /// Records at or before TIME (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<i64>,
    /// A partition number, or `all` (default: the key's murmur2 partition).
    #[arg(long, value_name = "N|all")]
    pub partition: Option<String>,
    /// At most this many records (pages are followed until then).
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Leave out records of aborted and open transactions.
    #[arg(long)]
    pub read_committed: bool,
    #[arg(long, value_enum, default_value_t = LookupFormat::Text)]
    pub format: LookupFormat,
    #[command(flatten)]
    pub http: HttpArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupFormat {
    /// `[partition:offset timestamp] key=K headers={h=v} VALUE`, one line per record.
    Text,
    /// One JSON object per line: partition, offset, timestamp, key, value, headers.
    Json,
}

/// `--since`/`--until`: a date-time, epoch milliseconds, or an age before now.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let units = [
        ('s', 1_000i64),
        ('m', 60_000),
        ('h', 3_600_000),
        ('d', 86_400_000),
    ];
    if let Some((unit, scale)) = units.iter().find(|(u, _)| s.ends_with(*u)) {
        if let Ok(n) = s.trim_end_matches(*unit).parse::<i64>() {
            let now = chrono::Utc::now().timestamp_millis();
            return Ok(now.saturating_sub(n.saturating_mul(*scale)));
        }
    }
    super::group::parse_datetime(s)
        .map_err(|e| format!("{e}, epoch milliseconds, or an age such as 10m"))
}

#[derive(Debug, Deserialize)]
struct Bytes {
    data: String,
    encoding: String,
}

impl Bytes {
    fn raw(&self) -> Vec<u8> {
        if self.encoding == "hex" {
            annal_client::hex::decode(&self.data).unwrap_or_else(|| self.data.clone().into_bytes())
        } else {
            self.data.clone().into_bytes()
        }
    }
}

#[derive(Debug, Deserialize)]
struct Header {
    key: String,
    value: Option<Bytes>,
}

#[derive(Debug, Deserialize)]
struct Record {
    offset: i64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<Header>,
}

#[derive(Debug, Deserialize)]
struct PartitionAnswer {
    partition: i32,
    records: Vec<Record>,
    next_offset: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct NotLeader {
    partition: i32,
    leader: i32,
}

#[derive(Debug, Deserialize)]
struct Answer {
    partitions: Vec<PartitionAnswer>,
    not_leader: Vec<NotLeader>,
}

fn encode_component(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn path(args: &LookupArgs, key: &[u8], partition: Option<&str>, from: i64, limit: usize) -> String {
    let mut p = format!(
        "/v1/topics/{}/records?key={}&limit={}&from={from}",
        encode_component(args.topic.as_bytes()),
        encode_component(key),
        limit.min(1000)
    );
    if let Some(partition) = partition {
        let _ = write!(p, "&partition={partition}");
    }
    if args.latest {
        p.push_str("&latest=true");
    }
    if let Some(since) = args.since {
        let _ = write!(p, "&since={since}");
    }
    if let Some(until) = args.until {
        let _ = write!(p, "&until={until}");
    }
    if args.read_committed {
        p.push_str("&isolation=read_committed");
    }
    p
}

/// Asks `addrs` in turn until one answers (a broker without an in-sync replica answers 421); the answer and who
/// gave it.
async fn ask(addrs: &[&str], path: &str) -> Result<(Answer, usize)> {
    let mut last = None;
    for (i, addr) in addrs.iter().enumerate() {
        match get(addr, path).await {
            Ok((200, body)) => {
                let answer: Answer = serde_json::from_slice(&body)
                    .with_context(|| format!("{addr}{path} is not a key lookup answer"))?;
                return Ok((answer, i));
            }
            Ok((status, body)) => {
                let message = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_string))
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
                if status != 421 {
                    bail!("{message}");
                }
                last = Some(anyhow!("{message}"));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("no HTTP address given; use --http HOST:PORT")))
        .context("cannot look the key up; is the HTTP listener (http.listen) of the partition's leader or an in-sync replica among --http?")
}

pub async fn run(args: LookupArgs) -> Result<()> {
    if args.limit == 0 || args.limit > LIMIT_MAX {
        bail!("--limit must be between 1 and {LIMIT_MAX}");
    }
    let key = if args.hex {
        annal_client::hex::decode(&args.key)
            .ok_or_else(|| anyhow!("--hex: '{}' is not hex digits", args.key))?
    } else {
        args.key.clone().into_bytes()
    };
    if let Some(p) = &args.partition {
        if p != "all" && p.parse::<u32>().is_err() {
            bail!("--partition takes a partition number or 'all', not '{p}'");
        }
    }
    let addrs: Vec<&str> = args
        .http
        .http
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    let mut found: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let mut total = 0usize;
    let (first, answered_by) = ask(
        &addrs,
        &path(&args, &key, args.partition.as_deref(), 0, args.limit),
    )
    .await?;
    // Partitions this broker holds no in-sync replica of (partition=all over several brokers): ask the other addresses for them.
    let mut pages: Vec<(PartitionAnswer, usize)> = first
        .partitions
        .into_iter()
        .map(|p| (p, answered_by))
        .collect();
    for NotLeader { partition, leader } in first.not_leader {
        let others: Vec<&str> = addrs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != answered_by)
            .map(|(_, a)| *a)
            .collect();
        let p = partition.to_string();
        match ask(&others, &path(&args, &key, Some(&p), 0, args.limit)).await {
            Ok((answer, i)) => {
                let by = addrs.iter().position(|a| *a == others[i]).unwrap_or(answered_by);
                pages.extend(answer.partitions.into_iter().map(|p| (p, by)));
            }
            Err(_) => eprintln!(
                "warning: partition {partition} is led by broker {leader}, and no in-sync replica's HTTP listener is among --http; its records are not shown"
            ),
        }
    }
    while let Some((page, by)) = pages.pop() {
        total += page.records.len();
        let partition = page.partition;
        found.entry(partition).or_default().extend(page.records);
        if let Some(next) = page
            .next_offset
            .filter(|_| total < args.limit && !args.latest)
        {
            let p = partition.to_string();
            let (answer, _) = ask(
                &addrs[by..=by],
                &path(&args, &key, Some(&p), next, args.limit - total),
            )
            .await?;
            pages.extend(answer.partitions.into_iter().map(|p| (p, by)));
        }
    }
    let mut out = String::new();
    let mut printed = 0usize;
    let mut records: Vec<(i32, Record)> = found
        .into_iter()
        .flat_map(|(p, rs)| rs.into_iter().map(move |r| (p, r)))
        .collect();
    if args.latest {
        // One per partition searched; the newest overall is the answer.
        records.sort_by_key(|(_, r)| r.timestamp);
        records = records.into_iter().next_back().into_iter().collect();
    }
    for (partition, r) in records.into_iter().take(args.limit) {
        printed += 1;
        match args.format {
            LookupFormat::Text => {
                let key = r.key.as_ref().map_or("null".into(), |k| escape(&k.raw()));
                let _ = write!(
                    out,
                    "[{partition}:{} {}] key={key}",
                    r.offset,
                    format_timestamp(r.timestamp)
                );
                if !r.headers.is_empty() {
                    let headers: Vec<String> = r
                        .headers
                        .iter()
                        .map(|h| {
                            format!(
                                "{}={}",
                                escape(h.key.as_bytes()),
                                h.value.as_ref().map_or("null".into(), |v| escape(&v.raw()))
                            )
                        })
                        .collect();
                    let _ = write!(out, " headers={{{}}}", headers.join(","));
                }
                let value = r.value.as_ref().map_or("null".into(), |v| escape(&v.raw()));
                let _ = writeln!(out, " {value}");
            }
            LookupFormat::Json => {
                let text = |b: &Option<Bytes>| {
                    b.as_ref()
                        .map(|b| String::from_utf8_lossy(&b.raw()).into_owned())
                };
                let headers: serde_json::Map<String, serde_json::Value> = r
                    .headers
                    .iter()
                    .map(|h| (h.key.clone(), text(&h.value).into()))
                    .collect();
                let line = serde_json::json!({
                    "topic": args.topic,
                    "partition": partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": text(&r.key),
                    "value": text(&r.value),
                    "headers": headers,
                });
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    if printed == 0 {
        eprintln!("no record with key '{}' in {}", escape(&key), args.topic);
    }
    Ok(())
}
