//! The maintainer as a tokio task over an async pool ([`AsyncMaintainer`]).

use std::future::Future;
use std::ops::DerefMut;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::*;
use crate::buffer::asynch::AsyncConnectionPool;
use crate::dialect::{CounterBackend, Dialect};
use crate::exec::asynch::AsyncExec;
use crate::sql::lease::{HoldLease, ReleaseLease};
use crate::sql::Sum;
use crate::AsyncCounterConnection;

/// The face of [`AsyncMaintainer`]: a tokio task, over an async pool (diesel-async's bb8 or
/// deadpool pools, or any [`AsyncConnectionPool`]).
#[derive(Debug)]
pub struct OnTask;

impl sealed::Sealed for OnTask {}

impl<P: AsyncConnectionPool> Face<P> for OnTask {
    type Run = for<'c> fn(&'c mut P::Connection, JobArgs) -> BoxFuture<'c, Result<Outcome>>;

    fn run_of<T: CounterTable>() -> Self::Run {
        |conn, args| {
            Box::pin(calls::table_call_async::<T, _>(
                args.work.op(args.full),
                async move {
                    let mut exec = AsyncExec::new(conn);
                    args.work.run::<T, _>(&mut exec, args).await
                },
            ))
        }
    }
}

/// The maintainer as a tokio task over an async pool: the twin of
/// [`Maintainer`](super::Maintainer), with the same jobs, passes, lease and reports (see
/// there).
///
/// Start it inside a tokio runtime, and await [`stop`](Self::stop) before the runtime ends.
/// Cut off anywhere (the runtime shut down, the task dropped at any await point), it leaves
/// no half-done batch (each is a transaction, which the server rolls back) and no connection
/// out of step: the connection it was using is marked broken, so that its pool closes it and
/// the server ends the session, and the lease with it.
///
/// ```no_run
/// # use diesel::prelude::*;
/// # use slotted_core::SlottedCounter;
/// # diesel::table! { posts { id -> Integer, likes_count -> BigInt, } }
/// # #[derive(SlottedCounter)]
/// # #[diesel(table_name = posts)]
/// # #[slotted(counter = likes, slots = 16, cache = likes_count)]
/// # struct Post { id: i32 }
/// use slotted_core::buffer::AsyncConnectionPool;
/// use slotted_core::maintenance::AsyncMaintainer;
/// use std::time::Duration;
///
/// // `pool`: diesel-async's bb8 or deadpool pool (features `bb8`, `deadpool`).
/// async fn run(pool: impl AsyncConnectionPool) -> std::io::Result<()> {
///     let maintainer = AsyncMaintainer::builder(pool)
///         .counter::<posts_likes_slots::table>()
///         .freshness(Duration::from_secs(1))
///         .start()?;
///     // … the application runs …
///     let report = maintainer.stop(Duration::from_secs(5)).await;
///     Ok(())
/// }
/// ```
///
/// Stopped by [`stop`](Self::stop), or when dropped (without waiting: the task ends after its
/// job, while the runtime runs).
pub struct AsyncMaintainer {
    handle: Handle,
    task: tokio::task::JoinHandle<()>,
}

impl AsyncMaintainer {
    /// A maintainer of the counters to be given, over `pool`, as a tokio task.
    pub fn builder<P: AsyncConnectionPool>(pool: P) -> MaintainerBuilder<P, OnTask> {
        MaintainerBuilder::new(pool)
    }

    /// What it did so far.
    pub fn report(&self) -> MaintainerReport {
        self.handle.report()
    }

    /// Stops it: the job in flight finishes its pass (each of its batches commits or rolls
    /// back), and no other starts. Waits `within` at most for that, then returns the report;
    /// `running` is true when the task had not ended by then (it ends after its job, while
    /// the runtime runs).
    pub async fn stop(mut self, within: Duration) -> MaintainerReport {
        self.handle.signal_stop();
        let ended = tokio::time::timeout(within, &mut self.task).await.is_ok();
        self.handle.stopped(ended)
    }
}

impl std::fmt::Debug for AsyncMaintainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncMaintainer")
            .field("report", &self.report())
            .finish()
    }
}

impl<P: AsyncConnectionPool> MaintainerBuilder<P, OnTask> {
    /// Starts the maintainer's task on the tokio runtime this is called in; an error outside
    /// one.
    pub fn start(self) -> std::io::Result<AsyncMaintainer> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            std::io::Error::other(format!(
                "AsyncMaintainer: start it inside a tokio runtime ({e})"
            ))
        })?;
        let shared = Arc::new(self.shared());
        let task_shared = Arc::clone(&shared);
        let task = runtime.spawn(async move {
            let mut driver = Tasked {
                pool: self.pool,
                lease: Lease { conn: None, key: 0 },
            };
            run_passes(&mut driver, &self.jobs, self.config, &task_shared).await;
        });
        Ok(AsyncMaintainer {
            handle: Handle(shared),
            task,
        })
    }
}

