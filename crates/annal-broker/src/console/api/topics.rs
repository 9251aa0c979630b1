//! Topics: the paged list (from the local metadata image and replica manager: no round trip per topic), one
//! topic's detail (Metadata, ListOffsets, DescribeConfigs, DescribeAcls through the console's client), and the
//! changes (CreateTopics, IncrementalAlterConfigs, CreatePartitions, DeleteTopics).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use annal_metadata::image::MetadataImage;

use annal_client::{Client, ConfigSource, EARLIEST, LATEST};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{CreateTopicsRequest, IncrementalAlterConfigsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde::{Deserialize, Serialize};

use super::{
    acls, check_confirm, limits, parse_body, within_timeout, ApiError, ApiResult, Ctx, Paging,
    Query,
};
use crate::Broker;

const SORT_FIELDS: &[&str] = &["name", "size_bytes", "partitions", "records"];
const ADMIN_TIMEOUT_MS: i32 = 15_000;

#[derive(Serialize, Clone)]
pub struct TopicSummary {
    name: String,
    id: String,
    internal: bool,
    partitions: usize,
    replication_factor: usize,
    size_bytes: u64,
    records: i64,
    produce_bytes_per_s: Option<f64>,
    under_replicated_partitions: usize,
    offline_partitions: usize,
    /// At most [`TOPIC_GROUPS_INLINE_MAX`], those with the most lag.
    groups: Vec<TopicGroup>,
    /// Every group with committed offsets on the topic (coordinated here).
    groups_total: usize,
}

#[derive(Serialize, Clone)]
struct TopicGroup {
    group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    lag: i64,
}

/// Kafka's internal topics (`Topic.isInternal`).
fn is_internal(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state"
}

/// `GET /v1/topics`: with `page=` the paged list; without, the older array (`ops::http`), which stays an
/// operations endpoint (no session needed, like `/metrics`).
pub async fn get_list(
    axum::extract::State(broker): axum::extract::State<std::sync::Arc<Broker>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    if !super::wants_page(raw.as_deref()) {
        return crate::ops::http::topics_array(broker).await;
    }
    match Ctx::authorize(&broker, &method, uri.path(), &headers) {
        Ok(ctx) => list(ctx, raw.as_deref()).await.into_response(),
        Err(e) => e.into_response(),
    }
}

/// At most this many groups are named inline on a topic of the list (those with the most lag); `groups_total`
/// counts them all. A topic read by 10,000 groups would otherwise put 10,000 chips in one cell of the page.
pub const TOPIC_GROUPS_INLINE_MAX: usize = 10;

/// What the list shows of a topic that only changes with the metadata image (name, partitions, replicas,
/// ISR): kept sorted by name until the image changes, so a page costs its own items, not the whole cluster.
#[derive(Clone)]
struct TopicEntry {
    name: String,
    id: String,
    internal: bool,
    partitions: usize,
    replication_factor: usize,
    under_replicated_partitions: usize,
    offline_partitions: usize,
}

/// The name-sorted [`TopicEntry`]s of one metadata image. A new image (any topic, partition or ISR change) is
/// a new `Arc`, so the cache is rebuilt on the first list request after a change and never serves old data.
#[derive(Default)]
pub struct TopicListCache {
    built: parking_lot::Mutex<Option<BuiltTopicList>>,
}

/// The image a list was built from, and the list.
type BuiltTopicList = (Arc<MetadataImage>, Arc<Vec<TopicEntry>>);

impl TopicListCache {
    fn entries(&self, image: Arc<MetadataImage>) -> Arc<Vec<TopicEntry>> {
        let mut built = self.built.lock();
        if let Some((of, entries)) = built.as_ref() {
            if Arc::ptr_eq(of, &image) {
                return entries.clone();
            }
        }
        let entries: Arc<Vec<TopicEntry>> = Arc::new(
            image
                .topic_ids_by_name
                .values()
                .filter_map(|id| image.topics.get(id))
                .map(|t| TopicEntry {
                    name: t.name.clone(),
                    id: t.id.to_string(),
                    internal: is_internal(&t.name),
                    partitions: t.partitions.len(),
                    replication_factor: t
                        .partitions
                        .values()
                        .next()
                        .map_or(0, |p| p.replicas.len()),
                    under_replicated_partitions: t
                        .partitions
                        .values()
                        .filter(|p| p.leader >= 0 && p.isr.len() < p.replicas.len())
                        .count(),
                    offline_partitions: t.partitions.values().filter(|p| p.leader < 0).count(),
                })
                .collect(),
        );
        debug_assert!(entries.windows(2).all(|w| w[0].name < w[1].name));
        *built = Some((image, entries.clone()));
        entries
    }
}

/// The paged list.
async fn list(ctx: Ctx, raw: Option<&str>) -> ApiResult<Response> {
    let query = Query::parse(raw)?;
    let paging = Paging::parse(&query, SORT_FIELDS)?;
    let internal = query.flag("internal")?;
    // With an authorizer, the principal sees only the topics it may describe: one Metadata request for all
    // topics tells which (the broker filters it), the rest comes from the local image.
    let visible: Option<HashSet<String>> = if ctx.broker.authorizer().is_some() {
        Some(
            within_timeout("Metadata", async {
                let mut client = ctx.client().await?;
                let topics = client.metadata(None).await.map_err(ApiError::from_client)?;
                Ok(topics
                    .into_iter()
                    .filter(|(code, _)| *code == 0)
                    .map(|(_, t)| t.name)
                    .collect())
            })
            .await?,
        )
    } else {
        None
    };
    let b = ctx.broker.clone();
    let page = crate::blocking(move || {
        let entries = b.console().topic_list.entries(b.cluster().image());
        let matching: Vec<&TopicEntry> = entries
            .iter()
            .filter(|t| visible.as_ref().is_none_or(|v| v.contains(&t.name)))
            .filter(|t| internal.is_none_or(|i| i == t.internal))
            .filter(|t| paging.matches(&t.name))
            .collect();
        let (field, descending) = paging
            .sort
            .as_ref()
            .map(|(f, d)| (f.as_str(), *d))
            .unwrap_or(("name", false));
        let mut page = if field == "name" {
            // Already in name order: only the page's topics read their partitions' sizes.
            let mut matching = matching;
            if descending {
                matching.reverse();
            }
            paging.page_of(matching).map(|t| summary(&b, t))
        } else {
            let mut items: Vec<TopicSummary> =
                matching.into_iter().map(|t| summary(&b, t)).collect();
            sort(&mut items, field, descending);
            paging.page_of(items)
        };
        let names: HashSet<&str> = page.items.iter().map(|t| t.name.as_str()).collect();
        let mut by_topic = groups_by_topic(&b, &names);
        for t in &mut page.items {
            let mut groups = by_topic.remove(&t.name).unwrap_or_default();
            t.groups_total = groups.len();
            groups.sort_by(|a, b| b.lag.cmp(&a.lag).then_with(|| a.group.cmp(&b.group)));
            groups.truncate(TOPIC_GROUPS_INLINE_MAX);
            t.groups = groups;
        }
        page
    })
    .await;
    Ok(Json(page).into_response())
}

fn sort(items: &mut [TopicSummary], field: &str, descending: bool) {
    items.sort_by(|a, b| {
        let o = match field {
            "size_bytes" => a.size_bytes.cmp(&b.size_bytes),
            "partitions" => a.partitions.cmp(&b.partitions),
            "records" => a.records.cmp(&b.records),
            _ => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.name.cmp(&b.name));
        if descending {
            o.reverse()
        } else {
            o
        }
    });
}

/// One topic of the list, with sizes and record counts of the partitions this broker holds.
fn summary(broker: &Broker, t: &TopicEntry) -> TopicSummary {
    let local = broker.replica_manager().partitions_of(&t.name);
    TopicSummary {
        name: t.name.clone(),
        id: t.id.clone(),
        internal: t.internal,
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        size_bytes: local.iter().map(|p| p.size_bytes()).sum(),
        records: local
            .iter()
            .map(|p| (p.high_watermark() - p.log_start_offset()).max(0))
            .sum(),
        produce_bytes_per_s: None,
        under_replicated_partitions: t.under_replicated_partitions,
        offline_partitions: t.offline_partitions,
        groups: Vec::new(),
        groups_total: 0,
    }
}

/// The groups this broker coordinates with committed offsets on one of `topics`, by topic, with their lag on
/// it (high watermark - committed offset, summed over the partitions held here, as in the group reports). Only
/// those offsets are read, and no full report is computed: a topic read by 10,000 groups costs 10,000
/// subtractions. Blocking.
fn groups_by_topic(broker: &Broker, topics: &HashSet<&str>) -> HashMap<String, Vec<TopicGroup>> {
    let mut out: HashMap<String, Vec<TopicGroup>> = HashMap::new();
    if topics.is_empty() {
        return out;
    }
    for g in broker.groups().overview_on_topics(topics) {
        let mut lag: BTreeMap<&str, i64> = BTreeMap::new();
        for o in &g.offsets {
            if let Some(part) = crate::ops::groups::local_partition(broker, &o.topic, o.partition) {
                *lag.entry(o.topic.as_str()).or_default() +=
                    (part.high_watermark() - o.offset).max(0);
            }
        }
        for (topic, lag) in lag {
            out.entry(topic.to_string()).or_default().push(TopicGroup {
                group: g.group.clone(),
                state: Some(g.state.to_string()),
                lag,
            });
        }
    }
    out
}

#[derive(Serialize)]
pub struct TopicDetail {
    name: String,
    id: String,
    internal: bool,
    partitions: Vec<PartitionDetail>,
    configs: Vec<ConfigView>,
    acls: Vec<acls::Acl>,
    groups: Vec<TopicGroup>,
}

#[derive(Serialize)]
struct PartitionDetail {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    offline_replicas: Vec<i32>,
    high_watermark: i64,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Known for the partitions this broker holds.
    size_bytes: Option<u64>,
}

#[derive(Serialize)]
pub struct ConfigView {
    name: String,
    value: Option<String>,
    source: String,
    default: bool,
    read_only: bool,
    sensitive: bool,
}

/// A topic name as Kafka accepts it (`Topic.validate`): checked before it goes into a request.
fn check_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_TOPIC_EXCEPTION",
            format!("'{name}' is not a valid topic name: 1 to 249 of a-z A-Z 0-9 . _ -"),
        ))
    }
}

