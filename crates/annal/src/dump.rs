//! `annal dump-log`: inspect a partition directory or a segment file, in the spirit of kafka-dump-log.
//!
//! Strictly read-only: files are opened for reading and never changed (the engine's `Log::open` would recover
//! and rewrite them, so it is not used here). Everything read from disk is checked before use: a corrupt or
//! truncated file is reported as a PROBLEM line and the command exits non-zero, it never panics, and no
//! allocation is sized by an unchecked number from a file (batch sizes are capped, decompression is bounded).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use annal_log::batch::{BatchHeader, Compression, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2};
use anyhow::Context;

#[derive(clap::Args)]
pub struct DumpArgs {
    /// A partition directory, or one file of it: `.log`, `.index`, `.timeindex`, `.keyindex`, `.snapshot`,
    /// `annal.checkpoint`.
    pub path: PathBuf,
    /// Decode every record (offset, timestamp, key, value, headers), decompressing gzip/snappy/lz4/zstd batches.
    #[arg(long)]
    pub print_records: bool,
    /// Dump the `.index` and `.timeindex` entries and check each against the log (like --index-sanity-check).
    #[arg(long)]
    pub index: bool,
    /// For a directory: print every batch of every segment, not only the per-segment summary.
    #[arg(long)]
    pub batches: bool,
    /// The largest batch, compressed or decompressed, whose records are decoded (bigger ones are reported).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_batch_bytes: usize,
}

pub fn run(args: &DumpArgs) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = Out {
        w: BufWriter::new(stdout.lock()),
        problems: 0,
    };
    let result = dump_path(&mut out, args).and_then(|()| Ok(out.w.flush()?));
    match result {
        // `annal dump-log ... | head` closes the pipe early: not an error.
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
        Ok(()) if out.problems > 0 => anyhow::bail!(
            "{} problem(s) found in {} (see the PROBLEM lines); the files were not modified. A broker opening this \
             partition recovers it: torn tails are cut and indexes rebuilt",
            out.problems,
            args.path.display()
        ),
        Ok(()) => Ok(()),
    }
}

/// Standard output plus a count of the problems reported so far.
struct Out<W: Write> {
    w: W,
    problems: usize,
}

impl<W: Write> Out<W> {
    fn line(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        writeln!(self.w, "{}", text.as_ref())
    }

    fn problem(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        self.problems += 1;
        writeln!(self.w, "PROBLEM: {}", text.as_ref())
    }
}

fn dump_path<W: Write>(out: &mut Out<W>, args: &DumpArgs) -> anyhow::Result<()> {
    let path = &args.path;
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_dir() {
        return dump_directory(out, path, args);
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "annal.checkpoint" {
        return dump_checkpoint(out, path);
    }
    let Some(base_offset) = segment_base(name) else {
        anyhow::bail!(
            "{} is not a partition file: expected a directory or <20-digit offset>.log/.index/.timeindex/.keyindex/.snapshot",
            path.display()
        );
    };
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("log") => {
            out.line(format!("Dumping {}", path.display()))?;
            out.line(format!("Log starting offset: {base_offset}"))?;
            let summary = scan_segment(out, path, base_offset, ScanMode::from(args))?;
            if args.index {
                dump_indexes(out, path, base_offset, &summary)?;
            }
        }
        Some("index") => {
            let log = path.with_extension("log");
            let summary = scan_segment(out, &log, base_offset, ScanMode::Quiet)?;
            dump_offset_index(out, path, &log, base_offset, &summary)?;
        }
        Some("timeindex") => {
            let log = path.with_extension("log");
            let summary = scan_segment(out, &log, base_offset, ScanMode::Quiet)?;
            dump_time_index(out, path, &log, base_offset, &summary)?;
        }
        Some("snapshot") => dump_snapshot(out, path)?,
        Some("keyindex") => {
            out.line(format!("Dumping {}", path.display()))?;
            dump_key_index(out, path, &path.with_extension("log"), args)?;
        }
        _ => anyhow::bail!("{}: unknown file type", path.display()),
    }
    Ok(())
}

