//! Consumer groups: the paged list (ListGroups through the console's client, so it spans the cluster and the
//! authorizer filters it; lag health from this broker's reports for the groups it coordinates), a group's
//! detail (its report plus DescribeGroups' members), offset resets (ListOffsets + OffsetCommit, dry run first)
//! and DeleteGroups.
//!
//! A group coordinated by another broker has no lag health here: its status is "UNKNOWN", its coordinator
//! named, and its detail's lag computed from OffsetFetch and ListOffsets (honest, and documented).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use annal_client::{Client, ListedGroup, MemberAssignment, EARLIEST, LATEST};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{check_confirm, parse_body, within_timeout, ApiError, ApiResult, Ctx, Paging, Query};
use crate::ops::groups::GroupReport;
use crate::Broker;

const SORT_FIELDS: &[&str] = &["name", "lag", "state", "status", "time_lag_ms"];
const STATUS_UNKNOWN: &str = "UNKNOWN";

#[derive(Serialize)]
struct GroupSummary {
    group: String,
    state: String,
    kind: String,
    members: Option<usize>,
    status: String,
    lag_records_sum: Option<i64>,
    time_lag_ms_max: Option<i64>,
    retention_time_to_loss_ms_min: Option<i64>,
    retention_warning: bool,
    /// The broker coordinating the group (-1: its `__consumer_offsets` partition has no leader).
    coordinator: i32,
}

/// The coordinator of a group from the local image: the leader of its `__consumer_offsets` partition.
fn coordinator_of(broker: &Broker, group: &str) -> i32 {
    let partition = broker.groups().partition_for(group) as i32;
    let image = broker.cluster().image();
    image
        .topic_by_name("__consumer_offsets")
        .and_then(|t| t.partitions.get(&partition))
        .map_or(-1, |p| p.leader)
}

fn status_rank(status: &str) -> u8 {
    match status {
        "OK" => 0,
        "WARN" => 1,
        "ERR" => 2,
        "STOP" => 3,
        "STALL" => 4,
        _ => 5,
    }
}

