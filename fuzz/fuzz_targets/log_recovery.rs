//! A partition directory (segments, offset and time indexes, producer snapshots, the checkpoint; packed as
//! `annal_fuzz::unpack_files` reads them) through `Log::open`'s recovery, then every read a broker does. A log
//! that opened must serve its whole range, take an append, close cleanly and reopen to the same end offset.
//! Without a checkpoint file every segment is recovered (validated batch by batch), so then every byte it serves
//! must be valid batches; with one, the segments below the recovery point (all of them after a clean shutdown) are
//! trusted as they are, as Kafka trusts them, and only the absence of panics is checked.
#![no_main]
use annal_log::{batch, AppendOptions, Log};
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
    let config = annal_fuzz::small_log_config();
    let Ok(mut log) = Log::open(dir.path(), config.clone()) else {
        return;
    };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end, "log start {start} after log end {end}");
    let mut offset = start;
    let mut reads = 0;
    while offset < end && reads < 64 {
        reads += 1;
        let Ok(read) = log.read(offset, 4096, None) else {
            break;
        };
        let Some(slice) = read.slice else { break };
        let Ok(bytes) = slice.read_to_vec() else {
            break;
        };
        let batches = match batch::validate_batches(&bytes, u32::MAX) {
            Ok(batches) => batches,
            Err(e) if fully_recovered => {
                panic!("recovered log served invalid batches at offset {offset}: {e}")
            }
            Err(_) => break,
        };
        let next = batches.last().map_or(offset, |b| b.header.next_offset());
        if next <= offset {
            break;
        }
        offset = next;
    }
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
    let reopened = Log::open(dir.path(), config).expect("a log that closed cleanly reopens");
    assert_eq!(
        reopened.log_end_offset(),
        end,
        "log end changed across a clean close (appended: {appended})"
    );
});
