//! Kafka's default partitioner, so `annal produce` puts keyed records where every Kafka client would.
//!
//! Keyed records: `(murmur2(key) & 0x7fffffff) % partitions`, exactly as the Java client's
//! `BuiltInPartitioner.partitionForKey` with `Utils.murmur2` / `Utils.toPositive`. Records without a key are
//! spread "sticky" (KIP-480): a whole batch goes to one partition and the next batch moves to the next one.

pub use annal_client::partitioner::partition_for_key;

/// Chooses partitions for a stream of records: murmur2 for keys, one partition per batch for null keys.
pub struct Partitioner {
    partitions: u32,
    sticky: u32,
}

impl Partitioner {
    /// `start` spreads null-key batches from different runs over different partitions.
    pub fn new(partitions: u32, start: u32) -> Partitioner {
        assert!(partitions > 0, "a topic has at least one partition");
        Partitioner {
            partitions,
            sticky: start % partitions,
        }
    }

    pub fn partition(&self, key: Option<&[u8]>) -> u32 {
        match key {
            Some(key) => partition_for_key(key, self.partitions),
            None => self.sticky,
        }
    }

    /// Called after each batch is sent: null-key records move on to the next partition.
    pub fn next_batch(&mut self) {
        self.sticky = (self.sticky + 1) % self.partitions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use annal_client::partitioner::murmur2;

    /// From Apache Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
    #[test]
    fn murmur2_matches_kafka_utils_test() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input) as i32,
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// From librdkafka's src/rdmurmur2.c (unittest_murmur2), which checks against the Java results.
    #[test]
    fn murmur2_matches_librdkafka_vectors() {
        let short: &[u8] = b"1234";
        let unaligned: &[u8] = b"PreAmbleWillBeRemoved,ThePrePartThatIs";
        let cases: [(&[u8], u32); 11] = [
            (b"kafka", 0xd067cf64),
            (b"giberish123456789", 0x8f552b0c),
            (short, 0x9fc97b14),
            (&short[1..], 0xe7c009ca),
            (&short[2..], 0x873930da),
            (&short[3..], 0x5a4b5ca1),
            (unaligned, 0x78424f1c),
            (&unaligned[1..], 0x4a62b377),
            (&unaligned[2..], 0xe0e4e09e),
            (&unaligned[3..], 0x62b8b43f),
            (b"", 0x106e08d9),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn key_partition_is_to_positive_modulo() {
        // murmur2("kafka") = 0xd067cf64 is negative as a Java int: toPositive clears the sign bit.
        assert_eq!(
            partition_for_key(b"kafka", 1000),
            (0xd067cf64u32 & 0x7fffffff) % 1000
        );
        assert_eq!(partition_for_key(b"kafka", 1), 0);
        for n in 1..20 {
            assert!(partition_for_key(b"anything", n) < n);
        }
    }

    #[test]
    fn null_keys_stick_to_one_partition_per_batch() {
        let mut p = Partitioner::new(3, 5);
        assert_eq!(p.partition(None), 2);
        assert_eq!(p.partition(None), 2);
        p.next_batch();
        assert_eq!(p.partition(None), 0);
        assert_eq!(p.partition(Some(b"21")), partition_for_key(b"21", 3));
    }
}
