//! Record batches (magic v2) for the CLI: building batches to produce and safely decoding fetched bytes.
//!
//! Encoding (with compression) and record parsing come from `kafka_protocol::records`; decompression is ours and
//! bounded (see `codec`). Decoding adds what a client needs on top:
//! fetched data may end in a partial batch (the broker cuts at `max_bytes`), control batches (transaction markers)
//! are not user records, and the record count in a batch header is checked against the bytes it covers before the
//! decoder reserves memory for it.

use anyhow::{anyhow, bail, Result};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

/// Bytes before the first record in a v2 batch (base offset .. record count).
pub const BATCH_HEADER_LEN: usize = 61;
/// Offset of the 4-byte batch length field, and of the bytes it counts.
const LENGTH_OFFSET: usize = 8;
const LOG_OVERHEAD: usize = 12;
const MAGIC_OFFSET: usize = 16;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const RECORD_COUNT_OFFSET: usize = 57;
/// The smallest encoded record: length, attributes, timestamp delta, offset delta, key length, value length and
/// header count, one byte each.
const MIN_RECORD_BYTES: usize = 7;

/// A record as the CLI produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub timestamp: i64,
}

/// Encodes `records` as one v2 batch (offsets 0..n; the broker assigns the real ones).
pub fn encode_batch(records: &[OutgoingRecord], compression: Compression) -> Result<Bytes> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever `offset - sequence` changes, and derives the batch's base
            // sequence from the first record. Counting up from NO_SEQUENCE keeps all records in one batch whose
            // base sequence is NO_SEQUENCE (-1), as a non-idempotent producer must send.
            sequence: NO_SEQUENCE.wrapping_add(i as i32),
            timestamp: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone()))
                .collect::<IndexMap<_, _>>(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )?;
    Ok(buf.freeze())
}

/// A record as fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub log_append_time: bool,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// What one partition's fetched bytes held.
#[derive(Debug, Default)]
pub struct DecodedRecords {
    /// User records at or after the fetch offset, in offset order.
    pub records: Vec<FetchedRecord>,
    /// The offset after the last complete batch, if there was one: where the next fetch starts even when every
    /// record in it was skipped (control batches, records before the fetch offset).
    pub next_offset: Option<i64>,
    /// True when bytes remained that did not form a complete batch (the broker cut at `max_bytes`).
    pub truncated: bool,
}

