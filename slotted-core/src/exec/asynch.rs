//! The async face: [`Exec`] over a diesel-async connection.

use std::time::Duration;

use diesel::deserialize::QueryableByName;
use diesel::QueryResult;
use diesel_async::{AsyncConnection, RunQueryDsl, TransactionManager};

use super::{guard, BoxFuture, Exec, Guard, Run, Statement};
use crate::dialect::CounterBackend;
use crate::sql::transaction::Control;

/// An async connection whose backend slotted supports: diesel-async's `AsyncPgConnection` and
/// `AsyncMysqlConnection`, `SyncConnectionWrapper<SqliteConnection>`, and bb8's or deadpool's
/// pooled connections of them, passed as they are (`&mut pool.get().await?`).
///
/// Every `*_async` counter call takes one and runs on it, inside its open transaction if it has
/// one, exactly as the sync calls do on a [`CounterConnection`](crate::CounterConnection).
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a diesel-async connection slotted can count on",
    label = "expected `&mut` an async connection",
    note = "pass a diesel-async connection (`AsyncPgConnection`, `AsyncMysqlConnection`, \
            `SyncConnectionWrapper<SqliteConnection>`) or a pooled one: `&mut pool.get().await?`; \
            for a sync Diesel connection, call the method without `_async`"
)]
pub trait AsyncCounterConnection: AsyncConnection<Backend: CounterBackend> + Send {}

impl<C> AsyncCounterConnection for C
where
    C: AsyncConnection + Send,
    C::Backend: CounterBackend,
{
}

/// Runs `$run(conn)` (a statement) in a transaction of its own on `$conn`, and again, up to
/// [`NAME_CLASH_RETRIES`] times, when its prepare clashed with a name another client left on the
/// server session (`is_statement_name_clash`). A macro: a closure returning a future that borrows
/// the connection cannot be written as a plain function's argument in a `Send` future.
macro_rules! in_own_transactions {
    ($conn:expr, |$c:ident| $run:expr) => {{
        let mut attempt = 0;
        loop {
            let mut tx = OwnTransaction::begin(&mut *$conn).await?;
            let $c = &mut *tx.conn;
            let result = $run.await;
            match tx.end(result).await {
                Err(e) if is_statement_name_clash(&e) && attempt < NAME_CLASH_RETRIES => {
                    attempt += 1;
                }
                done => break done,
            }
        }
    }};
}

/// Runs `$run(conn)` (a statement) with the connection marked broken while the statement is in
/// flight outside a transaction, where the connection's reply may outlive a cut-off
/// ([`replies_outlive_a_cut_off`]): dropped before the reply was read, the future leaves the mark,
/// so every pool (bb8, deadpool, `CancelGuard`) closes the connection instead of handing it to
/// the next request, and a later slotted call on it fails ([`StepCheck::OutOfStep`]) instead of
/// reading this statement's reply as its own. Inside a transaction the open transaction already
/// makes pools close a connection whose future was dropped, so nothing is marked there. A macro
/// for the reason `in_own_transactions!` is one.
macro_rules! in_flight {
    ($conn:expr, |$c:ident| $run:expr) => {{
        let conn = $conn;
        match StepCheck::of(&mut *conn) {
            StepCheck::OutOfStep => Err(out_of_step()),
            StepCheck::InTransaction => {
                let $c = &mut *conn;
                $run.await
            }
            StepCheck::Outside => {
                // The mark: diesel-async's `is_broken`, which pools ask, is true for a manager
                // in error. Nothing reads the manager while the statement runs (outside a
                // transaction diesel-async's MySQL connection only touches it after a
                // serialization failure inside one).
                C::TransactionManager::transaction_manager_status_mut(&mut *conn).set_in_error();
                let result = {
                    let $c = &mut *conn;
                    $run.await
                };
                // The reply was read: back to "no transaction", the state it was marked from.
                *C::TransactionManager::transaction_manager_status_mut(&mut *conn) =
                    diesel::connection::TransactionManagerStatus::default();
                result
            }
        }
    }};
}

/// Where a connection stands before a statement that [`in_flight!`] runs.
enum StepCheck {
    /// Inside a transaction: no mark needed.
    InTransaction,
    /// No transaction, and in step with the server: marked while the statement runs.
    Outside,
    /// Marked broken and no transaction: a statement was cut off on it before its reply was read
    /// (by [`in_flight!`], or diesel-async's own mark of a cut-off `BEGIN`, `COMMIT` or
    /// `ROLLBACK`). Its next reply may be that statement's: refuse.
    OutOfStep,
}

