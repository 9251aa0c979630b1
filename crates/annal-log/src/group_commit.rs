//! Group commit: durable acknowledgements that share fsyncs.
//!
//! A durable mode acknowledges an append only once it is on stable storage. One fsync per append would cap a
//! partition at the disk's fsync rate (~250/s at 4 ms each); instead, every append waiting to become durable
//! shares the next fsync. [`GroupCommit`] runs one flusher thread per log. A caller appends under its lock, then
//! waits for the batch's last offset:
//!
//! ```
//! use std::sync::Arc;
//! use annal_log::{batch, AppendOptions, GroupCommit, Log, LogConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let log = Arc::new(parking_lot::Mutex::new(Log::open(dir.path(), LogConfig::default()).unwrap()));
//! let commit = GroupCommit::start(Arc::clone(&log));
//! let mut bytes = batch::build_uncompressed_batch(&[(None, Some(b"v".as_slice()))], 0);
//! let info = log.lock().append(&mut bytes, &AppendOptions::default()).unwrap(); // lock released here
//! commit.wait_durable(info.last_offset).unwrap(); // blocks until an fsync covered it
//! assert!(log.lock().flushed_offset() > info.last_offset);
//! ```
//!
//! The flusher takes [`Log::sync_handle`] under the log's lock, fsyncs without it (appends go on meanwhile),
//! then records the result with [`Log::mark_flushed`] and answers every waiter the fsync covered. Waiters that
//! arrive during an fsync share the next one, so the number of fsyncs follows the fsync latency, not the
//! append rate.
//!
//! **From async code** (the broker, on tokio): [`GroupCommit::durable`] returns a runtime-agnostic
//! [`DurableWait`] future; `.await` it after releasing the log's lock. It registers at once (so it joins the
//! next fsync even before it is first polled) and never blocks the executor: the fsync runs on the flusher
//! thread. (`tokio::task::spawn_blocking(move || commit.wait_durable(offset))` also works but ties up a
//! blocking thread per waiting request.)
//!
//! **Inline** ([`GroupCommit::start_inline`]): no flusher thread; the fsync round runs in the waiting caller
//! when it polls its [`DurableWait`] (or calls [`DurableWait::wait`]). For a deterministic simulation, where a
//! thread of its own would make the answer's timing depend on the OS scheduler.
//!
//! **Failure**: if an fsync fails, every waiter it was meant to cover, every later waiter, and every future
//! wait get [`DurableError::SyncFailed`]. After a failed fsync Linux may have dropped the dirty pages and a
//! later fsync can succeed without them, so durability can no longer be promised for this log: the owner should
//! stop serving the partition and reopen the log (recovery revalidates everything after the recovery point).
//!
//! **Truncation**: after [`Log::truncate_to`], call [`GroupCommit::truncated`] with the new log end (still
//! under the log's lock) so that waiters for removed offsets fail instead of being acknowledged by an fsync
//! of different records later at the same offsets. If truncations can race with appends (replication), register
//! the wait with [`GroupCommit::durable`] *before* releasing the lock taken for the append, then await it (or
//! call [`DurableWait::wait`]) after releasing it: a truncation can then never slip in between.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use crate::log::{Log, SyncHandle};

/// How the flusher reaches a log shared between threads. Implemented for `parking_lot::Mutex<Log>` and
/// `std::sync::Mutex<Log>`; a broker that keeps its log inside a larger locked structure implements
/// [`DurableLog::with_log`] by locking that structure. The flusher holds the lock only for
/// [`Log::sync_handle`] and [`Log::mark_flushed`], never during the fsync.
pub trait DurableLog: Send + Sync + 'static {
    /// Runs `f` on the log under its lock.
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R;
    /// Runs the fsync, without the log's lock. Override only to observe fsyncs or inject faults.
    fn sync(&self, handle: &SyncHandle) -> std::io::Result<()> {
        handle.sync()
    }
}

impl DurableLog for parking_lot::Mutex<Log> {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.lock())
    }
}

