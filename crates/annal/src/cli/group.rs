//! `annal group list|describe|reset-offsets|delete|delete-offsets|health`: consumer groups, their members, committed offsets and lag.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use clap::{ArgGroup, Args, Subcommand};
use serde_json::{json, Value};

use super::health::{self, human_ms, GroupHealth, HttpArgs};
use super::lag::{assess_for_topic, retention_deletes, total_lag, PartitionLag, Retention};
use super::output::{print_table, ReportFormat};
use super::{connect, BrokerArgs};
use annal_client::errors::{self, error_name};
use annal_client::{group_error, GroupDescription, GroupOffsets, MemberAssignment};
use annal_client::{Client, EARLIEST, LATEST};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal group list
  annal group describe billing
  annal group reset-offsets billing --topic orders --to-earliest             # dry run: prints the plan
  annal group reset-offsets billing --topic orders --to-earliest --execute
  annal group delete billing old-billing
  annal group delete-offsets billing --topic old-orders
  annal group health                          # exit 1 if a group is WARN or ERR, or close to losing records")]
pub struct GroupArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(subcommand)]
    pub command: GroupCommand,
}

/// Group states Kafka reports (classic and KIP-848 groups), as a `--state` filter takes them.
pub const GROUP_STATES: &[&str] = &[
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
];
pub const GROUP_TYPES: &[&str] = &["classic", "consumer", "share", "streams"];

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups with their state and type.
    #[command(after_help = "Examples:
  annal group list
  annal group list --state Stable,Empty
  annal group list --type consumer            # KIP-848 groups only
  annal group list --format json | jq -r '.[].group'

