//! `annal produce TOPIC`: one record per stdin line, batched, partitioned like Kafka's default partitioner.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use kafka_protocol::records::Compression;

use super::progress::{thousands, Progress};
use super::{connect, parse_key_value, BrokerArgs};
use crate::partitioner::Partitioner;
use annal_client::errors::{self, describe};
use annal_client::{encode_batch, OutgoingRecord};
use annal_client::{Client, TopicMetadata};

/// Lines read ahead of the network; bounds memory when stdin is faster than the broker.
const LINE_QUEUE: usize = 4096;
/// A request carries at most this many records / uncompressed bytes, so batches stay well under Kafka's default
/// max.message.bytes (1 MiB) unless single records are bigger.
const MAX_REQUEST_RECORDS: usize = 2000;
const MAX_REQUEST_BYTES: usize = 512 * 1024;
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
const MAX_ATTEMPTS: u32 = 5;
/// How long to wait for more lines before sending what we have (Kafka's linger.ms): piped input fills whole
/// batches, typed input is still sent almost at once.
const LINGER: Duration = Duration::from_millis(10);

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  echo hello | annal produce orders
  printf 'user-1:signed up\\nuser-2:paid\\n' | annal produce orders --key-separator :
  annal produce orders -H source=import -H version=2 --compression zstd --acks all < records.txt
  annal produce orders -p 0                 # every line to partition 0

Keyed records go to partition (murmur2(key) & 0x7fffffff) % partitions, like every Kafka client's default
partitioner; records without a key go to one partition per batch (sticky), moving on for the next batch.")]
pub struct ProduceArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Topic to write to (it must exist: see `annal topic create`).
    pub topic: String,
    /// Split each line at the first SEP into key and value; without it records have no key.
    #[arg(long = "key-separator", value_name = "SEP")]
    pub key_separator: Option<String>,
    /// A header added to every record, KEY=VALUE. Repeat for several.
    #[arg(short = 'H', long = "header", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub headers: Vec<(String, String)>,
    /// Compression codec for the record batches.
    #[arg(long, value_enum, default_value_t = Codec::None)]
    pub compression: Codec,
    /// Acknowledgements to wait for: 0 (none), 1 (leader), all (all in-sync replicas).
    #[arg(long, default_value = "all", value_parser = parse_acks, value_name = "0|1|all")]
    pub acks: i16,
    /// Send every record to this partition instead of using the partitioner.
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<i32>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn compression(self) -> Compression {
        match self {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }
}

pub fn parse_acks(s: &str) -> Result<i16, String> {
    match s {
        "0" => Ok(0),
        "1" => Ok(1),
        "all" | "-1" => Ok(-1),
        _ => Err(format!("acks must be 0, 1 or all, not '{s}'")),
    }
}

/// Splits a line into key and value at the first separator.
pub fn split_line(
    line: &[u8],
    separator: Option<&[u8]>,
    line_no: u64,
) -> Result<(Option<Bytes>, Bytes)> {
    let Some(sep) = separator else {
        return Ok((None, Bytes::copy_from_slice(line)));
    };
    let at = line.windows(sep.len()).position(|w| w == sep).ok_or_else(|| {
        anyhow!(
            "line {line_no} has no key separator '{}'; with --key-separator every line must be KEY{}VALUE",
            String::from_utf8_lossy(sep),
            String::from_utf8_lossy(sep)
        )
    })?;
    Ok((
        Some(Bytes::copy_from_slice(&line[..at])),
        Bytes::copy_from_slice(&line[at + sep.len()..]),
    ))
}

