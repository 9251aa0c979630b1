//! `annal consume TOPIC`: read records from one or all partitions, or from the partitions a consumer group
//! assigns (`-G`), from a start position to an end: the end offsets seen at start unless `--follow`, or an end
//! offset or time. Records print in a built-in format or a kcat/rpk-style template.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use super::output::{format_record, Format};
use super::progress::{thousands, Progress};
use super::template::{Template, DIRECTIVES};
use super::time::parse_time;
use super::{connect, BrokerArgs};
use annal_client::decode_fetched;
use annal_client::errors::{self, error_name};
use annal_client::{
    Client, GroupConsumer, GroupConsumerOptions, ListedOffset, Membership, TopicMetadata, EARLIEST,
    LATEST,
};

const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
/// A single batch larger than this is refused rather than fetched (Kafka's message.max.bytes is 1 MiB by default).
const PARTITION_MAX_BYTES_LIMIT: i32 = 64 * 1024 * 1024;
/// Without --follow, fetch rounds in a row that may return nothing before we give up on reaching the end offsets
/// seen at start (each round waits up to 500 ms).
const MAX_IDLE_ROUNDS: u32 = 20;
/// With -G, consumed positions are committed at most this often (and once more at the end), like a Kafka
/// consumer's auto.commit.interval.ms but only after the records were written to stdout.
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal consume orders --from-beginning            # everything there is now, then exit
  annal consume orders --follow                    # new records as they arrive (Ctrl-C to stop)
  annal consume orders -o -10                      # the last 10 records of each partition
  annal consume orders -p 2 -o 100 -n 10           # ten records of partition 2 from offset 100
  annal consume orders --timestamp -1h             # from the first record of the last hour
  annal consume orders -o @2026-11-30T08:00:00Z --end-time 2026-11-30T09:00:00Z   # one hour of records
  annal consume orders --from-beginning --end-offset 500                      # offsets below 500 only
  annal consume orders -G billing --follow         # as a member of consumer group 'billing', committing
  annal consume orders --from-beginning --format json | jq .value
  annal consume orders --from-beginning --format '%p:%o %k=%v\\n'

Without --from-beginning, --offset or --timestamp, reading starts at the end of each partition (as
kafka-console-consumer does): use it with --follow. Without --follow, reading stops at the end offsets seen
when the command started (or earlier, at --end-offset / --end-time).

Times (--timestamp, --end-time, -o @TIME) are milliseconds since the epoch, RFC 3339 (2026-11-30T08:00:00Z,
2026-11-30T10:00:00+02:00, 2026-11-30) or relative to now (-1h, -30m, -2d, -1h30m).

With -G GROUP the command joins the group (Kafka's classic protocol, range assignor), reads the partitions
the group assigns it, starting at the group's committed offsets (where a partition has none: at the start
options above), and commits what it has printed every second and when it ends. Run several to share the
partitions; Ctrl-C commits and leaves the group.")]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Topic to read.
    pub topic: String,
    /// Read only this partition (default: all).
    #[arg(short = 'p', long, value_name = "PARTITION", conflicts_with = "group")]
    pub partition: Option<i32>,
    /// Start at the earliest offset still in the log.
    #[arg(long, group = "start")]
    pub from_beginning: bool,
    /// Where to start: N (that offset), -N (the last N records of each partition), beginning, end, or @TIME
    /// (the first record at or after TIME).
    #[arg(short = 'o', long, group = "start", value_name = "OFFSET", allow_hyphen_values = true,
          value_parser = parse_start_offset)]
    pub offset: Option<StartOffset>,
    /// Start at the first record whose timestamp is at or after TIME (ms since the epoch, RFC 3339, or -1h).
    #[arg(long, group = "start", value_name = "TIME", allow_hyphen_values = true, value_parser = parse_time)]
    pub timestamp: Option<i64>,
    /// Stop before this offset in every partition read (it is not printed).
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    pub end_offset: Option<i64>,
    /// Stop at the first record whose timestamp is at or after TIME (it is not printed), in each partition.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, value_parser = parse_time)]
    pub end_time: Option<i64>,
    /// Stop after COUNT records.
    #[arg(short = 'n', long = "count", value_name = "COUNT")]
    pub count: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Output: text (readable, one line per record), value (raw values), json (one object per line), or a
    /// template such as '%k=%v\n'.
    #[arg(long, default_value = "text", value_name = "FORMAT", value_parser = parse_record_format,
          long_help = format!("Output: text (readable, one line per record), value (raw values), json (one \
          object per line), or a template such as '%p:%o %k=%v\\n' (nothing is added: end it with \\n). \
          Directives: {DIRECTIVES}. Keys, values and headers are printed as raw bytes; null ones as nothing."))]
    pub format: RecordFormat,
    /// Consume as a member of this consumer group, starting at its committed offsets and committing.
    #[arg(short = 'G', long = "group", value_name = "GROUP")]
    pub group: Option<String>,
}

