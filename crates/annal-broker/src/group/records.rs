//! The records of `__consumer_offsets`, in Kafka's own schemas (`OffsetCommitKey`/`OffsetCommitValue`,
//! `GroupMetadataKey`/`GroupMetadataValue` from Kafka's `group-coordinator` module), so Kafka's tooling
//! (`kafka-dump-log --offsets-decoder`) can read our files. All are non-flexible versions: big-endian integers,
//! `i16`-length strings (-1 = null), `i32`-length bytes, `i32`-count arrays.
//!
//! Decoding never panics: every length is checked against the bytes left.

use bytes::Bytes;

/// `OffsetCommitKey` version we write (Kafka writes 1; 0 is the same layout).
const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// `GroupMetadataKey` version (always 2 in Kafka).
const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// `OffsetCommitValue` v3: offset, leader epoch, metadata, commit timestamp (no expire timestamp).
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// `GroupMetadataValue` v3: with static member instance ids.
const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// The group of the read barriers' records (`GroupCoordinator::read_barrier`): offset tombstones of this group
/// and the empty topic name, which no topic has, so no commit can exist under that key and the tombstone changes
/// nothing (compaction keeps one per partition, then drops it after `delete.retention.ms`).
pub const READ_BARRIER_GROUP: &str = "__annal_read_barrier";

/// A decoded record key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// One of a consumer-protocol group's records (types 3-8, [`super::consumer_records`]).
    Consumer {
        group: String,
    },
}

/// `OffsetCommitValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only in v1 (clients' `retention_time_ms`, OffsetCommit v2-v4); we write v1 when it is set.
    pub expire_timestamp: Option<i64>,
}

/// One member in `GroupMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// `GroupMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

pub fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + group.len() + topic.len());
    put_i16(&mut out, OFFSET_COMMIT_KEY_VERSION);
    put_str(&mut out, group);
    put_str(&mut out, topic);
    put_i32(&mut out, partition);
    out
}

pub fn group_key(group: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + group.len());
    put_i16(&mut out, GROUP_METADATA_KEY_VERSION);
    put_str(&mut out, group);
    out
}

pub fn offset_value(v: &OffsetValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + v.metadata.len());
    match v.expire_timestamp {
        // v1: offset, metadata, commit timestamp, expire timestamp.
        Some(expire) => {
            put_i16(&mut out, 1);
            put_i64(&mut out, v.offset);
            put_str(&mut out, &v.metadata);
            put_i64(&mut out, v.commit_timestamp);
            put_i64(&mut out, expire);
        }
        None => {
            put_i16(&mut out, OFFSET_COMMIT_VALUE_VERSION);
            put_i64(&mut out, v.offset);
            put_i32(&mut out, v.leader_epoch);
            put_str(&mut out, &v.metadata);
            put_i64(&mut out, v.commit_timestamp);
        }
    }
    out
}

pub fn group_value(v: &GroupValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_i16(&mut out, GROUP_METADATA_VALUE_VERSION);
    put_str(&mut out, &v.protocol_type);
    put_i32(&mut out, v.generation);
    put_opt_str(&mut out, v.protocol.as_deref());
    put_opt_str(&mut out, v.leader.as_deref());
    put_i64(&mut out, v.current_state_timestamp);
    put_i32(&mut out, v.members.len() as i32);
    for m in &v.members {
        put_str(&mut out, &m.member_id);
        put_opt_str(&mut out, m.instance_id.as_deref());
        put_str(&mut out, &m.client_id);
        put_str(&mut out, &m.client_host);
        put_i32(&mut out, m.rebalance_timeout_ms);
        put_i32(&mut out, m.session_timeout_ms);
        put_bytes(&mut out, &m.subscription);
        put_bytes(&mut out, &m.assignment);
    }
    out
}

/// Decodes a key; `None` for a key we do not know (Kafka 4 writes other record types to other topics, and
/// versions 0/1 are offset keys, 2 is a group key, 3-8 a consumer-protocol group's).
pub fn decode_key(bytes: &[u8]) -> Option<RecordKey> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 | 1 => Some(RecordKey::Offset {
            group: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        }),
        2 => Some(RecordKey::Group { group: r.string()? }),
        t if super::consumer_records::is_consumer_type(t) => {
            Some(RecordKey::Consumer { group: r.string()? })
        }
        _ => None,
    }
}

