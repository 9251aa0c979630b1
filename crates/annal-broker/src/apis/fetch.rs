//! Fetch with long polling and KIP-227 incremental fetch sessions (see [`super::fetch_session`]). Reads return
//! whole batches; the first partition with data always gets at least one batch (KIP-74).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use annal_log::FileSlice;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId, RequestHeader};
use uuid::Uuid;

use super::{code, fetch_session};
use crate::replica::{
    FetchParams, FetchPartition, FetchPartitionResult, Partition, PartitionError, ReplicaFetch,
};
use crate::server::{encode_response, Close, Piece, Response};
use crate::Broker;

/// Longest wait we honour, whatever the client asks (Kafka clients use 500 ms by default).
const MAX_WAIT_MS: i32 = 60_000;

/// How this fetch relates to KIP-227 sessions.
enum Mode {
    /// Full request, full response, session id 0.
    Sessionless,
    /// Full request that opens a session (the response carries its id).
    New,
    /// Incremental request on an existing session: only partitions with news are answered.
    Incremental(i32),
}

pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: FetchRequest,
) -> (FetchResponse, Slices) {
    let (mut resp, slices) = answer(broker, header, req).await;
    super::leader_hints::add_to_fetch(broker, header.request_api_version, &mut resp);
    (resp, slices)
}

async fn answer(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    req: FetchRequest,
) -> (FetchResponse, Slices) {
    let version = header.request_api_version;
    let by_id = version >= 13;
    let key = |name: &str, id: Uuid, partition: i32| fetch_session::Key {
        topic: if by_id {
            String::new()
        } else {
            name.to_string()
        },
        topic_id: if by_id { id } else { Uuid::nil() },
        partition,
    };
    let requested: fetch_session::Entries = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    key(&t.topic.0, t.topic_id, p.partition),
                    p.fetch_offset,
                    p.partition_max_bytes,
                )
            })
        })
        .collect();
    let sessions = &broker.fetch_sessions;
    let (mode, entries) = if version < 7 {
        (Mode::Sessionless, requested)
    } else {
        match (req.session_id, req.session_epoch) {
            (0, -1) => (Mode::Sessionless, requested),
            (0, 0)
                if sessions.enabled()
                    && requested.len() <= fetch_session::MAX_PARTITIONS_PER_SESSION =>
            {
                (Mode::New, requested)
            }
            (0, 0) => (Mode::Sessionless, requested),
            (0, _) => {
                return (
                    session_error(code::INVALID_FETCH_SESSION_EPOCH),
                    Slices::default(),
                )
            }
            (id, -1) => {
                // FINAL_EPOCH: the client closes its session and fetches sessionless.
                sessions.remove(id);
                (Mode::Sessionless, requested)
            }
            (id, 0) => {
                sessions.remove(id);
                (
                    if sessions.enabled() {
                        Mode::New
                    } else {
                        Mode::Sessionless
                    },
                    requested,
                )
            }
            (id, epoch) => {
                let forgotten: Vec<fetch_session::Key> = req
                    .forgotten_topics_data
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| key(&t.topic.0, t.topic_id, *p)))
                    .collect();
                match sessions.update(id, epoch, &requested, &forgotten) {
                    Ok(all) => (Mode::Incremental(id), all),
                    Err(c) => return (session_error(c), Slices::default()),
                }
            }
        }
    };
    let read_committed = req.isolation_level == 1;
    // A follower broker names itself: ReplicaId before v15, ReplicaState (with its broker epoch) from v15.
    let (replica_id, replica_epoch) = if version >= 15 {
        (
            req.replica_state.replica_id.0,
            req.replica_state.replica_epoch,
        )
    } else {
        (req.replica_id.0, -1)
    };
    // Per partition: KIP-320 LastFetchedEpoch (v12+), for divergence checks of followers.
    let last_fetched: HashMap<fetch_session::Key, i32> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    key(&t.topic.0, t.topic_id, p.partition),
                    p.last_fetched_epoch,
                )
            })
        })
        .collect();
    // KIP-320 CurrentLeaderEpoch of the partitions this request names (those cached in a session send none).
    let epochs: HashMap<fetch_session::Key, i32> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    key(&t.topic.0, t.topic_id, p.partition),
                    p.current_leader_epoch,
                )
            })
        })
        .collect();
    let max_wait = Duration::from_millis(req.max_wait_ms.clamp(0, MAX_WAIT_MS) as u64);
    // Before v3 there is no max_bytes; the broker's fetch.max.bytes caps every fetch (as in Kafka).
    let broker_max = broker.config.fetch_max_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        broker_max
    } else {
        (req.max_bytes as usize).min(broker_max)
    };
    let params = FetchParams {
        max_wait,
        min_bytes: req.min_bytes.max(0) as usize,
        max_bytes,
        read_committed,
    };
    let wanted = entries
        .iter()
        .map(|(k, offset, max)| FetchPartition {
            target: resolve(broker, by_id, k),
            fetch_offset: *offset,
            current_leader_epoch: epochs.get(k).copied().unwrap_or(-1),
            max_bytes: *max,
            replica: (replica_id >= 0).then(|| ReplicaFetch {
                replica_id,
                broker_epoch: replica_epoch,
                last_fetched_epoch: if version >= 12 {
                    last_fetched.get(k).copied().unwrap_or(-1)
                } else {
                    -1
                },
            }),
        })
        .collect();
    let results = broker.replica_manager.fetch_messages(params, wanted).await;
    let (responses, slices) = encode_results(&entries, results, version, read_committed);
    let responses = match mode {
        Mode::Sessionless => {
            return (
                FetchResponse::default()
                    .with_responses(responses)
                    .with_session_id(0),
                slices,
            )
        }
        Mode::New => {
            let told = entries
                .iter()
                .zip(responses.iter().flat_map(|t| t.partitions.iter()))
                .map(|((k, offset, max), p)| {
                    let cached = fetch_session::Cached {
                        fetch_offset: *offset,
                        max_bytes: *max,
                        high_watermark: p.high_watermark,
                        log_start: p.log_start_offset,
                        last_stable_offset: p.last_stable_offset,
                    };
                    (k.clone(), cached)
                })
                .collect();
            let id = sessions.create(told);
            return (
                FetchResponse::default()
                    .with_responses(responses)
                    .with_session_id(id),
                slices,
            );
        }
        Mode::Incremental(id) => {
            let mut keys = entries.iter().map(|(k, _, _)| k);
            let mut out = Vec::new();
            for mut topic in responses {
                topic.partitions.retain(|p| {
                    let Some(k) = keys.next() else { return true };
                    let records = p.records.as_ref().map_or(0, |r| r.len());
                    sessions.has_news(
                        id,
                        k,
                        p.error_code,
                        records,
                        fetch_session::ToldOffsets {
                            high_watermark: p.high_watermark,
                            log_start: p.log_start_offset,
                            last_stable_offset: p.last_stable_offset,
                        },
                    )
                });
                if !topic.partitions.is_empty() {
                    out.push(topic);
                }
            }
            (id, out)
        }
    };
    (
        FetchResponse::default()
            .with_responses(responses.1)
            .with_session_id(responses.0),
        slices,
    )
}

