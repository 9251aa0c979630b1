//! The metadata quorum's raft entry codec: one Kafka v2 batch per entry, decoded as the log store does, and
//! re-encoded (a decoded entry must round-trip).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = annal_metadata::raft::decode_entry_checked(data);
});
