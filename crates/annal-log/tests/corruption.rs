//! Damaged files: lost, truncated or garbage indexes, a garbage checkpoint or producer snapshot, and a corrupt
//! batch in the middle of a segment after an unclean shutdown. The log must come back serving exactly the
//! batches that are intact (never a corrupt one), with working lookups, and take appends.

use std::path::{Path, PathBuf};

use annal_log::batch::{self, build_batch, ProducerFields};
use annal_log::{AppendOptions, Log, LogConfig, LogError};

/// A (key, value) record for `build_batch`.
type Record<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

const BASE_TS: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 200,
        segment_ms: i64::MAX,
        ..LogConfig::default()
    }
}

fn opts() -> AppendOptions {
    AppendOptions {
        now_ms: BASE_TS,
        ..AppendOptions::default()
    }
}

/// A stored batch: its offsets and bytes as the log holds them.
#[derive(Clone)]
struct Stored {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

/// Writes 120 batches of 1-3 records (timestamps rising by 10 per record) with producer 77; returns them.
fn fill(dir: &Path) -> (Log, Vec<Stored>) {
    let mut log = Log::open(dir, config()).unwrap();
    let mut stored = Vec::new();
    let mut sequence = 0;
    for i in 0..120i64 {
        let count = 1 + (i % 3) as usize;
        let value = vec![b'a' + (i % 26) as u8; 40 + (i as usize * 7) % 120];
        let records: Vec<Record> = vec![(None, Some(value.as_slice())); count];
        let base = log.log_end_offset();
        let timestamps: Vec<i64> = (0..count as i64)
            .map(|r| BASE_TS + (base + r) * 10)
            .collect();
        let mut bytes = build_batch(
            &records,
            &timestamps,
            ProducerFields {
                producer_id: 77,
                producer_epoch: 0,
                base_sequence: sequence,
                transactional: false,
            },
        );
        sequence += count as i32;
        let info = log.append(&mut bytes, &opts()).unwrap();
        stored.push(Stored {
            base: info.first_offset,
            last: info.last_offset,
            bytes,
        });
    }
    assert!(log.segments().len() >= 5, "the test needs several segments");
    (log, stored)
}

fn file(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base:020}.{suffix}"))
}