pub fn decode_offset_value(bytes: &[u8]) -> Option<OffsetValue> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    let offset = r.i64()?;
    match version {
        0 | 1 => {
            let metadata = r.string()?;
            let commit_timestamp = r.i64()?;
            let expire_timestamp = if version == 1 { Some(r.i64()?) } else { None };
            Some(OffsetValue {
                offset,
                leader_epoch: -1,
                metadata,
                commit_timestamp,
                expire_timestamp,
            })
        }
        // v4 is the flexible form of v3; we never write it and do not read compact encodings.
        3 => Some(OffsetValue {
            offset,
            leader_epoch: r.i32()?,
            metadata: r.string()?,
            commit_timestamp: r.i64()?,
            expire_timestamp: None,
        }),
        _ => None,
    }
}

pub fn decode_group_value(bytes: &[u8]) -> Option<GroupValue> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return None;
    }
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.opt_string()?;
    let leader = r.opt_string()?;
    let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.i32()?;
    // Each member takes at least 24 bytes: bound the count by what is left before allocating.
    if count < 0 || count as usize > r.0.len() / 24 {
        return None;
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let member_id = r.string()?;
        let instance_id = if version >= 3 { r.opt_string()? } else { None };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout_ms = r.i32()?;
        let subscription = Bytes::copy_from_slice(r.bytes()?);
        let assignment = Bytes::copy_from_slice(r.bytes()?);
        members.push(MemberValue {
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: if version >= 1 {
                rebalance_timeout_ms
            } else {
                session_timeout_ms
            },
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Some(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}

fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}
/// Strings longer than `i16::MAX` bytes cannot be represented; callers bound them first (group ids, topics and
/// metadata are validated before they get here), and this cuts at a char boundary rather than corrupt the record.
fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(i16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    put_i16(out, end as i16);
    out.extend_from_slice(&s.as_bytes()[..end]);
}
fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => put_i16(out, -1),
    }
}
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_i32(out, b.len() as i32);
    out.extend_from_slice(b);
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
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn opt_string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let raw = self.take(len as usize)?;
        Some(Some(String::from_utf8_lossy(raw).into_owned()))
    }
    fn string(&mut self) -> Option<String> {
        self.opt_string()?.or(Some(String::new()))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.i32()?;
        if len < 0 {
            return Some(&[]);
        }
        self.take(len as usize)
    }
}

/// Kafka's partition for a group: `Utils.abs(groupId.hashCode()) % n`, with Java's `String.hashCode` over UTF-16
/// code units, so a group lands in the same `__consumer_offsets` partition as on Kafka.
pub fn partition_for(group: &str, num_partitions: u32) -> u32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    (abs as u32) % num_partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_string_hash_partitioning() {
        // "abc".hashCode() == 96354; 96354 % 50 == 4.
        assert_eq!(partition_for("abc", 50), 4);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE → Utils.abs gives 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("", 50), 0);
    }

    #[test]
    fn keys_and_values_round_trip() {
        let k = offset_key("g", "t", 3);
        assert_eq!(
            decode_key(&k),
            Some(RecordKey::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3
            })
        );
        assert_eq!(
            decode_key(&group_key("g")),
            Some(RecordKey::Group { group: "g".into() })
        );
        for expire in [None, Some(99)] {
            let v = OffsetValue {
                offset: 42,
                leader_epoch: if expire.is_some() { -1 } else { 7 },
                metadata: "meta ✓".into(),
                commit_timestamp: 1234,
                expire_timestamp: expire,
            };
            assert_eq!(decode_offset_value(&offset_value(&v)), Some(v));
        }
        let g = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp: 77,
            members: vec![MemberValue {
                member_id: "m1".into(),
                instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300,
                session_timeout_ms: 100,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b""),
            }],
        };
        assert_eq!(decode_group_value(&group_value(&g)), Some(g));
    }

    #[test]
    fn truncated_or_hostile_input_is_refused_not_panicking() {
        let g = group_value(&GroupValue {
            protocol_type: "consumer".into(),
            generation: 1,
            protocol: None,
            leader: None,
            current_state_timestamp: 0,
            members: vec![],
        });
        for cut in 0..g.len() {
            assert!(decode_group_value(&g[..cut]).is_none());
        }
        // A member count of 2^31-1 in a tiny record.
        let mut hostile = g.clone();
        let n = hostile.len();
        hostile[n - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_group_value(&hostile).is_none());
        assert!(decode_key(&[0, 9]).is_none());
        assert!(decode_offset_value(&[0, 3, 1]).is_none());
    }
}