/// The base offset encoded in a segment file name (`00000000000000000042.log` → 42).
fn segment_base(name: &str) -> Option<i64> {
    let (stem, _) = name.split_once('.')?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

// ---------------------------------------------------------------------------------------------------------------
// Directory summary

fn dump_directory<W: Write>(out: &mut Out<W>, dir: &Path, args: &DumpArgs) -> anyhow::Result<()> {
    let mut logs = Vec::new();
    let mut snapshots = Vec::new();
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        match (segment_base(&name), name.rsplit_once('.').map(|(_, e)| e)) {
            (Some(base), Some("log")) => logs.push((base, entry.path())),
            (Some(base), Some("snapshot")) => snapshots.push((base, entry.path())),
            (Some(_), Some("index" | "timeindex" | "keyindex")) => {}
            _ if name == "annal.checkpoint" => {}
            _ => others.push(name),
        }
    }
    logs.sort();
    snapshots.sort();
    others.sort();
    out.line(format!("Partition directory {}", dir.display()))?;
    let checkpoint = dir.join("annal.checkpoint");
    if checkpoint.exists() {
        dump_checkpoint(out, &checkpoint)?;
    } else {
        out.line("annal.checkpoint: missing (a broker would scan every segment on open)")?;
    }
    if logs.is_empty() {
        out.line("No segments (.log files).")?;
    }
    let mut previous_next: Option<i64> = None;
    let (mut total_bytes, mut total_batches, mut total_records) = (0u64, 0u64, 0u64);
    let mut first_offset = None;
    for (base, path) in &logs {
        let mode = if args.batches || args.print_records {
            out.line(format!("Dumping {}", path.display()))?;
            ScanMode::from(args)
        } else {
            ScanMode::Quiet
        };
        let s = scan_segment(out, path, *base, mode)?;
        let index_entries = entry_count(&path.with_extension("index"), OFFSET_ENTRY);
        let time_entries = entry_count(&path.with_extension("timeindex"), TIME_ENTRY);
        let offsets = match (s.first_offset, s.last_offset) {
            (Some(first), Some(last)) => format!("{first}..{last}"),
            _ => "none".into(),
        };
        out.line(format!(
            "segment {}: baseOffset: {base} size: {} batches: {} records: {} offsets: {offsets} maxTimestamp: {} \
             indexEntries: {index_entries} timeIndexEntries: {time_entries}{}",
            file_name(path),
            s.file_size,
            s.batches,
            s.records,
            s.max_timestamp.map_or("none".into(), format_timestamp),
            if s.corrupt_at.is_some() { " (corrupt, see above)" } else { "" },
        ))?;
        dump_key_index(out, &path.with_extension("keyindex"), path, args)?;
        if let Some(prev) = previous_next {
            if *base < prev {
                out.problem(format!(
                    "segment {} starts at offset {base}, inside the previous segment (which ends at {})",
                    file_name(path),
                    prev - 1
                ))?;
            }
        }
        previous_next = s
            .last_offset
            .map(|l| l + 1)
            .or(previous_next)
            .max(Some(*base));
        first_offset = first_offset.or(s.first_offset);
        total_bytes += s.file_size;
        total_batches += s.batches;
        total_records += s.records;
        if args.index {
            dump_indexes(out, path, *base, &s)?;
        }
    }
    out.line(format!(
        "Total: {} segment(s), {total_bytes} bytes, {total_batches} batches, {total_records} records, offsets {}",
        logs.len(),
        match (first_offset, previous_next) {
            (Some(first), Some(next)) if next > first => format!("{first}..{} (log end offset {next})", next - 1),
            (_, Some(next)) => format!("none (log end offset {next})"),
            _ => "none".into(),
        }
    ))?;
    for (_, path) in &snapshots {
        dump_snapshot(out, path)?;
    }
    for name in others {
        out.line(format!("other file: {name}"))?;
    }
    Ok(())
}

/// A segment's key index (`key.index.enable`), if it has one: its summary, checked (checksums, order, bounds)
/// and rebuilt from the log and compared. A bad one is reported; a broker rebuilds it (derived data).
fn dump_key_index<W: Write>(
    out: &mut Out<W>,
    index: &Path,
    log: &Path,
    args: &DumpArgs,
) -> anyhow::Result<()> {
    if !index.exists() {
        return Ok(());
    }
    match annal_log::key_index::verify_against_log(index, log, args.max_batch_bytes) {
        Ok(s) => out.line(format!(
            "  key index {}: entries: {} distinctHashes: {} baseOffset: {} nextOffset: {} logBytes: {} (checked against the log)",
            file_name(index),
            s.entry_count,
            s.distinct_hashes,
            s.base_offset,
            s.next_offset,
            s.log_bytes
        ))?,
        Err(reason) => out.problem(format!(
            "key index {}: {reason}; it is derived data: a broker rebuilds it (or delete the file)",
            file_name(index)
        ))?,
    }
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn format_timestamp(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if ms >= 0 => format!("{ms} ({})", t.format("%Y-%m-%dT%H:%M:%S%.3fZ")),
        _ => ms.to_string(),
    }
}

