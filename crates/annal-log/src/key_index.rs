//! The key index (`<base offset>.keyindex`, topic config `key.index.enable`): for each key hash, the offsets of
//! the records with that key in one segment. Derived data: a file that fails any check is rebuilt from the log,
//! never trusted, and lookups read the records the index points at, so hash collisions never reach an answer.
//! See `docs/decisions/0015-key-index.md` for the format and why.
//!
//! File layout (all integers big-endian, as in Kafka's own indexes):
//!
//! ```text
//! 0   magic            8 bytes  "ANKEYIX1"
//! 8   base_offset      i64      the segment's base offset
//! 16  next_offset      i64      the segment's next offset when the index was written
//! 24  log_bytes        u64      the segment's size when the index was written
//! 32  entry_count      u32
//! 36  entries_crc32c   u32      of the entry bytes
//! 40  header_crc32c    u32      of bytes 0..40
//! 44  entries          entry_count x (key_hash u32, relative_offset u32), sorted by (hash, offset)
//! ```
//!
//! A sealed segment's index is searched on disk (binary search by `pread`, no load); the active segment's is a
//! map in memory, at most [`ACTIVE_ENTRIES_MAX`] entries (the log rolls when it is full, as it does when the
//! offset index is full).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::BatchHeader;
use crate::file_handles::{CachedFile, FileHandles};

/// File suffix, beside `.log`, `.index`, `.timeindex`, `.txnindex`.
pub const SUFFIX: &str = "keyindex";
const MAGIC: [u8; 8] = *b"ANKEYIX1";
/// Bytes of the fixed header.
pub const HEADER_BYTES: usize = 44;
/// Bytes of one entry: key hash and relative offset.
pub const ENTRY_BYTES: usize = 8;
/// Entries the active segment's in-memory index may hold before the log rolls: 512 Ki entries, a few MiB of
/// map whatever the key distribution, so a partition's index memory is bounded.
pub const ACTIVE_ENTRIES_MAX: usize = 1 << 19;
/// Entries read from a file per `pread` when walking one hash's run.
const RUN_CHUNK_ENTRIES: usize = 512;

/// The hash the index keys on: CRC-32C of the key bytes (hardware-accelerated; collisions are resolved by
/// reading the records, so a 32-bit hash only costs a rare extra read).
pub fn key_hash(key: &[u8]) -> u32 {
    crc32c::crc32c(key)
}

/// One segment's key index as the engine holds it.
#[derive(Debug)]
pub(crate) enum KeyIndex {
    /// `key.index.enable` is false.
    Off,
    /// A file may be on disk; it is checked against the segment before any use (and rebuilt if it fails).
    Unverified,
    /// In memory, covering the first `position` bytes of the segment (the active segment, or a segment whose
    /// file is being (re)built).
    Building(Building),
    /// A checked file covering the whole (sealed) segment.
    Sealed(SealedKeyIndex),
}

/// An index being built in memory.
#[derive(Debug, Default)]
pub(crate) struct Building {
    /// Relative offsets of each hash, ascending (records are indexed in log order).
    by_hash: HashMap<u32, Vec<u32>>,
    entries: usize,
    /// Bytes of the segment indexed so far (a batch boundary).
    pub position: u64,
}

impl Building {
    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn is_full(&self) -> bool {
        self.entries >= ACTIVE_ENTRIES_MAX
    }

    /// Adds the keyed records of one decoded batch (control batches carry no user keys and are skipped by the
    /// caller).
    pub fn add(&mut self, hash: u32, relative_offset: u32) {
        let offsets = self.by_hash.entry(hash).or_default();
        debug_assert!(offsets.last().is_none_or(|&last| last < relative_offset));
        offsets.push(relative_offset);
        self.entries += 1;
    }

    /// Drops entries at or past `relative_offset` (a truncation).
    pub fn truncate(&mut self, relative_offset: u32, position: u64) {
        let mut entries = 0;
        self.by_hash.retain(|_, offsets| {
            let keep = offsets.partition_point(|&o| o < relative_offset);
            offsets.truncate(keep);
            entries += keep;
            keep > 0
        });
        self.entries = entries;
        self.position = self.position.min(position);
    }

