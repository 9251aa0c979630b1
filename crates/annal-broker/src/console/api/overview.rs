//! `GET /v1/overview`: brokers, controller, quorum, partition health, groups and disk at a glance.
//!
//! Brokers and partition counts come from this broker's metadata image (the same on every broker, and free to
//! read for 10,000 topics); the quorum is DescribeQuorum through the console's client; group counts are the
//! groups this broker coordinates (their lag health is only known here).

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::{within_timeout, ApiResult, Ctx};

#[derive(Serialize)]
struct Overview {
    cluster_id: String,
    this_broker: i32,
    controller_id: Option<i32>,
    brokers: Vec<BrokerView>,
    quorum: Option<QuorumView>,
    topics: usize,
    partitions: usize,
    under_replicated_partitions: usize,
    offline_partitions: usize,
    groups: usize,
    groups_unhealthy: usize,
    disk: Vec<DiskView>,
    ready: bool,
    version: &'static str,
}

#[derive(Serialize)]
struct BrokerView {
    node_id: i32,
    host: String,
    port: u16,
    rack: Option<String>,
    is_controller: bool,
    fenced: bool,
}

#[derive(Serialize)]
struct QuorumView {
    leader_id: i32,
    leader_epoch: i32,
    high_watermark: i64,
    voters: Vec<VoterView>,
}

#[derive(Serialize)]
struct VoterView {
    node_id: i32,
    log_end_offset: i64,
}

#[derive(Serialize)]
struct DiskView {
    path: String,
    used_bytes: u64,
    free_bytes: u64,
    total_bytes: u64,
}

pub async fn get_overview(ctx: Ctx) -> ApiResult<Response> {
    let quorum = within_timeout("DescribeQuorum", async {
        let mut client = ctx.client().await?;
        // Not authorized to describe the cluster (or an old broker): the page shows the rest.
        Ok(client.describe_quorum().await.ok().flatten())
    })
    .await?;
    let b = ctx.broker.clone();
    let mut overview = crate::blocking(move || local_overview(&b)).await;
    if let Some(q) = quorum {
        overview.controller_id = Some(q.leader_id);
        for broker in &mut overview.brokers {
            broker.is_controller = broker.node_id == q.leader_id;
        }
        overview.quorum = Some(QuorumView {
            leader_id: q.leader_id,
            leader_epoch: q.leader_epoch,
            high_watermark: q.high_watermark,
            voters: q
                .voters
                .iter()
                .map(|v| VoterView {
                    node_id: v.node_id,
                    log_end_offset: v.log_end_offset,
                })
                .collect(),
        });
    }
    Ok(Json(overview).into_response())
}

/// Everything this broker knows without a request (blocking: it reads the group reports).
fn local_overview(broker: &crate::Broker) -> Overview {
    let image = broker.cluster().image();
    let (mut partitions, mut urp, mut offline) = (0, 0, 0);
    for t in image.topics.values() {
        for p in t.partitions.values() {
            partitions += 1;
            if p.leader < 0 {
                offline += 1;
            } else if p.isr.len() < p.replicas.len() {
                urp += 1;
            }
        }
    }
    let brokers = image
        .brokers
        .values()
        .map(|b| {
            let endpoint = b.listeners.first();
            BrokerView {
                node_id: b.id,
                host: endpoint.map(|e| e.host.clone()).unwrap_or_default(),
                port: endpoint.map_or(0, |e| e.port),
                rack: b.rack.clone(),
                is_controller: false,
                fenced: b.fenced,
            }
        })
        .collect();
    let reports = crate::ops::groups::reports(broker, None);
    let data_dir = broker.config().data_dir.clone();
    let used_bytes = broker
        .replica_manager()
        .topics()
        .iter()
        .flat_map(|t| broker.replica_manager().partitions_of(&t.name))
        .map(|p| p.size_bytes())
        .sum();
    let disk = crate::ops::process::disk_free_and_total(&data_dir)
        .map(|(free_bytes, total_bytes)| DiskView {
            path: data_dir.display().to_string(),
            used_bytes,
            free_bytes,
            total_bytes,
        })
        .into_iter()
        .collect();
    Overview {
        cluster_id: broker.cluster_id().to_string(),
        this_broker: broker.config().node_id,
        controller_id: None,
        brokers,
        quorum: None,
        topics: image.topics.len(),
        partitions,
        under_replicated_partitions: urp,
        offline_partitions: offline,
        groups: reports.len(),
        groups_unhealthy: reports.iter().filter(|r| r.unhealthy()).count(),
        disk,
        ready: image.last_applied_offset.is_some() && !broker.cluster().lease().fenced,
        version: env!("CARGO_PKG_VERSION"),
    }
}