pub async fn run(args: ProduceArgs) -> Result<()> {
    if matches!(&args.key_separator, Some(s) if s.is_empty()) {
        bail!("--key-separator must not be empty");
    }
    let mut client = connect(&args.broker.brokers).await?;
    let mut topic = client.topic(&args.topic).await?;
    if let Some(p) = args.partition {
        if !topic.partitions.iter().any(|m| m.index == p) {
            bail!(
                "topic '{}' has no partition {p}; it has {} (0..{})",
                args.topic,
                topic.partitions.len(),
                topic.partitions.len().saturating_sub(1)
            );
        }
    }
    let partition_count =
        u32::try_from(topic.partitions.len()).context("topic has too many partitions")?;
    let mut partitioner = Partitioner::new(partition_count, rand::random::<u32>());
    let headers: Vec<(String, Option<Bytes>)> = args
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Some(Bytes::copy_from_slice(v.as_bytes()))))
        .collect();
    let separator = args.key_separator.as_deref().map(str::as_bytes);

    // Stdin is read on its own thread so that interactive input is sent line by line while piped input is
    // batched: each request takes whatever lines are already waiting.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(LINE_QUEUE);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                    }
                    if tx.blocking_send(Ok(line)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });

    let mut line_no: u64 = 0;
    // Per partition: records sent, and the first and last offsets the broker assigned (unknown with acks=0).
    let mut per_partition: BTreeMap<i32, (u64, Option<(i64, i64)>)> = BTreeMap::new();
    let mut total: u64 = 0;
    // Piped input (a file, another command) shows how far it got; typed input would be overwritten by it.
    let mut progress = if std::io::stdin().is_terminal() {
        Progress::off()
    } else {
        Progress::for_stderr()
    };
    let started = Instant::now();
    while let Some(first) = rx.recv().await {
        let mut lines = vec![first.context("cannot read stdin")?];
        let mut bytes = lines[0].len();
        let deadline = tokio::time::Instant::now() + LINGER;
        while lines.len() < MAX_REQUEST_RECORDS && bytes < MAX_REQUEST_BYTES {
            let line = match rx.try_recv() {
                Ok(line) => line,
                Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(line)) => line,
                    Ok(None) | Err(_) => break,
                },
            };
            let line = line.context("cannot read stdin")?;
            bytes += line.len();
            lines.push(line);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut grouped: BTreeMap<i32, Vec<OutgoingRecord>> = BTreeMap::new();
        for line in lines {
            line_no += 1;
            let (key, value) = split_line(&line, separator, line_no)?;
            let partition = match args.partition {
                Some(p) => p,
                None => partitioner.partition(key.as_deref()) as i32,
            };
            grouped.entry(partition).or_default().push(OutgoingRecord {
                key,
                value: Some(value),
                headers: headers.clone(),
                timestamp: now,
            });
        }
        partitioner.next_batch();
        let counts: BTreeMap<i32, u64> =
            grouped.iter().map(|(p, r)| (*p, r.len() as u64)).collect();
        let base_offsets = send_with_retries(
            &mut client,
            &mut topic,
            grouped,
            args.compression.compression(),
            args.acks,
        )
        .await?;
        for (p, n) in counts {
            let entry = per_partition.entry(p).or_insert((0, None));
            entry.0 += n;
            if let Some(&base) = base_offsets.get(&p).filter(|&&b| b >= 0) {
                let last = base + n as i64 - 1;
                entry.1 = Some(entry.1.map_or((base, last), |(first, _)| (first, last)));
            }
            total += n;
        }
        progress.update(|| {
            let rate = total as f64 / started.elapsed().as_secs_f64().max(0.001);
            format!(
                "produced {} records to '{}' ({}/s)",
                thousands(total),
                args.topic,
                thousands(rate as u64)
            )
        });
    }
    progress.clear();

    let breakdown: Vec<String> = per_partition
        .iter()
        .map(|(p, (n, offsets))| match offsets {
            Some((first, last)) => format!("partition {p}: {n} at offsets {first}..={last}"),
            None => format!("partition {p}: {n}"),
        })
        .collect();
    let verb = if args.acks == 0 {
        "sent (acks=0, not confirmed)"
    } else {
        "produced"
    };
    eprintln!(
        "{verb} {total} record{} to topic '{}'{}",
        if total == 1 { "" } else { "s" },
        args.topic,
        if breakdown.is_empty() {
            String::new()
        } else {
            format!(" ({})", breakdown.join(", "))
        }
    );
    Ok(())
}

