//! What a log directory held when a log was opened: one `readdir` that answers "is this file there?" for the
//! rest of the open, instead of a probe (an `open`, `stat` or `unlink` that fails) for every file that may be
//! missing. At a restart of 100,000 partitions those probes were about a third of the system calls.
//!
//! Sound because a log directory has one owner: nothing else creates or removes its files while it opens.

use std::collections::HashSet;
use std::path::Path;

use crate::error::LogError;

/// The names in a log directory, or "unknown" (every probe is made, as before there was a listing).
#[derive(Debug, Default)]
pub(crate) struct DirListing {
    names: Option<HashSet<String>>,
}

impl DirListing {
    /// Probe everything: for the callers that have no listing.
    pub(crate) fn unknown() -> DirListing {
        DirListing { names: None }
    }

    /// Lists `dir`, creating it (empty) if it is missing. Names that are not UTF-8 are left out: no file of a
    /// log has one.
    pub(crate) fn read_or_create(dir: &Path) -> crate::Result<DirListing> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| LogError::io("create log directory", dir, e))?;
                return Ok(DirListing {
                    names: Some(HashSet::new()),
                });
            }
            Err(e) => return Err(LogError::io("list log directory", dir, e)),
        };
        let mut names = HashSet::new();
        for entry in entries {
            let entry = entry.map_err(|e| LogError::io("list log directory", dir, e))?;
            if let Ok(name) = entry.file_name().into_string() {
                names.insert(name);
            }
        }
        Ok(DirListing { names: Some(names) })
    }

    /// False only if the listing is known and `name` was not in it.
    pub(crate) fn may_contain(&self, name: &str) -> bool {
        self.names.as_ref().is_none_or(|n| n.contains(name))
    }

    /// Whether `dir/name` exists: from the listing when there is one, else by a `stat`.
    pub(crate) fn contains(&self, dir: &Path, name: &str) -> bool {
        match &self.names {
            Some(n) => n.contains(name),
            None => dir.join(name).exists(),
        }
    }

    /// The listed names (none when unknown).
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().flatten().map(String::as_str)
    }

    pub(crate) fn is_known(&self) -> bool {
        self.names.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_from_one_listing_and_creates_a_missing_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("t-0");
        let empty = DirListing::read_or_create(&dir).unwrap();
        assert!(dir.is_dir());
        assert!(empty.is_known() && !empty.may_contain("annal.checkpoint"));
        std::fs::write(dir.join("annal.checkpoint"), b"x").unwrap();
        let listed = DirListing::read_or_create(&dir).unwrap();
        assert!(
            listed.may_contain("annal.checkpoint") && listed.contains(&dir, "annal.checkpoint")
        );
        assert!(!listed.contains(&dir, "00000000000000000000.index"));
        assert_eq!(listed.names().collect::<Vec<_>>(), vec!["annal.checkpoint"]);
        let unknown = DirListing::unknown();
        assert!(unknown.may_contain("anything"));
        assert!(unknown.contains(&dir, "annal.checkpoint") && !unknown.contains(&dir, "missing"));
    }
}