const OFFSET_ENTRY: u64 = 8;
const TIME_ENTRY: u64 = 12;

fn entry_count(path: &Path, entry_size: u64) -> String {
    let bytes = match read_index(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return "missing".into(),
        Err(e) => return format!("unreadable ({e:#})"),
    };
    let whole = bytes.len() / entry_size as usize;
    let live = live_entries(&bytes, entry_size as usize);
    let mut text = live.to_string();
    if live < whole {
        let _ = write!(text, " (+{} preallocated)", whole - live);
    }
    let torn = bytes.len() % entry_size as usize;
    if torn > 0 {
        let _ = write!(text, " (+{torn} torn bytes)");
    }
    text
}

/// Entries before the first all-zero one. Kafka preallocates the active segment's index files
/// (`segment.index.bytes`) and fills them from the front; an all-zero entry is never a real one (the first batch
/// of a segment gets no index entry, and timestamps are not 0), so it marks the end.
fn live_entries(bytes: &[u8], entry_size: usize) -> usize {
    bytes
        .chunks_exact(entry_size)
        .position(|e| e.iter().all(|b| *b == 0))
        .unwrap_or(bytes.len() / entry_size)
}

fn dump_checkpoint<W: Write>(out: &mut Out<W>, path: &Path) -> anyhow::Result<()> {
    let mut text = String::new();
    File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .with_context(|| format!("cannot read {}", path.display()))?;
    let fields: Vec<&str> = text.lines().skip(1).collect();
    if text.lines().next() == Some("annal-checkpoint 1") && fields.len() == 3 {
        out.line(format!("annal.checkpoint: {}", fields.join(" ")))?;
    } else {
        out.problem(format!(
            "{} is not a valid annal checkpoint (expected 'annal-checkpoint 1' and 3 fields): {text:?}",
            path.display()
        ))?;
    }
    Ok(())
}

