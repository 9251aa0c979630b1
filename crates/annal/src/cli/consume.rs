//! `annal consume TOPIC`: read records from one or all partitions, stopping at the end offsets seen at start
//! unless `--follow`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::output::{format_record, Format};
use super::{connect, BrokerArgs};
use annal_client::decode_fetched;
use annal_client::errors::{self, error_name};
use annal_client::{Client, TopicMetadata, EARLIEST, LATEST};

const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
/// A single batch larger than this is refused rather than fetched (Kafka's message.max.bytes is 1 MiB by default).
const PARTITION_MAX_BYTES_LIMIT: i32 = 64 * 1024 * 1024;
/// Without --follow, fetch rounds in a row that may return nothing before we give up on reaching the end offsets
/// seen at start (each round waits up to 500 ms).
const MAX_IDLE_ROUNDS: u32 = 20;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal consume orders --from-beginning            # everything there is now, then exit
  annal consume orders --follow                    # new records as they arrive (Ctrl-C to stop)
  annal consume orders -p 2 --offset 100 -n 10     # ten records of partition 2 from offset 100
  annal consume orders --timestamp 1700000000000   # from the first record at/after this time (ms since epoch)
  annal consume orders --from-beginning --format json | jq .value

Without --from-beginning, --offset or --timestamp, reading starts at the end of each partition (as
kafka-console-consumer does): use it with --follow. Without --follow, reading stops at the end offsets seen
when the command started.")]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Topic to read.
    pub topic: String,
    /// Read only this partition (default: all).
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<i32>,
    /// Start at the earliest offset still in the log.
    #[arg(long, group = "start")]
    pub from_beginning: bool,
    /// Start at this offset (in every partition read).
    #[arg(long, group = "start", value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub offset: Option<i64>,
    /// Start at the first record whose timestamp is at or after MS (milliseconds since the Unix epoch).
    #[arg(long, group = "start", value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
    pub timestamp: Option<i64>,
    /// Stop after COUNT records.
    #[arg(short = 'n', long = "count", value_name = "COUNT")]
    pub count: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub async fn run(args: ConsumeArgs) -> Result<()> {
    match consume(&args).await {
        Err(e) if super::is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

async fn consume(args: &ConsumeArgs) -> Result<()> {
    let mut client = connect(&args.broker.brokers).await?;
    let mut topic = client.topic(&args.topic).await?;
    let partitions: Vec<i32> = match args.partition {
        Some(p) => {
            if !topic.partitions.iter().any(|m| m.index == p) {
                bail!(
                    "topic '{}' has no partition {p}; it has {} (0..{})",
                    args.topic,
                    topic.partitions.len(),
                    topic.partitions.len().saturating_sub(1)
                );
            }
            vec![p]
        }
        None => topic.partitions.iter().map(|p| p.index).collect(),
    };
    let (mut positions, latest) = start_positions(&mut client, &topic, &partitions, args).await?;
    // Without --follow, stop at the end offsets observed now.
    let stop_at: Option<BTreeMap<i32, i64>> = (!args.follow).then(|| latest.clone());
    if let Some(stop) = &stop_at {
        positions.retain(|p, pos| *pos < stop[p]);
    }

    let stdout = std::io::stdout();
    let mut printed: u64 = 0;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut max_bytes = PARTITION_MAX_BYTES;
    let limit = args.count.unwrap_or(u64::MAX);
    let mut idle_rounds = 0;
    while !positions.is_empty() && printed < limit {
        let before = positions.clone();
        let max_wait = if args.follow { 1000 } else { 500 };
        let fetched = client
            .fetch(&topic, &positions, max_wait, max_bytes)
            .await?;
        let mut refresh_metadata = false;
        for part in fetched {
            let Some(&position) = positions.get(&part.partition) else {
                continue;
            };
            match part.error_code {
                0 => {}
                errors::OFFSET_OUT_OF_RANGE => {
                    let reset =
                        reset_position(&mut client, &topic, part.partition, position).await?;
                    positions.insert(part.partition, reset);
                    continue;
                }
                // Includes UNKNOWN_TOPIC_OR_PARTITION: the metadata refresh below tells a deleted topic (error)
                // from one the broker is still loading.
                code if errors::is_retriable(code) => {
                    refresh_metadata = true;
                    continue;
                }
                code => bail!(
                    "cannot fetch partition {} of topic '{}' at offset {position}: {}",
                    part.partition,
                    topic.name,
                    error_name(code)
                ),
            }
            let Some(data) = part.records.filter(|r| !r.is_empty()) else {
                continue;
            };
            let decoded = decode_fetched(data, position).with_context(|| {
                format!(
                    "partition {} of topic '{}' near offset {position}",
                    part.partition, topic.name
                )
            })?;
            let stop = stop_at.as_ref().map(|s| s[&part.partition]);
            // Continue after the last complete batch (records missing from its end, e.g. compacted away, do not
            // make us fetch it again), unless we stop inside it.
            let mut next = decoded.next_offset.unwrap_or(position).max(position);
            for record in &decoded.records {
                if stop.is_some_and(|s| record.offset >= s) || printed >= limit {
                    next = record.offset;
                    break;
                }
                format_record(args.format, &topic.name, part.partition, record, &mut buf);
                printed += 1;
            }
            if decoded.next_offset.is_none() && decoded.truncated {
                // Not even one whole batch fit: ask for more next time (bounded).
                if max_bytes >= PARTITION_MAX_BYTES_LIMIT {
                    bail!(
                        "a record batch in partition {} of topic '{}' at offset {position} is larger than {} MiB",
                        part.partition,
                        topic.name,
                        PARTITION_MAX_BYTES_LIMIT / (1024 * 1024)
                    );
                }
                max_bytes = max_bytes.saturating_mul(4).min(PARTITION_MAX_BYTES_LIMIT);
            }
            positions.insert(part.partition, next);
        }
        if !buf.is_empty() {
            let mut out = stdout.lock();
            out.write_all(&buf)?;
            out.flush()?;
            buf.clear();
        }
        if let Some(stop) = &stop_at {
            positions.retain(|p, pos| *pos < stop[p]);
        }
        if refresh_metadata {
            tokio::time::sleep(Duration::from_millis(200)).await;
            topic = client.topic(&topic.name).await?;
        }
        if let Some(stop) = &stop_at {
            idle_rounds = if positions == before {
                idle_rounds + 1
            } else {
                0
            };
            if idle_rounds >= MAX_IDLE_ROUNDS {
                let (p, pos) = positions
                    .iter()
                    .next()
                    .expect("loop runs while positions remain");
                bail!(
                    "partition {p} of topic '{}' returned no records at offset {pos} although its end offset was {} \
                     when we started; is the broker healthy? (use --follow to keep waiting)",
                    topic.name,
                    stop[p]
                );
            }
        }
    }
    if printed == 0
        && !args.follow
        && !args.from_beginning
        && args.offset.is_none()
        && args.timestamp.is_none()
    {
        eprintln!(
            "no records: reading started at the end of the topic; use --from-beginning to read what is there, \
             or --follow to wait for new records"
        );
    }
    Ok(())
}

/// Where reading starts in each partition, and each partition's end offset now.
async fn start_positions(
    client: &mut Client,
    topic: &TopicMetadata,
    partitions: &[i32],
    args: &ConsumeArgs,
) -> Result<(BTreeMap<i32, i64>, BTreeMap<i32, i64>)> {
    let earliest = client.list_offsets(topic, partitions, EARLIEST).await?;
    let latest: BTreeMap<i32, i64> = client
        .list_offsets(topic, partitions, LATEST)
        .await?
        .into_iter()
        .map(|(p, o)| (p, o.offset))
        .collect();
    let mut positions = BTreeMap::new();
    for &p in partitions {
        let (start, end) = (earliest[&p].offset, latest[&p]);
        let position = if args.from_beginning {
            start
        } else if let Some(n) = args.offset {
            if n < start {
                eprintln!("note: partition {p} starts at offset {start} (older records were deleted); reading from there");
            } else if n > end {
                eprintln!("note: partition {p} ends at offset {end}; offset {n} does not exist yet, reading from {end}");
            }
            n.clamp(start, end)
        } else {
            // The default (as in kafka-console-consumer); --timestamp is resolved below, in one request.
            end
        };
        positions.insert(p, position);
    }
    if let Some(ts) = args.timestamp {
        for (p, listed) in client.list_offsets(topic, partitions, ts).await? {
            // -1: no record at or after the timestamp, so start at the end.
            positions.insert(
                p,
                if listed.offset < 0 {
                    latest[&p]
                } else {
                    listed.offset
                },
            );
        }
    }
    Ok((positions, latest))
}

/// After OFFSET_OUT_OF_RANGE (retention deleted the records, or the log was truncated): continue from the
/// earliest offset if we were behind it, else from the end.
async fn reset_position(
    client: &mut Client,
    topic: &TopicMetadata,
    partition: i32,
    position: i64,
) -> Result<i64> {
    let start = client.list_offsets(topic, &[partition], EARLIEST).await?[&partition].offset;
    let end = client.list_offsets(topic, &[partition], LATEST).await?[&partition].offset;
    let reset = if position < start { start } else { end };
    eprintln!(
        "note: offset {position} is out of range for partition {partition} of '{}' (log has {start}..{end}); \
         continuing at {reset}",
        topic.name
    );
    Ok(reset)
}
