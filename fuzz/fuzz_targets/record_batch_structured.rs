//! Structure-aware record batches: `arbitrary` chooses records, producer fields and a codec (none, gzip, snappy,
//! lz4, zstd), Kafka's own encoder (kafka-protocol's `RecordBatchEncoder`, what producers run) builds valid,
//! checksummed batches, then a few targeted mutations are applied (with the CRC recomputed or not). Plain bytes
//! stall at the CRC-32C check; this reaches the record-level checks, compressed payloads and the client's record
//! iteration for every codec. Same checks as `record_batch` (`annal_fuzz::check_batches`).
#![no_main]
use std::sync::Mutex;

use arbitrary::Arbitrary;
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    batches: Vec<BatchSpec>,
    mutations: Vec<Mutation>,
    fix_crc: bool,
}

#[derive(Arbitrary, Debug)]
struct BatchSpec {
    codec: u8,
    transactional: bool,
    control: bool,
    log_append_time: bool,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    base_offset: i64,
    timestamp: i64,
    records: Vec<RecordSpec>,
}

#[derive(Arbitrary, Debug)]
struct RecordSpec {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp_delta: i32,
    /// Repeats the value this many times (bounded): compressible payloads.
    repeat: u8,
}

#[derive(Arbitrary, Debug)]
enum Mutation {
    Xor { at: u16, mask: u8 },
    SetI32 { at: u16, value: i32 },
    Truncate { to: u16 },
    Insert { at: u16, bytes: Vec<u8> },
}

fn codec(b: u8) -> Compression {
    match b % 5 {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        _ => Compression::Zstd,
    }
}

/// The most value bytes (after `repeat`) one input may encode, over all its batches: enough for multi-block
/// compressed payloads and for batches past a 16 KiB segment, while keeping an execution cheap. Without it a
/// grown corpus (inputs up to `-max_len`) spent most of its time compressing megabytes: ~900 executions/s
/// instead of several thousand.
const VALUE_BUDGET: usize = 64 * 1024;

fn encode(spec: &BatchSpec, budget: &mut usize) -> Option<Bytes> {
    if spec.records.is_empty() {
        return None;
    }
    let records: Vec<Record> = spec
        .records
        .iter()
        .take(64)
        .enumerate()
        .map(|(i, r)| (i, r, value_within(r, budget)))
        .map(|(i, r, value)| Record {
            transactional: spec.transactional,
            control: spec.control,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: spec.producer_id,
            producer_epoch: spec.producer_epoch,
            timestamp_type: if spec.log_append_time {
                TimestampType::LogAppend
            } else {
                TimestampType::Creation
            },
            offset: spec.base_offset.wrapping_add(i as i64),
            // One batch: the encoder starts a new one whenever offset - sequence changes.
            sequence: spec.base_sequence.wrapping_add(i as i32),
            timestamp: spec.timestamp.wrapping_add(r.timestamp_delta as i64),
            key: r.key.clone().map(Bytes::from),
            value,
            headers: r
                .headers
                .iter()
                .take(8)
                .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone().map(Bytes::from)))
                .collect::<IndexMap<_, _>>(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: codec(spec.codec),
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).ok()?;
    Some(buf.freeze())
}

/// The record's value, repeated as asked but cut to what is left of the input's [`VALUE_BUDGET`].
fn value_within(r: &RecordSpec, budget: &mut usize) -> Option<Bytes> {
    let v = r.value.as_ref()?;
    let times = 1 + r.repeat as usize % 32;
    let len = v.len().saturating_mul(times).min(*budget);
    *budget -= len;
    Some(Bytes::from(
        v.iter().copied().cycle().take(len).collect::<Vec<u8>>(),
    ))
}

/// Recomputes the CRC of every batch whose framing is still intact, so a mutation gets past the checksum.
fn fix_crcs(data: &mut [u8]) {
    let mut at = 0usize;
    while data.len() - at >= annal_log::batch::HEADER_SIZE {
        let len = i32::from_be_bytes([data[at + 8], data[at + 9], data[at + 10], data[at + 11]]);
        let Some(size) = usize::try_from(len).ok().and_then(|l| l.checked_add(12)) else {
            return;
        };
        if size < annal_log::batch::HEADER_SIZE || size > data.len() - at {
            return;
        }
        let batch = &mut data[at..at + size];
        let crc = annal_log::batch::compute_crc(batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        at += size;
    }
}

struct Scratch {
    log: annal_log::Log,
    _dir: tempfile::TempDir,
}

static LOG: Mutex<Option<Scratch>> = Mutex::new(None);

fuzz_target!(|input: Input| {
    let mut data = Vec::new();
    let mut budget = VALUE_BUDGET;
    for spec in input.batches.iter().take(4) {
        if let Some(b) = encode(spec, &mut budget) {
            data.extend_from_slice(&b);
        }
    }
    for m in input.mutations.iter().take(4) {
        match m {
            Mutation::Xor { at, mask } if !data.is_empty() => {
                let i = *at as usize % data.len();
                data[i] ^= mask;
            }
            Mutation::SetI32 { at, value } if data.len() >= 4 => {
                let i = *at as usize % (data.len() - 3);
                data[i..i + 4].copy_from_slice(&value.to_be_bytes());
            }
            Mutation::Truncate { to } => data.truncate(*to as usize),
            Mutation::Insert { at, bytes } => {
                let i = *at as usize % (data.len() + 1);
                data.splice(i..i, bytes.iter().copied().take(64));
            }
            _ => {}
        }
    }
    if input.fix_crc {
        fix_crcs(&mut data);
    }
    let mut guard = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let scratch = guard.get_or_insert_with(|| {
        let dir = annal_fuzz::scratch_dir();
        let log = annal_log::Log::open(dir.path(), annal_fuzz::small_log_config())
            .expect("open a scratch log");
        Scratch { log, _dir: dir }
    });
    annal_fuzz::check_batches(&data, &mut scratch.log);
});
