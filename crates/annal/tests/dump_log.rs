//! `annal dump-log` against logs written by the real engine: batches built by an independent encoder
//! (kafka-protocol's, as Rust Kafka clients build them) in every codec, then damaged copies of the files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use annal_log::batch::{self, ProducerFields};
use annal_log::{AppendOptions, Log, LogConfig};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const T0: i64 = 1_700_000_000_000;

fn record(i: i64, key: &str, value: String) -> Record {
    let mut headers = IndexMap::new();
    headers.insert(
        StrBytes::from_static_str("trace"),
        Some(Bytes::from_static(b"t1")),
    );
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: i,
        // kafka-protocol keeps records in one batch while offset - sequence is constant; base sequence stays -1.
        sequence: i as i32 - 1,
        timestamp: T0 + i,
        key: Some(Bytes::from(key.to_string())),
        value: Some(Bytes::from(value)),
        headers,
    }
}

/// One batch of `n` records compressed with `codec`; values name the codec so the output can be checked.
fn encoded_batch(codec: Compression, tag: &str, n: i64) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            record(
                i,
                &format!("k{i}"),
                format!("{tag}-value-{i}-{}", "x".repeat(200)),
            )
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: codec,
        },
    )
    .expect("encode batch");
    buf.to_vec()
}

const CODECS: [(Compression, &str); 5] = [
    (Compression::None, "none"),
    (Compression::Gzip, "gzip"),
    (Compression::Snappy, "snappy"),
    (Compression::Lz4, "lz4"),
    (Compression::Zstd, "zstd"),
];

/// Writes a partition: every codec several times (small segments, so it rolls) plus an idempotent
/// producer's batches, then closes it cleanly (snapshot + checkpoint).
fn write_partition(dir: &Path) {
    let config = LogConfig {
        segment_bytes: 4 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir, config).expect("open log");
    let opts = AppendOptions {
        now_ms: T0,
        ..AppendOptions::default()
    };
    for round in 0..4 {
        for (codec, tag) in CODECS {
            let mut bytes = encoded_batch(codec, &format!("{tag}{round}"), 10);
            log.append(&mut bytes, &opts).expect("append");
        }
    }
    for seq in 0..3 {
        let value = format!("idempotent-{seq}");
        let mut bytes = batch::build_batch(
            &[(None, Some(value.as_bytes()))],
            &[T0 + 100 + seq],
            ProducerFields {
                producer_id: 4242,
                producer_epoch: 7,
                base_sequence: seq as i32,
                transactional: false,
            },
        );
        log.append(&mut bytes, &opts).expect("append idempotent");
    }
    log.close().expect("close log");
}

fn dump(args: &[&str]) -> (Output, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("dump-log")
        .args(args)
        .output()
        .expect("run annal dump-log");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, text)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// Every file's bytes, to prove the tool changed nothing.
