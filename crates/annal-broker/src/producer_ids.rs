//! The producer ids a single node handed out before Annal was a cluster. It kept the end of its current block of
//! ids in `producer-id-block` (persisted before any id of the block was used), so every id it ever gave is below
//! that value. Now ids come from the metadata log; this file is read once, to start the log's ids above it (see
//! `annal_metadata::controller::SingleNodeImport`).

use std::path::Path;

use anyhow::Context;

pub const FILE: &str = "producer-id-block";

/// Above every producer id this data directory handed out as a single node (0 when it never did).
pub fn single_node_floor(data_dir: &Path) -> anyhow::Result<i64> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let end = text.trim().parse::<i64>().with_context(|| {
                format!(
                    "{} is corrupt (expected one integer); restore it, or write a number above every producer \
                     id in use",
                    path.display()
                )
            })?;
            anyhow::ensure!(
                end >= 0,
                "{} holds a negative producer id {end}",
                path.display()
            );
            Ok(end)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_persisted_block_end() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(single_node_floor(dir.path()).unwrap(), 0);
        std::fs::write(dir.path().join(FILE), "3000\n").unwrap();
        assert_eq!(single_node_floor(dir.path()).unwrap(), 3000);
        std::fs::write(dir.path().join(FILE), "garbage").unwrap();
        let err = single_node_floor(dir.path()).unwrap_err().to_string();
        assert!(err.contains("producer-id-block is corrupt"), "{err}");
    }
}