fn dump_snapshot<W: Write>(out: &mut Out<W>, path: &Path) -> anyhow::Result<()> {
    const SNAPSHOT_MAX: u64 = 256 << 20;
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(SNAPSHOT_MAX + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read {}", path.display()))?;
    out.line(format!(
        "producer snapshot {} ({} bytes)",
        file_name(path),
        bytes.len()
    ))?;
    if bytes.len() as u64 > SNAPSHOT_MAX {
        return Ok(out.problem(format!(
            "{} is larger than {SNAPSHOT_MAX} bytes; not decoded",
            path.display()
        ))?);
    }
    match annal_log::producer::ProducerStateManager::from_snapshot_bytes(&bytes) {
        Ok(state) => {
            let mut producers: Vec<_> = state.producers().collect();
            producers.sort_by_key(|p| p.producer_id);
            if producers.is_empty() {
                out.line("  (no producers)")?;
            }
            for p in producers {
                let mut line = format!(
                    "  producerId: {} producerEpoch: {} coordinatorEpoch: {} currentTxnFirstOffset: {} lastTimestamp: {}",
                    p.producer_id,
                    p.epoch,
                    p.coordinator_epoch,
                    p.current_txn_first_offset.map_or("none".into(), |o| o.to_string()),
                    p.last_timestamp
                );
                if let Some(b) = p.batches.back() {
                    let _ = write!(
                        line,
                        " firstSequence: {} lastSequence: {} lastOffset: {} offsetDelta: {} timestamp: {}",
                        b.first_sequence,
                        b.last_sequence,
                        b.last_offset,
                        b.last_offset - b.first_offset,
                        b.max_timestamp
                    );
                }
                out.line(line)?;
            }
        }
        Err(reason) => out.problem(format!("{}: {reason}", path.display()))?,
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Segment scan

#[derive(Clone, Copy, PartialEq, Eq)]
enum ScanMode {
    /// Count and check only; problems are still reported.
    Quiet,
    /// One line per batch.
    Batches,
    /// One line per batch and per record.
    Records { max_batch_bytes: usize },
}

impl From<&DumpArgs> for ScanMode {
    fn from(args: &DumpArgs) -> Self {
        if args.print_records {
            ScanMode::Records {
                max_batch_bytes: args.max_batch_bytes,
            }
        } else {
            ScanMode::Batches
        }
    }
}

/// What a scan of one `.log` file found.
#[derive(Default)]
struct SegmentSummary {
    file_size: u64,
    /// Bytes of whole batches before any corruption.
    valid_bytes: u64,
    batches: u64,
    records: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    max_timestamp: Option<i64>,
    /// Where the scan had to stop, if it did.
    corrupt_at: Option<u64>,
}

/// Bytes read at a time when checking CRCs of batches that are not decoded.
const CHUNK: usize = 1 << 20;

fn scan_segment<W: Write>(
    out: &mut Out<W>,
    path: &Path,
    base_offset: i64,
    mode: ScanMode,
) -> anyhow::Result<SegmentSummary> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let file_size = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    let mut reader = BufReader::with_capacity(CHUNK, file);
    let mut s = SegmentSummary {
        file_size,
        ..SegmentSummary::default()
    };
    let mut position = 0u64;
    let mut next_expected = base_offset;
    let mut chunk = vec![0u8; CHUNK];
    let name = file_name(path);
    while position < file_size {
        let remaining = file_size - position;
        if remaining < HEADER_SIZE as u64 {
            out.problem(format!(
                "{name}: {remaining} bytes at position {position} are too few for a batch header ({HEADER_SIZE}): torn tail"
            ))?;
            s.corrupt_at = Some(position);
            break;
        }
        let mut head = [0u8; HEADER_SIZE];
        reader
            .read_exact(&mut head)
            .with_context(|| format!("cannot read {} at position {position}", path.display()))?;
        let header = BatchHeader::parse(&head).expect("HEADER_SIZE bytes");
        if let Some(reason) = implausible(&header, remaining) {
            out.problem(format!("{name}: no valid batch at position {position}: {reason}; {remaining} bytes from here on are unreadable"))?;
            s.corrupt_at = Some(position);
            break;
        }
        let size = header.size();
        let decode = match mode {
            ScanMode::Records { max_batch_bytes } => size <= max_batch_bytes,
            _ => false,
        };
        // The CRC covers attributes..end: the rest of the header, then the records.
        let mut crc = crc32c::crc32c(&head[annal_log::batch::field::ATTRIBUTES..]);
        let mut body = Vec::new();
        let mut left = size - HEADER_SIZE;
        if decode {
            body.resize(left, 0);
            reader.read_exact(&mut body).with_context(|| {
                format!("cannot read {} at position {position}", path.display())
            })?;
            crc = crc32c::crc32c_append(crc, &body);
        } else {
            while left > 0 {
                let n = left.min(CHUNK);
                reader.read_exact(&mut chunk[..n]).with_context(|| {
                    format!("cannot read {} at position {position}", path.display())
                })?;
                crc = crc32c::crc32c_append(crc, &chunk[..n]);
                left -= n;
            }
        }
        let crc_valid = crc == header.crc;
        if mode != ScanMode::Quiet {
            out.line(batch_line(&header, position, crc_valid))?;
        }
        if !crc_valid {
            out.problem(format!(
                "{name}: batch at position {position} (offsets {}..{}) fails its CRC-32C: stored {}, computed {crc}",
                header.base_offset,
                header.last_offset(),
                header.crc
            ))?;
        }
        if header.base_offset < next_expected {
            out.problem(format!(
                "{name}: batch at position {position} starts at offset {} but offsets up to {} came before it",
                header.base_offset,
                next_expected - 1
            ))?;
        }
        if header.records_count != header.last_offset_delta.saturating_add(1) {
            out.problem(format!(
                "{name}: batch at position {position} holds {} records but its last offset delta is {}",
                header.records_count, header.last_offset_delta
            ))?;
        }
        if let ScanMode::Records { max_batch_bytes } = mode {
            if !decode {
                out.problem(format!(
                    "{name}: batch at position {position} is {size} bytes, over --max-batch-bytes {max_batch_bytes}; records not decoded"
                ))?;
            } else if !crc_valid {
                out.line("  | records not decoded: the batch fails its CRC")?;
            } else {
                print_records(out, &name, position, &header, &body, max_batch_bytes)?;
            }
        }
        s.batches += 1;
        s.records += header.records_count.max(0) as u64;
        s.first_offset.get_or_insert(header.base_offset);
        s.last_offset = Some(header.last_offset());
        s.max_timestamp = s.max_timestamp.max(Some(header.max_timestamp));
        next_expected = header.next_offset().max(next_expected);
        position += size as u64;
        s.valid_bytes = position;
    }
    if let Some(at) = s.corrupt_at {
        if mode != ScanMode::Quiet {
            out.line(format!(
                "Found {} invalid bytes at the end of {name}",
                file_size - at
            ))?;
        }
    }
    Ok(s)
}

/// Why a header read from disk cannot start a batch, if it cannot.
fn implausible(header: &BatchHeader, remaining: u64) -> Option<String> {
    let min_length = (HEADER_SIZE - LOG_OVERHEAD) as i32;
    if header.length < min_length {
        return Some(format!(
            "length field {} is below the minimum {min_length}",
            header.length
        ));
    }
    if header.size() as u64 > remaining {
        return Some(format!(
            "the batch declares {} bytes but only {remaining} remain (truncated)",
            header.size()
        ));
    }
    if header.magic != MAGIC_V2 {
        return Some(format!("magic byte {} is not 2", header.magic));
    }
    // Kafka offsets are non-negative; the bound keeps `base + delta + 1` from overflowing.
    if header.base_offset < 0 || header.base_offset > i64::MAX - i64::from(i32::MAX) - 1 {
        return Some(format!(
            "base offset {} is out of range",
            header.base_offset
        ));
    }
    if header.last_offset_delta < 0 {
        return Some(format!(
            "last offset delta {} is negative",
            header.last_offset_delta
        ));
    }
    None
}

fn codec_name(header: &BatchHeader) -> String {
    header.compression().map_or_else(
        || format!("unknown({})", header.attributes & 0x07),
        |c| c.name().to_string(),
    )
}

/// One batch, as kafka-dump-log prints it, plus the base timestamp and the CRC's verdict.
fn batch_line(h: &BatchHeader, position: u64, crc_valid: bool) -> String {
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} \
         partitionLeaderEpoch: {} isTransactional: {} isControl: {} position: {position} {}: {} baseTimestamp: {} \
         size: {} magic: {} compresscodec: {} crc: {} isvalid: {crc_valid}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        if h.base_sequence < 0 { -1 } else { h.last_sequence() },
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        if h.is_log_append_time() { "LogAppendTime" } else { "CreateTime" },
        h.max_timestamp,
        h.base_timestamp,
        h.size(),
        h.magic,
        codec_name(h),
        h.crc,
    )
}

