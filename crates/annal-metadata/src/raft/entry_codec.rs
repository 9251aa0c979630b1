//! One raft entry <-> one Kafka v2 record batch, so the metadata log reads like Kafka's `__cluster_metadata`.
//!
//! The batch's partition leader epoch is the term. Its first record is a private *entry header* (key
//! [`ENTRY_HEADER_KEY`], value JSON) with the raft index, the entry's kind (normal, blank, membership) and the
//! leader node id that openraft keeps in every log id; the payload's records follow, each with a null key and
//! the opaque record as the value. Offsets are Kafka's (one per record, assigned by the log), so an entry's
//! base offset is at or after its raft index; the log store keeps the index -> offset map.

use annal_log::batch::{self, BatchHeader, Compression, HEADER_SIZE};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership};
use serde::{Deserialize, Serialize};

use super::types::{Entry, TypeConfig};

/// Key of the entry header record. No Kafka metadata record has a key, so it cannot be mistaken for one.
pub(crate) const ENTRY_HEADER_KEY: &[u8] = b"annal.raft.entry";

/// Records per batch above this are refused when decoding (a corrupt count must not drive allocation).
const RECORDS_PER_BATCH_MAX: i32 = 1 << 20;

#[derive(Serialize, Deserialize)]
struct EntryHeader {
    /// The raft index. Kafka offsets count records, raft indexes count entries: the two differ.
    index: u64,
    /// The leader that proposed the entry (with the term, openraft's log id).
    leader_node: u64,
    kind: EntryKind,
}

// Externally tagged: an internally tagged enum buffers its content and then cannot read the u64 map keys
// (JSON strings) of a membership.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum EntryKind {
    Normal,
    Blank,
    Membership(Membership<u64, BasicNode>),
}

/// Encodes `entry` as one batch with partition leader epoch = term; the log assigns its offsets.
pub(crate) fn encode(entry: &Entry) -> Result<Vec<u8>, String> {
    let leader_node = entry.log_id.leader_id.node_id;
    let (kind, records): (EntryKind, &[Vec<u8>]) = match &entry.payload {
        EntryPayload::Normal(payload) => (EntryKind::Normal, payload.as_slice()),
        EntryPayload::Blank => (EntryKind::Blank, &[]),
        EntryPayload::Membership(m) => (EntryKind::Membership(m.clone()), &[]),
    };
    let header = EntryHeader {
        index: entry.log_id.index,
        leader_node,
        kind,
    };
    let header_value =
        serde_json::to_vec(&header).map_err(|e| format!("encode entry header: {e}"))?;
    let mut kvs: Vec<batch::KeyValue<'_>> = Vec::with_capacity(records.len() + 1);
    kvs.push((Some(ENTRY_HEADER_KEY), Some(header_value.as_slice())));
    kvs.extend(records.iter().map(|r| (None, Some(r.as_slice()))));
    let epoch = i32::try_from(entry.log_id.leader_id.term).map_err(|_| {
        format!(
            "raft term {} does not fit a Kafka leader epoch",
            entry.log_id.leader_id.term
        )
    })?;
    let mut bytes = batch::build_uncompressed_batch(&kvs, super::now_ms());
    batch::assign_offset(&mut bytes, 0, epoch);
    Ok(bytes)
}

