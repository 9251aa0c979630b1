//! Property tests: random sequences of log operations checked against a simple in-memory model.
//!
//! The model is a list of the batches physically present (with their final bytes), the log start and end
//! offsets, and the flushed offset. After every operation the whole log is compared with the model: offsets,
//! segment layout (contiguous, starting on batch boundaries), every byte readable from the log start, the size,
//! timestamp lookups. Reopens (clean, unclean, and a simulated power loss that cuts the unflushed tail of the
//! active segment) must bring back exactly what the model says survives.

use std::collections::HashMap;
use std::path::Path;

use annal_log::batch::{self, build_batch, BatchHeader, ProducerFields};
use annal_log::{AppendOptions, Log, LogConfig, LogError, TimestampType};
use proptest::prelude::*;

/// (producer id, epoch, base sequence)
type ProducerTriple = (i64, i16, i32);

/// A (key, value) record for `build_batch`.
type Record<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// One batch of an append: how many records, how big, how old, and whether an idempotent producer sent it.
#[derive(Debug, Clone)]
struct BatchGen {
    records: u8,
    value_len: u16,
    /// Record timestamps are `now - age - i`, so they vary inside a batch.
    age: u8,
    keyed: bool,
    producer: Option<u8>,
}

#[derive(Debug, Clone)]
enum Op {
    /// Batches of one request; `true`: the topic uses LogAppendTime.
    Append(Vec<BatchGen>, bool),
    /// A request whose batch `bad % len` is broken (a flipped CRC-covered byte, or a producer sequence gap):
    /// it must fail and write nothing, not even the valid batches before the bad one.
    AppendBad {
        batches: Vec<BatchGen>,
        bad: u8,
        corrupt: bool,
    },
    /// Re-sends a producer's last batch: must be recognised as a duplicate.
    Retry(u8),
    Read {
        offset: u32,
        max_bytes: u16,
        upper: Option<u32>,
    },
    Truncate(u32),
    DeleteRecords(u32),
    RetentionBytes(u16),
    RetentionTime(u16),
    TimeLookup(u16),
    Roll,
    Flush,
    Tick(u16),
    CloseReopen,
    DropReopen,
    /// Unclean stop, then the unflushed tail of the active segment is cut at a random byte (as after a power
    /// loss) and optionally followed by garbage.
    PowerLoss {
        cut: u32,
        garbage: Vec<u8>,
    },
}