--state and --type are filtered by the broker (ListGroups v4+ / v5+, i.e. Kafka 2.6+ / 3.8+).")]
    List {
        /// Only groups in these states (comma-separated or repeated): PreparingRebalance, CompletingRebalance,
        /// Stable, Dead, Empty, Assigning, Reconciling. Case does not matter.
        #[arg(long = "state", value_name = "STATE", value_delimiter = ',', value_parser = parse_state)]
        states: Vec<String>,
        /// Only groups of these types: classic, consumer, share, streams.
        #[arg(long = "type", value_name = "TYPE", value_delimiter = ',', value_parser = parse_type)]
        types: Vec<String>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Show a group's members, committed offsets, lag and retention risk.
    ///
    /// State, protocol and members with their assignments; per partition: committed offset, log start, log end
    /// and lag; a warning for partitions whose unread records retention has deleted or is about to delete.
    #[command(after_help = "Examples:
  annal group describe billing
  annal group describe billing --format json | jq '.partitions[] | select(.lag > 1000)'

RETENTION column: ok; AT-RISK when the committed offset is within 10% of the retained range from the log
start (the next retention deletion may remove records the group has not read; never for topics whose retention
does not delete: cleanup.policy=compact, or retention.ms and retention.bytes both -1); LOST when it is below the
log start (records were deleted unread); AHEAD when it is beyond the log end; - when nothing is committed.

STATUS and TIME-LAG come from the broker's HTTP listener (--http, the broker's http.listen): lag health by
Burrow's rules (OK, WARN, STALL, STOP, REWIND; see `annal group health --help`) and the age of the first
unconsumed record. They show - when the listener cannot be reached (e.g. against Apache Kafka).")]
    Describe {
        /// Group id.
        group: String,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Move a group's committed offsets (a dry run unless --execute).
    ///
    /// Prints the plan by default; --execute commits it. Kafka allows this only while the group has no active
    /// members.
    #[command(after_help = "Examples:
  annal group reset-offsets billing --topic orders --to-earliest                    # dry run
  annal group reset-offsets billing --topic orders --to-latest --execute
  annal group reset-offsets billing --topic orders -p 0 -p 2 --to-offset 1500 --execute
  annal group reset-offsets billing --topic orders --to-datetime 2026-11-30T08:00:00Z --execute
  annal group reset-offsets billing --topic orders --shift-by -100 --execute

--to-offset and --shift-by are clamped to the offsets that exist (log start..log end), as Kafka's tool does.
--to-datetime takes RFC 3339 (2026-11-30T08:00:00Z, 2026-11-30T10:00:00+02:00), a time without zone (read
as UTC) or a date (midnight UTC); partitions with no record at or after it go to the log end.")]
    ResetOffsets(ResetArgs),
    /// Lag health of consumer groups: exit 0 if every group is OK, 1 otherwise.
    ///
    /// The broker evaluates each partition by Burrow's rules over its last `lag.window.commits` commits (OK, WARN,
    /// STALL, STOP, REWIND; a group is WARN or ERR from its partitions) and warns when retention would delete a
    /// record the group has not consumed within `lag.retention.warning.ms`. Read from the brokers' HTTP listener
    /// (--http, the broker's http.listen).
    #[command(after_help = "Examples:
  annal group health
  annal group health billing
  annal group health --watch 5                # print every 5 s until interrupted
  annal group health --http 10.0.0.1:9644,10.0.0.2:9644,10.0.0.3:9644 --format json

Unhealthy means: status WARN (offsets advance, lag never decreases) or ERR (a partition STALL: the same offset
committed while lagging; STOP: no commit for longer than the window spans while lagging; REWIND: an offset went
back), or a retention warning. See https://github.com/linkedin/Burrow/wiki/Consumer-Lag-Evaluation-Rules")]
    Health {
        /// Only this group.
        group: Option<String>,
        /// Check again every SECONDS, printing each time, until interrupted.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "5")]
        watch: Option<u64>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Delete groups and their committed offsets.
    ///
    /// Only groups without active members can be deleted.
    #[command(after_help = "Examples:
  annal group delete billing
  annal group delete old-1 old-2 old-3")]
    Delete {
        /// Group ids.
        #[arg(required = true, num_args = 1..)]
        groups: Vec<String>,
    },
    /// Delete a group's committed offsets for a topic (OffsetDelete).
    ///
    /// Kafka refuses it while an active member of the group is subscribed to the topic.
    #[command(after_help = "Examples:
  annal group delete-offsets billing --topic old-orders             # every partition with an offset
  annal group delete-offsets billing --topic orders --partition 3")]
    DeleteOffsets {
        /// Group id.
        group: String,
        /// Topic whose offsets to delete.
        #[arg(short = 't', long, value_name = "TOPIC")]
        topic: String,
        /// Only these partitions (repeat or comma-separate; default: every partition the group has an offset for).
        #[arg(
            short = 'p',
            long = "partition",
            value_name = "P",
            value_delimiter = ','
        )]
        partitions: Vec<i32>,
    },
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("target").required(true).args(
    ["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
pub struct ResetArgs {
    /// Group id.
    pub group: String,
    /// Topic whose offsets to move.
    #[arg(long, value_name = "TOPIC")]
    pub topic: String,
    /// Only these partitions (repeat or comma-separate; default: all partitions of the topic).
    #[arg(short = 'p', long = "partition", value_name = "P", value_delimiter = ',',
          value_parser = clap::value_parser!(i32).range(0..))]
    pub partitions: Vec<i32>,
    /// To the log start offset (the oldest record still kept).
    #[arg(long)]
    pub to_earliest: bool,
    /// To the log end offset (skip everything not yet read).
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub to_offset: Option<i64>,
    /// To the first record at or after this time.
    #[arg(long, value_name = "ISO8601", value_parser = parse_datetime)]
    pub to_datetime: Option<i64>,
    /// Move the committed offset by N (negative: back). Partitions without a commit start from the log end.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
    /// Commit the new offsets (without it, only print the plan).
    #[arg(long)]
    pub execute: bool,
    /// Only print the plan: the default; accepted because Kafka's tool asks scripts to say so.
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

pub async fn run(args: GroupArgs) -> Result<()> {
    if let GroupCommand::Health {
        group,
        watch,
        format,
    } = &args.command
    {
        // The Kafka protocol has no lag health: only the HTTP listener is needed.
        return health::health(&args.http, group.as_deref(), *watch, *format).await;
    }
    let mut client = connect(&args.broker.brokers).await?;
    let mut out = String::new();
    let result = match args.command {
        GroupCommand::List {
            states,
            types,
            format,
        } => list(&mut client, &states, &types, format, &mut out).await,
        GroupCommand::Describe { group, format } => {
            describe(&mut client, &args.http, &group, format, &mut out).await
        }
        GroupCommand::Health { .. } => unreachable!("answered above"),
        GroupCommand::ResetOffsets(reset) => reset_offsets(&mut client, &reset, &mut out).await,
        GroupCommand::Delete { groups } => delete(&mut client, &groups, &mut out).await,
        GroupCommand::DeleteOffsets {
            group,
            topic,
            partitions,
        } => {
            super::group_offsets::delete_offsets(&mut client, &group, &topic, &partitions, &mut out)
                .await
        }
    };
    // Print what was gathered even when a later step failed (e.g. some groups deleted, one refused).
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    result
}

async fn list(
    client: &mut Client,
    states: &[String],
    types: &[String],
    format: ReportFormat,
    out: &mut String,
) -> Result<()> {
    let groups = client.list_groups(states, types).await?;
    match format {
        ReportFormat::Json => {
            let v: Vec<Value> = groups
                .iter()
                .map(|g| {
                    json!({
                        "group": g.group_id,
                        "state": g.state,
                        "type": g.group_type,
                        "protocol_type": g.protocol_type,
                    })
                })
                .collect();
            writeln!(out, "{}", Value::Array(v))?;
        }
        ReportFormat::Text => {
            let dash =
                |s: &Option<String>| s.clone().filter(|s| !s.is_empty()).unwrap_or("-".into());
            let rows: Vec<[String; 4]> = groups
                .iter()
                .map(|g| {
                    [
                        g.group_id.clone(),
                        dash(&g.state),
                        dash(&g.group_type),
                        if g.protocol_type.is_empty() {
                            "-".into()
                        } else {
                            g.protocol_type.clone()
                        },
                    ]
                })
                .collect();
            if rows.is_empty() {
                eprintln!(
                    "no groups{}",
                    if states.is_empty() && types.is_empty() {
                        ""
                    } else {
                        " match the filter"
                    }
                );
            } else {
                print_table(out, &["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"], &rows);
            }
        }
    }
    Ok(())
}

/// One row of `group describe`: a partition the group has committed to or is assigned.
#[derive(Debug)]
struct PartitionRow {
    topic: String,
    partition: i32,
    /// None when the topic no longer exists (offsets outlive deleted topics).
    lag: Option<PartitionLag>,
    committed: Option<i64>,
    metadata: Option<String>,
    /// Member id, client id and host of the member that owns the partition.
    owner: Option<(String, String, String)>,
    /// The broker's per-partition error from OffsetFetch.
    error: Option<i16>,
}

async fn describe(
    client: &mut Client,
    http: &HttpArgs,
    group: &str,
    format: ReportFormat,
    out: &mut String,
) -> Result<()> {
    let desc = client.describe_group(group).await?;
    let offsets = client.fetch_offsets(group).await?;
    if desc.state == "Dead" && offsets.is_empty() {
        bail!("group '{group}' does not exist; list groups with `annal group list`");
    }
    let rows = partition_rows(client, &desc, &offsets).await?;
    let warnings = retention_warnings(group, &rows);
    // Lag health comes from the broker's HTTP listener; against a broker without one the columns show "-".
    let health = health::fetch_one(&http.http, group).await;
    match format {
        ReportFormat::Json => {
            let mut v = describe_json(&desc, &rows, &warnings);
            add_health_json(&mut v, health.as_ref());
            writeln!(out, "{v}")?;
        }
        ReportFormat::Text => describe_text(&desc, &rows, health.as_ref(), out)?,
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    Ok(())
}

async fn partition_rows(
    client: &mut Client,
    desc: &GroupDescription,
    offsets: &GroupOffsets,
) -> Result<Vec<PartitionRow>> {
    // Which member owns which partition.
    let mut owners: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    for m in &desc.members {
        if let MemberAssignment::Decoded(a) = &m.assignment {
            for (topic, parts) in &a.partitions {
                for &p in parts {
                    owners.insert(
                        (topic.clone(), p),
                        (
                            m.member_id.clone(),
                            m.client_id.clone(),
                            m.client_host.clone(),
                        ),
                    );
                }
            }
        }
    }
    let mut by_topic: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (topic, parts) in offsets {
        by_topic
            .entry(topic.clone())
            .or_default()
            .extend(parts.keys());
    }
    for (topic, p) in owners.keys() {
        by_topic.entry(topic.clone()).or_default().insert(*p);
    }
    let mut rows = Vec::new();
    for (topic, partitions) in by_topic {
        let partitions: Vec<i32> = partitions.into_iter().collect();
        let log = log_offsets(client, &topic, &partitions).await?;
        let deletes = log.is_some() && topic_retention_deletes(client, &topic).await;
        for p in partitions {
            let committed_entry = offsets.get(&topic).and_then(|ps| ps.get(&p));
            let (committed, metadata, error) = match committed_entry {
                Some(Ok(c)) if c.offset >= 0 => (Some(c.offset), c.metadata.clone(), None),
                Some(Ok(_)) | None => (None, None, None),
                Some(Err(code)) => (None, None, Some(*code)),
            };
            let lag = log
                .as_ref()
                .and_then(|l| l.get(&p))
                .map(|&(start, end)| assess_for_topic(committed, start, end, deletes));
            rows.push(PartitionRow {
                owner: owners.get(&(topic.clone(), p)).cloned(),
                topic: topic.clone(),
                partition: p,
                lag,
                committed,
                metadata: metadata.filter(|m| !m.is_empty()),
                error,
            });
        }
    }
    Ok(rows)
}

/// Whether retention may delete records of the topic (from its configs; when they cannot be read, assume so).
async fn topic_retention_deletes(client: &mut Client, topic: &str) -> bool {
    let Ok(configs) = client.describe_topic_configs(topic).await else {
        return true;
    };
    let value = |name: &str| {
        configs
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.value.clone())
    };
    retention_deletes(
        value("cleanup.policy").as_deref(),
        value("retention.ms").as_deref(),
        value("retention.bytes").as_deref(),
    )
}

/// Log start and log end offsets of the partitions of a topic that exist; None when the topic is gone.
async fn log_offsets(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
) -> Result<Option<BTreeMap<i32, (i64, i64)>>> {
    // Committed offsets outlive a deleted topic: ask first whether it still exists.
    let listed = client.metadata(Some(&[topic])).await?;
    if listed
        .first()
        .is_some_and(|(code, _)| *code == errors::UNKNOWN_TOPIC_OR_PARTITION)
    {
        return Ok(None);
    }
    let meta = client.topic(topic).await?;
    let existing: Vec<i32> = partitions
        .iter()
        .copied()
        .filter(|p| meta.partitions.iter().any(|m| m.index == *p))
        .collect();
    if existing.is_empty() {
        return Ok(Some(BTreeMap::new()));
    }
    let start = client.list_offsets(&meta, &existing, EARLIEST).await?;
    let end = client.list_offsets(&meta, &existing, LATEST).await?;
    Ok(Some(
        existing
            .iter()
            .map(|p| (*p, (start[p].offset, end[p].offset)))
            .collect(),
    ))
}

fn retention_warnings(group: &str, rows: &[PartitionRow]) -> Vec<String> {
    let mut warnings = Vec::new();
    for r in rows {
        let Some(lag) = &r.lag else { continue };
        let (t, p, c) = (&r.topic, r.partition, lag.committed.unwrap_or(-1));
        match lag.retention {
            Retention::Lost { unread_deleted } => warnings.push(format!(
                "group '{group}' fell off the retention window of {t}-{p}: its committed offset {c} is below the \
                 log start offset {}, so {unread_deleted} record(s) were deleted before it read them. It will \
                 resume at the log start or end depending on auto.offset.reset; consider a longer retention.ms \
                 for '{t}' or more consumers",
                lag.log_start
            )),
            Retention::AtRisk => warnings.push(format!(
                "group '{group}' is at risk of losing records in {t}-{p}: its committed offset {c} is within 10% of \
                 the retained range ({}..{}) from the log start; the next retention deletion may remove records \
                 it has not read",
                lag.log_start, lag.log_end
            )),
            Retention::AheadOfLogEnd => warnings.push(format!(
                "group '{group}' committed offset {c} for {t}-{p}, beyond the log end offset {}; was the topic \
                 recreated or truncated? Reset it with `annal group reset-offsets {group} --topic {t} --to-latest`",
                lag.log_end
            )),
            Retention::Ok | Retention::NoCommit => {}
        }
    }
    warnings
}

fn assignment_text(a: &MemberAssignment) -> String {
    match a {
        MemberAssignment::Decoded(a) if a.partitions.is_empty() => "-".into(),
        MemberAssignment::Decoded(a) => a
            .partitions
            .iter()
            .map(|(t, ps)| {
                let mut ps = ps.clone();
                ps.sort_unstable();
                format!(
                    "{t}:{}",
                    ps.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        MemberAssignment::Opaque(n) => format!("({n} bytes, not a consumer assignment)"),
        MemberAssignment::Malformed(e) => format!("(undecodable: {e})"),
    }
}

fn or_dash(v: Option<i64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// Adds the broker's lag health (status, time lag, retention time-to-loss) to `describe --format json`.
fn add_health_json(v: &mut Value, health: Option<&GroupHealth>) {
    let Some(h) = health else {
        return;
    };
    v["status"] = json!(h.status);
    v["time_lag_ms_max"] = json!(h.time_lag_ms_max);
    v["records_lost_to_retention"] = json!(h.records_lost_to_retention);
    if let Some(parts) = v["partitions"].as_array_mut() {
        for p in parts {
            let (Some(topic), Some(partition)) = (p["topic"].as_str(), p["partition"].as_i64())
            else {
                continue;
            };
            if let Some(ph) = h
                .partitions
                .iter()
                .find(|x| x.topic == topic && i64::from(x.partition) == partition)
            {
                p["status"] = json!(ph.status);
                p["time_lag_ms"] = json!(ph.time_lag_ms);
                p["retention_time_to_loss_ms"] = json!(ph.retention_time_to_loss_ms);
            }
        }
    }
}

fn describe_text(
    desc: &GroupDescription,
    rows: &[PartitionRow],
    health: Option<&GroupHealth>,
    out: &mut String,
) -> Result<()> {
    writeln!(out, "Group:        {}", desc.group_id)?;
    writeln!(out, "State:        {}", desc.state)?;
    if let Some(h) = health {
        writeln!(
            out,
            "Health:       {} (Burrow's rules; time lag {}, {} records lost to retention)",
            h.status,
            human_ms(h.time_lag_ms_max),
            h.records_lost_to_retention
        )?;
    }
    let protocol = match (desc.protocol_type.as_str(), desc.protocol.as_str()) {
        ("", "") => "-".to_string(),
        (t, "") => t.to_string(),
        (t, p) => format!("{t} ({p})"),
    };
    writeln!(
        out,
        "Type:         {}   Protocol: {protocol}",
        desc.group_type
    )?;
    writeln!(
        out,
        "Coordinator:  {} ({})",
        desc.coordinator.node_id, desc.coordinator.addr
    )?;
    writeln!(out, "Members:      {}", desc.members.len())?;
    if !desc.members.is_empty() {
        writeln!(out)?;
        let members: Vec<[String; 5]> = desc
            .members
            .iter()
            .map(|m| {
                [
                    m.member_id.clone(),
                    m.instance_id.clone().unwrap_or("-".into()),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    assignment_text(&m.assignment),
                ]
            })
            .collect();
        print_table(
            out,
            &[
                "MEMBER-ID",
                "INSTANCE-ID",
                "CLIENT-ID",
                "HOST",
                "ASSIGNMENT",
            ],
            &members,
        );
    }
    writeln!(out)?;
    if rows.is_empty() {
        writeln!(out, "No committed offsets and no assigned partitions.")?;
        return Ok(());
    }
    let partition_health = |topic: &str, p: i32| {
        health.and_then(|h| {
            h.partitions
                .iter()
                .find(|x| x.topic == topic && x.partition == p)
        })
    };
    let table: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            let ph = partition_health(&r.topic, r.partition);
            let (start, end, lag, retention) = match &r.lag {
                Some(l) => (
                    l.log_start.to_string(),
                    l.log_end.to_string(),
                    or_dash(l.lag),
                    l.retention.label().to_string(),
                ),
                None => ("-".into(), "-".into(), "-".into(), "(topic deleted)".into()),
            };
            [
                r.topic.clone(),
                r.partition.to_string(),
                match r.error {
                    Some(code) => error_name(code),
                    None => or_dash(r.committed),
                },
                start,
                end,
                lag,
                retention,
                ph.map_or("-".into(), |p| p.status.clone()),
                ph.map_or("-".into(), |p| human_ms(p.time_lag_ms)),
                r.owner.as_ref().map_or("-".into(), |(id, client, host)| {
                    format!("{id} {client} {host}")
                }),
            ]
        })
        .collect();
    print_table(
        out,
        &[
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-START-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "RETENTION",
            "STATUS",
            "TIME-LAG",
            "CONSUMER-ID CLIENT-ID HOST",
        ],
        &table,
    );
    writeln!(out)?;
    let per_topic = lag_per_topic(rows);
    let total: i64 = per_topic.values().fold(0i64, |a, b| a.saturating_add(*b));
    if per_topic.len() > 1 {
        let parts: Vec<String> = per_topic.iter().map(|(t, l)| format!("{t} {l}")).collect();
        writeln!(out, "Total lag: {total} ({})", parts.join(", "))?;
    } else {
        writeln!(out, "Total lag: {total}")?;
    }
    Ok(())
}

fn lag_per_topic(rows: &[PartitionRow]) -> BTreeMap<String, i64> {
    let mut per_topic: BTreeMap<String, Vec<PartitionLag>> = BTreeMap::new();
    for r in rows {
        if let Some(l) = r.lag {
            per_topic.entry(r.topic.clone()).or_default().push(l);
        }
    }
    per_topic
        .into_iter()
        .map(|(t, lags)| (t, total_lag(&lags)))
        .collect()
}

fn describe_json(desc: &GroupDescription, rows: &[PartitionRow], warnings: &[String]) -> Value {
    let members: Vec<Value> = desc
        .members
        .iter()
        .map(|m| {
            let assignment = match &m.assignment {
                MemberAssignment::Decoded(a) => {
                    let topics: serde_json::Map<String, Value> = a
                        .partitions
                        .iter()
                        .map(|(t, ps)| (t.clone(), json!(ps)))
                        .collect();
                    Value::Object(topics)
                }
                _ => Value::Null,
            };
            json!({
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": assignment,
                "assigned_partitions": match &m.assignment {
                    MemberAssignment::Decoded(a) => Some(a.partition_count()),
                    _ => None,
                },
            })
        })
        .collect();
    let partitions: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "topic": r.topic,
                "partition": r.partition,
                "committed_offset": r.committed,
                "metadata": r.metadata,
                "log_start_offset": r.lag.map(|l| l.log_start),
                "log_end_offset": r.lag.map(|l| l.log_end),
                "lag": r.lag.and_then(|l| l.lag),
                "retention": r.lag.map_or("topic-deleted", |l| match l.retention {
                    Retention::NoCommit => "no-commit",
                    Retention::Ok => "ok",
                    Retention::AtRisk => "at-risk",
                    Retention::Lost { .. } => "lost",
                    Retention::AheadOfLogEnd => "ahead",
                }),
                "unread_deleted": r.lag.and_then(|l| match l.retention {
                    Retention::Lost { unread_deleted } => Some(unread_deleted),
                    _ => None,
                }),
                "error": r.error.map(error_name),
                "member_id": r.owner.as_ref().map(|o| &o.0),
                "client_id": r.owner.as_ref().map(|o| &o.1),
                "host": r.owner.as_ref().map(|o| &o.2),
            })
        })
        .collect();
    let per_topic = lag_per_topic(rows);
    json!({
        "group": desc.group_id,
        "state": desc.state,
        "type": desc.group_type,
        "protocol_type": desc.protocol_type,
        "protocol": desc.protocol,
        "coordinator": {"id": desc.coordinator.node_id, "address": desc.coordinator.addr},
        "members": members,
        "partitions": partitions,
        "total_lag": per_topic.values().fold(0i64, |a, b| a.saturating_add(*b)),
        "lag_by_topic": per_topic,
        "warnings": warnings,
    })
}

