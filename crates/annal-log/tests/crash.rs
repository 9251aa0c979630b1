//! Crash test: a child process appends (and sometimes flushes) while this process kills it with SIGKILL at
//! random moments, many times over. After every kill the log is reopened: it must hold a prefix of what was
//! written (every batch exactly the bytes the writer wrote at that offset), everything the writer recorded as
//! flushed, and take new appends.
//!
//! The child is this test binary itself, re-executed to run the ignored `crash_writer_child` test with
//! `ANNAL_CRASH_LOG_DIR` set. Batch contents are a function of their base offset, so any process (the writer,
//! this test after recovery) appends the same bytes at a given offset and the whole log can be checked.
//! Every batch comes from one idempotent producer whose sequence equals the offset, so producer state must
//! survive each crash too (a wrong state would refuse the next append).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use annal_log::batch::{self, build_batch, ProducerFields};
use annal_log::{AppendOptions, Log, LogConfig};
use rand::Rng;

/// A (key, value) record for `build_batch`.
type Record<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

const LOG_DIR_ENV: &str = "ANNAL_CRASH_LOG_DIR";
const FLUSHED_FILE_ENV: &str = "ANNAL_CRASH_FLUSHED_FILE";
const LEADER_EPOCH: i32 = 3;
const PRODUCER_ID: i64 = 4242;
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig {
        // Small segments and indexes: kills land during rolls, index-full rolls and snapshot writes too.
        segment_bytes: 8 * 1024,
        index_interval_bytes: 300,
        segment_index_bytes: 10 * 8,
        segment_ms: i64::MAX,
        retention_ms: -1,
        // Keeps the directory small; retention runs in the writer, so kills land during deletions as well.
        retention_bytes: 200 * 1024,
        ..LogConfig::default()
    }
}

/// The batch every writer appends at `base` (offsets not yet assigned): 1-5 records of varying size.
fn batch_at(base: i64) -> Vec<u8> {
    let count = 1 + (base % 5) as usize;
    let values: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            let len = ((base * 37 + i as i64 * 11) % 700) as usize;
            let seed = format!("offset {}:", base + i as i64);
            seed.bytes().cycle().take(len.max(seed.len())).collect()
        })
        .collect();
    let records: Vec<Record> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    let timestamps: Vec<i64> = (0..count as i64)
        .map(|i| BASE_TIMESTAMP + base + i)
        .collect();
    build_batch(
        &records,
        &timestamps,
        ProducerFields {
            producer_id: PRODUCER_ID,
            producer_epoch: 0,
            base_sequence: i32::try_from(base).expect("test offsets stay small"),
            transactional: false,
        },
    )
}

/// The bytes stored for the batch at `base`.
fn stored_batch_at(base: i64) -> Vec<u8> {
    let mut bytes = batch_at(base);
    batch::assign_offset(&mut bytes, base, LEADER_EPOCH);
    bytes
}

fn opts() -> AppendOptions {
    AppendOptions {
        leader_epoch: LEADER_EPOCH,
        now_ms: BASE_TIMESTAMP,
        ..AppendOptions::default()
    }
}

fn append_next(log: &mut Log) {
    let base = log.log_end_offset();
    let info = log
        .append(&mut batch_at(base), &opts())
        .unwrap_or_else(|e| panic!("append at {base}: {e}"));
    assert!(!info.duplicate && info.first_offset == base, "{info:?}");
}

