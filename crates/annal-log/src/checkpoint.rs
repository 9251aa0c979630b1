//! The partition's checkpoint file: log start offset, recovery point and the clean-shutdown flag.
//!
//! Kafka keeps these in per-log-directory files; an embeddable engine keeps them per partition, in
//! `annal.checkpoint`, written atomically (temporary file, fsync, rename, fsync of the directory).

use std::io::Write;
use std::path::Path;

use crate::error::LogError;

pub const FILE_NAME: &str = "annal.checkpoint";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    pub log_start_offset: i64,
    /// Everything below this offset was fsynced; recovery scans only from the segment holding it.
    pub recovery_point: i64,
    /// Set by a clean close, cleared on open: when set, no recovery scan is needed.
    pub clean_shutdown: bool,
}

impl Checkpoint {
    /// Reads the checkpoint; `None` if missing or malformed (then the log is recovered fully). A file that
    /// cannot be read (out of descriptors, I/O error) is an error, not a missing checkpoint: taking it for one
    /// would forget the log start offset.
    pub fn read(dir: &Path) -> crate::Result<Option<Checkpoint>> {
        let path = dir.join(FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(String::from_utf8(bytes).ok().and_then(|t| Self::parse(&t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LogError::io("read checkpoint", &path, e)),
        }
    }

    fn parse(text: &str) -> Option<Checkpoint> {
        let mut lines = text.lines();
        if lines.next()? != "annal-checkpoint 1" {
            return None;
        }
        let mut checkpoint = Checkpoint::default();
        let mut seen = 0;
        for line in lines {
            let (key, value) = line.split_once('=')?;
            match key {
                "log_start_offset" => {
                    checkpoint.log_start_offset = value.parse().ok().filter(|v: &i64| *v >= 0)?
                }
                "recovery_point" => {
                    checkpoint.recovery_point = value.parse().ok().filter(|v: &i64| *v >= 0)?
                }
                "clean_shutdown" => checkpoint.clean_shutdown = value.parse().ok()?,
                _ => return None,
            }
            seen += 1;
        }
        (seen == 3).then_some(checkpoint)
    }

    pub fn write(&self, dir: &Path) -> crate::Result<()> {
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        let text = format!(
            "annal-checkpoint 1\nlog_start_offset={}\nrecovery_point={}\nclean_shutdown={}\n",
            self.log_start_offset, self.recovery_point, self.clean_shutdown
        );
        let mut file =
            std::fs::File::create(&tmp).map_err(|e| LogError::io("create checkpoint", &tmp, e))?;
        file.write_all(text.as_bytes())
            .map_err(|e| LogError::io("write checkpoint", &tmp, e))?;
        file.sync_all()
            .map_err(|e| LogError::io("fsync checkpoint", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| LogError::io("rename checkpoint", &path, e))?;
        sync_dir(dir)
    }
}

/// fsyncs a directory so that renames and new files in it survive a power loss.
pub fn sync_dir(dir: &Path) -> crate::Result<()> {
    let handle = std::fs::File::open(dir).map_err(|e| LogError::io("open directory", dir, e))?;
    handle
        .sync_all()
        .map_err(|e| LogError::io("fsync directory", dir, e))
}
