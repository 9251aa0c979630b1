//! Per-partition file work (opening, creating and closing logs) on a few threads at once.
//!
//! Opening a new log or closing one is a handful of fsyncs (segment, indexes, producer snapshot, checkpoint,
//! directory). One partition after another, 2,000 partitions took 16 s to create and 22 s to close on this
//! project's machines. An fsync waits on the device, not the CPU, so several in flight at once overlap in the
//! device's queue; Kafka does the same with `num.recovery.threads.per.data.dir`.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Most threads that open or close logs at once (per call). The work waits on the device (fsyncs; at start-up,
/// reads of files the page cache no longer holds: a restart of 100,000 partitions spent ~22 s of mostly idle
/// CPU opening logs at 8), not the CPU, so this is a queue depth, not a core count. Each thread holds at most
/// one log's files open at a time beyond the file-handle budget.
pub const LOG_IO_THREADS_MAX: usize = 32;

/// `f` over every item, on up to [`LOG_IO_THREADS_MAX`] threads; the results in the items' order. Runs inline
/// when there is one item, or when no thread can be started.
pub fn map_in_parallel<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let count = items.len();
    let threads = count.min(LOG_IO_THREADS_MAX);
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let inputs: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let outputs: Vec<Mutex<Option<R>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= count {
            break;
        }
        let item = inputs[i].lock().take().expect("each item is taken once");
        *outputs[i].lock() = Some(f(item));
    };
    std::thread::scope(|scope| {
        for n in 1..threads {
            let started = std::thread::Builder::new()
                .name(format!("annal-log-io-{n}"))
                .spawn_scoped(scope, work);
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start a log I/O thread; continuing with fewer");
                break;
            }
        }
        // The calling thread works too, so the work finishes even if no thread could be started.
        work();
    });
    outputs
        .into_iter()
        .map(|r| r.into_inner().expect("every item was mapped"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_maps_each_item_once() {
        let calls = AtomicUsize::new(0);
        let out = map_in_parallel((0..1000).collect(), |i: u64| {
            calls.fetch_add(1, Ordering::Relaxed);
            i * 2
        });
        assert_eq!(calls.load(Ordering::Relaxed), 1000);
        assert_eq!(out, (0..1000).map(|i| i * 2).collect::<Vec<_>>());
        assert!(map_in_parallel(Vec::<u8>::new(), |x| x).is_empty());
        assert_eq!(map_in_parallel(vec![7], |x| x + 1), vec![8]);
    }
}