fn batch_gen() -> impl Strategy<Value = BatchGen> {
    (
        1u8..=5,
        prop_oneof![0u16..40, 0u16..600],
        0u8..50,
        any::<bool>(),
        prop_oneof![3 => Just(None), 2 => (1u8..=3).prop_map(Some)],
    )
        .prop_map(|(records, value_len, age, keyed, producer)| BatchGen {
            records,
            value_len,
            age,
            keyed,
            producer,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (prop::collection::vec(batch_gen(), 1..4), prop::bool::weighted(0.2))
            .prop_map(|(batches, log_append_time)| Op::Append(batches, log_append_time)),
        2 => (1u8..=3).prop_map(Op::Retry),
        2 => (prop::collection::vec(batch_gen(), 1..4), any::<u8>(), any::<bool>())
            .prop_map(|(batches, bad, corrupt)| Op::AppendBad { batches, bad, corrupt }),
        5 => (any::<u32>(), any::<u16>(), prop::option::of(any::<u32>()))
            .prop_map(|(offset, max_bytes, upper)| Op::Read { offset, max_bytes, upper }),
        1 => any::<u32>().prop_map(Op::Truncate),
        1 => any::<u32>().prop_map(Op::DeleteRecords),
        1 => (0u16..6000).prop_map(Op::RetentionBytes),
        1 => (0u16..300).prop_map(Op::RetentionTime),
        2 => any::<u16>().prop_map(Op::TimeLookup),
        1 => Just(Op::Roll),
        2 => Just(Op::Flush),
        2 => (0u16..200).prop_map(Op::Tick),
        1 => Just(Op::CloseReopen),
        1 => Just(Op::DropReopen),
        1 => (any::<u32>(), prop_oneof![Just(vec![]), prop::collection::vec(any::<u8>(), 1..200)])
            .prop_map(|(cut, garbage)| Op::PowerLoss { cut, garbage }),
    ]
}

fn config() -> impl Strategy<Value = LogConfig> {
    (
        200u64..5000,
        0u32..700,
        prop_oneof![Just(10 << 20), 8u32..64],
        prop_oneof![Just(7 * 24 * 3600 * 1000i64), 50i64..500],
        prop_oneof![3 => Just(u64::MAX), 1 => 1u64..20],
    )
        .prop_map(
            |(
                segment_bytes,
                index_interval_bytes,
                segment_index_bytes,
                segment_ms,
                flush_messages,
            )| LogConfig {
                segment_bytes,
                index_interval_bytes,
                segment_index_bytes,
                segment_ms,
                flush_messages,
                // Producers must not expire under the model's feet; expiry is not modelled.
                producer_id_expiration_ms: i64::MAX,
                ..LogConfig::default()
            },
        )
}

#[derive(Debug, Clone)]
struct ModelBatch {
    base: i64,
    last: i64,
    /// The bytes as stored (offsets and leader epoch assigned).
    bytes: Vec<u8>,
    /// As the producer sent them, for retries.
    sent: Vec<u8>,
    record_timestamps: Vec<i64>,
    max_timestamp: i64,
    /// (producer id, epoch, base sequence)
    producer: Option<(i64, i16, i32)>,
}

struct Model {
    /// Every batch physically in the log (some may be below the log start).
    batches: Vec<ModelBatch>,
    log_start: i64,
    log_end: i64,
    /// Everything below this was flushed (explicitly); it must survive a power loss.
    flushed: i64,
    now: i64,
    highest_epoch: HashMap<i64, i16>,
    value_counter: u64,
    /// Records appended since the last complete flush (for `flush.messages`).
    unflushed_records: u64,
}

const LEADER_EPOCH: i32 = 7;

impl Model {
    fn new() -> Model {
        Model {
            batches: Vec::new(),
            log_start: 0,
            log_end: 0,
            flushed: 0,
            now: 1_700_000_000_000,
            highest_epoch: HashMap::new(),
            value_counter: 0,
            unflushed_records: 0,
        }
    }

    fn visible(&self) -> impl Iterator<Item = &ModelBatch> {
        let start = self.log_start;
        self.batches.iter().filter(move |b| b.last >= start)
    }

    /// The producer's last batch, if the engine must still know it (it is at or after the log start, so it is
    /// either replayed from the log or in a snapshot after any restart).
    fn known_last_batch(&self, producer_id: i64) -> Option<&ModelBatch> {
        self.batches
            .iter()
            .rev()
            .find(|b| b.producer.is_some_and(|p| p.0 == producer_id))
            .filter(|b| b.last >= self.log_start)
    }

    /// Epoch and sequence for a new batch: continue the known sequence, or start a new epoch at 0 (always
    /// accepted, whatever the engine remembers).
    fn next_sequence(&mut self, producer_id: i64, staged: &HashMap<i64, (i16, i32)>) -> (i16, i32) {
        if let Some(&(epoch, next)) = staged.get(&producer_id) {
            return (epoch, next);
        }
        if let Some(last) = self.known_last_batch(producer_id) {
            let (_, epoch, seq) = last.producer.expect("filtered");
            let records = (last.last - last.base + 1) as i32;
            return (epoch, seq + records);
        }
        let epoch = self.highest_epoch.get(&producer_id).map_or(0, |e| e + 1);
        self.highest_epoch.insert(producer_id, epoch);
        (epoch, 0)
    }
}

fn opts(now: i64) -> AppendOptions {
    AppendOptions {
        leader_epoch: LEADER_EPOCH,
        now_ms: now,
        ..AppendOptions::default()
    }
}

/// Picks an offset in `[lo, hi]` from a random selector.
fn pick(sel: u32, lo: i64, hi: i64) -> i64 {
    lo + i64::from(sel) % (hi - lo + 1)
}

fn scratch_dir() -> tempfile::TempDir {
    // These tests check logic, not durability, and roll thousands of segments (each roll fsyncs several files):
    // a tmpfs keeps them fast. The crash and disk-full tests use real disks.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}

fn run(config: LogConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = scratch_dir();
    let mut log = Some(Log::open(dir.path(), config.clone()).map_err(|e| fail_msg(e.to_string()))?);
    let mut m = Model::new();
    for (step, op) in ops.iter().enumerate() {
        apply(&mut m, &mut log, op, dir.path(), &config)
            .map_err(|e| fail_msg(format!("step {step} {op:?}: {e}")))?;
        let l = log.as_ref().expect("open");
        // Segments removed whole take their batches with them.
        let first_base = l.segments()[0].base_offset;
        m.batches.retain(|b| b.base >= first_base);
        check_all(&m, l).map_err(|e| fail_msg(format!("after step {step} {op:?}: {e}")))?;
    }
    Ok(())
}

fn fail_msg(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

fn err(e: LogError) -> String {
    e.to_string()
}

fn make_batch(
    m: &mut Model,
    g: &BatchGen,
    staged: &mut HashMap<i64, (i16, i32)>,
) -> (Vec<u8>, Vec<i64>, Option<ProducerTriple>) {
    m.value_counter += 1;
    let fill = (m.value_counter % 251) as u8;
    let value = vec![fill; usize::from(g.value_len)];
    let key = m.value_counter.to_be_bytes();
    let records: Vec<Record> = (0..g.records)
        .map(|_| (g.keyed.then_some(key.as_slice()), Some(value.as_slice())))
        .collect();
    let timestamps: Vec<i64> = (0..i64::from(g.records))
        .map(|i| m.now - i64::from(g.age) - i * 3)
        .collect();
    let producer = g.producer.map(|p| {
        let producer_id = 1000 + i64::from(p);
        let (epoch, seq) = m.next_sequence(producer_id, staged);
        staged.insert(producer_id, (epoch, seq + i32::from(g.records)));
        (producer_id, epoch, seq)
    });
    let fields = producer.map_or(
        ProducerFields::default(),
        |(producer_id, producer_epoch, base_sequence)| ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence,
            transactional: false,
        },
    );
    (
        build_batch(&records, &timestamps, fields),
        timestamps,
        producer,
    )
}

fn apply(
    m: &mut Model,
    slot: &mut Option<Log>,
    op: &Op,
    dir: &Path,
    config: &LogConfig,
) -> Result<(), String> {
    let log = slot.as_mut().expect("open");
    match op {
        Op::Append(gens, log_append_time) => {
            let mut staged = HashMap::new();
            let mut sent = Vec::new();
            let mut request = Vec::new();
            for g in gens {
                let (bytes, ts, producer) = make_batch(m, g, &mut staged);
                request.extend_from_slice(&bytes);
                sent.push((bytes, ts, producer));
            }
            let total: i64 = gens.iter().map(|g| i64::from(g.records)).sum();
            let options = AppendOptions {
                timestamp_type: if *log_append_time {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                },
                ..opts(m.now)
            };
            let info = log.append(&mut request, &options).map_err(err)?;
            if info.duplicate
                || info.first_offset != m.log_end
                || info.last_offset != m.log_end + total - 1
            {
                return Err(format!(
                    "append answered {info:?}, model log end {} + {total} records",
                    m.log_end
                ));
            }
            let mut position = 0;
            for (bytes, mut record_timestamps, producer) in sent {
                if *log_append_time {
                    // Every record's timestamp becomes the broker's clock.
                    record_timestamps.fill(m.now);
                }
                let stored = request[position..position + bytes.len()].to_vec();
                position += bytes.len();
                let header = BatchHeader::parse(&stored).ok_or("stored batch does not parse")?;
                if header.base_offset != m.log_end || header.partition_leader_epoch != LEADER_EPOCH
                {
                    return Err(format!("append rewrote the header wrongly: {header:?}"));
                }
                m.batches.push(ModelBatch {
                    base: header.base_offset,
                    last: header.last_offset(),
                    bytes: stored,
                    sent: bytes,
                    max_timestamp: *record_timestamps.iter().max().expect("non-empty"),
                    record_timestamps,
                    producer,
                });
                m.log_end = header.next_offset();
            }
            m.unflushed_records += total as u64;
            if m.unflushed_records >= config.flush_messages {
                // flush.messages reached: this append was fsynced before it returned.
                if log.flushed_offset() != m.log_end {
                    return Err(format!(
                        "flush.messages={} reached but the flushed offset is {}, log end {}",
                        config.flush_messages,
                        log.flushed_offset(),
                        m.log_end
                    ));
                }
                m.flushed = m.log_end;
                m.unflushed_records = 0;
            }
        }
        Op::AppendBad {
            batches,
            bad,
            corrupt,
        } => {
            let bad = usize::from(*bad) % batches.len();
            let mut staged = HashMap::new();
            let mut request = Vec::new();
            for (i, g) in batches.iter().enumerate() {
                let mut g = g.clone();
                if i == bad && !corrupt {
                    g.producer = Some(g.producer.unwrap_or(1));
                }
                let (mut bytes, _, _) = make_batch(m, &g, &mut staged);
                if i == bad {
                    if *corrupt {
                        let last = bytes.len() - 1;
                        bytes[last] ^= 0x10;
                    } else {
                        // A gap of 7 in the producer's sequence (CRC recomputed: the batch itself is sound).
                        let seq = batch::field::BASE_SEQUENCE;
                        let gapped =
                            i32::from_be_bytes(bytes[seq..seq + 4].try_into().unwrap()) + 7;
                        bytes[seq..seq + 4].copy_from_slice(&gapped.to_be_bytes());
                        let crc = batch::compute_crc(&bytes);
                        bytes[batch::field::CRC..batch::field::CRC + 4]
                            .copy_from_slice(&crc.to_be_bytes());
                    }
                }
                request.extend_from_slice(&bytes);
            }
            let result = log.append(&mut request, &opts(m.now));
            let expected = if *corrupt {
                matches!(result, Err(LogError::CorruptRecord { .. }))
            } else {
                matches!(
                    result,
                    Err(LogError::OutOfOrderSequence { .. } | LogError::UnknownProducerId { .. })
                )
            };
            if !expected {
                return Err(format!("a request with a bad batch answered {result:?}"));
            }
        }
        Op::Retry(p) => {
            let producer_id = 1000 + i64::from(*p);
            let Some(last) = m.known_last_batch(producer_id).cloned() else {
                return Ok(());
            };
            let info = log
                .append(&mut last.sent.clone(), &opts(m.now))
                .map_err(err)?;
            if !info.duplicate || info.first_offset != last.base || info.last_offset != last.last {
                return Err(format!(
                    "retry of the batch at {}..={} answered {info:?}",
                    last.base, last.last
                ));
            }
        }
        Op::Read {
            offset,
            max_bytes,
            upper,
        } => {
            let offset = pick(*offset, m.log_start - 1, m.log_end + 1);
            let upper = upper.map(|u| pick(u, m.log_start - 1, m.log_end + 1));
            let max_bytes = usize::from(*max_bytes) % 4000;
            check_read(m, log, offset, max_bytes, upper)?;
        }
        Op::Truncate(sel) => {
            let first_base = log.segments()[0].base_offset;
            let offset = pick(*sel, first_base - 1, m.log_end + 1).max(0);
            log.truncate_to(offset).map_err(err)?;
            if offset >= m.log_end {
                // nothing to do
            } else if offset <= first_base {
                m.batches.clear();
                m.log_start = offset;
                m.log_end = offset;
            } else {
                let cut = m
                    .batches
                    .iter()
                    .position(|b| b.last >= offset)
                    .ok_or("no batch holds the offset")?;
                m.log_end = m.batches[cut].base;
                m.batches.truncate(cut);
                m.log_start = m.log_start.min(m.log_end);
            }
            m.flushed = m.flushed.min(m.log_end);
        }
        Op::DeleteRecords(sel) => {
            let offset = pick(*sel, m.log_start - 2, m.log_end + 1);
            let result = log.delete_records_before(offset);
            if offset < 0 || offset > m.log_end {
                if !matches!(result, Err(LogError::OffsetOutOfRange { .. })) {
                    return Err(format!(
                        "delete_records_before({offset}) outside the log answered {result:?}"
                    ));
                }
            } else {
                let start = result.map_err(err)?;
                let advanced = offset > m.log_start;
                m.log_start = m.log_start.max(offset);
                if start != m.log_start {
                    return Err(format!("new log start {start}, model {}", m.log_start));
                }
                // Only segments wholly below the log start may go, and all of them (but the active one) must.
                let segs = log.segments();
                if advanced && segs[0].next_offset <= m.log_start && segs.len() > 1 {
                    return Err(format!(
                        "segment {:?} lies below the log start {} but was kept",
                        segs[0], m.log_start
                    ));
                }
            }
        }
        Op::RetentionBytes(bytes) => {
            let retention_bytes = i64::from(*bytes);
            let before = log.segments();
            // Oldest segments go while the log stays at or above retention.bytes without them; the active one stays.
            let mut excess = log.size_bytes() as i64 - retention_bytes;
            let mut by_size = 0;
            for s in &before[..before.len() - 1] {
                if excess < s.size_bytes as i64 {
                    break;
                }
                excess -= s.size_bytes as i64;
                by_size += 1;
            }
            let expected = expected_first_segment(&before, by_size, m.log_start);
            log.set_config(LogConfig {
                retention_bytes,
                retention_ms: -1,
                ..config.clone()
            });
            log.apply_retention(m.now).map_err(err)?;
            log.set_config(config.clone());
            let first = log.segments()[0].base_offset;
            if first != expected {
                return Err(format!("retention.bytes={retention_bytes} on {before:?}: first segment now {first}, expected {expected}"));
            }
            m.log_start = m.log_start.max(first);
        }
        Op::RetentionTime(ms) => {
            let retention_ms = i64::from(*ms);
            let before = log.segments();
            let expired = before
                .iter()
                .take_while(|s| s.max_timestamp.is_some_and(|ts| m.now - ts > retention_ms))
                .count();
            // All expired, the active one too: the log rolls and every old segment goes.
            let expected =
                if expired == before.len() && before.last().expect("non-empty").size_bytes > 0 {
                    m.log_end
                } else {
                    expected_first_segment(&before, expired, m.log_start)
                };
            log.set_config(LogConfig {
                retention_ms,
                retention_bytes: -1,
                ..config.clone()
            });
            log.apply_retention(m.now).map_err(err)?;
            log.set_config(config.clone());
            let first = log.segments()[0].base_offset;
            if first != expected {
                return Err(format!("retention.ms={retention_ms} at {} on {before:?}: first segment now {first}, expected {expected}", m.now));
            }
            m.log_start = m.log_start.max(first);
        }
        Op::TimeLookup(sel) => {
            let target = m.now - 400 + i64::from(*sel) % 450;
            let expected = m
                .visible()
                .flat_map(|b| {
                    b.record_timestamps
                        .iter()
                        .enumerate()
                        .map(move |(i, ts)| (b.base + i as i64, *ts))
                })
                .find(|&(offset, ts)| offset >= m.log_start && ts >= target);
            let got = log.offset_for_timestamp(target).map_err(err)?;
            if got != expected {
                return Err(format!(
                    "offset_for_timestamp({target}) = {got:?}, model {expected:?}"
                ));
            }
        }
        Op::Roll => log.roll().map_err(err)?,
        Op::Flush => {
            m.unflushed_records = 0;
            log.flush().map_err(err)?;
            m.flushed = m.log_end;
            if log.flushed_offset() != m.log_end {
                return Err(format!(
                    "flushed offset {} after flush, log end {}",
                    log.flushed_offset(),
                    m.log_end
                ));
            }
        }
        Op::Tick(ms) => m.now += i64::from(*ms),
        Op::CloseReopen => {
            slot.take().expect("open").close().map_err(err)?;
            *slot = Some(Log::open(dir, config.clone()).map_err(err)?);
            m.unflushed_records = 0;
            m.flushed = m.log_end;
        }
        Op::DropReopen => {
            drop(slot.take());
            *slot = Some(Log::open(dir, config.clone()).map_err(err)?);
            m.unflushed_records = 0;
        }
        Op::PowerLoss { cut, garbage } => {
            // Durable: what flush() promised, and what the engine believes (after a reopen it may know less).
            let durable = log.flushed_offset().max(m.flushed);
            let active = log.segments().last().expect("non-empty").clone();
            drop(slot.take());
            // Rolls fsync the old segment, so only the active one can lose bytes: those after the durable point.
            let in_active: Vec<&ModelBatch> = m
                .batches
                .iter()
                .filter(|b| b.base >= active.base_offset)
                .collect();
            let durable_bytes: u64 = in_active
                .iter()
                .filter(|b| b.last < durable)
                .map(|b| b.bytes.len() as u64)
                .sum();
            let keep = durable_bytes + u64::from(*cut) % (active.size_bytes - durable_bytes + 1);
            {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&active.path)
                    .map_err(|e| e.to_string())?;
                file.set_len(keep).map_err(|e| e.to_string())?;
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&active.path)
                    .and_then(|mut f| f.write_all(garbage))
                    .map_err(|e| e.to_string())?;
                let _ = file.flush();
            }
            let mut position = 0u64;
            let mut kept_end = active.base_offset;
            for b in &in_active {
                if position + b.bytes.len() as u64 > keep {
                    break;
                }
                position += b.bytes.len() as u64;
                kept_end = b.last + 1;
            }
            let survivors = m
                .batches
                .iter()
                .position(|b| b.base >= kept_end)
                .unwrap_or(m.batches.len());
            m.batches.truncate(survivors);
            m.log_end = kept_end.max(m.batches.last().map_or(kept_end, |b| b.last + 1));
            m.log_start = m.log_start.min(m.log_end);
            m.flushed = m.flushed.min(m.log_end);
            *slot = Some(Log::open(dir, config.clone()).map_err(err)?);
            m.unflushed_records = 0;
        }
    }
    Ok(())
}