// ---------------------------------------------------------------------------------------------------------------
// Records

/// Prints the records of one whole, CRC-valid batch (`body` = the bytes after the header).
fn print_records<W: Write>(
    out: &mut Out<W>,
    name: &str,
    position: u64,
    header: &BatchHeader,
    body: &[u8],
    max_bytes: usize,
) -> io::Result<()> {
    let records = match header.compression() {
        Some(Compression::None) => Ok(body.to_vec()),
        Some(codec) => decompress(codec, body, max_bytes),
        None => Err(format!(
            "unknown compression codec {}",
            header.attributes & 0x07
        )),
    };
    let records = match records {
        Ok(r) => r,
        Err(reason) => {
            return out.problem(format!(
                "{name}: batch at position {position}: records not decoded: {reason}"
            ));
        }
    };
    let mut rest = records.as_slice();
    let time_type = if header.is_log_append_time() {
        "LogAppendTime"
    } else {
        "CreateTime"
    };
    for index in 0..header.records_count.max(0) {
        let record = match decode_record(&mut rest) {
            Ok(r) => r,
            Err(reason) => {
                return out.problem(format!(
                    "{name}: batch at position {position}, record {index}: {reason}; the rest of the batch is not decoded"
                ));
            }
        };
        let offset = header.base_offset + i64::from(record.offset_delta);
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        let sequence = if header.base_sequence < 0 {
            -1
        } else {
            annal_log::batch::add_sequence(header.base_sequence, record.offset_delta)
        };
        let header_keys: Vec<String> = record.headers.iter().map(|(k, _)| printable(k)).collect();
        let mut line = format!(
            "| offset: {offset} {time_type}: {timestamp} keySize: {} valueSize: {} sequence: {sequence} headerKeys: [{}]",
            record.key.map_or(-1, |k| k.len() as i64),
            record.value.map_or(-1, |v| v.len() as i64),
            header_keys.join(",")
        );
        if header.is_control() {
            line.push_str(&control_record(record.key, record.value));
        } else {
            if let Some(key) = record.key {
                let _ = write!(line, " key: {}", printable(key));
            }
            if let Some(value) = record.value {
                let _ = write!(line, " payload: {}", printable(value));
            }
        }
        out.line(line)?;
    }
    if !rest.is_empty() {
        out.problem(format!(
            "{name}: batch at position {position}: {} bytes follow its last record",
            rest.len()
        ))?;
    }
    Ok(())
}

