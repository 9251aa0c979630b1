//! [`Client`]: a cluster-level client over [`Connection`]s, one per broker it needs.
//!
//! Admin requests go to the bootstrap broker (a KRaft broker forwards them to the controller); ListOffsets,
//! Produce and Fetch go to each partition's leader as named in Metadata.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::{
    create_topics_request::{CreatableTopic, CreatableTopicConfig},
    delete_topics_request::DeleteTopicState,
    describe_configs_request::DescribeConfigsResource,
    fetch_request::{FetchPartition, FetchTopic},
    incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig},
    list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
    metadata_request::MetadataRequestTopic,
    metadata_response::MetadataResponseTopic,
    produce_request::{PartitionProduceData, TopicProduceData},
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest, FetchRequest,
    IncrementalAlterConfigsRequest, ListOffsetsRequest, MetadataRequest, MetadataResponse,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::connection::{Connection, ConnectionOptions};
use crate::errors::{self, describe, error_name};

/// The versions of each API this client implements (inclusive). The version used is the highest one the broker
/// also supports.
pub(crate) mod versions {
    pub const METADATA: (i16, i16) = (4, 13);
    pub const CREATE_TOPICS: (i16, i16) = (2, 7);
    pub const DELETE_TOPICS: (i16, i16) = (1, 6);
    pub const DESCRIBE_CONFIGS: (i16, i16) = (1, 4);
    pub const INCREMENTAL_ALTER_CONFIGS: (i16, i16) = (0, 1);
    pub const LIST_OFFSETS: (i16, i16) = (1, 10);
    pub const PRODUCE: (i16, i16) = (3, 13);
    pub const FETCH: (i16, i16) = (4, 18);
    /// Fetch v13+ and Produce v13+ name topics by id; without an id (old Metadata) stay below.
    pub const LAST_BY_NAME: i16 = 12;
}

/// ListOffsets special timestamps.
pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;

const ADMIN_TIMEOUT_MS: i32 = 30_000;
const RESOURCE_TYPE_TOPIC: i8 = 2;

#[derive(Debug, Clone)]
pub struct TopicMetadata {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    pub partitions: Vec<PartitionMetadata>,
}

#[derive(Debug, Clone)]
pub struct PartitionMetadata {
    pub index: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl PartitionMetadata {
    /// No leader (-1): the partition can be neither written nor read.
    pub fn is_offline(&self) -> bool {
        self.leader < 0
    }

    /// Fewer replicas in sync than assigned.
    pub fn is_under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len()
    }
}

#[derive(Debug, Clone)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    pub sensitive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    TopicOverride,
    BrokerDynamic,
    BrokerDefaultDynamic,
    BrokerStatic,
    Default,
    Other(i8),
}

impl ConfigSource {
    fn from_code(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::TopicOverride,
            2 => ConfigSource::BrokerDynamic,
            3 => ConfigSource::BrokerDefaultDynamic,
            4 => ConfigSource::BrokerStatic,
            5 => ConfigSource::Default,
            other => ConfigSource::Other(other),
        }
    }

    pub fn label(&self) -> String {
        match self {
            ConfigSource::TopicOverride => "topic".into(),
            ConfigSource::BrokerDynamic => "broker (dynamic)".into(),
            ConfigSource::BrokerDefaultDynamic => "cluster default (dynamic)".into(),
            ConfigSource::BrokerStatic => "broker config".into(),
            ConfigSource::Default => "default".into(),
            ConfigSource::Other(c) => format!("source {c}"),
        }
    }
}

#[derive(Debug)]
pub struct CreatedTopic {
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
}

/// The result of ListOffsets for one partition.
#[derive(Debug, Clone, Copy)]
pub struct ListedOffset {
    /// -1 when no record has a timestamp at or after the one asked for.
    pub offset: i64,
}

/// The outcome of producing to one partition.
#[derive(Debug)]
pub struct ProduceResult {
    pub partition: i32,
    /// Base offset of the first batch, or -1 with acks=0.
    pub base_offset: i64,
    pub error_code: i16,
    pub error_message: Option<String>,
}