/// Where `-o` starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    Beginning,
    End,
    /// This offset (clamped to the log).
    At(i64),
    /// The last N records of each partition.
    Last(i64),
    /// The first record at or after this time, ms since the epoch.
    Time(i64),
}

pub fn parse_start_offset(s: &str) -> Result<StartOffset, String> {
    let help = "use N (an offset), -N (the last N records), beginning, end or @TIME (e.g. @-1h)";
    match s.to_ascii_lowercase().as_str() {
        "beginning" | "start" | "oldest" | "earliest" => return Ok(StartOffset::Beginning),
        "end" | "newest" | "latest" => return Ok(StartOffset::End),
        _ => {}
    }
    if let Some(time) = s.strip_prefix('@') {
        return parse_time(time).map(StartOffset::Time);
    }
    if let Some(n) = s.strip_prefix('-') {
        return match n.parse::<i64>() {
            Ok(n) if n > 0 => Ok(StartOffset::Last(n)),
            _ => Err(format!("'{s}' is not an offset; {help}")),
        };
    }
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(StartOffset::At(n)),
        _ => Err(format!("'{s}' is not an offset; {help}")),
    }
}

/// How records are printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordFormat {
    Builtin(Format),
    Template(Template),
}

pub fn parse_record_format(s: &str) -> Result<RecordFormat, String> {
    match s {
        "text" => Ok(RecordFormat::Builtin(Format::Text)),
        "value" => Ok(RecordFormat::Builtin(Format::Value)),
        "json" => Ok(RecordFormat::Builtin(Format::Json)),
        s if s.contains('%') || s.contains('\\') => Template::parse(s).map(RecordFormat::Template),
        _ => Err(format!(
            "unknown format '{s}'; use text, value, json, or a template such as '%k=%v\\n' ({DIRECTIVES})"
        )),
    }
}

impl RecordFormat {
    fn render(
        &self,
        topic: &str,
        partition: i32,
        r: &annal_client::FetchedRecord,
        out: &mut Vec<u8>,
    ) {
        match self {
            RecordFormat::Builtin(f) => format_record(*f, topic, partition, r, out),
            RecordFormat::Template(t) => t.render(topic, partition, r, out),
        }
    }
}

