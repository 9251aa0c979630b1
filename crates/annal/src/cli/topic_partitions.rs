//! `annal topic add-partitions` (CreatePartitions) and `annal topic trim` (DeleteRecords).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use super::output::{print_table, ReportFormat};
use annal_client::{delete_records_error, Client, DeletedRecords, TopicMetadata, EARLIEST, LATEST};

/// `--offset` of `topic trim`: an offset, or the end of each partition (delete every record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimOffset {
    At(i64),
    End,
}

pub fn parse_trim_offset(s: &str) -> Result<TrimOffset, String> {
    match s {
        "end" | "latest" => Ok(TrimOffset::End),
        s => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(TrimOffset::At(n)),
            _ => Err(format!(
                "'{s}' is not an offset; give the new first offset (e.g. 1000) or `end` to delete every record"
            )),
        },
    }
}

/// Where a trim moves the log start of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimTarget {
    Offset(TrimOffset),
    /// Delete the records before the first one at or after this time (ms).
    Before(i64),
}

pub async fn add_partitions(
    client: &mut Client,
    name: &str,
    to: i32,
    out: &mut String,
) -> Result<()> {
    let meta = client.topic(name).await?;
    let current = meta.partitions.len();
    if usize::try_from(to).unwrap_or(0) <= current {
        bail!(
            "topic '{name}' already has {current} partition{}; Kafka can only add partitions, so give --to a \
             number above {current}",
            if current == 1 { "" } else { "s" }
        );
    }
    let grown = client.create_partitions(name, to).await?;
    writeln!(
        out,
        "topic '{name}' now has {} partitions (was {current}); records with a key may now go to another \
         partition than before",
        grown.partitions.len()
    )?;
    Ok(())
}

/// One partition of a trim: its log start before and after.
#[derive(Debug)]
struct TrimRow {
    partition: i32,
    log_start_before: i64,
    /// The requested new log start (at least the old one).
    target: i64,
    log_start_after: Option<i64>,
    error: Option<String>,
}

impl TrimRow {
    /// Offsets removed: records, for logs without compaction gaps or transaction markers.
    fn removed(&self) -> Option<i64> {
        self.log_start_after
            .map(|after| (after - self.log_start_before).max(0))
    }
}

pub async fn trim(
    client: &mut Client,
    name: &str,
    partitions: &[i32],
    target: TrimTarget,
    dry_run: bool,
    format: ReportFormat,
    out: &mut String,
) -> Result<()> {
    let meta = client.topic(name).await?;
    let partitions = select_partitions(&meta, partitions)?;
    let earliest = client.list_offsets(&meta, &partitions, EARLIEST).await?;
    let latest = client.list_offsets(&meta, &partitions, LATEST).await?;
    let by_time = match target {
        TrimTarget::Before(ts) => Some(client.list_offsets(&meta, &partitions, ts).await?),
        TrimTarget::Offset(_) => None,
    };
    let offset_of = |m: &BTreeMap<i32, annal_client::ListedOffset>, p: i32| {
        m.get(&p).map(|o| o.offset).ok_or_else(|| {
            anyhow!("the broker did not list offsets for partition {p} of topic '{name}'")
        })
    };
    let mut rows = Vec::with_capacity(partitions.len());
    for &p in &partitions {
        let (lo, hi) = (offset_of(&earliest, p)?, offset_of(&latest, p)?);
        let wanted = match target {
            TrimTarget::Offset(TrimOffset::End) => hi,
            TrimTarget::Offset(TrimOffset::At(n)) => {
                if n > hi {
                    bail!(
                        "partition {p} of topic '{name}' ends at offset {hi}; trim it to at most {hi} (or use \
                         --offset end to delete every record)"
                    );
                }
                n
            }
            TrimTarget::Before(_) => match &by_time {
                // -1: every record is older than the time.
                Some(m) => match offset_of(m, p)? {
                    found if found < 0 => hi,
                    found => found,
                },
                None => hi,
            },
        };
        rows.push(TrimRow {
            partition: p,
            log_start_before: lo,
            target: wanted.max(lo),
            log_start_after: dry_run.then_some(wanted.max(lo)),
            error: None,
        });
    }
    let to_delete: BTreeMap<i32, i64> = rows
        .iter()
        .filter(|r| r.target > r.log_start_before)
        .map(|r| (r.partition, r.target))
        .collect();
    if !dry_run {
        let results = if to_delete.is_empty() {
            BTreeMap::new()
        } else {
            client.delete_records(&meta, &to_delete).await?
        };
        for row in &mut rows {
            match results.get(&row.partition) {
                None => row.log_start_after = Some(row.log_start_before),
                Some(DeletedRecords::LogStart(after)) => row.log_start_after = Some(*after),
                Some(DeletedRecords::Failed(code)) => {
                    row.error = Some(delete_records_error(name, row.partition, row.target, *code))
                }
            }
        }
    }
    render_trim(name, &rows, dry_run, format, out)?;
    let failures: Vec<&str> = rows.iter().filter_map(|r| r.error.as_deref()).collect();
    match failures.len() {
        0 => Ok(()),
        1 => bail!("{}", failures[0]),
        n => bail!(
            "{n} partitions were not trimmed:\n  {}",
            failures.join("\n  ")
        ),
    }
}

