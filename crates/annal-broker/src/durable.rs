//! Small durable files in the data directory: written to a temporary file, fsynced, renamed over the old one,
//! and the directory fsynced, so a crash (kill -9, power loss) leaves either the old or the new content.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Atomically replaces `path` with `contents`.
pub fn write_atomic(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .context("durable file has no parent directory")?;
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(contents)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", tmp.display()))?;
    drop(f);
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    sync_dir(dir)
}

/// Fsyncs a directory so renames and removals inside it are durable.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync directory {}", dir.display()))
}