/// The first segment left after retention deletes the oldest `count` segments and every segment wholly below
/// the log start, never the active one.
fn expected_first_segment(before: &[annal_log::SegmentInfo], count: usize, log_start: i64) -> i64 {
    let below_start = before
        .iter()
        .take_while(|s| s.next_offset <= log_start)
        .count();
    let gone = count.max(below_start).min(before.len() - 1);
    before[gone].base_offset
}

fn check_read(
    m: &Model,
    log: &Log,
    offset: i64,
    max_bytes: usize,
    upper: Option<i64>,
) -> Result<(), String> {
    let result = log.read(offset, max_bytes, upper);
    if offset < m.log_start || offset > m.log_end {
        return match result {
            Err(LogError::OffsetOutOfRange { .. }) => Ok(()),
            other => Err(format!(
                "read({offset}) outside [{}, {}] answered {other:?}",
                m.log_start, m.log_end
            )),
        };
    }
    let read = result.map_err(err)?;
    if read.log_start_offset != m.log_start || read.log_end_offset != m.log_end {
        return Err(format!(
            "read reported start/end {}/{}",
            read.log_start_offset, read.log_end_offset
        ));
    }
    let upper = upper.unwrap_or(m.log_end).min(m.log_end);
    // Whole batches from the one containing the offset, below the upper bound, within max_bytes (at least one).
    let mut expected: Vec<&ModelBatch> = Vec::new();
    let mut size = 0;
    if offset < upper {
        for b in m.batches.iter().skip_while(|b| b.last < offset) {
            if b.base >= upper || (!expected.is_empty() && size + b.bytes.len() > max_bytes) {
                break;
            }
            size += b.bytes.len();
            expected.push(b);
        }
    }
    let got = match read.slice {
        None => Vec::new(),
        Some(slice) => slice.read_to_vec().map_err(|e| e.to_string())?,
    };
    if expected.is_empty() {
        return if got.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "read({offset}, upper {upper}) returned {} bytes, expected none",
                got.len()
            ))
        };
    }
    // A read stays inside one segment: it may stop early, but only at a segment boundary.
    let mut position = 0;
    let mut count = 0;
    for b in &expected {
        if position == got.len() {
            break;
        }
        if got.len() < position + b.bytes.len()
            || got[position..position + b.bytes.len()] != b.bytes[..]
        {
            return Err(format!(
                "read({offset}, {max_bytes}, upper {upper}): batch {} differs from the model",
                b.base
            ));
        }
        position += b.bytes.len();
        count += 1;
    }
    if position != got.len() {
        return Err(format!("read({offset}, {max_bytes}, upper {upper}) returned {} bytes beyond the expected batches", got.len() - position));
    }
    if count == 0 {
        return Err(format!(
            "read({offset}) returned nothing; expected the batch at {}",
            expected[0].base
        ));
    }
    if count < expected.len() {
        let next = expected[count].base;
        if !log.segments().iter().any(|s| s.base_offset == next) {
            return Err(format!("read({offset}, {max_bytes}) stopped before batch {next}, which does not start a segment"));
        }
    }
    Ok(())
}

