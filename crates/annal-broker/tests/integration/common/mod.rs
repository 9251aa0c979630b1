//! Test support: a real broker (in this process, on 127.0.0.1:0) and a raw Kafka-protocol client built on
//! kafka-protocol's encoders, so tests see exactly the bytes a client would.
#![allow(dead_code, clippy::type_complexity)]

pub mod group_versions;
pub mod txn;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use annal_broker::BrokerConfig;
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct TestBroker {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestBroker {
    /// Starts a broker on `data_dir` with `key=value` overrides.
    pub async fn start(data_dir: &Path, overrides: &[&str]) -> TestBroker {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let config = BrokerConfig::load(
            None,
            &overrides,
            Some(data_dir.to_path_buf()),
            Some("127.0.0.1:0".into()),
        )
        .expect("test config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(annal_broker::run_with_listener(
            config,
            listener,
            async move {
                let _ = rx.await;
            },
        ));
        TestBroker {
            addr,
            data_dir: data_dir.to_path_buf(),
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    /// Like [`start`](Self::start), also returning the broker itself, to reach its replica manager (tests that
    /// change leadership the way the cluster code will). Drop the `Arc` before [`stop`](Self::stop).
    pub async fn start_with_handle(
        data_dir: &Path,
        overrides: &[&str],
    ) -> (TestBroker, std::sync::Arc<annal_broker::Broker>) {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let config = BrokerConfig::load(
            None,
            &overrides,
            Some(data_dir.to_path_buf()),
            Some("127.0.0.1:0".into()),
        )
        .expect("test config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let started = annal_broker::start(config, listener)
            .await
            .expect("broker start");
        let broker = started.broker().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(started.serve(async move {
            let _ = rx.await;
        }));
        let test = TestBroker {
            addr,
            data_dir: data_dir.to_path_buf(),
            stop: Some(tx),
            handle: Some(handle),
        };
        (test, broker)
    }

    /// Graceful shutdown; returns the broker's result.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.handle.take().unwrap())
            .await
            .expect("broker did not stop within 20 s")
            .expect("broker task panicked")
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A byte stream a test client speaks Kafka over: TCP, or TLS over TCP (tests/integration/security.rs).
pub trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

pub struct Client {
    pub stream: Box<dyn Duplex>,
    next_correlation: i32,
}

impl Client {
    /// A client over an established stream (e.g. a TLS connection).
    pub fn over(stream: impl Duplex + 'static) -> Client {
        Client {
            stream: Box::new(stream),
            next_correlation: 1,
        }
    }

    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connect to test broker");
        stream.set_nodelay(true).unwrap();
        Client::over(stream)
    }

    /// Encodes a request frame (size, header, body).
    pub fn frame<R: Request>(req: &R, version: i16, correlation_id: i32) -> BytesMut {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("annal-test")));
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        header.encode(&mut out, R::header_version(version)).unwrap();
        req.encode(&mut out, version).unwrap();
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out
    }

    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> i32 {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        let frame = Self::frame(req, version, correlation);
        self.stream.write_all(&frame).await.unwrap();
        self.stream.flush().await.unwrap();
        correlation
    }

    /// Reads one response frame; `None` if the broker closed the connection.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        match tokio::time::timeout(Duration::from_secs(30), self.stream.read_exact(&mut size)).await
        {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return None,
            Err(_) => panic!("no response within 30 s"),
        }
        let size = u32::from_be_bytes(size) as usize;
        let mut buf = vec![0u8; size];
        self.stream.read_exact(&mut buf).await.ok()?;
        Some(Bytes::from(buf))
    }

    pub async fn recv<R: Request>(&mut self, version: i16) -> (i32, R::Response) {
        let mut frame = self
            .read_frame()
            .await
            .expect("broker closed the connection instead of answering");
        let header = ResponseHeader::decode(
            &mut frame,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .unwrap();
        let resp = R::Response::decode(&mut frame, version).expect("response decodes");
        assert_eq!(frame.remaining(), 0, "response has trailing bytes");
        (header.correlation_id, resp)
    }

    pub async fn call<R: Request>(&mut self, req: &R, version: i16) -> R::Response {
        let correlation = self.send(req, version).await;
        let (got, resp) = self.recv::<R>(version).await;
        assert_eq!(got, correlation, "correlation id");
        resp
    }

    /// True if the broker closed the connection (read returns EOF) within `within`.
    pub async fn is_closed(&mut self, within: Duration) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(within, self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn name(v: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(s(v))
}

/// Creates a topic and asserts success.
pub async fn create_topic(c: &mut Client, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::CreateTopicsRequest;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )]);
    let resp = c.call(&req, 7).await;
    assert_eq!(
        resp.topics[0].error_code, 0,
        "create {topic}: {:?}",
        resp.topics[0].error_message
    );
}

/// One uncompressed batch of `values`.
pub fn batch(values: &[&str], timestamp: i64) -> Vec<u8> {
    let records: Vec<(Option<&[u8]>, Option<&[u8]>)> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    annal_log::batch::build_uncompressed_batch(&records, timestamp)
}

/// One batch of an idempotent producer.
pub fn idempotent_batch(values: &[&str], producer_id: i64, epoch: i16, sequence: i32) -> Vec<u8> {
    let records: Vec<(Option<&[u8]>, Option<&[u8]>)> =
        values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    let ts = vec![1_700_000_000_000; values.len()];
    annal_log::batch::build_batch(
        &records,
        &ts,
        annal_log::batch::ProducerFields {
            producer_id,
            producer_epoch: epoch,
            base_sequence: sequence,
            transactional: false,
        },
    )
}

pub async fn produce(
    c: &mut Client,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
    acks: i16,
    version: i16,
) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(Bytes::from(records)))])]);
    let resp = c.call(&req, version).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

pub async fn fetch(
    c: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
    version: i16,
    max_wait_ms: i32,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    let topic_id = topic_id(c, topic).await;
    let mut ft = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_partition(partition)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1 << 20)]);
    if version >= 13 {
        ft.topic_id = topic_id;
    } else {
        ft.topic = name(topic);
    }
    let req = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![ft]);
    let resp = c.call(&req, version).await;
    assert_eq!(resp.error_code, 0);
    resp.responses[0].partitions[0].clone()
}

pub async fn topic_id(c: &mut Client, topic: &str) -> uuid::Uuid {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::MetadataRequest;
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let resp = c.call(&req, 12).await;
    resp.topics[0].topic_id
}

/// Values of every record in `records` (uncompressed or compressed batches), decoded with kafka-protocol.
pub fn values(records: &Bytes) -> Vec<(i64, String)> {
    let mut buf = records.clone();
    let batches =
        kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).expect("records decode");
    batches
        .into_iter()
        .flat_map(|b| b.records)
        .map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string(),
            )
        })
        .collect()
}
