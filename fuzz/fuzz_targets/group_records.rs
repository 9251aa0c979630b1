//! The group coordinator's `__consumer_offsets` records (Kafka's OffsetCommitKey/Value, GroupMetadataKey/Value,
//! and a consumer-protocol group's records, types 3-8): the first byte says which decoder the rest goes to. What
//! decodes must re-encode to bytes that decode equal.
#![no_main]
use annal_broker::group::consumer_records as consumer;
use annal_broker::group::records::{self, RecordKey};
use libfuzzer_sys::fuzz_target;

/// Decodes, and if that succeeds, checks that encoding and decoding again gives the same value.
fn round_trip<T: PartialEq + std::fmt::Debug>(
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> Option<T>,
    encode: impl Fn(&T) -> Vec<u8>,
) {
    if let Some(v) = decode(bytes) {
        assert_eq!(
            decode(&encode(&v)).as_ref(),
            Some(&v),
            "changed through encode + decode"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 9 {
        0 => match records::decode_key(bytes) {
            Some(RecordKey::Offset {
                group,
                topic,
                partition,
            }) => {
                let again = records::decode_key(&records::offset_key(&group, &topic, partition));
                assert_eq!(
                    again,
                    Some(RecordKey::Offset {
                        group,
                        topic,
                        partition
                    })
                );
            }
            Some(RecordKey::Group { group }) => {
                let again = records::decode_key(&records::group_key(&group));
                assert_eq!(again, Some(RecordKey::Group { group }));
            }
            Some(RecordKey::Consumer { group }) => {
                // `decode_key` reads the group only (what routes the record while loading); the whole key may
                // still be cut short, and then the group's records skip it.
                if let Some(key) = consumer::Key::decode(bytes) {
                    assert_eq!(key.group(), group);
                    assert_eq!(consumer::Key::decode(&key.encode()), Some(key));
                }
            }
            None => {}
        },
        3 => round_trip(bytes, consumer::decode_epoch_value, |e| {
            consumer::epoch_value(*e)
        }),
        4 => round_trip(
            bytes,
            consumer::decode_partition_metadata_value,
            consumer::partition_metadata_value,
        ),
        5 => round_trip(bytes, consumer::decode_member_value, consumer::member_value),
        6 => round_trip(bytes, consumer::decode_target_value, consumer::target_value),
        7 => round_trip(
            bytes,
            consumer::decode_current_value,
            consumer::current_value,
        ),
        1 => {
            if let Some(v) = records::decode_offset_value(bytes) {
                let again = records::decode_offset_value(&records::offset_value(&v));
                assert_eq!(
                    again.as_ref(),
                    Some(&v),
                    "offset value changed through encode + decode"
                );
            }
        }
        _ => {
            if let Some(v) = records::decode_group_value(bytes) {
                let again = records::decode_group_value(&records::group_value(&v));
                assert_eq!(
                    again.as_ref(),
                    Some(&v),
                    "group value changed through encode + decode"
                );
            }
        }
    }
});
