//! `annal group health [GROUP] [--watch]` and the STATUS / TIME-LAG columns of `annal group describe`: lag health
//! as the broker evaluates it (Burrow's rules over each partition's window of commits, the retention guard),
//! read from the broker's HTTP JSON API (`/v1/groups`). The Kafka protocol has no message for it; the broker
//! is the one that sees every commit, so the CLI asks it rather than sampling offsets itself.
//!
//! Each broker reports the groups it coordinates; `--http` takes every broker's HTTP address (comma-separated)
//! and the reports are merged.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use serde::Deserialize;

use super::output::{print_table, ReportFormat};

/// The broker's HTTP listener by default (`http.listen`).
pub const DEFAULT_HTTP: &str = "127.0.0.1:9644";
/// Longest a JSON answer may be (bounded memory whatever the server sends).
const RESPONSE_MAX_BYTES: usize = 64 << 20;
/// How long one HTTP exchange may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the brokers' HTTP listeners are.
#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// The brokers' HTTP listeners (`http.listen`), HOST:PORT, comma-separated: each reports the groups it
    /// coordinates.
    #[arg(long = "http", env = "ANNAL_HTTP", default_value = DEFAULT_HTTP, value_name = "HOST:PORT",
          global = true)]
    pub http: String,
}

/// One partition of a group's health report (the broker's `/v1/groups` JSON).
#[derive(Debug, Clone, Deserialize)]
pub struct PartitionHealth {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub lag: i64,
    pub time_lag_ms: i64,
    pub status: String,
    pub retention_time_to_loss_ms: Option<i64>,
    pub retention_warning: bool,
}

/// A group's health report.
#[derive(Debug, Clone, Deserialize)]
pub struct GroupHealth {
    pub group: String,
    pub state: String,
    pub members: usize,
    pub status: String,
    pub lag_records_sum: i64,
    pub time_lag_ms_max: i64,
    pub retention_time_to_loss_ms_min: Option<i64>,
    pub retention_warning: bool,
    pub records_lost_to_retention: u64,
    pub partitions: Vec<PartitionHealth>,
}

impl GroupHealth {
    pub fn unhealthy(&self) -> bool {
        self.status != "OK" || self.retention_warning
    }
}

/// GET `path` from `addr`: (status, body). HTTP/1.1 over one connection, bounded in size and time.
pub async fn get(addr: &str, path: &str) -> Result<(u16, Bytes)> {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to the broker's HTTP listener at {addr}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let driver = tokio::spawn(conn);
        let request = hyper::Request::get(path)
            .header(hyper::header::HOST, addr)
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), RESPONSE_MAX_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the answer of {addr}{path}: {e}"))?
            .to_bytes();
        driver.abort();
        Ok::<_, anyhow::Error>((status, body))
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow!("{addr}{path} did not answer within {HTTP_TIMEOUT:?}"))?
}

fn addresses(http: &str) -> Vec<&str> {
    http.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect()
}

/// Every group's report from every address (a group is reported by its coordinator only). Fails only if no
/// address answered.
pub async fn fetch_all(http: &str) -> Result<Vec<GroupHealth>> {
    let mut merged: BTreeMap<String, GroupHealth> = BTreeMap::new();
    let mut last_err = None;
    let mut answered = false;
    for addr in addresses(http) {
        match get(addr, "/v1/groups").await {
            Ok((200, body)) => {
                answered = true;
                let groups: Vec<GroupHealth> = serde_json::from_slice(&body)
                    .with_context(|| format!("{addr}/v1/groups is not a group report"))?;
                for g in groups {
                    merged.insert(g.group.clone(), g);
                }
            }
            Ok((status, _)) => last_err = Some(anyhow!("{addr}/v1/groups answered HTTP {status}")),
            Err(e) => last_err = Some(e),
        }
    }
    if !answered {
        return Err(last_err.unwrap_or_else(|| anyhow!("no HTTP address given; use --http HOST:PORT")))
            .context("cannot read group health; is the broker's HTTP listener (http.listen) on and reachable? pass it with --http HOST:PORT");
    }
    Ok(merged.into_values().collect())
}

/// One group's report from the first address that coordinates it; `None` if none does (or none answers).
pub async fn fetch_one(http: &str, group: &str) -> Option<GroupHealth> {
    for addr in addresses(http) {
        if let Ok((200, body)) = get(addr, &format!("/v1/groups/{}", encode_path(group))).await {
            // "UNKNOWN": the console's view of a group coordinated elsewhere (lag only, no health): ask on.
            if let Ok(g) = serde_json::from_slice::<GroupHealth>(&body) {
                if g.status != "UNKNOWN" {
                    return Some(g);
                }
            }
        }
    }
    None
}

