//! Kafka v2 record batches (`DefaultRecordBatch`): the header layout, validation, and offset assignment.
//!
//! The engine stores batches exactly as producers send them. It reads and rewrites only header fields: the base
//! offset and partition leader epoch (outside the CRC, so rewriting them needs no checksum work), and, for
//! `LogAppendTime` topics, the attributes and max timestamp (then the CRC is recomputed over the same bytes).
//! Record payloads are never decompressed on the append path.

/// Byte offsets of the v2 header fields.
pub mod field {
    pub const BASE_OFFSET: usize = 0;
    pub const LENGTH: usize = 8;
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const BASE_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORDS_COUNT: usize = 57;
}

/// Bytes before the `length` field's coverage starts: base offset (8) + length (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of a v2 batch header; the records follow.
pub const HEADER_SIZE: usize = 61;
/// The only batch format Annal stores (Kafka 4 dropped v0 and v1).
pub const MAGIC_V2: i8 = 2;

pub(crate) const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub(crate) const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
pub(crate) const ATTR_TRANSACTIONAL: i16 = 0x10;
pub(crate) const ATTR_CONTROL: i16 = 0x20;
/// KIP-534: the base timestamp holds the batch's delete horizon (set by the cleaner on batches that keep
/// tombstones); record timestamps stay `base timestamp + delta`.
pub(crate) const ATTR_DELETE_HORIZON: i16 = 0x40;

/// No producer id (a non-idempotent producer).
pub const NO_PRODUCER_ID: i64 = -1;
/// No sequence number.
pub const NO_SEQUENCE: i32 = -1;

