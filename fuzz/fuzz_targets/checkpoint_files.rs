//! The small state files read at start-up: a partition's `leader-epoch-checkpoint`, the broker's
//! `replication-offset-checkpoint` (high watermarks), and the metadata quorum's `quorum-state` and snapshot
//! (`<index>-<term>.checkpoint`, whose state-machine bytes the controller decodes as a `MetadataImage`). The first
//! input byte picks the file; the rest is its content. A snapshot's CRC-32C would stop plain bytes, so for
//! snapshots the rest is the state machine's bytes wrapped in a valid file (and, if bit 2 of the first byte is set,
//! tried as a whole file as well). What reads must hold the invariants the callers rely on and survive a write +
//! read unchanged.
#![no_main]
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use annal_broker::checkpoint_files::{
    read_high_watermarks, read_leader_epochs, write_high_watermarks, write_leader_epochs,
};
use annal_metadata::image::MetadataImage;
use annal_metadata::raft::{
    decode_quorum_state_checked, decode_snapshot_file_checked, snapshot_file_around,
};
use libfuzzer_sys::fuzz_target;

/// One scratch directory for the whole run: the broker's readers take a directory, as at start-up.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a scratch dir").keep())
}

fn leader_epochs(content: &[u8]) {
    let dir = scratch();
    std::fs::write(dir.join("leader-epoch-checkpoint"), content).expect("write the input");
    let Some(epochs) = read_leader_epochs(dir) else {
        return;
    };
    for w in epochs.windows(2) {
        assert!(
            w[0].0 < w[1].0 && w[0].1 <= w[1].1,
            "leader epochs read out of order: {w:?}"
        );
    }
    assert!(
        epochs.iter().all(|(e, o)| *e >= 0 && *o >= 0),
        "a negative epoch or offset was read: {epochs:?}"
    );
    write_leader_epochs(dir, &epochs).expect("write leader epochs");
    assert_eq!(
        read_leader_epochs(dir).as_deref(),
        Some(epochs.as_slice()),
        "leader epochs changed through write + read"
    );
}

fn high_watermarks(content: &[u8]) {
    let dir = scratch();
    std::fs::write(dir.join("replication-offset-checkpoint"), content).expect("write the input");
    let hws = read_high_watermarks(dir);
    assert!(
        hws.iter().all(|((_, p), hw)| *p >= 0 && *hw >= 0),
        "a negative partition or high watermark was read: {hws:?}"
    );
    write_high_watermarks(dir, &hws).expect("write high watermarks");
    assert_eq!(
        read_high_watermarks(dir),
        hws,
        "high watermarks changed through write + read"
    );
}

fn snapshot_file(file: &[u8]) {
    let Ok(data) = decode_snapshot_file_checked(file) else {
        return;
    };
    let Ok(image) = MetadataImage::decode_snapshot(&data) else {
        return;
    };
    let encoded = image.encode_snapshot();
    let again =
        MetadataImage::decode_snapshot(&encoded).expect("an encoded image snapshot decodes");
    assert_eq!(
        again.encode_snapshot(),
        encoded,
        "metadata image changed through snapshot + restore"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => leader_epochs(rest),
        1 => high_watermarks(rest),
        2 => {
            let _ = decode_quorum_state_checked(rest);
        }
        _ => {
            snapshot_file(&snapshot_file_around(rest));
            if which & 4 != 0 {
                snapshot_file(rest);
            }
        }
    }
});
