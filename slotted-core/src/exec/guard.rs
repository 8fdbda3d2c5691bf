//! The guard around slotted's own transactions on MySQL and MariaDB: a transaction the server
//! ended behind the client's back commits nothing.
//!
//! A MariaDB Galera node ends a local transaction that holds a row a replicated write needs (a
//! "brute force" abort). The client usually hears of it as error 1213 on its next statement, but
//! not always: a statement in flight at that moment can return its rows with no error, and the
//! session is then out of any transaction (`docs/bench/galera-absorb-overcount/`). Under
//! `autocommit = 1` every write after that commits on its own, so a transaction that moves a
//! count from one place to another (an absorb, a compaction, a flush) can commit half of itself.
//!
//! The guard, around each top-level transaction that slotted opens for itself on MySQL or
//! MariaDB:
//! 1. `autocommit` off (the session's own value kept in `@slotted_autocommit`): a statement after
//!    a silent end opens a new transaction instead of committing alone;
//! 2. a savepoint, `slotted_tx`, as the transaction's first statement: it lives exactly as long
//!    as the server-side transaction that took it;
//! 3. before `COMMIT`, `RELEASE SAVEPOINT slotted_tx`: gone (error 1305), the transaction that
//!    took it ended, and everything since is in another one, which the guard rolls back. The job
//!    sees a retryable error ([`ended_by_server`]) and runs again;
//! 4. after `COMMIT` or `ROLLBACK`, `autocommit` back as it was.
//!
//! While its statements outside a transaction are in flight, the connection's transaction
//! manager is in error: a future cut off there leaves a connection that pools close, never one
//! with `autocommit` off and no transaction recorded. A connection whose `autocommit` could not be
//! put back stays in error. Transactions of the caller's own are guarded only when the caller
//! asks (`retry::guarded_transaction_with_retry`): the guard costs three round trips.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU8, Ordering};

use diesel::connection::{TransactionDepthChange, TransactionManagerStatus};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::QueryResult;

use super::{BoxFuture, Exec};
use crate::dialect::{CounterBackend, Dialect};
use crate::sql::transaction::{
    AutocommitBack, AutocommitOff, CheckMark, Control, Mark, RollbackAll,
};

/// How a transaction slotted opens is begun and ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// As Diesel opens one: a transaction around the caller's own closure.
    Plain,
    /// Slotted's own job: guarded on MySQL and MariaDB when it is top-level (see the module).
    Marked,
}

/// Whether `guard` applies to a transaction of `exec` at `depth` (`None` when about to begin
/// one, `Some(1)` when ending it).
pub(crate) fn applies<E: Exec>(exec: &mut E, guard: Guard, depth: Option<u32>) -> bool {
    guard == Guard::Marked
        && <E::Backend as CounterBackend>::DIALECT == Dialect::Mysql
        && matches!(exec.status().transaction_depth(), Ok(d) if d.map(NonZeroU32::get) == depth)
}

/// Steps 1 and 2: `autocommit` off, then the savepoint; recorded as a transaction of depth 1.
pub(crate) fn begin<E: Exec>(exec: &mut E) -> BoxFuture<'_, QueryResult<()>> {
    Box::pin(async move {
        exec.status().set_in_error();
        if let Err(e) = exec.control(AutocommitOff).await {
            // Refused by the server (nothing changed) or not sent at all: no transaction. A lost
            // connection stays in error.
            if !crate::error::is_connection_lost(&e) {
                *exec.status() = TransactionManagerStatus::default();
            }
            return Err(e);
        }
        if let Err(e) = exec.control(Mark).await {
            return Err(abandon(exec, e).await);
        }
        *exec.status() = TransactionManagerStatus::default();
        increase_depth(exec.status())
    })
}

/// Step 3, then `COMMIT` (the face's own) and step 4.
pub(crate) fn commit<E: Exec>(exec: &mut E) -> BoxFuture<'_, QueryResult<()>> {
    Box::pin(async move {
        if let Err(e) = exec.control(CheckMark).await {
            let e = if is_missing_mark(&e) {
                ended_by_server()
            } else {
                e
            };
            return Err(abandon(exec, e).await);
        }
        match exec.commit(Guard::Plain).await {
            // Committed. Should `autocommit` not come back, the connection stays in error and
            // pools close it; the commit stands.
            Ok(()) => {
                let _ = autocommit_back(exec).await;
                Ok(())
            }
            Err(e) => Err(abandon(exec, e).await),
        }
    })
}

/// `ROLLBACK`, then step 4.
pub(crate) fn rollback<E: Exec>(exec: &mut E) -> BoxFuture<'_, QueryResult<()>> {
    Box::pin(async move {
        exec.status().set_in_error();
        exec.control(RollbackAll).await?;
        autocommit_back(exec).await
    })
}

/// Rolls back whatever the session has open and puts `autocommit` back, then returns `error`, the
/// one that matters.
async fn abandon<E: Exec>(exec: &mut E, error: DieselError) -> DieselError {
    let _ = rollback(exec).await;
    error
}

/// Step 4, with no transaction open: recorded as none once the server answered.
async fn autocommit_back<E: Exec>(exec: &mut E) -> QueryResult<()> {
    exec.status().set_in_error();
    exec.control(AutocommitBack).await?;
    *exec.status() = TransactionManagerStatus::default();
    Ok(())
}

fn increase_depth(status: &mut TransactionManagerStatus) -> QueryResult<()> {
    match status {
        TransactionManagerStatus::Valid(valid) => {
            valid.change_transaction_depth(TransactionDepthChange::IncreaseDepth)
        }
        TransactionManagerStatus::InError => Err(DieselError::BrokenTransactionManager),
    }
}

/// MySQL's 1305 for the guard's savepoint.
fn is_missing_mark(e: &DieselError) -> bool {
    matches!(e, DieselError::DatabaseError(_, info)
        if info.message().contains(crate::sql::transaction::MARK_NAME)
            && info.message().contains("does not exist"))
}

/// The error of a guarded transaction that the server ended before `COMMIT` without telling the
/// statements after it: a serialization failure, so that the job (or the caller) runs it again.
pub(crate) fn ended_by_server() -> DieselError {
    DieselError::DatabaseError(
        DatabaseErrorKind::SerializationFailure,
        Box::new(String::from(
            "the server ended this transaction before COMMIT and no statement after that said \
             so (a MariaDB Galera node aborts a local transaction that holds a row a replicated \
             write needs): nothing of it was committed, and it may run again",
        )),
    )
}

/// The guard's statements a server refused to prepare (MySQL's `ER_UNSUPPORTED_PS`), one bit
/// each: from then on this process sends them as text.
static REFUSED: AtomicU8 = AtomicU8::new(0);

/// Whether `S` goes as text.
pub(crate) fn as_text<S: Control>() -> bool {
    REFUSED.load(Ordering::Relaxed) & S::BIT != 0
}

/// After `S`'s prepare failed with `e`: whether the server refused to prepare it (then it goes
/// as text from now on) rather than failing it.
pub(crate) fn refused<S: Control>(e: &DieselError) -> bool {
    let refused = super::sync::refused_as_prepared(e);
    if refused {
        REFUSED.fetch_or(S::BIT, Ordering::Relaxed);
    }
    refused
}