/// A record of a v2 batch, borrowing its key, value and headers from the (decompressed) records bytes.
struct RecordView<'a> {
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// Decodes one record (length-prefixed, as in Kafka's `DefaultRecord`) and advances `input` past it. Every length
/// is checked against the bytes that remain, so nothing here allocates more than the input could hold.
fn decode_record<'a>(input: &mut &'a [u8]) -> Result<RecordView<'a>, String> {
    let length = take_varint(input, "record length")?;
    let length = usize::try_from(length).map_err(|_| format!("negative record length {length}"))?;
    if length > input.len() {
        return Err(format!(
            "record length {length} overruns the {} bytes left",
            input.len()
        ));
    }
    let (mut body, rest) = input.split_at(length);
    *input = rest;
    let body = &mut body;
    let _attributes = take(body, 1, "attributes")?;
    let timestamp_delta = take_varlong(body, "timestamp delta")?;
    let offset_delta = take_varint(body, "offset delta")?;
    let key = take_bytes(body, "key")?;
    let value = take_bytes(body, "value")?;
    let count = take_varint(body, "header count")?;
    let count = usize::try_from(count).map_err(|_| format!("negative header count {count}"))?;
    // Each header needs at least two bytes (two length varints).
    if count > body.len() / 2 {
        return Err(format!(
            "header count {count} overruns the {} bytes left",
            body.len()
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let key = take_bytes(body, "header key")?.ok_or("null header key")?;
        headers.push((key, take_bytes(body, "header value")?));
    }
    if !body.is_empty() {
        return Err(format!("{} bytes follow the record's headers", body.len()));
    }
    Ok(RecordView {
        timestamp_delta,
        offset_delta,
        key,
        value,
        headers,
    })
}

fn take<'a>(input: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
    if n > input.len() {
        return Err(format!("{what}: needs {n} bytes, {} left", input.len()));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn take_varint(input: &mut &[u8], what: &str) -> Result<i32, String> {
    let (value, used) =
        annal_log::batch::read_varint(input).ok_or_else(|| format!("{what}: malformed varint"))?;
    *input = &input[used..];
    Ok(value)
}

fn take_varlong(input: &mut &[u8], what: &str) -> Result<i64, String> {
    let (value, used) = annal_log::batch::read_varlong(input)
        .ok_or_else(|| format!("{what}: malformed varlong"))?;
    *input = &input[used..];
    Ok(value)
}

/// A varint-length-prefixed byte string; length -1 is null.
fn take_bytes<'a>(input: &mut &'a [u8], what: &str) -> Result<Option<&'a [u8]>, String> {
    let length = take_varint(input, what)?;
    if length < 0 {
        return if length == -1 {
            Ok(None)
        } else {
            Err(format!("{what}: length {length}"))
        };
    }
    take(input, length as usize, what).map(Some)
}

/// UTF-8 text as is (control characters escaped, so one record stays one line), anything else as hex.
fn printable(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text
            .chars()
            .flat_map(|c| {
                if c.is_control() {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect(),
        Err(_) => {
            let mut hex = String::with_capacity(2 + bytes.len() * 2);
            hex.push_str("0x");
            for b in bytes {
                let _ = write!(hex, "{b:02x}");
            }
            hex
        }
    }
}

/// Kafka's control records: key = version i16, type i16; for transaction markers value = version i16,
/// coordinator epoch i32.
fn control_record(key: Option<&[u8]>, value: Option<&[u8]>) -> String {
    let Some(key) = key.filter(|k| k.len() >= 4) else {
        return " controlType: malformed key".into();
    };
    let type_id = i16::from_be_bytes([key[2], key[3]]);
    let name = match type_id {
        0 => "ABORT",
        1 => "COMMIT",
        2 => "LEADER_CHANGE",
        3 => "SNAPSHOT_HEADER",
        4 => "SNAPSHOT_FOOTER",
        5 => "KRAFT_VERSION",
        6 => "KRAFT_VOTERS",
        _ => "UNKNOWN",
    };
    match (type_id, value) {
        (0 | 1, Some(v)) if v.len() >= 6 => format!(
            " endTxnMarker: {name} coordinatorEpoch: {}",
            i32::from_be_bytes([v[2], v[3], v[4], v[5]])
        ),
        _ => format!(" controlType: {name}({type_id})"),
    }
}

/// Decompresses a batch's records, refusing to produce more than `max_bytes`.
/// Kafka's snappy is xerial-framed (with a raw-snappy fallback, as Kafka's reader has); its lz4 is the LZ4 frame
/// format; gzip may hold several members.
fn decompress(codec: Compression, input: &[u8], max_bytes: usize) -> Result<Vec<u8>, String> {
    let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        reader
            .take((max_bytes as u64).saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| format!("{} data is corrupt: {e}", codec.name()))?;
        if out.len() > max_bytes {
            return Err(format!(
                "decompresses to more than --max-batch-bytes {max_bytes}"
            ));
        }
        Ok(out)
    };
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => bounded(&mut flate2::read::MultiGzDecoder::new(input)),
        Compression::Lz4 => bounded(&mut lz4_flex::frame::FrameDecoder::new(input)),
        Compression::Zstd => {
            let mut decoder =
                zstd::stream::read::Decoder::new(input).map_err(|e| format!("zstd: {e}"))?;
            // Bound the decoder's window (and so its memory) to 32 MiB; producers use far less.
            decoder
                .window_log_max(25)
                .map_err(|e| format!("zstd: {e}"))?;
            bounded(&mut decoder)
        }
        Compression::Snappy => snappy_xerial(input, max_bytes),
    }
}

