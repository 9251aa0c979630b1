//! A request frame (without its 4-byte size prefix) through the broker's decode path: API key and version checks,
//! request header, and the body for every API key and version the broker advertises.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = annal_broker::decode_request_frame(bytes::Bytes::copy_from_slice(data));
});
