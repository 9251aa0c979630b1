//! The records of `__transaction_state` in Kafka's own schemas (`TransactionLogKey` v0 and `TransactionLogValue`
//! v0/v1 from Kafka's `transaction-coordinator` module), so Kafka's tools (`kafka-dump-log
//! --transaction-log-decoder`) read our files and a Kafka broker could read our log.
//!
//! We write the non-flexible version 0 of the value for a transaction-version-1 transaction and the flexible
//! version 1 (compact strings and arrays; previous/next producer id and the client's transaction version as
//! tagged fields) for a transaction-version-2 one, as Kafka does, and read both. Decoding never panics: every
//! length is checked against the bytes left, and counts are bounded by those bytes before anything is allocated.

use std::collections::BTreeSet;

use super::state::TxnState;

/// `TransactionLogKey` version (Kafka has only 0).
const KEY_VERSION: i16 = 0;
/// `TransactionLogValue` version written for a transaction-version-1 transaction (non-flexible).
const VALUE_VERSION_TV1: i16 = 0;
/// The version written once the client speaks transaction version 2 (flexible, with tagged fields).
const VALUE_VERSION_TV2: i16 = 1;
/// The newest value version we read.
const VALUE_VERSION_MAX: i16 = 1;

/// `TransactionLogValue`: what the coordinator persists about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    /// v1 tagged field 0 (-1 when absent).
    pub previous_producer_id: i64,
    /// v1 tagged field 1 (-1 when absent).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// `(topic, partition)`s of the transaction; written as a null array in `Empty`, as Kafka does.
    pub partitions: BTreeSet<(String, i32)>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// v1 tagged field 2 (0 when absent).
    pub client_transaction_version: i16,
}

/// The `TransactionLogKey` of `transactional_id`.
pub fn key(transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    put_string(&mut out, transactional_id);
    out
}

/// The transactional id of a `TransactionLogKey`; `None` if the bytes are not one (a foreign or newer record).
pub fn parse_key(bytes: &[u8]) -> Option<String> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != KEY_VERSION {
        return None;
    }
    let id = r.string()?;
    Some(id)
}

/// `value` as a `TransactionLogValue`: version 1 when the client speaks transaction version 2, else version 0.
pub fn value(v: &TxnLogValue) -> Vec<u8> {
    if v.client_transaction_version >= 2 {
        return value_v1(v);
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&VALUE_VERSION_TV1.to_be_bytes());
    out.extend_from_slice(&v.producer_id.to_be_bytes());
    out.extend_from_slice(&v.producer_epoch.to_be_bytes());
    out.extend_from_slice(&v.timeout_ms.to_be_bytes());
    out.push(v.state.id() as u8);
    if v.state == TxnState::Empty {
        out.extend_from_slice(&(-1i32).to_be_bytes());
    } else {
        let topics = group_by_topic(&v.partitions);
        out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (topic, ids) in topics {
            put_string(&mut out, topic);
            out.extend_from_slice(&(ids.len() as i32).to_be_bytes());
            for id in ids {
                out.extend_from_slice(&id.to_be_bytes());
            }
        }
    }
    out.extend_from_slice(&v.last_update_ms.to_be_bytes());
    out.extend_from_slice(&v.start_ms.to_be_bytes());
    out
}

