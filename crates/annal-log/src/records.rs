//! Records inside v2 batches, for every codec: bounded decompression, record iteration, and batch encoding.
//!
//! The append path never comes here (it stores batches as sent). Readers that need individual records do:
//! timestamp lookups (ListOffsets by time and MAX_TIMESTAMP are record-exact, as Kafka's are), the cleaner
//! (which keeps the latest record per key), and the broker's topic `compression.type` recompression.
//!
//! Decompression is bounded: a batch may expand to at most the caller's `limit` (see
//! [`crate::LogConfig::decompressed_batch_limit`]); past it the batch is an error, and no buffer larger than the
//! limit is ever allocated, whatever sizes the compressed stream claims. The record count the header declares
//! is checked against the bytes before anything is allocated per record.
//!
//! Formats are Kafka's: gzip (possibly several members), snappy in snappy-java's ("xerial") framing or raw,
//! LZ4 frames with independent blocks, zstd frames.

use std::borrow::Cow;
use std::io::{Read, Write};

use crate::batch::{
    self, field, BatchHeader, Compression, ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON, HEADER_SIZE,
    LOG_OVERHEAD, MAGIC_V2,
};

/// Why the records of a batch could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordsError(pub String);

fn err(reason: impl Into<String>) -> RecordsError {
    RecordsError(reason.into())
}

/// The smallest encoded record: length, attributes, timestamp delta, offset delta, key length, value length and
/// header count, one byte each.
const MIN_RECORD_BYTES: usize = 7;

/// snappy-java's stream header: magic, version 1, compatible version 1.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// snappy-java's block size.
const XERIAL_BLOCK: usize = 32 * 1024;

/// Decompresses a batch's records section, producing at most `limit` bytes.
pub fn decompress(codec: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, RecordsError> {
        let mut out = Vec::new();
        reader
            .take((limit as u64).saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| err(format!("{} data is corrupt: {e}", codec.name())))?;
        if out.len() > limit {
            return Err(err(format!(
                "a {} batch decompresses to more than {limit} bytes (a decompression bomb or a limit set too low)",
                codec.name()
            )));
        }
        Ok(out)
    };
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(err(format!("{} record bytes exceed {limit}", input.len())));
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => bounded(&mut flate2::read::MultiGzDecoder::new(input)),
        Compression::Lz4 => bounded(&mut lz4_flex::frame::FrameDecoder::new(input)),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(input)
                .map_err(|e| err(format!("zstd data is corrupt: {e}")))?;
            // The decoder's window (its memory) is at most 32 MiB; producers use far less.
            decoder
                .window_log_max(25)
                .map_err(|e| err(format!("zstd: {e}")))?;
            bounded(&mut decoder)
        }
        Compression::Snappy => snappy_decompress(input, limit),
    }
}

fn snappy_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let mut decoder = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), RecordsError> {
        let len = snap::raw::decompress_len(block).map_err(|e| err(format!("snappy: {e}")))?;
        if len > limit.saturating_sub(out.len()) {
            return Err(err(format!(
                "a snappy batch decompresses to more than {limit} bytes (a decompression bomb or a limit set too low)"
            )));
        }
        let start = out.len();
        out.resize(start + len, 0);
        decoder
            .decompress(block, &mut out[start..])
            .map_err(|e| err(format!("snappy data is corrupt: {e}")))?;
        Ok(())
    };
    if input.len() < XERIAL_HEADER.len() || &input[..XERIAL_MAGIC.len()] != XERIAL_MAGIC {
        // Raw snappy, as some non-Java clients write it (Kafka's reader accepts it too).
        block(input, &mut out)?;
        return Ok(out);
    }
    let mut rest = &input[XERIAL_HEADER.len()..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(err("snappy: truncated block length"));
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4..];
        if len > rest.len() {
            return Err(err(format!(
                "snappy: block of {len} bytes with only {} left",
                rest.len()
            )));
        }
        block(&rest[..len], &mut out)?;
        rest = &rest[len..];
    }
    Ok(out)
}

