//! `annal cluster describe|health`: the cluster's brokers, controller, partition health and metadata quorum, from
//! Metadata, DescribeCluster and (where the broker offers it) DescribeQuorum. `health` exits non-zero when the
//! cluster is unhealthy, like `rpk cluster health`, so scripts can wait on it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::output::{format_timestamp, print_table, ReportFormat};
use super::{connect, BrokerArgs};
use annal_client::{ClusterDescription, QuorumDescription, QuorumReplica};

/// Partitions listed by name in the text health report; the rest are counted.
const PARTITIONS_LISTED_MAX: usize = 20;
/// Upper bound of `--timeout` for `--exit-when-healthy`, so a script cannot wait forever by mistake.
const WAIT_TIMEOUT_SECS_MAX: u64 = 3600;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  annal cluster describe
  annal cluster health
  annal cluster health --exit-when-healthy --timeout 120   # wait for a starting cluster")]
pub struct ClusterArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Show the cluster id, controller, brokers, per-topic partition health and the metadata quorum.
    #[command(after_help = "Examples:
  annal cluster describe
  annal cluster describe --format json | jq '.topics[] | select(.offline_partitions > 0)'

The controller id is what brokers report in Metadata; in KRaft that is a live broker, and the active controller
is the quorum leader (shown when the broker answers DescribeQuorum).")]
    Describe {
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Report whether the cluster is healthy; exit 0 if so, 1 if not.
    #[command(after_help = "Examples:
  annal cluster health
  annal cluster health --format json
  annal cluster health --exit-when-healthy --timeout 60 && echo ready

Unhealthy means: a partition without a leader, a partition with fewer in-sync replicas than replicas, or a node
down (fenced, or in the metadata quorum but missing from Metadata's broker list).")]
    Health {
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
        /// Check again until the cluster is healthy (or --timeout passes); unreachable brokers count as unhealthy.
        #[arg(long)]
        exit_when_healthy: bool,
        /// With --exit-when-healthy: give up after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 60,
              value_parser = clap::value_parser!(u64).range(1..=WAIT_TIMEOUT_SECS_MAX))]
        timeout: u64,
        /// With --exit-when-healthy: milliseconds between checks.
        #[arg(long, value_name = "MS", default_value_t = 1000,
              value_parser = clap::value_parser!(u64).range(50..=60_000))]
        interval_ms: u64,
    },
}

pub async fn run(args: ClusterArgs) -> Result<()> {
    match args.command {
        ClusterCommand::Describe { format } => describe(&args.broker.brokers, format).await,
        ClusterCommand::Health {
            format,
            exit_when_healthy,
            timeout,
            interval_ms,
        } => {
            let report = if exit_when_healthy {
                wait_until_healthy(
                    &args.broker.brokers,
                    Duration::from_secs(timeout),
                    Duration::from_millis(interval_ms),
                )
                .await?
            } else {
                health(&args.broker.brokers).await?
            };
            let mut out = String::new();
            match format {
                ReportFormat::Json => writeln!(out, "{}", report.to_json())?,
                ReportFormat::Text => report.write_text(&mut out)?,
            }
            print(&out)?;
            if !report.is_healthy() {
                bail!(
                    "the cluster is not healthy: {}",
                    report.reasons().join(", ")
                );
            }
            Ok(())
        }
    }
}

