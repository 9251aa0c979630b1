//! The records of a consumer-protocol (KIP-848) group in `__consumer_offsets`, in Kafka's own schemas (record
//! types 3-8 of Kafka's `group-coordinator` module), so Kafka's `kafka-dump-log --offsets-decoder` reads them and
//! a coordinator rebuilds the group by replaying them:
//!
//! | type | key                                    | value                                                     |
//! |------|----------------------------------------|-----------------------------------------------------------|
//! | 3    | `ConsumerGroupMetadataKey` (group)     | group epoch                                               |
//! | 4    | `ConsumerGroupPartitionMetadataKey`    | subscribed topics: id, name, partition count              |
//! | 5    | `ConsumerGroupMemberMetadataKey` (+ member) | instance, rack, client, subscription, rebalance timeout, assignor |
//! | 6    | `ConsumerGroupTargetAssignmentMetadataKey` | assignment epoch                                      |
//! | 7    | `ConsumerGroupTargetAssignmentMemberKey` (+ member) | the member's target partitions                 |
//! | 8    | `ConsumerGroupCurrentMemberAssignmentKey` (+ member) | epoch, previous epoch, state, owned and pending-revocation partitions |
//!
//! Keys are non-flexible (`i16` type, `i16`-length strings); values are version 0, flexible: compact strings and
//! arrays (unsigned varint length + 1, 0 = null) and a tagged-field section after every struct. Decoding never
//! panics and never allocates more than the bytes present can describe.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type Parts = BTreeMap<Uuid, BTreeSet<i32>>;

const METADATA: i16 = 3;
const PARTITION_METADATA: i16 = 4;
const MEMBER_METADATA: i16 = 5;
const TARGET_METADATA: i16 = 6;
const TARGET_MEMBER: i16 = 7;
const CURRENT_ASSIGNMENT: i16 = 8;
/// Every value is written at version 0.
const VALUE_VERSION: i16 = 0;

/// Whether a key's record type is one of a consumer group's (3-8).
pub fn is_consumer_type(record_type: i16) -> bool {
    (METADATA..=CURRENT_ASSIGNMENT).contains(&record_type)
}

/// A decoded key of a consumer group's record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Metadata { group: String },
    PartitionMetadata { group: String },
    Member { group: String, member: String },
    TargetMetadata { group: String },
    TargetMember { group: String, member: String },
    Current { group: String, member: String },
}

impl Key {
    pub fn group(&self) -> &str {
        match self {
            Key::Metadata { group }
            | Key::PartitionMetadata { group }
            | Key::TargetMetadata { group }
            | Key::Member { group, .. }
            | Key::TargetMember { group, .. }
            | Key::Current { group, .. } => group,
        }
    }