/// Compresses a records section with `codec`. `level` is the codec's level (KIP-390); `None` is Kafka's default.
/// LZ4 has one level here (lz4_flex implements the fast compressor only): its level is accepted and ignored.
pub fn compress(
    codec: Compression,
    input: &[u8],
    level: Option<i32>,
) -> Result<Vec<u8>, RecordsError> {
    let io = |e: std::io::Error| err(format!("{} compression failed: {e}", codec.name()));
    Ok(match codec {
        Compression::None => input.to_vec(),
        Compression::Gzip => {
            let level = level.map_or(flate2::Compression::default(), |l| {
                flate2::Compression::new(l.clamp(1, 9) as u32)
            });
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), level);
            enc.write_all(input).map_err(io)?;
            enc.finish().map_err(io)?
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(input.len() / 2 + 32);
            out.extend_from_slice(XERIAL_HEADER);
            let mut encoder = snap::raw::Encoder::new();
            for chunk in input.chunks(XERIAL_BLOCK) {
                let block = encoder
                    .compress_vec(chunk)
                    .map_err(|e| err(format!("snappy compression failed: {e}")))?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            out
        }
        Compression::Lz4 => {
            // Kafka's reader (KafkaLZ4BlockInputStream) needs independent blocks.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(input).map_err(io)?;
            enc.finish()
                .map_err(|e| err(format!("lz4 compression failed: {e}")))?
        }
        Compression::Zstd => zstd::bulk::compress(input, level.unwrap_or(3)).map_err(io)?,
    })
}

/// One record of a batch, borrowing from the batch (or its decompressed records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub offset: i64,
    /// The record's timestamp: `base timestamp + delta`, or the batch's max timestamp for `LogAppendTime`.
    pub timestamp: i64,
    pub attributes: i8,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The header count varint followed by the encoded headers, exactly as stored.
    pub headers: &'a [u8],
}

impl Record<'_> {
    /// A record with a key and a null value: a delete for compaction.
    pub fn is_tombstone(&self) -> bool {
        self.key.is_some() && self.value.is_none()
    }
}

/// A record copied out of its batch (key lookups return these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The header count varint followed by the encoded headers, as stored
    /// (`annal_log::key_index::parse_headers` parses them).
    pub headers: Vec<u8>,
}

impl From<&Record<'_>> for OwnedRecord {
    fn from(r: &Record<'_>) -> OwnedRecord {
        OwnedRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            headers: r.headers.to_vec(),
        }
    }
}

/// A batch whose records can be iterated: the header and the (decompressed) records section.
#[derive(Debug, Clone)]
pub struct DecodedBatch<'a> {
    pub header: BatchHeader,
    records: Cow<'a, [u8]>,
}

impl<'a> DecodedBatch<'a> {
    /// Decodes the batch in `bytes` (one whole batch, as stored). Compressed records expand to at most `limit`
    /// bytes. The CRC is not checked here (validation and recovery do that).
    pub fn new(bytes: &'a [u8], limit: usize) -> Result<DecodedBatch<'a>, RecordsError> {
        let header = BatchHeader::parse(bytes).ok_or_else(|| err("truncated batch header"))?;
        if header.magic != MAGIC_V2 {
            return Err(err(format!("magic {} is not 2", header.magic)));
        }
        let size = header.size();
        if size < HEADER_SIZE || size > bytes.len() {
            return Err(err(format!(
                "batch declares {size} bytes but {} are given",
                bytes.len()
            )));
        }
        let codec = header.compression().ok_or_else(|| {
            err(format!(
                "unknown compression codec in attributes {:#x}",
                header.attributes
            ))
        })?;
        let section = &bytes[HEADER_SIZE..size];
        let records = match codec {
            Compression::None => Cow::Borrowed(section),
            codec => Cow::Owned(decompress(codec, section, limit)?),
        };
        if header.records_count < 0
            || header.records_count as usize > records.len() / MIN_RECORD_BYTES
        {
            return Err(err(format!(
                "batch declares {} records in {} bytes of records",
                header.records_count,
                records.len()
            )));
        }
        Ok(DecodedBatch { header, records })
    }

    /// Bytes of the records section after decompression.
    pub fn records_len(&self) -> usize {
        self.records.len()
    }

    /// The records in order. Each item fails if the record is malformed; the iteration then ends.
    pub fn records(&self) -> RecordIter<'_> {
        RecordIter {
            header: self.header,
            rest: &self.records,
            index: 0,
            failed: false,
        }
    }

    /// All records, or the first error (also when fewer records than declared, or bytes after them).
    pub fn collect_records(&self) -> Result<Vec<Record<'_>>, RecordsError> {
        let mut out = Vec::with_capacity(self.header.records_count.max(0) as usize);
        let mut iter = self.records();
        for record in iter.by_ref() {
            out.push(record?);
        }
        if !iter.rest.is_empty() {
            return Err(err(format!(
                "{} bytes follow the last of {} records",
                iter.rest.len(),
                self.header.records_count
            )));
        }
        Ok(out)
    }
}