/// The writer: appends forever, sometimes flushing (two ways) and recording the flushed offset durably.
#[test]
#[ignore = "child process of crash_recovery_keeps_a_prefix_with_everything_flushed"]
fn crash_writer_child() {
    let (Some(dir), Some(flushed_file)) = (
        std::env::var_os(LOG_DIR_ENV),
        std::env::var_os(FLUSHED_FILE_ENV),
    ) else {
        println!("not started by the crash test: nothing to do");
        return;
    };
    let mut log = Log::open(Path::new(&dir), config()).expect("writer opens the log");
    let mut flushed = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&flushed_file)
        .expect("flushed-offsets file");
    // A writer killed mid-line left a line without its newline: end it, or this writer's first line would
    // continue it ("891" + "897" read as 891897).
    let previous = std::fs::read(&flushed_file).expect("read flushed-offsets file");
    if previous.last().is_some_and(|&b| b != b'\n') {
        flushed.write_all(b"\n").expect("end a torn line");
    }
    // One write(2) per line (`writeln!` may make two: the number, then the newline).
    let record = |flushed: &mut std::fs::File, line: String| {
        flushed
            .write_all(format!("{line}\n").as_bytes())
            .expect("record a line");
        flushed.sync_data().expect("fsync flushed-offsets file");
    };
    let record_flushed = |flushed: &mut std::fs::File, upto: i64| record(flushed, upto.to_string());
    loop {
        append_next(&mut log);
        let end = log.log_end_offset();
        match end % 13 {
            0 => {
                log.flush().expect("flush");
                record_flushed(&mut flushed, end);
            }
            7 => {
                // The group commit path: fsync outside the (here imaginary) lock, then mark.
                let handle = log.sync_handle();
                handle.sync().expect("fsync");
                log.mark_flushed(handle.upto());
                record_flushed(&mut flushed, handle.upto());
            }
            _ => {}
        }
        if end % 50 == 0 {
            log.apply_retention(BASE_TIMESTAMP).expect("retention");
        }
        if end % 61 == 0 {
            // Replication-style truncation of the last few batches, announced first: flushed data below the
            // new end stays guaranteed, above it is gone. A kill can land in the middle of it.
            let target = (end - 1 - end % 9).max(log.log_start_offset());
            let read = log.read(target, 1, None).expect("read before truncation");
            if let Some(slice) = read.slice {
                let bytes = slice.read_to_vec().expect("read before truncation");
                let base = batch::BatchHeader::parse(&bytes)
                    .expect("a batch")
                    .base_offset;
                record(&mut flushed, format!("T {base}"));
                log.truncate_to(base).expect("truncate");
            }
        }
        if end % 83 == 0 {
            let start = (end - 20).max(log.log_start_offset());
            log.delete_records_before(start).expect("delete records");
        }
    }
}

/// The offset below which the log must hold everything: the highest flushed offset recorded, lowered by every
/// truncation recorded after it. (A torn last line reads as a smaller number: conservative. The next writer ends
/// it with a newline before writing its own lines.)
fn max_flushed(path: &Path) -> i64 {
    let mut guaranteed = 0;
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        if let Some(truncated) = line.strip_prefix("T ") {
            if let Ok(base) = truncated.parse::<i64>() {
                guaranteed = guaranteed.min(base);
            }
        } else if let Ok(upto) = line.parse::<i64>() {
            guaranteed = guaranteed.max(upto);
        }
    }
    guaranteed
}

/// Checks the recovered log batch by batch against what the writer wrote; returns the log end.
fn verify(log: &Log, flushed: i64, iteration: usize) -> i64 {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(
        end >= flushed,
        "iteration {iteration}: recovered log ends at {end}, but the writer had flushed up to {flushed}"
    );
    assert!(start <= end);
    // Find the batch holding the log start, then walk every batch to the end.
    let mut offset = start;
    let mut expected_base = None;
    while offset < end {
        let read = log.read(offset, 64 * 1024, None).unwrap();
        let bytes = read
            .slice
            .expect("data below the log end")
            .read_to_vec()
            .unwrap();
        let batches = batch::validate_batches(&bytes, u32::MAX).unwrap_or_else(|e| {
            panic!("iteration {iteration}: served a corrupt batch at {offset}: {e}")
        });
        for v in batches {
            let base = v.header.base_offset;
            if let Some(expected) = expected_base {
                assert_eq!(
                    base, expected,
                    "iteration {iteration}: offsets not contiguous"
                );
            }
            let got = &bytes[v.position..v.position + v.header.size()];
            assert!(
                got == stored_batch_at(base).as_slice(),
                "iteration {iteration}: the batch at offset {base} is not what the writer wrote"
            );
            expected_base = Some(v.header.next_offset());
        }
        offset = expected_base.expect("at least one batch");
    }
    if start < end {
        assert_eq!(
            expected_base,
            Some(end),
            "iteration {iteration}: walk ends at the log end"
        );
    }
    end
}

