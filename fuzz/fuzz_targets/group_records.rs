//! The group coordinator's `__consumer_offsets` records (Kafka's OffsetCommitKey/Value, GroupMetadataKey/Value):
//! the first byte says which decoder the rest goes to. What decodes must re-encode to bytes that decode equal.
#![no_main]
use annal_broker::group::records::{self, RecordKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 3 {
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
            None => {}
        },
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