impl StepCheck {
    fn of<C: AsyncCounterConnection>(conn: &mut C) -> Self {
        match C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth() {
            Ok(Some(_)) => StepCheck::InTransaction,
            Err(_) => StepCheck::OutOfStep,
            Ok(None) if C::TransactionManager::is_broken_transaction_manager(conn) => {
                StepCheck::OutOfStep
            }
            Ok(None) => StepCheck::Outside,
        }
    }
}

/// The error of a slotted call on a connection that an earlier cut-off left out of step.
/// `ClosedConnection`: the call may run on another connection ([`Failure::Reconnect`]).
///
/// [`Failure::Reconnect`]: crate::Failure::Reconnect
fn out_of_step() -> diesel::result::Error {
    diesel::result::Error::DatabaseError(
        diesel::result::DatabaseErrorKind::ClosedConnection,
        Box::new(String::from(
            "an earlier call on this connection was cut off before the server's reply was read, \
             or inside a transaction slotted opened (which may still be open on the server), so \
             the connection is out of step with the server and was marked broken (a pool closes \
             it): nothing was sent; take another connection",
        )),
    )
}

/// Whether a statement's reply outlives a cut-off on this backend: diesel-async's MySQL
/// connection reads the reply of a statement whose future was dropped as the next statement's.
/// tokio-postgres reads and drops such a reply; a SQLite call goes on to its end on its blocking
/// thread, whose connection the next call waits for.
fn replies_outlive_a_cut_off<DB: CounterBackend>() -> bool {
    DB::DIALECT == crate::dialect::Dialect::Mysql
}

/// [`Exec`] on a diesel-async connection, and whether a transaction slotted opened for a job of
/// its own ([`Guard::Marked`], top-level) is open on it.
///
/// Dropped with that transaction open (the job's future was cut off inside it), it marks the
/// connection's transaction manager in error: the transaction is still open on the server, with
/// its locks (and on MySQL its `autocommit` off and perhaps a reply in the socket). Pools then
/// close the connection, and slotted's next call on a bare one refuses it
/// ([`StepCheck::OutOfStep`]) instead of running inside that transaction, where nothing would
/// ever commit.
pub(crate) struct AsyncExec<'c, C: AsyncCounterConnection>(pub &'c mut C, bool);

impl<'c, C: AsyncCounterConnection> AsyncExec<'c, C> {
    pub(crate) fn new(conn: &'c mut C) -> Self {
        AsyncExec(conn, false)
    }

    /// See [`super::hooks`]: a `ROLLBACK` the transaction manager is not told of, then `then`.
    #[cfg(feature = "test-hooks")]
    async fn silent_end(&mut self, then: Box<dyn FnOnce() + Send>) {
        let _ = self.0.batch_execute("ROLLBACK").await;
        then();
    }

    /// Whether the transaction manager is in error: on PostgreSQL and SQLite (MySQL's statements
    /// ask [`StepCheck`]), a job of slotted's was cut off inside its own transaction, which may
    /// still be open on the server. A statement run now would run inside it, and never commit.
    fn marked_broken(&mut self) -> bool {
        self.status().transaction_depth().is_err()
    }

    /// Whether no transaction is open: a [`Guard::Marked`] transaction begun now is the job's own.
    fn top_level(&mut self) -> bool {
        matches!(self.status().transaction_depth(), Ok(None))
    }
}

impl<C: AsyncCounterConnection> Drop for AsyncExec<'_, C> {
    fn drop(&mut self) {
        if self.1 {
            self.mark_broken();
        }
    }
}

