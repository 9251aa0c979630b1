//! What annal-client decodes inside responses: the records of a fetched partition (batch framing, record
//! iteration, bounded decompression for every codec; `decode_fetched`) and consumer group assignments
//! (`decode_assignment`). The first byte picks the decoder; for fetched records the next 8 are the fetch offset.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        if rest.len() < 8 {
            return;
        }
        let offset = i64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
        if let Ok(decoded) =
            annal_client::decode_fetched(bytes::Bytes::copy_from_slice(&rest[8..]), offset)
        {
            assert!(
                decoded.records.iter().all(|r| r.offset >= offset),
                "a record before the fetch offset"
            );
        }
    } else {
        let _ = annal_client::decode_assignment(rest);
    }
});