fn print(out: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

async fn describe(brokers: &str, format: ReportFormat) -> Result<()> {
    let mut client = connect(brokers).await?;
    let cluster = client.describe_cluster().await?;
    let quorum = client.describe_quorum().await?;
    let mut out = String::new();
    match format {
        ReportFormat::Json => writeln!(out, "{}", describe_json(&cluster, quorum.as_ref()))?,
        ReportFormat::Text => describe_text(&cluster, quorum.as_ref(), &mut out)?,
    }
    print(&out)
}

fn describe_text(
    cluster: &ClusterDescription,
    quorum: Option<&QuorumDescription>,
    out: &mut String,
) -> Result<()> {
    writeln!(
        out,
        "cluster id: {}",
        cluster.cluster_id.as_deref().unwrap_or("-")
    )?;
    writeln!(out, "controller id: {}", cluster.controller_id)?;
    writeln!(out, "\nbrokers ({}):", cluster.brokers.len())?;
    let rows: Vec<[String; 4]> = cluster
        .brokers
        .iter()
        .map(|b| {
            [
                b.node_id.to_string(),
                format!("{}:{}", b.host, b.port),
                b.rack.clone().unwrap_or_else(|| "-".into()),
                if b.fenced { "fenced" } else { "active" }.into(),
            ]
        })
        .collect();
    print_table(out, &["ID", "HOST:PORT", "RACK", "STATUS"], &rows);
    writeln!(out, "\ntopics ({}):", cluster.topics.len())?;
    let rows: Vec<[String; 5]> = cluster
        .topics
        .iter()
        .map(|t| {
            let stats = TopicStats::of(t);
            [
                t.name.clone(),
                t.partitions.len().to_string(),
                stats.replication_factor.to_string(),
                stats.under_replicated.to_string(),
                stats.offline.to_string(),
            ]
        })
        .collect();
    print_table(
        out,
        &[
            "TOPIC",
            "PARTITIONS",
            "REPLICAS",
            "UNDER-REPLICATED",
            "OFFLINE",
        ],
        &rows,
    );
    for (name, code) in &cluster.topic_errors {
        writeln!(
            out,
            "topic '{name}': {}",
            annal_client::errors::error_name(*code)
        )?;
    }
    match quorum {
        None => writeln!(out, "\nquorum: not reported by this broker")?,
        Some(q) => {
            writeln!(
                out,
                "\nquorum: leader {}, epoch {}, high watermark {}",
                q.leader_id, q.leader_epoch, q.high_watermark
            )?;
            for (title, replicas) in [("voters", &q.voters), ("observers", &q.observers)] {
                if replicas.is_empty() {
                    writeln!(out, "{title}: none")?;
                    continue;
                }
                writeln!(out, "{title} ({}):", replicas.len())?;
                let rows: Vec<[String; 5]> = replicas.iter().map(replica_row).collect();
                print_table(
                    out,
                    &[
                        "ID",
                        "LOG-END-OFFSET",
                        "LAG",
                        "LAST-FETCH",
                        "LAST-CAUGHT-UP",
                    ],
                    &rows,
                );
            }
        }
    }
    Ok(())
}

fn replica_row(r: &QuorumReplica) -> [String; 5] {
    let time = |ms: i64| {
        if ms < 0 {
            "-".to_string()
        } else {
            format_timestamp(ms)
        }
    };
    [
        r.node_id.to_string(),
        r.log_end_offset.to_string(),
        r.lag.to_string(),
        time(r.last_fetch_timestamp),
        time(r.last_caught_up_timestamp),
    ]
}

fn describe_json(cluster: &ClusterDescription, quorum: Option<&QuorumDescription>) -> Value {
    let replica = |r: &QuorumReplica| {
        json!({
            "node_id": r.node_id,
            "log_end_offset": r.log_end_offset,
            "lag": r.lag,
            "last_fetch_timestamp": r.last_fetch_timestamp,
            "last_caught_up_timestamp": r.last_caught_up_timestamp,
        })
    };
    json!({
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "brokers": cluster.brokers.iter().map(|b| json!({
            "node_id": b.node_id,
            "host": b.host,
            "port": b.port,
            "rack": b.rack,
            "fenced": b.fenced,
        })).collect::<Vec<_>>(),
        "topics": cluster.topics.iter().map(|t| {
            let stats = TopicStats::of(t);
            json!({
                "name": t.name,
                "internal": t.internal,
                "partitions": t.partitions.len(),
                "replication_factor": stats.replication_factor,
                "under_replicated_partitions": stats.under_replicated,
                "offline_partitions": stats.offline,
            })
        }).collect::<Vec<_>>(),
        "topic_errors": cluster.topic_errors.iter().map(|(name, code)| json!({
            "name": name,
            "error": annal_client::errors::error_name(*code),
        })).collect::<Vec<_>>(),
        "quorum": quorum.map(|q| json!({
            "leader_id": q.leader_id,
            "leader_epoch": q.leader_epoch,
            "high_watermark": q.high_watermark,
            "voters": q.voters.iter().map(replica).collect::<Vec<_>>(),
            "observers": q.observers.iter().map(replica).collect::<Vec<_>>(),
        })),
    })
}

/// Per-topic partition health counts.
struct TopicStats {
    /// The largest replica count of any partition (partitions may differ after a reassignment).
    replication_factor: usize,
    under_replicated: usize,
    offline: usize,
}

impl TopicStats {
    fn of(topic: &annal_client::TopicMetadata) -> TopicStats {
        let ps = &topic.partitions;
        TopicStats {
            replication_factor: ps.iter().map(|p| p.replicas.len()).max().unwrap_or(0),
            under_replicated: ps.iter().filter(|p| p.is_under_replicated()).count(),
            offline: ps.iter().filter(|p| p.is_offline()).count(),
        }
    }
}

/// What `cluster health` found.
#[derive(Debug, Default)]
struct HealthReport {
    controller_id: i32,
    /// Quorum leader, when DescribeQuorum is offered.
    quorum_leader: Option<i32>,
    brokers: Vec<i32>,
    /// False when the broker does not offer DescribeQuorum: then only fenced brokers count as down.
    quorum_reported: bool,
    nodes_down: Vec<i32>,
    leaderless: Vec<(String, i32)>,
    under_replicated: Vec<(String, i32)>,
    /// Set when the cluster could not be asked at all (only while waiting with --exit-when-healthy).
    unreachable: Option<String>,
}

impl HealthReport {
    fn assess(cluster: &ClusterDescription, quorum: Option<&QuorumDescription>) -> HealthReport {
        let mut nodes_down: Vec<i32> = cluster
            .brokers
            .iter()
            .filter(|b| b.fenced)
            .map(|b| b.node_id)
            .collect();
        if let Some(q) = quorum {
            nodes_down.extend(q.nodes_down(cluster));
        }
        nodes_down.sort_unstable();
        nodes_down.dedup();
        let partitions = |pick: fn(&annal_client::PartitionMetadata) -> bool| {
            cluster
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .filter(move |p| pick(p))
                        .map(move |p| (t.name.clone(), p.index))
                })
                .collect::<Vec<_>>()
        };
        HealthReport {
            controller_id: cluster.controller_id,
            quorum_leader: quorum.map(|q| q.leader_id),
            brokers: cluster
                .brokers
                .iter()
                .filter(|b| !b.fenced)
                .map(|b| b.node_id)
                .collect(),
            quorum_reported: quorum.is_some(),
            nodes_down,
            leaderless: partitions(|p| p.is_offline()),
            under_replicated: partitions(|p| p.is_under_replicated()),
            unreachable: None,
        }
    }

    fn unreachable(err: &anyhow::Error) -> HealthReport {
        HealthReport {
            controller_id: -1,
            unreachable: Some(format!("{err:#}")),
            ..HealthReport::default()
        }
    }

    fn is_healthy(&self) -> bool {
        self.reasons().is_empty()
    }

    /// Why the cluster is unhealthy (empty when healthy), in rpk's words.
    fn reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if let Some(err) = &self.unreachable {
            reasons.push(format!("cluster unreachable ({err})"));
        }
        if !self.nodes_down.is_empty() {
            reasons.push(format!("nodes_down ({})", self.nodes_down.len()));
        }
        if !self.leaderless.is_empty() {
            reasons.push(format!("leaderless_partitions ({})", self.leaderless.len()));
        }
        if !self.under_replicated.is_empty() {
            reasons.push(format!(
                "under_replicated_partitions ({})",
                self.under_replicated.len()
            ));
        }
        reasons
    }

    fn write_text(&self, out: &mut String) -> Result<()> {
        let list = |ids: &[i32]| {
            let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
            format!("[{}]", ids.join(", "))
        };
        let partitions = |ps: &[(String, i32)]| {
            let mut names: Vec<String> = ps
                .iter()
                .take(PARTITIONS_LISTED_MAX)
                .map(|(t, p)| format!("{t}/{p}"))
                .collect();
            if ps.len() > PARTITIONS_LISTED_MAX {
                names.push(format!("... and {} more", ps.len() - PARTITIONS_LISTED_MAX));
            }
            format!("[{}]", names.join(", "))
        };
        writeln!(out, "healthy:                     {}", self.is_healthy())?;
        if !self.is_healthy() {
            writeln!(
                out,
                "unhealthy reasons:           {}",
                self.reasons().join(", ")
            )?;
        }
        if self.unreachable.is_some() {
            return Ok(());
        }
        writeln!(out, "controller id:               {}", self.controller_id)?;
        match self.quorum_leader {
            Some(leader) => writeln!(out, "quorum leader:               {leader}")?,
            None => writeln!(
                out,
                "quorum leader:               not reported by this broker"
            )?,
        }
        writeln!(out, "brokers:                     {}", list(&self.brokers))?;
        write!(
            out,
            "nodes down:                  {}",
            list(&self.nodes_down)
        )?;
        if !self.quorum_reported {
            write!(out, " (fenced brokers only: DescribeQuorum not offered)")?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "leaderless partitions:       {}",
            partitions(&self.leaderless)
        )?;
        writeln!(
            out,
            "under-replicated partitions: {}",
            partitions(&self.under_replicated)
        )?;
        Ok(())
    }

    fn to_json(&self) -> Value {
        let partitions = |ps: &[(String, i32)]| {
            ps.iter()
                .map(|(t, p)| json!({"topic": t, "partition": p}))
                .collect::<Vec<_>>()
        };
        json!({
            "healthy": self.is_healthy(),
            "unhealthy_reasons": self.reasons(),
            "controller_id": self.controller_id,
            "quorum_leader_id": self.quorum_leader,
            "brokers": self.brokers,
            "quorum_reported": self.quorum_reported,
            "nodes_down": self.nodes_down,
            "leaderless_partitions": partitions(&self.leaderless),
            "under_replicated_partitions": partitions(&self.under_replicated),
        })
    }
}