    fn record_type(&self) -> i16 {
        match self {
            Key::Metadata { .. } => METADATA,
            Key::PartitionMetadata { .. } => PARTITION_METADATA,
            Key::Member { .. } => MEMBER_METADATA,
            Key::TargetMetadata { .. } => TARGET_METADATA,
            Key::TargetMember { .. } => TARGET_MEMBER,
            Key::Current { .. } => CURRENT_ASSIGNMENT,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        out.extend_from_slice(&self.record_type().to_be_bytes());
        match self {
            Key::Metadata { group }
            | Key::PartitionMetadata { group }
            | Key::TargetMetadata { group } => put_str(&mut out, group),
            Key::Member { group, member }
            | Key::TargetMember { group, member }
            | Key::Current { group, member } => {
                put_str(&mut out, group);
                put_str(&mut out, member);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Key> {
        let mut r = Reader(bytes);
        let record_type = r.i16()?;
        let group = r.string()?;
        let key = match record_type {
            METADATA => Key::Metadata { group },
            PARTITION_METADATA => Key::PartitionMetadata { group },
            TARGET_METADATA => Key::TargetMetadata { group },
            MEMBER_METADATA => Key::Member {
                group,
                member: r.string()?,
            },
            TARGET_MEMBER => Key::TargetMember {
                group,
                member: r.string()?,
            },
            CURRENT_ASSIGNMENT => Key::Current {
                group,
                member: r.string()?,
            },
            _ => return None,
        };
        Some(key)
    }
}

/// `ConsumerGroupMemberMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// `ConsumerGroupCurrentMemberAssignmentValue`. `state` is Kafka's `MemberState` byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: i8,
    pub assigned: Parts,
    pub pending_revocation: Parts,
}

/// Kafka's `MemberState` bytes.
pub const STATE_STABLE: i8 = 0;
pub const STATE_UNREVOKED_PARTITIONS: i8 = 1;
pub const STATE_UNRELEASED_PARTITIONS: i8 = 2;

/// `ConsumerGroupMetadataValue` (the group epoch) or `ConsumerGroupTargetAssignmentMetadataValue` (the assignment
/// epoch): one `int32`.
pub fn epoch_value(epoch: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(7);
    put_i16(&mut out, VALUE_VERSION);
    put_i32(&mut out, epoch);
    put_no_tags(&mut out);
    out
}

pub fn decode_epoch_value(bytes: &[u8]) -> Option<i32> {
    let mut r = Reader(bytes);
    r.version()?;
    let epoch = r.i32()?;
    r.skip_tags()?;
    Some(epoch)
}

/// `ConsumerGroupPartitionMetadataValue`: each subscribed topic's id, name and partition count (the per-partition
/// racks, unused since Kafka 4.0, as an empty list).
pub fn partition_metadata_value(topics: &BTreeMap<String, (Uuid, i32)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + topics.len() * 32);
    put_i16(&mut out, VALUE_VERSION);
    put_len(&mut out, topics.len());
    for (name, (id, partitions)) in topics {
        out.extend_from_slice(id.as_bytes());
        put_compact_str(&mut out, name);
        put_i32(&mut out, *partitions);
        put_len(&mut out, 0);
        put_no_tags(&mut out);
    }
    put_no_tags(&mut out);
    out
}

pub fn decode_partition_metadata_value(bytes: &[u8]) -> Option<BTreeMap<String, (Uuid, i32)>> {
    let mut r = Reader(bytes);
    r.version()?;
    // Each topic takes at least 16 + 1 + 4 + 1 + 1 bytes.
    let count = r.array_len(23)?;
    let mut topics = BTreeMap::new();
    for _ in 0..count {
        let id = r.uuid()?;
        let name = r.compact_string()?;
        let partitions = r.i32()?;
        let racks = r.array_len(5)?;
        for _ in 0..racks {
            r.i32()?;
            let names = r.array_len(1)?;
            for _ in 0..names {
                r.compact_string()?;
            }
            r.skip_tags()?;
        }
        r.skip_tags()?;
        topics.insert(name, (id, partitions));
    }
    r.skip_tags()?;
    Some(topics)
}

pub fn member_value(m: &MemberMetadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_i16(&mut out, VALUE_VERSION);
    put_compact_opt_str(&mut out, m.instance_id.as_deref());
    put_compact_opt_str(&mut out, m.rack_id.as_deref());
    put_compact_str(&mut out, &m.client_id);
    put_compact_str(&mut out, &m.client_host);
    put_len(&mut out, m.subscribed.len());
    for t in &m.subscribed {
        put_compact_str(&mut out, t);
    }
    put_compact_opt_str(&mut out, None); // SubscribedTopicRegex: Annal takes names only
    put_i32(&mut out, m.rebalance_timeout_ms);
    put_compact_opt_str(&mut out, m.server_assignor.as_deref());
    put_no_tags(&mut out); // ClassicMemberMetadata (tag 0) is null: a consumer-protocol member
    out
}

pub fn decode_member_value(bytes: &[u8]) -> Option<MemberMetadata> {
    let mut r = Reader(bytes);
    r.version()?;
    let instance_id = r.compact_opt_string()?;
    let rack_id = r.compact_opt_string()?;
    let client_id = r.compact_string()?;
    let client_host = r.compact_string()?;
    let count = r.array_len(1)?;
    let mut subscribed = BTreeSet::new();
    for _ in 0..count {
        subscribed.insert(r.compact_string()?);
    }
    let _regex = r.compact_opt_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.compact_opt_string()?;
    r.skip_tags()?;
    Some(MemberMetadata {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed,
        rebalance_timeout_ms,
        server_assignor,
    })
}

/// `ConsumerGroupTargetAssignmentMemberValue`.
pub fn target_value(parts: &Parts) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + parts.len() * 24);
    put_i16(&mut out, VALUE_VERSION);
    put_parts(&mut out, parts);
    put_no_tags(&mut out);
    out
}

pub fn decode_target_value(bytes: &[u8]) -> Option<Parts> {
    let mut r = Reader(bytes);
    r.version()?;
    let parts = r.parts()?;
    r.skip_tags()?;
    Some(parts)
}