/// What a fetch returned for one partition.
#[derive(Debug)]
pub struct FetchedPartition {
    pub partition: i32,
    /// The broker (partition leader) that answered, for error messages.
    pub leader: i32,
    pub error_code: i16,
    pub records: Option<Bytes>,
}

/// A client for one cluster: admin requests, ListOffsets, Produce and Fetch (and the group requests in
/// `groups.rs`). It opens connections to partition leaders as it needs them and drops one after an I/O error so
/// the next request reconnects.
pub struct Client {
    pub(crate) bootstrap: String,
    pub(crate) options: ConnectionOptions,
    /// Open connections by broker address; the bootstrap connection is one of them.
    pub(crate) connections: HashMap<String, Connection>,
    /// Broker addresses by node id, from the latest Metadata response.
    pub(crate) brokers: HashMap<i32, String>,
}

impl Client {
    /// Connects to the bootstrap broker with [`ConnectionOptions::from_env`] (the CLI's defaults).
    pub async fn connect(bootstrap: &str) -> Result<Client> {
        Client::connect_with(bootstrap, ConnectionOptions::from_env()).await
    }

    /// Connects to the bootstrap broker; connections to other brokers use the same options.
    pub async fn connect_with(bootstrap: &str, options: ConnectionOptions) -> Result<Client> {
        let conn = Connection::connect_with(bootstrap, options.clone()).await?;
        let mut connections = HashMap::new();
        connections.insert(bootstrap.to_string(), conn);
        Ok(Client {
            bootstrap: bootstrap.to_string(),
            options,
            connections,
            brokers: HashMap::new(),
        })
    }

    /// The bootstrap connection is open (an error closes it; then connect a new `Client`).
    pub fn is_connected(&self) -> bool {
        self.connections
            .get(&self.bootstrap)
            .is_some_and(|c| !c.is_closed())
    }

    /// Sends any request to the bootstrap broker (the admin requests this client has no method for: ACLs,
    /// SCRAM users), at the highest version both sides speak within `ours`.
    pub async fn admin_request<R: kafka_protocol::protocol::Request>(
        &mut self,
        request: &R,
        ours: (i16, i16),
    ) -> Result<R::Response> {
        let (response, _) = self.bootstrap_conn().send(request, ours).await?;
        Ok(response)
    }

    pub(crate) fn bootstrap_conn(&mut self) -> &mut Connection {
        self.connections
            .get_mut(&self.bootstrap)
            .expect("bootstrap connection is opened in connect")
    }

    /// The connection to a node, opened on first use.
    pub(crate) async fn node(&mut self, node_id: i32) -> Result<&mut Connection> {
        let addr = match self.brokers.get(&node_id) {
            Some(addr) => addr.clone(),
            None => {
                self.refresh_brokers().await?;
                self.brokers.get(&node_id).cloned().ok_or_else(|| {
                    anyhow!("the cluster's metadata names no broker with id {node_id}; try again shortly")
                })?
            }
        };
        if !self.connections.contains_key(&addr) {
            let conn = Connection::connect_with(&addr, self.options.clone())
                .await
                .with_context(|| {
                    format!(
                        "broker {node_id} advertises itself as {addr} (bootstrap was {}); \
                     check its advertised listener",
                        self.bootstrap
                    )
                })?;
            self.connections.insert(addr.clone(), conn);
        }
        Ok(self.connections.get_mut(&addr).expect("inserted above"))
    }

    /// Drops a connection after an I/O error so the next request reconnects.
    pub(crate) fn forget_node(&mut self, node_id: i32) {
        if let Some(addr) = self.brokers.get(&node_id) {
            if *addr != self.bootstrap {
                self.connections.remove(addr);
            }
        }
    }

    pub(crate) async fn refresh_brokers(&mut self) -> Result<()> {
        self.metadata(Some(&[])).await.map(|_| ())
    }

    /// Metadata for the named topics (`None`: all topics). Topics come back as the broker reports them,
    /// errors included.
    pub async fn metadata(&mut self, topics: Option<&[&str]>) -> Result<Vec<(i16, TopicMetadata)>> {
        let response = self.metadata_response(topics).await?;
        Ok(response
            .topics
            .into_iter()
            .map(topic_from_response)
            .collect())
    }