    /// Candidates for `hash` in `[from, to)` (relative offsets), at most `max`, ascending or (with `reverse`)
    /// descending.
    pub fn candidates(&self, hash: u32, from: u32, to: u32, reverse: bool, max: usize) -> Vec<u32> {
        let Some(offsets) = self.by_hash.get(&hash) else {
            return Vec::new();
        };
        let lo = offsets.partition_point(|&o| o < from);
        let hi = offsets.partition_point(|&o| o < to);
        let range = &offsets[lo..hi.max(lo)];
        if reverse {
            range.iter().rev().take(max).copied().collect()
        } else {
            range.iter().take(max).copied().collect()
        }
    }

    /// The entries of a sealed file below `relative_offset`, in memory again (its segment became the active one
    /// after a truncation), covering the log up to `position`.
    pub fn from_sealed(
        sealed: &SealedKeyIndex,
        relative_offset: u32,
        position: u64,
    ) -> std::io::Result<Building> {
        let mut building = Building {
            position,
            ..Building::default()
        };
        let mut buf = vec![0u8; RUN_CHUNK_ENTRIES * ENTRY_BYTES];
        let mut next = 0u32;
        while next < sealed.entry_count {
            let n = (sealed.entry_count - next).min(RUN_CHUNK_ENTRIES as u32);
            let bytes = &mut buf[..n as usize * ENTRY_BYTES];
            sealed.file.get_io()?.read_exact_at(
                bytes,
                HEADER_BYTES as u64 + u64::from(next) * ENTRY_BYTES as u64,
            )?;
            // Sorted by (hash, offset): each hash's offsets arrive ascending, as `add` wants.
            for (hash, offset) in bytes.chunks_exact(ENTRY_BYTES).map(decode_entry) {
                if offset < relative_offset {
                    building.add(hash, offset);
                }
            }
            next += n;
        }
        Ok(building)
    }

    /// The entries sorted by (hash, offset), as the file stores them.
    fn sorted_entries(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(self.entries);
        for (&hash, offsets) in &self.by_hash {
            out.extend(offsets.iter().map(|&o| (hash, o)));
        }
        out.sort_unstable();
        out
    }
}

/// What a segment says about itself; a file must match it to be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentShape {
    pub base_offset: i64,
    pub next_offset: i64,
    pub log_bytes: u64,
}

/// A checked file.
#[derive(Debug)]
pub(crate) struct SealedKeyIndex {
    path: PathBuf,
    /// Reached through the open-file budget (`file_handles.rs`): a sealed segment's key index is cold.
    file: CachedFile,
    entry_count: u32,
}