/// The index files on disk (not just the engine's memory) describe the segment: each offset index entry names
/// the last offset of the batch starting at its position; each time index entry holds the largest timestamp of
/// the segment up to its offset, carried by the batch ending there.
fn check_index_files(m: &Model, s: &annal_log::SegmentInfo) -> Result<(), String> {
    let in_segment: Vec<&ModelBatch> = m
        .batches
        .iter()
        .filter(|b| b.base >= s.base_offset && b.base < s.next_offset)
        .collect();
    let index = std::fs::read(s.path.with_extension("index")).map_err(|e| e.to_string())?;
    let mut position = 0usize;
    let mut starts = HashMap::new();
    for b in &in_segment {
        starts.insert(position as u64, *b);
        position += b.bytes.len();
    }
    for entry in index.chunks_exact(8) {
        let relative = u32::from_be_bytes(entry[0..4].try_into().unwrap());
        let position = u32::from_be_bytes(entry[4..8].try_into().unwrap());
        match starts.get(&u64::from(position)) {
            Some(b) if b.last == s.base_offset + i64::from(relative) => {}
            other => {
                return Err(format!(
                    "{}: entry ({relative}, {position}) names the wrong batch ({:?})",
                    s.path.with_extension("index").display(),
                    other.map(|b| (b.base, b.last))
                ))
            }
        }
    }
    let time_index =
        std::fs::read(s.path.with_extension("timeindex")).map_err(|e| e.to_string())?;
    for entry in time_index.chunks_exact(12) {
        let timestamp = i64::from_be_bytes(entry[0..8].try_into().unwrap());
        let offset =
            s.base_offset + i64::from(u32::from_be_bytes(entry[8..12].try_into().unwrap()));
        let max_so_far = in_segment
            .iter()
            .filter(|b| b.last <= offset)
            .map(|b| b.max_timestamp)
            .max();
        let carrier = in_segment.iter().find(|b| b.last == offset);
        if max_so_far != Some(timestamp) || carrier.is_none_or(|b| b.max_timestamp != timestamp) {
            return Err(format!(
                "{}: entry ({timestamp}, {offset}) but the segment's max timestamp up to there is {max_so_far:?}",
                s.path.with_extension("timeindex").display()
            ));
        }
    }
    Ok(())
}