fn session_error(code: i16) -> FetchResponse {
    FetchResponse::default()
        .with_error_code(code)
        .with_session_id(0)
}

/// The partition a session key names, or why there is none.
fn resolve(
    broker: &Broker,
    by_id: bool,
    key: &fetch_session::Key,
) -> Result<Arc<Partition>, PartitionError> {
    let name = if by_id {
        match broker.replica_manager.topic_by_id(key.topic_id) {
            Some(t) => t.name.clone(),
            None => return Err(PartitionError::UnknownTopicId(key.topic_id)),
        }
    } else {
        key.topic.clone()
    };
    broker
        .replica_manager
        .partition_or_error(&name, key.partition)
}

/// The response topics (consecutive entries of one topic share one), with each partition's records as a
/// sentinel for the zero-copy path (see [`Slices`]).
fn encode_results(
    entries: &fetch_session::Entries,
    results: Vec<FetchPartitionResult>,
    version: i16,
    read_committed: bool,
) -> (Vec<FetchableTopicResponse>, Slices) {
    assert_eq!(entries.len(), results.len(), "one fetch result per entry");
    let mut slices = Slices::new();
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    let mut last: Option<(&str, Uuid)> = None;
    for ((key, _, _), result) in entries.iter().zip(results) {
        if last != Some((key.topic.as_str(), key.topic_id)) {
            let mut topic = FetchableTopicResponse::default();
            if version >= 13 {
                topic.topic_id = key.topic_id;
            } else {
                topic.topic = super::topic_name(&key.topic);
            }
            responses.push(topic);
            last = Some((key.topic.as_str(), key.topic_id));
        }
        // read_committed answers the aborted transactions of the records served (an empty list when none);
        // read_uncommitted answers null, as Kafka does.
        let aborted = read_committed.then(|| {
            result
                .aborted_transactions
                .iter()
                .flatten()
                .map(|(producer_id, first_offset)| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(*producer_id))
                        .with_first_offset(*first_offset)
                })
                .collect()
        });
        let mut pd = PartitionData::default()
            .with_partition_index(key.partition)
            .with_high_watermark(result.high_watermark)
            .with_last_stable_offset(result.last_stable_offset)
            .with_log_start_offset(result.log_start_offset)
            .with_aborted_transactions(aborted)
            .with_records(Some(Bytes::new()));
        if let Some((epoch, end_offset)) = result.diverging_epoch {
            pd.diverging_epoch = EpochEndOffset::default()
                .with_epoch(epoch)
                .with_end_offset(end_offset);
        }
        match result.records {
            // Not read here: the records go from the file to the socket (see `encode`).
            Ok(Some(slice)) => pd.records = Some(slices.push(slice)),
            Ok(None) => {}
            Err(e) => pd.error_code = e.code(),
        }
        if let Some(topic) = responses.last_mut() {
            topic.partitions.push(pd);
        }
    }
    (responses, slices)
}