/// The records of one stored batch, decompressed and parsed only as far as the records asked for: a key lookup
/// that wants the record at one offset of a 1 MiB lz4 batch inflates the prefix up to it, not the whole batch, and
/// copies nothing but the record it returns. Later lookups in the same batch go on from where the last one
/// stopped (offsets already passed are found again by binary search). Bounded as [`decompress`] is: at most
/// `limit` bytes of records, read in [`LAZY_READ_BYTES`] steps.
pub struct LazyRecords {
    header: BatchHeader,
    /// The records section decompressed so far (all of it for uncompressed and snappy batches).
    buf: Vec<u8>,
    /// The decompressor over the stored bytes, until it reaches the end of the stream.
    reader: Option<Box<dyn Read + Send>>,
    codec: Compression,
    limit: usize,
    /// `(offset, start, end)` in `buf` of every record parsed so far, in offset order.
    parsed: Vec<(i64, usize, usize)>,
    /// Where in `buf` the next record starts.
    cursor: usize,
}

/// How much a [`LazyRecords`] decompresses at a time.
pub const LAZY_READ_BYTES: usize = 64 * 1024;

impl LazyRecords {
    /// Reads the batch in `bytes` (one whole stored batch; the CRC is not checked here). Nothing is decompressed
    /// yet, except a snappy batch (its blocks are small and its decoder is not a stream).
    pub fn new(bytes: Vec<u8>, limit: usize) -> Result<LazyRecords, RecordsError> {
        let header = BatchHeader::parse(&bytes).ok_or_else(|| err("truncated batch header"))?;
        if header.magic != MAGIC_V2 {
            return Err(err(format!("magic {} is not 2", header.magic)));
        }
        let size = header.size();
        if size < HEADER_SIZE || size > bytes.len() {
            return Err(err(format!(
                "batch declares {size} bytes but {} are given",
                bytes.len()
            )));
        }
        if header.records_count < 0 {
            return Err(err(format!(
                "batch declares {} records",
                header.records_count
            )));
        }
        let codec = header.compression().ok_or_else(|| {
            err(format!(
                "unknown compression codec in attributes {:#x}",
                header.attributes
            ))
        })?;
        // An uncompressed batch is parsed where it lies (its records start after the header); a compressed one
        // inflates into a buffer of its own.
        let mut cursor = 0;
        let (buf, reader): (Vec<u8>, Option<Box<dyn Read + Send>>) = match codec {
            Compression::None => {
                if size - HEADER_SIZE > limit {
                    return Err(err(format!(
                        "{} record bytes exceed {limit}",
                        size - HEADER_SIZE
                    )));
                }
                let mut stored = bytes;
                stored.truncate(size);
                cursor = HEADER_SIZE;
                (stored, None)
            }
            Compression::Snappy => (snappy_decompress(&bytes[HEADER_SIZE..size], limit)?, None),
            Compression::Gzip | Compression::Lz4 | Compression::Zstd => {
                let mut stored = std::io::Cursor::new(bytes);
                stored.set_position(HEADER_SIZE as u64);
                let section = stored.take((size - HEADER_SIZE) as u64);
                let reader: Box<dyn Read + Send> = match codec {
                    Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(section)),
                    Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(section)),
                    _ => {
                        let mut decoder = zstd::stream::read::Decoder::new(section)
                            .map_err(|e| err(format!("zstd data is corrupt: {e}")))?;
                        // The decoder's window (its memory) is at most 32 MiB; producers use far less.
                        decoder
                            .window_log_max(25)
                            .map_err(|e| err(format!("zstd: {e}")))?;
                        Box::new(decoder)
                    }
                };
                (Vec::new(), Some(reader))
            }
        };
        Ok(LazyRecords {
            header,
            buf,
            reader,
            codec,
            limit,
            parsed: Vec::new(),
            cursor,
        })
    }

    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The record at `offset`, or `None` when the batch has none there (compaction removed it).
    pub fn record_at(&mut self, offset: i64) -> Result<Option<Record<'_>>, RecordsError> {
        let passed = self
            .parsed
            .last()
            .is_some_and(|(last, _, _)| *last >= offset);
        if !passed {
            while self.parsed.len() < self.header.records_count as usize {
                let (found, start, end) = self.parse_next()?;
                self.parsed.push((found, start, end));
                if found >= offset {
                    break;
                }
            }
        }
        let Ok(i) = self.parsed.binary_search_by_key(&offset, |(o, _, _)| *o) else {
            return Ok(None);
        };
        let (_, start, end) = self.parsed[i];
        let mut slice = &self.buf[start..end];
        parse_record(&self.header, &mut slice)
            .map(Some)
            .map_err(err)
    }

    /// Parses the record at the cursor, decompressing more as needed: its offset and its span in `buf`.
    fn parse_next(&mut self) -> Result<(i64, usize, usize), RecordsError> {
        let index = self.parsed.len();
        loop {
            let rest = &self.buf[self.cursor..];
            if let Some((length, used)) = batch::read_varint(rest) {
                if length < 0 {
                    return Err(err(format!("record {index}: length {length} is negative")));
                }
                if (length as usize) <= rest.len() - used {
                    let end = self.cursor + used + length as usize;
                    let mut slice = &self.buf[self.cursor..end];
                    let record = parse_record(&self.header, &mut slice)
                        .map_err(|reason| err(format!("record {index}: {reason}")))?;
                    if self
                        .parsed
                        .last()
                        .is_some_and(|(o, _, _)| *o >= record.offset)
                    {
                        return Err(err(format!("record {index}: offsets out of order")));
                    }
                    let start = self.cursor;
                    self.cursor = end;
                    return Ok((record.offset, start, end));
                }
            }
            if !self.read_more()? {
                return Err(err(format!(
                    "record {index} of {} is cut short by the end of the records",
                    self.header.records_count
                )));
            }
        }
    }

    /// Decompresses up to [`LAZY_READ_BYTES`] more; false at the end of the stream.
    fn read_more(&mut self) -> Result<bool, RecordsError> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(false);
        };
        let old = self.buf.len();
        // One byte past the limit tells a bomb from a batch of exactly `limit` bytes.
        let room = (self.limit + 1).saturating_sub(old).min(LAZY_READ_BYTES);
        if room == 0 {
            return Err(self.bomb());
        }
        self.buf.resize(old + room, 0);
        let read = reader.read(&mut self.buf[old..]);
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                self.buf.truncate(old);
                return Err(err(format!("{} data is corrupt: {e}", self.codec.name())));
            }
        };
        self.buf.truncate(old + n);
        if self.buf.len() > self.limit {
            return Err(self.bomb());
        }
        if n == 0 {
            self.reader = None;
        }
        Ok(n > 0)
    }

    fn bomb(&self) -> RecordsError {
        err(format!(
            "a {} batch decompresses to more than {} bytes (a decompression bomb or a limit set too low)",
            self.codec.name(),
            self.limit
        ))
    }
}