fn render_trim(
    name: &str,
    rows: &[TrimRow],
    dry_run: bool,
    format: ReportFormat,
    out: &mut String,
) -> Result<()> {
    let total: i64 = rows.iter().filter_map(TrimRow::removed).sum();
    match format {
        ReportFormat::Json => {
            let partitions: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "partition": r.partition,
                        "log_start_before": r.log_start_before,
                        "log_start_after": r.log_start_after,
                        "removed": r.removed(),
                        "error": r.error,
                    })
                })
                .collect();
            writeln!(
                out,
                "{}",
                json!({ "topic": name, "dry_run": dry_run, "removed": total, "partitions": partitions })
            )?;
        }
        ReportFormat::Text => {
            writeln!(
                out,
                "{} {total} record{} from topic '{name}'",
                if dry_run { "would remove" } else { "removed" },
                if total == 1 { "" } else { "s" }
            )?;
            let table: Vec<[String; 4]> = rows
                .iter()
                .map(|r| {
                    [
                        r.partition.to_string(),
                        r.log_start_before.to_string(),
                        r.log_start_after.map_or("-".into(), |o| o.to_string()),
                        match (&r.error, r.removed()) {
                            (Some(_), _) => "failed".into(),
                            (None, Some(n)) => n.to_string(),
                            (None, None) => "-".into(),
                        },
                    ]
                })
                .collect();
            print_table(
                out,
                &["PARTITION", "OLD-START", "NEW-START", "REMOVED"],
                &table,
            );
        }
    }
    Ok(())
}

/// The named partitions (checked to exist), or all of them.
fn select_partitions(meta: &TopicMetadata, partitions: &[i32]) -> Result<Vec<i32>> {
    if partitions.is_empty() {
        return Ok(meta.partitions.iter().map(|p| p.index).collect());
    }
    for p in partitions {
        if !meta.partitions.iter().any(|m| m.index == *p) {
            bail!(
                "topic '{}' has no partition {p}; it has {} (0..{})",
                meta.name,
                meta.partitions.len(),
                meta.partitions.len().saturating_sub(1)
            );
        }
    }
    let mut out = partitions.to_vec();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_offsets() {
        assert_eq!(parse_trim_offset("100"), Ok(TrimOffset::At(100)));
        assert_eq!(parse_trim_offset("end"), Ok(TrimOffset::End));
        assert!(parse_trim_offset("-1").unwrap_err().contains("`end`"));
    }

    #[test]
    fn removed_counts_never_go_negative() {
        let row = TrimRow {
            partition: 0,
            log_start_before: 10,
            target: 10,
            log_start_after: Some(10),
            error: None,
        };
        assert_eq!(row.removed(), Some(0));
        let row = TrimRow {
            log_start_after: Some(25),
            ..row
        };
        assert_eq!(row.removed(), Some(15));
    }
}