/// Compression codec of a batch (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// The codec id in a batch's attributes.
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Parses Kafka's codec names (`compression.type`); `uncompressed` and `none` are the same.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "none" | "uncompressed" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => return None,
        })
    }

    pub fn from_attributes(attributes: i16) -> Option<Self> {
        Some(match attributes & ATTR_COMPRESSION_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }

    /// Kafka's name for the codec.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// The decoded header of one v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// The `length` field: bytes after it. The whole batch is `LOG_OVERHEAD + length` bytes.
    pub length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Decodes a header from at least [`HEADER_SIZE`] bytes; `None` if fewer are given.
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < HEADER_SIZE {
            return None;
        }
        Some(BatchHeader {
            base_offset: read_i64(bytes, field::BASE_OFFSET),
            length: read_i32(bytes, field::LENGTH),
            partition_leader_epoch: read_i32(bytes, field::PARTITION_LEADER_EPOCH),
            magic: bytes[field::MAGIC] as i8,
            crc: read_i32(bytes, field::CRC) as u32,
            attributes: read_i16(bytes, field::ATTRIBUTES),
            last_offset_delta: read_i32(bytes, field::LAST_OFFSET_DELTA),
            base_timestamp: read_i64(bytes, field::BASE_TIMESTAMP),
            max_timestamp: read_i64(bytes, field::MAX_TIMESTAMP),
            producer_id: read_i64(bytes, field::PRODUCER_ID),
            producer_epoch: read_i16(bytes, field::PRODUCER_EPOCH),
            base_sequence: read_i32(bytes, field::BASE_SEQUENCE),
            records_count: read_i32(bytes, field::RECORDS_COUNT),
        })
    }

    /// Total size of the batch in bytes, including the offset and length fields.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + self.length.max(0) as usize
    }

    /// Offset of the batch's last record.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The next offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    pub fn compression(&self) -> Option<Compression> {
        Compression::from_attributes(self.attributes)
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// KIP-534's delete horizon: tombstones in this batch may be removed by the cleaner from this time on.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }

    /// True when the batch carries an idempotent producer's id and sequence.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence number of the batch's last record (sequences wrap at `i32::MAX`, as in Kafka).
    pub fn last_sequence(&self) -> i32 {
        add_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// `sequence + increment`, wrapping past `i32::MAX` to 0 as Kafka's `DefaultRecordBatch.incrementSequence`.
pub fn add_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// `sequence - decrement`, wrapping below 0 to `i32::MAX` as Kafka's `DefaultRecordBatch.decrementSequence`.
pub fn sub_sequence(sequence: i32, decrement: i32) -> i32 {
    debug_assert!(sequence >= 0 && decrement >= 0);
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// CRC-32C of a whole batch's checksummed region (attributes to the end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    // crc-fast folds with (VP)CLMULQDQ: about twice the speed of `crc32c`'s SSE4.2 loop on these machines, and
    // this CRC is most of what an append costs beyond the write itself.
    crc_fast::checksum(
        crc_fast::CrcAlgorithm::Crc32Iscsi,
        &batch[field::ATTRIBUTES..],
    ) as u32
}

/// What the engine learned from validating one batch of a producer's request.
#[derive(Debug, Clone, Copy)]
pub struct ValidatedBatch {
    /// Byte position of the batch within the request buffer.
    pub position: usize,
    pub header: BatchHeader,
}

/// Checks that `bytes` is a sequence of whole, well-formed v2 batches: framing, magic, CRC, size limit, and
/// internally consistent counts. Nothing is modified. `position`s in errors are relative to `bytes`.
pub fn validate_batches(bytes: &[u8], max_batch_bytes: u32) -> crate::Result<Vec<ValidatedBatch>> {
    validate(bytes, max_batch_bytes, false)
}

/// [`validate_batches`] for batches a leader replicates: they may have been cleaned (compaction), so a batch can
/// hold fewer records than its offset span (its last offset is kept) or none at all (an idempotent producer's
/// last batch, emptied).
pub fn validate_replicated_batches(
    bytes: &[u8],
    max_batch_bytes: u32,
) -> crate::Result<Vec<ValidatedBatch>> {
    validate(bytes, max_batch_bytes, true)
}

fn validate(
    bytes: &[u8],
    max_batch_bytes: u32,
    cleaned_allowed: bool,
) -> crate::Result<Vec<ValidatedBatch>> {
    use crate::LogError::{CorruptRecord, InvalidRecord, MessageTooLarge};
    let mut batches = Vec::new();
    let mut position = 0usize;
    if bytes.is_empty() {
        return Err(InvalidRecord {
            position,
            reason: "the request holds no record batch".into(),
        });
    }
    while position < bytes.len() {
        let rest = &bytes[position..];
        if rest.len() < HEADER_SIZE {
            return Err(CorruptRecord {
                position,
                reason: format!(
                    "{} trailing bytes are too few for a batch header ({HEADER_SIZE})",
                    rest.len()
                ),
            });
        }
        let header = BatchHeader::parse(rest).expect("length checked above");
        let min_length = (HEADER_SIZE - LOG_OVERHEAD) as i32;
        if header.length < min_length {
            return Err(CorruptRecord {
                position,
                reason: format!(
                    "batch length field {} is below the minimum {min_length}",
                    header.length
                ),
            });
        }
        let size = header.size();
        if size > rest.len() {
            return Err(CorruptRecord {
                position,
                reason: format!(
                    "batch declares {size} bytes but only {} remain (truncated)",
                    rest.len()
                ),
            });
        }
        if header.magic != MAGIC_V2 {
            return Err(CorruptRecord {
                position,
                reason: format!(
                    "magic byte {} is not 2; only v2 record batches are supported",
                    header.magic
                ),
            });
        }
        if size > max_batch_bytes as usize {
            return Err(MessageTooLarge {
                size,
                max: max_batch_bytes,
            });
        }
        let batch = &rest[..size];
        let crc = compute_crc(batch);
        if crc != header.crc {
            return Err(CorruptRecord {
                position,
                reason: format!(
                    "CRC-32C mismatch: stored {:#010x}, computed {crc:#010x}",
                    header.crc
                ),
            });
        }
        let Some(compression) = header.compression() else {
            return Err(InvalidRecord {
                position,
                reason: format!(
                    "unknown compression codec in attributes {:#x}",
                    header.attributes
                ),
            });
        };
        if cleaned_allowed {
            if header.records_count < 0 || header.last_offset_delta < header.records_count - 1 {
                return Err(InvalidRecord {
                    position,
                    reason: format!(
                        "a replicated batch holds {} records over a last offset delta of {}",
                        header.records_count, header.last_offset_delta
                    ),
                });
            }
        } else if header.records_count <= 0 {
            return Err(InvalidRecord {
                position,
                reason: format!(
                    "batch holds {} records; at least one is required",
                    header.records_count
                ),
            });
        }
        if !cleaned_allowed && header.last_offset_delta != header.records_count - 1 {
            return Err(InvalidRecord {
                position,
                reason: format!(
                    "last offset delta {} does not match the record count {}",
                    header.last_offset_delta, header.records_count
                ),
            });
        }
        if compression == Compression::None {
            check_uncompressed_records(&batch[HEADER_SIZE..], header.records_count)
                .map_err(|reason| InvalidRecord { position, reason })?;
        }
        batches.push(ValidatedBatch { position, header });
        position += size;
    }
    Ok(batches)
}

/// Walks the records of an uncompressed batch field by field: the count must match, every length must fit
/// inside its record, and the records must exactly fill the batch. Only varints are decoded (no copies), so a
/// producer cannot store a record that consumers would fail to parse (Kafka validates the same way).
fn check_uncompressed_records(mut records: &[u8], records_count: i32) -> Result<(), String> {
    for index in 0..records_count {
        let (length, used) = read_varint(records)
            .ok_or_else(|| format!("record {index}: malformed length varint"))?;
        if length < 0 || (length as usize) > records.len() - used {
            return Err(format!(
                "record {index}: length {length} overruns the batch"
            ));
        }
        let body = &records[used..used + length as usize];
        check_record_body(body).map_err(|reason| format!("record {index}: {reason}"))?;
        records = &records[used + length as usize..];
    }
    if !records.is_empty() {
        return Err(format!(
            "{} bytes follow the last of {records_count} records",
            records.len()
        ));
    }
    Ok(())
}

/// Checks one record's fields: attributes, timestamp delta, offset delta, key, value, headers.
fn check_record_body(body: &[u8]) -> Result<(), String> {
    let mut rest = body.get(1..).ok_or("empty record")?; // attributes
    let take_varlong = |rest: &mut &[u8], what: &str| -> Result<i64, String> {
        let (value, used) = read_varlong(rest).ok_or_else(|| format!("malformed {what}"))?;
        *rest = &rest[used..];
        Ok(value)
    };
    let take_varint = |rest: &mut &[u8], what: &str| -> Result<i32, String> {
        let (value, used) = read_varint(rest).ok_or_else(|| format!("malformed {what}"))?;
        *rest = &rest[used..];
        Ok(value)
    };
    let take_bytes = |rest: &mut &[u8], what: &str, nullable: bool| -> Result<(), String> {
        let (len, used) = read_varint(rest).ok_or_else(|| format!("malformed {what} length"))?;
        *rest = &rest[used..];
        if len == -1 && nullable {
            return Ok(());
        }
        if len < 0 || len as usize > rest.len() {
            return Err(format!(
                "{what} length {len} is invalid or overruns the record"
            ));
        }
        *rest = &rest[len as usize..];
        Ok(())
    };
    take_varlong(&mut rest, "timestamp delta")?;
    take_varint(&mut rest, "offset delta")?;
    take_bytes(&mut rest, "key", true)?;
    take_bytes(&mut rest, "value", true)?;
    let headers = take_varint(&mut rest, "header count")?;
    // Each header needs at least two bytes, so a count beyond that is a lie (checked before looping).
    if headers < 0 || headers as usize > rest.len() / 2 {
        return Err(format!(
            "header count {headers} is invalid for the bytes left"
        ));
    }
    for _ in 0..headers {
        take_bytes(&mut rest, "header key", false)?;
        take_bytes(&mut rest, "header value", true)?;
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} unparsed bytes at the end of the record",
            rest.len()
        ));
    }
    Ok(())
}