fn snappy_xerial(input: &[u8], max_bytes: usize) -> Result<Vec<u8>, String> {
    const MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
    const HEADER: usize = 16; // magic, version i32, compatible version i32
    let raw = |block: &[u8], out: &mut Vec<u8>| -> Result<(), String> {
        let len = snap::raw::decompress_len(block).map_err(|e| format!("snappy: {e}"))?;
        if out.len() + len > max_bytes {
            return Err(format!(
                "decompresses to more than --max-batch-bytes {max_bytes}"
            ));
        }
        let start = out.len();
        out.resize(start + len, 0);
        snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|e| format!("snappy data is corrupt: {e}"))?;
        Ok(())
    };
    let mut out = Vec::new();
    if input.len() < HEADER || &input[..8] != MAGIC {
        raw(input, &mut out)?;
        return Ok(out);
    }
    let mut rest = &input[HEADER..];
    while !rest.is_empty() {
        let len = take(&mut rest, 4, "snappy block length")?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let block = take(&mut rest, len, "snappy block")?;
        raw(block, &mut out)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------------------------
// Indexes

fn dump_indexes<W: Write>(
    out: &mut Out<W>,
    log: &Path,
    base_offset: i64,
    summary: &SegmentSummary,
) -> anyhow::Result<()> {
    dump_offset_index(out, &log.with_extension("index"), log, base_offset, summary)?;
    dump_time_index(
        out,
        &log.with_extension("timeindex"),
        log,
        base_offset,
        summary,
    )
}

/// Reads an index file whole; index files are small (`segment.index.bytes`, 10 MiB by default), but a
/// corrupt or foreign file is capped.
/// Reads an index file for dumping and opens its log: reports a missing index (`None`) or a torn last entry, and
/// prints the `Dumping` header both index dumps start with.
fn open_index<W: Write>(
    out: &mut Out<W>,
    path: &Path,
    log_path: &Path,
    entry_size: u64,
) -> anyhow::Result<Option<(Vec<u8>, File)>> {
    let name = file_name(path);
    let Some(bytes) = read_index(path)? else {
        out.line(format!(
            "{name}: missing (a broker rebuilds it from the log)"
        ))?;
        return Ok(None);
    };
    out.line(format!("Dumping {}", path.display()))?;
    if !(bytes.len() as u64).is_multiple_of(entry_size) {
        out.problem(format!(
            "{name}: {} bytes is not a whole number of {entry_size}-byte entries (torn last entry)",
            bytes.len()
        ))?;
    }
    let log =
        File::open(log_path).with_context(|| format!("cannot open {}", log_path.display()))?;
    Ok(Some((bytes, log)))
}

fn read_index(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    const INDEX_MAX: u64 = 1 << 30;
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(INDEX_MAX)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Some(bytes))
}

/// Reads the header of the batch at `position` of the log, if a plausible one starts there.
fn header_at(log: &File, position: u64, valid_bytes: u64) -> Option<BatchHeader> {
    let remaining = valid_bytes.checked_sub(position)?;
    let mut head = [0u8; HEADER_SIZE];
    log.read_exact_at(&mut head, position).ok()?;
    let header = BatchHeader::parse(&head)?;
    implausible(&header, remaining).is_none().then_some(header)
}

