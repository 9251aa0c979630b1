//! Producer id allocation for idempotent producers. Ids must never be reused across restarts, so they are handed
//! out from blocks whose end is persisted *before* any id of the block is used: after a crash the broker starts
//! at the persisted end, skipping whatever was left of the block.

use std::path::{Path, PathBuf};

use anyhow::Context;
use parking_lot::Mutex;

use crate::durable::write_atomic;

pub const FILE: &str = "producer-id-block";
const BLOCK: i64 = 1000;

pub struct ProducerIds {
    path: PathBuf,
    state: Mutex<(
        i64, /* next */
        i64, /* end of the persisted block */
    )>,
}

impl ProducerIds {
    pub fn open(data_dir: &Path) -> anyhow::Result<ProducerIds> {
        let path = data_dir.join(FILE);
        let start = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<i64>().with_context(|| {
                format!("{} is corrupt (expected one integer); restore it or set it above every producer id in use", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        Ok(ProducerIds {
            path,
            state: Mutex::new((start, start)),
        })
    }

    /// Above every id this data directory ever handed out (the persisted end of its block): where the metadata
    /// log's producer ids must start when the directory joins a cluster.
    pub fn persisted_end(&self) -> i64 {
        self.state.lock().1
    }

    /// A producer id never handed out before, on this data directory.
    pub fn next(&self) -> anyhow::Result<i64> {
        let mut st = self.state.lock();
        if st.0 >= st.1 {
            let end = st.0 + BLOCK;
            write_atomic(&self.path, format!("{end}\n").as_bytes())?;
            st.1 = end;
        }
        let id = st.0;
        st.0 += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(p.next().unwrap(), 0);
        assert_eq!(p.next().unwrap(), 1);
        drop(p); // a crash: the rest of the block is skipped
        let p = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(p.next().unwrap(), BLOCK);
    }
}
