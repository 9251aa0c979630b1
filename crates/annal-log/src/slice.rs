//! A range of a segment file, handed out by reads so the bytes can be copied or sent after locks are released.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A byte range of a segment file holding whole record batches. The file stays readable even if the segment is
/// deleted meanwhile (the open handle keeps it alive), so a slice taken under a lock may be read after it.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub(crate) file: Arc<File>,
    pub(crate) position: u64,
    pub(crate) len: usize,
}

impl FileSlice {
    /// Number of bytes in the slice.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the slice holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file and byte range, for zero-copy sending (`sendfile`).
    pub fn file_range(&self) -> (&File, u64, usize) {
        (&self.file, self.position, self.len)
    }

    /// Reads the slice's bytes into a new buffer.
    pub fn read_to_vec(&self) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(buf)
    }

    /// Appends the slice's bytes to `out`.
    pub fn read_into(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let start = out.len();
        out.resize(start + self.len, 0);
        self.file.read_exact_at(&mut out[start..], self.position)
    }
}