/// Percent-encodes a path segment (group ids may hold any character).
fn encode_path(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A duration in ms as people read it: 850ms, 12s, 3m20s, 2h05m, 3d04h.
pub fn human_ms(ms: i64) -> String {
    let s = ms / 1000;
    match ms {
        ms if ms < 1000 => format!("{ms}ms"),
        _ if s < 60 => format!("{s}s"),
        _ if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn ttl_text(ttl: Option<i64>, warning: bool) -> String {
    match ttl {
        None => "-".into(),
        Some(ms) if warning => format!("{} (WARNING)", human_ms(ms)),
        Some(ms) => human_ms(ms),
    }
}

/// `annal group health`.
pub async fn health(
    http: &HttpArgs,
    group: Option<&str>,
    watch: Option<u64>,
    format: ReportFormat,
) -> Result<()> {
    loop {
        let mut out = String::new();
        let groups = fetch_all(&http.http).await?;
        let groups: Vec<GroupHealth> = groups
            .into_iter()
            .filter(|g| group.is_none_or(|name| g.group == name))
            .collect();
        if let Some(name) = group {
            if groups.is_empty() {
                bail!("group '{name}' is not reported by {}: no broker there coordinates it, or it has no committed offsets; check the name with `annal group list`", http.http);
            }
        }
        render(&groups, format, &mut out)?;
        let unhealthy: Vec<&str> = groups
            .iter()
            .filter(|g| g.unhealthy())
            .map(|g| g.group.as_str())
            .collect();
        let mut stdout = std::io::stdout().lock();
        if watch.is_some() && format == ReportFormat::Text {
            writeln!(
                stdout,
                "--- {}",
                chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
            )?;
        }
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        drop(stdout);
        match watch {
            Some(every) => tokio::time::sleep(Duration::from_secs(every.max(1))).await,
            None if unhealthy.is_empty() => return Ok(()),
            None => bail!(
                "{} group(s) not healthy: {}",
                unhealthy.len(),
                unhealthy.join(", ")
            ),
        }
    }
}

fn render(groups: &[GroupHealth], format: ReportFormat, out: &mut String) -> Result<()> {
    if format == ReportFormat::Json {
        let value: Vec<serde_json::Value> = groups
            .iter()
            .map(|g| {
                serde_json::json!({
                    "group": g.group, "state": g.state, "members": g.members, "status": g.status,
                    "lag": g.lag_records_sum, "time_lag_ms": g.time_lag_ms_max,
                    "retention_time_to_loss_ms": g.retention_time_to_loss_ms_min,
                    "retention_warning": g.retention_warning,
                    "records_lost_to_retention": g.records_lost_to_retention,
                    "unhealthy_partitions": g.partitions.iter()
                        .filter(|p| p.status != "OK" || p.retention_warning)
                        .map(|p| serde_json::json!({
                            "topic": p.topic, "partition": p.partition, "status": p.status,
                            "committed_offset": p.committed_offset, "lag": p.lag,
                            "time_lag_ms": p.time_lag_ms, "retention_time_to_loss_ms": p.retention_time_to_loss_ms,
                        }))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(value))?;
        return Ok(());
    }
    if groups.is_empty() {
        writeln!(out, "No groups with committed offsets.")?;
        return Ok(());
    }
    let rows: Vec<[String; 8]> = groups
        .iter()
        .map(|g| {
            [
                g.group.clone(),
                g.state.clone(),
                g.members.to_string(),
                g.status.clone(),
                g.lag_records_sum.to_string(),
                human_ms(g.time_lag_ms_max),
                ttl_text(g.retention_time_to_loss_ms_min, g.retention_warning),
                g.records_lost_to_retention.to_string(),
            ]
        })
        .collect();
    print_table(
        out,
        &[
            "GROUP",
            "STATE",
            "MEMBERS",
            "STATUS",
            "LAG",
            "TIME-LAG",
            "RETENTION-TTL",
            "LOST",
        ],
        &rows,
    );
    let bad: Vec<[String; 7]> = groups
        .iter()
        .flat_map(|g| {
            g.partitions
                .iter()
                .filter(|p| p.status != "OK" || p.retention_warning)
                .map(move |p| {
                    [
                        g.group.clone(),
                        p.topic.clone(),
                        p.partition.to_string(),
                        p.status.clone(),
                        p.lag.to_string(),
                        human_ms(p.time_lag_ms),
                        ttl_text(p.retention_time_to_loss_ms, p.retention_warning),
                    ]
                })
        })
        .collect();
    if !bad.is_empty() {
        writeln!(out)?;
        print_table(
            out,
            &[
                "GROUP",
                "TOPIC",
                "PARTITION",
                "STATUS",
                "LAG",
                "TIME-LAG",
                "RETENTION-TTL",
            ],
            &bad,
        );
    }
    writeln!(out)?;
    writeln!(out, "STATUS by Burrow's rules over the last lag.window.commits commits: WARN lag growing while offsets advance; ERR if a partition is STALL (same offset, lagging), STOP (no commits for longer than the window spans) or REWIND (offset went back). RETENTION-TTL: time until retention deletes the next unconsumed record.")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(12_000), "12s");
        assert_eq!(human_ms(200_000), "3m20s");
        assert_eq!(human_ms(7_500_000), "2h05m");
        assert_eq!(human_ms(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }

    #[test]
    fn group_ids_are_escaped_in_paths() {
        assert_eq!(encode_path("billing"), "billing");
        assert_eq!(encode_path("a b/c"), "a%20b%2Fc");
    }
}
