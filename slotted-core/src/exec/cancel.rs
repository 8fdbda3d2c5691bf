//! [`CancelGuard`]: a pooled connection that is closed, not returned to its pool, when a call on
//! it was cut off in a way that leaves it unusable.
//!
//! Why a guard is needed (diesel-async 0.9): a query future dropped after the server got its
//! statement leaves `AsyncMysqlConnection` out of step (the reply is still on the wire and the
//! next query reads it), and a transaction cut off on a deadpool connection stays open, with its
//! row locks, until deadpool next takes that connection out. Neither pool sees the first case
//! (`is_broken` is false); deadpool sees the second only later.
//!
//! slotted's own calls need no guard for the first case: the async executor marks a MySQL
//! connection broken while one of slotted's statements is in flight outside a transaction
//! (`in_flight!` in `exec/asynch.rs`), so a cut-off leaves the mark and every pool closes the
//! connection. The guard is for the application's own queries and transactions on the same
//! connection, which slotted does not see.

use std::future::Future;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::{AsyncConnection, TransactionManager};

use crate::dialect::{CounterBackend, Dialect};
use crate::exec::asynch::AsyncCounterConnection;

/// A connection of bb8's or deadpool's pool of diesel-async connections, which
/// [`CancelGuard`] can close instead of returning it.
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub trait PooledAsyncConnection: AsyncCounterConnection + Sized {
    /// Closes the connection: it does not go back to its pool, which opens a new one when it
    /// needs one.
    fn discard(self);
}

#[cfg(feature = "deadpool")]
impl<M> PooledAsyncConnection for deadpool::managed::Object<M>
where
    M: deadpool::managed::Manager,
    Self: AsyncCounterConnection,
{
    fn discard(self) {
        // Out of the pool's count at once; dropping it closes the socket, so the server rolls
        // back whatever transaction it had open and frees its locks.
        drop(deadpool::managed::Object::take(self));
    }
}

#[cfg(feature = "bb8")]
impl<M> PooledAsyncConnection for bb8::PooledConnection<'_, M>
where
    M: bb8::ManageConnection,
    Self: AsyncCounterConnection,
{
    fn discard(mut self) {
        // bb8 offers no way to take a connection out; it asks diesel-async's `is_broken` as the
        // connection comes back, which is true for a transaction state in error. On SQLite the
        // cut-off call may still hold the connection on its blocking thread, and reading its
        // state then panics in diesel-async: bb8's own check applies there.
        if <Self::Backend as CounterBackend>::DIALECT != Dialect::Sqlite {
            <Self as AsyncConnection>::TransactionManager::transaction_manager_status_mut(
                &mut self,
            )
            .set_in_error();
        }
        drop(self);
    }
}

/// A pooled connection whose calls may be cut off (a request's future dropped when its client
/// hangs up, a `tokio::time::timeout`) without harm to whoever takes the connection next.
///
/// Every call goes through [`run`](Self::run). When the guard is dropped after a call was cut
/// off, the connection is closed instead of returned to the pool if the cut-off can have left
/// it unusable: always on MySQL/MariaDB (diesel-async's connection reads the dropped
/// statement's reply as the next one's) and SQLite (the call goes on on its blocking thread),
/// and on PostgreSQL when a transaction was left open or its state broken. A connection left in
/// a transaction is closed too, cut off or not, so its locks go now, not when deadpool next
/// checks it. A cut-off call has then run once or not at all: a counter write is counted once
/// or not at all.
///
/// A call cut off inside `run` while the guard lives on (a timeout around one call) makes the
/// next `run` close the connection and fail with `DatabaseErrorKind::ClosedConnection`, where
/// that connection cannot be trusted: take another from the pool.
///
/// The guard sees only what runs through it. deadpool drops a connection whose check was cut
/// off inside `get`; bb8 puts it back, so on MySQL build bb8 pools with
/// `.test_on_check_out(false)` (docs/guide/async-and-cancellation.md has the measurements).
///
/// ```rust
/// use slotted_core::{CancelGuard, PooledAsyncConnection, SlottedCounter};
/// # diesel::table! { posts (id) { id -> Integer, } }
///
/// #[derive(SlottedCounter)]
/// #[diesel(table_name = posts)]
/// #[slotted(counter = likes, slots = 16)]
/// struct Post {
///     id: i32,
/// }
///
/// /// `conn`: `pool.get().await?` from a bb8 or deadpool pool of diesel-async connections.
/// async fn like<P: PooledAsyncConnection>(conn: P, id: i32) -> Result<i64, slotted_core::Error> {
///     let mut conn = CancelGuard::new(conn);
///     let likes = Post::likes_of(id);
///     conn.run(|conn| likes.increment_async(conn)).await?;
///     conn.run(|conn| likes.total_async(conn)).await
/// }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub struct CancelGuard<P: PooledAsyncConnection> {
    conn: Option<P>,
    /// Set while a call runs: still set when the guard is dropped, the call was cut off.
    in_call: bool,
}