/// The file ranges of a fetch response's records. Each partition with records carries a 16-byte sentinel in
/// its `records` field instead: a random prefix shared by the response and the slice's index. `encode` finds
/// the sentinels in the encoded response and sends the ranges in their place.
pub struct Slices {
    prefix: [u8; 12],
    slices: Vec<FileSlice>,
}

impl Default for Slices {
    fn default() -> Slices {
        Slices::new()
    }
}

const SENTINEL_LEN: usize = 16;

static ZERO_COPY: AtomicU64 = AtomicU64::new(0);
static COPIED: AtomicU64 = AtomicU64::new(0);

/// Fetch responses with records sent zero-copy, and those that fell back to copying, since the process started
/// (for metrics and tests).
pub fn zero_copy_counts() -> (u64, u64) {
    (
        ZERO_COPY.load(Ordering::Relaxed),
        COPIED.load(Ordering::Relaxed),
    )
}

impl Slices {
    fn new() -> Slices {
        let mut prefix = [0u8; 12];
        prefix.copy_from_slice(&Uuid::new_v4().as_bytes()[..12]);
        Slices {
            prefix,
            slices: Vec::new(),
        }
    }

    /// Records `slice`; returns the sentinel that stands for it.
    fn push(&mut self, slice: FileSlice) -> Bytes {
        let mut s = Vec::with_capacity(SENTINEL_LEN);
        s.extend_from_slice(&self.prefix);
        s.extend_from_slice(&(self.slices.len() as u32).to_be_bytes());
        self.slices.push(slice);
        Bytes::from(s)
    }

    /// The slice a records field stands for, if it is one of our sentinels.
    fn lookup(&self, records: &[u8]) -> Option<&FileSlice> {
        if records.len() != SENTINEL_LEN || records[..12] != self.prefix {
            return None;
        }
        let i = u32::from_be_bytes(records[12..].try_into().ok()?) as usize;
        self.slices.get(i)
    }
}

/// The record bytes a fetch response carries (file ranges and records held in memory): what a consumer's
/// byte-rate quota counts.
pub fn record_bytes(resp: &FetchResponse, slices: &Slices) -> usize {
    let inline: usize = resp
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.records.as_deref())
        .filter(|r| slices.lookup(r).is_none())
        .map(<[u8]>::len)
        .sum();
    inline + slices.slices.iter().map(FileSlice::len).sum::<usize>()
}

/// Encodes a fetch response. Records go zero-copy: the response is encoded with sentinels as records, the
/// sentinels (and their length prefixes) are cut out, and the file ranges are sent in their place with
/// `sendfile(2)` by the connection writer. If anything is unexpected (a sentinel not found exactly once, a
/// length prefix that is not the sentinel's), the records are read into the response as before.
pub async fn encode(
    header: &RequestHeader,
    resp: FetchResponse,
    slices: Slices,
) -> Result<Response, Close> {
    let buf = encode_response(header, &resp)?;
    if slices.slices.is_empty() {
        return Ok(buf.into());
    }
    let flexible = header.request_api_version >= 12;
    if let Some(pieces) = splice(&buf, &slices, flexible) {
        ZERO_COPY.fetch_add(1, Ordering::Relaxed);
        return Ok(Response::Pieces(pieces));
    }
    COPIED.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        version = header.request_api_version,
        "fetch response: sentinels not found as expected; sending records by copy"
    );
    drop(buf);
    let resp = super::blocking(move || fill_records(resp, &slices)).await;
    encode_response(header, &resp).map(Into::into)
}