impl<C: AsyncCounterConnection> Exec for AsyncExec<'_, C> {
    type Backend = C::Backend;

    fn execute<'a, S: Statement<Self::Backend> + 'a>(
        &'a mut self,
        statement: S,
    ) -> BoxFuture<'a, QueryResult<usize>> {
        #[cfg(feature = "test-hooks")]
        if let Some(then) = super::hooks::due() {
            return Box::pin(async move {
                self.silent_end(then).await;
                Exec::execute(self, statement).await
            });
        }
        if self.needs_own_transaction() {
            let conn = &mut *self.0;
            return Box::pin(
                async move { in_own_transactions!(conn, |c| Run(&statement).execute(c)) },
            );
        }
        if replies_outlive_a_cut_off::<C::Backend>() {
            let conn = &mut *self.0;
            return Box::pin(async move { in_flight!(conn, |c| Run(statement).execute(c)) });
        }
        if self.marked_broken() {
            return Box::pin(std::future::ready(Err(out_of_step())));
        }
        Box::pin(Run(statement).execute(self.0))
    }

    fn load<'a, S, U>(&'a mut self, statement: S) -> BoxFuture<'a, QueryResult<Vec<U>>>
    where
        S: Statement<Self::Backend> + 'a,
        U: QueryableByName<Self::Backend> + Send + 'static,
    {
        #[cfg(feature = "test-hooks")]
        if let Some(then) = super::hooks::due() {
            return Box::pin(async move {
                self.silent_end(then).await;
                Exec::load::<S, U>(self, statement).await
            });
        }
        if self.needs_own_transaction() {
            let conn = &mut *self.0;
            return Box::pin(async move {
                in_own_transactions!(conn, |c| Run(&statement).load::<U>(c))
            });
        }
        if replies_outlive_a_cut_off::<C::Backend>() {
            let conn = &mut *self.0;
            return Box::pin(async move { in_flight!(conn, |c| Run(statement).load::<U>(c)) });
        }
        if self.marked_broken() {
            return Box::pin(std::future::ready(Err(out_of_step())));
        }
        Box::pin(Run(statement).load::<U>(self.0))
    }

    fn begin(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        let own = guard == Guard::Marked && self.top_level();
        Box::pin(async move {
            // Open before `BEGIN` is sent: cut off while it is on the wire, the server may have
            // begun the transaction.
            self.1 |= own;
            let begun = if guard::applies(self, guard, None) {
                guard::begin(self).await
            } else if C::Backend::DIALECT == crate::dialect::Dialect::Sqlite {
                begin_immediate(&mut *self.0).await
            } else {
                C::TransactionManager::begin_transaction(self.0).await
            };
            // `BEGIN` answered with an error: no transaction.
            self.1 &= begun.is_ok();
            begun
        })
    }

    fn commit(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(async move {
            let done = if guard::applies(self, guard, Some(1)) {
                guard::commit(self).await
            } else {
                C::TransactionManager::commit_transaction(self.0).await
            };
            self.1 &= !self.top_level();
            done
        })
    }

    fn rollback(&mut self, guard: Guard) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(async move {
            let done = if guard::applies(self, guard, Some(1)) {
                guard::rollback(self).await
            } else {
                C::TransactionManager::rollback_transaction(self.0).await
            };
            self.1 &= !self.top_level();
            done
        })
    }

    fn control<S: Control + Statement<Self::Backend>>(
        &mut self,
        statement: S,
    ) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(async move {
            if !guard::as_text::<S>() {
                match Run(statement).execute(&mut *self.0).await {
                    Err(e) if guard::refused::<S>(&e) => {}
                    done => return done.map(|_| ()),
                }
            }
            self.0.batch_execute(S::SQL).await
        })
    }

    fn status(&mut self) -> &mut diesel::connection::TransactionManagerStatus {
        C::TransactionManager::transaction_manager_status_mut(self.0)
    }

    fn pause(&mut self, pause: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(pause))
    }
}

impl<C: AsyncCounterConnection> AsyncExec<'_, C> {
    /// Behind a transaction-mode pooler, diesel-async prepares each statement under a name in
    /// one round trip and runs it in the next; outside a transaction the pooler may send the two
    /// to different server sessions. Inside one, both (and the statement's close, which
    /// tokio-postgres sends as the statement is dropped, before `COMMIT`) reach the same session.
    ///
    /// A transaction manager in error (a transaction of this kind cut off earlier) counts as
    /// "no transaction": `BEGIN` is then refused, and the call fails instead of running inside
    /// whatever the server still has open.
    fn needs_own_transaction(&mut self) -> bool {
        super::unnamed_statements::<C::Backend>()
            && !matches!(
                C::TransactionManager::transaction_manager_status_mut(self.0).transaction_depth(),
                Ok(Some(_))
            )
    }
}

/// Times a statement that [`AsyncExec`] runs in a transaction of its own is run again after its
/// prepare clashed with a statement another client left on the pooler's server session.
const NAME_CLASH_RETRIES: u32 = 3;

