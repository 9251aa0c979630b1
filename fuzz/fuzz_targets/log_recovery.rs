//! A partition directory (segments, offset and time indexes, producer snapshots, the checkpoint; packed as
//! `annal_fuzz::unpack_files` reads them) through `Log::open`'s recovery, then every read a broker does. A log
//! that opened must serve its whole range, take an append, close cleanly and reopen to the same end offset.
//! Without a checkpoint file every segment is recovered (validated batch by batch), so then every byte it serves
//! must be valid batches; with one, the segments below the recovery point (all of them after a clean shutdown) are
//! trusted as they are, as Kafka trusts them, and only the absence of panics is checked.
//!
//! The key index is on (`key.index.enable`): `.keyindex` files in the input are checked, used or rebuilt, and for a
//! fully recovered log every key's lookup must equal what the reads served (exact answers from any files).
#![no_main]
use std::collections::BTreeMap;

use annal_log::records::DecodedBatch;
use annal_log::{batch, AppendOptions, KeyQuery, Log, LogConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = annal_fuzz::scratch_dir();
    let files = annal_fuzz::unpack_files(data, 16);
    let fully_recovered = !files
        .iter()
        .any(|(kind, _, _)| *kind == annal_fuzz::FileKind::Checkpoint);
    for (kind, base, bytes) in files {
        std::fs::write(dir.path().join(kind.file_name(base)), bytes).expect("write a scratch file");
    }
    let config = LogConfig {
        key_index: true,
        ..annal_fuzz::small_log_config()
    };
    let Ok(mut log) = Log::open(dir.path(), config.clone()) else {
        return;
    };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end, "log start {start} after log end {end}");
    let mut offset = start;
    let mut reads = 0;
    // Keyed records served (offset order), per key, for the lookups below; `complete` if the reads reached the end.
    let mut by_key: BTreeMap<Vec<u8>, Vec<i64>> = BTreeMap::new();
    let mut keyed_records = 0usize;
    while offset < end && reads < 64 {
        reads += 1;
        let Ok(read) = log.read(offset, 4096, None) else {
            break;
        };
        let Some(slice) = read.slice else { break };
        let Ok(bytes) = slice.read_to_vec() else {
            break;
        };
        // What a log may hold: what the write path accepts, and cleaned batches (as a follower accepts them).
        let batches = match batch::validate_replicated_batches(&bytes, u32::MAX) {
            Ok(batches) => batches,
            Err(e) if fully_recovered => {
                panic!("recovered log served invalid batches at offset {offset}: {e}")
            }
            Err(_) => break,
        };
        let next = batches.last().map_or(offset, |b| b.header.next_offset());
        if fully_recovered {
            let mut position = 0;
            for b in &batches {
                let bytes = &bytes[position..position + b.header.size()];
                position += b.header.size();
                if b.header.is_control() {
                    continue;
                }
                let Ok(decoded) = DecodedBatch::new(bytes, config.decompressed_batch_limit()) else {
                    continue;
                };
                for r in decoded.records().map_while(Result::ok) {
                    if let Some(key) = r.key.filter(|_| r.offset >= offset && keyed_records < 4096) {
                        keyed_records += 1;
                        by_key.entry(key.to_vec()).or_default().push(r.offset);
                    }
                }
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    let complete = offset >= end && keyed_records < 4096;
    // Lookups through whatever index files the input held (checked, else rebuilt): exact, or a clean error.
    let _ = log.index_keys(1 << 16);
    for (key, offsets) in by_key.iter().take(8) {
        let query = KeyQuery {
            max_records: 1000,
            max_bytes: 1 << 24,
            ..KeyQuery::new(key)
        };
        let Ok(found) = log.lookup_key(&query) else {
            continue;
        };
        let found: Vec<i64> = found.records.iter().map(|r| r.offset).collect();
        if complete && offsets.len() < 1000 {
            assert_eq!(&found, offsets, "lookup of a key differs from the records served");
        }
    }
    let _ = log.lookup_key(&KeyQuery::new(b"no such key"));
    let _ = log.offset_for_timestamp(0);
    let _ = log.offset_for_timestamp(i64::MAX);
    let _ = log.max_timestamp();
    let mut fresh = batch::build_uncompressed_batch(
        &[(None, Some(b"after recovery".as_slice()))],
        1_700_000_000_000,
    );
    let appended = log.append(&mut fresh, &AppendOptions::default()).is_ok();
    let end = log.log_end_offset();
    if log.close().is_err() {
        return;
    }
    // A fully recovered log was validated batch by batch, so after a clean close it must reopen. A log opened
    // with a checkpoint trusted segments from the input as they were (as Kafka does after a clean shutdown); a
    // corrupt one among them may make the reopen fail, with the engine's error naming the file (the long run's
    // crash-67643495: Unrecoverable, "no valid batch header at byte 1188"), never a panic.
    let reopened = match Log::open(dir.path(), config) {
        Ok(reopened) => reopened,
        Err(_) if !fully_recovered => return,
        Err(e) => panic!("a fully recovered log that closed cleanly must reopen: {e:?}"),
    };
    assert_eq!(
        reopened.log_end_offset(),
        end,
        "log end changed across a clean close (appended: {appended})"
    );
});
