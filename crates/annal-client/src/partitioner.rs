//! Kafka's default partitioner for keyed records: `(murmur2(key) & 0x7fffffff) % partitions`, exactly as the
//! Java client's `BuiltInPartitioner.partitionForKey` with `Utils.murmur2` / `Utils.toPositive`. Shared by the
//! `annal` CLI (where `annal produce` puts keyed records) and the broker (which key lookups ask by default).
//! Tests against Kafka's and librdkafka's vectors are in the `annal` crate's `partitioner.rs`.

/// Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2): MurmurHash2, 32 bit, seed 0x9747b28c,
/// little-endian 4-byte blocks. Returns Java's `int` result as its bit pattern.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = SEED ^ length;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // The tail falls through like Java's switch: 3 bytes mix in all three, then one multiply.
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition Kafka's default partitioner picks for a non-null key.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (murmur2(key) & 0x7fff_ffff) % partitions
}
