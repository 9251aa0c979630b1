//! A simulated page cache for the deterministic simulator (`annal-sim`): what a crash keeps of the segment files.
//!
//! A real power loss or `kill -9` of the machine keeps what was fsynced and may lose everything written after it.
//! The simulator runs its nodes' logs on a real filesystem, where a simulated crash loses nothing, so while
//! tracking is on this module records, per segment file (by device and inode, which survive the rename of a
//! `.deleted` or cleaned segment and the reopen of an evicted handle), the length it had when it was last made
//! durable: created (empty), opened at start-up (all of it: what a restart finds is on disk) or fsynced. After a
//! simulated crash, [`lose_unsynced`] cuts every tracked file under the crashed node's directory back to that
//! length. Index files are not tracked: recovery already treats them as hints to check, and they are rebuilt from
//! the segment when they disagree.
//!
//! A power loss need not lose a tail whole: [`lose_unsynced_torn`] lets the simulator choose, per file, a [`Tear`]
//! (a prefix of the unsynced bytes written back, or the file's new length on disk with zeros where its data never
//! arrived), the torn last writes that recovery must cut at the first batch that does not check out.
//!
//! Off (one relaxed load per fsync) in every other process. Tracking is process-wide, not per thread: a log's
//! fsyncs run on its own threads (the roll flush, the I/O pool), and the simulator runs one seed at a time per
//! process anyway.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

static TRACKING: AtomicBool = AtomicBool::new(false);
/// While set (a crashed node's objects being dropped), nothing becomes durable: a crash does not run destructors.
static FROZEN: AtomicBool = AtomicBool::new(false);
/// (device, inode) -> durable length. Bounded: past this many files, new ones are not tracked (they then keep
/// everything at a crash, which is the real filesystem's behaviour, so only the simulation's reach shrinks).
static DURABLE: Mutex<BTreeMap<(u64, u64), u64>> = Mutex::new(BTreeMap::new());
const TRACKED_FILES_MAX: usize = 1 << 20;

/// Starts tracking, forgetting earlier runs' files (the simulator, before a seed).
pub fn start_tracking() {
    DURABLE.lock().clear();
    FROZEN.store(false, Ordering::Relaxed);
    TRACKING.store(true, Ordering::Relaxed);
}

/// Stops tracking and forgets every file (the simulator, after a seed).
pub fn stop_tracking() {
    TRACKING.store(false, Ordering::Relaxed);
    FROZEN.store(false, Ordering::Relaxed);
    DURABLE.lock().clear();
}

/// Whether a simulation tracks durable lengths (the engine then runs its background fsyncs inline).
pub fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

/// While `frozen`, fsyncs do not make anything durable (set around a simulated crash's teardown).
pub fn freeze(frozen: bool) {
    FROZEN.store(frozen, Ordering::Relaxed);
}

/// Records `file`'s current length as durable (after it was created, opened at start-up or fsynced).
pub(crate) fn mark_durable(file: &File) {
    if !TRACKING.load(Ordering::Relaxed) || FROZEN.load(Ordering::Relaxed) {
        return;
    }
    let Ok(meta) = file.metadata() else {
        return;
    };
    let mut durable = DURABLE.lock();
    let key = (meta.dev(), meta.ino());
    if durable.len() < TRACKED_FILES_MAX || durable.contains_key(&key) {
        durable.insert(key, meta.len());
    }
}

/// A file cut back by [`lose_unsynced`]: its path, its length before and after, and where zeros start if the
/// tear left some ([`Tear::Zeroed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostTail {
    pub path: PathBuf,
    pub from: u64,
    pub to: u64,
    pub zeroed_from: Option<u64>,
}

/// What a power loss leaves of one file's unsynced bytes (`unsynced` of them past its durable length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// None of them: the file is cut back to its durable length.
    Lost,
    /// The first `kept` of them reached the disk (pages written back in order, the last one perhaps in part).
    Prefix { kept: u64 },
    /// The file keeps its length but reads as zeros from `from` (counted from the durable length) on: the new
    /// size reached the disk (the filesystem's journal) before the data blocks did.
    Zeroed { from: u64 },
}

/// Cuts every tracked file under `dir` (recursively) back to its durable length, as a crash loses what was in
/// the page cache only. Walks the directory in name order, so the result is the same in every run.
pub fn lose_unsynced(dir: &Path) -> std::io::Result<Vec<LostTail>> {
    lose_unsynced_torn(dir, &mut |_| Tear::Lost)
}

