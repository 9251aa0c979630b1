//! `annal topic create|list|describe|alter|delete|add-partitions|trim`.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{bail, Result};
use clap::{ArgGroup, Args, Subcommand};
use serde_json::{json, Value};

use super::output::{print_table, ReportFormat};
use super::time::parse_time;
use super::topic_partitions::{self, parse_trim_offset, TrimOffset, TrimTarget};
use super::{connect, parse_key_value, BrokerArgs};
use annal_client::{ConfigEntry, ConfigSource, ListedOffset, TopicMetadata, EARLIEST, LATEST};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal topic create orders -p 3 -c retention.ms=86400000
  annal topic list
  annal topic describe orders
  annal topic alter orders -c retention.ms=3600000
  annal topic delete orders
  annal topic add-partitions orders --to 6
  annal topic trim orders --before -7d
  annal topic list -b kafka-1:9092 --format json")]
pub struct TopicArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    #[command(after_help = "Examples:
  annal topic create orders                       # broker defaults (num.partitions, default.replication.factor)
  annal topic create orders -p 6 -r 1
  annal topic create events -c retention.ms=3600000 -c cleanup.policy=delete")]
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions (default: the broker's num.partitions).
        #[arg(short = 'p', long = "partitions", value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
        partitions: Option<i32>,
        /// Replication factor (default: the broker's default.replication.factor).
        #[arg(short = 'r', long = "replication-factor", value_name = "N", value_parser = clap::value_parser!(i16).range(1..))]
        replication_factor: Option<i16>,
        /// A topic config, e.g. retention.ms=86400000. Repeat for several.
        #[arg(short = 'c', long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// List topic names, one per line.
    #[command(after_help = "Examples:
  annal topic list
  annal topic list --all          # include internal topics such as __consumer_offsets
  annal topic list --format json  # name, id, partitions, replication factor, internal")]
    List {
        /// Include internal topics.
        #[arg(long)]
        all: bool,
        /// text: one name per line; json: one array of objects.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Show a topic's partitions (leader, replicas, earliest and latest offsets) and configs.
    #[command(after_help = "Examples:
  annal topic describe orders
  annal topic describe orders --format json | jq '.partitions[].latest'")]
    Describe {
        /// Topic name.
        name: String,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Change a topic's configs.
    #[command(after_help = "Examples:
  annal topic alter orders -c retention.ms=3600000
  annal topic alter orders -c retention.bytes=1073741824 -c segment.ms=600000
  annal topic alter orders --delete-config retention.ms     # back to the broker default")]
    Alter {
        /// Topic name.
        name: String,
        /// Set a config, e.g. retention.ms=3600000. Repeat for several.
        #[arg(short = 'c', long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Remove a config override so the broker default applies again. Repeat for several.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Delete a topic and all its records.
    #[command(after_help = "Examples:
  annal topic delete orders")]
    Delete {
        /// Topic name.
        name: String,
    },
    /// Add partitions to a topic (CreatePartitions). Kafka cannot remove partitions.
    #[command(after_help = "Examples:
  annal topic add-partitions orders --to 12

Records with a key are placed by hash modulo the partition count, so after growing a topic a key's new
records may go to another partition than its old ones.")]
    AddPartitions {
        /// Topic name.
        name: String,
        /// The topic's new total number of partitions (more than it has now).
        #[arg(long = "to", value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
        to: i32,
    },
    /// Delete the oldest records of partitions (DeleteRecords): each partition's log start moves forward.
    #[command(
        group(ArgGroup::new("trim_to").required(true).args(["offset", "before"])),
        after_help = "Examples:
  annal topic trim orders -p 0 --offset 1000      # partition 0 now starts at offset 1000
  annal topic trim orders --before -7d            # every partition: records older than a week
  annal topic trim orders --before 2026-11-30T00:00:00Z --dry-run
  annal topic trim orders --offset end            # delete every record, keep the topic

Prints, per partition, the log start before and after and how many records (offsets) were removed. Consumers
whose position is below the new log start continue from it (auto.offset.reset)."
    )]
    Trim {
        /// Topic name.
        name: String,
        /// Only these partitions (repeat or comma-separate; default: all).
        #[arg(
            short = 'p',
            long = "partition",
            value_name = "P",
            value_delimiter = ','
        )]
        partitions: Vec<i32>,
        /// The new log start offset: records below it are deleted (`end`: all records).
        #[arg(long, value_name = "OFFSET", value_parser = parse_trim_offset)]
        offset: Option<TrimOffset>,
        /// Delete the records before the first one at or after TIME (ms, RFC 3339 or relative, e.g. -7d).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true, value_parser = parse_time)]
        before: Option<i64>,
        /// Only print what would be removed.
        #[arg(long)]
        dry_run: bool,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
}