fn snapshot_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn lists_segments_and_decodes_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path());
    let logs = segments(dir.path());
    assert!(
        logs.len() >= 3,
        "small segments should have rolled: {logs:?}"
    );
    let before = snapshot_files(dir.path());
    if let Some(keep) = std::env::var_os("ANNAL_DUMP_TEST_KEEP") {
        // For checking the same files with Kafka's own kafka.tools.DumpLogSegments by hand.
        std::fs::create_dir_all(&keep).unwrap();
        for (path, bytes) in &before {
            std::fs::write(Path::new(&keep).join(path.file_name().unwrap()), bytes).unwrap();
        }
    }

    let (out, text) = dump(&[dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("segment 00000000000000000000.log: baseOffset: 0 size: "),
        "{text}"
    );
    assert_eq!(text.matches("\nsegment ").count(), logs.len(), "{text}");
    // 4 rounds x 5 codecs x 10 records + 3 idempotent records.
    assert!(
        text.contains("records, offsets 0..202 (log end offset 203)"),
        "{text}"
    );
    assert!(text.contains("clean_shutdown=true"), "{text}");
    assert!(
        text.contains("producerId: 4242 producerEpoch: 7")
            && text.contains("lastSequence: 2 lastOffset: 202"),
        "snapshot not decoded: {text}"
    );
    assert!(!text.contains("PROBLEM"), "{text}");

    // One segment, batch by batch, with records and index checks.
    let first = logs[0].to_str().unwrap();
    let (out, text) = dump(&[first, "--print-records", "--index"]);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Log starting offset: 0"), "{text}");
    assert!(
        text.contains("baseOffset: 0 lastOffset: 9 count: 10"),
        "{text}"
    );
    for (_, tag) in CODECS {
        assert!(
            text.contains(&format!("compresscodec: {tag} ")),
            "{tag} batch missing: {text}"
        );
        assert!(
            text.contains(&format!("key: k3 payload: {tag}0-value-3-xxx")),
            "{tag} records not decoded: {text}"
        );
    }
    assert!(
        text.contains("| offset: 13 CreateTime: 1700000000003 keySize: 2 valueSize: "),
        "{text}"
    );
    assert!(text.contains("headerKeys: [trace]"), "{text}");
    assert!(
        !text.contains("isvalid: false") && !text.contains("PROBLEM"),
        "{text}"
    );
    assert!(
        text.contains("position: ") && text.contains("Dumping"),
        "{text}"
    );
    assert!(
        text.contains(".index: ") && text.contains(" entries checked against"),
        "{text}"
    );
    assert!(
        text.contains("offset: ") && text.contains("timestamp: "),
        "{text}"
    );

    // The last segment holds the idempotent producer's batches.
    let last = logs.last().unwrap().to_str().unwrap();
    let (out, text) = dump(&[last, "--print-records"]);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("baseSequence: 2 lastSequence: 2 producerId: 4242 producerEpoch: 7"),
        "{text}"
    );
    assert!(text.contains("payload: idempotent-2"), "{text}");

    assert_eq!(
        before,
        snapshot_files(dir.path()),
        "dump-log must not modify files"
    );
}

#[test]
fn reports_corrupt_and_truncated_files_without_changing_them() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path());
    let logs = segments(dir.path());

    // Flip a payload byte in the first segment's second batch: framing intact, CRC wrong.
    let mut first = std::fs::read(&logs[0]).unwrap();
    let second_batch = batch::BatchHeader::parse(&first).unwrap().size();
    let flip = second_batch + batch::HEADER_SIZE + 30;
    first[flip] ^= 0x40;
    std::fs::write(&logs[0], &first).unwrap();
    // Tear the last segment's tail, and add a torn entry to an index.
    let last = logs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let index = logs[0].with_extension("index");
    let mut index_bytes = std::fs::read(&index).unwrap();
    index_bytes.extend_from_slice(&[0, 0, 0, 9, 0, 0]);
    // And make its first entry point at a position where no batch starts.
    assert!(
        index_bytes.len() >= 14,
        "the first segment should have index entries"
    );
    index_bytes[7] = index_bytes[7].wrapping_add(1);
    std::fs::write(&index, &index_bytes).unwrap();
    let before = snapshot_files(dir.path());

    let (out, text) = dump(&[dir.path().to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "problems must fail the command: {text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("problem(s) found"), "{stderr}");
    assert!(text.contains("fails its CRC-32C"), "{text}");
    assert!(
        text.contains("(truncated)") || text.contains("torn tail"),
        "{text}"
    );

    let (out, text) = dump(&[logs[0].to_str().unwrap(), "--print-records", "--index"]);
    assert!(!out.status.success());
    assert!(text.contains("isvalid: false"), "{text}");
    assert!(
        text.contains("records not decoded: the batch fails its CRC"),
        "{text}"
    );
    assert!(
        text.contains("not a whole number of 8-byte entries"),
        "{text}"
    );
    assert!(text.contains("where no valid batch starts"), "{text}");

    let (out, text) = dump(&[last.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text.contains("invalid bytes at the end of"), "{text}");

    // A batch whose base offset (outside the CRC) was rewritten to near i64::MAX: reported, no overflow.
    let mut huge = std::fs::read(&logs[1]).unwrap();
    huge[..8].copy_from_slice(&(i64::MAX - 3).to_be_bytes());
    let huge_path = dir.path().join("00000000000000009998.log");
    std::fs::write(&huge_path, &huge).unwrap();
    let (out, text) = dump(&[huge_path.to_str().unwrap(), "--print-records", "--index"]);
    assert!(!out.status.success());
    assert!(text.contains("is out of range"), "{text}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    std::fs::remove_file(&huge_path).unwrap();

    // Garbage that is not a segment at all, and a directory entry that is not a partition file.
    let garbage = dir.path().join("00000000000000009999.log");
    std::fs::write(&garbage, [0xffu8; 100]).unwrap();
    let (out, text) = dump(&[garbage.to_str().unwrap(), "--print-records", "--index"]);
    assert!(!out.status.success());
    assert!(text.contains("no valid batch at position 0"), "{text}");
    std::fs::remove_file(&garbage).unwrap();

    assert_eq!(
        before,
        snapshot_files(dir.path()),
        "dump-log must not modify files"
    );
}

/// Indexes stay consistent with the log across a clean close and reopen (appends after reopening must extend
/// the index files, not overwrite them).
#[test]
fn indexes_stay_consistent_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path());
    let config = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config).expect("reopen log");
    for round in 0..3 {
        let mut bytes = encoded_batch(Compression::None, &format!("reopened{round}"), 10);
        log.append(&mut bytes, &AppendOptions::default())
            .expect("append after reopen");
    }
    log.close().expect("close log");
    let (out, text) = dump(&[dir.path().to_str().unwrap(), "--index"]);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("PROBLEM"), "{text}");
}