    /// The whole Metadata response (brokers, cluster id, controller id, topics), at the highest common version.
    /// Also refreshes the broker addresses used to reach partition leaders.
    pub(crate) async fn metadata_response(
        &mut self,
        topics: Option<&[&str]>,
    ) -> Result<MetadataResponse> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        let (response, _) = self
            .bootstrap_conn()
            .send(&request, versions::METADATA)
            .await?;
        if response.error_code != 0 {
            bail!(
                "broker refused Metadata: {}",
                error_name(response.error_code)
            );
        }
        self.brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        Ok(response)
    }

    /// Metadata for one topic, waiting briefly while leaders are being elected (right after creation).
    pub async fn topic(&mut self, name: &str) -> Result<TopicMetadata> {
        self.topic_metadata(name, false).await
    }

    /// Like `topic`, for a topic just created: until it shows up, "unknown topic" means "not visible yet"
    /// (a KRaft broker learns about new topics asynchronously).
    pub async fn created_topic(&mut self, name: &str) -> Result<TopicMetadata> {
        self.topic_metadata(name, true).await
    }

    async fn topic_metadata(&mut self, name: &str, just_created: bool) -> Result<TopicMetadata> {
        const ATTEMPTS: u32 = 40; // about 15 s with the delays below
        let mut delay = Duration::from_millis(20);
        for attempt in 1..=ATTEMPTS {
            let mut topics = self.metadata(Some(&[name])).await?;
            let (code, meta) = topics.pop().ok_or_else(|| {
                anyhow!("broker answered Metadata for '{name}' without the topic")
            })?;
            let leaderless =
                meta.partitions.is_empty() || meta.partitions.iter().any(|p| p.leader < 0);
            let not_yet = code == errors::LEADER_NOT_AVAILABLE
                || (code == errors::UNKNOWN_TOPIC_OR_PARTITION && just_created)
                || (code == 0 && leaderless);
            if not_yet && attempt < ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
                continue;
            }
            return match code {
                0 if !leaderless => Ok(meta),
                0 | errors::LEADER_NOT_AVAILABLE => {
                    bail!("topic '{name}' has partitions without a leader; is the broker healthy?")
                }
                errors::UNKNOWN_TOPIC_OR_PARTITION if just_created => bail!(
                    "topic '{name}' was created but the broker still does not list it; \
                     check with `annal topic list` in a moment"
                ),
                errors::UNKNOWN_TOPIC_OR_PARTITION => Err(errors::topic_missing(name)),
                code => bail!(
                    "cannot get metadata for topic '{name}': {}",
                    error_name(code)
                ),
            };
        }
        unreachable!("the last attempt returns")
    }

    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: Option<i32>,
        replication_factor: Option<i16>,
        configs: &[(String, String)],
    ) -> Result<CreatedTopic> {
        let conn = self.bootstrap_conn();
        let version = conn.pick_version(
            kafka_protocol::messages::ApiKey::CreateTopics,
            versions::CREATE_TOPICS,
        )?;
        // -1 ("broker default") is understood from v4 on; older brokers need explicit values.
        let default_ok = version >= 4;
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions.unwrap_or(if default_ok { -1 } else { 1 }))
            .with_replication_factor(replication_factor.unwrap_or(if default_ok { -1 } else { 1 }))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            );
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = conn.send_version(&request, version).await?;
        let result = response
            .topics
            .into_iter()
            .find(|t| t.name.as_str() == name)
            .ok_or_else(|| anyhow!("broker answered CreateTopics without topic '{name}'"))?;
        match result.error_code {
            0 => {}
            errors::TOPIC_ALREADY_EXISTS => {
                bail!("topic '{name}' already exists; see it with `annal topic describe {name}`")
            }
            code => bail!(
                "cannot create topic '{name}': {}",
                describe(code, result.error_message.as_ref().map(|m| m.as_str()))
            ),
        }
        Ok(CreatedTopic {
            partitions: (version >= 5 && result.num_partitions > 0)
                .then_some(result.num_partitions),
            replication_factor: (version >= 5 && result.replication_factor > 0)
                .then_some(result.replication_factor),
        })
    }

    pub async fn delete_topic(&mut self, name: &str) -> Result<()> {
        let conn = self.bootstrap_conn();
        let version = conn.pick_version(
            kafka_protocol::messages::ApiKey::DeleteTopics,
            versions::DELETE_TOPICS,
        )?;
        let mut request = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
        if version >= 6 {
            request.topics = vec![DeleteTopicState::default().with_name(Some(topic_name(name)))];
        } else {
            request.topic_names = vec![topic_name(name)];
        }
        let response = conn.send_version(&request, version).await?;
        let result =
            response.responses.into_iter().next().ok_or_else(|| {
                anyhow!("broker answered DeleteTopics without a result for '{name}'")
            })?;
        match result.error_code {
            0 => Ok(()),
            errors::UNKNOWN_TOPIC_OR_PARTITION => {
                bail!("topic '{name}' does not exist; list topics with `annal topic list`")
            }
            code => bail!(
                "cannot delete topic '{name}': {}",
                describe(code, result.error_message.as_ref().map(|m| m.as_str()))
            ),
        }
    }

    pub async fn describe_topic_configs(&mut self, name: &str) -> Result<Vec<ConfigEntry>> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TYPE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(None),
        ]);
        let (response, _) = self
            .bootstrap_conn()
            .send(&request, versions::DESCRIBE_CONFIGS)
            .await?;
        let result = response.results.into_iter().next().ok_or_else(|| {
            anyhow!("broker answered DescribeConfigs without a result for '{name}'")
        })?;
        match result.error_code {
            0 => {}
            errors::UNKNOWN_TOPIC_OR_PARTITION => return Err(errors::topic_missing(name)),
            code => bail!(
                "cannot describe the configs of topic '{name}': {}",
                describe(code, result.error_message.as_ref().map(|m| m.as_str()))
            ),
        }
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: ConfigSource::from_code(c.config_source),
                read_only: c.read_only,
                sensitive: c.is_sensitive,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Sets and removes topic config overrides (IncrementalAlterConfigs: SET = 0, DELETE = 1).
    pub async fn alter_topic_configs(
        &mut self,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<()> {
        let mut configs: Vec<AlterableConfig> = set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .collect();
        configs.extend(delete.iter().map(|k| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(k.clone()))
                .with_config_operation(1)
                .with_value(None)
        }));
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TYPE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configs(configs),
        ]);
        let (response, _) = self
            .bootstrap_conn()
            .send(&request, versions::INCREMENTAL_ALTER_CONFIGS)
            .await?;
        let result = response.responses.into_iter().next().ok_or_else(|| {
            anyhow!("broker answered IncrementalAlterConfigs without a result for '{name}'")
        })?;
        match result.error_code {
            0 => Ok(()),
            errors::UNKNOWN_TOPIC_OR_PARTITION => Err(errors::topic_missing(name)),
            code => bail!(
                "cannot change the configs of topic '{name}': {}",
                describe(code, result.error_message.as_ref().map(|m| m.as_str()))
            ),
        }
    }

    /// ListOffsets for the given partitions at `timestamp` (or LATEST / EARLIEST), asking each leader.
    pub async fn list_offsets(
        &mut self,
        topic: &TopicMetadata,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<BTreeMap<i32, ListedOffset>> {
        const ATTEMPTS: u32 = 10;
        let mut out = BTreeMap::new();
        let mut topic = topic.clone();
        let mut pending: Vec<i32> = partitions.to_vec();
        for attempt in 1..=ATTEMPTS {
            // Partitions that answered with a retriable error (leader moved, partition not loaded yet right
            // after creation), with the last error seen.
            let mut retry: Vec<(i32, i16)> = Vec::new();
            for (leader, parts) in group_by_leader(&topic, &pending)? {
                let request = ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(0)
                    .with_timeout_ms(ADMIN_TIMEOUT_MS)
                    .with_topics(vec![ListOffsetsTopic::default()
                        .with_name(topic_name(&topic.name))
                        .with_partitions(
                            parts
                                .iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(p.index)
                                        .with_current_leader_epoch(p.leader_epoch)
                                        .with_timestamp(timestamp)
                                })
                                .collect(),
                        )]);
                let (response, _) = self
                    .node(leader)
                    .await?
                    .send(&request, versions::LIST_OFFSETS)
                    .await?;
                for p in response.topics.into_iter().flat_map(|t| t.partitions) {
                    match p.error_code {
                        0 => {
                            out.insert(p.partition_index, ListedOffset { offset: p.offset });
                        }
                        code if errors::is_retriable(code) => retry.push((p.partition_index, code)),
                        code => bail!(
                            "cannot list offsets of partition {} of topic '{}' at broker {leader}: {}",
                            p.partition_index,
                            topic.name,
                            error_name(code)
                        ),
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            if attempt == ATTEMPTS {
                let (p, code) = retry[0];
                if code == errors::UNKNOWN_TOPIC_OR_PARTITION {
                    return Err(errors::topic_missing(&topic.name));
                }
                let leader = topic
                    .partitions
                    .iter()
                    .find(|m| m.index == p)
                    .map_or(-1, |m| m.leader);
                bail!(
                    "cannot list offsets of partition {p} of topic '{}' at broker {leader}: {} (still, after \
                     {ATTEMPTS} attempts); check the partition's leader with `annal cluster health`",
                    topic.name,
                    error_name(code)
                );
            }
            tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            topic = self.topic(&topic.name).await?;
            pending = retry.into_iter().map(|(p, _)| p).collect();
        }
        for p in partitions {
            if !out.contains_key(p) {
                bail!(
                    "broker did not list offsets for partition {p} of topic '{}'",
                    topic.name
                );
            }
        }
        Ok(out)
    }

    /// Produces the given record batches (one entry per partition) to `topic`, one request per leader.
    /// With acks=0 the broker does not answer and the results carry base offset -1.
    pub async fn produce(
        &mut self,
        topic: &TopicMetadata,
        batches: Vec<(i32, Bytes)>,
        acks: i16,
        timeout_ms: i32,
    ) -> Result<Vec<ProduceResult>> {
        let partitions: Vec<i32> = batches.iter().map(|(p, _)| *p).collect();
        let mut by_partition: HashMap<i32, Bytes> = batches.into_iter().collect();
        let mut results = Vec::new();
        for (leader, parts) in group_by_leader(topic, &partitions)? {
            let data: Vec<PartitionProduceData> = parts
                .iter()
                .map(|p| {
                    PartitionProduceData::default()
                        .with_index(p.index)
                        .with_records(by_partition.remove(&p.index))
                })
                .collect();
            let request = ProduceRequest::default()
                .with_acks(acks)
                .with_timeout_ms(timeout_ms)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(&topic.name))
                    .with_topic_id(topic.id)
                    .with_partition_data(data)]);
            let ours = by_name_cap(versions::PRODUCE, topic.id);
            let conn = self.node(leader).await?;
            let version = conn.pick_version(kafka_protocol::messages::ApiKey::Produce, ours)?;
            if version < ZSTD_MIN_PRODUCE_VERSION && request_uses_zstd(&request) {
                bail!(
                    "this broker speaks Produce up to v{version}, but zstd compression needs Produce v7 \
                     (Kafka 2.1+); choose --compression lz4, snappy or gzip"
                );
            }
            if acks == 0 {
                let sent = conn.send_without_response(&request, version).await;
                if sent.is_err() {
                    self.forget_node(leader);
                }
                sent?;
                results.extend(parts.iter().map(|p| ProduceResult {
                    partition: p.index,
                    base_offset: -1,
                    error_code: 0,
                    error_message: None,
                }));
                continue;
            }
            let response = match conn.send_version(&request, version).await {
                Ok(r) => r,
                Err(e) => {
                    self.forget_node(leader);
                    return Err(e);
                }
            };
            for t in response.responses {
                for p in t.partition_responses {
                    let message = p.error_message.as_ref().map(|m| m.to_string()).or_else(|| {
                        p.record_errors
                            .first()
                            .and_then(|e| e.batch_index_error_message.as_ref())
                            .map(|m| m.to_string())
                    });
                    results.push(ProduceResult {
                        partition: p.index,
                        base_offset: p.base_offset,
                        error_code: p.error_code,
                        error_message: message,
                    });
                }
            }
        }
        Ok(results)
    }

    /// One fetch round: asks each leader for its partitions at the given positions, waiting up to `max_wait_ms`
    /// for data.
    pub async fn fetch(
        &mut self,
        topic: &TopicMetadata,
        positions: &BTreeMap<i32, i64>,
        max_wait_ms: i32,
        partition_max_bytes: i32,
    ) -> Result<Vec<FetchedPartition>> {
        let partitions: Vec<i32> = positions.keys().copied().collect();
        let mut out = Vec::new();
        for (leader, parts) in group_by_leader(topic, &partitions)? {
            let request = FetchRequest::default()
                .with_max_wait_ms(max_wait_ms)
                .with_min_bytes(1)
                .with_max_bytes(
                    partition_max_bytes
                        .saturating_mul(4)
                        .max(partition_max_bytes),
                )
                .with_isolation_level(0)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(&topic.name))
                    .with_topic_id(topic.id)
                    .with_partitions(
                        parts
                            .iter()
                            .map(|p| {
                                FetchPartition::default()
                                    .with_partition(p.index)
                                    .with_current_leader_epoch(p.leader_epoch)
                                    .with_fetch_offset(positions[&p.index])
                                    .with_partition_max_bytes(partition_max_bytes)
                            })
                            .collect(),
                    )]);
            let ours = by_name_cap(versions::FETCH, topic.id);
            let conn = self.node(leader).await?;
            let response = match conn.send(&request, ours).await {
                Ok((r, _)) => r,
                Err(e) => {
                    self.forget_node(leader);
                    return Err(e);
                }
            };
            if response.error_code != 0 {
                bail!(
                    "broker {leader} refused Fetch for topic '{}': {}",
                    topic.name,
                    error_name(response.error_code)
                );
            }
            for t in response.responses {
                for p in t.partitions {
                    out.push(FetchedPartition {
                        partition: p.partition_index,
                        leader,
                        error_code: p.error_code,
                        records: p.records,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// One topic of a Metadata response, partitions in index order, with the topic's error code.
pub(crate) fn topic_from_response(t: MetadataResponseTopic) -> (i16, TopicMetadata) {
    let mut partitions: Vec<PartitionMetadata> = t
        .partitions
        .into_iter()
        .map(|p| PartitionMetadata {
            index: p.partition_index,
            leader: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
        })
        .collect();
    partitions.sort_by_key(|p| p.index);
    let meta = TopicMetadata {
        name: t
            .name
            .as_ref()
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        id: t.topic_id,
        internal: t.is_internal,
        partitions,
    };
    (t.error_code, meta)
}

/// Brokers refuse zstd batches in Produce requests older than v7 (KIP-110).
const ZSTD_MIN_PRODUCE_VERSION: i16 = 7;

fn request_uses_zstd(request: &ProduceRequest) -> bool {
    const ATTRIBUTES_AT: usize = 21;
    request
        .topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .any(|p| {
            p.records
                .as_ref()
                .and_then(|r| r.get(ATTRIBUTES_AT..ATTRIBUTES_AT + 2))
                .is_some_and(|a| i16::from_be_bytes([a[0], a[1]]) & 0x7 == 4)
        })
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Without a topic id (a broker whose Metadata has none), stay on the versions that name topics.
fn by_name_cap(ours: (i16, i16), id: Uuid) -> (i16, i16) {
    if id.is_nil() {
        (ours.0, ours.1.min(versions::LAST_BY_NAME))
    } else {
        ours
    }
}

/// Groups the requested partitions by leader node, in a stable order.
pub(crate) fn group_by_leader<'a>(
    topic: &'a TopicMetadata,
    partitions: &[i32],
) -> Result<BTreeMap<i32, Vec<&'a PartitionMetadata>>> {
    let mut groups: BTreeMap<i32, Vec<&PartitionMetadata>> = BTreeMap::new();
    for &index in partitions {
        let p = topic
            .partitions
            .iter()
            .find(|p| p.index == index)
            .ok_or_else(|| {
                anyhow!(
                    "topic '{}' has no partition {index} (it has {} partitions: 0..{})",
                    topic.name,
                    topic.partitions.len(),
                    topic.partitions.len().saturating_sub(1)
                )
            })?;
        if p.leader < 0 {
            bail!(
                "partition {index} of topic '{}' has no leader right now; try again shortly",
                topic.name
            );
        }
        groups.entry(p.leader).or_default().push(p);
    }
    Ok(groups)
}
