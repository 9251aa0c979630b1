//! Plain bytes as the records of a Produce request / a fetched partition: the engine's batch validation, the
//! append path's in-place rewrites, a real log's append and read, and the client's record decoding.
#![no_main]
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

struct Scratch {
    log: annal_log::Log,
    _dir: tempfile::TempDir,
}

static LOG: Mutex<Option<Scratch>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut guard = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let scratch = guard.get_or_insert_with(|| {
        let dir = annal_fuzz::scratch_dir();
        let log = annal_log::Log::open(dir.path(), annal_fuzz::small_log_config())
            .expect("open a scratch log");
        Scratch { log, _dir: dir }
    });
    annal_fuzz::check_batches(data, &mut scratch.log);
});