/// Kafka preallocates the active segment's index files with zeros; those are not entries, and not problems.
#[test]
fn kafka_style_preallocated_indexes_are_understood() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path());
    let last = segments(dir.path()).pop().unwrap();
    for (suffix, entry) in [("index", 8usize), ("timeindex", 12)] {
        let path = last.with_extension(suffix);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.resize(bytes.len() + 1000 * entry, 0);
        std::fs::write(&path, &bytes).unwrap();
    }
    let (out, text) = dump(&[last.to_str().unwrap(), "--index"]);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("zero-filled (preallocated) space from entry"),
        "{text}"
    );
    let (out, text) = dump(&[dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("(+1000 preallocated)"), "{text}");
}

/// Key index files (`key.index.enable`): shown per segment and checked against the log; a damaged one is a
/// PROBLEM that says a broker rebuilds it.
#[test]
fn key_index_files_are_shown_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 4 * 1024,
        key_index: true,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config).expect("open log");
    let opts = AppendOptions {
        now_ms: T0,
        ..AppendOptions::default()
    };
    for round in 0..3 {
        for (codec, tag) in CODECS {
            let mut bytes = encoded_batch(codec, &format!("{tag}{round}"), 10);
            log.append(&mut bytes, &opts).expect("append");
        }
    }
    while log.index_keys(1 << 20).unwrap().pending_segments > 0 {}
    log.close().unwrap();
    let (output, text) = dump(&[dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{text}");
    let shown = text.matches("key index ").count();
    assert!(shown >= 2, "{text}");
    assert!(text.contains("(checked against the log)"), "{text}");

    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "keyindex"))
        .collect();
    files.sort();
    let (output, text) = dump(&[files[0].to_str().unwrap()]);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("entries: 50 distinctHashes: 10"), "{text}");

    // An entry rewritten with a wrong (but well-formed, checksummed) hash: only the check against the log sees it.
    let bytes = std::fs::read(&files[1]).unwrap();
    let mut damaged = bytes.clone();
    damaged[44..48].copy_from_slice(&0u32.to_be_bytes());
    let crc = crc32c::crc32c(&damaged[44..]);
    damaged[36..40].copy_from_slice(&crc.to_be_bytes());
    let header_crc = crc32c::crc32c(&damaged[..40]);
    damaged[40..44].copy_from_slice(&header_crc.to_be_bytes());
    std::fs::write(&files[1], &damaged).unwrap();
    let (output, text) = dump(&[dir.path().to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(text.contains("PROBLEM: key index"), "{text}");
    assert!(text.contains("a broker rebuilds it"), "{text}");
}
