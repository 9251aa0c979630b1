//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs. Topic configs are changeable; broker configs are
//! described (read-only, with sources) and changing them is refused: they come from server.properties.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader,
};

use super::{blocking, code, s};
use crate::config::{Source, BROKER_SETTINGS};
use crate::topic_config::{self, ConfigSource, TOPIC_SETTINGS};
use crate::Broker;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;

pub async fn describe(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let version = header.request_api_version;
    let mut results = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        // Null or empty key list: every config.
        let wanted = |key: &str| match r
            .configuration_keys
            .as_ref()
            .filter(|keys| !keys.is_empty())
        {
            None => true,
            Some(keys) => keys.iter().any(|k| k.as_str() == key),
        };
        let mut result = DescribeConfigsResult::default()
            .with_error_message(None)
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match r.resource_type {
            TOPIC => match broker.replica_manager.topic(&name) {
                None => {
                    result.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                    result.error_message = Some(s(format!("topic '{name}' does not exist")));
                }
                Some(topic) => {
                    for st in TOPIC_SETTINGS.iter().filter(|st| wanted(st.name)) {
                        let (value, source) =
                            topic_config::effective(st.name, &topic.configs, &broker.config);
                        let mut entry = DescribeConfigsResourceResult::default()
                            .with_name(s(st.name))
                            .with_value(Some(s(value.clone())))
                            .with_config_source(source as i8)
                            .with_documentation(None);
                        if version >= 3 {
                            entry.config_type = st.kind.config_type();
                        }
                        if req.include_synonyms {
                            let mut synonyms = Vec::new();
                            if let Some(v) = topic.configs.get(st.name) {
                                synonyms.push(synonym(st.name, v, ConfigSource::Topic as i8));
                            }
                            if let Some(syn) = st.broker_synonym {
                                if let Some((v, src)) = broker.config.described.get(syn) {
                                    let src = if *src == Source::Static { 4 } else { 5 };
                                    synonyms.push(synonym(syn, v, src));
                                }
                            }
                            entry.synonyms = synonyms;
                        }
                        result.configs.push(entry);
                    }
                }
            },
            BROKER => {
                if !(name.is_empty() || name == broker.config.node_id.to_string()) {
                    result.error_code = code::INVALID_REQUEST;
                    result.error_message = Some(s(format!(
                        "broker '{name}' is not this node (node.id={})",
                        broker.config.node_id
                    )));
                } else {
                    for (key, (value, source)) in
                        broker.config.described.iter().filter(|(k, _)| wanted(k))
                    {
                        let src = if *source == Source::Static { 4 } else { 5 };
                        let mut entry = DescribeConfigsResourceResult::default()
                            .with_name(s(key.clone()))
                            .with_value(Some(s(value.clone())))
                            .with_read_only(true)
                            .with_config_source(src)
                            .with_documentation(None);
                        if version >= 3 {
                            entry.config_type = BROKER_SETTINGS
                                .iter()
                                .find(|b| b.name == key)
                                .map_or(2, |b| b.kind.config_type());
                        }
                        if req.include_synonyms {
                            entry.synonyms = vec![synonym(key, value, src)];
                        }
                        result.configs.push(entry);
                    }
                }
            }
            BROKER_LOGGER => {}
            other => {
                result.error_code = code::INVALID_REQUEST;
                result.error_message = Some(s(format!(
                    "resource type {other} has no configs on this broker"
                )));
            }
        }
        results.push(result);
    }
    DescribeConfigsResponse::default().with_results(results)
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(s(name))
        .with_value(Some(s(value)))
        .with_source(source)
}

/// Applies `change` to a topic's current overrides, validates, and (unless validate_only) persists.
async fn alter_topic(
    broker: &Arc<Broker>,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), String>,
) -> Result<(), (i16, String)> {
    let topic = broker.replica_manager.topic(name).ok_or_else(|| {
        (
            code::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic '{name}' does not exist"),
        )
    })?;
    let mut configs = topic.configs.clone();
    change(&mut configs).map_err(|e| (code::INVALID_CONFIG, e))?;
    if validate_only {
        return Ok(());
    }
    let (b, n) = (broker.clone(), name.to_string());
    blocking(move || b.replica_manager.alter_topic_configs(&n, configs))
        .await
        .map_err(|e| (code::UNKNOWN_SERVER_ERROR, format!("{e:#}")))?;
    tracing::info!(topic = %name, "altered topic configs");
    Ok(())
}

