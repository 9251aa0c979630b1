//! Disk full: a failed write leaves the log consistent (nothing of the failed append is kept or comes back
//! after a restart) and appends work again once space is freed.
//!
//! `enospc_on_a_full_tmpfs` fills a real, small tmpfs (mounted by the test; needs root, else it says why it is
//! skipped) to random levels so that writes fail at different points: the segment write, an index entry, the
//! checkpoint or producer snapshot of a roll. `file_size_limit_in_a_child` does the same without root, using
//! RLIMIT_FSIZE in a child process (EFBIG takes the same cut-back path as ENOSPC).

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use annal_log::batch::{self, build_uncompressed_batch};
use annal_log::{AppendOptions, Log, LogConfig, LogError};
use rand::{Rng, SeedableRng};

const BASE_TS: i64 = 1_700_000_000_000;

fn opts() -> AppendOptions {
    AppendOptions {
        now_ms: BASE_TS,
        ..AppendOptions::default()
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 48 * 1024,
        index_interval_bytes: 256,
        segment_ms: i64::MAX,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// A batch of `len` value bytes whose content identifies `n`.
fn batch_n(n: u64, len: usize) -> Vec<u8> {
    let tag = format!("batch {n};");
    let value: Vec<u8> = tag.bytes().cycle().take(len.max(tag.len())).collect();
    build_uncompressed_batch(&[(None, Some(value.as_slice()))], BASE_TS)
}

/// What the log must hold: the batches acknowledged so far (stored bytes), by base offset.
#[derive(Default)]
struct Model {
    batches: Vec<(i64, Vec<u8>)>,
    end: i64,
}

fn check(log: &Log, model: &Model, context: &str) {
    assert_eq!(log.log_end_offset(), model.end, "{context}: log end");
    let start = log.log_start_offset();
    let mut got = Vec::new();
    let mut offset = start;
    while offset < model.end {
        let bytes = log
            .read(offset, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap_or_else(|| panic!("{context}: nothing at {offset}"))
            .read_to_vec()
            .unwrap();
        let batches = batch::validate_batches(&bytes, u32::MAX)
            .unwrap_or_else(|e| panic!("{context}: corrupt data served at {offset}: {e}"));
        offset = batches.last().unwrap().header.next_offset();
        got.extend_from_slice(&bytes);
    }
    let expected: Vec<u8> = model
        .batches
        .iter()
        .filter(|(base, _)| *base >= start)
        .flat_map(|(_, b)| b.iter().copied())
        .collect();
    assert!(
        got == expected,
        "{context}: log content differs from what was acknowledged"
    );
}

/// Appends one batch; on success records it in the model.
fn try_append(log: &mut Log, model: &mut Model, n: u64, len: usize) -> Result<(), LogError> {
    let mut bytes = batch_n(n, len);
    let info = log.append(&mut bytes, &opts())?;
    assert_eq!(info.first_offset, model.end);
    model.batches.push((info.first_offset, bytes));
    model.end = info.last_offset + 1;
    Ok(())
}

/// A tmpfs mounted for the test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        let target = CString::new(path.as_os_str().as_bytes()).unwrap();
        let options = CString::new(format!("size={size}")).unwrap();
        // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc == 0 {
            Ok(Tmpfs(path.to_path_buf()))
        } else {
            Err(std::io::Error::last_os_error().to_string())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Fills the filesystem with `filler` until it is full, then frees a random few KiB so the next writes fail at
/// a random point.
fn fill_disk(filler: &Path, rng: &mut impl Rng) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
        .unwrap();
    let chunk = vec![0xEEu8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(rng.gen_range(0..24 * 1024)))
        .unwrap();
}

/// Held by the tests that count free space on a tmpfs, and by the one that starts a child process.
///
/// A child inherits every descriptor of this process between fork and exec (`O_CLOEXEC` closes them only at
/// exec). A filler file deleted in that window keeps its blocks until the child execs, so a test that frees
/// space and at once writes saw ENOSPC when another test of this binary was spawning its child (seed
/// 7722996144085877632 failed 1 run in 40 that way, never alone).
static SPACE_ACCOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn space_accounting() -> std::sync::MutexGuard<'static, ()> {
    SPACE_ACCOUNTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn enospc_on_a_full_tmpfs() {
    let _exclusive = space_accounting();
    let mountpoint = tempfile::tempdir().unwrap();
    let _tmpfs = match Tmpfs::mount(mountpoint.path(), "3m") {
        Ok(t) => t,
        Err(e) => {
            println!("SKIPPED enospc_on_a_full_tmpfs: cannot mount a tmpfs ({e}); needs root. file_size_limit_in_a_child covers the cut-back path");
            return;
        }
    };
    let dir = mountpoint.path().join("log");
    let filler = mountpoint.path().join("filler");
    let seed: u64 = std::env::var("ANNAL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut log = Log::open(&dir, config()).unwrap();
    let mut model = Model::default();
    let mut n = 0u64;
    let mut failures = 0;
    let mut failed_ops = std::collections::BTreeSet::new();
    for cycle in 0..40 {
        fill_disk(&filler, &mut rng);
        // Append until the disk is full.
        let error = loop {
            n += 1;
            let len = if rng.gen_bool(0.5) {
                rng.gen_range(1..400)
            } else {
                rng.gen_range(400..12_000)
            };
            if let Err(e) = try_append(&mut log, &mut model, n, len) {
                break e;
            }
        };
        failures += 1;
        assert!(
            error.is_disk_full(),
            "cycle {cycle}: expected disk full, got: {error}"
        );
        if let LogError::Io { op, .. } = &error {
            failed_ops.insert(*op);
        }
        let context = format!("cycle {cycle} (seed {seed}) after `{error}`");
        check(&log, &model, &context);
        // Still full: further appends keep failing cleanly (or succeed if small enough), never half-written.
        for _ in 0..3 {
            n += 1;
            let r = try_append(&mut log, &mut model, n, rng.gen_range(1..3000));
            if let Err(LogError::Io { op, .. }) = r {
                failed_ops.insert(op);
            }
        }
        check(&log, &model, &context);
        if rng.gen_bool(0.3) {
            drop(log); // unclean stop while the disk is full
            std::fs::remove_file(&filler).unwrap();
            log = Log::open(&dir, config()).unwrap();
            check(
                &log,
                &model,
                &format!("{context}, after an unclean restart"),
            );
        } else {
            std::fs::remove_file(&filler).unwrap();
        }
        // Space is back: appends work.
        for _ in 0..3 {
            n += 1;
            try_append(&mut log, &mut model, n, rng.gen_range(1..5000))
                .unwrap_or_else(|e| panic!("{context}: append after freeing space: {e}"));
        }
        check(&log, &model, &context);
        // Keep the log well below the filesystem size.
        log.set_config(LogConfig {
            retention_bytes: 600 * 1024,
            ..config()
        });
        log.apply_retention(BASE_TS).unwrap();
        log.set_config(config());
    }
    println!("{failures} disk-full failures, at: {failed_ops:?}");
    drop(log);
    let log = Log::open(&dir, config()).unwrap();
    check(&log, &model, "final unclean restart");
    log.close().unwrap();
}

const CHILD_DIR_ENV: &str = "ANNAL_FSIZE_CHILD_DIR";

/// The child of `file_size_limit_in_a_child`: runs under RLIMIT_FSIZE, so the segment cannot grow past it.
#[test]
#[ignore = "child process of file_size_limit_in_a_child"]
fn file_size_limit_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        println!("not started by file_size_limit_in_a_child: nothing to do");
        return;
    };
    const LIMIT: u64 = 256 * 1024;
    // SAFETY: plain libc calls; SIGXFSZ would otherwise kill the process instead of failing the write.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: LIMIT,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let config = LogConfig {
        segment_bytes: 1 << 20, // larger than the limit: the segment write itself fails
        ..config()
    };
    let dir = Path::new(&dir);
    let mut log = Log::open(dir, config.clone()).unwrap();
    let mut model = Model::default();
    let mut n = 0;
    let mut rng = rand::thread_rng();
    let error = loop {
        n += 1;
        if let Err(e) = try_append(&mut log, &mut model, n, rng.gen_range(100..9000)) {
            break e;
        }
    };
    assert!(
        matches!(&error, LogError::Io { source, .. } if source.raw_os_error() == Some(libc::EFBIG)),
        "expected EFBIG, got {error}"
    );
    check(&log, &model, "after EFBIG");
    let segment = log.segments().last().unwrap().clone();
    assert_eq!(
        std::fs::metadata(&segment.path).unwrap().len(),
        segment.size_bytes,
        "the partial write was cut back"
    );
    drop(log);
    let mut log = Log::open(dir, config.clone()).unwrap();
    check(&log, &model, "after EFBIG and an unclean restart");
    // "Space is freed": lift the limit.
    // SAFETY: plain libc call.
    unsafe {
        let limit = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    for _ in 0..5 {
        n += 1;
        try_append(&mut log, &mut model, n, 9000).unwrap();
    }
    check(&log, &model, "after lifting the limit");
    log.close().unwrap();
    println!("CHILD OK after {n} appends");
}

#[test]
fn file_size_limit_in_a_child() {
    let _exclusive = space_accounting();
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "file_size_limit_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("CHILD OK"),
        "child failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn out_of_inodes_on_a_tmpfs() {
    let _exclusive = space_accounting();
    // File creation fails with ENOSPC when the filesystem has no free inodes: rolls (new segment, index and
    // snapshot files) fail at different points. Once inodes are freed, appends must work again.
    let mountpoint = tempfile::tempdir().unwrap();
    let _tmpfs = match Tmpfs::mount(mountpoint.path(), "8m,nr_inodes=64") {
        Ok(t) => t,
        Err(e) => {
            println!("SKIPPED out_of_inodes_on_a_tmpfs: cannot mount a tmpfs ({e}); needs root");
            return;
        }
    };
    let dir = mountpoint.path().join("log");
    let fillers = mountpoint.path().join("fillers");
    std::fs::create_dir(&fillers).unwrap();
    let seed: u64 = std::env::var("ANNAL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let small = LogConfig {
        segment_bytes: 2048,
        ..config()
    };
    let mut log = Log::open(&dir, small.clone()).unwrap();
    let mut model = Model::default();
    let mut n = 0u64;
    let mut failed_ops = std::collections::BTreeSet::new();
    for cycle in 0..30 {
        // Use up every inode, then give a random few back.
        let mut created = Vec::new();
        loop {
            let path = fillers.join(created.len().to_string());
            match std::fs::File::create(&path) {
                Ok(_) => created.push(path),
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("creating filler files: {e}"),
            }
        }
        for path in created.drain(..).take(rng.gen_range(0..5)) {
            std::fs::remove_file(path).unwrap();
        }
        let error = loop {
            n += 1;
            if let Err(e) = try_append(&mut log, &mut model, n, rng.gen_range(1..1500)) {
                break e;
            }
        };
        assert!(
            error.is_disk_full(),
            "cycle {cycle}: expected disk full, got: {error}"
        );
        if let LogError::Io { op, .. } = &error {
            failed_ops.insert(*op);
        }
        let context = format!("cycle {cycle} (seed {seed}) after `{error}`");
        check(&log, &model, &context);
        let free_inodes = || {
            for entry in std::fs::read_dir(&fillers).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
        };
        if rng.gen_bool(0.3) {
            drop(log);
            free_inodes();
            log = Log::open(&dir, small.clone()).unwrap();
            check(
                &log,
                &model,
                &format!("{context}, after an unclean restart"),
            );
        } else {
            free_inodes();
        }
        for _ in 0..5 {
            n += 1;
            try_append(&mut log, &mut model, n, rng.gen_range(1..1500))
                .unwrap_or_else(|e| panic!("{context}: append after freeing inodes: {e}"));
        }
        check(&log, &model, &context);
        log.set_config(LogConfig {
            retention_bytes: 6 * 1024,
            ..small.clone()
        });
        log.apply_retention(BASE_TS).unwrap();
        log.set_config(small.clone());
    }
    println!("out of inodes at: {failed_ops:?}");
    drop(log);
    let log = Log::open(&dir, small).unwrap();
    check(&log, &model, "final unclean restart");
}
