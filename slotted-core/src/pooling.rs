//! What sits between this process and PostgreSQL: the server itself (or a pooler that keeps a
//! server session per client), or a transaction-mode pooler such as PgBouncer's
//! `pool_mode = transaction`. Set once, at start-up, before the first counter call.
//!
//! ```
//! use slotted_core::pooling::{self, Pooling};
//!
//! // DATABASE_URL points at PgBouncer with `pool_mode = transaction`.
//! pooling::set(Pooling::Transaction);
//! assert_eq!(pooling::get(), Pooling::Transaction);
//! # pooling::set(Pooling::Session);
//! ```
//!
//! Behind a transaction-mode pooler, a client's next transaction may run on another server
//! session, so a statement that one transaction prepared under a name is missing in the next,
//! or, worse, that name means another client's statement there (counts then land where they do
//! not belong). Under [`Pooling::Transaction`], slotted keeps no state on a server session from one
//! transaction to the next, on both faces:
//!
//! - every statement of slotted's is unnamed, never kept in the connection's statement cache:
//!   on a sync `PgConnection`, Diesel sends it parsed, bound and run in one message
//!   (`PQsendQueryParams`);
//! - on an `AsyncPgConnection`, which prepares every statement under a name (diesel-async
//!   0.9), a call made outside a transaction runs each statement inside a transaction of its
//!   own, so that the statement is prepared, run and closed on one server session.
//!
//! The one piece of session state slotted keeps on PostgreSQL, under either setting, is the
//! `connection` strategy's *writer index*: a session-level advisory lock and the session setting
//! `slotted.writer` (`set_config`), taken on a server session's first write and held until that
//! session ends (see the `connection` strategy in the guide's strategies chapter). It belongs to
//! the server session, not to the client: behind a transaction pooler each of the pooler's
//! server connections holds its own, whichever client's transaction it runs, which is what the
//! slot spread needs. slotted sets no other setting (`SET`) and takes no other lock. The cost of
//! this mode: a statement is parsed and planned on every call, and on the async face a call
//! outside a transaction takes three round trips more (`BEGIN`, the prepare, `COMMIT`).
//! Your own queries need the same care: see the guide's chapter on PgBouncer
//! (`docs/guide/pgbouncer.md`) for Diesel's, r2d2's, bb8's and deadpool's settings.
//!
//! MySQL, MariaDB and SQLite are not affected by this setting.

use std::sync::atomic::{AtomicU8, Ordering};

/// How this process reaches PostgreSQL; see the [module](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Pooling {
    /// The server itself, or a pooler that gives each client one server session for as long as
    /// it is connected (PgBouncer's `pool_mode = session`): slotted's hot statements are prepared
    /// once per connection and kept. The default.
    #[default]
    Session,
    /// A pooler that may run each transaction on another server session (PgBouncer's
    /// `pool_mode = transaction`, and hosted poolers that work the same way): slotted keeps
    /// nothing on a server session between transactions.
    Transaction,
}

static POOLING: AtomicU8 = AtomicU8::new(0);

/// Sets how this process reaches PostgreSQL, for every connection and counter from the next
/// call on. Set it at start-up, before counting.
pub fn set(pooling: Pooling) {
    let value = match pooling {
        Pooling::Session => 0,
        Pooling::Transaction => 1,
    };
    POOLING.store(value, Ordering::Relaxed);
}

/// How this process reaches PostgreSQL ([`Pooling::Session`] unless [`set`] said otherwise).
pub fn get() -> Pooling {
    match POOLING.load(Ordering::Relaxed) {
        0 => Pooling::Session,
        _ => Pooling::Transaction,
    }
}
