//! The sync face: [`Exec`] over a Diesel connection, and [`run_now`], which finishes a job whose
//! futures are all ready.

use std::future::{ready, Future};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};

use diesel::connection::{
    LoadConnection, TransactionDepthChange, TransactionManager, TransactionManagerStatus,
};
use diesel::deserialize::QueryableByName;
use diesel::result::Error;
use diesel::{QueryResult, RunQueryDsl};

use super::{guard, BoxFuture, Exec, Guard, Run, Statement};
use crate::dialect::{CounterBackend, Dialect};
use crate::sql::transaction::{Begin, BeginImmediate, Commit, Control};

/// A connection whose backend slotted supports: `SqliteConnection`, `PgConnection`,
/// `MysqlConnection`, and r2d2's `PooledConnection`s of them.
///
/// Every counter call takes one and runs on it: inside its open transaction if it has one,
/// never opening one of its own (maintenance calls open one transaction per batch, which
/// becomes a savepoint inside yours).
///
/// A pool is not a connection: pass one of its connections, `&mut pool.get()?`. (rustc shows
/// this trait's message when the type is no `LoadConnection` at all; for a connection whose
/// backend is off it shows [`CounterBackend`]'s.)
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database connection slotted counters can run on",
    label = "expected a connection, such as `&mut SqliteConnection`",
    note = "a pool is not a connection: pass one of its connections, `&mut pool.get()?`",
    note = "counter calls take `&mut` of a Diesel connection (`SqliteConnection`, `PgConnection`, `MysqlConnection`) or of r2d2's `PooledConnection` of one"
)]
pub trait CounterConnection: LoadConnection<Backend: CounterBackend> + Send {}

impl<C> CounterConnection for C
where
    C: LoadConnection + Send,
    C::Backend: CounterBackend,
{
}

/// [`Exec`] on a sync Diesel connection: every future it returns is the call, already made.
pub(crate) struct SyncExec<'c, C>(pub &'c mut C);

impl<C: CounterConnection> Exec for SyncExec<'_, C> {
    type Backend = C::Backend;

    fn execute<'a, S: Statement<Self::Backend> + 'a>(
        &'a mut self,
        statement: S,
    ) -> BoxFuture<'a, QueryResult<usize>> {
        #[cfg(feature = "test-hooks")]
        self.silent_end();
        Box::pin(ready(Run(statement).execute(self.0)))
    }

    fn load<'a, S, U>(&'a mut self, statement: S) -> BoxFuture<'a, QueryResult<Vec<U>>>
    where
        S: Statement<Self::Backend> + 'a,
        U: QueryableByName<Self::Backend> + Send + 'static,
    {
        #[cfg(feature = "test-hooks")]
        self.silent_end();
        let rows = Run(statement).load::<U>(self.0);
        if matches!(rows, Err(diesel::result::Error::DatabaseError(..))) {
            self.after_failed_read();
        }
        Box::pin(ready(rows))
    }

    /// On MySQL and MariaDB a top-level `BEGIN` is a prepared statement (see [`begin_prepared`]);
    /// elsewhere, and for a savepoint, Diesel's transaction manager runs it.
    fn begin(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        if guard::applies(self, guard, None) {
            return guard::begin(self);
        }
        Box::pin(ready(match C::Backend::DIALECT {
            Dialect::Mysql => begin_prepared(self.0),
            Dialect::Sqlite => begin_immediate(self.0),
            Dialect::Postgres => C::TransactionManager::begin_transaction(self.0),
        }))
    }

    /// As [`SyncExec::begin`]: a top-level `COMMIT` on MySQL is prepared ([`commit_prepared`]).
    fn commit(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        if guard::applies(self, guard, Some(1)) {
            return guard::commit(self);
        }
        Box::pin(ready(match C::Backend::DIALECT {
            Dialect::Mysql => commit_prepared(self.0),
            Dialect::Postgres | Dialect::Sqlite => {
                C::TransactionManager::commit_transaction(self.0)
            }
        }))
    }

    fn rollback(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        if guard::applies(self, guard, Some(1)) {
            return guard::rollback(self);
        }
        Box::pin(ready(C::TransactionManager::rollback_transaction(self.0)))
    }

    fn control<S: Control + Statement<Self::Backend>>(
        &mut self,
        statement: S,
    ) -> BoxFuture<'_, QueryResult<()>> {
        if !guard::as_text::<S>() {
            match Run(statement).execute(self.0) {
                Err(e) if guard::refused::<S>(&e) => {}
                done => return Box::pin(ready(done.map(|_| ()))),
            }
        }
        Box::pin(ready(self.0.batch_execute(S::SQL)))
    }

    fn status(&mut self) -> &mut TransactionManagerStatus {
        C::TransactionManager::transaction_manager_status_mut(self.0)
    }

    fn pause(&mut self, pause: Duration) -> BoxFuture<'_, ()> {
        std::thread::sleep(pause);
        Box::pin(ready(()))
    }

    /// After a statement that returns rows fails on MySQL or MariaDB, drops the connection's
    /// cached prepared statements, resetting Diesel's statement cache to its default
    /// (`Unbounded`).
    ///
    /// Such a statement can fail after its result set has begun: a deadlock or lock wait
    /// timeout in a locking read or a SERIALIZABLE transaction's read, `KILL QUERY`, a
    /// statement time limit. libmariadb then leaves the prepared statement in a state where
    /// executing it again waits forever for rows the server never sends, and Diesel would keep
    /// it in the cache; closing it is safe. Only failures pay: the next calls prepare their
    /// statements again.
    fn after_failed_read(&mut self) {
        if C::Backend::DIALECT == Dialect::Mysql {
            forget_statements(self.0);
        }
    }
}