/// Simulates a power loss on top of the kill: the page cache held more than the disk. Rolls fsync the old
/// segment, so only the last segment can lose bytes, and only after the last recorded flushed offset; it is cut
/// at a random byte there, sometimes followed by garbage (blocks allocated but never written).
fn lose_unflushed_tail(log_dir: &Path, flushed: i64, rng: &mut impl Rng) {
    let Some(last) = std::fs::read_dir(log_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
    else {
        return;
    };
    let bytes = std::fs::read(&last).unwrap();
    let mut position = 0;
    let mut durable_until = 0;
    while let Some(header) = bytes.get(position..).and_then(batch::BatchHeader::parse) {
        if header.size() < batch::HEADER_SIZE || position + header.size() > bytes.len() {
            break;
        }
        position += header.size();
        if header.next_offset() <= flushed {
            durable_until = position;
        }
    }
    let keep = rng.gen_range(durable_until..=bytes.len());
    let mut kept = bytes[..keep].to_vec();
    if rng.gen_bool(0.5) {
        let garbage_len = rng.gen_range(1..200);
        kept.extend((0..garbage_len).map(|_| rng.gen::<u8>()));
    }
    std::fs::write(&last, kept).unwrap();
}

/// Waits until the writer has recorded a line past `recorded_before` bytes of `flushed_file`. Fails the test if
/// the writer stops by itself, or records nothing within a minute (it records every few appends).
fn wait_for_the_writer_to_record(
    flushed_file: &Path,
    recorded_before: u64,
    child: &mut std::process::Child,
    stderr_path: &Path,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(flushed_file).map_or(0, |m| m.len()) <= recorded_before {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the writer stopped by itself ({status}): {}",
                std::fs::read_to_string(stderr_path).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the writer recorded nothing in 60 s: {}",
            std::fs::read_to_string(stderr_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn crash_recovery_keeps_a_prefix_with_everything_flushed() {
    const ITERATIONS: usize = 40;
    const TIME_LIMIT: Duration = Duration::from_secs(40);
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("log");
    let flushed_file = work.path().join("flushed-offsets");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let started = Instant::now();
    let mut progressed = 0;
    let mut last_end = 0;
    let mut last_record_len = 0;
    let mut iterations = 0;
    while iterations < ITERATIONS && started.elapsed() < TIME_LIMIT {
        iterations += 1;
        let stderr_path = work.path().join("writer.stderr");
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(LOG_DIR_ENV, &log_dir)
            .env(FLUSHED_FILE_ENV, &flushed_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("re-executing the test binary as the writer");
        // Mostly mid-stream, sometimes during the writer's own start-up and recovery. Mid-stream kills wait for
        // the writer to record a line first (a flush or a truncation), not for a fixed time: a writer slow to
        // start on a loaded machine would otherwise be killed before it wrote anything, run after run.
        if rng.gen_bool(0.2) {
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..15)));
        } else {
            let recorded_before = std::fs::metadata(&flushed_file).map_or(0, |m| m.len());
            wait_for_the_writer_to_record(&flushed_file, recorded_before, &mut child, &stderr_path);
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..100)));
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "iteration {iterations}: the writer stopped by itself ({status}): {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let flushed = max_flushed(&flushed_file);
        if rng.gen_bool(0.35) {
            lose_unflushed_tail(&log_dir, flushed, &mut rng);
        }
        let mut log = Log::open(&log_dir, config())
            .unwrap_or_else(|e| panic!("iteration {iterations}: recovery failed: {e}"));
        let end = verify(&log, flushed, iterations);
        // The writer did something: the log changed, or it recorded a flush or truncation.
        let record_len = std::fs::metadata(&flushed_file).map_or(0, |m| m.len());
        if end != last_end || record_len != last_record_len {
            last_record_len = record_len;
            progressed += 1;
        }
        // The recovered log takes appends, continuing the producer's sequence.
        append_next(&mut log);
        last_end = log.log_end_offset();
        if rng.gen_bool(0.5) {
            log.close().unwrap();
        } else {
            drop(log);
        }
    }
    println!(
        "{iterations} kills in {:?}; log end {last_end}; writer progressed in {progressed} runs",
        started.elapsed()
    );
    assert!(
        progressed * 2 >= iterations,
        "the writer made progress in only {progressed} of {iterations} runs: the test is not exercising crashes"
    );
    let log = Log::open(&log_dir, config()).unwrap();
    assert!(log.segments().len() > 1, "small segments must have rolled");
}
