//! Helpers shared by the fuzz targets and the corpus generator (`examples/gen_corpus.rs`).
//!
//! The log-recovery target needs a whole directory of files from one fuzz input. [`pack_files`] and
//! [`unpack_files`] are a small container format for that: each file is `kind: u8, base: u32 LE, len: u32 LE,
//! bytes`. The fuzzer mutates the contents of real files (the seeds are packed from real log directories) and,
//! now and then, the framing itself; a truncated last entry keeps the bytes that are there.

use std::path::Path;

/// What a packed file becomes in the log directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Log,
    Index,
    TimeIndex,
    ProducerSnapshot,
    Checkpoint,
    TxnIndex,
    /// `<base>.keyindex` (topic config `key.index.enable`): checked and rebuilt through the recovery target.
    KeyIndex,
}

impl FileKind {
    // New kinds go at the end: existing corpus entries keep their kind byte.
    const ALL: [FileKind; 7] = [
        FileKind::Log,
        FileKind::Index,
        FileKind::TimeIndex,
        FileKind::ProducerSnapshot,
        FileKind::Checkpoint,
        FileKind::TxnIndex,
        FileKind::KeyIndex,
    ];

    pub fn from_byte(b: u8) -> FileKind {
        FileKind::ALL[b as usize % FileKind::ALL.len()]
    }

    pub fn to_byte(self) -> u8 {
        FileKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    /// The file name in a partition directory: `<20-digit base>.<suffix>` as annal-log names them.
    pub fn file_name(self, base: u32) -> String {
        let suffix = match self {
            FileKind::Log => "log",
            FileKind::Index => "index",
            FileKind::TimeIndex => "timeindex",
            FileKind::ProducerSnapshot => "snapshot",
            FileKind::TxnIndex => "txnindex",
            FileKind::KeyIndex => "keyindex",
            FileKind::Checkpoint => return "annal.checkpoint".into(),
        };
        format!("{base:020}.{suffix}")
    }

    pub fn from_file_name(name: &str) -> Option<(FileKind, u32)> {
        if name == "annal.checkpoint" {
            return Some((FileKind::Checkpoint, 0));
        }
        let (stem, suffix) = name.split_once('.')?;
        let base: u32 = stem.parse().ok()?;
        let kind = match suffix {
            "log" => FileKind::Log,
            "index" => FileKind::Index,
            "timeindex" => FileKind::TimeIndex,
            "snapshot" => FileKind::ProducerSnapshot,
            "txnindex" => FileKind::TxnIndex,
            "keyindex" => FileKind::KeyIndex,
            _ => return None,
        };
        Some((kind, base))
    }
}

/// Files (kind, base offset, contents) out of a fuzz input. At most `max_files`; later entries are ignored.
pub fn unpack_files(mut data: &[u8], max_files: usize) -> Vec<(FileKind, u32, &[u8])> {
    let mut files = Vec::new();
    while data.len() >= 9 && files.len() < max_files {
        let kind = FileKind::from_byte(data[0]);
        let base = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
        let len = u32::from_le_bytes([data[5], data[6], data[7], data[8]]) as usize;
        data = &data[9..];
        let len = len.min(data.len());
        files.push((kind, base, &data[..len]));
        data = &data[len..];
    }
    files
}

pub fn pack_files(files: &[(FileKind, u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, base, bytes) in files {
        out.push(kind.to_byte());
        out.extend_from_slice(&base.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Packs the files of a real log directory (for seeds).
pub fn pack_dir(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some((kind, base)) = name.to_str().and_then(FileKind::from_file_name) {
            files.push((kind, base, std::fs::read(entry.path())?));
        }
    }
    files.sort_by_key(|(k, b, _)| (*b, k.to_byte()));
    Ok(pack_files(&files))
}

/// The small engine configuration the recovery target and its seeds share: small segments and index files so
/// that one input can hold several segments and a run does not create megabytes of preallocated indexes.
pub fn small_log_config() -> annal_log::LogConfig {
    annal_log::LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..annal_log::LogConfig::default()
    }
}

/// A scratch directory, on tmpfs when there is one: the engine fsyncs its checkpoint on every open, and an
/// fsync to a real disk per execution would make the recovery target a disk benchmark.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::Builder::new()
            .prefix("annal-fuzz")
            .tempdir_in(shm)
        {
            return dir;
        }
    }
    tempfile::tempdir().expect("a temporary directory")
}

/// What every batch target checks on bytes that claim to be record batches, broker side and client side:
/// validation never panics; what validates survives offset assignment and `LogAppendTime` stamping still valid
/// (the append path rewrites those fields and the CRC in place); the client's decoder (record iteration with
/// bounded decompression, every codec) never panics on them; and a log accepts or refuses them without panicking.
pub fn check_batches(data: &[u8], log: &mut annal_log::Log) {
    use annal_log::batch;
    const MAX: u32 = annal_log::LogConfig::DEFAULT_MAX_MESSAGE_BYTES;
    let _ = annal_client::decode_fetched(bytes::Bytes::copy_from_slice(data), 0);
    let Ok(validated) = batch::validate_batches(data, MAX) else {
        return;
    };
    let mut copy = data.to_vec();
    for v in &validated {
        let size = v.header.size();
        let one = &mut copy[v.position..v.position + size];
        let _ = batch::record_timestamps(one, MAX as usize);
        batch::assign_offset(one, 1_000, 7);
        batch::set_log_append_time(one, 1_700_000_000_000);
    }
    let again = batch::validate_batches(&copy, MAX)
        .expect("a valid batch stays valid after offset assignment and LogAppendTime");
    assert_eq!(again.len(), validated.len());
    let _ = annal_client::decode_fetched(bytes::Bytes::from(copy), 0);

    let mut append = data.to_vec();
    if log
        .append(&mut append, &annal_log::AppendOptions::default())
        .is_ok()
    {
        let end = log.log_end_offset();
        let read = log
            .read(log.log_start_offset(), 1 << 20, None)
            .expect("read what was appended");
        if let Some(slice) = read.slice {
            let bytes = slice.read_to_vec().expect("read the appended file range");
            assert!(
                batch::validate_batches(&bytes, u32::MAX).is_ok(),
                "the log returned invalid batches"
            );
        }
        assert!(end > 0);
    }
    // Keep the log small: a long run appends millions of batches.
    if log.size_bytes() > 1 << 20 {
        log.truncate_to(log.log_start_offset())
            .expect("truncate the scratch log");
    }
}
