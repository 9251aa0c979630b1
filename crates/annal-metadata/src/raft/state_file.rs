//! The `quorum-state` file: the vote, the committed log id and the last purged log id, written atomically
//! (temp file, fsync, rename, fsync of the directory) so a kill -9 leaves either the old or the new state.

use std::io::Write;
use std::path::{Path, PathBuf};

use openraft::{LogId, Vote};
use serde::{Deserialize, Serialize};

pub(crate) const FILE_NAME: &str = "quorum-state";
const TMP_NAME: &str = "quorum-state.tmp";

/// What raft must remember across restarts apart from the log itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuorumState {
    pub vote: Option<Vote<u64>>,
    pub committed: Option<LogId<u64>>,
    /// The log holds no entry at or below this one (it is covered by a snapshot).
    pub last_purged: Option<LogId<u64>>,
}

impl QuorumState {
    /// Reads the state in `dir`; a missing file is a fresh node. An unreadable file is an error: guessing a
    /// vote could let this node vote twice in one term.
    pub fn read(dir: &Path) -> Result<QuorumState, String> {
        let path = dir.join(FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => QuorumState::parse(&bytes).map_err(|e| {
                format!("{} is unreadable ({e}); restore it from a backup or remove the node's metadata log and re-add it", path.display())
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(QuorumState::default()),
            Err(e) => Err(format!("read {}: {e}", path.display())),
        }
    }

    /// The file's content as `read` decodes it.
    pub fn parse(bytes: &[u8]) -> Result<QuorumState, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The file's content as `write` writes it.
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(std::io::Error::other)
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp: PathBuf = dir.join(TMP_NAME);
        let bytes = self.encode()?;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, dir.join(FILE_NAME))?;
        sync_dir(dir)
    }
}

/// fsyncs a directory so a rename in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    #[test]
    fn state_round_trips_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            QuorumState::read(dir.path()).unwrap(),
            QuorumState::default()
        );
        let state = QuorumState {
            vote: Some(Vote::new(3, 1)),
            committed: Some(LogId::new(CommittedLeaderId::new(3, 1), 9)),
            last_purged: None,
        };
        state.write(dir.path()).unwrap();
        assert_eq!(QuorumState::read(dir.path()).unwrap(), state);
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert!(QuorumState::read(dir.path()).is_err());
    }
}