/// The configs of a topic as the page shows them.
async fn configs(client: &mut Client, topic: &str) -> ApiResult<Vec<ConfigView>> {
    let entries = client
        .describe_topic_configs(topic)
        .await
        .map_err(ApiError::from_client)?;
    Ok(entries
        .into_iter()
        .map(|e| ConfigView {
            default: e.source == ConfigSource::Default,
            source: e.source.label(),
            value: if e.sensitive { None } else { e.value },
            name: e.name,
            read_only: e.read_only,
            sensitive: e.sensitive,
        })
        .collect())
}

/// One topic, read through the console's client (so the principal must be allowed to describe it).
async fn detail_of(ctx: &Ctx, name: &str) -> ApiResult<TopicDetail> {
    check_name(name)?;
    let mut client = ctx.client().await?;
    let meta = client.topic(name).await.map_err(ApiError::from_client)?;
    let indexes: Vec<i32> = meta.partitions.iter().map(|p| p.index).collect();
    let earliest = client
        .list_offsets(&meta, &indexes, EARLIEST)
        .await
        .map_err(ApiError::from_client)?;
    let latest = client
        .list_offsets(&meta, &indexes, LATEST)
        .await
        .map_err(ApiError::from_client)?;
    let configs = configs(&mut client, name).await?;
    let acls = acls::for_topic(&mut client, name).await;
    drop(client);
    let rm = ctx.broker.replica_manager();
    let image = ctx.broker.cluster().image();
    let partitions = meta
        .partitions
        .iter()
        .map(|p| {
            let local = rm.partition(name, p.index);
            let hw = latest.get(&p.index).map_or(-1, |o| o.offset);
            PartitionDetail {
                partition: p.index,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                offline_replicas: p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| image.broker(*r).is_none_or(|b| !b.is_live()))
                    .collect(),
                high_watermark: hw,
                log_start_offset: earliest.get(&p.index).map_or(-1, |o| o.offset),
                log_end_offset: local.as_ref().map_or(hw, |l| l.log_end_offset()),
                size_bytes: local.map(|l| l.size_bytes()),
            }
        })
        .collect();
    let b = ctx.broker.clone();
    let topic = name.to_string();
    let groups = crate::blocking(move || {
        groups_by_topic(&b, &HashSet::from([topic.as_str()]))
            .remove(&topic)
            .unwrap_or_default()
    })
    .await;
    Ok(TopicDetail {
        name: meta.name,
        id: meta.id.to_string(),
        internal: meta.internal,
        partitions,
        configs,
        acls,
        groups,
    })
}

