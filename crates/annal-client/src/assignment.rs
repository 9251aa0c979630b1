//! Decoding a consumer group member's assignment (the `consumer` protocol's ConsumerProtocolAssignment).
//!
//! The bytes come from the broker, which relays what the group leader sent in SyncGroup: any client can put
//! anything there. kafka-protocol's decoder reserves memory for an array's claimed element count before
//! reading the elements, so a claimed count of two billion would ask for hundreds of gigabytes. We therefore
//! walk the structure first and check every count and length against the bytes actually present, and only then
//! hand the (now known to be bounded) bytes to kafka-protocol.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

/// The newest ConsumerProtocolAssignment version kafka-protocol knows. Newer versions only add fields at the
/// end, so (as Kafka's ConsumerProtocol does) a newer one is read as this one.
const HIGHEST_KNOWN_VERSION: i16 = 3;

/// A member's assigned partitions, by topic, in the order the assignor wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    pub version: i16,
    pub partitions: Vec<(String, Vec<i32>)>,
    /// Length of the assignor's opaque user data (sticky assignors put their state there).
    pub user_data_len: usize,
}

impl Assignment {
    pub fn partition_count(&self) -> usize {
        self.partitions.iter().map(|(_, ps)| ps.len()).sum()
    }
}

/// Decodes an assignment. Empty bytes (a member still joining, or one that got nothing) are an empty assignment.
pub fn decode_assignment(bytes: &[u8]) -> Result<Assignment> {
    if bytes.is_empty() {
        return Ok(Assignment::default());
    }
    check_bounds(bytes).context("malformed consumer assignment")?;
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    let mut body = Bytes::copy_from_slice(&bytes[2..]);
    let decoded = ConsumerProtocolAssignment::decode(&mut body, version.min(HIGHEST_KNOWN_VERSION))
        .context("malformed consumer assignment")?;
    Ok(Assignment {
        version,
        partitions: decoded
            .assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
        user_data_len: decoded.user_data.map_or(0, |d| d.len()),
    })
}

/// Walks version, topics (name, partitions) and user data, checking each count against the bytes left.
fn check_bounds(bytes: &[u8]) -> Result<()> {
    let mut r = Reader { buf: bytes };
    let version = r.i16()?;
    if version < 0 {
        bail!("negative version {version}");
    }
    // Smallest topic entry: a 2-byte name length and a 4-byte partition count.
    let topics = r.count(6, "topic")?;
    for _ in 0..topics {
        let name_len = r.i16()?;
        if name_len < 0 {
            bail!("null topic name");
        }
        r.skip(name_len as usize, "topic name")?;
        let partitions = r.count(4, "partition")?;
        r.skip(partitions * 4, "partitions")?;
    }
    let user_data = r.i32()?;
    if user_data >= 0 {
        r.skip(user_data as usize, "user data")?;
    } else if user_data != -1 {
        bail!("user data length {user_data}");
    }
    Ok(())
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8]> {
        if n > self.buf.len() {
            bail!(
                "{what} needs {n} bytes but only {} are left",
                self.buf.len()
            );
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn skip(&mut self, n: usize, what: &str) -> Result<()> {
        self.take(n, what).map(|_| ())
    }

    fn i16(&mut self) -> Result<i16> {
        let b = self.take(2, "a 16-bit field")?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4, "a 32-bit field")?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An array count whose elements take at least `min_size` bytes each: it must fit in what is left.
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| anyhow::anyhow!("negative {what} count {n}"))?;
        if n > self.buf.len() / min_size {
            bail!(
                "claims {n} {what}s but only {} bytes are left",
                self.buf.len()
            );
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encode(version: i16, a: &ConsumerProtocolAssignment) -> Vec<u8> {
        let mut buf = bytes::BytesMut::new();
        buf.extend_from_slice(&version.to_be_bytes());
        a.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    fn sample() -> ConsumerProtocolAssignment {
        ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_static_str("orders")))
                    .with_partitions(vec![0, 2]),
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_static_str("audit")))
                    .with_partitions(vec![1]),
            ])
            .with_user_data(Some(Bytes::from_static(b"sticky")))
    }

    #[test]
    fn decodes_every_known_version() {
        for version in 0..=3 {
            let a = decode_assignment(&encode(version, &sample())).unwrap();
            assert_eq!(a.version, version);
            assert_eq!(
                a.partitions,
                vec![("orders".into(), vec![0, 2]), ("audit".into(), vec![1])]
            );
            assert_eq!(a.partition_count(), 3);
            assert_eq!(a.user_data_len, 6);
        }
    }

    #[test]
    fn newer_versions_are_read_as_the_newest_known() {
        let mut bytes = encode(3, &sample());
        bytes[..2].copy_from_slice(&7i16.to_be_bytes());
        bytes.extend_from_slice(b"fields from the future");
        let a = decode_assignment(&bytes).unwrap();
        assert_eq!(a.version, 7);
        assert_eq!(a.partition_count(), 3);
    }

    #[test]
    fn empty_bytes_are_an_empty_assignment() {
        assert_eq!(decode_assignment(&[]).unwrap(), Assignment::default());
        let none = ConsumerProtocolAssignment::default();
        let a = decode_assignment(&encode(0, &none)).unwrap();
        assert!(a.partitions.is_empty() && a.user_data_len == 0);
    }

    #[test]
    fn huge_claimed_counts_are_refused_before_allocating() {
        // Version 0, then 2^31-1 topics in 4 bytes.
        let err = decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0])
            .unwrap_err()
            .to_string();
        assert!(err.contains("malformed consumer assignment"), "{err}");
        // One topic "t" claiming 2^31-1 partitions.
        let bytes = [
            0, 0, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        ];
        assert!(decode_assignment(&bytes).is_err());
        // Negative counts and lengths.
        assert!(decode_assignment(&[0, 0, 0xff, 0xff, 0xff, 0xfe]).is_err());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0]).is_err());
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = encode(1, &sample());
        for len in 1..bytes.len() {
            assert!(
                decode_assignment(&bytes[..len]).is_err(),
                "accepted {len} of {} bytes",
                bytes.len()
            );
        }
    }
}