/// Decodes the batch at the start of `bytes`; returns the entry and the bytes it used. Never panics.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Entry, usize), String> {
    let header = BatchHeader::parse(bytes).ok_or("truncated record batch header")?;
    let size = header.size();
    if size < HEADER_SIZE || size > bytes.len() {
        return Err(format!(
            "record batch of {size} bytes but {} available",
            bytes.len()
        ));
    }
    if header.compression() != Some(Compression::None) {
        return Err("compressed metadata batch (the quorum writes uncompressed ones)".into());
    }
    if header.base_offset < 0 || header.partition_leader_epoch < 0 {
        return Err(format!(
            "batch at offset {} with epoch {}: not a raft entry",
            header.base_offset, header.partition_leader_epoch
        ));
    }
    if !(1..=RECORDS_PER_BATCH_MAX).contains(&header.records_count) {
        return Err(format!("batch with {} records", header.records_count));
    }
    let mut rest = &bytes[HEADER_SIZE..size];
    let mut values: Vec<Vec<u8>> = Vec::new();
    let mut entry_header = None;
    for i in 0..header.records_count {
        let (key, value, used) = parse_record(rest)?;
        rest = &rest[used..];
        if i == 0 {
            if key != Some(ENTRY_HEADER_KEY) {
                return Err("the first record is not a raft entry header".into());
            }
            let value = value.ok_or("entry header without a value")?;
            entry_header = Some(
                serde_json::from_slice::<EntryHeader>(value)
                    .map_err(|e| format!("entry header: {e}"))?,
            );
        } else {
            values.push(value.ok_or("payload record without a value")?.to_vec());
        }
    }
    let term = header.partition_leader_epoch as u64;
    let entry_header = entry_header.ok_or("batch without records")?;
    let payload = match entry_header.kind {
        EntryKind::Normal => EntryPayload::<TypeConfig>::Normal(values),
        EntryKind::Blank => EntryPayload::Blank,
        EntryKind::Membership(membership) => EntryPayload::Membership(membership),
    };
    let log_id = LogId::new(
        CommittedLeaderId::new(term, entry_header.leader_node),
        entry_header.index,
    );
    Ok((Entry { log_id, payload }, size))
}

type ParsedRecord<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, usize);

/// One v2 record: length, attributes, timestamp delta, offset delta, key, value, headers (skipped).
fn parse_record(bytes: &[u8]) -> Result<ParsedRecord<'_>, String> {
    let (length, used) = batch::read_varint(bytes).ok_or("truncated record length")?;
    let length = usize::try_from(length).map_err(|_| "negative record length")?;
    let body = bytes
        .get(used..used.saturating_add(length))
        .ok_or("record longer than its batch")?;
    let mut at = 1; // attributes
    let (_, n) =
        batch::read_varlong(body.get(at..).ok_or("truncated record")?).ok_or("timestamp delta")?;
    at += n;
    let (_, n) =
        batch::read_varint(body.get(at..).ok_or("truncated record")?).ok_or("offset delta")?;
    at += n;
    let key = read_bytes_field(body, &mut at)?;
    let value = read_bytes_field(body, &mut at)?;
    Ok((key, value, used + length))
}

fn read_bytes_field<'a>(body: &'a [u8], at: &mut usize) -> Result<Option<&'a [u8]>, String> {
    let (len, n) =
        batch::read_varint(body.get(*at..).ok_or("truncated record")?).ok_or("field length")?;
    *at += n;
    if len < 0 {
        return Ok(None);
    }
    let end = at.saturating_add(len as usize);
    let field = body
        .get(*at..end)
        .ok_or("record field longer than its record")?;
    *at = end;
    Ok(Some(field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn log_id(term: u64, node: u64, index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    #[test]
    fn every_entry_kind_round_trips() {
        let nodes: std::collections::BTreeMap<u64, BasicNode> =
            [(1, BasicNode::new("a:1")), (2, BasicNode::new("b:2"))]
                .into_iter()
                .collect();
        let membership = Membership::new(vec![BTreeSet::from([1u64, 2])], nodes);
        for payload in [
            EntryPayload::Normal(vec![b"one".to_vec(), Vec::new(), vec![0u8; 300]]),
            EntryPayload::Normal(Vec::new()),
            EntryPayload::Blank,
            EntryPayload::Membership(membership),
        ] {
            let entry = Entry {
                log_id: log_id(7, 2, 42),
                payload,
            };
            let bytes = encode(&entry).unwrap();
            let header = annal_log::batch::validate_batches(&bytes, 1 << 20).unwrap()[0].header;
            assert_eq!(header.partition_leader_epoch, 7);
            let (decoded, used) = decode(&bytes).unwrap();
            assert_eq!(used, bytes.len());
            assert_eq!(decoded, entry);
        }
    }

    #[test]
    fn damaged_batches_are_errors() {
        let entry = Entry {
            log_id: log_id(1, 1, 3),
            payload: EntryPayload::Normal(vec![b"x".to_vec()]),
        };
        let bytes = encode(&entry).unwrap();
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "a batch cut at {cut} decoded"
            );
        }
        let mut flipped = bytes.clone();
        for i in HEADER_SIZE..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = decode(&flipped); // must not panic
            flipped[i] ^= 0xff;
        }
    }
}