pub async fn run(args: ConsumeArgs) -> Result<()> {
    match consume(&args).await {
        Err(e) if super::is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

/// The reading state of the partitions being consumed.
#[derive(Debug, Default)]
struct Reading {
    /// Next offset to read per partition, finished partitions included (their positions are committed too).
    positions: BTreeMap<i32, i64>,
    /// Exclusive end per partition; a partition without one is read until interrupted (--follow).
    stops: BTreeMap<i32, i64>,
    /// Partitions ended by --end-time: a record at or after it was seen.
    ended: BTreeSet<i32>,
}

impl Reading {
    /// The partitions still to fetch, at their positions.
    fn active(&self) -> BTreeMap<i32, i64> {
        self.positions
            .iter()
            .filter(|(p, pos)| {
                !self.ended.contains(p) && self.stops.get(p).is_none_or(|stop| **pos < *stop)
            })
            .map(|(&p, &pos)| (p, pos))
            .collect()
    }

    /// Records left before every active partition reaches its end; None when some partition has no end.
    fn remaining(&self) -> Option<u64> {
        let mut total: u64 = 0;
        for (p, pos) in self.active() {
            let stop = self.stops.get(&p)?;
            total = total.saturating_add(u64::try_from(stop - pos).unwrap_or(0));
        }
        Some(total)
    }
}

/// What a consume run has printed, for progress and the final summary.
struct Tally {
    printed: u64,
    started: Instant,
}

async fn consume(args: &ConsumeArgs) -> Result<()> {
    let mut client = connect(&args.broker.brokers).await?;
    let mut topic = client.topic(&args.topic).await?;
    let mut member = match &args.group {
        Some(group) => Some(
            GroupConsumer::join(
                &mut client,
                group,
                std::slice::from_ref(&topic.name),
                GroupConsumerOptions::default(),
            )
            .await?,
        ),
        None => None,
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    if member.is_some() {
        // Ctrl-C ends the loop between fetch rounds so the group member commits and leaves.
        let flag = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::SeqCst);
            }
        });
    }
    let mut committed = BTreeMap::new();
    let mut reading = match &member {
        Some(m) => {
            committed = committed_offsets(&mut client, m.group(), &topic.name).await?;
            let partitions = assigned(m, &topic.name);
            plan(&mut client, &topic, &partitions, args, &committed).await?
        }
        None => {
            let partitions = requested_partitions(&topic, args.partition)?;
            plan(&mut client, &topic, &partitions, args, &BTreeMap::new()).await?
        }
    };

    let stdout = std::io::stdout();
    let mut tally = Tally {
        printed: 0,
        started: Instant::now(),
    };
    let mut progress = Progress::for_stderr();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut max_bytes = PARTITION_MAX_BYTES;
    let limit = args.count.unwrap_or(u64::MAX);
    let mut idle_rounds = 0;
    let mut last_commit = Instant::now();
    while tally.printed < limit && !interrupted.load(Ordering::SeqCst) {
        let active = reading.active();
        if active.is_empty() {
            // A group member without partitions that follows waits for a rebalance to give it some.
            let waiting = args.follow
                && member
                    .as_ref()
                    .is_some_and(|m| assigned(m, &topic.name).is_empty());
            if !waiting {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        } else {
            let max_wait = if args.follow { 1000 } else { 500 };
            let fetched = client.fetch(&topic, &active, max_wait, max_bytes).await?;
            let mut refresh_metadata = false;
            for part in fetched {
                let Some(&position) = active.get(&part.partition) else {
                    continue;
                };
                match part.error_code {
                    0 => {}
                    errors::OFFSET_OUT_OF_RANGE => {
                        let reset = reset_position(&mut client, &topic, part.partition, position).await?;
                        reading.positions.insert(part.partition, reset);
                        continue;
                    }
                    // Includes UNKNOWN_TOPIC_OR_PARTITION: the metadata refresh below tells a deleted topic
                    // (error) from one the broker is still loading.
                    code if errors::is_retriable(code) => {
                        refresh_metadata = true;
                        continue;
                    }
                    code => bail!(
                        "cannot fetch partition {} of topic '{}' from broker {} at offset {position}: {}; {}",
                        part.partition,
                        topic.name,
                        part.leader,
                        error_name(code),
                        fetch_error_hint(code, &topic.name)
                    ),
                }
                let Some(data) = part.records.filter(|r| !r.is_empty()) else {
                    continue;
                };
                let decoded = decode_fetched(data, position).with_context(|| {
                    format!(
                        "partition {} of topic '{}' (from broker {}) near offset {position}",
                        part.partition, topic.name, part.leader
                    )
                })?;
                let stop = reading.stops.get(&part.partition).copied();
                // Continue after the last complete batch (records missing from its end, e.g. compacted away, do
                // not make us fetch it again), unless we stop inside it.
                let mut next = decoded.next_offset.unwrap_or(position).max(position);
                for record in &decoded.records {
                    if stop.is_some_and(|s| record.offset >= s) || tally.printed >= limit {
                        next = record.offset;
                        break;
                    }
                    if args.end_time.is_some_and(|end| record.timestamp >= end) {
                        next = record.offset;
                        reading.ended.insert(part.partition);
                        break;
                    }
                    args.format
                        .render(&topic.name, part.partition, record, &mut buf);
                    tally.printed += 1;
                }
                if decoded.next_offset.is_none() && decoded.truncated {
                    // Not even one whole batch fit: ask for more next time (bounded).
                    if max_bytes >= PARTITION_MAX_BYTES_LIMIT {
                        bail!(
                            "a record batch in partition {} of topic '{}' at offset {position} is larger than {} \
                             MiB; this client does not read batches that large",
                            part.partition,
                            topic.name,
                            PARTITION_MAX_BYTES_LIMIT / (1024 * 1024)
                        );
                    }
                    max_bytes = max_bytes.saturating_mul(4).min(PARTITION_MAX_BYTES_LIMIT);
                }
                reading.positions.insert(part.partition, next);
            }
            if !buf.is_empty() {
                progress.clear();
                let mut out = stdout.lock();
                out.write_all(&buf)?;
                out.flush()?;
                buf.clear();
            }
            if refresh_metadata {
                tokio::time::sleep(Duration::from_millis(200)).await;
                topic = client.topic(&topic.name).await?;
            }
            // Without an end for every partition, an idle round is just a quiet topic.
            let all_bounded = active.keys().all(|p| reading.stops.contains_key(p));
            idle_rounds = if all_bounded && reading.active() == active {
                idle_rounds + 1
            } else {
                0
            };
            if idle_rounds >= MAX_IDLE_ROUNDS {
                let (p, pos) = active
                    .iter()
                    .next()
                    .expect("the round fetched some partition");
                bail!(
                    "partition {p} of topic '{}' returned no records at offset {pos} although its end offset was \
                     {} when we started; is its leader (broker {}) healthy? (use --follow to keep waiting)",
                    topic.name,
                    reading.stops.get(p).copied().unwrap_or(-1),
                    topic
                        .partitions
                        .iter()
                        .find(|m| m.index == *p)
                        .map_or(-1, |m| m.leader)
                );
            }
        }
        if let Some(m) = member.as_mut() {
            let mut rejoin = m.heartbeat_if_due(&mut client).await? == Membership::RejoinNeeded;
            if rejoin || last_commit.elapsed() >= COMMIT_INTERVAL {
                rejoin |= commit(m, &mut client, &topic.name, &reading, &mut committed).await?
                    == Membership::RejoinNeeded;
                last_commit = Instant::now();
            }
            if rejoin {
                m.rejoin(&mut client).await?;
                committed = committed_offsets(&mut client, m.group(), &topic.name).await?;
                let partitions = assigned(m, &topic.name);
                reading = plan(&mut client, &topic, &partitions, args, &committed).await?;
                idle_rounds = 0;
            }
        }
        progress.update(|| progress_line(&tally, &reading));
    }
    if let Some(mut m) = member {
        commit(&mut m, &mut client, &topic.name, &reading, &mut committed).await?;
        let group = m.group().to_string();
        if let Err(e) = m.leave(&mut client).await {
            eprintln!("note: {e:#}");
        }
        progress.done(&format!(
            "consumed {} records of '{}' as group '{group}'; committed {}",
            thousands(tally.printed),
            topic.name,
            describe_offsets(&committed)
        ));
    } else {
        progress.done(&format!(
            "consumed {} records of '{}' in {:.1}s",
            thousands(tally.printed),
            topic.name,
            tally.started.elapsed().as_secs_f64()
        ));
    }
    if tally.printed == 0
        && !args.follow
        && args.group.is_none()
        && !args.from_beginning
        && args.offset.is_none()
        && args.timestamp.is_none()
    {
        eprintln!(
            "no records: reading started at the end of the topic; use --from-beginning to read what is there, \
             -o -10 for the last ten of each partition, or --follow to wait for new records"
        );
    }
    Ok(())
}