/// `GET /v1/groups`: with `page=` the paged list; without, the operations array (`ops::http`).
pub async fn get_list(
    State(broker): State<Arc<Broker>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    if !super::wants_page(raw.as_deref()) {
        return crate::ops::http::groups_array(broker).await;
    }
    match Ctx::authorize(&broker, &method, uri.path(), &headers) {
        Ok(ctx) => list(ctx, raw.as_deref()).await.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list(ctx: Ctx, raw: Option<&str>) -> ApiResult<Response> {
    let query = Query::parse(raw)?;
    let paging = Paging::parse(&query, SORT_FIELDS)?;
    let state_filter = query.get("state").map(str::to_lowercase);
    let status_filter = query.get("status").map(str::to_uppercase);
    let listed = within_timeout("ListGroups", async {
        let mut client = ctx.client().await?;
        client
            .list_groups(&[], &[])
            .await
            .map_err(ApiError::from_client)
    })
    .await?;
    let (field, descending) = paging
        .sort
        .as_ref()
        .map(|(f, d)| (f.clone(), *d))
        .unwrap_or(("name".to_string(), false));
    let b = ctx.broker.clone();
    let page = crate::blocking(move || {
        let listed = listed.into_iter().filter(|g| paging.matches(&g.group_id));
        if status_filter.is_none() && matches!(field.as_str(), "name" | "state") {
            // Name and state come with ListGroups: the list is filtered, sorted and paged first, and only the
            // page's groups pay for a report (lag, time lag and time to loss read each of their partitions).
            let mut items: Vec<ListedGroup> = listed
                .filter(|g| {
                    state_filter
                        .as_ref()
                        .is_none_or(|s| g.state.as_deref().unwrap_or_default().to_lowercase() == *s)
                })
                .collect();
            if field == "state" {
                items.sort_by(|x, y| {
                    x.state
                        .cmp(&y.state)
                        .then_with(|| x.group_id.cmp(&y.group_id))
                });
            } else {
                items.sort_by(|x, y| x.group_id.cmp(&y.group_id));
            }
            if descending {
                items.reverse();
            }
            let page = paging.page_of(items);
            let names: HashSet<String> = page.items.iter().map(|g| g.group_id.clone()).collect();
            let reports = reports_by_group(crate::ops::groups::reports_of(&b, &names));
            return page.map(|g| summary_of(&b, g, &reports));
        }
        let reports = reports_by_group(crate::ops::groups::reports(&b, None));
        let mut items: Vec<GroupSummary> = listed
            .map(|g| summary_of(&b, g, &reports))
            .filter(|g| {
                state_filter
                    .as_ref()
                    .is_none_or(|s| g.state.to_lowercase() == *s)
            })
            .filter(|g| status_filter.as_ref().is_none_or(|s| g.status == *s))
            .collect();
        items.sort_by(|a, b| {
            let o = match field.as_str() {
                "lag" => a.lag_records_sum.cmp(&b.lag_records_sum),
                "state" => a.state.cmp(&b.state),
                "status" => status_rank(&a.status).cmp(&status_rank(&b.status)),
                "time_lag_ms" => a.time_lag_ms_max.cmp(&b.time_lag_ms_max),
                _ => std::cmp::Ordering::Equal,
            }
            .then_with(|| a.group.cmp(&b.group));
            if descending {
                o.reverse()
            } else {
                o
            }
        });
        paging.page_of(items)
    })
    .await;
    Ok(Json(page).into_response())
}

fn reports_by_group(reports: Vec<GroupReport>) -> HashMap<String, GroupReport> {
    reports.into_iter().map(|r| (r.group.clone(), r)).collect()
}

/// A listed group with its lag health from this broker's report, or `UNKNOWN` and its coordinator when another
/// broker coordinates it.
fn summary_of(
    broker: &Broker,
    g: ListedGroup,
    reports: &HashMap<String, GroupReport>,
) -> GroupSummary {
    match reports.get(&g.group_id) {
        Some(r) => GroupSummary {
            group: r.group.clone(),
            state: r.state.to_string(),
            kind: r.kind.to_string(),
            members: Some(r.members),
            status: r.status.name().to_string(),
            lag_records_sum: Some(r.lag_records_sum),
            time_lag_ms_max: Some(r.time_lag_ms_max),
            retention_time_to_loss_ms_min: r.retention_time_to_loss_ms_min,
            retention_warning: r.retention_warning,
            coordinator: broker.config().node_id,
        },
        None => GroupSummary {
            coordinator: coordinator_of(broker, &g.group_id),
            group: g.group_id,
            state: g.state.unwrap_or_default(),
            kind: g.group_type.unwrap_or_else(|| "classic".into()),
            members: None,
            status: STATUS_UNKNOWN.to_string(),
            lag_records_sum: None,
            time_lag_ms_max: None,
            retention_time_to_loss_ms_min: None,
            retention_warning: false,
        },
    }
}

#[derive(Serialize)]
struct MemberView {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    assignment: Vec<AssignedTopic>,
}

#[derive(Serialize)]
struct AssignedTopic {
    topic: String,
    partitions: Vec<i32>,
}

/// The partitions of a group coordinated elsewhere: committed offsets and lag, no health.
#[derive(Serialize)]
struct RemotePartition {
    topic: String,
    partition: i32,
    committed_offset: i64,
    high_watermark: i64,
    lag: i64,
    status: &'static str,
    time_lag_ms: Option<i64>,
    retention_time_to_loss_ms: Option<i64>,
    retention_warning: bool,
    window: Vec<()>,
}

/// Latest offsets of every partition of `topic` (one ListOffsets per leader).
async fn latest_offsets(client: &mut Client, topic: &str) -> ApiResult<BTreeMap<i32, i64>> {
    let meta = client.topic(topic).await.map_err(ApiError::from_client)?;
    let indexes: Vec<i32> = meta.partitions.iter().map(|p| p.index).collect();
    let listed = client
        .list_offsets(&meta, &indexes, LATEST)
        .await
        .map_err(ApiError::from_client)?;
    Ok(listed.into_iter().map(|(p, o)| (p, o.offset)).collect())
}

/// `GET /v1/groups/{group}`: the report (this broker's, or lag-only from OffsetFetch + ListOffsets when another
/// broker coordinates it) with `member_list` and `coordinator`.
pub async fn get_detail(ctx: Ctx, Path(group): Path<String>) -> ApiResult<Response> {
    let b = ctx.broker.clone();
    let name = group.clone();
    let local = crate::blocking(move || crate::ops::groups::reports(&b, Some(&name)).pop()).await;
    let value = within_timeout(&format!("describing group '{group}'"), async {
        let mut client = ctx.client().await?;
        let described = client
            .describe_group(&group)
            .await
            .map_err(ApiError::from_client)?;
        if described.state == "Dead" && local.is_none() {
            return Err(ApiError::not_found(
                "GROUP_ID_NOT_FOUND",
                format!("group '{group}' does not exist (or this principal may not describe it)"),
            ));
        }
        let members: Vec<MemberView> = described
            .members
            .iter()
            .map(|m| MemberView {
                member_id: m.member_id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                assignment: match &m.assignment {
                    MemberAssignment::Decoded(a) => a
                        .partitions
                        .iter()
                        .map(|(t, p)| AssignedTopic {
                            topic: t.clone(),
                            partitions: p.clone(),
                        })
                        .collect(),
                    _ => Vec::new(),
                },
            })
            .collect();
        let mut value = match local {
            Some(report) => serde_json::to_value(report).unwrap_or_default(),
            None => remote_report(&mut client, &group, &described).await?,
        };
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "member_list".into(),
                serde_json::to_value(members).unwrap_or_default(),
            );
            object.insert("coordinator".into(), described.coordinator.node_id.into());
        }
        Ok(value)
    })
    .await?;
    Ok(Json(value).into_response())
}