/// Where a reset moves one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    Earliest,
    Latest,
    Offset(i64),
    /// The offset ListOffsets found for the time (-1: no record at or after it).
    Datetime {
        found: i64,
    },
    ShiftBy(i64),
}

/// The new offset for a partition whose log spans [log_start, log_end) and whose committed offset is
/// `current`; with a note when the request had to be clamped, as Kafka's tool does.
pub fn plan_offset(
    target: ResetTarget,
    current: Option<i64>,
    log_start: i64,
    log_end: i64,
) -> (i64, Option<String>) {
    let clamp = |wanted: i64| -> (i64, Option<String>) {
        if wanted < log_start {
            (
                log_start,
                Some(format!(
                    "offset {wanted} is below the log start offset {log_start}; using {log_start}"
                )),
            )
        } else if wanted > log_end {
            (
                log_end,
                Some(format!(
                    "offset {wanted} is beyond the log end offset {log_end}; using {log_end}"
                )),
            )
        } else {
            (wanted, None)
        }
    };
    match target {
        ResetTarget::Earliest => (log_start, None),
        ResetTarget::Latest => (log_end, None),
        ResetTarget::Offset(n) => clamp(n),
        ResetTarget::Datetime { found } if found < 0 => (
            log_end,
            Some("no record at or after that time; using the log end offset".into()),
        ),
        ResetTarget::Datetime { found } => clamp(found),
        ResetTarget::ShiftBy(n) => match current {
            Some(c) => clamp(c.saturating_add(n)),
            None => clamp(log_end.saturating_add(n)),
        },
    }
}