impl SealedKeyIndex {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size.
    pub fn file_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.entry_count) * ENTRY_BYTES as u64
    }

    fn entry_at(&self, index: u32) -> std::io::Result<(u32, u32)> {
        let mut buf = [0u8; ENTRY_BYTES];
        self.file.get_io()?.read_exact_at(
            &mut buf,
            HEADER_BYTES as u64 + u64::from(index) * ENTRY_BYTES as u64,
        )?;
        Ok(decode_entry(&buf))
    }

    /// The first entry index whose (hash, offset) is >= `(hash, offset)`: a binary search of `pread`s.
    fn lower_bound(&self, hash: u32, offset: u32) -> std::io::Result<u32> {
        let (mut lo, mut hi) = (0u32, self.entry_count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry_at(mid)? < (hash, offset) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Candidates for `hash` in `[from, to)`, at most `max`, ascending or descending. Reads only the run of
    /// entries it returns (plus the binary search), so the work follows the matches.
    pub fn candidates(
        &self,
        hash: u32,
        from: u32,
        to: u32,
        reverse: bool,
        max: usize,
    ) -> std::io::Result<Vec<u32>> {
        let mut out = Vec::new();
        if from >= to || max == 0 {
            return Ok(out);
        }
        let start = self.lower_bound(hash, from)?;
        let end = self.lower_bound(hash, to)?;
        let mut buf = vec![0u8; RUN_CHUNK_ENTRIES * ENTRY_BYTES];
        let mut remaining = (end - start) as usize;
        let mut cursor = if reverse { end } else { start };
        while remaining > 0 && out.len() < max {
            let n = remaining.min(RUN_CHUNK_ENTRIES).min(max - out.len());
            let first = if reverse { cursor - n as u32 } else { cursor };
            let bytes = &mut buf[..n * ENTRY_BYTES];
            self.file.get_io()?.read_exact_at(
                bytes,
                HEADER_BYTES as u64 + u64::from(first) * ENTRY_BYTES as u64,
            )?;
            let chunk = bytes.chunks_exact(ENTRY_BYTES).map(|e| decode_entry(e).1);
            if reverse {
                let mut chunk: Vec<u32> = chunk.collect();
                chunk.reverse();
                out.extend(chunk);
                cursor -= n as u32;
            } else {
                out.extend(chunk);
                cursor += n as u32;
            }
            remaining -= n;
        }
        Ok(out)
    }
}

fn decode_entry(bytes: &[u8]) -> (u32, u32) {
    let hash = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let offset = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    (hash, offset)
}

pub(crate) fn path_in(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(crate::segment::file_name(base_offset, SUFFIX))
}

fn encode_header(shape: &SegmentShape, entry_count: u32, entries_crc: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..16].copy_from_slice(&shape.base_offset.to_be_bytes());
    h[16..24].copy_from_slice(&shape.next_offset.to_be_bytes());
    h[24..32].copy_from_slice(&shape.log_bytes.to_be_bytes());
    h[32..36].copy_from_slice(&entry_count.to_be_bytes());
    h[36..40].copy_from_slice(&entries_crc.to_be_bytes());
    let header_crc = crc32c::crc32c(&h[0..40]);
    h[40..44].copy_from_slice(&header_crc.to_be_bytes());
    h
}

/// Writes `building` as the sealed index of the segment `shape` describes: to a temporary file, renamed into
/// place, so a crash leaves the old file, no file, or the whole new one (and the checks catch anything else).
/// No fsync: a lost file is rebuilt from the log.
pub(crate) fn write_file(
    dir: &Path,
    shape: &SegmentShape,
    building: &Building,
    handles: &Arc<FileHandles>,
) -> std::io::Result<SealedKeyIndex> {
    let entries = building.sorted_entries();
    let entry_count = u32::try_from(entries.len())
        .map_err(|_| std::io::Error::other("more key index entries than a segment can hold"))?;
    let mut body = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for (hash, offset) in &entries {
        body.extend_from_slice(&hash.to_be_bytes());
        body.extend_from_slice(&offset.to_be_bytes());
    }
    let header = encode_header(shape, entry_count, crc32c::crc32c(&body));
    let path = path_in(dir, shape.base_offset);
    let tmp = path.with_extension("keyindex.tmp");
    {
        let mut file = File::create(&tmp)?;
        file.write_all(&header)?;
        file.write_all(&body)?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(SealedKeyIndex {
        file: CachedFile::closed(handles, &path),
        path,
        entry_count,
    })
}

/// What a key index file says about itself (for `annal dump-log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndexSummary {
    pub base_offset: i64,
    pub next_offset: i64,
    pub log_bytes: u64,
    pub entry_count: u32,
    pub distinct_hashes: u64,
}

