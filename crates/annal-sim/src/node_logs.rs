//! The nodes' own logs (`RUST_LOG=annal_broker=info annal-sim --seed S`), stamped with the simulated time and
//! the node that wrote them, so that a replay's broker logs read side by side with its trace.
//!
//! Every node runs on its own tokio runtime inside turmoil: a line's node is the node that owns the runtime
//! of the task writing it ([`register_runtime`]), which also covers the tasks a broker spawns.

use std::fmt;

use parking_lot::Mutex;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// (runtime id, node): one entry per boot of a node, kept for the process's life (a run has a few dozen, a
/// replay one run; sweeps do not log).
static RUNTIMES: Mutex<Vec<(tokio::runtime::Id, i32)>> = Mutex::new(Vec::new());

/// Called by node `n`'s process at start: lines written on this runtime are node `n`'s.
pub(crate) fn register_runtime(n: i32) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        RUNTIMES.lock().push((handle.id(), n));
    }
}

/// Installs the stderr subscriber (filter from `RUST_LOG`).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_timer(SimTime)
        .with_ansi(false)
        .try_init();
}

/// "   12345 ms n2": the simulated time, as the trace prints it, and the writing node.
struct SimTime;

impl FormatTime for SimTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let node = tokio::runtime::Handle::try_current().ok().and_then(|h| {
            let id = h.id();
            RUNTIMES
                .lock()
                .iter()
                .rev()
                .find(|(r, _)| *r == id)
                .map(|(_, n)| *n)
        });
        match node {
            Some(n) => write!(w, "{:>8} ms  n{n}", crate::now_ms()),
            None => write!(w, "{:>8} ms  --", crate::now_ms()),
        }
    }
}