/// The flexible version 1: compact arrays and strings, the producer-id hand-over and the client's transaction
/// version as tagged fields (written only when not their defaults, as Kafka's generated code does).
fn value_v1(v: &TxnLogValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(80);
    out.extend_from_slice(&VALUE_VERSION_TV2.to_be_bytes());
    out.extend_from_slice(&v.producer_id.to_be_bytes());
    out.extend_from_slice(&v.producer_epoch.to_be_bytes());
    out.extend_from_slice(&v.timeout_ms.to_be_bytes());
    out.push(v.state.id() as u8);
    if v.state == TxnState::Empty {
        put_uvarint(&mut out, 0); // null
    } else {
        let topics = group_by_topic(&v.partitions);
        put_uvarint(&mut out, topics.len() as u32 + 1);
        for (topic, ids) in topics {
            put_compact_string(&mut out, topic);
            put_uvarint(&mut out, ids.len() as u32 + 1);
            for id in ids {
                out.extend_from_slice(&id.to_be_bytes());
            }
            put_uvarint(&mut out, 0); // the topic's tagged fields
        }
    }
    out.extend_from_slice(&v.last_update_ms.to_be_bytes());
    out.extend_from_slice(&v.start_ms.to_be_bytes());
    let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
    if v.previous_producer_id != -1 {
        tagged.push((0, v.previous_producer_id.to_be_bytes().to_vec()));
    }
    if v.next_producer_id != -1 {
        tagged.push((1, v.next_producer_id.to_be_bytes().to_vec()));
    }
    if v.client_transaction_version != 0 {
        tagged.push((2, v.client_transaction_version.to_be_bytes().to_vec()));
    }
    put_uvarint(&mut out, tagged.len() as u32);
    for (tag, data) in tagged {
        put_uvarint(&mut out, tag);
        put_uvarint(&mut out, data.len() as u32);
        out.extend_from_slice(&data);
    }
    out
}

