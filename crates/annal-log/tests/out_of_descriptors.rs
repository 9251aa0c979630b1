//! Running out of file descriptors (EMFILE): the open-file cache sheds handles and retries, and when the
//! process has none left at all the error names the limit and what to raise. One test per binary: it lowers
//! this process's RLIMIT_NOFILE.

use annal_log::batch::build_uncompressed_batch;
use annal_log::{AppendOptions, FileHandles, Log, LogConfig};

fn set_soft_limit(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a struct that lives for the call.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = n.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

#[test]
fn emfile_sheds_cached_handles_and_then_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    set_soft_limit(open_now + 64);
    // A budget within the limit: far more files than descriptors, the cache closes the least recently used.
    let handles = FileHandles::new(40);
    let config = LogConfig {
        file_handles: handles.clone(),
        ..LogConfig::default()
    };
    let mut logs = Vec::new();
    for l in 0..100 {
        let mut log = Log::open(&dir.path().join(format!("p-{l}")), config.clone()).unwrap();
        let mut bytes = build_uncompressed_batch(&[(None, Some(b"v".as_slice()))], 1);
        log.append(&mut bytes, &AppendOptions::default()).unwrap();
        logs.push(log);
    }
    assert!(handles.stats().evicted_total > 0, "{:?}", handles.stats());
    for log in &logs {
        assert!(log
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .is_ok());
    }

    // Something else takes the descriptors the budget counted on: the cache's own opens shed handles and
    // retry, so reads of cold logs go on while it holds any.
    let mut hog = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        hog.push(f);
    }
    let cached = handles.stats().open;
    assert!(cached > 2, "{:?}", handles.stats());
    for log in logs.iter().take(5) {
        assert!(log
            .read(0, 1 << 20, None)
            .unwrap()
            .slice
            .unwrap()
            .read_to_vec()
            .is_ok());
    }
    assert!(handles.stats().open < cached, "shed: {:?}", handles.stats());
    drop(hog);

    // Take every descriptor left outside the cache: now opening a log must fail, saying what to do.
    drop(logs);
    let mut hog = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        hog.push(f);
    }
    let err = Log::open(&dir.path().join("p-new"), config.clone()).unwrap_err();
    assert!(err.is_too_many_open_files(), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("ulimit -n") && message.contains("log.open.files.max"),
        "{message}"
    );
    drop(hog);
    Log::open(&dir.path().join("p-new"), config).unwrap();
}
