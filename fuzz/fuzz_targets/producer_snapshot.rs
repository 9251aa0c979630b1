//! Producer snapshot files (`<offset>.snapshot`, Kafka's format v1) as `Log::open` reads them. The CRC-32C over the
//! body would stop plain bytes at the first check, so the input is the part after the CRC: the target writes the
//! version and a correct CRC in front (and, if the first input byte is odd, the raw input is tried as a whole file
//! too). What decodes must describe batches that exist (offsets at or above 0, first <= last) and re-encode to a
//! snapshot that decodes to the same state.
#![no_main]
use annal_log::producer::ProducerStateManager;
use libfuzzer_sys::fuzz_target;

fn snapshot_file(body: &[u8]) -> Vec<u8> {
    let mut out = 1i16.to_be_bytes().to_vec();
    out.extend_from_slice(&crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// CRC-32C (Castagnoli), bit by bit: the fuzz crate does not need a faster one.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn check(file: &[u8]) {
    let Ok(state) = ProducerStateManager::from_snapshot_bytes(file) else {
        return;
    };
    for entry in state.producers() {
        for b in &entry.batches {
            assert!(
                0 <= b.first_offset && b.first_offset <= b.last_offset,
                "producer {} restored with a batch at offsets {}..={}",
                entry.producer_id,
                b.first_offset,
                b.last_offset
            );
        }
    }
    let again = ProducerStateManager::from_snapshot_bytes(&state.snapshot_bytes())
        .expect("a snapshot we wrote decodes");
    let a: Vec<_> = state.producers().cloned().collect();
    let mut a = a;
    let mut b: Vec<_> = again.producers().cloned().collect();
    a.sort_by_key(|e| e.producer_id);
    b.sort_by_key(|e| e.producer_id);
    assert_eq!(a, b, "producer state changed through snapshot + restore");
}

fuzz_target!(|data: &[u8]| {
    check(&snapshot_file(data));
    if data.first().is_some_and(|b| b % 2 == 1) {
        check(data);
    }
});
