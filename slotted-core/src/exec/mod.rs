//! How a statement is run: one small trait, [`Exec`], with a sync face over Diesel connections
//! ([`sync`]) and, behind the `async` feature, an async face over diesel-async ones
//! ([`asynch`]).
//!
//! Every counter call and maintenance job is written once, as an `async fn` over `Exec`
//! (`crate::ops`). The async face awaits it. The sync face runs it to completion on the calling
//! thread: its futures are ready when created (each one is the sync call already made), so
//! one poll finishes the job; no runtime is involved.

#[cfg(feature = "async")]
pub(crate) mod asynch;
#[cfg(feature = "async")]
pub(crate) mod cancel;
pub(crate) mod guard;
#[cfg(feature = "test-hooks")]
pub mod hooks;
pub(crate) mod sync;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::Untyped;
use diesel::QueryResult;

use crate::dialect::CounterBackend;
use crate::key::KeyKind;
use crate::sql::transaction::Control;
use crate::sql::{CounterRow, FromCounterRow};
pub(crate) use guard::Guard;

/// A statement value any face can run.
pub(crate) trait Statement<DB: CounterBackend>:
    QueryFragment<DB> + QueryId + Send + Sync
{
}
impl<DB: CounterBackend, S: QueryFragment<DB> + QueryId + Send + Sync> Statement<DB> for S {}

/// Runs statements and transactions on one connection.
///
/// Every method returns a boxed future, one concrete type: an opaque future per generic method
/// (or a generic associated type) carries its bounds into every job that awaits it, and rustc
/// then fails to prove such a job's future `Send` in generic code ("implementation of
/// `QueryFragment` is not general enough"). The box costs one small allocation per statement.
pub(crate) trait Exec: Send {
    type Backend: CounterBackend;

    /// Runs `statement`, returning the rows it changed.
    fn execute<'a, S: Statement<Self::Backend> + 'a>(
        &'a mut self,
        statement: S,
    ) -> BoxFuture<'a, QueryResult<usize>>;

    /// Runs `statement` and reads its rows.
    fn load<'a, S, U>(&'a mut self, statement: S) -> BoxFuture<'a, QueryResult<Vec<U>>>
    where
        S: Statement<Self::Backend> + 'a,
        U: diesel::deserialize::QueryableByName<Self::Backend> + Send + 'static;

    /// `BEGIN`, or a savepoint inside an open transaction; [`Guard::Marked`]: slotted's own
    /// transaction, guarded on MySQL when top-level ([`guard`]).
    fn begin(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>>;
    /// `COMMIT` (or releases the savepoint), with the `guard` it began with.
    fn commit(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>>;
    /// `ROLLBACK` (or to the savepoint), with the `guard` it began with.
    fn rollback(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>>;
    /// Runs one of the guard's statements as it is: no in-flight mark, and as text where the
    /// server refuses to prepare it.
    fn control<S: Control + Statement<Self::Backend>>(
        &mut self,
        statement: S,
    ) -> BoxFuture<'_, QueryResult<()>>;
    /// The connection's transaction manager.
    fn status(&mut self) -> &mut diesel::connection::TransactionManagerStatus;
    /// Whether a transaction is open (or the connection's transaction state is broken).
    fn in_transaction(&mut self) -> bool {
        matches!(self.status().transaction_depth(), Ok(Some(_)) | Err(_))
    }
    /// Waits before a retry.
    fn pause(&mut self, pause: Duration) -> BoxFuture<'_, ()>;
    /// After a retryable error (a read of the transaction's may have failed mid-result): on
    /// sync MySQL, forgets the connection's prepared statements (see `exec::sync`, whose `load`
    /// does the same after its own failed reads). Nothing elsewhere.
    fn after_failed_read(&mut self) {}
    /// Marks the connection's transaction manager broken, so that no pool (r2d2, bb8,
    /// deadpool) hands the connection out again and no transaction begins on it: for a reply
    /// that cannot belong to the statement just sent (see `Error::OutcomeUnknown`).
    fn mark_broken(&mut self) {
        self.status().set_in_error();
    }
}

/// The future every [`Exec`] method returns.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Loads rows of type `R`, which carry a key: read by the types the server sends its columns as
/// (see `sql::read_key`), then conformed to the counter's key columns' `kinds`, so that a key
/// read back equals the same key bound.
pub(crate) async fn load_keyed<E: Exec, S, R>(
    exec: &mut E,
    statement: S,
    kinds: &[KeyKind],
) -> QueryResult<Vec<R>>
where
    S: Statement<E::Backend>,
    R: FromCounterRow,
{
    let rows = exec.load::<_, CounterRow<R>>(statement).await?;
    Ok(rows
        .into_iter()
        .map(|CounterRow(mut row)| {
            row.key_mut().conform(kinds);
            row
        })
        .collect())
}

/// A statement, runnable by Diesel's `RunQueryDsl` (sync and async) on any connection. The
/// `SqlType` is declared here rather than on each statement: a projection bound in the
/// executor's signature would make futures over it fail to prove `Send` in generic code.
pub(crate) struct Run<S>(pub S);

impl<DB: CounterBackend, S: QueryFragment<DB>> QueryFragment<DB> for Run<S> {
    fn walk_ast<'b>(&'b self, mut pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if unnamed_statements::<DB>() {
            pass.unsafe_to_cache_prepared();
        }
        self.0.walk_ast(pass)
    }
}

/// Whether slotted's statements must be unnamed (never kept in a connection's statement cache):
/// on PostgreSQL behind a transaction-mode pooler ([`crate::pooling`]).
pub(crate) fn unnamed_statements<DB: CounterBackend>() -> bool {
    DB::DIALECT == crate::dialect::Dialect::Postgres
        && crate::pooling::get() == crate::pooling::Pooling::Transaction
}

impl<S: QueryId> QueryId for Run<S> {
    type QueryId = S::QueryId;
    const HAS_STATIC_QUERY_ID: bool = S::HAS_STATIC_QUERY_ID;
}

/// Every statement's rows, where it has any, are read by column name.
impl<S> Query for Run<S> {
    type SqlType = Untyped;
}

impl<S, C> diesel::RunQueryDsl<C> for Run<S> {}
