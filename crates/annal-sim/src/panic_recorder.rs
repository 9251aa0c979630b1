//! Panics inside a run are violations, even those a tokio task swallows (its `JoinHandle` would only report
//! them to whoever awaits it). A process-wide hook records them for the run on the current thread, which is
//! where turmoil runs every host; other threads' panics (other tests) pass through untouched.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    static PANICS: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

fn install() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = PANICS.try_with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    if let Some(list) = p.as_mut() {
                        list.push(info.to_string());
                    }
                }
            });
            previous(info);
        }));
    });
}

/// Records panics on this thread while it lives.
pub struct Recording(());

impl Recording {
    pub fn start() -> Recording {
        install();
        PANICS.with(|p| *p.borrow_mut() = Some(Vec::new()));
        Recording(())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        PANICS.with(|p| *p.borrow_mut() = None);
    }
}

/// The panics recorded since the last call.
pub fn take() -> Vec<String> {
    PANICS.with(|p| {
        p.borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    })
}