pub fn current_value(c: &CurrentAssignment) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + (c.assigned.len() + c.pending_revocation.len()) * 24);
    put_i16(&mut out, VALUE_VERSION);
    put_i32(&mut out, c.epoch);
    put_i32(&mut out, c.previous_epoch);
    out.push(c.state as u8);
    put_parts(&mut out, &c.assigned);
    put_parts(&mut out, &c.pending_revocation);
    put_no_tags(&mut out);
    out
}

pub fn decode_current_value(bytes: &[u8]) -> Option<CurrentAssignment> {
    let mut r = Reader(bytes);
    r.version()?;
    let epoch = r.i32()?;
    let previous_epoch = r.i32()?;
    let state = r.take(1)?[0] as i8;
    let assigned = r.parts()?;
    let pending_revocation = r.parts()?;
    r.skip_tags()?;
    Some(CurrentAssignment {
        epoch,
        previous_epoch,
        state,
        assigned,
        pending_revocation,
    })
}

fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// A non-flexible key string (`i16` length); group and member ids are far below `i16::MAX` bytes (the
/// coordinator bounds them), and a longer one is cut at a char boundary rather than corrupt the record.
fn put_str(out: &mut Vec<u8>, s: &str) {
    let end = char_floor(s, i16::MAX as usize);
    put_i16(out, end as i16);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn char_floor(s: &str, max: usize) -> usize {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A compact array's or string's length: `n + 1` (0 is null).
fn put_len(out: &mut Vec<u8>, n: usize) {
    put_uvarint(out, n as u64 + 1);
}

fn put_compact_str(out: &mut Vec<u8>, s: &str) {
    let end = char_floor(s, i16::MAX as usize);
    put_len(out, end);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn put_compact_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_compact_str(out, s),
        None => put_uvarint(out, 0),
    }
}

fn put_no_tags(out: &mut Vec<u8>) {
    put_uvarint(out, 0);
}

/// `[]TopicPartitions`: topic id, `[]int32` partitions, tags.
fn put_parts(out: &mut Vec<u8>, parts: &Parts) {
    put_len(out, parts.len());
    for (topic, partitions) in parts {
        out.extend_from_slice(topic.as_bytes());
        put_len(out, partitions.len());
        for p in partitions {
            put_i32(out, *p);
        }
        put_no_tags(out);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn uuid(&mut self) -> Option<Uuid> {
        Some(Uuid::from_bytes(self.take(16)?.try_into().ok()?))
    }

    /// A value's version: only 0 is known (a later one may add fields before the tags that we would misread).
    fn version(&mut self) -> Option<()> {
        (self.i16()? == VALUE_VERSION).then_some(())
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        Some(String::from_utf8_lossy(self.take(len)?).into_owned())
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A compact length: `None` (malformed) for a null or one longer than the bytes left.
    fn compact_len(&mut self) -> Option<Option<usize>> {
        let raw = self.uvarint()?;
        if raw == 0 {
            return Some(None);
        }
        let len = usize::try_from(raw - 1).ok()?;
        Some(Some(len))
    }

    fn compact_opt_string(&mut self) -> Option<Option<String>> {
        match self.compact_len()? {
            None => Some(None),
            Some(len) => Some(Some(String::from_utf8_lossy(self.take(len)?).into_owned())),
        }
    }

    fn compact_string(&mut self) -> Option<String> {
        self.compact_opt_string()?
    }

    /// A compact array's element count, each element at least `min_size` bytes: bounded by the bytes left, so
    /// a corrupt count cannot make a caller loop or allocate beyond them.
    fn array_len(&mut self, min_size: usize) -> Option<usize> {
        let len = self.compact_len()??;
        (len.checked_mul(min_size.max(1))? <= self.0.len()).then_some(len)
    }

    fn parts(&mut self) -> Option<Parts> {
        // Topic id (16), partitions length (1), tags (1).
        let topics = self.array_len(18)?;
        let mut parts = Parts::new();
        for _ in 0..topics {
            let topic = self.uuid()?;
            let count = self.array_len(4)?;
            let entry = parts.entry(topic).or_default();
            for _ in 0..count {
                entry.insert(self.i32()?);
            }
            self.skip_tags()?;
        }
        Some(parts)
    }

    fn skip_tags(&mut self) -> Option<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(list: &[(u128, &[i32])]) -> Parts {
        list.iter()
            .map(|(t, ps)| (Uuid::from_u128(*t), ps.iter().copied().collect()))
            .collect()
    }

    /// Every prefix of a valid value decodes as malformed (`None`) or as something, never a panic; the whole value
    /// decodes to what was encoded.
    fn every_prefix<T: PartialEq + std::fmt::Debug>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Option<T>,
        want: &T,
    ) {
        for cut in 0..bytes.len() {
            let _ = decode(&bytes[..cut]);
        }
        assert_eq!(decode(bytes).as_ref(), Some(want));
    }

    #[test]
    fn keys_round_trip_and_carry_their_record_type() {
        let keys = [
            Key::Metadata { group: "g".into() },
            Key::PartitionMetadata { group: "g".into() },
            Key::Member {
                group: "g".into(),
                member: "m".into(),
            },
            Key::TargetMetadata { group: "g".into() },
            Key::TargetMember {
                group: "g".into(),
                member: "m".into(),
            },
            Key::Current {
                group: "g".into(),
                member: "m".into(),
            },
        ];
        for (i, k) in keys.iter().enumerate() {
            let bytes = k.encode();
            assert_eq!(i16::from_be_bytes([bytes[0], bytes[1]]), 3 + i as i16);
            assert_eq!(Key::decode(&bytes).as_ref(), Some(k));
            for cut in 0..bytes.len() {
                assert_eq!(Key::decode(&bytes[..cut]), None);
            }
        }
        assert_eq!(
            Key::decode(&[0, 2, 0, 1, b'g']),
            None,
            "a classic group key"
        );
    }

    #[test]
    fn values_round_trip_and_truncations_never_panic() {
        every_prefix(&epoch_value(7), decode_epoch_value, &7);
        let topics: BTreeMap<String, (Uuid, i32)> = [
            ("a".to_string(), (Uuid::from_u128(1), 3)),
            ("bé".to_string(), (Uuid::from_u128(2), 12)),
        ]
        .into();
        every_prefix(
            &partition_metadata_value(&topics),
            decode_partition_metadata_value,
            &topics,
        );
        let member = MemberMetadata {
            instance_id: Some("i-1".into()),
            rack_id: None,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            subscribed: ["a".to_string(), "b".to_string()].into(),
            rebalance_timeout_ms: 45_000,
            server_assignor: Some("uniform".into()),
        };
        every_prefix(&member_value(&member), decode_member_value, &member);
        let target = parts(&[(1, &[0, 2]), (2, &[5])]);
        every_prefix(&target_value(&target), decode_target_value, &target);
        let current = CurrentAssignment {
            epoch: 4,
            previous_epoch: 3,
            state: STATE_UNREVOKED_PARTITIONS,
            assigned: parts(&[(1, &[0])]),
            pending_revocation: parts(&[(1, &[2]), (2, &[5])]),
        };
        every_prefix(&current_value(&current), decode_current_value, &current);
    }

    #[test]
    fn a_huge_count_is_refused_before_anything_is_allocated() {
        // Version 0, then a TopicPartitions count of 2^32 with no bytes behind it.
        let mut bytes = vec![0, 0];
        put_uvarint(&mut bytes, 1 << 32);
        assert_eq!(decode_target_value(&bytes), None);
        let mut bytes = vec![0, 0];
        put_uvarint(&mut bytes, u64::MAX);
        assert_eq!(decode_partition_metadata_value(&bytes), None);
    }

    #[test]
    fn unknown_tagged_fields_are_skipped_and_a_later_version_is_refused() {
        let mut bytes = epoch_value(9);
        bytes.pop(); // no tags
        put_uvarint(&mut bytes, 1); // one tagged field
        put_uvarint(&mut bytes, 0); // tag 0
        put_uvarint(&mut bytes, 3); // of 3 bytes
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode_epoch_value(&bytes), Some(9));
        let mut later = epoch_value(9);
        later[1] = 1;
        assert_eq!(decode_epoch_value(&later), None);
    }

    /// The bytes of Kafka's own encoding (its generated `ConsumerGroupCurrentMemberAssignmentValue` at version 0
    /// for epoch 5, previous 4, STABLE, one topic with partitions 0 and 1, nothing pending), spelled out.
    #[test]
    fn current_assignment_bytes_are_kafka_s() {
        let topic = Uuid::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        let value = current_value(&CurrentAssignment {
            epoch: 5,
            previous_epoch: 4,
            state: STATE_STABLE,
            assigned: [(topic, [0, 1].into())].into(),
            pending_revocation: Parts::new(),
        });
        let mut want = vec![0, 0, 0, 0, 0, 5, 0, 0, 0, 4, 0, 2];
        want.extend_from_slice(topic.as_bytes());
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0]);
        assert_eq!(value, want);
    }
}