/// The old path: each sentinel replaced by the bytes of its slice.
fn fill_records(mut resp: FetchResponse, slices: &Slices) -> FetchResponse {
    for topic in &mut resp.responses {
        for pd in &mut topic.partitions {
            let Some(slice) = pd.records.as_deref().and_then(|r| slices.lookup(r)) else {
                continue;
            };
            match slice.read_to_vec() {
                Ok(bytes) => pd.records = Some(Bytes::from(bytes)),
                Err(e) => {
                    tracing::error!(partition = pd.partition_index, error = %e, "read failed");
                    pd.records = Some(Bytes::new());
                    pd.error_code = code::KAFKA_STORAGE_ERROR;
                }
            }
        }
    }
    resp
}

/// Cuts the encoded response at each sentinel: [bytes, file range, bytes, ...], with each range's length prefix
/// (i32 before v12, unsigned varint length+1 from v12) and the frame size rewritten. `None` if a sentinel is
/// missing, repeated, or not preceded by the length prefix of 16 bytes.
fn splice(buf: &[u8], slices: &Slices, flexible: bool) -> Option<Vec<Piece>> {
    let n = slices.slices.len();
    let prefix_len = if flexible { 1 } else { 4 };
    let expected: &[u8] = if flexible {
        &[SENTINEL_LEN as u8 + 1]
    } else {
        &(SENTINEL_LEN as i32).to_be_bytes()
    };
    // One pass: every occurrence of the response's prefix must be a sentinel, each index found once.
    let mut at_index: Vec<Option<usize>> = vec![None; n];
    let mut cuts = Vec::with_capacity(n);
    let first = slices.prefix[0];
    let mut i = 4;
    while i + SENTINEL_LEN <= buf.len() {
        let Some(step) = buf[i..buf.len() - SENTINEL_LEN + 1]
            .iter()
            .position(|b| *b == first)
        else {
            break;
        };
        i += step;
        if buf[i..i + 12] == slices.prefix {
            let index = u32::from_be_bytes(buf[i + 12..i + SENTINEL_LEN].try_into().ok()?) as usize;
            if index >= n || at_index[index].is_some() || i < 4 + prefix_len {
                return None;
            }
            if &buf[i - prefix_len..i] != expected {
                return None;
            }
            at_index[index] = Some(i);
            cuts.push((i - prefix_len, i + SENTINEL_LEN, index));
            i += SENTINEL_LEN;
        } else {
            i += 1;
        }
    }
    if cuts.len() != n {
        return None;
    }
    let mut size = buf.len() - 4;
    for (start, end, index) in &cuts {
        size = size - (end - start)
            + varint_or_i32_len(slices.slices[*index].len(), flexible)
            + slices.slices[*index].len();
    }
    let size = i32::try_from(size).ok()?;
    let mut pieces = Vec::with_capacity(2 * n + 1);
    let mut cur = BytesMut::with_capacity(buf.len());
    cur.extend_from_slice(&size.to_be_bytes());
    let mut at = 4;
    for (start, end, index) in cuts {
        let slice = &slices.slices[index];
        cur.extend_from_slice(&buf[at..start]);
        if flexible {
            put_uvarint(&mut cur, slice.len() as u64 + 1);
        } else {
            cur.extend_from_slice(&i32::try_from(slice.len()).ok()?.to_be_bytes());
        }
        pieces.push(Piece::Bytes(cur.split().freeze()));
        pieces.push(Piece::File(slice.clone()));
        at = end;
    }
    cur.extend_from_slice(&buf[at..]);
    pieces.push(Piece::Bytes(cur.freeze()));
    Some(pieces)
}

fn varint_or_i32_len(len: usize, flexible: bool) -> usize {
    if !flexible {
        return 4;
    }
    let mut v = len as u64 + 1;
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.extend_from_slice(&[(v as u8 & 0x7f) | 0x80]);
        v >>= 7;
    }
    out.extend_from_slice(&[v as u8]);
}
