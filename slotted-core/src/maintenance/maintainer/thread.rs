//! The maintainer on a thread over a sync pool ([`Maintainer`]).

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::*;
use crate::buffer::sync::ConnectionPool;
use crate::dialect::{CounterBackend, Dialect};
use crate::sql::lease::{HoldLease, ReleaseLease};
use crate::sql::Sum;

/// The face of [`Maintainer`]: a thread of its own, over a sync pool (r2d2's, or any
/// [`ConnectionPool`]).
#[derive(Debug)]
pub struct OnThread;

impl sealed::Sealed for OnThread {}

impl<P: ConnectionPool> Face<P> for OnThread {
    type Run = fn(&mut P::Connection, JobArgs) -> Result<Outcome>;

    fn run_of<T: CounterTable>() -> Self::Run {
        |conn, args| {
            calls::table_call::<T, _, _>(args.work.op(args.full), conn, |exec| {
                run_now(args.work.run::<T, _>(exec, args))
            })
        }
    }
}

/// The maintainer: one call at start-up keeps counters maintained in the background, on a
/// thread of its own over a connection pool (r2d2's, or any [`ConnectionPool`]).
///
/// Each pass runs, for every counter given, the jobs its declaration calls for: compaction,
/// the roll-up into its cached column (`cache = …`), the absorb of an adopted column (only
/// when asked: it says that no old binary writes the column any more), bucket retention (when
/// asked, with its age), and, at a longer interval, the verify job of a counter that follows a
/// child table (reporting drift, or repairing it when asked). Passes follow one another so
/// that a cached column is never staler than the freshness bound: a write just after a pass
/// began waits for the next pass's end, so the pause between passes is the bound less two
/// passes (none once a pass takes half the bound; the report then says by how much they miss
/// it). Retention runs when its cutoff has moved into another bucket since its last run, and
/// at the full passes.
///
/// Every process of a deployment may run one. Maintainers given the same counters share the
/// work through a lease, a session lock of the database (PostgreSQL an advisory lock; MySQL
/// and MariaDB `GET_LOCK`) keyed by the counters and their jobs, held on one connection of the
/// pool, on which the holder also runs its jobs: the maintainer that holds it runs the passes,
/// the others stand by and check the lease every bound. One of them takes it within a bound
/// once the holder stops, its process ends, or the server ends its session (a connection that
/// is merely cut off holds the lock until the server notices: TCP keepalives, PostgreSQL's
/// `idle_session_timeout`, MySQL's `wait_timeout`). A maintainer of other counters has a lease
/// of its own. Nothing depends on there being one: every job is exact beside writers and
/// beside itself, so two maintainers that both run (on a Galera cluster, whose `GET_LOCK` is
/// per node, or over SQLite, which has no lease) do the work twice and count nothing twice.
///
/// A failed job is reported ([`MaintainerReport`], and a `tracing` event with the `tracing`
/// feature), never swallowed, and the pass goes on with the next job; a pass with errors is
/// followed by a pause that doubles up to 30 s while the failures last (a database that is
/// down). A maintainer killed mid-batch loses nothing: each batch is a transaction, which the
/// database rolls back.
///
/// Stopped by [`stop`](Self::stop), or when dropped (without waiting: the thread ends after its
/// job).
pub struct Maintainer {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

impl Maintainer {
    /// A maintainer of the counters to be given, over `pool`.
    ///
    /// ```no_run
    /// # use diesel::prelude::*;
    /// # use diesel::r2d2::{ConnectionManager, Pool};
    /// # use slotted_core::SlottedCounter;
    /// # diesel::table! { posts { id -> Integer, likes_count -> BigInt, } }
    /// # #[derive(SlottedCounter)]
    /// # #[diesel(table_name = posts)]
    /// # #[slotted(counter = likes, slots = 16, cache = likes_count)]
    /// # struct Post { id: i32 }
    /// use slotted_core::maintenance::Maintainer;
    /// use std::time::Duration;
    ///
    /// let pool = Pool::new(ConnectionManager::<PgConnection>::new("postgres://…"))?;
    /// let maintainer = Maintainer::builder(pool)
    ///     .counter::<posts_likes_slots::table>()
    ///     .freshness(Duration::from_secs(1))
    ///     .start()?;
    /// // … the application runs …
    /// let report = maintainer.stop(Duration::from_secs(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder<P: ConnectionPool>(pool: P) -> MaintainerBuilder<P> {
        MaintainerBuilder::new(pool)
    }

    /// What it did so far.
    pub fn report(&self) -> MaintainerReport {
        self.handle.report()
    }