/// `GET /v1/topics/{topic}`.
pub async fn detail(ctx: Ctx, Path(topic): Path<String>) -> ApiResult<Response> {
    let d = within_timeout(
        &format!("describing topic '{topic}'"),
        detail_of(&ctx, &topic),
    )
    .await?;
    Ok(Json(d).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    #[serde(default)]
    partitions: Option<i32>,
    #[serde(default)]
    replication_factor: Option<i16>,
    #[serde(default)]
    configs: BTreeMap<String, String>,
    #[serde(default)]
    validate_only: bool,
}

/// `POST /v1/topics`: CreateTopics.
pub async fn create(ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let body: CreateBody = parse_body(&body)?;
    check_name(&body.name)?;
    let partitions = body.partitions.unwrap_or(-1);
    if partitions != -1 && !(1..=limits::PARTITIONS_MAX).contains(&partitions) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_PARTITIONS",
            format!(
                "partitions={partitions}: from 1 to {} (or -1 for the broker's default)",
                limits::PARTITIONS_MAX
            ),
        ));
    }
    let rf = body.replication_factor.unwrap_or(-1);
    if rf != -1 && rf < 1 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_REPLICATION_FACTOR",
            format!("replication_factor={rf}: at least 1 (or -1 for the broker's default)"),
        ));
    }
    let name = body.name.clone();
    let created = within_timeout(&format!("creating topic '{name}'"), async {
        let mut client = ctx.client().await?;
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_validate_only(body.validate_only)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.clone())))
                .with_num_partitions(partitions)
                .with_replication_factor(rf)
                .with_configs(
                    body.configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.clone()))
                                .with_value(Some(StrBytes::from_string(v.clone())))
                        })
                        .collect(),
                )]);
        let response = client
            .admin_request(&request, (4, 7))
            .await
            .map_err(ApiError::from_client)?;
        let result = response
            .topics
            .into_iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| {
                ApiError::from_client(anyhow::anyhow!(
                    "the broker answered CreateTopics without topic '{name}'"
                ))
            })?;
        if result.error_code != 0 {
            let message = result
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            return Err(ApiError::kafka(
                result.error_code,
                format!(
                    "cannot create topic '{name}': {}",
                    annal_client::errors::describe(result.error_code, Some(&message))
                ),
            ));
        }
        Ok((result.num_partitions, result.replication_factor))
    })
    .await?;
    if body.validate_only {
        return Ok(Json(serde_json::json!({
            "validate_only": true, "name": body.name,
            "partitions": created.0, "replication_factor": created.1,
        }))
        .into_response());
    }
    // Wait until the new topic has leaders, then answer what a describe answers.
    within_timeout("waiting for the new topic", async {
        let mut client = ctx.client().await?;
        client
            .created_topic(&body.name)
            .await
            .map_err(ApiError::from_client)
    })
    .await?;
    let d = within_timeout("describing the new topic", detail_of(&ctx, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(d)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlterBody {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    delete: Vec<String>,
    #[serde(default)]
    validate_only: bool,
}

/// `PATCH /v1/topics/{topic}/configs`: IncrementalAlterConfigs (SET and DELETE), then the configs again.
pub async fn alter_configs(
    ctx: Ctx,
    Path(topic): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    check_name(&topic)?;
    let body: AlterBody = parse_body(&body)?;
    if body.set.is_empty() && body.delete.is_empty() {
        return Err(ApiError::bad_request(
            "nothing to change: give \"set\" and/or \"delete\"",
        ));
    }
    let configs = within_timeout(&format!("changing the configs of '{topic}'"), async {
        let mut client = ctx.client().await?;
        let mut entries: Vec<AlterableConfig> = body
            .set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .collect();
        entries.extend(body.delete.iter().map(|k| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(k.clone()))
                .with_config_operation(1)
        }));
        let request = IncrementalAlterConfigsRequest::default()
            .with_validate_only(body.validate_only)
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.clone()))
                .with_configs(entries)]);
        let response = client
            .admin_request(&request, (0, 1))
            .await
            .map_err(ApiError::from_client)?;
        for r in response.responses {
            if r.error_code != 0 {
                let message = r.error_message.as_ref().map(|m| m.to_string());
                return Err(ApiError::kafka(
                    r.error_code,
                    format!(
                        "cannot change the configs of topic '{topic}': {}",
                        annal_client::errors::describe(r.error_code, message.as_deref())
                    ),
                ));
            }
        }
        configs(&mut client, &topic).await
    })
    .await?;
    Ok(Json(configs).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionsBody {
    count: i32,
}

/// `POST /v1/topics/{topic}/partitions`: CreatePartitions to a new total.
pub async fn add_partitions(
    ctx: Ctx,
    Path(topic): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    check_name(&topic)?;
    let body: PartitionsBody = parse_body(&body)?;
    if !(1..=limits::PARTITIONS_MAX).contains(&body.count) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_PARTITIONS",
            format!(
                "count={}: the new total, from 1 to {}",
                body.count,
                limits::PARTITIONS_MAX
            ),
        ));
    }
    within_timeout(&format!("adding partitions to '{topic}'"), async {
        let mut client = ctx.client().await?;
        client
            .create_partitions(&topic, body.count)
            .await
            .map_err(ApiError::from_client)
    })
    .await?;
    let d = within_timeout("describing the topic", detail_of(&ctx, &topic)).await?;
    Ok(Json(d).into_response())
}

/// `DELETE /v1/topics/{topic}?confirm={topic}`: DeleteTopics.
pub async fn delete_topic(
    ctx: Ctx,
    Path(topic): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    check_name(&topic)?;
    check_confirm(&Query::parse(raw.as_deref())?, &topic, "topic")?;
    within_timeout(&format!("deleting topic '{topic}'"), async {
        let mut client = ctx.client().await?;
        client
            .delete_topic(&topic)
            .await
            .map_err(ApiError::from_client)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