pub async fn run(args: TopicArgs) -> Result<()> {
    let mut client = connect(&args.broker.brokers).await?;
    // Output is collected and written at the end: `println!` would panic on a closed pipe.
    let mut out = String::new();
    match args.command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            validate_topic_name(&name)?;
            let created = client
                .create_topic(&name, partitions, replication_factor, &configs)
                .await?;
            // Creation is asynchronous in KRaft: wait until the partitions have leaders, so the next command
            // (typically `annal produce`) finds the topic ready.
            let meta = client.created_topic(&name).await?;
            let count = created.partitions.unwrap_or(meta.partitions.len() as i32);
            writeln!(
                out,
                "created topic '{name}' with {count} partition{}{}",
                if count == 1 { "" } else { "s" },
                created
                    .replication_factor
                    .map(|r| format!(", replication factor {r}"))
                    .unwrap_or_default()
            )?;
        }
        TopicCommand::List { all, format } => {
            let mut topics = client.metadata(None).await?;
            topics.sort_by(|a, b| a.1.name.cmp(&b.1.name));
            let shown = topics.iter().map(|(_, t)| t).filter(|t| all || !t.internal);
            match format {
                ReportFormat::Text => {
                    for t in shown {
                        writeln!(out, "{}", t.name)?;
                    }
                }
                ReportFormat::Json => {
                    let list: Vec<Value> = shown
                        .map(|t| {
                            json!({
                                "name": t.name,
                                "id": (!t.id.is_nil()).then(|| t.id.to_string()),
                                "partitions": t.partitions.len(),
                                "replication_factor": replication_factor(t),
                                "internal": t.internal,
                            })
                        })
                        .collect();
                    writeln!(out, "{}", Value::Array(list))?;
                }
            }
        }
        TopicCommand::Describe { name, format } => {
            let meta = client.topic(&name).await?;
            let indexes: Vec<i32> = meta.partitions.iter().map(|p| p.index).collect();
            let earliest = client.list_offsets(&meta, &indexes, EARLIEST).await?;
            let latest = client.list_offsets(&meta, &indexes, LATEST).await?;
            let configs = client.describe_topic_configs(&name).await?;
            if format == ReportFormat::Json {
                writeln!(
                    out,
                    "{}",
                    describe_json(&meta, &earliest, &latest, &configs)
                )?;
                return finish(out);
            }
            let rf = replication_factor(&meta);
            writeln!(out, "Topic: {}", meta.name)?;
            if !meta.id.is_nil() {
                writeln!(out, "Id: {}", meta.id)?;
            }
            writeln!(
                out,
                "Partitions: {}  Replication factor: {rf}{}",
                meta.partitions.len(),
                if meta.internal { "  (internal)" } else { "" }
            )?;
            writeln!(out)?;
            let rows: Vec<[String; 6]> = meta
                .partitions
                .iter()
                .map(|p| {
                    [
                        p.index.to_string(),
                        if p.leader < 0 {
                            "none".into()
                        } else {
                            p.leader.to_string()
                        },
                        join(&p.replicas),
                        join(&p.isr),
                        earliest
                            .get(&p.index)
                            .map(|o| o.offset.to_string())
                            .unwrap_or_default(),
                        latest
                            .get(&p.index)
                            .map(|o| o.offset.to_string())
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(
                &mut out,
                &[
                    "PARTITION",
                    "LEADER",
                    "REPLICAS",
                    "ISR",
                    "EARLIEST",
                    "LATEST",
                ],
                &rows,
            );
            writeln!(out)?;
            writeln!(out, "Configs:")?;
            let rows: Vec<[String; 3]> = configs
                .iter()
                .map(|c| {
                    let value = if c.sensitive {
                        "(sensitive)".to_string()
                    } else {
                        c.value.clone().unwrap_or_else(|| "null".into())
                    };
                    [c.name.clone(), value, source_label(c.source, c.read_only)]
                })
                .collect();
            print_table(&mut out, &["NAME", "VALUE", "SOURCE"], &rows);
        }
        TopicCommand::Alter {
            name,
            configs,
            delete,
        } => {
            if configs.is_empty() && delete.is_empty() {
                bail!("nothing to change: give -c KEY=VALUE or --delete-config KEY, e.g. `annal topic alter {name} -c retention.ms=3600000`");
            }
            client.alter_topic_configs(&name, &configs, &delete).await?;
            // The controller applies the change and this broker learns it from the metadata log a moment
            // later: wait (bounded) until it shows, so the next `describe` or produce sees it.
            if !wait_for_configs(&mut client, &name, &configs, &delete).await? {
                eprintln!(
                    "note: the change was accepted but broker at {} does not show it yet; check with \
                     `annal topic describe {name}` in a moment",
                    args.broker.brokers
                );
            }
            let mut changes: Vec<String> =
                configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            changes.extend(delete.iter().map(|k| format!("{k} (reset to default)")));
            writeln!(out, "updated topic '{name}': {}", changes.join(", "))?;
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await?;
            writeln!(out, "deleted topic '{name}'")?;
        }
        TopicCommand::AddPartitions { name, to } => {
            topic_partitions::add_partitions(&mut client, &name, to, &mut out).await?;
        }
        TopicCommand::Trim {
            name,
            partitions,
            offset,
            before,
            dry_run,
            format,
        } => {
            let target = match (offset, before) {
                (Some(o), _) => TrimTarget::Offset(o),
                (None, Some(t)) => TrimTarget::Before(t),
                (None, None) => unreachable!("clap requires --offset or --before"),
            };
            // The table is printed even when some partitions failed, then the error.
            let result = topic_partitions::trim(
                &mut client,
                &name,
                &partitions,
                target,
                dry_run,
                format,
                &mut out,
            )
            .await;
            finish(out)?;
            return result;
        }
    }
    finish(out)
}

/// Polls the topic's configs until every set value and removed override shows; false if it never did.
async fn wait_for_configs(
    client: &mut annal_client::Client,
    name: &str,
    set: &[(String, String)],
    deleted: &[String],
) -> Result<bool> {
    const POLLS: u32 = 50; // 5 s
    for _ in 0..POLLS {
        let configs = client.describe_topic_configs(name).await?;
        let shows = |key: &str| configs.iter().find(|c| c.name == key);
        let set_visible = set.iter().all(|(k, v)| {
            shows(k).is_some_and(|c| c.sensitive || c.value.as_deref() == Some(v.as_str()))
        });
        let deleted_visible = deleted
            .iter()
            .all(|k| shows(k).is_none_or(|c| c.source != ConfigSource::TopicOverride));
        if set_visible && deleted_visible {
            return Ok(true);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(false)
}

fn finish(out: String) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Replicas of the first partition (Kafka's tools report one factor per topic).
fn replication_factor(meta: &TopicMetadata) -> usize {
    meta.partitions.first().map_or(0, |p| p.replicas.len())
}

fn describe_json(
    meta: &TopicMetadata,
    earliest: &std::collections::BTreeMap<i32, ListedOffset>,
    latest: &std::collections::BTreeMap<i32, ListedOffset>,
    configs: &[ConfigEntry],
) -> Value {
    let partitions: Vec<Value> = meta
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.index,
                "leader": (p.leader >= 0).then_some(p.leader),
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "earliest": earliest.get(&p.index).map(|o| o.offset),
                "latest": latest.get(&p.index).map(|o| o.offset),
            })
        })
        .collect();
    let configs: Vec<Value> = configs
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "value": if c.sensitive { None } else { c.value.clone() },
                "source": c.source.label(),
                "read_only": c.read_only,
                "sensitive": c.sensitive,
            })
        })
        .collect();
    json!({
        "name": meta.name,
        "id": (!meta.id.is_nil()).then(|| meta.id.to_string()),
        "internal": meta.internal,
        "replication_factor": replication_factor(meta),
        "partitions": partitions,
        "configs": configs,
    })
}

/// Kafka's topic name rule: 1..=249 characters of [a-zA-Z0-9._-], not "." or "..". Checked here so the user
/// gets the rule rather than a bare INVALID_TOPIC_EXCEPTION.
pub fn validate_topic_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." {
        bail!("'{name}' is not a valid topic name");
    }
    if name.len() > 249 {
        bail!(
            "topic name is {} characters long; Kafka allows at most 249",
            name.len()
        );
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        bail!("topic name '{name}' contains '{c}'; use only letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

fn source_label(source: ConfigSource, read_only: bool) -> String {
    let mut s = source.label();
    if read_only {
        s.push_str(", read-only");
    }
    s
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("has space").is_err());
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }
}