fn segment_bases(dir: &Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log").map(|s| s.parse().unwrap())
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// Every offset reads back as exactly its containing batch; the whole log reads back as `expected`; timestamp
/// lookups and the max timestamp agree with the batches.
fn verify(log: &Log, expected: &[Stored]) {
    assert_eq!(
        log.log_end_offset(),
        expected.last().map_or(0, |b| b.last + 1)
    );
    for b in expected {
        for offset in b.base..=b.last {
            let read = log.read(offset, 1, None).unwrap();
            let got = read.slice.unwrap().read_to_vec().unwrap();
            assert!(
                got == b.bytes,
                "read({offset}) did not return the batch {}..={}",
                b.base,
                b.last
            );
        }
        // Record timestamps are BASE_TS + offset * 10: the lookup lands on the exact offset.
        let ts = BASE_TS + b.base * 10;
        assert_eq!(
            log.offset_for_timestamp(ts - 5).unwrap(),
            Some((b.base, ts))
        );
    }
    if let Some(last) = expected.last() {
        assert_eq!(
            log.max_timestamp(),
            Some((BASE_TS + last.last * 10, last.last))
        );
    }
}

fn append_more(log: &mut Log) {
    let end = log.log_end_offset();
    let mut bytes = batch::build_uncompressed_batch(&[(None, Some(b"after".as_slice()))], BASE_TS);
    let info = log.append(&mut bytes, &opts()).unwrap();
    assert_eq!(info.first_offset, end);
    assert_eq!(
        log.read(end, 1, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .unwrap(),
        bytes
    );
}

/// Damages files of a cleanly closed log with `damage`, reopens (clean shutdown: indexes are trusted only if
/// they pass their checks), and checks that everything is served correctly.
fn after_clean_close(damage: impl FnOnce(&Path, &[i64])) {
    let dir = tempfile::tempdir().unwrap();
    let (log, stored) = fill(dir.path());
    log.close().unwrap();
    let bases = segment_bases(dir.path());
    damage(dir.path(), &bases);
    let mut log = Log::open(dir.path(), config()).unwrap();
    verify(&log, &stored);
    append_more(&mut log);
    log.close().unwrap();
    // And again after the repair.
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_end_offset(), stored.last().unwrap().last + 2);
}

#[test]
fn deleted_indexes_are_rebuilt() {
    after_clean_close(|dir, bases| {
        for &b in bases {
            std::fs::remove_file(file(dir, b, "index")).unwrap();
            std::fs::remove_file(file(dir, b, "timeindex")).unwrap();
        }
    });
}

#[test]
fn truncated_indexes_are_rebuilt_or_trimmed() {
    after_clean_close(|dir, bases| {
        for (i, &b) in bases.iter().enumerate() {
            for suffix in ["index", "timeindex"] {
                let path = file(dir, b, suffix);
                let len = std::fs::metadata(&path).unwrap().len();
                // Empty, mid-entry, and half of the entries.
                let keep = match i % 3 {
                    0 => 0,
                    1 => len.saturating_sub(3),
                    _ => len / 2,
                };
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(keep)
                    .unwrap();
            }
        }
    });
}

#[test]
fn garbage_indexes_are_rebuilt() {
    after_clean_close(|dir, bases| {
        for (i, &b) in bases.iter().enumerate() {
            let mut junk: Vec<u8> = (0..96u32)
                .map(|n| (n.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8)
                .collect();
            std::fs::write(file(dir, b, "index"), &junk).unwrap();
            junk.reverse();
            std::fs::write(file(dir, b, "timeindex"), &junk).unwrap();
        }
    });
}

#[test]
fn a_plausible_but_wrong_index_entry_never_serves_wrong_batches() {
    // An entry that is in order and in range but points into the middle of a batch: the load checks cannot
    // see it; reads must not serve bytes from the wrong place.
    let dir = tempfile::tempdir().unwrap();
    let (log, stored) = fill(dir.path());
    log.close().unwrap();
    let bases = segment_bases(dir.path());
    let index = file(dir.path(), bases[1], "index");
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 24, "the test needs three index entries");
    let position = |e: &[u8]| u32::from_be_bytes(e[4..8].try_into().unwrap());
    let (before, after) = (position(&bytes[0..8]), position(&bytes[16..24]));
    let wrong = (before + after) / 2 + 1;
    bytes[12..16].copy_from_slice(&wrong.to_be_bytes());
    std::fs::write(&index, &bytes).unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    for b in stored.iter().filter(|b| b.base >= bases[1]) {
        for offset in b.base..=b.last {
            match log.read(offset, 1, None) {
                Ok(read) => {
                    let got = read.slice.unwrap().read_to_vec().unwrap();
                    assert!(got == b.bytes, "read({offset}) served the wrong bytes");
                }
                Err(e) => panic!("read({offset}) failed: {e}"),
            }
        }
    }
    // Large reads find the slice's end through the index too: the wrong entry must not cut a batch.
    let segment_end = bases.get(2).copied().unwrap_or(i64::MAX);
    let in_segment: Vec<&Stored> = stored
        .iter()
        .filter(|b| b.base >= bases[1] && b.base < segment_end)
        .collect();
    let segment_bytes: usize = in_segment.iter().map(|b| b.bytes.len()).sum();
    for (i, b) in in_segment.iter().enumerate() {
        for max_bytes in (0..=segment_bytes + 50).step_by(23) {
            let mut expected = Vec::new();
            for later in &in_segment[i..] {
                if !expected.is_empty() && expected.len() + later.bytes.len() > max_bytes {
                    break;
                }
                expected.extend_from_slice(&later.bytes);
            }
            let got = log.read(b.base, max_bytes, None).unwrap().slice.unwrap();
            assert!(
                got.read_to_vec().unwrap() == expected,
                "read({}, {max_bytes}) did not serve the segment's whole batches from there",
                b.base
            );
        }
    }
}

#[test]
fn garbage_checkpoint_means_full_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, stored) = fill(dir.path());
    log.flush().unwrap();
    drop(log);
    std::fs::write(
        dir.path().join("annal.checkpoint"),
        b"\x00\xffnot a checkpoint\n",
    )
    .unwrap();
    // A torn tail too, which the full recovery must find.
    let bases = segment_bases(dir.path());
    let last = file(dir.path(), *bases.last().unwrap(), "log");
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(&stored[0].bytes[..30]);
    std::fs::write(&last, bytes).unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_start_offset(), 0);
    verify(&log, &stored);
    append_more(&mut log);
}

#[test]
fn garbage_producer_snapshot_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, stored) = fill(dir.path());
    log.close().unwrap();
    let mut snapshots = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "snapshot") {
            std::fs::write(&path, b"\x00\x01garbage").unwrap();
            snapshots += 1;
        }
    }
    assert!(snapshots > 0);
    let mut log = Log::open(dir.path(), config()).unwrap();
    verify(&log, &stored);
    // The producer's last batch is still recognised as a duplicate, and its next sequence is accepted.
    let last = stored.last().unwrap();
    let retry = log.append(&mut last.bytes.clone(), &opts()).unwrap();
    assert!(
        retry.duplicate && retry.first_offset == last.base,
        "{retry:?}"
    );
}