/// A group another broker coordinates, as far as Kafka APIs tell: committed offsets and lag.
async fn remote_report(
    client: &mut Client,
    group: &str,
    described: &annal_client::GroupDescription,
) -> ApiResult<serde_json::Value> {
    let offsets = client
        .fetch_offsets(group)
        .await
        .map_err(ApiError::from_client)?;
    let mut partitions = Vec::new();
    for (topic, parts) in &offsets {
        let latest = latest_offsets(client, topic).await?;
        for (p, committed) in parts {
            let Ok(c) = committed else { continue };
            let hw = latest.get(p).copied().unwrap_or(-1);
            partitions.push(RemotePartition {
                topic: topic.clone(),
                partition: *p,
                committed_offset: c.offset,
                high_watermark: hw,
                lag: (hw - c.offset).max(0),
                status: STATUS_UNKNOWN,
                time_lag_ms: None,
                retention_time_to_loss_ms: None,
                retention_warning: false,
                window: Vec::new(),
            });
        }
    }
    let lag_sum: i64 = partitions.iter().map(|p| p.lag).sum();
    let lag_max: i64 = partitions.iter().map(|p| p.lag).max().unwrap_or(0);
    Ok(serde_json::json!({
        "group": group,
        "state": described.state,
        "kind": described.group_type,
        "members": described.members.len(),
        "status": STATUS_UNKNOWN,
        "lag_records_sum": lag_sum,
        "lag_records_max": lag_max,
        "time_lag_ms_max": null,
        "retention_time_to_loss_ms_min": null,
        "retention_warning": false,
        "partitions": partitions,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetBody {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    partitions: Option<Vec<i32>>,
    to: String,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    timestamp_ms: Option<i64>,
    #[serde(default)]
    shift: Option<i64>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Serialize)]
struct ResetRow {
    topic: String,
    partition: i32,
    current_offset: Option<i64>,
    new_offset: i64,
    lag_before: Option<i64>,
    lag_after: i64,
}

/// Where a reset moves one partition, within [log start, high watermark] (as kafka-consumer-groups does).
enum Target {
    Earliest,
    Latest,
    Offset(i64),
    Timestamp(i64),
    Shift(i64),
}

impl Target {
    fn parse(body: &ResetBody) -> ApiResult<Target> {
        let need = |v: Option<i64>, name: &str| {
            v.ok_or_else(|| ApiError::bad_request(format!("to={} needs \"{name}\"", body.to)))
        };
        Ok(match body.to.as_str() {
            "earliest" => Target::Earliest,
            "latest" => Target::Latest,
            "offset" => Target::Offset(need(body.offset, "offset")?),
            "timestamp" => Target::Timestamp(need(body.timestamp_ms, "timestamp_ms")?),
            "shift" => Target::Shift(need(body.shift, "shift")?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "to={other}: use earliest, latest, offset, timestamp or shift"
                )))
            }
        })
    }
}