impl DurableLog for Mutex<Log> {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Why an append could not be acknowledged as durable.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DurableError {
    /// An fsync failed; see the module docs: stop serving the partition and reopen its log.
    #[error("fsync of the partition log failed ({0}); durability can no longer be promised: stop serving the partition and reopen its log so recovery revalidates it")]
    SyncFailed(Arc<std::io::Error>),
    /// The offset was truncated away before an fsync covered it.
    #[error("offset {offset} was truncated (new log end {log_end}) before it became durable; the append was lost")]
    Truncated { offset: i64, log_end: i64 },
    /// The offset was not in the log when an fsync of everything appended ran: wait only for appended offsets.
    #[error("offset {offset} is not in the log (an fsync of everything up to {log_end} did not cover it); wait only for offsets already appended")]
    NotAppended { offset: i64, log_end: i64 },
    /// The [`GroupCommit`] was dropped before an fsync covered the offset.
    #[error("group commit stopped before offset {offset} became durable")]
    Stopped { offset: i64 },
}

/// Runs group commits for one log; see the module docs. Dropping it stops the flusher thread (pending waiters
/// get [`DurableError::Stopped`]).
pub struct GroupCommit {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

/// One fsync round, run by the waiter itself in inline mode; `None` once the [`GroupCommit`] is dropped (which
/// releases the log, as joining the flusher thread does).
type InlineRound = Arc<dyn Fn(&Shared) + Send + Sync>;

struct Shared {
    state: Mutex<State>,
    inline: Mutex<Option<InlineRound>>,
    /// Wakes the flusher: a new waiter, a truncation or shutdown.
    work: Condvar,
    /// Wakes blocked `wait_durable` callers: some waiters got their answer.
    answered: Condvar,
}

struct Waiter {
    offset: i64,
    /// Rounds started before this waiter registered; rounds after that cover it if it was appended.
    rounds_before: u64,
    outcome: Option<Result<(), DurableError>>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct State {
    /// Every offset below this is durable (as far as this group commit knows).
    durable: i64,
    /// By registration order: an fsync wakes its waiters in one order (a simulation replays it).
    waiters: BTreeMap<u64, Waiter>,
    next_id: u64,
    /// Waiters without an outcome.
    pending: usize,
    rounds_started: u64,
    /// Bumped by truncations: a round that straddles one must not advance `durable`.
    generation: u64,
    failure: Option<Arc<std::io::Error>>,
    syncs: u64,
    shutdown: bool,
}

impl State {
    fn register(&mut self, offset: i64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let outcome = if offset < self.durable {
            Some(Ok(()))
        } else if let Some(e) = &self.failure {
            Some(Err(DurableError::SyncFailed(Arc::clone(e))))
        } else if self.shutdown {
            Some(Err(DurableError::Stopped { offset }))
        } else {
            self.pending += 1;
            None
        };
        self.waiters.insert(
            id,
            Waiter {
                offset,
                rounds_before: self.rounds_started,
                outcome,
                waker: None,
            },
        );
        id
    }

    /// Gives every pending waiter for which `decide` has an answer that answer; wakes async ones.
    fn answer(&mut self, mut decide: impl FnMut(&Waiter) -> Option<Result<(), DurableError>>) {
        for waiter in self.waiters.values_mut() {
            if waiter.outcome.is_some() {
                continue;
            }
            if let Some(outcome) = decide(waiter) {
                waiter.outcome = Some(outcome);
                self.pending -= 1;
                if let Some(waker) = waiter.waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupCommit {
    /// Starts the flusher thread for `log`.
    pub fn start<L: DurableLog>(log: Arc<L>) -> GroupCommit {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            inline: Mutex::new(None),
            work: Condvar::new(),
            answered: Condvar::new(),
        });
        let flusher = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("annal-group-commit".into())
                .spawn(move || flusher_loop(&shared, &*log))
                .expect("spawning the group commit thread")
        };
        GroupCommit {
            shared,
            flusher: Some(flusher),
        }
    }

    /// Group commit without a flusher thread: each waiter runs the fsync round itself when it waits (see the
    /// module docs). Waiters still share a round when they wait together.
    pub fn start_inline<L: DurableLog>(log: Arc<L>) -> GroupCommit {
        let round: InlineRound = Arc::new(move |shared: &Shared| sync_round(shared, &*log));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            inline: Mutex::new(Some(round)),
            work: Condvar::new(),
            answered: Condvar::new(),
        });
        GroupCommit {
            shared,
            flusher: None,
        }
    }