/// Reads and checks the file at `path`: size, magic, both checksums, entries in order and inside the offsets
/// the header claims. Reads in fixed chunks, so a corrupt or huge file costs no allocation. The error says which
/// check failed.
pub fn inspect_file(path: &Path) -> Result<KeyIndexSummary, String> {
    let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat: {e}"))?
        .len();
    if len < HEADER_BYTES as u64 {
        return Err(format!(
            "{len} bytes is shorter than the {HEADER_BYTES}-byte header"
        ));
    }
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut header, 0)
        .map_err(|e| format!("cannot read the header: {e}"))?;
    if header[0..8] != MAGIC {
        return Err("bad magic (not an Annal key index, or another version)".into());
    }
    let field_u32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let field_u64 = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_be_bytes(b)
    };
    if crc32c::crc32c(&header[0..40]) != field_u32(40) {
        return Err("header checksum mismatch".into());
    }
    let base_offset = field_u64(8) as i64;
    let next_offset = field_u64(16) as i64;
    let log_bytes = field_u64(24);
    let entry_count = field_u32(32);
    let entries_crc = field_u32(36);
    let expected_len = HEADER_BYTES as u64 + u64::from(entry_count) * ENTRY_BYTES as u64;
    if len != expected_len {
        return Err(format!(
            "{len} bytes, but {entry_count} entries need {expected_len}"
        ));
    }
    let span = next_offset.checked_sub(base_offset).filter(|s| *s >= 0);
    let Some(span) = span else {
        return Err(format!(
            "next offset {next_offset} is before base offset {base_offset}"
        ));
    };
    if i64::from(entry_count) > span {
        return Err(format!(
            "{entry_count} entries for a segment of {span} offsets"
        ));
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(HEADER_BYTES as u64))
        .map_err(|e| format!("cannot seek: {e}"))?;
    let mut crc = 0u32;
    let mut previous: Option<(u32, u32)> = None;
    let mut distinct_hashes = 0u64;
    let mut chunk = vec![0u8; RUN_CHUNK_ENTRIES * ENTRY_BYTES];
    let mut left = entry_count as usize;
    while left > 0 {
        let n = left.min(RUN_CHUNK_ENTRIES);
        let bytes = &mut chunk[..n * ENTRY_BYTES];
        reader
            .read_exact(bytes)
            .map_err(|e| format!("cannot read the entries: {e}"))?;
        crc = crc32c::crc32c_append(crc, bytes);
        for e in bytes.chunks_exact(ENTRY_BYTES) {
            let entry = decode_entry(e);
            if i64::from(entry.1) >= span {
                return Err(format!(
                    "entry ({:#010x}, {}) points past the segment's {span} offsets",
                    entry.0, entry.1
                ));
            }
            if previous.is_some_and(|p| p >= entry) {
                return Err("entries out of order".into());
            }
            if previous.is_none_or(|p| p.0 != entry.0) {
                distinct_hashes += 1;
            }
            previous = Some(entry);
        }
        left -= n;
    }
    if crc != entries_crc {
        return Err("entries checksum mismatch".into());
    }
    Ok(KeyIndexSummary {
        base_offset,
        next_offset,
        log_bytes,
        entry_count,
        distinct_hashes,
    })
}

/// Opens the file of the segment `shape` describes if it passes every check and describes exactly this
/// segment; otherwise the reason, and the caller rebuilds.
pub(crate) fn load(
    dir: &Path,
    shape: &SegmentShape,
    handles: &Arc<FileHandles>,
) -> Result<SealedKeyIndex, String> {
    let path = path_in(dir, shape.base_offset);
    if !path.exists() {
        return Err("no key index file".into());
    }
    let summary = inspect_file(&path)?;
    let found = SegmentShape {
        base_offset: summary.base_offset,
        next_offset: summary.next_offset,
        log_bytes: summary.log_bytes,
    };
    if found != *shape {
        return Err(format!(
            "the file describes {found:?}, the segment is {shape:?}"
        ));
    }
    Ok(SealedKeyIndex {
        file: CachedFile::closed(handles, &path),
        path,
        entry_count: summary.entry_count,
    })
}