fn resource_check(broker: &Broker, resource_type: i8, name: &str) -> Result<(), (i16, String)> {
    match resource_type {
        TOPIC => Ok(()),
        BROKER | BROKER_LOGGER => Err((
            code::INVALID_REQUEST,
            format!(
                "broker configs are read-only on Annal (broker '{name}'); set them in server.properties or with \
                 --override and restart node {}",
                broker.config.node_id
            ),
        )),
        other => Err((code::INVALID_REQUEST, format!("resource type {other} has no configs on this broker"))),
    }
}

pub async fn alter(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    if let Some(cluster) = broker.cluster() {
        return super::forward::alter_configs(cluster, header.request_api_version, req).await;
    }
    let mut responses = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let outcome = match resource_check(broker, r.resource_type, &name) {
            Err(e) => Err(e),
            Ok(()) => {
                // AlterConfigs replaces the whole set of overrides.
                let entries: Vec<(String, Option<String>)> = r
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                    .collect();
                alter_topic(broker, &name, req.validate_only, move |configs| {
                    configs.clear();
                    for (k, v) in entries {
                        let v = topic_config::validate(&k, v.as_deref())?;
                        configs.insert(k, v);
                    }
                    Ok(())
                })
                .await
            }
        };
        let mut resp = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_error_message(None)
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err((error, msg)) = outcome {
            resp.error_code = error;
            resp.error_message = Some(s(msg));
        }
        responses.push(resp);
    }
    AlterConfigsResponse::default().with_responses(responses)
}

pub async fn incremental_alter(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    if let Some(cluster) = broker.cluster() {
        return super::forward::incremental_alter_configs(cluster, header.request_api_version, req)
            .await;
    }
    let mut responses = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let outcome = match resource_check(broker, r.resource_type, &name) {
            Err(e) => Err(e),
            Ok(()) => {
                let ops: Vec<(String, i8, Option<String>)> = r
                    .configs
                    .iter()
                    .map(|c| {
                        (
                            c.name.to_string(),
                            c.config_operation,
                            c.value.as_ref().map(|v| v.to_string()),
                        )
                    })
                    .collect();
                let b = broker.clone();
                alter_topic(broker, &name, req.validate_only, move |configs| {
                    for (key, op, value) in ops {
                        apply_op(configs, &key, op, value, &b)?;
                    }
                    Ok(())
                })
                .await
            }
        };
        let mut resp = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_error_message(None)
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err((error, msg)) = outcome {
            resp.error_code = error;
            resp.error_message = Some(s(msg));
        }
        responses.push(resp);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// One IncrementalAlterConfigs operation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT (the last two on list configs).
fn apply_op(
    configs: &mut BTreeMap<String, String>,
    key: &str,
    op: i8,
    value: Option<String>,
    broker: &Broker,
) -> Result<(), String> {
    let setting = topic_config::find(key).ok_or_else(|| format!("unknown topic config '{key}'"))?;
    match op {
        0 => {
            let v = topic_config::validate(key, value.as_deref())?;
            configs.insert(key.to_string(), v);
        }
        1 => {
            configs.remove(key);
        }
        2 | 3 => {
            if !matches!(setting.kind, crate::config::Kind::List(_)) {
                return Err(format!(
                    "{key} is not a list config; APPEND and SUBTRACT apply only to lists"
                ));
            }
            let current = topic_config::effective(key, configs, &broker.config).0;
            let mut items: Vec<String> = current
                .split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect();
            let given: Vec<String> = value
                .unwrap_or_default()
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect();
            if op == 2 {
                for g in given {
                    if !items.contains(&g) {
                        items.push(g);
                    }
                }
            } else {
                items.retain(|i| !given.contains(i));
            }
            let v = topic_config::validate(key, Some(&items.join(",")))?;
            configs.insert(key.to_string(), v);
        }
        other => return Err(format!("unknown config operation {other} for {key}")),
    }
    Ok(())
}