/// Sends one batch per partition; partitions that fail with a retriable error (leader moved, not yet elected)
/// are retried after refreshing metadata. Anything else is reported with what to do about it.
/// Returns each partition's base offset (-1 with acks=0).
async fn send_with_retries(
    client: &mut Client,
    topic: &mut TopicMetadata,
    grouped: BTreeMap<i32, Vec<OutgoingRecord>>,
    compression: Compression,
    acks: i16,
) -> Result<BTreeMap<i32, i64>> {
    let mut base_offsets = BTreeMap::new();
    let mut pending: BTreeMap<i32, Bytes> = BTreeMap::new();
    for (p, records) in &grouped {
        pending.insert(*p, encode_batch(records, compression)?);
    }
    for attempt in 1..=MAX_ATTEMPTS {
        let batches: Vec<(i32, Bytes)> = pending.iter().map(|(p, b)| (*p, b.clone())).collect();
        let results = client
            .produce(topic, batches, acks, PRODUCE_TIMEOUT_MS)
            .await?;
        let mut retry = false;
        for r in results {
            if r.error_code == 0 {
                pending.remove(&r.partition);
                base_offsets.insert(r.partition, r.base_offset);
                continue;
            }
            if errors::is_retriable(r.error_code) && attempt < MAX_ATTEMPTS {
                retry = true;
                continue;
            }
            let what = describe(r.error_code, r.error_message.as_deref());
            let hint = match r.error_code {
                10 => format!(
                    "; a batch is larger than the topic's max.message.bytes: raise it with \
                     `annal topic alter {} -c max.message.bytes=N`",
                    topic.name
                ),
                errors::UNKNOWN_TOPIC_OR_PARTITION | errors::UNKNOWN_TOPIC_ID => {
                    format!(
                        "; was topic '{}' deleted? create it with `annal topic create {}`",
                        topic.name, topic.name
                    )
                }
                // NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND
                19 | 20 => format!(
                    "; fewer replicas are in sync than the topic's min.insync.replicas: see which broker is down \
                     with `annal cluster health`, or produce with --acks 1 (see `annal topic describe {}`)",
                    topic.name
                ),
                code if errors::is_retriable(code) => format!(
                    " (still, after {MAX_ATTEMPTS} attempts); check the partition's leader with \
                     `annal cluster health`"
                ),
                _ => String::new(),
            };
            let leader = topic
                .partitions
                .iter()
                .find(|m| m.index == r.partition)
                .map_or(-1, |m| m.leader);
            bail!(
                "broker {leader} rejected records for partition {} of topic '{}': {what}{hint}",
                r.partition,
                topic.name
            );
        }
        if pending.is_empty() {
            return Ok(base_offsets);
        }
        if !retry {
            bail!(
                "the broker did not answer for partitions {:?} of topic '{}'",
                pending.keys().collect::<Vec<_>>(),
                topic.name
            );
        }
        tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
        *topic = client.topic(&topic.name).await?;
    }
    bail!(
        "gave up producing to topic '{}' after {MAX_ATTEMPTS} attempts",
        topic.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_values() {
        assert_eq!(parse_acks("0"), Ok(0));
        assert_eq!(parse_acks("1"), Ok(1));
        assert_eq!(parse_acks("all"), Ok(-1));
        assert_eq!(parse_acks("-1"), Ok(-1));
        assert!(parse_acks("2").is_err());
    }

    #[test]
    fn lines_split_at_first_separator() {
        let (k, v) = split_line(b"user-1::a::b", Some(b"::"), 1).unwrap();
        assert_eq!(k.as_deref(), Some(&b"user-1"[..]));
        assert_eq!(&v[..], b"a::b");
        let (k, v) = split_line(b"no key here", None, 1).unwrap();
        assert_eq!(k, None);
        assert_eq!(&v[..], b"no key here");
        let (k, v) = split_line(b":v", Some(b":"), 1).unwrap();
        assert_eq!(k.as_deref(), Some(&b""[..]));
        assert_eq!(&v[..], b"v");
        let err = split_line(b"missing", Some(b":"), 7)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 7"), "{err}");
    }
}