fn check_all(m: &Model, log: &Log) -> Result<(), String> {
    if log.log_start_offset() != m.log_start || log.log_end_offset() != m.log_end {
        return Err(format!(
            "log holds [{}, {}), model [{}, {})",
            log.log_start_offset(),
            log.log_end_offset(),
            m.log_start,
            m.log_end
        ));
    }
    let segs = log.segments();
    for pair in segs.windows(2) {
        if pair[0].next_offset != pair[1].base_offset {
            return Err(format!(
                "segments not contiguous: {:?} then {:?}",
                pair[0], pair[1]
            ));
        }
    }
    let last = segs.last().expect("non-empty");
    if last.next_offset != m.log_end {
        return Err(format!(
            "active segment ends at {}, log end {}",
            last.next_offset, m.log_end
        ));
    }
    for s in &segs {
        if s.base_offset != m.log_end && !m.batches.iter().any(|b| b.base == s.base_offset) {
            return Err(format!(
                "segment {} does not start on a batch",
                s.base_offset
            ));
        }
        let bytes: u64 = m
            .batches
            .iter()
            .filter(|b| b.base >= s.base_offset && b.base < s.next_offset)
            .map(|b| b.bytes.len() as u64)
            .sum();
        if bytes != s.size_bytes {
            return Err(format!(
                "segment {} holds {} bytes, model {bytes}",
                s.base_offset, s.size_bytes
            ));
        }
    }
    for s in &segs {
        check_index_files(m, s)?;
    }
    if m.batches
        .first()
        .is_some_and(|b| b.base != segs[0].base_offset)
    {
        return Err(format!(
            "first segment {} but first model batch {}",
            segs[0].base_offset, m.batches[0].base
        ));
    }
    // Every visible byte, read segment by segment.
    let mut got = Vec::new();
    let mut offset = m.log_start;
    while offset < m.log_end {
        let read = log.read(offset, 1 << 20, None).map_err(err)?;
        let bytes = read
            .slice
            .ok_or(format!("no data at {offset}"))?
            .read_to_vec()
            .map_err(|e| e.to_string())?;
        let batches = batch::validate_batches(&bytes, u32::MAX).map_err(err)?;
        offset = batches.last().expect("non-empty").header.next_offset();
        got.extend_from_slice(&bytes);
    }
    let expected: Vec<u8> = m.visible().flat_map(|b| b.bytes.iter().copied()).collect();
    if got != expected {
        return Err(format!(
            "log content ({} bytes) differs from the model ({} bytes)",
            got.len(),
            expected.len()
        ));
    }
    // The largest timestamp: over segments holding visible offsets; the earliest record carrying it.
    let visible_from = segs
        .iter()
        .find(|s| s.next_offset > m.log_start)
        .map(|s| s.base_offset);
    let expected_max = visible_from.and_then(|from| {
        m.batches
            .iter()
            .filter(|b| b.base >= from)
            .fold(None, |best: Option<(i64, &ModelBatch)>, b| match best {
                Some((ts, _)) if ts >= b.max_timestamp => best,
                _ => Some((b.max_timestamp, b)),
            })
            .map(|(ts, b)| {
                // The first record carrying it (as Kafka's ListOffsets MAX_TIMESTAMP), not below the log start.
                let first = b
                    .record_timestamps
                    .iter()
                    .position(|&t| t == ts)
                    .expect("carrier");
                (ts, (b.base + first as i64).max(m.log_start))
            })
    });
    if log.max_timestamp() != expected_max {
        return Err(format!(
            "max_timestamp {:?}, model {expected_max:?}",
            log.max_timestamp()
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn log_matches_model(config in config(), ops in prop::collection::vec(op(), 1..70)) {
        run(config, ops)?;
    }
}