#[test]
fn corrupt_batch_in_an_older_segment_cuts_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    let (log, stored) = fill(dir.path());
    drop(log); // unclean
               // A checkpoint from before the later segments were written: recovery starts at the first segment.
    std::fs::write(
        dir.path().join("annal.checkpoint"),
        "annal-checkpoint 1\nlog_start_offset=0\nrecovery_point=0\nclean_shutdown=false\n",
    )
    .unwrap();
    let bases = segment_bases(dir.path());
    let victim_segment = bases[2];
    // A batch in the middle of the third segment gets one flipped byte in its records.
    let in_segment: Vec<&Stored> = stored
        .iter()
        .filter(|b| b.base >= victim_segment && b.base < bases[3])
        .collect();
    let victim = in_segment[in_segment.len() / 2];
    let position: usize = in_segment
        .iter()
        .take_while(|b| b.base < victim.base)
        .map(|b| b.bytes.len())
        .sum();
    let path = file(dir.path(), victim_segment, "log");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[position + batch::HEADER_SIZE + 5] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();

    let mut log = Log::open(dir.path(), config()).unwrap();
    let kept: Vec<Stored> = stored
        .iter()
        .filter(|b| b.base < victim.base)
        .cloned()
        .collect();
    assert_eq!(
        log.log_end_offset(),
        victim.base,
        "the log ends where the corrupt batch was"
    );
    verify(&log, &kept);
    assert_eq!(
        segment_bases(dir.path()),
        bases[..3].to_vec(),
        "segments after the corrupt one are deleted"
    );
    assert!(
        std::fs::metadata(&path).unwrap().len() as usize == position,
        "the segment is cut before the corrupt batch"
    );
    assert!(matches!(
        log.read(victim.base + 1, 1, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    append_more(&mut log);
    drop(log);
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_end_offset(), victim.base + 1);
}

#[test]
fn index_files_written_across_restarts_match_a_rebuild() {
    // Appending after a clean restart must add index entries after the existing ones, so the files stay
    // exactly what a rebuild from the log produces.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 100,
        ..config()
    };
    let mut log = Log::open(dir.path(), config.clone()).unwrap();
    let mut timestamp = BASE_TS;
    let mut append = |log: &mut Log, count: usize| {
        for _ in 0..count {
            timestamp += 7;
            let mut bytes =
                batch::build_uncompressed_batch(&[(None, Some([b'v'; 90].as_slice()))], timestamp);
            log.append(&mut bytes, &opts()).unwrap();
        }
    };
    append(&mut log, 30);
    log.close().unwrap();
    let mut log = Log::open(dir.path(), config.clone()).unwrap();
    append(&mut log, 30);
    log.close().unwrap();
    let written: Vec<Vec<u8>> = ["index", "timeindex"]
        .iter()
        .map(|s| std::fs::read(file(dir.path(), 0, s)).unwrap())
        .collect();
    assert!(
        written[0].len() >= 8 * 20,
        "the test needs many index entries"
    );
    for s in ["index", "timeindex"] {
        std::fs::remove_file(file(dir.path(), 0, s)).unwrap();
    }
    Log::open(dir.path(), config).unwrap().close().unwrap();
    for (i, s) in ["index", "timeindex"].iter().enumerate() {
        assert!(
            std::fs::read(file(dir.path(), 0, s)).unwrap() == written[i],
            "the .{s} file written across a restart differs from a rebuild"
        );
    }
}

/// Regression (fuzz target `log_recovery`, 2026-12-05, after 964,819 runs; corpus
/// `regression-crc-valid-batch-with-malformed-records`): recovery checked a batch's framing and CRC only, so a
/// batch whose CRC matched but whose records do not fit it (a record claiming 49 headers in the bytes of none)
/// was kept and served, though the produce path and a follower would refuse it. Recovery now applies the
/// follower's check and cuts the log there.
#[test]
fn a_crc_valid_batch_whose_records_do_not_fit_is_cut_by_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let good =
        batch::build_uncompressed_batch(&[(Some(b"k".as_slice()), Some(b"v".as_slice()))], BASE_TS);
    let mut bad =
        batch::build_uncompressed_batch(&[(Some(b"k".as_slice()), Some(b"v".as_slice()))], BASE_TS);
    batch::assign_offset(&mut bad, 1, 0);
    // The record's last byte is its header count (0): claim 49 (varint 98) headers, then make the CRC match.
    *bad.last_mut().unwrap() = 98;
    let crc = batch::compute_crc(&bad);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(batch::validate_batches(&bad, u32::MAX).is_err());
    std::fs::write(file(dir.path(), 0, "log"), [good.clone(), bad].concat()).unwrap();

    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(
        log.log_end_offset(),
        1,
        "the batch whose records do not fit was kept"
    );
    let read = log
        .read(0, 1 << 20, None)
        .unwrap()
        .slice
        .unwrap()
        .read_to_vec()
        .unwrap();
    assert_eq!(read, good);
    assert_eq!(
        std::fs::metadata(file(dir.path(), 0, "log")).unwrap().len(),
        good.len() as u64,
        "the segment is cut after the last valid batch"
    );
}
