//! ListOffsets by timestamp and MAX_TIMESTAMP are record-exact inside compressed batches, in every codec.

use annal_log::batch::{Compression, ProducerFields};
use annal_log::records::build_compressed_batch;
use annal_log::{AppendOptions, Log, LogConfig};

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn timestamp_lookups_land_on_the_record_inside_compressed_batches() {
    for codec in CODECS {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        // Two batches of five records; timestamps out of order inside the second one.
        let first: Vec<i64> = vec![1000, 1010, 1020, 1030, 1040];
        let second: Vec<i64> = vec![2000, 2050, 2010, 2040, 2030];
        for timestamps in [&first, &second] {
            let values: Vec<Vec<u8>> = (0..5).map(|i| format!("v{i}").into_bytes()).collect();
            let records: Vec<_> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
            let mut bytes =
                build_compressed_batch(&records, timestamps, codec, ProducerFields::default());
            log.append(&mut bytes, &AppendOptions::default()).unwrap();
        }
        let lookup = |ts| log.offset_for_timestamp(ts).unwrap();
        assert_eq!(lookup(0), Some((0, 1000)), "{codec:?}");
        assert_eq!(lookup(1015), Some((2, 1020)), "{codec:?}");
        assert_eq!(lookup(1040), Some((4, 1040)), "{codec:?}");
        assert_eq!(lookup(2015), Some((6, 2050)), "{codec:?}");
        assert_eq!(lookup(2035), Some((6, 2050)), "{codec:?}");
        assert_eq!(lookup(2051), None, "{codec:?}");
        // MAX_TIMESTAMP: the record carrying the largest timestamp, not the batch's last offset.
        assert_eq!(log.max_timestamp(), Some((2050, 6)), "{codec:?}");
    }
}