fn put_uvarint(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_compact_string(out: &mut Vec<u8>, s: &str) {
    // Topic names are at most 249 bytes; bounded like `put_string` anyway.
    let len = s.len().min(i16::MAX as usize);
    put_uvarint(out, len as u32 + 1);
    out.extend_from_slice(&s.as_bytes()[..len]);
}

/// Decodes a `TransactionLogValue` of version 0 or 1; `None` if malformed or of a newer version.
pub fn parse_value(bytes: &[u8]) -> Option<TxnLogValue> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if !(0..=VALUE_VERSION_MAX).contains(&version) {
        return None;
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state = TxnState::from_id(r.i8()?)?;
    let mut partitions = BTreeSet::new();
    let topics = if flexible { r.compact_len()? } else { r.len()? };
    for _ in 0..topics.unwrap_or(0) {
        let topic = if flexible {
            r.compact_string()?
        } else {
            r.string()?
        };
        let ids = if flexible { r.compact_len()? } else { r.len()? }.unwrap_or(0);
        for _ in 0..ids {
            partitions.insert((topic.clone(), r.i32()?));
        }
        if flexible {
            r.skip_tagged_fields(|_, _| Some(()))?;
        }
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let mut value = TxnLogValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
    };
    if flexible {
        r.skip_tagged_fields(|tag, data| {
            let mut f = Reader(data);
            match tag {
                0 => value.previous_producer_id = f.i64()?,
                1 => value.next_producer_id = f.i64()?,
                2 => value.client_transaction_version = f.i16()?,
                _ => {}
            }
            Some(())
        })?;
    }
    Some(value)
}

fn group_by_topic(partitions: &BTreeSet<(String, i32)>) -> Vec<(&str, Vec<i32>)> {
    let mut out: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match out.last_mut() {
            Some((t, ids)) if *t == topic.as_str() => ids.push(*p),
            _ => out.push((topic.as_str(), vec![*p])),
        }
    }
    out
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    // Transactional ids and topic names are far below i16::MAX bytes (the protocol's own strings are i16-sized).
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

/// A bounds-checked cursor: every read returns `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn i8(&mut self) -> Option<i8> {
        Some(self.take(1)?[0] as i8)
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

    fn uvarint(&mut self) -> Option<u32> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            value |= u32::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// An i32 array length: `Some(None)` for null; a count larger than the bytes left is malformed.
    fn len(&mut self) -> Option<Option<usize>> {
        let n = self.i32()?;
        if n < 0 {
            return Some(None);
        }
        let n = n as usize;
        (n <= self.0.len()).then_some(Some(n))
    }

    /// A compact (uvarint N+1) array length.
    fn compact_len(&mut self) -> Option<Option<usize>> {
        let n = self.uvarint()?;
        if n == 0 {
            return Some(None);
        }
        let n = (n - 1) as usize;
        (n <= self.0.len()).then_some(Some(n))
    }

    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn compact_string(&mut self) -> Option<String> {
        let n = self.uvarint()?.checked_sub(1)? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn skip_tagged_fields(&mut self, mut each: impl FnMut(u32, &[u8]) -> Option<()>) -> Option<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let data = self.take(size)?;
            each(tag, data)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: TxnState) -> TxnLogValue {
        let mut partitions = BTreeSet::new();
        if state != TxnState::Empty {
            partitions.insert(("a".to_string(), 0));
            partitions.insert(("a".to_string(), 2));
            partitions.insert(("b".to_string(), 1));
        }
        TxnLogValue {
            producer_id: 4000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state,
            partitions,
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn key_bytes_are_kafkas() {
        assert_eq!(key("tx"), vec![0, 0, 0, 2, b't', b'x']);
        assert_eq!(parse_key(&key("tx-é")).as_deref(), Some("tx-é"));
        assert_eq!(parse_key(&[0, 1, 0, 0]), None, "unknown key version");
        assert_eq!(parse_key(&[0, 0, 0, 9, b'x']), None, "length past the end");
    }

    #[test]
    fn value_round_trips_in_every_state() {
        for id in 0..=7 {
            let state = TxnState::from_id(id).expect("state id");
            let v = sample(state);
            assert_eq!(parse_value(&value(&v)), Some(v), "{state:?}");
        }
    }

    #[test]
    fn value_v0_layout() {
        let bytes = value(&sample(TxnState::Ongoing));
        // version, producer id, epoch, timeout, status
        assert_eq!(&bytes[..2], &[0, 0]);
        assert_eq!(&bytes[2..10], &4000i64.to_be_bytes());
        assert_eq!(&bytes[10..12], &3i16.to_be_bytes());
        assert_eq!(&bytes[12..16], &60_000i32.to_be_bytes());
        assert_eq!(bytes[16], 1);
        assert_eq!(&bytes[17..21], &2i32.to_be_bytes(), "two topics");
        let empty = value(&sample(TxnState::Empty));
        assert_eq!(
            &empty[17..21],
            &(-1i32).to_be_bytes(),
            "Empty writes a null array"
        );
    }

    #[test]
    fn value_v1_with_tagged_fields_decodes() {
        let mut b = vec![0, 1];
        b.extend_from_slice(&7i64.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1000i32.to_be_bytes());
        b.push(4); // CompleteCommit
        b.push(2); // one topic
        b.push(2); // "t"
        b.push(b't');
        b.push(2); // one partition
        b.extend_from_slice(&5i32.to_be_bytes());
        b.push(0); // topic's tagged fields
        b.extend_from_slice(&11i64.to_be_bytes());
        b.extend_from_slice(&10i64.to_be_bytes());
        b.push(2); // two tagged fields
        b.extend_from_slice(&[0, 8]);
        b.extend_from_slice(&6i64.to_be_bytes());
        b.extend_from_slice(&[2, 2]);
        b.extend_from_slice(&2i16.to_be_bytes());
        let v = parse_value(&b).expect("v1 decodes");
        assert_eq!(v.producer_id, 7);
        assert_eq!(v.previous_producer_id, 6);
        assert_eq!(v.client_transaction_version, 2);
        assert_eq!(v.state, TxnState::CompleteCommit);
        assert!(v.partitions.contains(&("t".to_string(), 5)));
    }

    #[test]
    fn value_v1_round_trips_for_transaction_version_2() {
        for id in 0..=7 {
            let state = TxnState::from_id(id).expect("state id");
            let mut v = sample(state);
            v.client_transaction_version = 2;
            v.previous_producer_id = 3999;
            v.next_producer_id = 4001;
            let bytes = value(&v);
            assert_eq!(&bytes[..2], &[0, 1], "version 1");
            assert_eq!(parse_value(&bytes), Some(v.clone()), "{state:?}");
            for cut in 0..bytes.len() {
                assert_eq!(parse_value(&bytes[..cut]), None, "cut at {cut}");
            }
        }
    }

    #[test]
    fn truncated_or_lying_values_are_refused() {
        let bytes = value(&sample(TxnState::Ongoing));
        for cut in 0..bytes.len() {
            assert_eq!(parse_value(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut lying = bytes.clone();
        lying[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(parse_value(&lying), None);
        let mut bad_state = bytes;
        bad_state[16] = 42;
        assert_eq!(parse_value(&bad_state), None);
    }
}