async fn reset_offsets(client: &mut Client, args: &ResetArgs, out: &mut String) -> Result<()> {
    let group = &args.group;
    let desc = client.describe_group(group).await?;
    if args.execute && !desc.is_inactive() {
        bail!(
            "cannot reset the offsets of group '{group}': it is {} with {} active member(s); Kafka allows a \
             reset only while a group has no active members. Stop its consumers (see them with `annal group \
             describe {group}`) and retry",
            desc.state,
            desc.members.len()
        );
    }
    let meta = client.topic(&args.topic).await?;
    let partitions: Vec<i32> = if args.partitions.is_empty() {
        meta.partitions.iter().map(|p| p.index).collect()
    } else {
        for p in &args.partitions {
            if !meta.partitions.iter().any(|m| m.index == *p) {
                bail!(
                    "topic '{}' has no partition {p}; it has {} (0..{})",
                    meta.name,
                    meta.partitions.len(),
                    meta.partitions.len().saturating_sub(1)
                );
            }
        }
        let set: BTreeSet<i32> = args.partitions.iter().copied().collect();
        set.into_iter().collect()
    };
    let offsets = client.fetch_offsets(group).await?;
    let current: BTreeMap<i32, i64> = offsets
        .get(&args.topic)
        .map(|ps| {
            ps.iter()
                .filter_map(|(p, c)| {
                    c.as_ref()
                        .ok()
                        .filter(|c| c.offset >= 0)
                        .map(|c| (*p, c.offset))
                })
                .collect()
        })
        .unwrap_or_default();
    let start = client.list_offsets(&meta, &partitions, EARLIEST).await?;
    let end = client.list_offsets(&meta, &partitions, LATEST).await?;
    let by_time = match args.to_datetime {
        Some(ts) => Some(client.list_offsets(&meta, &partitions, ts).await?),
        None => None,
    };
    let mut plan: BTreeMap<i32, i64> = BTreeMap::new();
    let mut notes = Vec::new();
    for &p in &partitions {
        let target = if args.to_earliest {
            ResetTarget::Earliest
        } else if args.to_latest {
            ResetTarget::Latest
        } else if let Some(n) = args.to_offset {
            ResetTarget::Offset(n)
        } else if let Some(found) = &by_time {
            ResetTarget::Datetime {
                found: found[&p].offset,
            }
        } else if let Some(n) = args.shift_by {
            ResetTarget::ShiftBy(n)
        } else {
            return Err(anyhow!(
                "give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
            ));
        };
        let (new, note) = plan_offset(
            target,
            current.get(&p).copied(),
            start[&p].offset,
            end[&p].offset,
        );
        if let Some(note) = note {
            notes.push(format!("partition {p}: {note}"));
        }
        plan.insert(p, new);
    }

    let results = if args.execute {
        Some(client.commit_offsets(group, &args.topic, &plan).await?)
    } else {
        None
    };
    let failed: Vec<(i32, i16)> = results
        .as_ref()
        .map(|r| {
            plan.keys()
                .map(|p| (*p, r.get(p).copied().unwrap_or(-1)))
                .filter(|(_, c)| *c != 0)
                .collect()
        })
        .unwrap_or_default();
    match args.format {
        ReportFormat::Json => {
            let rows: Vec<Value> = plan
                .iter()
                .map(|(p, new)| {
                    json!({
                        "topic": args.topic,
                        "partition": p,
                        "current_offset": current.get(p),
                        "new_offset": new,
                        "error": results.as_ref().and_then(|r| match r.get(p) {
                            Some(0) => None,
                            Some(&c) => Some(error_name(c)),
                            None => Some("NO_RESPONSE".to_string()),
                        }),
                    })
                })
                .collect();
            writeln!(
                out,
                "{}",
                json!({"group": group, "state": desc.state, "executed": args.execute, "notes": notes, "partitions": rows})
            )?;
        }
        ReportFormat::Text => {
            let rows: Vec<[String; 5]> = plan
                .iter()
                .map(|(p, new)| {
                    [
                        group.clone(),
                        args.topic.clone(),
                        p.to_string(),
                        or_dash(current.get(p).copied()),
                        new.to_string(),
                    ]
                })
                .collect();
            print_table(
                out,
                &[
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "NEW-OFFSET",
                ],
                &rows,
            );
        }
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    if !args.execute {
        if !desc.is_inactive() {
            eprintln!(
                "warning: group '{group}' is {} with {} active member(s): --execute will be refused until its \
                 consumers stop",
                desc.state,
                desc.members.len()
            );
        }
        eprintln!("dry run: nothing was committed; add --execute to commit these offsets");
        return Ok(());
    }
    if let Some(&(p, code)) = failed.first() {
        bail!(
            "the broker refused the new offsets of {} partition(s) of '{}' (partition {p}: {})",
            failed.len(),
            args.topic,
            if code == -1 {
                "no answer for it".to_string()
            } else {
                group_error(group, code)
            }
        );
    }
    eprintln!(
        "committed new offsets for {} partition(s) of '{}' in group '{group}'",
        plan.len(),
        args.topic
    );
    Ok(())
}

async fn delete(client: &mut Client, groups: &[String], out: &mut String) -> Result<()> {
    let results = client.delete_groups(groups).await?;
    let mut failures = Vec::new();
    for (group, code) in &results {
        if *code == 0 {
            writeln!(out, "deleted group '{group}'")?;
        } else {
            failures.push(format!(
                "cannot delete group '{group}': {}",
                group_error(group, *code)
            ));
        }
    }
    match failures.len() {
        0 => Ok(()),
        1 => bail!("{}", failures[0]),
        n => bail!(
            "{n} of {} groups were not deleted:\n  {}",
            results.len(),
            failures.join("\n  ")
        ),
    }
}

/// Accepts a state in any case and returns Kafka's spelling.
fn parse_state(s: &str) -> Result<String, String> {
    GROUP_STATES
        .iter()
        .find(|k| k.eq_ignore_ascii_case(s))
        .map(|k| k.to_string())
        .ok_or_else(|| {
            format!(
                "unknown group state '{s}'; use one of {}",
                GROUP_STATES.join(", ")
            )
        })
}

fn parse_type(s: &str) -> Result<String, String> {
    GROUP_TYPES
        .iter()
        .find(|k| k.eq_ignore_ascii_case(s))
        .map(|k| k.to_string())
        .ok_or_else(|| {
            format!(
                "unknown group type '{s}'; use one of {}",
                GROUP_TYPES.join(", ")
            )
        })
}

/// An ISO 8601 / RFC 3339 time as milliseconds since the epoch. Without a zone, UTC.
pub fn parse_datetime(s: &str) -> Result<i64, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    // Kafka's tool writes offsets as e.g. 2026-11-30T08:00:00.000+0200.
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%dT%H:%M:%S%z"] {
        if let Ok(t) = DateTime::parse_from_str(s, fmt) {
            return Ok(t.timestamp_millis());
        }
    }
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d
            .and_hms_opt(0, 0, 0)
            .expect("midnight exists")
            .and_utc()
            .timestamp_millis());
    }
    Err(format!(
        "'{s}' is not a date-time; write e.g. 2026-11-30T08:00:00Z, 2026-11-30T10:00:00+02:00 or 2026-11-30"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::lag::assess;

    #[test]
    fn datetimes_in_the_forms_people_write() {
        let t = 1_795_420_800_000; // 2026-11-23T08:00:00Z
        assert_eq!(parse_datetime("2026-11-23T08:00:00Z"), Ok(t));
        assert_eq!(parse_datetime("2026-11-23T10:00:00+02:00"), Ok(t));
        assert_eq!(parse_datetime("2026-11-23T10:00:00.000+0200"), Ok(t));
        assert_eq!(parse_datetime("2026-11-23T08:00:00"), Ok(t));
        assert_eq!(parse_datetime("2026-11-23T08:00:00.250"), Ok(t + 250));
        assert_eq!(parse_datetime("2026-11-23T08:00"), Ok(t));
        assert_eq!(parse_datetime("2026-11-23"), Ok(t - 8 * 3_600_000));
        assert!(parse_datetime("yesterday").unwrap_err().contains("e.g."));
        assert!(parse_datetime("2026-13-01").is_err());
    }

    #[test]
    fn reset_targets_are_clamped_to_the_log_like_kafka() {
        use ResetTarget::*;
        assert_eq!(plan_offset(Earliest, Some(50), 10, 100), (10, None));
        assert_eq!(plan_offset(Latest, None, 10, 100), (100, None));
        assert_eq!(plan_offset(Offset(42), None, 10, 100), (42, None));
        let (o, note) = plan_offset(Offset(5), None, 10, 100);
        assert_eq!(o, 10);
        assert!(note.unwrap().contains("below the log start"));
        let (o, note) = plan_offset(Offset(500), None, 10, 100);
        assert_eq!(o, 100);
        assert!(note.unwrap().contains("beyond the log end"));
        assert_eq!(
            plan_offset(Datetime { found: 60 }, None, 10, 100),
            (60, None)
        );
        let (o, note) = plan_offset(Datetime { found: -1 }, Some(3), 10, 100);
        assert_eq!(o, 100);
        assert!(note.is_some());
        assert_eq!(plan_offset(ShiftBy(-20), Some(50), 10, 100), (30, None));
        assert_eq!(plan_offset(ShiftBy(-80), Some(50), 10, 100).0, 10);
        assert_eq!(plan_offset(ShiftBy(5), None, 10, 100).0, 100);
        assert_eq!(plan_offset(ShiftBy(i64::MIN), Some(50), 10, 100).0, 10);
    }

    #[test]
    fn states_and_types_are_normalized() {
        assert_eq!(parse_state("stable"), Ok("Stable".into()));
        assert_eq!(
            parse_state("PREPARINGREBALANCE"),
            Ok("PreparingRebalance".into())
        );
        assert!(parse_state("running").unwrap_err().contains("Empty"));
        assert_eq!(parse_type("Consumer"), Ok("consumer".into()));
        assert!(parse_type("x").is_err());
    }

    fn row(topic: &str, p: i32, committed: Option<i64>, start: i64, end: i64) -> PartitionRow {
        PartitionRow {
            topic: topic.into(),
            partition: p,
            lag: Some(assess(committed, start, end)),
            committed,
            metadata: None,
            owner: None,
            error: None,
        }
    }

    #[test]
    fn warnings_name_the_partition_and_what_happened() {
        let rows = vec![
            row("orders", 0, Some(40), 100, 500),
            row("orders", 1, Some(105), 100, 500),
            row("orders", 2, Some(400), 100, 500),
            row("orders", 3, None, 0, 10),
        ];
        let w = retention_warnings("billing", &rows);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("orders-0") && w[0].contains("60 record(s) were deleted"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("orders-1") && w[1].contains("at risk"),
            "{}",
            w[1]
        );
    }

    #[test]
    fn totals_per_topic() {
        let rows = vec![
            row("a", 0, Some(5), 0, 10),
            row("a", 1, Some(10), 0, 10),
            row("b", 0, Some(1), 0, 4),
            row("b", 1, None, 0, 4),
        ];
        let t = lag_per_topic(&rows);
        assert_eq!(t["a"], 5);
        assert_eq!(t["b"], 3);
    }
}