    /// Blocks until `offset` (already appended) is on stable storage.
    pub fn wait_durable(&self, offset: i64) -> Result<(), DurableError> {
        let mut state = lock(&self.shared.state);
        let id = state.register(offset);
        self.shared.work.notify_one();
        drop(state);
        run_inline(&self.shared, id);
        let mut state = lock(&self.shared.state);
        loop {
            if let Some(outcome) = state.waiters.get(&id).and_then(|w| w.outcome.clone()) {
                state.waiters.remove(&id);
                return outcome;
            }
            state = self
                .shared
                .answered
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A future that resolves once `offset` (already appended) is on stable storage. Registers immediately.
    pub fn durable(&self, offset: i64) -> DurableWait {
        let id = lock(&self.shared.state).register(offset);
        self.shared.work.notify_one();
        DurableWait {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// Tells the group commit that the log was truncated to `log_end`: waiters for offsets at or past it fail
    /// with [`DurableError::Truncated`], and an fsync in flight will not acknowledge the new records that will
    /// reuse those offsets. Call it right after [`Log::truncate_to`], under the same lock.
    pub fn truncated(&self, log_end: i64) {
        let mut state = lock(&self.shared.state);
        state.generation += 1;
        state.durable = state.durable.min(log_end);
        state.answer(|w| {
            (w.offset >= log_end).then_some(Err(DurableError::Truncated {
                offset: w.offset,
                log_end,
            }))
        });
        drop(state);
        self.shared.answered.notify_all();
    }

    /// Offsets below this are known durable.
    pub fn durable_offset(&self) -> i64 {
        lock(&self.shared.state).durable
    }

    /// How many fsync rounds ran (for metrics and tests).
    pub fn sync_count(&self) -> u64 {
        lock(&self.shared.state).syncs
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        let inline = self
            .shared
            .inline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .is_some();
        let mut state = lock(&self.shared.state);
        state.shutdown = true;
        if inline {
            state.answer(|w| Some(Err(DurableError::Stopped { offset: w.offset })));
        }
        drop(state);
        self.shared.answered.notify_all();
        self.shared.work.notify_all();
        if let Some(flusher) = self.flusher.take() {
            let _ = flusher.join();
        }
    }
}

fn flusher_loop<L: DurableLog>(shared: &Shared, log: &L) {
    loop {
        let mut state = lock(&shared.state);
        while !state.shutdown && (state.pending == 0 || state.failure.is_some()) {
            state = shared
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.shutdown {
            state.answer(|w| Some(Err(DurableError::Stopped { offset: w.offset })));
            drop(state);
            shared.answered.notify_all();
            return;
        }
        drop(state);
        sync_round(shared, log);
    }
}

/// In inline mode, runs fsync rounds in the caller until waiter `id` has its answer (a round covers every
/// waiter registered before it, so one normally does; a truncation during it makes the next one decide).
fn run_inline(shared: &Shared, id: u64) {
    const INLINE_ROUNDS_MAX: usize = 4;
    for _ in 0..INLINE_ROUNDS_MAX {
        let Some(round) = shared
            .inline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        let answered = lock(&shared.state)
            .waiters
            .get(&id)
            .is_none_or(|w| w.outcome.is_some());
        if answered {
            return;
        }
        round(shared);
    }
}

/// One fsync round: takes the log's sync handle, fsyncs, and answers every waiter the fsync covered.
fn sync_round<L: DurableLog>(shared: &Shared, log: &L) {
    {
        let mut state = lock(&shared.state);
        state.rounds_started += 1;
        let round = state.rounds_started;
        let generation = state.generation;
        drop(state);

        let handle = log.with_log(|l| l.sync_handle());
        let result = log.sync(&handle);
        let upto = handle.upto();

        match result {
            Ok(()) => log.with_log(|l| {
                // Under the log's lock, so no truncation slips in between the check and mark_flushed (callers
                // report truncations under that lock): the fsync covered exactly what is below `upto` now.
                let mut state = lock(&shared.state);
                state.syncs += 1;
                if state.generation != generation {
                    return; // a truncation happened meanwhile: the next round decides
                }
                l.mark_flushed(upto);
                state.durable = state.durable.max(upto);
                let durable = state.durable;
                state.answer(|w| {
                    if w.offset < durable {
                        Some(Ok(()))
                    } else if w.rounds_before < round {
                        // Registered before this round took its handle, so appended before it: yet not covered.
                        Some(Err(DurableError::NotAppended {
                            offset: w.offset,
                            log_end: upto,
                        }))
                    } else {
                        None
                    }
                });
            }),
            Err(e) => {
                // The log stops trusting itself too: without this a later flush (a roll, `flush.ms`) could
                // succeed and advance the recovery point over pages this failure may have dropped.
                log.with_log(|l| {
                    let dir = l.dir().to_path_buf();
                    l.fsync_failed(&dir, &e)
                });
                tracing::error!(error = %e, "fsync failed; durable acknowledgements stop for this log");
                let e = Arc::new(e);
                let mut state = lock(&shared.state);
                state.syncs += 1;
                state.failure = Some(Arc::clone(&e));
                state.answer(|_| Some(Err(DurableError::SyncFailed(Arc::clone(&e)))));
            }
        }
        shared.answered.notify_all();
    }
}

/// Resolves when an offset is durable; see [`GroupCommit::durable`]. Dropping it withdraws the wait.
pub struct DurableWait {
    shared: Arc<Shared>,
    id: u64,
}

impl DurableWait {
    /// Blocks the calling thread until the offset is durable (for synchronous callers that registered under a
    /// lock with [`GroupCommit::durable`]).
    pub fn wait(self) -> Result<(), DurableError> {
        run_inline(&self.shared, self.id);
        let mut state = lock(&self.shared.state);
        loop {
            if let Some(outcome) = state.waiters.get(&self.id).and_then(|w| w.outcome.clone()) {
                state.waiters.remove(&self.id);
                return outcome;
            }
            state = self
                .shared
                .answered
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Future for DurableWait {
    type Output = Result<(), DurableError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        run_inline(&self.shared, self.id);
        let mut state = lock(&self.shared.state);
        let Some(waiter) = state.waiters.get_mut(&self.id) else {
            // Already answered and taken: polled after completion.
            return Poll::Ready(Err(DurableError::Stopped { offset: -1 }));
        };
        if let Some(outcome) = waiter.outcome.clone() {
            state.waiters.remove(&self.id);
            return Poll::Ready(outcome);
        }
        waiter.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for DurableWait {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        if let Some(waiter) = state.waiters.remove(&self.id) {
            if waiter.outcome.is_none() {
                state.pending -= 1;
            }
        }
    }
}