/// Iterator over the records of a [`DecodedBatch`].
pub struct RecordIter<'a> {
    header: BatchHeader,
    rest: &'a [u8],
    index: i32,
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.index >= self.header.records_count {
            return None;
        }
        let index = self.index;
        self.index += 1;
        match parse_record(&self.header, &mut self.rest) {
            Ok(record) => Some(Ok(record)),
            Err(reason) => {
                self.failed = true;
                Some(Err(err(format!("record {index}: {reason}"))))
            }
        }
    }
}

fn parse_record<'a>(header: &BatchHeader, rest: &mut &'a [u8]) -> Result<Record<'a>, String> {
    let (length, used) = batch::read_varint(rest).ok_or("malformed length varint")?;
    if length < 0 || length as usize > rest.len() - used {
        return Err(format!("length {length} overruns the batch"));
    }
    let mut body: &'a [u8] = &rest[used..used + length as usize];
    *rest = &rest[used + length as usize..];
    let attributes = *body.first().ok_or("empty record")? as i8;
    body = &body[1..];
    let (timestamp_delta, used) = batch::read_varlong(body).ok_or("malformed timestamp delta")?;
    body = &body[used..];
    let (offset_delta, used) = batch::read_varint(body).ok_or("malformed offset delta")?;
    body = &body[used..];
    if offset_delta < 0 || offset_delta > header.last_offset_delta {
        return Err(format!(
            "offset delta {offset_delta} outside the batch's [0, {}]",
            header.last_offset_delta
        ));
    }
    let key = take_nullable(&mut body, "key")?;
    let value = take_nullable(&mut body, "value")?;
    let headers = body;
    let (count, used) = batch::read_varint(body).ok_or("malformed header count")?;
    let mut walk = &body[used..];
    if count < 0 || count as usize > walk.len() / 2 {
        return Err(format!(
            "header count {count} is invalid for the bytes left"
        ));
    }
    for _ in 0..count {
        take_nullable(&mut walk, "header key")?.ok_or("null header key")?;
        take_nullable(&mut walk, "header value")?;
    }
    if !walk.is_empty() {
        return Err(format!(
            "{} unparsed bytes at the end of the record",
            walk.len()
        ));
    }
    let timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(timestamp_delta)
    };
    Ok(Record {
        offset: header.base_offset + i64::from(offset_delta),
        timestamp,
        attributes,
        key,
        value,
        headers,
    })
}

