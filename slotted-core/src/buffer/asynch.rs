//! The async face of the buffer: [`AsyncCounterBuffer`] on a pool of diesel-async connections
//! (bb8, deadpool), flushed by a tokio task. The merging core and the flush job are the sync
//! face's.

use std::future::Future;
use std::ops::DerefMut;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::flush::{flush_round, run_flusher, Face};
use super::pending::{lock, Core, Refused};
use super::{sealed, Buffer, BufferConfig, BufferStats, WhenFull};
use crate::dialect::CounterBackend;
use crate::error::{Error, Result};
use crate::exec::asynch::AsyncExec;
use crate::exec::BoxFuture;
use crate::key::RawKey;
use crate::table::CounterSpec;
use crate::AsyncCounterConnection;

/// Where an [`AsyncCounterBuffer`] gets its connections: implemented for diesel-async's bb8
/// and deadpool pools (slotted-core's `bb8` and `deadpool` features), or implement it for your
/// own.
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
#[cfg_attr(
    all(feature = "bb8", feature = "deadpool"),
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take async connections from"
    )
)]
#[cfg_attr(
    all(not(feature = "bb8"), feature = "deadpool"),
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take async connections from: bb8's pools need slotted-core's `bb8` feature"
    )
)]
#[cfg_attr(
    all(feature = "bb8", not(feature = "deadpool")),
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take async connections from: deadpool's pools need slotted-core's `deadpool` feature"
    )
)]
#[cfg_attr(
    not(any(feature = "bb8", feature = "deadpool")),
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take async connections from: bb8's and deadpool's pools need slotted-core's `bb8` or `deadpool` feature"
    )
)]
#[cfg_attr(
    not(feature = "bb8"),
    diagnostic::on_unimplemented(
        note = "for diesel-async's bb8 pool, turn on slotted-core's `bb8` feature: `slotted-core = {{ …, features = [\"async\", \"bb8\"] }}`"
    )
)]
#[cfg_attr(
    not(feature = "deadpool"),
    diagnostic::on_unimplemented(
        note = "for diesel-async's deadpool pool, turn on slotted-core's `deadpool` feature: `slotted-core = {{ …, features = [\"async\", \"deadpool\"] }}`"
    )
)]
#[diagnostic::on_unimplemented(
    label = "not an `AsyncConnectionPool`",
    note = "slotted takes diesel-async's bb8 and deadpool pools of an `AsyncCounterConnection` (each with its feature), or a pool of your own that implements `slotted_core::buffer::AsyncConnectionPool`"
)]
pub trait AsyncConnectionPool: Send + Sync + 'static {
    /// The connection type.
    type Connection: AsyncCounterConnection;
    /// A connection lent by the pool, returned when dropped.
    type Guard: DerefMut<Target = Self::Connection> + Send;
    /// A connection, or why there is none (as [`Error::Pool`]).
    fn connection(&self) -> impl Future<Output = Result<Self::Guard>> + Send;
}

#[cfg(feature = "bb8")]
#[cfg_attr(docsrs, doc(cfg(feature = "bb8")))]
impl<M> AsyncConnectionPool for bb8::Pool<M>
where
    M: bb8::ManageConnection,
    M::Connection: AsyncCounterConnection,
    M::Error: std::fmt::Debug,
{
    type Connection = M::Connection;
    type Guard = bb8::PooledConnection<'static, M>;

    async fn connection(&self) -> Result<Self::Guard> {
        self.get_owned()
            .await
            .map_err(|e| Error::Pool(format!("{e:?}")))
    }
}

#[cfg(feature = "deadpool")]
#[cfg_attr(docsrs, doc(cfg(feature = "deadpool")))]
impl<M> AsyncConnectionPool for deadpool::managed::Pool<M>
where
    M: deadpool::managed::Manager + 'static,
    M::Type: AsyncCounterConnection,
    M::Error: std::fmt::Display,
{
    type Connection = M::Type;
    type Guard = deadpool::managed::Object<M>;

    async fn connection(&self) -> Result<Self::Guard> {
        self.get().await.map_err(|e| Error::Pool(e.to_string()))
    }
}

type FlushFn = dyn Fn() -> BoxFuture<'static, Result<()>> + Send + Sync;

/// A write-behind buffer on a pool of diesel-async connections, flushed by a tokio task: the
/// async twin of [`CounterBuffer`](crate::buffer::CounterBuffer), with the same merging, flushes and
/// guarantees.
///
/// Create it inside a tokio runtime (it spawns its flusher task), share it in an `Arc` (axum
/// state), add with [`Counter::add_buffered`](crate::Counter::add_buffered) (never blocks) or
/// `add_buffered_async` (waits for room under [`WhenFull::Block`]), and await
/// [`shutdown`](Self::shutdown) before the runtime ends. With axum:
///
/// ```ignore
/// axum::serve(listener, app)
///     .with_graceful_shutdown(buffer.clone().flush_after(shutdown_signal()))
///     .await?;
/// buffer.shutdown().await?;   // in-flight requests are done: write what they added
/// ```
pub struct AsyncCounterBuffer {
    core: Arc<Core>,
    flush: Arc<FlushFn>,
    flusher: Mutex<Option<tokio::task::JoinHandle<Result<()>>>>,
}

/// The flusher task's face.
struct Task {
    core: Arc<Core>,
    flush: Arc<FlushFn>,
}

impl Face for Task {
    fn flush(&self) -> BoxFuture<'_, Result<()>> {
        (self.flush)()
    }

    fn wait(&self, deadline: Instant, early: bool) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let signal = &self.core.wake;
            while !signal.over(early) {
                let now = Instant::now();
                if now >= deadline {
                    signal.over(true);
                    return;
                }
                let _ = tokio::time::timeout(deadline - now, signal.notify.notified()).await;
            }
        })
    }

    fn sleep(&self, pause: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(pause))
    }
}

