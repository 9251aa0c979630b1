//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs. DescribeConfigs answers from this broker's topics and
//! settings (broker configs with their sources: they come from server.properties); changes are the controller's
//! and are forwarded to it.

use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader,
};

use super::{code, s};
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
                            .with_documentation(topic_config::documentation(st.name).map(s));
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

pub async fn alter(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    super::forward::alter_configs(broker, broker.cluster(), header.request_api_version, req).await
}

pub async fn incremental_alter(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    super::forward::incremental_alter_configs(
        broker,
        broker.cluster(),
        header.request_api_version,
        req,
    )
    .await
}