fn progress_line(tally: &Tally, reading: &Reading) -> String {
    let secs = tally.started.elapsed().as_secs_f64().max(0.001);
    let rate = (tally.printed as f64 / secs) as u64;
    let mut line = format!(
        "consumed {} records ({}/s)",
        thousands(tally.printed),
        thousands(rate)
    );
    match reading.remaining() {
        Some(left) => line.push_str(&format!(", {} to go", thousands(left))),
        None => line.push_str(", following"),
    }
    line
}

/// `0=5, 1=7` for a summary line.
fn describe_offsets(offsets: &BTreeMap<i32, i64>) -> String {
    if offsets.is_empty() {
        return "nothing".into();
    }
    let parts: Vec<String> = offsets
        .iter()
        .map(|(p, o)| format!("partition {p} at {o}"))
        .collect();
    parts.join(", ")
}

fn fetch_error_hint(code: i16, topic: &str) -> String {
    const CORRUPT_MESSAGE: i16 = 2;
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    const KAFKA_STORAGE_ERROR: i16 = 56;
    match code {
        TOPIC_AUTHORIZATION_FAILED => {
            format!("the broker's ACLs do not let this client read '{topic}'; ask for Read on the topic")
        }
        CORRUPT_MESSAGE | KAFKA_STORAGE_ERROR => {
            "the broker cannot read this part of its log; check its log and disk".into()
        }
        errors::UNKNOWN_TOPIC_ID => {
            format!("the topic was deleted or recreated; check with `annal topic describe {topic}`")
        }
        _ => "see the broker's log for the cause".into(),
    }
}