impl AsyncCounterBuffer {
    /// Starts a buffer flushing through `pool`, and its flusher task (call it inside a tokio
    /// runtime). The database needs the flush log: `CounterMigrations::…​.with_buffer()`.
    pub fn start<P: AsyncConnectionPool>(pool: P, config: BufferConfig) -> Self {
        let dialect = <<P::Connection as diesel_async::AsyncConnectionCore>::Backend as CounterBackend>::DIALECT;
        let core = Arc::new(Core::new(config, dialect));
        let pool = Arc::new(pool);
        let flush_lock = Arc::new(tokio::sync::Mutex::new(()));
        let flush: Arc<FlushFn> = {
            let core = Arc::clone(&core);
            Arc::new(move || {
                let (core, pool, flush_lock) = (
                    Arc::clone(&core),
                    Arc::clone(&pool),
                    Arc::clone(&flush_lock),
                );
                Box::pin(async move {
                    let _one_at_a_time = flush_lock.lock().await;
                    let started = core.start_round();
                    // A pool's own wait (bb8: 30 s) would hide an unreachable database from
                    // the stats and overrun a shutdown's deadline.
                    let wait = core.checkout_wait();
                    let outcome = match tokio::time::timeout(wait, pool.connection()).await {
                        Ok(Ok(mut conn)) => {
                            flush_round(&core, &mut AsyncExec::new(&mut *conn)).await
                        }
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(Error::Pool(format!(
                            "no connection within {wait:?} (the flush interval, or the time \
                             left to shut down): the database may be unreachable"
                        ))),
                    };
                    core.end_round(started, &outcome);
                    outcome
                })
            })
        };
        let task = Task {
            core: Arc::clone(&core),
            flush: Arc::clone(&flush),
        };
        let flusher = tokio::spawn(async move { run_flusher(&task.core, &task).await });
        AsyncCounterBuffer {
            core,
            flush,
            flusher: Mutex::new(Some(flusher)),
        }
    }

    /// Writes everything pending now (after a flush in progress). On error the deltas stay in
    /// the buffer and the flusher retries them.
    pub async fn flush(&self) -> Result<()> {
        (self.flush)().await
    }

    /// Stops taking adds ([`Error::BufferClosed`] after this), writes everything and ends the
    /// flusher task. Retries failed flushes until
    /// [`shutdown_timeout`](BufferConfig::shutdown_timeout) after this call (each wait for a
    /// connection bounded by the time left), then returns [`Error::BufferUnflushed`] with what
    /// is left. Calling it again returns `Ok`.
    pub async fn shutdown(&self) -> Result<()> {
        let Some(flusher) = lock(&self.flusher).take() else {
            return Ok(());
        };
        self.core.close();
        self.core.wake.stop();
        flusher
            .await
            .unwrap_or_else(|e| Err(Error::Pool(format!("the flusher task failed: {e}"))))
    }

    /// A graceful-shutdown hook: waits for `signal`, then flushes once, and resolves. Pass it
    /// to axum's `with_graceful_shutdown`, so that the buffer is written while the server
    /// drains; then await [`shutdown`](Self::shutdown) for the adds of the last requests.
    pub async fn flush_after<S: Future<Output = ()> + Send>(self: Arc<Self>, signal: S) {
        signal.await;
        // A failure is in the stats; the deltas stay for `shutdown`.
        let _ = self.flush().await;
    }

    /// What the buffer holds and has done.
    pub fn stats(&self) -> BufferStats {
        self.core.stats()
    }

    /// Adds, waiting for room under [`WhenFull::Block`] without blocking a thread.
    pub(crate) async fn add_waiting(
        &self,
        spec: &CounterSpec,
        key: RawKey,
        bucket: i64,
        delta: i64,
    ) -> Result<()> {
        let deadline = match self.core.config.when_full {
            WhenFull::Refuse => None,
            WhenFull::Block(wait) => Some(tokio::time::Instant::now() + wait),
        };
        loop {
            // Registered before the attempt: a flush ending in between still wakes it.
            let mut room = pin!(self.core.room_notify.notified());
            room.as_mut().enable();
            match self.core.try_add(spec, key.clone(), bucket, delta) {
                Ok(()) => return Ok(()),
                Err(Refused::Full) if deadline.is_some_and(|d| d > tokio::time::Instant::now()) => {
                    let until = deadline.unwrap_or_else(tokio::time::Instant::now);
                    let _ = tokio::time::timeout_at(until, room).await;
                }
                Err(refused) => return Err(self.core.refuse(refused)),
            }
        }
    }

    /// Tests: reports the next `n` successful COMMITs as lost connections (feature
    /// `test-hooks`, for slotted's own tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn __lose_commit_outcomes(&self, n: u64) {
        self.core.faults.lose_commit_outcomes(n);
    }
}

impl Drop for AsyncCounterBuffer {
    /// Without an awaited `shutdown`: stops adds and tells the flusher task to write
    /// everything and end, which it does while the runtime runs.
    fn drop(&mut self) {
        if lock(&self.flusher).take().is_some() {
            self.core.close();
            self.core.wake.stop();
        }
    }
}

impl sealed::Sealed for AsyncCounterBuffer {
    fn core(&self) -> &Core {
        &self.core
    }

    /// Never blocks: a full buffer refuses at once (`add_buffered_async` waits).
    fn add_raw(&self, spec: &CounterSpec, key: RawKey, bucket: i64, delta: i64) -> Result<()> {
        self.core
            .try_add(spec, key, bucket, delta)
            .map_err(|refused| self.core.refuse(refused))
    }
}

impl Buffer for AsyncCounterBuffer {}