impl<P: PooledAsyncConnection> CancelGuard<P> {
    /// Guards `conn`, a connection just taken from a bb8 or deadpool pool.
    pub fn new(conn: P) -> Self {
        CancelGuard {
            conn: Some(conn),
            in_call: false,
        }
    }

    /// Runs `call` on the connection: a slotted `*_async` call, a diesel-async query, or an
    /// `async move` block of several (`|conn| async move { … }`). What the call borrows (a
    /// counter such as `Post::likes_of(id)`) must live longer than the call: bind it first.
    ///
    /// Fails with `DatabaseErrorKind::ClosedConnection`, without running `call`, when an
    /// earlier call on this guard was cut off and left the connection unusable (it is closed).
    pub async fn run<'a, T, E, F>(&'a mut self, call: impl FnOnce(&'a mut P) -> F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>> + 'a,
        E: From<DieselError>,
    {
        if self.in_call {
            // Cut off earlier, and this guard outlived it.
            if let Some(mut conn) = self.conn.take() {
                if unusable_after_a_cut_off(&mut conn) {
                    conn.discard();
                } else {
                    self.conn = Some(conn);
                    self.in_call = false;
                }
            }
        }
        let CancelGuard { conn, in_call } = self;
        let Some(conn) = conn.as_mut() else {
            return Err(DieselError::DatabaseError(
                DatabaseErrorKind::ClosedConnection,
                Box::new(String::from(
                    "an earlier call on this pooled connection was cut off and left it out of \
                     step with the server, so it was closed: take another from the pool",
                )),
            )
            .into());
        };
        *in_call = true;
        let out = call(conn).await;
        *in_call = false;
        out
    }

    /// Whether the last call was cut off (its future dropped before it finished).
    pub fn was_cut_off(&self) -> bool {
        self.in_call
    }
}

/// Whether a connection whose call was cut off must be closed.
fn unusable_after_a_cut_off<P: PooledAsyncConnection>(conn: &mut P) -> bool {
    match <P::Backend as CounterBackend>::DIALECT {
        // Out of step with the server (MySQL); still busy on its blocking thread, where a
        // transaction may yet open (SQLite).
        Dialect::Mysql | Dialect::Sqlite => true,
        // tokio-postgres reads and drops the reply of a dropped query, so only a transaction
        // left open or a cut-off BEGIN/COMMIT/ROLLBACK makes the connection unusable.
        Dialect::Postgres => left_in_a_transaction(conn),
    }
}

/// A transaction left open, or diesel-async's transaction state broken (a cut-off `BEGIN`,
/// `COMMIT` or `ROLLBACK`): what diesel-async's `is_broken` checks, outside a test transaction.
fn left_in_a_transaction<P: PooledAsyncConnection>(conn: &mut P) -> bool {
    <P as AsyncConnection>::TransactionManager::is_broken_transaction_manager(conn)
}

impl<P: PooledAsyncConnection> Drop for CancelGuard<P> {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let close = if self.in_call {
            unusable_after_a_cut_off(&mut conn)
        } else {
            left_in_a_transaction(&mut conn)
        };
        if close {
            conn.discard();
        }
    }
}

impl<P: PooledAsyncConnection> std::fmt::Debug for CancelGuard<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelGuard")
            .field("connected", &self.conn.is_some())
            .field("cut_off", &self.in_call)
            .finish()
    }
}