    /// Stops it: the job in flight finishes its pass (each of its batches commits or rolls
    /// back), and no other starts. Waits `within` at most for that, then returns the report;
    /// `running` is true when the thread had not ended by then (it ends after its job).
    pub fn stop(mut self, within: Duration) -> MaintainerReport {
        self.handle.signal_stop();
        let ended = self.done.recv_timeout(within).is_ok();
        if ended {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
        self.handle.stopped(ended)
    }
}

impl std::fmt::Debug for Maintainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintainer")
            .field("report", &self.report())
            .finish()
    }
}

impl<P: ConnectionPool> MaintainerBuilder<P, OnThread> {
    /// Starts the maintainer's thread.
    pub fn start(self) -> std::io::Result<Maintainer> {
        let shared = Arc::new(self.shared());
        let (done_tx, done_rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("slotted-maintainer".to_owned())
            .spawn(move || {
                let mut driver = Threaded {
                    pool: self.pool,
                    lease: Lease::default(),
                };
                // Every future of this face is ready when made (its calls block the thread).
                run_now(run_passes(
                    &mut driver,
                    &self.jobs,
                    self.config,
                    &thread_shared,
                ));
                drop(driver);
                let _ = done_tx.send(());
            })?;
        Ok(Maintainer {
            handle: Handle(shared),
            thread: Some(thread),
            done: done_rx,
        })
    }
}

/// The thread's [`Driver`]: blocking calls, each future ready when made.
struct Threaded<P: ConnectionPool> {
    pool: P,
    lease: Lease<P::Guard, P::Connection>,
}

impl<P: ConnectionPool> Driver for Threaded<P> {
    type Run = <OnThread as Face<P>>::Run;

    fn hold_lease(&mut self, key: i32, wait: Duration) -> BoxFuture<'_, Result<bool>> {
        Box::pin(std::future::ready(self.hold(key, wait)))
    }

    fn run(
        &mut self,
        run: Self::Run,
        job: JobArgs,
        wait: Duration,
    ) -> BoxFuture<'_, Result<Outcome>> {
        let outcome = match self.lease.conn.as_deref_mut() {
            Some(conn) => run_caught(run, conn, job),
            None => self
                .pool
                .connection_within(wait)
                .and_then(|mut conn| run_caught(run, &mut conn, job)),
        };
        Box::pin(std::future::ready(outcome))
    }

    fn sleep<'a>(&'a self, shared: &'a Shared, pause: Duration) -> BoxFuture<'a, bool> {
        let stop = shared.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (stop, _) = shared
            .wake
            .wait_timeout_while(stop, pause, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        Box::pin(std::future::ready(*stop))
    }

    fn release(&mut self) -> BoxFuture<'_, ()> {
        self.lease.release();
        Box::pin(std::future::ready(()))
    }
}

impl<P: ConnectionPool> Threaded<P> {
    fn hold(&mut self, key: i32, wait: Duration) -> Result<bool> {
        if <<P::Connection as diesel::Connection>::Backend as CounterBackend>::DIALECT
            == Dialect::Sqlite
        {
            return Ok(true);
        }
        let lease = &mut self.lease;
        lease.key = key;
        let conn = match &mut lease.conn {
            Some(conn) => conn,
            None => lease.conn.insert(self.pool.connection_within(wait)?),
        };
        match run_now(SyncExec(&mut **conn).load::<_, Sum>(HoldLease::new(key))) {
            Ok(rows) if lease_held(&rows) => Ok(true),
            // Another maintainer holds it: the connection, which holds nothing, goes back to
            // the pool.
            Ok(_) => {
                lease.conn = None;
                Ok(false)
            }
            // The connection broke (and its session's lock with it), or it is out of step:
            // given back released, or marked broken.
            Err(e) => {
                lease.release();
                Err(crate::Error::Diesel(e))
            }
        }
    }
}

/// A job's run, a panic in it reported as its error: the thread, and with it the lease, lives
/// on (the lease's guard gives the lock back if the thread ever unwinds anyway).
fn run_caught<C>(
    run: fn(&mut C, JobArgs) -> Result<Outcome>,
    conn: &mut C,
    job: JobArgs,
) -> Result<Outcome> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(conn, job)))
        .unwrap_or_else(|payload| Err(panicked(payload)))
}

/// The connection that holds the lease, if any: given back released when dropped (the
/// maintainer stops, or its thread unwinds). When the release fails the connection is marked
/// broken, so that its pool closes it (and the server ends the session and its lock) instead
/// of lending it on with the lock held.
struct Lease<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> {
    conn: Option<G>,
    key: i32,
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Default for Lease<G, C> {
    fn default() -> Self {
        Lease { conn: None, key: 0 }
    }
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Lease<G, C> {
    /// Gives the lease back, and its connection to the pool.
    fn release(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            let released =
                run_now(SyncExec(&mut *conn).load::<_, Sum>(ReleaseLease::new(self.key)));
            if released.is_err() {
                SyncExec(&mut *conn).mark_broken();
            }
        }
    }
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Drop for Lease<G, C> {
    fn drop(&mut self) {
        self.release();
    }
}