/// Removes the file of the segment at `base_offset`, if any.
pub(crate) fn remove(dir: &Path, base_offset: i64) -> std::io::Result<()> {
    match std::fs::remove_file(path_in(dir, base_offset)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether a batch's records belong in the key index: control batches hold markers, not user keys.
pub(crate) fn indexable(header: &BatchHeader) -> bool {
    !header.is_control() && header.records_count > 0
}

/// Parses a record's stored headers (count varint, then key/value pairs) into owned pairs; `None` if they do
/// not parse (the record is still returned, without headers).
pub fn parse_headers(mut bytes: &[u8]) -> Option<Vec<(String, Option<Vec<u8>>)>> {
    let (count, used) = crate::batch::read_varint(bytes)?;
    bytes = &bytes[used..];
    if count < 0 || count as usize > bytes.len() {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (key_len, used) = crate::batch::read_varint(bytes)?;
        bytes = &bytes[used..];
        let key_len = usize::try_from(key_len)
            .ok()
            .filter(|&l| l <= bytes.len())?;
        let key = String::from_utf8_lossy(&bytes[..key_len]).into_owned();
        bytes = &bytes[key_len..];
        let (value_len, used) = crate::batch::read_varint(bytes)?;
        bytes = &bytes[used..];
        let value = if value_len < 0 {
            None
        } else {
            let value_len = (value_len as usize <= bytes.len()).then_some(value_len as usize)?;
            let v = bytes[..value_len].to_vec();
            bytes = &bytes[value_len..];
            Some(v)
        };
        out.push((key, value));
    }
    Some(out)
}

/// Checks the file at `index_path` (see [`inspect_file`]) and then against the segment `log_path`: the header
/// must describe the log as it is (size, offsets), and the entries must be exactly the keyed records of the log
/// (rebuilt here from the log, every codec, batches decompressing to at most `limit` bytes). For
/// `annal dump-log`; the broker never needs it (it rebuilds a file that fails the cheap checks).
pub fn verify_against_log(
    index_path: &Path,
    log_path: &Path,
    limit: usize,
) -> Result<KeyIndexSummary, String> {
    let summary = inspect_file(index_path)?;
    let log =
        File::open(log_path).map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let log_bytes = log
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", log_path.display()))?
        .len();
    if log_bytes != summary.log_bytes {
        return Err(format!(
            "written for {} bytes of log, the log has {log_bytes} (a broker rebuilds it)",
            summary.log_bytes
        ));
    }
    let mut building = Building::default();
    let mut position = 0u64;
    let mut next_offset = summary.base_offset;
    let mut head = [0u8; crate::batch::HEADER_SIZE];
    let mut bytes = Vec::new();
    while position < log_bytes {
        log.read_exact_at(&mut head, position)
            .map_err(|e| format!("cannot read the batch header at byte {position}: {e}"))?;
        let header = BatchHeader::parse(&head).ok_or("truncated batch header")?;
        let size = header.size() as u64;
        if size < crate::batch::HEADER_SIZE as u64 || size > log_bytes - position {
            return Err(format!("the batch at byte {position} overruns the log"));
        }
        let relative = header.last_offset() - summary.base_offset;
        if header.base_offset < summary.base_offset
            || !(0..=i64::from(u32::MAX)).contains(&relative)
        {
            return Err(format!(
                "the batch at byte {position} has offsets outside the segment"
            ));
        }
        if indexable(&header) {
            bytes.resize(header.size(), 0);
            log.read_exact_at(&mut bytes, position)
                .map_err(|e| format!("cannot read the batch at byte {position}: {e}"))?;
            if let Ok(decoded) = crate::records::DecodedBatch::new(&bytes, limit) {
                for r in decoded.records().map_while(Result::ok) {
                    if let Some(key) = r.key {
                        let rel = r.offset - summary.base_offset;
                        if !(0..=i64::from(u32::MAX)).contains(&rel) {
                            return Err(format!("record offset {} outside the segment", r.offset));
                        }
                        building.add(key_hash(key), rel as u32);
                    }
                }
            }
        }
        next_offset = header.next_offset();
        position += size;
    }
    if next_offset != summary.next_offset {
        return Err(format!(
            "written for next offset {}, the log ends at {next_offset}",
            summary.next_offset
        ));
    }
    let expected = building.sorted_entries();
    if expected.len() != summary.entry_count as usize {
        return Err(format!(
            "{} entries, the log has {} keyed records",
            summary.entry_count,
            expected.len()
        ));
    }
    let file = File::open(index_path).map_err(|e| format!("cannot open: {e}"))?;
    let mut buf = [0u8; ENTRY_BYTES];
    for (i, want) in expected.iter().enumerate() {
        file.read_exact_at(&mut buf, HEADER_BYTES as u64 + (i * ENTRY_BYTES) as u64)
            .map_err(|e| format!("cannot read entry {i}: {e}"))?;
        let got = decode_entry(&buf);
        if got != *want {
            return Err(format!(
                "entry {i} is (hash {:#010x}, offset +{}), the log says (hash {:#010x}, offset +{})",
                got.0, got.1, want.0, want.1
            ));
        }
    }
    Ok(summary)
}
