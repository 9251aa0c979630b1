//! Kafka's two replication checkpoint files, in Kafka's text format so Kafka's tools and operators read them:
//!
//! - `leader-epoch-checkpoint` in each partition directory: `0\n<count>\n<epoch> <startOffset>\n...`, the
//!   leader-epoch cache (which epoch wrote which offsets), ascending.
//! - `replication-offset-checkpoint` in the data directory: `0\n<count>\n<topic> <partition> <hw>\n...`, every
//!   partition's high watermark, so it survives a restart.
//!
//! Both are written atomically: a temporary file, fsync, rename, fsync of the directory. A file that does not
//! parse is reported and treated as absent (the caches rebuild from what replication brings next).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";

/// The only version of both formats Kafka has written.
const VERSION: &str = "0";
/// Most lines a checkpoint may declare; a count beyond it is a corrupt file, not an allocation.
const ENTRIES_MAX: usize = 1 << 20;

/// Writes `body` lines under the version and count header, atomically.
fn write_atomically(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        let mut text = format!("{VERSION}\n{}\n", lines.len());
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The entry lines of a checkpoint, after its header is checked. `Ok(None)` if the file does not exist.
fn read_lines(path: &Path) -> Result<Option<Vec<String>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut lines = text.lines();
    if lines.next() != Some(VERSION) {
        return Err(format!("{}: unknown version line", path.display()));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .filter(|c| *c <= ENTRIES_MAX)
        .ok_or_else(|| format!("{}: bad entry count", path.display()))?;
    let entries: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if entries.len() != count {
        return Err(format!(
            "{}: {count} entries declared, {} found",
            path.display(),
            entries.len()
        ));
    }
    Ok(Some(entries))
}

/// Writes a partition's leader-epoch cache, `(epoch, start offset)` ascending.
pub fn write_leader_epochs(dir: &Path, epochs: &[(i32, i64)]) -> std::io::Result<()> {
    debug_assert!(epochs
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    let lines: Vec<String> = epochs.iter().map(|(e, o)| format!("{e} {o}")).collect();
    write_atomically(&dir.join(LEADER_EPOCH_CHECKPOINT), &lines)
}

/// Where [`stage_leader_epochs`] writes a partition's cache before a batch sync renames it over the checkpoint
/// (a name of its own, so a partition's own atomic write never shares its temporary file).
pub fn staged_leader_epochs_path(dir: &Path) -> PathBuf {
    dir.join(format!("{LEADER_EPOCH_CHECKPOINT}.staged.tmp"))
}

/// Writes a leader-epoch cache to the staging file, without fsync (see `Partition::sync_leader_epochs_of`).
pub fn stage_leader_epochs(dir: &Path, epochs: &[(i32, i64)]) -> std::io::Result<()> {
    let mut text = format!("{VERSION}\n{}\n", epochs.len());
    for (e, o) in epochs {
        text.push_str(&format!("{e} {o}\n"));
    }
    std::fs::write(staged_leader_epochs_path(dir), text)
}

/// Renames the staging file over the checkpoint (`publish`), or removes it; no fsync.
pub fn publish_staged_leader_epochs(dir: &Path, publish: bool) -> std::io::Result<()> {
    let staged = staged_leader_epochs_path(dir);
    if publish {
        std::fs::rename(&staged, dir.join(LEADER_EPOCH_CHECKPOINT))
    } else {
        match std::fs::remove_file(&staged) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Makes the contents of `paths` (files, or directories for the entries in them) durable. On Linux, one
/// `syncfs(2)` per file system they are on: a single journal commit instead of one fsync each (it also writes
/// back whatever else is dirty on that file system, the price of the batch). Elsewhere, an fsync of each, a
/// few at once.
pub fn sync_files(paths: &[PathBuf]) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let mut synced = std::collections::BTreeSet::new();
        for p in paths {
            let dev = std::fs::metadata(p)?.dev();
            if !synced.insert(dev) {
                continue;
            }
            let f = std::fs::File::open(p)?;
            // SAFETY: syncfs takes an open descriptor, which `f` holds for the duration of the call.
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        crate::log_io::map_in_parallel(paths.to_vec(), |p| {
            std::fs::File::open(&p).and_then(|f| f.sync_all())
        })
        .into_iter()
        .collect()
    }
}

/// Reads a partition's leader-epoch cache; `None` when there is none (or it is corrupt, which is logged).
/// Entries that break the ascending order are dropped from the first offending one on.
pub fn read_leader_epochs(dir: &Path) -> Option<Vec<(i32, i64)>> {
    let path = dir.join(LEADER_EPOCH_CHECKPOINT);
    let lines = match read_lines(&path) {
        Ok(l) => l?,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring a leader-epoch checkpoint");
            return None;
        }
    };
    let mut epochs: Vec<(i32, i64)> = Vec::with_capacity(lines.len());
    for l in lines {
        let mut parts = l.split_whitespace();
        let parsed = (
            parts.next().and_then(|e| e.parse::<i32>().ok()),
            parts.next().and_then(|o| o.parse::<i64>().ok()),
        );
        let (Some(epoch), Some(offset)) = parsed else {
            tracing::warn!(path = %path.display(), line = %l, "ignoring a leader-epoch checkpoint with a bad line");
            return None;
        };
        let ordered = epochs
            .last()
            .is_none_or(|(e, o)| *e < epoch && *o <= offset);
        if epoch < 0 || offset < 0 || !ordered {
            break;
        }
        epochs.push((epoch, offset));
    }
    Some(epochs)
}

/// Writes every partition's high watermark, keyed by (topic, partition).
pub fn write_high_watermarks(
    data_dir: &Path,
    hws: &BTreeMap<(String, i32), i64>,
) -> std::io::Result<()> {
    let lines: Vec<String> = hws
        .iter()
        .map(|((t, p), hw)| format!("{t} {p} {hw}"))
        .collect();
    write_atomically(&data_dir.join(REPLICATION_OFFSET_CHECKPOINT), &lines)
}

/// Reads the high-watermark checkpoint; empty when there is none or it is corrupt (logged).
pub fn read_high_watermarks(data_dir: &Path) -> BTreeMap<(String, i32), i64> {
    let path = data_dir.join(REPLICATION_OFFSET_CHECKPOINT);
    let lines = match read_lines(&path) {
        Ok(Some(l)) => l,
        Ok(None) => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(error = %e, "ignoring the replication offset checkpoint");
            return BTreeMap::new();
        }
    };
    let mut out = BTreeMap::new();
    for l in lines {
        let mut parts = l.split_whitespace();
        match (
            parts.next(),
            parts.next().and_then(|p| p.parse::<i32>().ok()),
            parts.next().and_then(|h| h.parse::<i64>().ok()),
        ) {
            (Some(t), Some(p), Some(hw)) if p >= 0 && hw >= 0 => {
                out.insert((t.to_string(), p), hw);
            }
            _ => {
                tracing::warn!(path = %path.display(), line = %l, "ignoring a bad line of the replication offset checkpoint")
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_epochs_round_trip_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_leader_epochs(dir.path()), None);
        write_leader_epochs(dir.path(), &[(0, 0), (3, 17), (4, 17)]).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n3\n0 0\n3 17\n4 17\n");
        assert_eq!(
            read_leader_epochs(dir.path()),
            Some(vec![(0, 0), (3, 17), (4, 17)])
        );
        assert!(!dir.path().join("leader-epoch-checkpoint.tmp").exists());
    }

    #[test]
    fn corrupt_checkpoints_are_ignored_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        std::fs::write(&p, "0\n2\n1 5\n").unwrap();
        assert_eq!(read_leader_epochs(dir.path()), None, "count mismatch");
        std::fs::write(&p, "0\n999999999999\n").unwrap();
        assert_eq!(read_leader_epochs(dir.path()), None, "absurd count");
        std::fs::write(&p, "0\n3\n1 5\n0 9\n2 9\n").unwrap();
        assert_eq!(
            read_leader_epochs(dir.path()),
            Some(vec![(1, 5)]),
            "out-of-order entries are cut"
        );
        std::fs::write(dir.path().join(REPLICATION_OFFSET_CHECKPOINT), "1\n0\n").unwrap();
        assert!(read_high_watermarks(dir.path()).is_empty());
    }

    #[test]
    fn high_watermarks_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut hws = BTreeMap::new();
        hws.insert(("orders".to_string(), 0), 42);
        hws.insert(("orders".to_string(), 1), 0);
        write_high_watermarks(dir.path(), &hws).unwrap();
        let text = std::fs::read_to_string(dir.path().join(REPLICATION_OFFSET_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n2\norders 0 42\norders 1 0\n");
        assert_eq!(read_high_watermarks(dir.path()), hws);
    }
}
