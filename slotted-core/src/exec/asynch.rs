//! The async face: [`Exec`] over a diesel-async connection.

use std::time::Duration;

use diesel::deserialize::QueryableByName;
use diesel::QueryResult;
use diesel_async::{AsyncConnection, RunQueryDsl, TransactionManager};

use super::{BoxFuture, Exec, Run, Statement};
use crate::dialect::CounterBackend;

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

/// [`Exec`] on a diesel-async connection.
pub(crate) struct AsyncExec<'c, C>(pub &'c mut C);

impl<C: AsyncCounterConnection> Exec for AsyncExec<'_, C> {
    type Backend = C::Backend;

    fn execute<'a, S: Statement<Self::Backend> + 'a>(
        &'a mut self,
        statement: S,
    ) -> BoxFuture<'a, QueryResult<usize>> {
        Box::pin(Run(statement).execute(self.0))
    }

    fn load<'a, S, U>(&'a mut self, statement: S) -> BoxFuture<'a, QueryResult<Vec<U>>>
    where
        S: Statement<Self::Backend> + 'a,
        U: QueryableByName<Self::Backend> + Send + 'static,
    {
        Box::pin(Run(statement).load::<U>(self.0))
    }

    fn begin(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(C::TransactionManager::begin_transaction(self.0))
    }

    fn commit(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(C::TransactionManager::commit_transaction(self.0))
    }

    fn rollback(&mut self) -> BoxFuture<'_, QueryResult<()>> {
        Box::pin(C::TransactionManager::rollback_transaction(self.0))
    }

    fn in_transaction(&mut self) -> bool {
        matches!(
            C::TransactionManager::transaction_manager_status_mut(self.0).transaction_depth(),
            Ok(Some(_)) | Err(_)
        )
    }

    fn pause(&mut self, pause: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(pause))
    }

    fn mark_broken(&mut self) {
        C::TransactionManager::transaction_manager_status_mut(self.0).set_in_error();
    }
}
