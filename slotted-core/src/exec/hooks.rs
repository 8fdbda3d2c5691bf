//! Tests only (feature `test-hooks`): the server ending a transaction behind the client's back,
//! on cue, as a MariaDB Galera node does when a replicated write needs a row the transaction
//! holds and the statement in flight then returns with no error (see `exec::guard`).

use std::cell::RefCell;

/// What runs once the session's transaction is ended.
type Then = Box<dyn FnOnce() + Send>;

thread_local! {
    /// Statements still to run before the end, and what runs then.
    static SILENT_END: RefCell<Option<(u32, Then)>> = const { RefCell::new(None) };
}

/// From now on, on this thread: right before the `n`-th statement that slotted runs (0-based;
/// its `BEGIN`, `COMMIT`, `ROLLBACK` and the guard's own statements are not counted), the
/// session is sent a `ROLLBACK` that slotted is not told of, and then `then` runs (another
/// session's write, say). Armed again, it replaces what was armed.
///
/// On the async face the hook is read when a statement's future is made, on the thread that
/// makes it: the test's own, under `Runtime::block_on`.
pub fn end_transaction_silently_before(n: u32, then: impl FnOnce() + Send + 'static) {
    SILENT_END.with(|hook| *hook.borrow_mut() = Some((n, Box::new(then))));
}

/// Whether the hook armed on this thread is still waiting for its statement.
pub fn armed() -> bool {
    SILENT_END.with(|hook| hook.borrow().is_some())
}

/// Disarms the hook of this thread.
pub fn disarm() {
    SILENT_END.with(|hook| *hook.borrow_mut() = None);
}

/// Before each statement: counts it, and returns the hook's `then` when this is the one.
pub(crate) fn due() -> Option<Then> {
    SILENT_END.with(|hook| {
        let mut hook = hook.borrow_mut();
        match hook.as_mut() {
            Some((0, _)) => hook.take().map(|(_, then)| then),
            Some((n, _)) => {
                *n -= 1;
                None
            }
            None => None,
        }
    })
}
