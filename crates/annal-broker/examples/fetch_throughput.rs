//! Raw-protocol consumer throughput, no consumer group, no record decoding: measures a broker's fetch path.
//!
//!     cargo run --release -p annal-broker --example fetch_throughput -- fill 127.0.0.1:9092 t 8 1024
//!     cargo run --release -p annal-broker --example fetch_throughput -- consume 127.0.0.1:9092 t 8
//!
//! `fill` creates the topic and produces MIB batches of 960 1 KiB records (uncompressed, under the 1 MiB max.message.bytes, acks=1)
//! round-robin over the partitions; `consume` fetches every partition from offset 0 to its high watermark
//! (Fetch v12, sessionless, Kafka's consumer defaults: partition_max_bytes 1 MiB, max_bytes 50 MiB) and prints
//! the rate of record bytes received.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// A record's key and value.
type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

struct Conn {
    s: TcpStream,
    corr: i32,
}

impl Conn {
    fn call<R: Request>(&mut self, req: &R, version: i16) -> R::Response {
        self.corr += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.corr)
            .with_client_id(Some(StrBytes::from_static_str("fetch-throughput")));
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        header.encode(&mut out, R::header_version(version)).unwrap();
        req.encode(&mut out, version).unwrap();
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        self.s.write_all(&out).unwrap();
        let mut size = [0u8; 4];
        self.s.read_exact(&mut size).unwrap();
        let mut buf = vec![0u8; u32::from_be_bytes(size) as usize];
        self.s.read_exact(&mut buf).unwrap();
        let mut buf = Bytes::from(buf);
        ResponseHeader::decode(
            &mut buf,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .unwrap();
        R::Response::decode(&mut buf, version).unwrap()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, addr, topic, parts) = (
        &args[1],
        &args[2],
        &args[3],
        args[4].parse::<i32>().unwrap(),
    );
    let mut c = Conn {
        s: TcpStream::connect(addr).unwrap(),
        corr: 0,
    };
    c.s.set_nodelay(true).unwrap();
    let name = TopicName(StrBytes::from_string(topic.clone()));
    match mode.as_str() {
        "fill" => {
            let mib: usize = args[5].parse().unwrap();
            use kafka_protocol::messages::create_topics_request::CreatableTopic;
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name.clone())
                    .with_num_partitions(parts)
                    .with_replication_factor(1)]);
            let r = c.call(&req, 7);
            eprintln!("create: error {}", r.topics[0].error_code);
            let value: Vec<u8> = (0..1024u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
            let records: Vec<KeyValue> = (0..960).map(|_| (None, Some(value.as_slice()))).collect();
            let batch = annal_log::batch::build_uncompressed_batch(&records, 1_700_000_000_000);
            use kafka_protocol::messages::produce_request::{
                PartitionProduceData, TopicProduceData,
            };
            for i in 0..mib {
                let req = ProduceRequest::default()
                    .with_acks(1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(name.clone())
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(i as i32 % parts)
                            .with_records(Some(Bytes::from(batch.clone())))])]);
                let r = c.call(&req, 9);
                assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
            }
            eprintln!("produced {mib} batches of 960 KiB");
        }
        "consume" => {
            use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
            let mut next = vec![0i64; parts as usize];
            let mut hw = vec![i64::MAX; parts as usize];
            let (mut bytes, mut fetches) = (0usize, 0usize);
            let start = Instant::now();
            while (0..parts as usize).any(|p| next[p] < hw[p]) {
                let partitions = (0..parts)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(next[p as usize])
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect();
                let req = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(500)
                    .with_min_bytes(1)
                    .with_max_bytes(50 << 20)
                    .with_session_epoch(-1)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(name.clone())
                        .with_partitions(partitions)]);
                let resp = c.call(&req, 12);
                fetches += 1;
                for pd in &resp.responses[0].partitions {
                    let p = pd.partition_index as usize;
                    assert_eq!(pd.error_code, 0);
                    hw[p] = pd.high_watermark;
                    let r = pd.records.as_deref().unwrap_or_default();
                    bytes += r.len();
                    let mut at = 0;
                    while at + 27 <= r.len() {
                        let base = i64::from_be_bytes(r[at..at + 8].try_into().unwrap());
                        let len =
                            i32::from_be_bytes(r[at + 8..at + 12].try_into().unwrap()) as usize;
                        let delta =
                            i32::from_be_bytes(r[at + 23..at + 27].try_into().unwrap()) as i64;
                        next[p] = base + delta + 1;
                        at += 12 + len;
                    }
                }
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "consumed {:.1} MiB in {fetches} fetches, {secs:.2} s: {:.0} MiB/s",
                bytes as f64 / (1 << 20) as f64,
                bytes as f64 / (1 << 20) as f64 / secs
            );
        }
        _ => panic!("mode: fill or consume"),
    }
}
