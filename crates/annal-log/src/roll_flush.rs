//! The fsync of a segment that has just stopped being the active one, run off the append path.
//!
//! Rolling used to fsync the old segment inside the append that triggered the roll: for a 1 GiB segment that
//! blocked the append (and every producer behind the partition lock) for 0.3-1.1 s. As Kafka does (it schedules
//! `flush-log` at roll), the fsync now runs on a short-lived thread; the log advances its recovery point to the
//! old segment's end only once the thread reports success, and only if no truncation happened meanwhile (a
//! truncation may have cut the segment and new records may reuse its offsets, which the fsync did not cover).
//!
//! Bounded: a log has at most one [`RollFlush`] in flight; the next roll waits for the previous one first. Until
//! it completes, crash recovery simply scans the old segment again (the recovery point has not moved), and
//! [`crate::Log::flush`] and [`crate::Log::close`] wait for it before they call anything durable.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A failed background fsync: which file, and why.
#[derive(Debug)]
pub(crate) struct FlushFailure {
    pub path: PathBuf,
    pub error: std::io::Error,
}

type Outcome = Result<(), FlushFailure>;

/// An fsync of a rolled segment's files, running (or done).
#[derive(Debug)]
pub(crate) struct RollFlush {
    /// Every offset below this is durable once the flush succeeded (the old segment's end; earlier segments
    /// were flushed by earlier rolls).
    pub upto: i64,
    /// The log's truncation generation when the flush started.
    pub generation: u64,
    state: State,
}

#[derive(Debug)]
enum State {
    Running(JoinHandle<Outcome>),
    /// The thread could not be spawned, so the fsync ran inline.
    Done(Outcome),
}

impl RollFlush {
    /// Starts fsyncing `files` on a new thread. If no thread can be spawned, fsyncs inline (the old behaviour).
    pub fn start(
        files: Vec<(Arc<File>, PathBuf)>,
        upto: i64,
        generation: u64,
        gate: Option<Arc<Gate>>,
    ) -> RollFlush {
        let shared = Arc::new(files);
        if crate::page_cache::tracking() {
            // A simulation: a thread finishing at a wall-clock moment would decide what a simulated crash
            // keeps (and when the recovery point moves), so the run would depend on the machine.
            drop(gate);
            return RollFlush {
                upto,
                generation,
                state: State::Done(sync_all(&shared)),
            };
        }
        let for_thread = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("annal-roll-flush".into())
            .spawn(move || {
                if let Some(gate) = gate {
                    gate.wait_open();
                }
                sync_all(&for_thread)
            });
        let state = match spawned {
            Ok(thread) => State::Running(thread),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a thread for the roll fsync; running it inline");
                State::Done(sync_all(&shared))
            }
        };
        RollFlush {
            upto,
            generation,
            state,
        }
    }

    /// True once the fsync is over (a later [`RollFlush::wait`] does not block).
    pub fn is_finished(&self) -> bool {
        match &self.state {
            State::Running(thread) => thread.is_finished(),
            State::Done(_) => true,
        }
    }

    /// Waits for the fsync to end and returns its outcome.
    pub fn wait(self) -> Outcome {
        match self.state {
            State::Done(outcome) => outcome,
            State::Running(thread) => thread.join().unwrap_or_else(|_| {
                Err(FlushFailure {
                    path: PathBuf::new(),
                    error: std::io::Error::other("the roll fsync thread panicked"),
                })
            }),
        }
    }
}

fn sync_all(files: &[(Arc<File>, PathBuf)]) -> Outcome {
    for (file, path) in files {
        crate::fsync_stats::timed(|| crate::disk_faults::sync_data(file, path)).map_err(
            |error| FlushFailure {
                path: path.clone(),
                error,
            },
        )?;
        crate::page_cache::mark_durable(file);
    }
    Ok(())
}

/// Holds roll fsyncs back until opened, so tests can observe an append while a roll's fsync is pending.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }

    fn wait_open(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}