/// `POST /v1/groups/{group}/offsets`: reset committed offsets; a dry run only answers what would change.
pub async fn reset_offsets(
    ctx: Ctx,
    Path(group): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let body: ResetBody = parse_body(&body)?;
    let target = Target::parse(&body)?;
    if let Some(ps) = &body.partitions {
        if ps.is_empty()
            || ps.len() > super::limits::PARTITIONS_MAX as usize
            || ps.iter().any(|p| *p < 0)
        {
            return Err(ApiError::bad_request(
                "partitions: a non-empty list of partition numbers (0 and up), or null for all",
            ));
        }
        if body.topic.is_none() {
            return Err(ApiError::bad_request("partitions needs a topic"));
        }
    }
    let answer = within_timeout(&format!("resetting the offsets of group '{group}'"), async {
        let mut client = ctx.client().await?;
        let described = client.describe_group(&group).await.map_err(ApiError::from_client)?;
        if !body.dry_run && !described.members.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "NON_EMPTY_GROUP",
                format!(
                    "group '{group}' has {} active member(s) (state {}); stop its consumers first (a dry run still answers)",
                    described.members.len(),
                    described.state
                ),
            ));
        }
        let committed = client.fetch_offsets(&group).await.map_err(ApiError::from_client)?;
        let topics: Vec<String> = match &body.topic {
            Some(t) => vec![t.clone()],
            None => committed.keys().cloned().collect(),
        };
        if topics.is_empty() {
            return Err(ApiError::bad_request(format!(
                "group '{group}' has no committed offsets; name a topic to reset"
            )));
        }
        let mut rows = Vec::new();
        for topic in &topics {
            rows.extend(plan_topic(&mut client, topic, &body, &target, committed.get(topic)).await?);
        }
        if !body.dry_run {
            for topic in &topics {
                let offsets: BTreeMap<i32, i64> = rows
                    .iter()
                    .filter(|r| &r.topic == topic)
                    .map(|r| (r.partition, r.new_offset))
                    .collect();
                let codes = client
                    .commit_offsets(&group, topic, &offsets)
                    .await
                    .map_err(ApiError::from_client)?;
                if let Some((p, code)) = codes.iter().find(|(_, c)| **c != 0) {
                    return Err(ApiError::kafka(
                        *code,
                        format!(
                            "committing partition {p} of '{topic}' for group '{group}' failed: {}",
                            annal_client::group_error(&group, *code)
                        ),
                    ));
                }
            }
        }
        Ok(rows)
    })
    .await?;
    Ok(Json(serde_json::json!({
        "dry_run": body.dry_run,
        "group": group,
        "partitions": answer,
    }))
    .into_response())
}

/// The reset rows of one topic: which partitions, from where to where.
async fn plan_topic(
    client: &mut Client,
    topic: &str,
    body: &ResetBody,
    target: &Target,
    committed: Option<&BTreeMap<i32, Result<annal_client::CommittedOffset, i16>>>,
) -> ApiResult<Vec<ResetRow>> {
    let meta = client.topic(topic).await.map_err(ApiError::from_client)?;
    let partitions: Vec<i32> = match (&body.partitions, committed) {
        (Some(ps), _) => ps.clone(),
        (None, Some(c)) if body.topic.is_none() => c.keys().copied().collect(),
        _ => meta.partitions.iter().map(|p| p.index).collect(),
    };
    let earliest = client
        .list_offsets(&meta, &partitions, EARLIEST)
        .await
        .map_err(ApiError::from_client)?;
    let latest = client
        .list_offsets(&meta, &partitions, LATEST)
        .await
        .map_err(ApiError::from_client)?;
    let by_time = match target {
        Target::Timestamp(ts) => Some(
            client
                .list_offsets(&meta, &partitions, (*ts).max(0))
                .await
                .map_err(ApiError::from_client)?,
        ),
        _ => None,
    };
    let mut rows = Vec::new();
    for p in partitions {
        let start = earliest.get(&p).map_or(0, |o| o.offset);
        let end = latest.get(&p).map_or(start, |o| o.offset);
        let current = committed
            .and_then(|c| c.get(&p))
            .and_then(|r| r.as_ref().ok())
            .map(|c| c.offset)
            .filter(|o| *o >= 0);
        let wanted = match target {
            Target::Earliest => start,
            Target::Latest => end,
            Target::Offset(o) => *o,
            Target::Timestamp(_) => by_time
                .as_ref()
                .and_then(|m| m.get(&p))
                .map(|o| o.offset)
                .filter(|o| *o >= 0)
                .unwrap_or(end),
            Target::Shift(s) => current.unwrap_or(start).saturating_add(*s),
        };
        let new_offset = wanted.clamp(start, end.max(start));
        rows.push(ResetRow {
            topic: topic.to_string(),
            partition: p,
            current_offset: current,
            new_offset,
            lag_before: current.map(|c| (end - c).max(0)),
            lag_after: (end - new_offset).max(0),
        });
    }
    Ok(rows)
}

/// `DELETE /v1/groups/{group}?confirm={group}`: DeleteGroups.
pub async fn delete_group(
    ctx: Ctx,
    Path(group): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    check_confirm(&Query::parse(raw.as_deref())?, &group, "group")?;
    let results = within_timeout(&format!("deleting group '{group}'"), async {
        let mut client = ctx.client().await?;
        client
            .delete_groups(std::slice::from_ref(&group))
            .await
            .map_err(ApiError::from_client)
    })
    .await?;
    match results.first() {
        Some((_, 0)) => Ok(StatusCode::NO_CONTENT.into_response()),
        Some((_, code)) => Err(ApiError::kafka(
            *code,
            annal_client::group_error(&group, *code),
        )),
        None => Err(ApiError::from_client(anyhow::anyhow!(
            "the coordinator answered DeleteGroups without group '{group}'"
        ))),
    }
}
