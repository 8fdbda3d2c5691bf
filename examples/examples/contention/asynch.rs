//! The benchmark's async modes: the same counters and transactions as the sync modes, run by
//! tasks on a tokio runtime of 2 worker threads, through a deadpool pool of diesel-async
//! connections: the way an axum service counts. Business transactions hold their locks for a
//! [`Hold`], which lasts what the sync face's `std::thread::sleep` does (tokio's own timer
//! would round 2 ms up to about 3).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use slotted_core::{AsyncCounterConnection, Counter, CounterTable};
use slotted_examples::hold::Hold;
use slotted_examples::BoxError;

use super::{
    bench_single, retryable, BenchConnection, Bind, Event, HandWritten, Mode, Run, Shape, Tally,
    Upsert, EVENT, SINGLE_ROW,
};

/// A future an async mode returns, borrowing the connection.
pub(crate) type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// A mode's increment on an async connection, given the writer's number.
pub(crate) type AsyncOp<A> =
    Box<dyn for<'c> Fn(&'c mut A, i32) -> BoxFuture<'c, slotted_core::Result<()>> + Send + Sync>;

/// A diesel-async connection the benchmark runs on. What needs the concrete backend (Diesel's
/// `ToSql` impls, the pool's manager) is stamped out per connection type.
pub(crate) trait AsyncBench: AsyncCounterConnection + 'static {
    /// Runs a hand-written statement, prepared once per connection as in the sync modes.
    fn run<'c, S: 'static>(
        conn: &'c mut Self,
        statement: HandWritten<'c, S>,
    ) -> BoxFuture<'c, QueryResult<usize>>;
    /// The single-row counter's column, with Diesel's query builder (cached by type).
    fn read_single(conn: &mut Self) -> BoxFuture<'_, QueryResult<i64>>;
    /// See `BenchConnection::free_slot`.
    fn free_slot(conn: &mut Self) -> BoxFuture<'_, QueryResult<Option<i16>>>;
    /// A deadpool pool of diesel-async connections.
    type Pool: Send + Sync;
    /// One of its connections.
    type Pooled: std::ops::DerefMut<Target = Self> + Send + 'static;
    /// A pool of `size` connections, on SQLite with a busy timeout and WAL, as the sync
    /// pool's. Called inside the runtime.
    fn pool(url: &str, size: usize) -> Result<Self::Pool, BoxError>;
    /// Closes the pool's idle connections (after a measurement: see `Bench::writers_pool`).
    fn clear(pool: &Self::Pool);
    /// A connection of the pool.
    fn get(pool: &Self::Pool) -> BoxFuture<'_, Result<Self::Pooled, BoxError>>;
}

macro_rules! async_bench {
    ($feature:literal, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl AsyncBench for $conn {
            fn run<'c, S: 'static>(
                conn: &'c mut Self,
                statement: HandWritten<'c, S>,
            ) -> BoxFuture<'c, QueryResult<usize>> {
                Box::pin(diesel_async::RunQueryDsl::execute(statement, conn))
            }

            fn read_single(conn: &mut Self) -> BoxFuture<'_, QueryResult<i64>> {
                Box::pin(diesel_async::RunQueryDsl::first(
                    bench_single::table.find(1).select(bench_single::count),
                    conn,
                ))
            }

            fn free_slot(conn: &mut Self) -> BoxFuture<'_, QueryResult<Option<i16>>> {
                Box::pin(async move {
                    let rows: Vec<super::FreeSlot> = diesel_async::RunQueryDsl::load(
                        diesel::sql_query(super::MYSQL_SKIP_LOCKED),
                        conn,
                    )
                    .await?;
                    Ok(rows.first().map(|row| row.slot))
                })
            }

            type Pool = Pool<$conn>;
            type Pooled = diesel_async::pooled_connection::deadpool::Object<$conn>;

            fn clear(pool: &Self::Pool) {
                pool.retain(|_, _| false);
            }

            fn get(pool: &Self::Pool) -> BoxFuture<'_, Result<Self::Pooled, BoxError>> {
                Box::pin(async move { Ok(pool.get().await?) })
            }

            fn pool(url: &str, size: usize) -> Result<Self::Pool, BoxError> {
                let mut config = ManagerConfig::default();
                config.custom_setup = Box::new(|url| {
                    let url = url.to_owned();
                    Box::pin(async move {
                        let mut conn = <$conn as AsyncConnection>::establish(&url).await?;
                        if $feature == "sqlite" {
                            conn.batch_execute(
                                "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; \
                                 PRAGMA synchronous = NORMAL;",
                            )
                            .await
                            .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                        }
                        Ok(conn)
                    })
                });
                let manager = AsyncDieselConnectionManager::<$conn>::new_with_config(url, config);
                Ok(Pool::builder(manager).max_size(size).build()?)
            }
        }
    };
}

