//! The sync face of the buffer: [`CounterBuffer`] on a pool of sync connections (r2d2), flushed
//! by a thread of its own.

use std::future::ready;
use std::ops::DerefMut;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::flush::{flush_round, run_flusher, Face};
use super::pending::{lock, Core, Refused};
use super::{sealed, Buffer, BufferConfig, BufferStats, WhenFull};
use crate::dialect::CounterBackend;
use crate::error::{Error, Result};
use crate::exec::sync::{run_now, SyncExec};
use crate::exec::BoxFuture;
use crate::key::RawKey;
use crate::table::CounterSpec;
use crate::CounterConnection;

/// Where a [`CounterBuffer`] gets its connections: implemented for r2d2's
/// `Pool<ConnectionManager<C>>` (slotted-core's `r2d2` feature), or implement it for your own.
#[cfg_attr(
    feature = "r2d2",
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take connections from",
        label = "not a `ConnectionPool`",
        note = "slotted takes r2d2's `Pool<ConnectionManager<C>>` of a `CounterConnection` `C`, or a pool of your own that implements `slotted_core::buffer::ConnectionPool`"
    )
)]
#[cfg_attr(
    not(feature = "r2d2"),
    diagnostic::on_unimplemented(
        message = "`{Self}` is not a pool slotted can take connections from: r2d2's pools need slotted-core's `r2d2` feature",
        label = "not a `ConnectionPool`",
        note = "turn it on: `slotted-core = {{ …, features = [\"r2d2\"] }}`; r2d2's `Pool<ConnectionManager<C>>` is then one, or implement `slotted_core::buffer::ConnectionPool` for a pool of your own"
    )
)]
pub trait ConnectionPool: Send + Sync + 'static {
    /// The connection type.
    type Connection: CounterConnection;
    /// A connection lent by the pool, returned when dropped.
    type Guard: DerefMut<Target = Self::Connection>;
    /// A connection, or why there is none (as [`Error::Pool`]).
    fn connection(&self) -> Result<Self::Guard>;

    /// A connection within `wait`, or why there is none. The buffer's flushes check out
    /// with this, `wait` one flush interval at most, so that an unreachable database shows
    /// in its stats within about an interval and `shutdown` keeps its deadline. The default
    /// calls [`connection`](Self::connection), which waits as long as the pool does:
    /// implement it for a pool of your own.
    fn connection_within(&self, wait: Duration) -> Result<Self::Guard> {
        let _ = wait;
        self.connection()
    }
}

#[cfg(feature = "r2d2")]
#[cfg_attr(docsrs, doc(cfg(feature = "r2d2")))]
impl<C> ConnectionPool for diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<C>>
where
    C: diesel::r2d2::R2D2Connection + CounterConnection + 'static,
{
    type Connection = C;
    type Guard = diesel::r2d2::PooledConnection<diesel::r2d2::ConnectionManager<C>>;

    fn connection(&self) -> Result<Self::Guard> {
        self.get().map_err(|e| Error::Pool(e.to_string()))
    }

    /// `get_timeout`, waiting at most the pool's own `connection_timeout`.
    fn connection_within(&self, wait: Duration) -> Result<Self::Guard> {
        self.get_timeout(wait.min(self.connection_timeout()))
            .map_err(|e| Error::Pool(e.to_string()))
    }
}

type FlushFn = dyn Fn() -> Result<()> + Send + Sync;

/// A write-behind buffer on a pool of sync connections: counts merged in memory per (counter,
/// key) and flushed by a thread of its own every [`interval`](BufferConfig::interval), as
/// key-ordered multi-row upserts, exactly once.
///
#[cfg_attr(all(feature = "r2d2", feature = "sqlite"), doc = "```")]
#[cfg_attr(not(all(feature = "r2d2", feature = "sqlite")), doc = "```ignore")]
/// # use diesel::prelude::*;
/// # use diesel::r2d2::{ConnectionManager, Pool};
/// # use diesel_migrations::MigrationHarness;
/// use slotted_core::{buffer::BufferConfig, buffer::CounterBuffer, CounterMigrations, SlottedCounter};
///
/// #[derive(SlottedCounter)]
/// #[slotted(counter = views, slots = 16)]
/// struct Post { id: i32 }
///
/// # let dir = std::env::temp_dir().join(format!("slotted-doc-{}.db", std::process::id()));
/// # let url = dir.to_string_lossy().into_owned();
/// let pool = Pool::builder().max_size(2).build(ConnectionManager::<SqliteConnection>::new(&url))?;
/// pool.get()?.run_pending_migrations(CounterMigrations::of::<Post>().with_buffer())?;
///
/// let buffer = CounterBuffer::start(pool.clone(), BufferConfig::default());
/// for _ in 0..1000 {
///     Post::views_of(7).increment_buffered(&buffer)?;   // no I/O
/// }
/// assert_eq!(Post::views_of(7).pending(&buffer), 1000);
/// buffer.shutdown()?;                                    // flushes everything
/// assert_eq!(Post::views_of(7).total(&mut pool.get()?)?, 1000);
/// # std::fs::remove_file(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
///
/// Share it across threads by reference or in an `Arc`. Dropping it shuts it down as
/// [`shutdown`](Self::shutdown) does (so a panic that unwinds past its owner flushes too),
/// printing to stderr what could not be written.
pub struct CounterBuffer {
    core: Arc<Core>,
    flush: Arc<FlushFn>,
    flusher: Mutex<Option<JoinHandle<Result<()>>>>,
}