/// The partitions a plain (group-less) run reads.
fn requested_partitions(topic: &TopicMetadata, partition: Option<i32>) -> Result<Vec<i32>> {
    match partition {
        Some(p) => {
            if !topic.partitions.iter().any(|m| m.index == p) {
                bail!(
                    "topic '{}' has no partition {p}; it has {} (0..{})",
                    topic.name,
                    topic.partitions.len(),
                    topic.partitions.len().saturating_sub(1)
                );
            }
            Ok(vec![p])
        }
        None => Ok(topic.partitions.iter().map(|p| p.index).collect()),
    }
}

/// The partitions of `topic` the group gave this member, announced on stderr.
fn assigned(member: &GroupConsumer, topic: &str) -> Vec<i32> {
    member.assignment().get(topic).cloned().unwrap_or_default()
}

/// The group's committed offsets for `topic` (partitions without a commit are absent).
async fn committed_offsets(
    client: &mut Client,
    group: &str,
    topic: &str,
) -> Result<BTreeMap<i32, i64>> {
    let all = client.fetch_offsets(group).await?;
    Ok(all
        .get(topic)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|(&p, c)| {
                    c.as_ref()
                        .ok()
                        .filter(|c| c.offset >= 0)
                        .map(|c| (p, c.offset))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Commits the positions that moved since the last commit. Says whether the group wants the member to rejoin.
async fn commit(
    member: &mut GroupConsumer,
    client: &mut Client,
    topic: &str,
    reading: &Reading,
    committed: &mut BTreeMap<i32, i64>,
) -> Result<Membership> {
    let changed: BTreeMap<i32, i64> = reading
        .positions
        .iter()
        .filter(|(p, pos)| committed.get(p) != Some(pos))
        .map(|(&p, &pos)| (p, pos))
        .collect();
    let outcome = member.commit(client, topic, &changed).await?;
    if outcome == Membership::Current {
        committed.extend(changed);
    }
    Ok(outcome)
}

/// One offset of a ListOffsets answer, as an error rather than a panic if the broker left it out.
fn listed(
    map: &BTreeMap<i32, ListedOffset>,
    partition: i32,
    what: &str,
    topic: &str,
) -> Result<i64> {
    map.get(&partition).map(|o| o.offset).ok_or_else(|| {
        anyhow!(
            "the broker did not list the {what} offset of partition {partition} of topic '{topic}'"
        )
    })
}

/// Start positions and ends for `partitions`: a committed offset where there is one, else the start options.
async fn plan(
    client: &mut Client,
    topic: &TopicMetadata,
    partitions: &[i32],
    args: &ConsumeArgs,
    committed: &BTreeMap<i32, i64>,
) -> Result<Reading> {
    if let Some(group) = &args.group {
        eprintln!(
            "note: group '{group}' assigned this member {} of '{}'",
            if partitions.is_empty() {
                "no partitions".to_string()
            } else {
                format!(
                    "partition{} {}",
                    if partitions.len() == 1 { "" } else { "s" },
                    partitions
                        .iter()
                        .map(i32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            topic.name
        );
    }
    let mut reading = Reading::default();
    if partitions.is_empty() {
        return Ok(reading);
    }
    let earliest = client.list_offsets(topic, partitions, EARLIEST).await?;
    let latest = client.list_offsets(topic, partitions, LATEST).await?;
    let start = if args.from_beginning {
        StartOffset::Beginning
    } else if let Some(ts) = args.timestamp {
        StartOffset::Time(ts)
    } else {
        args.offset.unwrap_or(StartOffset::End)
    };
    let by_time = match start {
        StartOffset::Time(ts) => Some(client.list_offsets(topic, partitions, ts).await?),
        _ => None,
    };
    let end_by_time = match args.end_time {
        Some(ts) => Some(client.list_offsets(topic, partitions, ts).await?),
        None => None,
    };
    for &p in partitions {
        let lo = listed(&earliest, p, "earliest", &topic.name)?;
        let hi = listed(&latest, p, "latest", &topic.name)?;
        let position = match committed.get(&p) {
            Some(&c) => c,
            None => match start {
                StartOffset::Beginning => lo,
                StartOffset::End => hi,
                StartOffset::Last(n) => hi.saturating_sub(n).max(lo),
                StartOffset::At(n) => {
                    if n < lo {
                        eprintln!(
                            "note: partition {p} starts at offset {lo} (older records were deleted); reading from there"
                        );
                    } else if n > hi {
                        eprintln!(
                            "note: partition {p} ends at offset {hi}; offset {n} does not exist yet, reading from {hi}"
                        );
                    }
                    n.clamp(lo, hi)
                }
                StartOffset::Time(_) => {
                    let found = match &by_time {
                        Some(m) => listed(m, p, "timestamp", &topic.name)?,
                        None => -1,
                    };
                    // -1: no record at or after the time, so start at the end.
                    if found < 0 {
                        hi
                    } else {
                        found
                    }
                }
            },
        };
        reading.positions.insert(p, position);
        let mut stop = (!args.follow).then_some(hi);
        if let Some(end) = args.end_offset {
            stop = Some(stop.map_or(end, |s| s.min(end)));
        }
        if let Some(m) = &end_by_time {
            let found = listed(m, p, "end-time", &topic.name)?;
            // -1: no record at or after the end time yet; the per-record check stops there if one arrives.
            if found >= 0 {
                stop = Some(stop.map_or(found, |s| s.min(found)));
            }
        }
        if let Some(stop) = stop {
            reading.stops.insert(p, stop);
        }
    }
    Ok(reading)
}

/// After OFFSET_OUT_OF_RANGE (retention deleted the records, or the log was truncated): continue from the
/// earliest offset if we were behind it, else from the end.
async fn reset_position(
    client: &mut Client,
    topic: &TopicMetadata,
    partition: i32,
    position: i64,
) -> Result<i64> {
    let start = listed(
        &client.list_offsets(topic, &[partition], EARLIEST).await?,
        partition,
        "earliest",
        &topic.name,
    )?;
    let end = listed(
        &client.list_offsets(topic, &[partition], LATEST).await?,
        partition,
        "latest",
        &topic.name,
    )?;
    let reset = if position < start { start } else { end };
    eprintln!(
        "note: offset {position} is out of range for partition {partition} of '{}' (log has {start}..{end}); \
         continuing at {reset}",
        topic.name
    );
    Ok(reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_offsets_like_kcat_and_rpk() {
        assert_eq!(parse_start_offset("42"), Ok(StartOffset::At(42)));
        assert_eq!(parse_start_offset("-3"), Ok(StartOffset::Last(3)));
        assert_eq!(parse_start_offset("beginning"), Ok(StartOffset::Beginning));
        assert_eq!(parse_start_offset("oldest"), Ok(StartOffset::Beginning));
        assert_eq!(parse_start_offset("END"), Ok(StartOffset::End));
        assert_eq!(
            parse_start_offset("@1700000000000"),
            Ok(StartOffset::Time(1_700_000_000_000))
        );
        assert!(matches!(
            parse_start_offset("@-1h"),
            Ok(StartOffset::Time(_))
        ));
        for bad in ["-0", "-x", "x", "@soon", "1.5"] {
            let e = parse_start_offset(bad).unwrap_err();
            assert!(
                e.contains("-N (the last N records)") || e.contains("relative"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn formats_are_builtin_names_or_templates() {
        assert_eq!(
            parse_record_format("json"),
            Ok(RecordFormat::Builtin(Format::Json))
        );
        assert!(matches!(
            parse_record_format("%k\\n"),
            Ok(RecordFormat::Template(_))
        ));
        let e = parse_record_format("yaml").unwrap_err();
        assert!(e.contains("template"), "{e}");
        assert!(parse_record_format("%q").is_err());
    }

    #[test]
    fn reading_tracks_what_is_left() {
        let mut r = Reading::default();
        r.positions.insert(0, 5);
        r.positions.insert(1, 10);
        r.stops.insert(0, 8);
        r.stops.insert(1, 10);
        assert_eq!(r.active().into_iter().collect::<Vec<_>>(), vec![(0, 5)]);
        assert_eq!(r.remaining(), Some(3));
        r.ended.insert(0);
        assert!(r.active().is_empty());
        r.positions.insert(2, 0);
        assert_eq!(r.remaining(), None, "partition 2 has no end");
    }
}
