//! Transaction markers: the control batches a transaction coordinator writes into every partition of a
//! transaction to end it (Kafka's `EndTransactionMarker`).
//!
//! A marker is a v2 batch with the control and transactional attribute bits, the producer's id and epoch, no
//! sequence, and one record whose key is `version i16 (0), type i16 (0 ABORT, 1 COMMIT)` and whose value is
//! `version i16 (0), coordinator epoch i32`. Other control types (KRaft's) are not transaction markers.

use crate::batch::{self, field, ProducerFields, ATTR_CONTROL, ATTR_TRANSACTIONAL};
use crate::records::DecodedBatch;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    Abort,
    Commit,
}

impl TxnOutcome {
    /// Kafka's `ControlRecordType` id.
    pub fn control_type(self) -> i16 {
        match self {
            TxnOutcome::Abort => 0,
            TxnOutcome::Commit => 1,
        }
    }
}

/// What a transaction marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub outcome: TxnOutcome,
    /// The epoch of the transaction coordinator that wrote it (fences older coordinators).
    pub coordinator_epoch: i32,
}

/// Bytes of a marker's record key and value.
const KEY_LEN: usize = 4;
const VALUE_LEN: usize = 6;

/// Builds the control batch that ends `producer_id`'s transaction (base offset 0; the log assigns it).
pub fn build_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
    timestamp_ms: i64,
) -> Vec<u8> {
    let mut key = [0u8; KEY_LEN];
    key[2..].copy_from_slice(&marker.outcome.control_type().to_be_bytes());
    let mut value = [0u8; VALUE_LEN];
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut bytes = batch::build_batch(
        &[(Some(key.as_slice()), Some(value.as_slice()))],
        &[timestamp_ms],
        ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence: batch::NO_SEQUENCE,
            transactional: true,
        },
    );
    let attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL;
    bytes[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = batch::compute_crc(&bytes);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    bytes
}

/// The transaction marker in `batch` (one whole control batch), or why it is not one. Every length is checked;
/// a control batch of another type (KRaft's) is `Ok(None)`.
pub fn parse_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>, String> {
    // A marker is one tiny record; a limit this small refuses decompression bombs outright.
    const MARKER_BYTES_MAX: usize = 1024;
    let decoded = DecodedBatch::new(batch, MARKER_BYTES_MAX).map_err(|e| e.0)?;
    if !decoded.header.is_control() {
        return Err("not a control batch".into());
    }
    let records = decoded.collect_records().map_err(|e| e.0)?;
    let [record] = records.as_slice() else {
        return Err(format!(
            "a control batch holds {} records, not 1",
            records.len()
        ));
    };
    let key = record.key.ok_or("a control record has no key")?;
    if key.len() < KEY_LEN {
        return Err(format!("a control record key of {} bytes", key.len()));
    }
    let outcome = match batch::read_i16(key, 2) {
        0 => TxnOutcome::Abort,
        1 => TxnOutcome::Commit,
        _ => return Ok(None),
    };
    let value = record.value.ok_or("a transaction marker has no value")?;
    if value.len() < VALUE_LEN {
        return Err(format!(
            "a transaction marker value of {} bytes",
            value.len()
        ));
    }
    Ok(Some(EndTxnMarker {
        outcome,
        coordinator_epoch: batch::read_i32(value, 2),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchHeader;

    #[test]
    fn a_marker_round_trips_and_has_kafkas_layout() {
        let marker = EndTxnMarker {
            outcome: TxnOutcome::Abort,
            coordinator_epoch: 7,
        };
        let bytes = build_marker_batch(42, 3, marker, 1_700_000_000_000);
        let header = BatchHeader::parse(&bytes).unwrap();
        assert!(header.is_control() && header.is_transactional());
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 3, -1)
        );
        assert_eq!(header.crc, batch::compute_crc(&bytes));
        assert_eq!(parse_marker(&bytes).unwrap(), Some(marker));
        let commit = EndTxnMarker {
            outcome: TxnOutcome::Commit,
            ..marker
        };
        assert_eq!(
            parse_marker(&build_marker_batch(1, 0, commit, 0)).unwrap(),
            Some(commit)
        );
    }

    #[test]
    fn a_data_batch_or_truncated_bytes_are_not_markers() {
        let data = batch::build_uncompressed_batch(&[(None, Some(b"v".as_slice()))], 0);
        assert!(parse_marker(&data).is_err());
        let marker = build_marker_batch(
            1,
            0,
            EndTxnMarker {
                outcome: TxnOutcome::Commit,
                coordinator_epoch: 0,
            },
            0,
        );
        for len in 0..marker.len() {
            assert!(parse_marker(&marker[..len]).is_err(), "{len} bytes");
        }
    }
}