/// The flusher thread's face: rounds on a pooled connection, waits on a condition variable.
struct Thread {
    core: Arc<Core>,
    flush: Arc<FlushFn>,
}

impl Face for Thread {
    fn flush(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(ready((self.flush)()))
    }

    fn wait(&self, deadline: Instant, early: bool) -> BoxFuture<'_, ()> {
        self.core.wake.wait_until(deadline, early);
        Box::pin(ready(()))
    }

    fn sleep(&self, pause: Duration) -> BoxFuture<'_, ()> {
        std::thread::sleep(pause);
        Box::pin(ready(()))
    }
}

impl CounterBuffer {
    /// Starts a buffer flushing through `pool`, with its flusher thread. The database needs
    /// the flush log table: run `CounterMigrations::…​.with_buffer()` once.
    pub fn start<P: ConnectionPool>(pool: P, config: BufferConfig) -> Self {
        let dialect = <<P::Connection as diesel::Connection>::Backend as CounterBackend>::DIALECT;
        let core = Arc::new(Core::new(config, dialect));
        let flush_lock = Mutex::new(());
        let flush: Arc<FlushFn> = {
            let core = Arc::clone(&core);
            Arc::new(move || {
                let _one_at_a_time = lock(&flush_lock);
                let started = core.start_round();
                let outcome = pool
                    .connection_within(core.checkout_wait())
                    .and_then(|mut conn| run_now(flush_round(&core, &mut SyncExec(&mut *conn))));
                core.end_round(started, &outcome);
                outcome
            })
        };
        let thread = Thread {
            core: Arc::clone(&core),
            flush: Arc::clone(&flush),
        };
        let flusher = std::thread::Builder::new()
            .name("slotted-flusher".into())
            .spawn(move || run_now(run_flusher(&thread.core, &thread)))
            .expect("spawn the slotted flusher thread");
        CounterBuffer {
            core,
            flush,
            flusher: Mutex::new(Some(flusher)),
        }
    }

    /// Writes everything pending now, on the calling thread (waiting for a flush in progress
    /// first). On error the deltas stay in the buffer and the flusher retries them.
    pub fn flush(&self) -> Result<()> {
        (self.flush)()
    }

    /// Stops taking adds ([`Error::BufferClosed`] after this), writes everything, and joins the
    /// flusher thread. Retries failed flushes until
    /// [`shutdown_timeout`](BufferConfig::shutdown_timeout) after this call (each wait for a
    /// connection bounded by the time left), then returns [`Error::BufferUnflushed`] with what
    /// is left. Calling it again returns `Ok`.
    pub fn shutdown(&self) -> Result<()> {
        let Some(flusher) = lock(&self.flusher).take() else {
            return Ok(());
        };
        self.core.close();
        self.core.wake.stop();
        flusher
            .join()
            .unwrap_or_else(|_| Err(Error::Pool("the flusher thread panicked".into())))
    }

    /// What the buffer holds and has done.
    pub fn stats(&self) -> BufferStats {
        self.core.stats()
    }

    /// Tests: reports the next `n` successful COMMITs as lost connections (feature
    /// `test-hooks`, for slotted's own tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn __lose_commit_outcomes(&self, n: u64) {
        self.core.faults.lose_commit_outcomes(n);
    }

    /// Tests: retry chunks in doubt without looking their id up first (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn __skip_flush_lookup(&self, skip: bool) {
        self.core.faults.skip_flush_lookup(skip);
    }
}

impl Drop for CounterBuffer {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("slotted: CounterBuffer dropped: {e}");
        }
    }
}

impl sealed::Sealed for CounterBuffer {
    fn core(&self) -> &Core {
        &self.core
    }

    fn add_raw(&self, spec: &CounterSpec, key: RawKey, bucket: i64, delta: i64) -> Result<()> {
        let deadline = match self.core.config.when_full {
            WhenFull::Refuse => None,
            WhenFull::Block(wait) => Some(Instant::now() + wait),
        };
        loop {
            match self.core.try_add(spec, key.clone(), bucket, delta) {
                Ok(()) => return Ok(()),
                Err(Refused::Full) if deadline.is_some_and(|d| self.core.wait_for_room(d)) => {}
                Err(refused) => return Err(self.core.refuse(refused)),
            }
        }
    }
}

impl Buffer for CounterBuffer {}