/// [`lose_unsynced`], where `tear(unsynced)` chooses what each file with `unsynced` bytes past its durable length
/// keeps of them. Called in path order, so a seeded `tear` gives the same result in every run.
pub fn lose_unsynced_torn(
    dir: &Path,
    tear: &mut dyn FnMut(u64) -> Tear,
) -> std::io::Result<Vec<LostTail>> {
    let mut lost = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(&d) {
            Ok(entries) => entries
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        entries.sort();
        let mut subdirs = Vec::new();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                subdirs.push(path);
                continue;
            }
            lost.extend(cut_back(path, &meta, tear)?);
        }
        // Depth first, in name order: the subdirectories go on the stack last name first.
        pending.extend(subdirs.into_iter().rev());
    }
    lost.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(lost)
}

/// [`lose_unsynced`] for one file (a file whose fsync failed); `None` if it had nothing unsynced or is gone.
pub fn lose_unsynced_file(path: &Path) -> std::io::Result<Option<LostTail>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => cut_back(path.to_path_buf(), &meta, &mut |_| Tear::Lost),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Cuts a tracked file longer than its durable length back to what `tear` leaves of its unsynced bytes.
fn cut_back(
    path: PathBuf,
    meta: &std::fs::Metadata,
    tear: &mut dyn FnMut(u64) -> Tear,
) -> std::io::Result<Option<LostTail>> {
    let durable = DURABLE.lock().get(&(meta.dev(), meta.ino())).copied();
    let Some(durable) = durable.filter(|&to| to < meta.len()) else {
        return Ok(None);
    };
    let unsynced = meta.len() - durable;
    let file = std::fs::OpenOptions::new().write(true).open(&path)?;
    let (to, zeroed_from) = match tear(unsynced) {
        Tear::Lost => (durable, None),
        Tear::Prefix { kept } => (durable + kept.min(unsynced), None),
        Tear::Zeroed { from } => (meta.len(), Some(durable + from.min(unsynced))),
    };
    if let Some(zeroed_from) = zeroed_from {
        // Cutting and extending again reads back as zeros, as blocks the data never reached do.
        file.set_len(zeroed_from)?;
    }
    file.set_len(to)?;
    Ok(Some(LostTail {
        path,
        from: meta.len(),
        to,
        zeroed_from,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// One test only: tracking is process-wide, and tests in this binary run in parallel.
    #[test]
    fn a_crash_keeps_what_was_synced_or_there_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("topic-0");
        std::fs::create_dir(&nested).unwrap();
        start_tracking();
        let synced_path = nested.join("00000000000000000000.log");
        let mut synced = File::create(&synced_path).unwrap();
        mark_durable(&synced);
        synced.write_all(b"durable").unwrap();
        synced.sync_data().unwrap();
        mark_durable(&synced);
        synced.write_all(b" and lost").unwrap();
        let untracked_path = dir.path().join("leader-epoch-checkpoint");
        std::fs::write(&untracked_path, b"0\n0\n").unwrap();
        freeze(true);
        synced.sync_data().unwrap();
        mark_durable(&synced); // during a crash's teardown: does not count
        freeze(false);
        drop(synced);
        let lost = lose_unsynced(dir.path()).unwrap();

        // Torn tails: a prefix written back, or the new length with zeros where the data never arrived.
        let prefix_path = nested.join("00000000000000000100.log");
        let zeroed_path = nested.join("00000000000000000200.log");
        let mut tears = vec![Tear::Zeroed { from: 3 }, Tear::Prefix { kept: 2 }];
        for path in [&prefix_path, &zeroed_path] {
            let mut f = File::create(path).unwrap();
            f.write_all(b"ab").unwrap();
            f.sync_data().unwrap();
            mark_durable(&f);
            f.write_all(b"cdefgh").unwrap();
        }
        let mut asked = Vec::new();
        let torn = lose_unsynced_torn(dir.path(), &mut |unsynced| {
            asked.push(unsynced);
            tears.pop().unwrap()
        })
        .unwrap();
        stop_tracking();
        assert_eq!(
            asked,
            vec![6, 6],
            "each torn file is asked about once, in path order"
        );
        assert_eq!(
            torn,
            vec![
                LostTail {
                    path: prefix_path.clone(),
                    from: 8,
                    to: 4,
                    zeroed_from: None,
                },
                LostTail {
                    path: zeroed_path.clone(),
                    from: 8,
                    to: 8,
                    zeroed_from: Some(5),
                },
            ]
        );
        assert_eq!(std::fs::read(&prefix_path).unwrap(), b"abcd");
        assert_eq!(std::fs::read(&zeroed_path).unwrap(), b"abcde\0\0\0");
        assert_eq!(
            lost,
            vec![LostTail {
                path: synced_path.clone(),
                from: 16,
                to: 7,
                zeroed_from: None,
            }]
        );
        assert_eq!(std::fs::read(&synced_path).unwrap(), b"durable");
        assert_eq!(std::fs::read(&untracked_path).unwrap(), b"0\n0\n");
    }
}
