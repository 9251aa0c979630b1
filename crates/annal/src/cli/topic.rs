//! `annal topic create|list|describe|alter|delete`.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::output::print_table;
use super::{connect, parse_key_value, BrokerArgs};
use annal_client::{ConfigSource, EARLIEST, LATEST};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal topic create orders -p 3 -c retention.ms=86400000
  annal topic list
  annal topic describe orders
  annal topic alter orders -c retention.ms=3600000
  annal topic delete orders
  annal topic list -b kafka-1:9092")]
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
  annal topic list --all          # include internal topics such as __consumer_offsets")]
    List {
        /// Include internal topics.
        #[arg(long)]
        all: bool,
    },
    /// Show a topic's partitions (leader, replicas, earliest and latest offsets) and configs.
    #[command(after_help = "Examples:
  annal topic describe orders")]
    Describe {
        /// Topic name.
        name: String,
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
        TopicCommand::List { all } => {
            let mut topics = client.metadata(None).await?;
            topics.sort_by(|a, b| a.1.name.cmp(&b.1.name));
            for (_, t) in topics {
                if all || !t.internal {
                    writeln!(out, "{}", t.name)?;
                }
            }
        }
        TopicCommand::Describe { name } => {
            let meta = client.topic(&name).await?;
            let indexes: Vec<i32> = meta.partitions.iter().map(|p| p.index).collect();
            let earliest = client.list_offsets(&meta, &indexes, EARLIEST).await?;
            let latest = client.list_offsets(&meta, &indexes, LATEST).await?;
            let configs = client.describe_topic_configs(&name).await?;
            let rf = meta
                .partitions
                .first()
                .map(|p| p.replicas.len())
                .unwrap_or(0);
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
            let mut changes: Vec<String> =
                configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            changes.extend(delete.iter().map(|k| format!("{k} (reset to default)")));
            writeln!(out, "updated topic '{name}': {}", changes.join(", "))?;
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await?;
            writeln!(out, "deleted topic '{name}'")?;
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
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
