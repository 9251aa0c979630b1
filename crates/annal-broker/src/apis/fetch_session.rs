//! KIP-227 incremental fetch sessions. A consumer's first fetch (session 0, epoch 0) creates a session holding
//! its partitions and their fetch offsets; later fetches (session id, next epoch) name only what changed, and the
//! response carries only partitions with news (records, an error, or a moved high watermark / log start).
//! The cache holds `max.incremental.fetch.session.cache.slots` sessions (least recently used evicted first); with
//! 0 slots every request for a session is answered sessionless (session id 0), which clients accept.

use std::collections::HashMap;
use std::time::Instant;

use indexmap::IndexMap;
use parking_lot::Mutex;
use uuid::Uuid;

/// A partition as a session knows it: by topic id (Fetch v13+) or by name (earlier versions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

/// The offsets a partition's fetch response tells the client; a change of any is news.
#[derive(Debug, Clone, Copy)]
pub struct ToldOffsets {
    pub high_watermark: i64,
    pub log_start: i64,
    pub last_stable_offset: i64,
}

#[derive(Debug, Clone)]
pub struct Cached {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// What the client was last told; -2 before the first response (so the first one always includes it).
    pub high_watermark: i64,
    pub log_start: i64,
    /// Also news when it moves (a read_committed consumer waits for it), as in Kafka's `CachedPartition`.
    pub last_stable_offset: i64,
}

struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    parts: IndexMap<Key, Cached>,
    last_used: Instant,
}

pub struct FetchSessions {
    slots: usize,
    inner: Mutex<(i32 /* last id */, HashMap<i32, Session>)>,
}

/// Most partitions one session may hold, so a few clients cannot make the cache hold unbounded memory.
/// A larger consumer is served sessionless (full fetches), which is still correct.
pub const MAX_PARTITIONS_PER_SESSION: usize = 10_000;

/// The entries to fetch: key, offset, per-partition max bytes.
pub type Entries = Vec<(Key, i64, i32)>;

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl FetchSessions {
    pub fn new(slots: usize) -> FetchSessions {
        FetchSessions {
            slots,
            inner: Mutex::new((0, HashMap::new())),
        }
    }

    pub fn enabled(&self) -> bool {
        self.slots > 0
    }

    pub fn remove(&self, id: i32) {
        self.inner.lock().1.remove(&id);
    }

    /// Creates a session for a full fetch's partitions and what the response told the client; returns its id.
    pub fn create(&self, parts: Vec<(Key, Cached)>) -> i32 {
        let mut guard = self.inner.lock();
        let (last_id, sessions) = &mut *guard;
        while sessions.len() >= self.slots {
            let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id)
            else {
                break;
            };
            sessions.remove(&oldest);
        }
        let mut id = *last_id;
        loop {
            id = if id == i32::MAX { 1 } else { id + 1 };
            if !sessions.contains_key(&id) {
                break;
            }
        }
        *last_id = id;
        sessions.insert(
            id,
            Session {
                epoch: 1,
                parts: parts.into_iter().collect(),
                last_used: clock_now(),
            },
        );
        id
    }

    /// Applies an incremental request (added/changed partitions, forgotten ones) and returns every partition of
    /// the session, or the Kafka error code (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH).
    pub fn update(
        &self,
        id: i32,
        epoch: i32,
        requested: &Entries,
        forgotten: &[Key],
    ) -> Result<Entries, i16> {
        let mut guard = self.inner.lock();
        let session = guard
            .1
            .get_mut(&id)
            .ok_or(super::code::FETCH_SESSION_ID_NOT_FOUND)?;
        if session.epoch != epoch {
            return Err(super::code::INVALID_FETCH_SESSION_EPOCH);
        }
        session.epoch = next_epoch(epoch);
        session.last_used = clock_now();
        for (key, offset, max_bytes) in requested {
            let entry = session.parts.entry(key.clone()).or_insert(Cached {
                fetch_offset: *offset,
                max_bytes: *max_bytes,
                high_watermark: -2,
                log_start: -2,
                last_stable_offset: -2,
            });
            entry.fetch_offset = *offset;
            entry.max_bytes = *max_bytes;
        }
        for key in forgotten {
            session.parts.shift_remove(key);
        }
        if session.parts.len() > MAX_PARTITIONS_PER_SESSION {
            // Too big to keep: drop it; the client's next full fetch is then served sessionless.
            guard.1.remove(&id);
            return Err(super::code::FETCH_SESSION_ID_NOT_FOUND);
        }
        Ok(session
            .parts
            .iter()
            .map(|(k, c)| (k.clone(), c.fetch_offset, c.max_bytes))
            .collect())
    }

    /// Decides whether a partition's response goes to the client (news since the last one) and remembers what
    /// it was told. Partitions of a vanished session are always sent.
    pub fn has_news(
        &self,
        id: i32,
        key: &Key,
        error: i16,
        records: usize,
        offsets: ToldOffsets,
    ) -> bool {
        let ToldOffsets {
            high_watermark,
            log_start,
            last_stable_offset,
        } = offsets;
        let mut guard = self.inner.lock();
        let Some(cached) = guard.1.get_mut(&id).and_then(|s| s.parts.get_mut(key)) else {
            return true;
        };
        let news = error != 0
            || records > 0
            || cached.high_watermark != high_watermark
            || cached.log_start != log_start
            || cached.last_stable_offset != last_stable_offset;
        cached.high_watermark = high_watermark;
        cached.log_start = log_start;
        cached.last_stable_offset = last_stable_offset;
        news
    }
}

/// The monotonic clock: tokio's, so a paused (simulated) runtime controls it; the OS's otherwise.
fn clock_now() -> Instant {
    tokio::time::Instant::now().into_std()
}
