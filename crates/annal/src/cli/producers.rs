//! `annal producers TOPIC`: the idempotent and transactional producers a partition's leader keeps state for
//! (DescribeProducers, KIP-664), like `kafka-transactions describe-producers`.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

use super::output::{format_timestamp, print_table, ReportFormat};
use super::{connect, BrokerArgs};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal producers orders
  annal producers orders -p 0
  annal producers orders --format json | jq '.[] | select(.current_txn_start_offset >= 0)'

Columns: PRODUCER-ID and EPOCH identify the producer; LAST-SEQUENCE is the sequence number of its last record
in the partition; LAST-TIMESTAMP the time of its last write; COORDINATOR-EPOCH the epoch of the transaction
coordinator that last wrote a marker for it (- if none); TXN-START-OFFSET the first offset of its open
transaction (- if none). Producers the broker expired (producer.id.expiration.ms) are not listed.")]
pub struct ProducersArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Topic.
    pub topic: String,
    /// Only these partitions (repeat or comma-separate; default: all).
    #[arg(short = 'p', long = "partition", value_name = "P", value_delimiter = ',',
          value_parser = clap::value_parser!(i32).range(0..))]
    pub partitions: Vec<i32>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

pub async fn run(args: ProducersArgs) -> Result<()> {
    let mut client = connect(&args.broker.brokers).await?;
    let meta = client.topic(&args.topic).await?;
    let partitions: Vec<i32> = if args.partitions.is_empty() {
        meta.partitions.iter().map(|p| p.index).collect()
    } else {
        let mut ps = args.partitions.clone();
        ps.sort_unstable();
        ps.dedup();
        ps
    };
    let described = client.describe_producers(&meta, &partitions).await?;
    let mut out = String::new();
    let mut errors = Vec::new();
    let mut rows: Vec<[String; 7]> = Vec::new();
    let mut json_rows: Vec<Value> = Vec::new();
    for (partition, result) in &described {
        match result {
            Err(e) => errors.push(format!(
                "cannot describe the producers of partition {partition} of '{}': {e}",
                args.topic
            )),
            Ok(producers) => {
                for s in producers {
                    let dash = |v: i64| if v < 0 { "-".into() } else { v.to_string() };
                    rows.push([
                        partition.to_string(),
                        s.producer_id.to_string(),
                        s.epoch.to_string(),
                        s.last_sequence.to_string(),
                        format_timestamp(s.last_timestamp),
                        dash(i64::from(s.coordinator_epoch)),
                        dash(s.current_txn_start_offset),
                    ]);
                    json_rows.push(json!({
                        "topic": args.topic,
                        "partition": partition,
                        "producer_id": s.producer_id,
                        "producer_epoch": s.epoch,
                        "last_sequence": s.last_sequence,
                        "last_timestamp": s.last_timestamp,
                        "coordinator_epoch": s.coordinator_epoch,
                        "current_txn_start_offset": s.current_txn_start_offset,
                    }));
                }
            }
        }
    }
    match args.format {
        ReportFormat::Json => writeln!(out, "{}", Value::Array(json_rows))?,
        ReportFormat::Text if rows.is_empty() => {
            if errors.is_empty() {
                eprintln!(
                    "no active producers on {} of '{}'",
                    if partitions.len() == 1 {
                        format!("partition {}", partitions[0])
                    } else {
                        format!("{} partitions", partitions.len())
                    },
                    args.topic
                );
            }
        }
        ReportFormat::Text => print_table(
            &mut out,
            &[
                "PARTITION",
                "PRODUCER-ID",
                "EPOCH",
                "LAST-SEQUENCE",
                "LAST-TIMESTAMP",
                "COORDINATOR-EPOCH",
                "TXN-START-OFFSET",
            ],
            &rows,
        ),
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    match errors.len() {
        0 => Ok(()),
        _ => bail!("{}", errors.join("\n")),
    }
}