/// Whether `e` says the statement's name clashed with one that another client of the pooler left
/// on the server session (`prepared statement "s12" already exists`, PostgreSQL's `42P05`): the
/// prepare failed, so nothing of the statement ran, and tokio-postgres names the next prepare
/// afresh. (Left there by a client that prepared a named statement outside a transaction, as
/// diesel-async does for every statement.)
fn is_statement_name_clash(e: &diesel::result::Error) -> bool {
    crate::error::is_statement_name_error(e)
        && matches!(e, diesel::result::Error::DatabaseError(_, info) if info.message().ends_with("already exists"))
}

/// The transaction [`AsyncExec`] opens around one statement (see `needs_own_transaction`).
///
/// Dropped before it ended (the call was cut off), it marks the connection's transaction manager
/// in error: the transaction may be open on the server with the statement's row lock, and must
/// never be committed by a later call. Pools (bb8, deadpool, `CancelGuard`) then close the
/// connection, and the server rolls the transaction back; on a connection outside a pool every
/// later call fails (diesel-async's `BrokenTransactionManager`) instead of counting inside it.
struct OwnTransaction<'a, C: AsyncCounterConnection> {
    conn: &'a mut C,
    open: bool,
}

impl<'a, C: AsyncCounterConnection> OwnTransaction<'a, C> {
    async fn begin(conn: &'a mut C) -> QueryResult<Self> {
        // No transaction is open here (`needs_own_transaction`), so a "broken" manager is one in
        // error, or one whose `BEGIN`/`COMMIT` was cut off earlier: refuse, as pools do, rather
        // than begin on it (diesel-async asserts against that in debug builds).
        if C::TransactionManager::is_broken_transaction_manager(conn) {
            return Err(diesel::result::Error::BrokenTransactionManager);
        }
        // Open before `BEGIN` is sent: cut off while it is on the wire, the server may have
        // begun the transaction.
        let mut tx = OwnTransaction { conn, open: true };
        if let Err(e) = C::TransactionManager::begin_transaction(&mut *tx.conn).await {
            // `BEGIN` answered with an error: no transaction, nothing to guard.
            tx.open = false;
            return Err(e);
        }
        Ok(tx)
    }

    /// `COMMIT` after the statement succeeded, `ROLLBACK` after it failed (its error is the one
    /// returned).
    async fn end<T>(&mut self, result: QueryResult<T>) -> QueryResult<T> {
        let ended = match result {
            Ok(value) => C::TransactionManager::commit_transaction(&mut *self.conn)
                .await
                .map(|()| value),
            Err(e) => {
                // The statement's error is the one that matters; a failed rollback leaves the
                // transaction manager in error, which pools see.
                let _ = C::TransactionManager::rollback_transaction(&mut *self.conn).await;
                Err(e)
            }
        };
        self.open = false;
        ended
    }
}

impl<C: AsyncCounterConnection> Drop for OwnTransaction<'_, C> {
    fn drop(&mut self) {
        if self.open {
            C::TransactionManager::transaction_manager_status_mut(self.conn).set_in_error();
        }
    }
}

/// SQLite (`SyncConnectionWrapper`): opens a transaction with `BEGIN IMMEDIATE`, as the sync
/// face does (see `exec::sync`): the write lock first, through the busy timeout, so that a job
/// that reads, then writes, does not fail with `database is locked` when a writer commits in
/// between. The transaction manager is marked in error while `BEGIN` is in flight, so that a
/// future cut off then leaves a connection that pools close (and later calls refuse) rather
/// than one in a transaction its manager does not know; once `BEGIN` answered, it records the
/// transaction (or, after an error, none). Inside an open transaction, diesel-async makes the
/// savepoint.
async fn begin_immediate<C: AsyncCounterConnection>(conn: &mut C) -> QueryResult<()> {
    use diesel::connection::{TransactionDepthChange, TransactionManagerStatus};
    if C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()?
        .is_some()
    {
        return C::TransactionManager::begin_transaction(conn).await;
    }
    C::TransactionManager::transaction_manager_status_mut(conn).set_in_error();
    let begun = Run(crate::sql::transaction::BeginImmediate)
        .execute(conn)
        .await;
    let status = C::TransactionManager::transaction_manager_status_mut(conn);
    *status = TransactionManagerStatus::default();
    begun?;
    match status {
        TransactionManagerStatus::Valid(valid) => {
            valid.change_transaction_depth(TransactionDepthChange::IncreaseDepth)
        }
        TransactionManagerStatus::InError => Err(diesel::result::Error::BrokenTransactionManager),
    }
}