async fn health(brokers: &str) -> Result<HealthReport> {
    let mut client = connect(brokers).await?;
    let cluster = client.describe_cluster().await?;
    let quorum = client.describe_quorum().await?;
    Ok(HealthReport::assess(&cluster, quorum.as_ref()))
}

/// Checks every `interval` until healthy or `timeout` has passed, with a fresh connection each time (the
/// broker may not be up yet, or may restart meanwhile). Returns the last report.
async fn wait_until_healthy(
    brokers: &str,
    timeout: Duration,
    interval: Duration,
) -> Result<HealthReport> {
    let deadline = Instant::now() + timeout;
    let mut last_reasons: Vec<String> = Vec::new();
    loop {
        let report = match health(brokers).await {
            Ok(report) => report,
            Err(e) => HealthReport::unreachable(&e),
        };
        if report.is_healthy() || Instant::now() + interval > deadline {
            return Ok(report);
        }
        let reasons = report.reasons();
        if reasons != last_reasons {
            eprintln!("waiting: {}", reasons.join(", "));
            last_reasons = reasons;
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_client::{ClusterBroker, PartitionMetadata, TopicMetadata};

    fn partition(index: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionMetadata {
        PartitionMetadata {
            index,
            leader,
            leader_epoch: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
        }
    }

    fn cluster(partitions: Vec<PartitionMetadata>, fenced: bool) -> ClusterDescription {
        ClusterDescription {
            cluster_id: Some("c".into()),
            controller_id: 1,
            brokers: [1, 2]
                .into_iter()
                .map(|id| ClusterBroker {
                    node_id: id,
                    host: "h".into(),
                    port: 9092,
                    rack: None,
                    fenced: fenced && id == 2,
                })
                .collect(),
            topics: vec![TopicMetadata {
                name: "t".into(),
                id: Default::default(),
                internal: false,
                partitions,
            }],
            topic_errors: vec![],
        }
    }

    #[test]
    fn healthy_only_without_leaderless_under_replicated_or_down() {
        let ok = HealthReport::assess(
            &cluster(vec![partition(0, 1, &[1, 2], &[1, 2])], false),
            None,
        );
        assert!(ok.is_healthy(), "{:?}", ok.reasons());
        let bad = HealthReport::assess(
            &cluster(
                vec![
                    partition(0, -1, &[1, 2], &[1, 2]),
                    partition(1, 1, &[1, 2], &[1]),
                ],
                true,
            ),
            None,
        );
        assert!(!bad.is_healthy());
        assert_eq!(bad.leaderless, vec![("t".to_string(), 0)]);
        assert_eq!(bad.under_replicated, vec![("t".to_string(), 1)]);
        assert_eq!(bad.nodes_down, vec![2]);
        assert_eq!(bad.brokers, vec![1]);
        assert_eq!(
            bad.reasons(),
            vec![
                "nodes_down (1)",
                "leaderless_partitions (1)",
                "under_replicated_partitions (1)"
            ]
        );
        let mut text = String::new();
        bad.write_text(&mut text).unwrap();
        assert!(
            text.contains("healthy:                     false"),
            "{text}"
        );
        assert!(text.contains("[t/0]") && text.contains("[t/1]"), "{text}");
    }
}
