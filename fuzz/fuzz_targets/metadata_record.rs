//! Metadata log records (Kafka's `MetadataRecordSerde` framing): each input is a sequence of records, each
//! `len: u16 LE, bytes`. Every record that decodes must re-encode to bytes that decode to the same record, and
//! applying the decoded records to an image must refuse, not panic, whatever does not fit.
#![no_main]
use annal_metadata::image::MetadataImage;
use annal_metadata::records::MetadataRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut image = MetadataImage::new("fuzz");
    let mut rest = data;
    let mut offset = 0u64;
    while rest.len() >= 2 {
        let len = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        let bytes = &rest[2..2 + len];
        rest = &rest[2 + len..];
        let Ok(record) = MetadataRecord::decode(bytes) else {
            continue;
        };
        let again = MetadataRecord::decode(&record.encode()).expect("an encoded record decodes");
        assert_eq!(
            again, record,
            "metadata record changed through encode + decode"
        );
        let _ = image.try_apply(offset, &record);
        offset += 1;
    }
});