/// Decodes a zig-zag varint (as Kafka's `ByteUtils.readVarint`); returns the value and the bytes used.
pub fn read_varint(bytes: &[u8]) -> Option<(i32, usize)> {
    let mut value: u32 = 0;
    for (i, &b) in bytes.iter().take(5).enumerate() {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((value >> 1) as i32) ^ -((value & 1) as i32), i + 1));
        }
    }
    None
}

/// Decodes a zig-zag varlong; returns the value and the bytes used.
pub fn read_varlong(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((value >> 1) as i64) ^ -((value & 1) as i64), i + 1));
        }
    }
    None
}

pub(crate) fn write_varint(out: &mut Vec<u8>, value: i32) {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Timestamps of a batch's records, in order, decompressing at most `limit` bytes; `None` if the batch is
/// malformed or expands past the limit. Used by timestamp lookups, which are record-exact (as Kafka's are).
pub fn record_timestamps(batch: &[u8], limit: usize) -> Option<Vec<i64>> {
    let decoded = crate::records::DecodedBatch::new(batch, limit).ok()?;
    decoded
        .records()
        .map(|r| r.ok().map(|r| r.timestamp))
        .collect()
}

/// Rewrites the fields a broker owns: base offset and partition leader epoch (outside the CRC).
pub fn assign_offset(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    batch[field::BASE_OFFSET..field::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// Marks a batch as `LogAppendTime` with the broker's clock and recomputes its CRC.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = read_i16(batch, field::ATTRIBUTES) | ATTR_TIMESTAMP_TYPE;
    batch[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[field::MAX_TIMESTAMP..field::MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A record's key and value for [`build_batch`]; `None` is a null key or value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Producer fields for [`build_batch`].
#[derive(Debug, Clone, Copy)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

impl Default for ProducerFields {
    fn default() -> Self {
        ProducerFields {
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: NO_SEQUENCE,
            transactional: false,
        }
    }
}

/// Builds an uncompressed v2 batch of `(key, value)` records, all stamped `timestamp_ms`, base offset 0.
/// For tests, benchmarks and tools; producers build their own.
pub fn build_uncompressed_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Vec<u8> {
    let timestamps = vec![timestamp_ms; records.len()];
    build_batch(records, &timestamps, ProducerFields::default())
}

/// Builds an uncompressed v2 batch with one timestamp per record and the given producer fields.
pub fn build_batch(
    records: &[KeyValue<'_>],
    timestamps_ms: &[i64],
    producer: ProducerFields,
) -> Vec<u8> {
    assert!(!records.is_empty() && records.len() == timestamps_ms.len());
    let base_timestamp = timestamps_ms[0];
    let max_timestamp = *timestamps_ms.iter().max().expect("non-empty");
    let mut body = Vec::new();
    for (delta, ((key, value), ts)) in records.iter().zip(timestamps_ms).enumerate() {
        let mut record = vec![0u8]; // attributes
        write_varlong(&mut record, ts - base_timestamp);
        write_varint(&mut record, delta as i32);
        for field in [key, value] {
            match field {
                Some(bytes) => {
                    write_varint(&mut record, bytes.len() as i32);
                    record.extend_from_slice(bytes);
                }
                None => write_varint(&mut record, -1),
            }
        }
        write_varint(&mut record, 0); // headers
        write_varint(&mut body, record.len() as i32);
        body.extend_from_slice(&record);
    }
    let mut batch = Vec::with_capacity(HEADER_SIZE + body.len());
    batch.extend_from_slice(&0i64.to_be_bytes());
    batch.extend_from_slice(&((HEADER_SIZE - LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch.push(MAGIC_V2 as u8);
    batch.extend_from_slice(&0u32.to_be_bytes()); // crc, filled below
    let attributes: i16 = if producer.transactional {
        ATTR_TRANSACTIONAL
    } else {
        0
    };
    batch.extend_from_slice(&attributes.to_be_bytes());
    batch.extend_from_slice(&((records.len() - 1) as i32).to_be_bytes());
    batch.extend_from_slice(&base_timestamp.to_be_bytes());
    batch.extend_from_slice(&max_timestamp.to_be_bytes());
    batch.extend_from_slice(&producer.producer_id.to_be_bytes());
    batch.extend_from_slice(&producer.producer_epoch.to_be_bytes());
    batch.extend_from_slice(&producer.base_sequence.to_be_bytes());
    batch.extend_from_slice(&(records.len() as i32).to_be_bytes());
    batch.extend_from_slice(&body);
    let crc = compute_crc(&batch);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

pub(crate) fn read_i16(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

pub(crate) fn read_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn read_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batch_validates_and_round_trips_timestamps() {
        let batch = build_batch(
            &[(Some(b"k".as_slice()), Some(b"v".as_slice())), (None, None)],
            &[100, 250],
            ProducerFields::default(),
        );
        let validated = validate_batches(&batch, 1 << 20).unwrap();
        assert_eq!(validated.len(), 1);
        let header = validated[0].header;
        assert_eq!(
            (
                header.records_count,
                header.last_offset_delta,
                header.max_timestamp
            ),
            (2, 1, 250)
        );
        assert_eq!(record_timestamps(&batch, 1 << 20), Some(vec![100, 250]));
    }

    #[test]
    fn flipped_payload_bit_fails_the_crc() {
        let mut batch = build_uncompressed_batch(&[(None, Some(b"value".as_slice()))], 1);
        let last = batch.len() - 2;
        batch[last] ^= 0x01;
        assert!(matches!(
            validate_batches(&batch, 1 << 20),
            Err(crate::LogError::CorruptRecord { .. })
        ));
    }

    #[test]
    fn offset_and_epoch_rewrite_keeps_the_crc_valid() {
        let mut batch = build_uncompressed_batch(&[(None, Some(b"value".as_slice()))], 1);
        assign_offset(&mut batch, 42, 7);
        let header = validate_batches(&batch, 1 << 20).unwrap()[0].header;
        assert_eq!((header.base_offset, header.partition_leader_epoch), (42, 7));
    }

    #[test]
    fn log_append_time_recomputes_the_crc() {
        let mut batch = build_uncompressed_batch(&[(None, Some(b"value".as_slice()))], 1);
        set_log_append_time(&mut batch, 99);
        let header = validate_batches(&batch, 1 << 20).unwrap()[0].header;
        assert!(header.is_log_append_time());
        assert_eq!(header.max_timestamp, 99);
    }

    #[test]
    fn oversized_and_truncated_batches_are_rejected() {
        let batch = build_uncompressed_batch(&[(None, Some(&[0u8; 100][..]))], 1);
        assert!(matches!(
            validate_batches(&batch, 50),
            Err(crate::LogError::MessageTooLarge { .. })
        ));
        assert!(matches!(
            validate_batches(&batch[..batch.len() - 1], 1 << 20),
            Err(crate::LogError::CorruptRecord { .. })
        ));
    }

    #[test]
    fn sequence_wraps_like_kafka() {
        assert_eq!(add_sequence(i32::MAX, 1), 0);
        assert_eq!(add_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(add_sequence(5, 4), 9);
    }
}