/// The task's [`Driver`].
struct Tasked<P: AsyncConnectionPool> {
    pool: P,
    lease: Lease<P::Guard>,
}

impl<P: AsyncConnectionPool> Driver for Tasked<P> {
    type Run = <OnTask as Face<P>>::Run;

    fn hold_lease(&mut self, key: i32, wait: Duration) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            if <P::Connection as diesel_async::AsyncConnectionCore>::Backend::DIALECT
                == Dialect::Sqlite
            {
                return Ok(true);
            }
            self.lease.key = key;
            if self.lease.conn.is_none() {
                self.lease.conn = Some(connection(&self.pool, wait).await?);
            }
            let Some(conn) = self.lease.conn.as_deref_mut() else {
                return Ok(false);
            };
            let held = AsyncExec::new(conn)
                .load::<_, Sum>(HoldLease::new(key))
                .await;
            match held {
                Ok(rows) if lease_held(&rows) => Ok(true),
                // Another maintainer holds it: the connection, which holds nothing, goes back
                // to the pool.
                Ok(_) => {
                    self.lease.conn = None;
                    Ok(false)
                }
                // The connection broke (and its session's lock with it), or it is out of
                // step: given back released, or marked broken.
                Err(e) => {
                    self.lease.release().await;
                    Err(crate::Error::Diesel(e))
                }
            }
        })
    }

    fn run(
        &mut self,
        run: Self::Run,
        job: JobArgs,
        wait: Duration,
    ) -> BoxFuture<'_, Result<Outcome>> {
        Box::pin(async move {
            if let Some(conn) = self.lease.conn.as_deref_mut() {
                // Cut off here, the lease's own guard marks its connection broken.
                return Caught(run(conn, job)).await;
            }
            let mut lent = Lent {
                conn: connection(&self.pool, wait).await?,
                done: false,
            };
            let outcome = Caught(run(&mut lent.conn, job)).await;
            lent.done = true;
            outcome
        })
    }

    fn sleep<'a>(&'a self, shared: &'a Shared, pause: Duration) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            // Registered before the check: a stop signalled in between still wakes it.
            let mut stopped = pin!(shared.notify.notified());
            stopped.as_mut().enable();
            if shared.stopping() {
                return true;
            }
            let _ = tokio::time::timeout(pause, stopped).await;
            shared.stopping()
        })
    }

    fn release(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.lease.release())
    }
}

/// A connection from `pool` within `wait` (a pool's own wait, bb8's 30 s, would hide a
/// database that is down from the report).
async fn connection<P: AsyncConnectionPool>(pool: &P, wait: Duration) -> Result<P::Guard> {
    match tokio::time::timeout(wait, pool.connection()).await {
        Ok(conn) => conn,
        Err(_) => Err(crate::Error::Pool(format!(
            "no connection within {wait:?}: the database may be unreachable"
        ))),
    }
}

/// Marks a connection broken, so that no pool lends it again.
fn mark_broken<C: AsyncCounterConnection>(conn: &mut C) {
    AsyncExec::new(conn).mark_broken();
}

/// A connection lent for one job (SQLite, which has no lease): marked broken if the job is
/// cut off before its end, so that its pool closes it instead of lending it on mid-batch.
struct Lent<G: DerefMut<Target: AsyncCounterConnection>> {
    conn: G,
    done: bool,
}

impl<G: DerefMut<Target: AsyncCounterConnection>> Drop for Lent<G> {
    fn drop(&mut self) {
        if !self.done {
            mark_broken(&mut *self.conn);
        }
    }
}

/// The connection that holds the lease, if any. Given back released by
/// [`release`](Self::release); dropped while it holds one (the task cut off, or ended by a
/// panic), the connection is marked broken: its pool closes it, and the server ends the
/// session and its lock, instead of the pool lending it on with the lock held (or mid-job).
struct Lease<G: DerefMut<Target: AsyncCounterConnection>> {
    conn: Option<G>,
    key: i32,
}

impl<G: DerefMut<Target: AsyncCounterConnection> + Send> Lease<G> {
    /// Gives the lease back, and its connection to the pool; marked broken when the release
    /// fails.
    async fn release(&mut self) {
        if let Some(conn) = self.conn.as_deref_mut() {
            let released = AsyncExec::new(&mut *conn)
                .load::<_, Sum>(ReleaseLease::new(self.key))
                .await;
            if released.is_err() {
                mark_broken(conn);
            }
        }
        self.conn = None;
    }
}

impl<G: DerefMut<Target: AsyncCounterConnection>> Drop for Lease<G> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_deref_mut() {
            mark_broken(conn);
        }
    }
}

/// A job's future whose panic is its error: the task, and with it the lease, lives on.
struct Caught<F>(F);

impl<T, F: Future<Output = Result<T>> + Unpin> Future for Caught<F> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let job = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Pin::new(job).poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Err(panicked(payload))),
        }
    }
}