/// Decodes the `records` bytes of a fetch response for one partition, keeping records at or after `fetch_offset`.
pub fn decode_fetched(mut data: Bytes, fetch_offset: i64) -> Result<DecodedRecords> {
    let mut out = DecodedRecords::default();
    while !data.is_empty() {
        if data.len() < LOG_OVERHEAD {
            out.truncated = true;
            break;
        }
        let batch_len = i32::from_be_bytes(data[LENGTH_OFFSET..LOG_OVERHEAD].try_into().unwrap());
        let total = usize::try_from(batch_len)
            .ok()
            .and_then(|l| l.checked_add(LOG_OVERHEAD))
            .ok_or_else(|| anyhow!("fetched batch declares a negative length {batch_len}"))?;
        if total > data.len() {
            out.truncated = true;
            break;
        }
        let batch = data.split_to(total);
        if batch.len() < BATCH_HEADER_LEN {
            bail!(
                "fetched batch of {} bytes is shorter than a v2 batch header",
                batch.len()
            );
        }
        let magic = batch[MAGIC_OFFSET] as i8;
        if magic != 2 {
            bail!("fetched a message set with magic {magic}; only v2 record batches (Kafka 0.11+) are supported");
        }
        let base_offset = i64::from_be_bytes(batch[0..8].try_into().unwrap());
        let last_offset_delta = i32::from_be_bytes(
            batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
                .try_into()
                .unwrap(),
        );
        let attributes = i16::from_be_bytes(
            batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
                .try_into()
                .unwrap(),
        );
        let record_count = i32::from_be_bytes(
            batch[RECORD_COUNT_OFFSET..RECORD_COUNT_OFFSET + 4]
                .try_into()
                .unwrap(),
        );
        let is_control = attributes & (1 << 5) != 0;
        let last_offset = base_offset.saturating_add(i64::from(last_offset_delta.max(0)));
        out.next_offset = Some(last_offset.saturating_add(1));
        if is_control || last_offset < fetch_offset {
            continue;
        }
        let record_count = usize::try_from(record_count).map_err(|_| {
            anyhow!("batch at offset {base_offset} declares {record_count} records")
        })?;
        let compression = attributes & 0x7;
        if compression == 0 && record_count > (batch.len() - BATCH_HEADER_LEN) / MIN_RECORD_BYTES {
            bail!(
                "batch at offset {base_offset} declares {record_count} records in {} bytes; the data is corrupt",
                batch.len()
            );
        }
        let decompress = |buf: &mut Bytes, compression: Compression| -> Result<Bytes> {
            let plain =
                crate::codec::decompress(buf, compression, crate::codec::MAX_DECOMPRESSED_BATCH)?;
            if record_count > plain.len() / MIN_RECORD_BYTES {
                bail!(
                    "batch at offset {base_offset} declares {record_count} records in {} decompressed bytes; \
                     the data is corrupt",
                    plain.len()
                );
            }
            check_record_framing(&plain, record_count)
                .map_err(|e| anyhow!("batch at offset {base_offset} is corrupt: {e}"))?;
            Ok(plain)
        };
        let set = RecordBatchDecoder::decode_with_custom_compression(
            &mut batch.clone(),
            Some(decompress),
        )
        .map_err(|e| anyhow!("cannot decode the batch at offset {base_offset}: {e}"))?;
        for r in set.records {
            if r.offset < fetch_offset {
                continue;
            }
            out.records.push(FetchedRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                log_append_time: r.timestamp_type == TimestampType::LogAppend,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
    }
    Ok(out)
}

/// Walks the records of a decompressed batch and checks every length and count against the bytes that remain,
/// before the decoder trusts them: the decoder reserves memory for a record's header count up front.
fn check_record_framing(data: &[u8], record_count: usize) -> Result<()> {
    let mut pos = 0;
    for i in 0..record_count {
        let len = read_varint(data, &mut pos).ok_or_else(|| anyhow!("record {i}: bad length"))?;
        let len = usize::try_from(len).map_err(|_| anyhow!("record {i}: negative length {len}"))?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| anyhow!("record {i}: length {len} runs past the end of the batch"))?;
        let record = &data[pos..end];
        let mut at = 1; // attributes
        let bad = |what: &str| anyhow!("record {i}: bad {what}");
        read_varint(record, &mut at).ok_or_else(|| bad("timestamp delta"))?;
        read_varint(record, &mut at).ok_or_else(|| bad("offset delta"))?;
        for what in ["key", "value"] {
            let n = read_varint(record, &mut at).ok_or_else(|| bad(what))?;
            if n >= 0 {
                at = at
                    .checked_add(n as usize)
                    .filter(|&a| a <= record.len())
                    .ok_or_else(|| {
                        anyhow!("record {i}: {what} of {n} bytes runs past the record")
                    })?;
            } else if n != -1 {
                return Err(bad(what));
            }
        }
        let headers = read_varint(record, &mut at).ok_or_else(|| bad("header count"))?;
        // Each header takes at least two bytes (key length and value length).
        if headers < 0 || headers as usize > record.len().saturating_sub(at) / 2 {
            bail!(
                "record {i}: {headers} headers cannot fit in {} bytes",
                record.len().saturating_sub(at)
            );
        }
        pos = end;
    }
    Ok(())
}

/// A zigzag-encoded varint / varlong as Kafka writes them (at most 10 bytes).
fn read_varint(data: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in 0..10 {
        let byte = *data.get(*pos)?;
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: Option<&str>, value: &str, ts: i64) -> OutgoingRecord {
        OutgoingRecord {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: vec![
                ("h".into(), Some(Bytes::from_static(b"1"))),
                ("n".into(), None),
            ],
            timestamp: ts,
        }
    }

    /// Rewrites the base offset as a broker would on append.
    fn at_offset(batch: Bytes, base: i64) -> Bytes {
        let mut b = BytesMut::from(&batch[..]);
        b[0..8].copy_from_slice(&base.to_be_bytes());
        b.freeze()
    }

    #[test]
    fn round_trips_every_codec() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let input = vec![record(Some("k"), "v0", 1000), record(None, "v1", 1005)];
            let batch = at_offset(encode_batch(&input, codec).unwrap(), 40);
            let out = decode_fetched(batch, 40).unwrap();
            assert_eq!(out.records.len(), 2, "{codec:?}");
            assert_eq!(out.records[0].offset, 40);
            assert_eq!(out.records[1].offset, 41);
            assert_eq!(out.records[0].key.as_deref(), Some(&b"k"[..]));
            assert_eq!(out.records[1].key, None);
            assert_eq!(out.records[1].value.as_deref(), Some(&b"v1"[..]));
            assert_eq!(out.records[1].timestamp, 1005);
            assert_eq!(out.records[0].headers, input[0].headers);
            assert_eq!(out.next_offset, Some(42));
            assert!(!out.truncated);
        }
    }

    #[test]
    fn skips_records_before_fetch_offset_inside_a_batch() {
        let input: Vec<_> = (0..5).map(|i| record(None, &format!("v{i}"), i)).collect();
        let batch = at_offset(encode_batch(&input, Compression::None).unwrap(), 10);
        let out = decode_fetched(batch, 13).unwrap();
        let offsets: Vec<_> = out.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![13, 14]);
        assert_eq!(out.next_offset, Some(15));
    }

    #[test]
    fn many_records_make_one_non_idempotent_batch() {
        let input: Vec<_> = (0..50).map(|i| record(None, &format!("v{i}"), i)).collect();
        let batch = encode_batch(&input, Compression::None).unwrap();
        let declared =
            i32::from_be_bytes(batch[LENGTH_OFFSET..LOG_OVERHEAD].try_into().unwrap()) as usize;
        assert_eq!(declared + LOG_OVERHEAD, batch.len(), "exactly one batch");
        assert_eq!(&batch[0..8], &0i64.to_be_bytes(), "base offset 0");
        assert_eq!(
            i32::from_be_bytes(
                batch[RECORD_COUNT_OFFSET..RECORD_COUNT_OFFSET + 4]
                    .try_into()
                    .unwrap()
            ),
            50
        );
        assert_eq!(
            i32::from_be_bytes(
                batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
                    .try_into()
                    .unwrap()
            ),
            49
        );
        // Producer id -1, epoch -1, base sequence -1 (bytes 43..57).
        assert_eq!(&batch[43..51], &(-1i64).to_be_bytes());
        assert_eq!(&batch[51..53], &(-1i16).to_be_bytes());
        assert_eq!(&batch[53..57], &(-1i32).to_be_bytes());
    }

    #[test]
    fn partial_trailing_batch_is_reported_not_decoded() {
        let first = at_offset(
            encode_batch(&[record(None, "a", 1)], Compression::None).unwrap(),
            0,
        );
        let second = at_offset(
            encode_batch(&[record(None, "b", 2)], Compression::None).unwrap(),
            1,
        );
        let mut data = BytesMut::from(&first[..]);
        data.extend_from_slice(&second[..second.len() - 3]);
        let out = decode_fetched(data.freeze(), 0).unwrap();
        assert_eq!(out.records.len(), 1);
        assert_eq!(out.next_offset, Some(1));
        assert!(out.truncated);
    }

    #[test]
    fn absurd_record_count_is_refused_before_allocating() {
        let batch = encode_batch(&[record(None, "a", 1)], Compression::None).unwrap();
        let mut b = BytesMut::from(&batch[..]);
        b[RECORD_COUNT_OFFSET..RECORD_COUNT_OFFSET + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        let err = decode_fetched(b.freeze(), 0).unwrap_err().to_string();
        assert!(err.contains("declares"), "{err}");
    }

    #[test]
    fn absurd_header_count_is_refused_before_allocating() {
        let mut r = record(None, "v", 1);
        r.headers = vec![("h".into(), Some(Bytes::from_static(b"x")))];
        let batch = encode_batch(&[r], Compression::None).unwrap();
        // The record ends with: header count (zigzag 1 = 0x02), key length, "h", value length, "x".
        let mut b = BytesMut::from(&batch[..]);
        let at = b.len() - 5;
        assert_eq!(b[at], 0x02);
        // 0x7e is zigzag 63: far more headers than the 4 remaining bytes can hold. Re-sign the batch so only the
        // framing check can catch it.
        b[at] = 0x7e;
        let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = decode_fetched(b.freeze(), 0).unwrap_err().to_string();
        assert!(err.contains("headers cannot fit"), "{err}");
    }

    #[test]
    fn varints_decode_like_kafka() {
        let mut pos = 0;
        assert_eq!(read_varint(&[0x01], &mut pos), Some(-1));
        pos = 0;
        assert_eq!(read_varint(&[0x02], &mut pos), Some(1));
        pos = 0;
        assert_eq!(read_varint(&[0xd0, 0x0f], &mut pos), Some(1000));
        assert_eq!(pos, 2);
        pos = 0;
        assert_eq!(read_varint(&[0x80, 0x80], &mut pos), None);
    }

    #[test]
    fn negative_batch_length_is_an_error() {
        let mut b = vec![0u8; 70];
        b[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(decode_fetched(Bytes::from(b), 0).is_err());
    }

    #[test]
    fn control_batches_are_skipped_but_advance_the_position() {
        let batch = encode_batch(&[record(None, "marker", 1)], Compression::None).unwrap();
        let mut b = BytesMut::from(&batch[..]);
        b[0..8].copy_from_slice(&7i64.to_be_bytes());
        let attrs = i16::from_be_bytes([b[21], b[22]]) | (1 << 5);
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        // The CRC no longer matches, which is fine: a control batch is never decoded.
        let out = decode_fetched(b.freeze(), 7).unwrap();
        assert!(out.records.is_empty());
        assert_eq!(out.next_offset, Some(8));
    }
}
