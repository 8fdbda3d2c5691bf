//! The sync face: [`Exec`] over a Diesel connection, and [`run_now`], which finishes a job whose
//! futures are all ready.

use std::future::{ready, Future};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use diesel::connection::{LoadConnection, TransactionManager};
use diesel::deserialize::QueryableByName;
use diesel::{QueryResult, RunQueryDsl};

use super::{BoxFuture, Exec, Run, Statement};
use crate::dialect::{CounterBackend, Dialect};

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
        Box::pin(ready(Run(statement).execute(self.0)))
    }

    fn load<'a, S, U>(&'a mut self, statement: S) -> BoxFuture<'a, QueryResult<Vec<U>>>
    where
        S: Statement<Self::Backend> + 'a,
        U: QueryableByName<Self::Backend> + Send + 'static,
    {
        let rows = Run(statement).load::<U>(self.0);
        if matches!(rows, Err(diesel::result::Error::DatabaseError(..))) {
            self.after_failed_read();
        }
        Box::pin(ready(rows))
    }

    fn begin(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(ready(C::TransactionManager::begin_transaction(self.0)))
    }

    fn commit(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(ready(C::TransactionManager::commit_transaction(self.0)))
    }

    fn rollback(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(ready(C::TransactionManager::rollback_transaction(self.0)))
    }

    fn in_transaction(&mut self) -> bool {
        matches!(
            C::TransactionManager::transaction_manager_status_mut(self.0).transaction_depth(),
            Ok(Some(_)) | Err(_)
        )
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