fn take_nullable<'a>(rest: &mut &'a [u8], what: &str) -> Result<Option<&'a [u8]>, String> {
    let (len, used) = batch::read_varint(rest).ok_or_else(|| format!("malformed {what} length"))?;
    *rest = &rest[used..];
    if len == -1 {
        return Ok(None);
    }
    if len < 0 || len as usize > rest.len() {
        return Err(format!(
            "{what} length {len} is invalid or overruns the record"
        ));
    }
    let (taken, left) = rest.split_at(len as usize);
    *rest = left;
    Ok(Some(taken))
}

/// Header fields of a batch being encoded. Offsets and timestamps are absolute; the encoder computes deltas.
#[derive(Debug, Clone, Copy)]
pub struct BatchFields {
    pub base_offset: i64,
    /// Written as the last offset delta; at least the last record's offset (the cleaner keeps a batch's original
    /// last offset so idempotent producers' sequences survive, as Kafka does).
    pub last_offset: i64,
    pub partition_leader_epoch: i32,
    /// Attributes other than the codec (timestamp type, transactional, control); the codec bits are replaced.
    pub attributes: i16,
    /// For `LogAppendTime` batches, the max timestamp to keep; ignored for `CreateTime`.
    pub log_append_time: Option<i64>,
    /// KIP-534: stored as the base timestamp, with the delete-horizon attribute.
    pub delete_horizon_ms: Option<i64>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl BatchFields {
    /// The fields of an existing batch (to re-encode its records).
    pub fn of(header: &BatchHeader) -> BatchFields {
        BatchFields {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            partition_leader_epoch: header.partition_leader_epoch,
            attributes: header.attributes & !(ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON),
            log_append_time: header.is_log_append_time().then_some(header.max_timestamp),
            delete_horizon_ms: header.delete_horizon_ms(),
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            base_sequence: header.base_sequence,
        }
    }
}

/// Encodes `records` as one v2 batch compressed with `codec`. Records keep their offsets, timestamps, keys,
/// values and headers. An empty `records` encodes an empty batch (records count 0), which Kafka's cleaner keeps
/// for an idempotent producer's last batch.
pub fn encode_batch(
    fields: &BatchFields,
    records: &[Record<'_>],
    codec: Compression,
    level: Option<i32>,
) -> Result<Vec<u8>, RecordsError> {
    let last_offset = records
        .last()
        .map_or(fields.last_offset, |r| r.offset.max(fields.last_offset));
    let last_offset_delta = i32::try_from(last_offset - fields.base_offset)
        .map_err(|_| err("the batch's offsets span more than 2^31"))?;
    let first_timestamp = records.first().map(|r| r.timestamp);
    let max_timestamp = match fields.log_append_time {
        Some(ts) => ts,
        None => records.iter().map(|r| r.timestamp).max().unwrap_or(-1),
    };
    let base_timestamp = fields
        .delete_horizon_ms
        .or(first_timestamp)
        .unwrap_or(max_timestamp);
    let mut section = Vec::new();
    let mut body = Vec::new();
    for record in records {
        let offset_delta = i32::try_from(record.offset - fields.base_offset)
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| {
                err(format!(
                    "record offset {} is below the batch base {}",
                    record.offset, fields.base_offset
                ))
            })?;
        body.clear();
        body.push(record.attributes as u8);
        let timestamp_delta = if fields.log_append_time.is_some() {
            0
        } else {
            record.timestamp.wrapping_sub(base_timestamp)
        };
        batch::write_varlong(&mut body, timestamp_delta);
        batch::write_varint(&mut body, offset_delta);
        for part in [record.key, record.value] {
            match part {
                Some(bytes) => {
                    batch::write_varint(&mut body, bytes.len() as i32);
                    body.extend_from_slice(bytes);
                }
                None => batch::write_varint(&mut body, -1),
            }
        }
        if record.headers.is_empty() {
            batch::write_varint(&mut body, 0);
        } else {
            body.extend_from_slice(record.headers);
        }
        batch::write_varint(&mut section, body.len() as i32);
        section.extend_from_slice(&body);
    }
    let section = compress(codec, &section, level)?;
    let length = HEADER_SIZE - LOG_OVERHEAD + section.len();
    let length = i32::try_from(length).map_err(|_| err("batch larger than 2 GiB"))?;
    let mut attributes =
        (fields.attributes & !(ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON)) | codec.id();
    if fields.delete_horizon_ms.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    let mut out = Vec::with_capacity(HEADER_SIZE + section.len());
    out.extend_from_slice(&fields.base_offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&fields.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&fields.producer_id.to_be_bytes());
    out.extend_from_slice(&fields.producer_epoch.to_be_bytes());
    out.extend_from_slice(&fields.base_sequence.to_be_bytes());
    out.extend_from_slice(&(records.len() as i32).to_be_bytes());
    out.extend_from_slice(&section);
    let crc = batch::compute_crc(&out);
    out[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// The empty batch that stands for `header`'s batch once the cleaner has removed all its records but must keep
/// its producer fields (Kafka's `DefaultRecordBatch.writeEmptyHeader`): same base and last offset, producer id,
/// epoch and base sequence, timestamp type, transactional and control bits and max timestamp; no records, no
/// codec, no delete horizon, base timestamp -1.
pub fn encode_empty_batch(header: &BatchHeader) -> Vec<u8> {
    let attributes = header.attributes & !(ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON);
    let length = (HEADER_SIZE - LOG_OVERHEAD) as i32;
    let mut out = Vec::with_capacity(HEADER_SIZE);
    out.extend_from_slice(&header.base_offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&header.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&header.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&header.max_timestamp.to_be_bytes());
    out.extend_from_slice(&header.producer_id.to_be_bytes());
    out.extend_from_slice(&header.producer_epoch.to_be_bytes());
    out.extend_from_slice(&header.base_sequence.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    debug_assert_eq!(out.len(), HEADER_SIZE);
    let crc = batch::compute_crc(&out);
    out[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Re-encodes every batch in `bytes` (whole validated batches) with `codec`, keeping offsets, timestamps and
/// producer fields: the broker's topic `compression.type`. Batches already in `codec` are copied unchanged.
pub fn recompress_batches(
    bytes: &[u8],
    codec: Compression,
    level: Option<i32>,
    limit: usize,
) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut position = 0;
    while position < bytes.len() {
        let header =
            BatchHeader::parse(&bytes[position..]).ok_or_else(|| err("truncated batch header"))?;
        let size = header.size();
        let whole = bytes
            .get(position..position + size)
            .ok_or_else(|| err("truncated batch"))?;
        if header.compression() == Some(codec) || header.is_control() {
            out.extend_from_slice(whole);
        } else {
            let decoded = DecodedBatch::new(whole, limit)?;
            let records = decoded.collect_records()?;
            out.extend_from_slice(&encode_batch(
                &BatchFields::of(&header),
                &records,
                codec,
                level,
            )?);
        }
        position += size;
    }
    Ok(out)
}

/// Builds a v2 batch of `(key, value)` records with one timestamp each, compressed with `codec`, base offset
/// 0. For tests, benchmarks and tools.
pub fn build_compressed_batch(
    records: &[batch::KeyValue<'_>],
    timestamps_ms: &[i64],
    codec: Compression,
    producer: batch::ProducerFields,
) -> Vec<u8> {
    assert!(!records.is_empty() && records.len() == timestamps_ms.len());
    let list: Vec<Record<'_>> = records
        .iter()
        .zip(timestamps_ms)
        .enumerate()
        .map(|(i, ((key, value), ts))| Record {
            offset: i as i64,
            timestamp: *ts,
            attributes: 0,
            key: *key,
            value: *value,
            headers: &[],
        })
        .collect();
    let fields = BatchFields {
        base_offset: 0,
        last_offset: records.len() as i64 - 1,
        partition_leader_epoch: -1,
        attributes: if producer.transactional {
            batch::ATTR_TRANSACTIONAL
        } else {
            0
        },
        log_append_time: None,
        delete_horizon_ms: None,
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        base_sequence: producer.base_sequence,
    };
    encode_batch(&fields, &list, codec, None).expect("in-memory encoding of a small batch")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::ProducerFields;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn an_emptied_batch_keeps_kafkas_empty_header_fields() {
        let batch = build_compressed_batch(
            &[
                (Some(b"k1".as_slice()), Some(b"v1".as_slice())),
                (Some(b"k2".as_slice()), None),
            ],
            &[100, 300],
            Compression::Zstd,
            ProducerFields {
                producer_id: 7,
                producer_epoch: 2,
                base_sequence: 40,
                transactional: true,
            },
        );
        let header = BatchHeader::parse(&batch).unwrap();
        let empty = encode_empty_batch(&header);
        let got = BatchHeader::parse(&empty).unwrap();
        assert_eq!(empty.len(), HEADER_SIZE);
        assert_eq!(got.crc, batch::compute_crc(&empty));
        assert_eq!(
            (got.last_offset(), got.records_count, got.compression()),
            (1, 0, Some(Compression::None))
        );
        assert_eq!(
            (got.producer_id, got.producer_epoch, got.last_sequence()),
            (7, 2, 41)
        );
        assert!(got.is_transactional() && got.delete_horizon_ms().is_none());
        assert_eq!((got.base_timestamp, got.max_timestamp), (-1, 300));
        assert!(DecodedBatch::new(&empty, 1 << 20)
            .unwrap()
            .collect_records()
            .unwrap()
            .is_empty());
        assert!(batch::validate_replicated_batches(&empty, 1 << 20).is_ok());
        assert!(
            batch::validate_batches(&empty, 1 << 20).is_err(),
            "a producer may not send one"
        );
    }

    #[test]
    fn every_codec_round_trips_records_and_validates() {
        for codec in ALL {
            let batch = build_compressed_batch(
                &[
                    (Some(b"k1".as_slice()), Some(b"v1".as_slice())),
                    (Some(b"k2".as_slice()), None),
                    (None, Some(b"v3".as_slice())),
                ],
                &[100, 50, 300],
                codec,
                ProducerFields::default(),
            );
            let header = batch::validate_batches(&batch, 1 << 20).unwrap()[0].header;
            assert_eq!(header.compression(), Some(codec));
            assert_eq!((header.max_timestamp, header.records_count), (300, 3));
            let decoded = DecodedBatch::new(&batch, 1 << 20).unwrap();
            let records = decoded.collect_records().unwrap();
            let seen: Vec<_> = records
                .iter()
                .map(|r| (r.offset, r.timestamp, r.key, r.value))
                .collect();
            assert_eq!(
                seen,
                vec![
                    (0, 100, Some(b"k1".as_slice()), Some(b"v1".as_slice())),
                    (1, 50, Some(b"k2".as_slice()), None),
                    (2, 300, None, Some(b"v3".as_slice())),
                ],
                "{codec:?}"
            );
            assert!(records[1].is_tombstone());
        }
    }

    #[test]
    fn decompression_bombs_are_errors_not_allocations() {
        let zeros = vec![0u8; 8 << 20];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let small = compress(codec, &zeros, None).unwrap();
            assert!(small.len() < 1 << 20, "{codec:?}");
            let e = decompress(codec, &small, 1 << 20).unwrap_err();
            assert!(e.0.contains("more than"), "{codec:?}: {e}");
            assert_eq!(
                decompress(codec, &small, 8 << 20).unwrap().len(),
                zeros.len()
            );
        }
        // A raw snappy block claiming ~4 GiB is refused before allocating.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decompress(Compression::Snappy, &claim, 1 << 20).is_err());
    }

    /// A batch of `count` records, values long and varied enough to span several of the lazy reader's steps.
    fn big_batch(codec: Compression, count: usize, skip_every: usize) -> Vec<u8> {
        let keys: Vec<String> = (0..count).map(|i| format!("key-{i}")).collect();
        let values: Vec<Vec<u8>> = (0..count)
            .map(|i| format!("value-{i}-").repeat(40 + i % 17).into_bytes())
            .collect();
        let kept: Vec<usize> = (0..count)
            .filter(|i| skip_every == 0 || i % skip_every != 1)
            .collect();
        let records: Vec<Record<'_>> = kept
            .iter()
            .map(|&i| Record {
                offset: 1000 + i as i64,
                timestamp: 1_700_000_000_000 + i as i64,
                attributes: 0,
                key: Some(keys[i].as_bytes()),
                value: (i % 5 != 3).then_some(values[i].as_slice()),
                headers: &[0],
            })
            .collect();
        let fields = BatchFields {
            base_offset: 1000,
            last_offset: 1000 + count as i64 - 1,
            partition_leader_epoch: 0,
            attributes: 0,
            log_append_time: None,
            delete_horizon_ms: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        };
        encode_batch(&fields, &records, codec, None).unwrap()
    }

    /// The lazy reader finds every record the eager decoder has, in any order of asking, and nothing where a
    /// record is missing (a compacted batch), in every codec.
    #[test]
    fn lazy_records_answer_as_the_whole_batch_does() {
        for codec in ALL {
            let batch = big_batch(codec, 700, 4);
            let decoded = DecodedBatch::new(&batch, 64 << 20).unwrap();
            let all = decoded.collect_records().unwrap();
            assert!(
                decoded.records_len() > 3 * LAZY_READ_BYTES,
                "{codec:?}: spans several reads"
            );
            let mut lazy = LazyRecords::new(batch.clone(), 64 << 20).unwrap();
            // In order, the last record first, then backwards: each answer equals the eager one.
            let mut asks: Vec<i64> = vec![1699];
            asks.extend(1000..1700);
            asks.extend((1000..1700).rev().step_by(7));
            for offset in asks {
                let want = all.iter().find(|r| r.offset == offset);
                let got = lazy.record_at(offset).unwrap();
                assert_eq!(got.as_ref(), want, "{codec:?} offset {offset}");
            }
            // A fresh reader asked for an early record inflates only a prefix of a compressed batch.
            let mut fresh = LazyRecords::new(batch.clone(), 64 << 20).unwrap();
            assert_eq!(fresh.record_at(1002).unwrap().map(|r| r.offset), Some(1002));
            if matches!(
                codec,
                Compression::Gzip | Compression::Lz4 | Compression::Zstd
            ) {
                assert!(
                    fresh.buf.len() < decoded.records_len() / 2,
                    "{codec:?}: {} of {}",
                    fresh.buf.len(),
                    decoded.records_len()
                );
            }
            assert_eq!(fresh.record_at(999).unwrap(), None);
            assert_eq!(fresh.record_at(1700).unwrap(), None);
        }
    }

    /// Bounded as the eager decoder is: a batch inflating past the limit is an error, never an allocation past it;
    /// a cut-off or corrupt stream is an error, not a panic.
    #[test]
    fn lazy_records_are_bounded_and_refuse_broken_batches() {
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let batch = big_batch(codec, 700, 0);
            let mut small = LazyRecords::new(batch.clone(), 100 * 1024).unwrap();
            let e = small.record_at(1699).unwrap_err();
            assert!(e.0.contains("more than"), "{codec:?}: {e}");
            assert!(small.buf.len() <= 100 * 1024 + 1);
            // Flip bytes in the middle of the compressed records.
            let mut broken = batch.clone();
            let mid = HEADER_SIZE + (broken.len() - HEADER_SIZE) / 2;
            for b in &mut broken[mid..mid + 64] {
                *b ^= 0x5a;
            }
            let mut lazy = LazyRecords::new(broken, 64 << 20).unwrap();
            let _ = lazy.record_at(1699); // an error or a mismatch, but no panic
        }
        let mut batch = big_batch(Compression::None, 10, 0);
        batch[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&i32::MAX.to_be_bytes());
        let mut lazy = LazyRecords::new(batch, 64 << 20).unwrap();
        assert!(lazy.record_at(5000).is_err(), "records past the bytes");
    }

    #[test]
    fn declared_record_count_beyond_the_bytes_is_refused() {
        let mut batch = build_compressed_batch(
            &[(None, Some(b"v".as_slice()))],
            &[1],
            Compression::Gzip,
            ProducerFields::default(),
        );
        batch[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(DecodedBatch::new(&batch, 1 << 20).is_err());
    }

    #[test]
    fn recompression_keeps_offsets_and_timestamps() {
        let mut original = batch::build_batch(
            &[
                (Some(b"a".as_slice()), Some(b"1".as_slice())),
                (Some(b"b".as_slice()), None),
            ],
            &[10, 20],
            ProducerFields {
                producer_id: 7,
                producer_epoch: 1,
                base_sequence: 5,
                transactional: false,
            },
        );
        batch::assign_offset(&mut original, 40, 3);
        for codec in ALL {
            let out = recompress_batches(&original, codec, Some(5), 1 << 20).unwrap();
            let header = batch::validate_batches(&out, 1 << 20).unwrap()[0].header;
            assert_eq!(header.compression(), Some(codec));
            assert_eq!(
                (
                    header.base_offset,
                    header.last_offset(),
                    header.producer_id,
                    header.base_sequence
                ),
                (40, 41, 7, 5)
            );
            let decoded = DecodedBatch::new(&out, 1 << 20).unwrap();
            let ts: Vec<_> = decoded.records().map(|r| r.unwrap().timestamp).collect();
            assert_eq!(ts, vec![10, 20]);
        }
        assert_eq!(
            recompress_batches(&original, Compression::None, None, 1 << 20).unwrap(),
            original
        );
    }
}