async_bench!(
    "sqlite",
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>
);
async_bench!("postgres", diesel_async::AsyncPgConnection);
async_bench!("mysql", diesel_async::AsyncMysqlConnection);

/// The library's `increment_async` on `T`'s counter of record 1.
pub(crate) fn slotted<A: AsyncBench, T: CounterTable<Key = i32>>() -> AsyncOp<A> {
    Box::new(|conn, _| Box::pin(async move { Counter::<T>::of(1).increment_async(conn).await }))
}

/// The library's `increment_async` on the writer's own record of `T`.
pub(crate) fn private<A: AsyncBench, T: CounterTable<Key = i32>>() -> AsyncOp<A> {
    Box::new(|conn, writer| {
        Box::pin(async move { Counter::<T>::of(writer).increment_async(conn).await })
    })
}

/// The `skip-locked` candidate, as the sync mode's (see `BenchConnection::skip_locked`).
pub(crate) fn skip_locked<A: AsyncBench>() -> AsyncOp<A> {
    Box::new(|conn, _| {
        Box::pin(async move {
            let updated = if <A::Backend as slotted_core::CounterBackend>::DIALECT
                == slotted_core::Dialect::Postgres
            {
                A::run(
                    conn,
                    HandWritten::<super::SkipLocked>::new(super::PG_SKIP_LOCKED, &[]),
                )
                .await?
            } else {
                match A::free_slot(conn).await? {
                    Some(slot) => {
                        let binds = [Bind::SmallInt(slot)];
                        A::run(
                            conn,
                            HandWritten::<super::SlotUpdate>::new(super::SLOT_UPDATE, &binds),
                        )
                        .await?
                    }
                    None => 0,
                }
            };
            if updated == 0 {
                Counter::<super::bench_k64_hits_slots::table>::of(1)
                    .increment_async(conn)
                    .await?;
            }
            Ok(())
        })
    })
}

/// The naive counter, prepared as the sync mode's.
pub(crate) fn single_row<A: AsyncBench>() -> AsyncOp<A> {
    Box::new(|conn, _| {
        Box::pin(async move {
            let binds = [Bind::Integer(1)];
            A::run(
                conn,
                HandWritten::<super::SingleRow>::new(SINGLE_ROW, &binds),
            )
            .await?;
            Ok(())
        })
    })
}

async fn event<A: AsyncBench>(conn: &mut A, writer: i32) -> QueryResult<usize> {
    let binds = [Bind::Integer(writer)];
    A::run(conn, HandWritten::<Event>::new(EVENT, &binds)).await
}

/// The async side of a run: a runtime of 2 workers and a deadpool pool.
pub(crate) struct AsyncSide<A: AsyncBench> {
    pub runtime: tokio::runtime::Runtime,
    pub pool: A::Pool,
}

