//! How the flusher is woken: early (the buffer filled), or to stop; by a condition variable for
//! the flusher thread, a tokio `Notify` for the flusher task.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::pending::lock;

/// Wakes the flusher: early (many pending keys) or to stop.
#[derive(Default)]
pub(crate) struct Signal {
    /// (raised early, stop)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
    #[cfg(feature = "async")]
    pub(crate) notify: tokio::sync::Notify,
}

impl Signal {
    fn set(&self, stop: bool) {
        let mut state = lock(&self.state);
        state.0 = true;
        state.1 |= stop;
        self.cv.notify_all();
        #[cfg(feature = "async")]
        self.notify.notify_one();
    }

    /// Asks for an early flush.
    pub(crate) fn raise(&self) {
        self.set(false);
    }

    /// Asks the flusher to finish.
    pub(crate) fn stop(&self) {
        self.set(true);
    }

    pub(crate) fn stopping(&self) -> bool {
        lock(&self.state).1
    }

    #[cfg(feature = "async")]
    /// Whether the wait is over: stopping, or raised when `early` counts (clearing it).
    pub(crate) fn over(&self, early: bool) -> bool {
        let mut state = lock(&self.state);
        let over = state.1 || (early && state.0);
        if over {
            state.0 = false;
        }
        over
    }

    /// Blocks until `deadline`, a stop, or with `early` a raise.
    pub(crate) fn wait_until(&self, deadline: Instant, early: bool) {
        let mut state = lock(&self.state);
        loop {
            if state.1 || (early && state.0) {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .cv
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.0 = false;
    }
}