fn dump_offset_index<W: Write>(
    out: &mut Out<W>,
    path: &Path,
    log_path: &Path,
    base_offset: i64,
    summary: &SegmentSummary,
) -> anyhow::Result<()> {
    let name = file_name(path);
    let Some((bytes, log)) = open_index(out, path, log_path, OFFSET_ENTRY)? else {
        return Ok(());
    };
    let mut previous: Option<(u32, u32)> = None;
    let mut entries = 0;
    for (i, entry) in bytes.chunks_exact(OFFSET_ENTRY as usize).enumerate() {
        let relative = u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]);
        let position = u32::from_be_bytes([entry[4], entry[5], entry[6], entry[7]]);
        // Kafka preallocates index files: zero entries after the first mean "end of entries".
        if relative == 0 && position == 0 {
            out.line(format!(
                "{name}: zero-filled (preallocated) space from entry {i} on"
            ))?;
            break;
        }
        entries += 1;
        let offset = base_offset.saturating_add(i64::from(relative));
        out.line(format!("offset: {offset} position: {position}"))?;
        if let Some((prev_rel, prev_pos)) = previous {
            if relative <= prev_rel || position <= prev_pos {
                out.problem(format!(
                    "{name}: entry {i} (offset {offset}, position {position}) does not increase on the one before it"
                ))?;
            }
        }
        previous = Some((relative, position));
        match header_at(&log, u64::from(position), summary.valid_bytes) {
            Some(h) if h.last_offset() == offset => {}
            Some(h) => out.problem(format!(
                "{name}: entry {i} says offset {offset} at position {position}, but the batch there ends at offset {}",
                h.last_offset()
            ))?,
            None => out.problem(format!(
                "{name}: entry {i} (offset {offset}) points at position {position}, where no valid batch starts"
            ))?,
        }
    }
    out.line(format!(
        "{name}: {entries} entries checked against {}",
        file_name(log_path)
    ))?;
    Ok(())
}

fn dump_time_index<W: Write>(
    out: &mut Out<W>,
    path: &Path,
    log_path: &Path,
    base_offset: i64,
    summary: &SegmentSummary,
) -> anyhow::Result<()> {
    let name = file_name(path);
    let Some((bytes, log)) = open_index(out, path, log_path, TIME_ENTRY)? else {
        return Ok(());
    };
    // The offset index tells where to start walking for each entry; without it, walk from the start.
    let offset_index: Vec<(i64, u64)> = read_index(&log_path.with_extension("index"))?
        .unwrap_or_default()
        .chunks_exact(OFFSET_ENTRY as usize)
        .map(|e| {
            (
                base_offset.saturating_add(i64::from(u32::from_be_bytes([e[0], e[1], e[2], e[3]]))),
                u64::from(u32::from_be_bytes([e[4], e[5], e[6], e[7]])),
            )
        })
        .collect();
    let mut previous_timestamp: Option<i64> = None;
    let mut entries = 0;
    for (i, entry) in bytes.chunks_exact(TIME_ENTRY as usize).enumerate() {
        let timestamp = i64::from_be_bytes(entry[0..8].try_into().expect("8 bytes"));
        let relative = u32::from_be_bytes([entry[8], entry[9], entry[10], entry[11]]);
        if relative == 0 && timestamp == 0 {
            out.line(format!(
                "{name}: zero-filled (preallocated) space from entry {i} on"
            ))?;
            break;
        }
        entries += 1;
        let offset = base_offset.saturating_add(i64::from(relative));
        out.line(format!("timestamp: {timestamp} offset: {offset}"))?;
        if previous_timestamp.is_some_and(|p| p >= timestamp) {
            out.problem(format!(
                "{name}: entry {i} has timestamp {timestamp}, not above the previous entry's {}",
                previous_timestamp.unwrap_or_default()
            ))?;
        }
        previous_timestamp = Some(timestamp);
        // Walk from the closest offset index entry to the batch holding `offset`.
        let start = offset_index
            .iter()
            .take_while(|(o, _)| *o <= offset)
            .last()
            .map_or(0, |(_, p)| *p);
        let mut position = start;
        let found = loop {
            match header_at(&log, position, summary.valid_bytes) {
                Some(h) if h.last_offset() >= offset => break Some(h),
                Some(h) => position += h.size() as u64,
                None => break None,
            }
        };
        match found {
            Some(h) if h.last_offset() != offset => out.problem(format!(
                "{name}: entry {i} names offset {offset}, which is inside the batch {}..{} rather than its last offset",
                h.base_offset,
                h.last_offset()
            ))?,
            Some(h) if h.max_timestamp != timestamp => out.problem(format!(
                "{name}: entry {i} says timestamp {timestamp} for offset {offset}, but that batch's max timestamp is {}",
                h.max_timestamp
            ))?,
            Some(_) => {}
            None => out.problem(format!(
                "{name}: entry {i} names offset {offset}, which no valid batch of the log holds"
            ))?,
        }
    }
    out.line(format!(
        "{name}: {entries} entries checked against {}",
        file_name(log_path)
    ))?;
    Ok(())
}