impl<A: AsyncBench> AsyncSide<A> {
    /// `url` as Diesel's sync connections take it (`unix_socket=` for MySQL).
    pub fn new(url: &str, size: usize) -> Result<Self, BoxError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let url = slotted_examples::anchors::MysqlUrl::for_mysql_async(url);
        let pool = {
            let _guard = runtime.enter();
            A::pool(&url, size)?
        };
        Ok(AsyncSide { runtime, pool })
    }

    /// `writers` tasks, each with a pooled connection, run `op` for `opts.seconds` in `shape`;
    /// `mode` resets the table and reads the totals before and after (on a sync connection).
    pub fn measure<C: BenchConnection>(
        &self,
        sync_pool: &diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<C>>,
        mode: &Mode<C>,
        op: &Arc<AsyncOp<A>>,
        writers: u32,
        shape: Shape,
        opts: &super::Options,
    ) -> Result<Run, BoxError> {
        super::reset(&mut *sync_pool.get()?, mode)?;
        let before = (mode.total)(&mut *sync_pool.get()?)?;
        let hold = opts.hold;
        let seconds = opts.seconds;
        let tallies = self.runtime.block_on(async {
            let stop = Arc::new(AtomicBool::new(false));
            let barrier = Arc::new(tokio::sync::Barrier::new(writers as usize + 1));
            let mut tasks = Vec::new();
            for w in 0..writers as i32 {
                let mut conn = A::get(&self.pool).await?;
                // Made before the task: a writer that failed before the barrier would hang it.
                let mut timer = Hold::new()?;
                let (stop, barrier, op) = (stop.clone(), barrier.clone(), op.clone());
                tasks.push(tokio::spawn(async move {
                    let conn: &mut A = &mut conn;
                    let mut tally = Tally::default();
                    barrier.wait().await;
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let result = match shape {
                            Shape::Bare => op(conn, w).await,
                            Shape::Business => {
                                let timer = &mut timer;
                                conn.transaction(async |conn| {
                                    event(conn, w).await?;
                                    op(conn, w).await?;
                                    // A timer that fails (it does not) counts as an error.
                                    timer.sleep(hold).await.map_err(|e| {
                                        diesel::result::Error::QueryBuilderError(e.into())
                                    })?;
                                    Ok::<(), slotted_core::Error>(())
                                })
                                .await
                            }
                        };
                        match result {
                            Ok(()) => {
                                tally.committed += 1;
                                tally
                                    .latencies_ms
                                    .push(started.elapsed().as_secs_f64() * 1e3);
                            }
                            Err(e) if retryable(&e) => tally.retries += 1,
                            Err(_) => tally.errors += 1,
                        }
                    }
                    tally
                }));
            }
            barrier.wait().await;
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            stop.store(true, Ordering::Relaxed);
            let mut tallies = Vec::new();
            for task in tasks {
                tallies.push(task.await?);
            }
            Ok::<_, BoxError>(tallies)
        })?;
        A::clear(&self.pool);
        let after = (mode.total)(&mut *sync_pool.get()?)?;
        super::summarize(
            &format!("async {}", mode.name),
            "async",
            shape,
            writers,
            seconds,
            tallies,
            after - before,
        )
    }

    /// The median time, in milliseconds, of `n` of the async face's holds of `hold` (a
    /// [`Hold`]) and of `n` `tokio::time::sleep(hold)`s, on this runtime.
    pub fn hold_ms(&self, hold: Duration, n: usize) -> Result<(f64, f64), BoxError> {
        self.runtime.block_on(async {
            let exact = slotted_examples::hold::median_hold_ms(hold, n).await?;
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                let started = Instant::now();
                tokio::time::sleep(hold).await;
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
            Ok((exact, crate::median(times)))
        })
    }

    /// The async [`crate::interleaved_samples`]: calls `ops` in turn, `n` times each, on one
    /// pooled connection (inside one transaction if `in_transaction`), timing every call alone.
    pub fn interleaved_samples(
        &self,
        n: i32,
        in_transaction: bool,
        ops: &[TimedOp<'_, A>],
    ) -> Result<Vec<Vec<f64>>, BoxError> {
        async fn calls<A>(
            conn: &mut A,
            n: i32,
            ops: &[TimedOp<'_, A>],
        ) -> Result<Vec<Vec<f64>>, BoxError> {
            let mut samples = vec![Vec::with_capacity(n.max(0) as usize); ops.len()];
            for i in 0..n {
                for (op, samples) in ops.iter().zip(&mut samples) {
                    let started = Instant::now();
                    op(conn, i).await?;
                    samples.push(started.elapsed().as_secs_f64() * 1e6);
                }
            }
            Ok(samples)
        }
        self.runtime.block_on(async {
            let mut conn = A::get(&self.pool).await?;
            let conn: &mut A = &mut conn;
            if in_transaction {
                conn.transaction(async |conn| calls(conn, n, ops).await)
                    .await
            } else {
                calls(conn, n, ops).await
            }
        })
    }

    /// [`Self::interleaved_samples`] over `warm + n` calls, outside a transaction; per op, the
    /// median of the last `n`.
    pub fn interleaved_us(
        &self,
        warm: i32,
        n: i32,
        ops: &[TimedOp<'_, A>],
    ) -> Result<Vec<f64>, BoxError> {
        let samples = self.interleaved_samples(warm + n, false, ops)?;
        Ok(samples
            .into_iter()
            .map(|s| crate::median(s[warm as usize..].to_vec()))
            .collect())
    }
}

/// One timed operation on an async connection, given the call's index.
pub type TimedOp<'a, A> =
    &'a (dyn for<'c> Fn(&'c mut A, i32) -> BoxFuture<'c, Result<(), BoxError>> + Send + Sync);

/// The `hand-written ceiling` (`one_record` false: slot 0 of the writer's own record) or
/// `hand-written slots` (true: the writer's own slot of record 1): [`hand_written_upsert`].
pub(crate) fn hand_written_ceiling<C: BenchConnection>(one_record: bool) -> AsyncOp<C::Async> {
    Box::new(move |conn, writer| {
        Box::pin(async move {
            let (key, slot) = crate::modes::hand_written_row(one_record, writer);
            hand_written_upsert::<C, _>(conn, key, slot).await?;
            Ok(())
        })
    })
}

/// The library's upsert into `T1`'s row (`key`, `slot`), written by hand and prepared, on an
/// async connection.
pub(crate) fn hand_written_upsert<C: BenchConnection, A: AsyncBench>(
    conn: &mut A,
    key: i32,
    slot: i16,
) -> BoxFuture<'_, QueryResult<usize>> {
    Box::pin(async move {
        let (slot, delta) = (Bind::SmallInt(slot), Bind::BigInt(1));
        let binds = [Bind::Integer(key), slot, delta, delta];
        A::run(conn, HandWritten::<Upsert>::new(C::UPSERT, &binds)).await
    })
}
