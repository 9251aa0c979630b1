//! Response frames as annal-client (and so the CLI) decodes them: the response header, then the body of the
//! API the request was for. Input: `api key: i16 BE, version: i16 BE` (the request the client sent; the version
//! is folded into the API's valid range), then the frame after its size prefix.
#![no_main]
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let Ok(key) = ApiKey::try_from(i16::from_be_bytes([data[0], data[1]])) else {
        return;
    };
    let range = key.valid_versions();
    let span = (range.max - range.min + 1).max(1) as u16;
    let version = range.min + (u16::from_be_bytes([data[2], data[3]]) % span) as i16;
    let mut frame = Bytes::copy_from_slice(&data[4..]);
    if ResponseHeader::decode(&mut frame, key.response_header_version(version)).is_err() {
        return;
    }
    let _ = ResponseKind::decode(key, &mut frame, version);
});
