//! Record-level work on the produce path, before the engine appends (Kafka's `LogValidator` parts that need the
//! records): a compacted topic refuses records without a key (INVALID_RECORD with KIP-467 per-record errors),
//! and a topic `compression.type` other than `producer` recompresses batches whose codec differs (KIP-390
//! levels). A topic with neither keeps the zero-copy path: its bytes are not looked at here.

use bytes::Bytes;

use annal_log::records::{recompress_batches, DecodedBatch};
use annal_log::{batch, LogConfig};

use crate::topic_config::RecordPolicy;

/// What to append for one partition.
#[derive(Debug)]
pub enum Prepared {
    /// Append the request's bytes as they are.
    Unchanged,
    /// Append these instead (recompressed).
    Rewritten(Bytes),
    /// Refuse the partition's records: INVALID_RECORD, with the records at fault (index in their batch).
    Rejected {
        message: String,
        record_errors: Vec<(i32, String)>,
    },
}

/// Applies `policy` to one partition's records. Bytes that do not validate are left for the engine, which
/// refuses them with the precise error (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...).
pub fn prepare(
    records: &Bytes,
    policy: &RecordPolicy,
    max_message_bytes: u32,
    topic_partition: &str,
) -> Prepared {
    if !policy.require_keys && policy.codec.is_none() {
        return Prepared::Unchanged;
    }
    let Ok(validated) = batch::validate_batches(records, max_message_bytes) else {
        return Prepared::Unchanged;
    };
    let limit = LogConfig {
        max_message_bytes,
        ..LogConfig::default()
    }
    .decompressed_batch_limit();
    if policy.require_keys {
        let mut errors = Vec::new();
        for v in validated.iter().filter(|v| !v.header.is_control()) {
            let whole = &records[v.position..v.position + v.header.size()];
            let decoded = match DecodedBatch::new(whole, limit) {
                Ok(decoded) => decoded,
                Err(e) => {
                    return Prepared::Rejected {
                        message: format!("cannot read the records of a batch for the compacted topic partition {topic_partition}: {e}"),
                        record_errors: Vec::new(),
                    }
                }
            };
            for (index, record) in decoded.records().enumerate() {
                match record {
                    Ok(r) if r.key.is_none() => errors.push((
                        index as i32,
                        format!("Compacted topic cannot accept message without key in topic partition {topic_partition}."),
                    )),
                    Ok(_) => {}
                    Err(e) => {
                        return Prepared::Rejected {
                            message: format!("malformed record in topic partition {topic_partition}: {e}"),
                            record_errors: vec![(index as i32, e.to_string())],
                        }
                    }
                }
            }
        }
        if !errors.is_empty() {
            let shown: Vec<String> = errors
                .iter()
                .take(3)
                .map(|(i, m)| format!("RecordError(batchIndex={i}, message='{m}')"))
                .collect();
            return Prepared::Rejected {
                message: format!(
                    "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                    errors.len(),
                    shown.join(", ")
                ),
                record_errors: errors,
            };
        }
    }
    if let Some(codec) = policy.codec {
        if validated
            .iter()
            .any(|v| !v.header.is_control() && v.header.compression() != Some(codec))
        {
            return match recompress_batches(records, codec, policy.level, limit) {
                Ok(bytes) => Prepared::Rewritten(Bytes::from(bytes)),
                Err(e) => Prepared::Rejected {
                    message: format!(
                        "cannot recompress the records for topic partition {topic_partition} to {}: {e}",
                        codec.name()
                    ),
                    record_errors: Vec::new(),
                },
            };
        }
    }
    Prepared::Unchanged
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_log::batch::{Compression, ProducerFields};
    use annal_log::records::build_compressed_batch;

    fn policy(require_keys: bool, codec: Option<Compression>) -> RecordPolicy {
        RecordPolicy {
            require_keys,
            codec,
            level: None,
        }
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_named() {
        let bytes = Bytes::from(build_compressed_batch(
            &[
                (Some(b"k".as_slice()), Some(b"v".as_slice())),
                (None, Some(b"v".as_slice())),
                (None, None),
            ],
            &[1, 2, 3],
            Compression::Zstd,
            ProducerFields::default(),
        ));
        match prepare(&bytes, &policy(true, None), 1 << 20, "t-0") {
            Prepared::Rejected {
                record_errors,
                message,
            } => {
                assert_eq!(
                    record_errors.iter().map(|e| e.0).collect::<Vec<_>>(),
                    vec![1, 2]
                );
                assert!(message.contains("2 record errors"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn matching_codec_is_zero_copy_and_others_are_recompressed() {
        let bytes = Bytes::from(build_compressed_batch(
            &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
            &[1],
            Compression::Lz4,
            ProducerFields::default(),
        ));
        assert!(matches!(
            prepare(
                &bytes,
                &policy(true, Some(Compression::Lz4)),
                1 << 20,
                "t-0"
            ),
            Prepared::Unchanged
        ));
        match prepare(
            &bytes,
            &policy(false, Some(Compression::Gzip)),
            1 << 20,
            "t-0",
        ) {
            Prepared::Rewritten(out) => {
                let v = batch::validate_batches(&out, 1 << 20).unwrap();
                assert_eq!(v[0].header.compression(), Some(Compression::Gzip));
            }
            other => panic!("{other:?}"),
        }
    }
}