#[cfg(feature = "test-hooks")]
impl<C: CounterConnection> SyncExec<'_, C> {
    /// See [`super::hooks`].
    fn silent_end(&mut self) {
        if let Some(then) = super::hooks::due() {
            let _ = self.0.batch_execute("ROLLBACK");
            then();
        }
    }
}

/// Opens a transaction with a prepared `BEGIN` (one round trip; Diesel's `batch_execute` takes
/// three on `MysqlConnection`, see [`crate::sql::transaction`]) and records it in Diesel's
/// transaction manager, so that `conn.transaction` inside it makes a savepoint and Diesel's own
/// calls after it see no transaction. Inside an open transaction, Diesel makes the savepoint.
///
/// Diesel's instrumentation sees the statements `BEGIN` and `COMMIT` as queries, not as
/// transaction events.
fn begin_prepared<C: CounterConnection>(conn: &mut C) -> QueryResult<()> {
    if C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()?
        .is_some()
    {
        return C::TransactionManager::begin_transaction(conn);
    }
    if !PREPARED_BEGIN_REFUSED.load(Ordering::Relaxed) {
        match Run(Begin).execute(conn) {
            Ok(_) => return change_depth(conn, TransactionDepthChange::IncreaseDepth),
            Err(e) if refused_as_prepared(&e) => {
                PREPARED_BEGIN_REFUSED.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    C::TransactionManager::begin_transaction(conn)
}

/// SQLite: opens a transaction with `BEGIN IMMEDIATE` ([`BeginImmediate`]): every transaction
/// slotted opens writes, and a job that reads first (a roll-up reads its totals, then writes
/// them) would otherwise fail with `database is locked` whenever a writer committed in between.
/// Recorded in Diesel's transaction manager as [`begin_prepared`] records its `BEGIN`; inside an
/// open transaction, Diesel makes the savepoint.
fn begin_immediate<C: CounterConnection>(conn: &mut C) -> QueryResult<()> {
    if C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()?
        .is_some()
    {
        return C::TransactionManager::begin_transaction(conn);
    }
    Run(BeginImmediate).execute(conn)?;
    change_depth(conn, TransactionDepthChange::IncreaseDepth)
}

/// Set once a server refused `BEGIN` as a prepared statement: MariaDB prepares it, MySQL may
/// not (`ER_UNSUPPORTED_PS`). From then on this process opens MySQL transactions Diesel's way;
/// that costs round trips, never correctness.
static PREPARED_BEGIN_REFUSED: AtomicBool = AtomicBool::new(false);

/// MySQL's 1295, `ER_UNSUPPORTED_PS`: nothing ran.
pub(crate) fn refused_as_prepared(e: &Error) -> bool {
    matches!(e, Error::DatabaseError(_, info)
        if info.message().contains("not supported in the prepared statement protocol"))
}

/// Commits the transaction [`begin_prepared`] opened with a prepared `COMMIT`, as Diesel's
/// `AnsiTransactionManager::commit_transaction` does with its own: when it fails (a Galera
/// certification conflict, a lost connection), it rolls back and returns the commit's error,
/// or both errors if the rollback fails too, marking the transaction manager broken. A
/// savepoint's release, or a commit with no transaction open, is Diesel's.
fn commit_prepared<C: CounterConnection>(conn: &mut C) -> QueryResult<()> {
    let status = C::TransactionManager::transaction_manager_status_mut(conn);
    if status.transaction_depth()?.map(NonZeroU32::get) != Some(1) {
        return C::TransactionManager::commit_transaction(conn);
    }
    match Run(Commit).execute(conn) {
        Err(e) if refused_as_prepared(&e) => C::TransactionManager::commit_transaction(conn),
        Ok(_) => match change_depth(conn, TransactionDepthChange::DecreaseDepth) {
            // The connection may have noticed the transaction's end itself, as Diesel allows.
            Err(Error::NotInTransaction) => Ok(()),
            other => other,
        },
        Err(commit_error) => match C::TransactionManager::rollback_transaction(conn) {
            Ok(()) => Err(commit_error),
            Err(rollback_error) => {
                C::TransactionManager::transaction_manager_status_mut(conn).set_in_error();
                Err(Error::RollbackErrorOnCommit {
                    rollback_error: Box::new(rollback_error),
                    commit_error: Box::new(commit_error),
                })
            }
        },
    }
}

/// Records a `BEGIN` or `COMMIT` that [`begin_prepared`] or [`commit_prepared`] ran.
fn change_depth<C: CounterConnection>(
    conn: &mut C,
    change: TransactionDepthChange,
) -> QueryResult<()> {
    match C::TransactionManager::transaction_manager_status_mut(conn) {
        TransactionManagerStatus::Valid(status) => status.change_transaction_depth(change),
        TransactionManagerStatus::InError => Err(Error::BrokenTransactionManager),
    }
}

/// See [`SyncExec::after_failed_read`].
pub(crate) fn forget_statements<C: diesel::Connection>(conn: &mut C) {
    use diesel::connection::CacheSize;
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    conn.set_prepared_statement_cache_size(CacheSize::Unbounded);
}

/// Runs a job over [`SyncExec`] to its end on this thread. Its futures are ready when created,
/// so the first poll returns; the loop only guards that invariant without a panic path.
pub(crate) fn run_now<F: Future>(job: F) -> F::Output {
    let mut job = pin!(job);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = job.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}
