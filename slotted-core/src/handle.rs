//! The counter handle: `post.likes()` and `Post::likes_of(key)` return one. Each call exists in
//! two faces, `add` on a sync Diesel connection and `add_async` on a diesel-async one, both
//! running the one job in `count.rs` or `maintenance/`. The faces are written out, each a
//! signature and one line over [`Counter::sync_call`] or `Counter::async_call` (which hold what
//! they share), so that a misused call's error note shows the method's own signature.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::time::SystemTime;

use crate::count;
use crate::error::Result;
use crate::exec::sync::{run_now, SyncExec};
use crate::exec::Exec;
use crate::sql::Buckets;
use crate::table::{BucketedCounterTable, CounterTable};
use crate::CounterConnection;
#[cfg(feature = "async")]
use crate::{exec::asynch::AsyncExec, AsyncCounterConnection};
#[cfg(feature = "async")]
use std::future::Future;

/// One record's counter: the handle every counter call goes through.
///
/// Made by the derive's accessors, `post.likes()` (borrowing the model's key) and
/// `Post::likes_of(key)` (owning it), or directly with [`Counter::new`] and [`Counter::of`].
/// `T` is the counter's table type, which the derive declares, so the handle of one counter
/// cannot be used for another, and the key type is checked at compile time.
///
/// Every call takes the connection it runs on. With the `async` feature, each has an `_async`
/// twin that takes a diesel-async connection (or a bb8/deadpool pooled one) and returns a
/// `Send` future: `post.likes().increment_async(&mut conn).await?`.
pub struct Counter<'k, T: CounterTable> {
    key: Cow<'k, T::Key>,
    moment: Option<SystemTime>,
    table: PhantomData<fn() -> T>,
}

impl<T: CounterTable> fmt::Debug for Counter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("counter", &T::SPEC.qualified_name())
            .field("key", &self.key)
            .field("at", &self.moment)
            .finish()
    }
}

impl<T: CounterTable> Clone for Counter<'_, T> {
    fn clone(&self) -> Self {
        Counter {
            key: self.key.clone(),
            moment: self.moment,
            table: PhantomData,
        }
    }
}

impl<'k, T: CounterTable> Counter<'k, T> {
    /// The counter of the record with this key, borrowing the key.
    pub fn new(key: &'k T::Key) -> Self {
        Counter {
            key: Cow::Borrowed(key),
            moment: None,
            table: PhantomData,
        }
    }

    /// The counter of the record with this key, owning the key.
    pub fn of(key: T::Key) -> Counter<'static, T> {
        Counter {
            key: Cow::Owned(key),
            moment: None,
            table: PhantomData,
        }
    }

    /// The record key.
    pub fn key(&self) -> &T::Key {
        &self.key
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.moment.unwrap_or_else(SystemTime::now)
    }

    /// Adds 1. See [`Counter::add`].
    pub fn increment<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.sync_call("increment", conn, |exec| run_now(self.add_on(1, exec)))
    }

    /// [`increment`](Self::increment) on an async connection (diesel-async, bb8, deadpool).
    /// The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn increment_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<()>> + Send + use<'a, 'k, T, C> {
        self.async_call("increment_async", async move {
            self.add_on(1, &mut AsyncExec::new(conn)).await
        })
    }

    /// Subtracts 1. See [`Counter::add`].
    pub fn decrement<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.sync_call("decrement", conn, |exec| run_now(self.add_on(-1, exec)))
    }

    /// [`decrement`](Self::decrement) on an async connection (diesel-async, bb8, deadpool).
    /// The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn decrement_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<()>> + Send + use<'a, 'k, T, C> {
        self.async_call("decrement_async", async move {
            self.add_on(-1, &mut AsyncExec::new(conn)).await
        })
    }

    /// Adds `delta` (negative to subtract) to one slot, chosen by the counter's
    /// [`SlotStrategy`](crate::SlotStrategy): one upsert, on `conn`, inside its transaction if
    /// one is open. A counter declared with `prefill` first tries a plain `UPDATE` of the
    /// pre-created slot row, and upserts only when the row is not there. Adding 0 does nothing
    /// and sends nothing. A bucketed counter adds to the bucket of now, or of [`Counter::at`].
    ///
    /// Returns [`Error::Overflow`](crate::Error::Overflow) and writes nothing when the slot
    /// would leave `i64`, [`Error::InvalidKey`](crate::Error::InvalidKey) when the key cannot
    /// be stored exactly on this backend, [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown)
    /// (and then the connection is marked broken) when the reply cannot be this write's own
    /// (MySQL and MariaDB) or the connection was lost with the write in flight outside a
    /// transaction, [`Error::ReadOnlyServer`](crate::Error::ReadOnlyServer) on a standby,
    /// [`Error::TransactionPooler`](crate::Error::TransactionPooler) behind a transaction pooler
    /// that `slotted_core::pooling` was not told of, and
    /// [`Error::Database`](crate::Error::Database) for anything else the database refuses.
    /// Only `Overflow`, `InvalidKey` and `ReadOnlyServer` promise that nothing was written.
    pub fn add<C: CounterConnection>(&self, delta: i64, conn: &mut C) -> Result<()> {
        self.sync_call("add", conn, |exec| run_now(self.add_on(delta, exec)))
    }

    /// [`add`](Self::add) on an async connection (diesel-async, bb8, deadpool). The future is
    /// `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn add_async<'a, C: AsyncCounterConnection>(
        &'a self,
        delta: i64,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<()>> + Send + use<'a, 'k, T, C> {
        self.async_call("add_async", async move {
            self.add_on(delta, &mut AsyncExec::new(conn)).await
        })
    }

    /// The count: the sum of the record's slots (of every bucket, for a bucketed counter), 0
    /// when it has none.
    ///
    /// Returns [`Error::TotalOutOfRange`](crate::Error::TotalOutOfRange) when the sum does not
    /// fit an `i64`.
    pub fn total<C: CounterConnection>(&self, conn: &mut C) -> Result<i64> {
        self.sync_call("total", conn, |exec| {
            run_now(count::sum::<T, _>(exec, &self.key, Buckets::All))
        })
    }

    /// [`total`](Self::total) on an async connection (diesel-async, bb8, deadpool). The future
    /// is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn total_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<i64>> + Send + use<'a, 'k, T, C> {
        self.async_call("total_async", async move {
            count::sum::<T, _>(&mut AsyncExec::new(conn), &self.key, Buckets::All).await
        })
    }

    /// Runs a sync call in its span (with this record's key): `job` on `conn`, to its end.
    pub(crate) fn sync_call<C: CounterConnection, O: crate::trace::Outcome>(
        &self,
        op: &'static str,
        conn: &mut C,
        job: impl FnOnce(&mut SyncExec<'_, C>) -> O,
    ) -> O {
        let span = crate::trace::span!(debug_span, op, &T::SPEC);
        crate::trace::in_span!(span, {
            crate::trace::record!("key", tracing::field::debug(self.key()));
            job(&mut SyncExec(conn))
        })
    }

    /// Awaits an async call's `job` in its span (with this record's key).
    #[cfg(feature = "async")]
    pub(crate) async fn async_call<O: crate::trace::Outcome>(
        &self,
        op: &'static str,
        job: impl Future<Output = O> + Send,
    ) -> O {
        let span = crate::trace::span!(debug_span, op, &T::SPEC);
        crate::trace::in_span_async!(span, async {
            crate::trace::record!("key", tracing::field::debug(self.key()));
            job.await
        })
    }

    fn add_on<'a, E: Exec>(
        &'a self,
        delta: i64,
        exec: &'a mut E,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'a {
        count::add::<T, E>(exec, &self.key, self.now(), delta)
    }

    /// The counts of many records: one `GROUP BY` query per [`TOTALS_CHUNK`](crate::TOTALS_CHUNK)
    /// distinct keys. Every key asked for is in the map, 0 when it has no slot; an empty slice
    /// sends nothing.
    pub fn totals<C: CounterConnection>(
        keys: &[T::Key],
        conn: &mut C,
    ) -> Result<HashMap<T::Key, i64>> {
        let span = crate::trace::span!(debug_span, "totals", &T::SPEC);
        crate::trace::in_span!(span, {
            run_now(count::totals::<T, _>(&mut SyncExec(conn), keys))
        })
    }

    /// [`totals`](Self::totals) on an async connection. The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn totals_async<'a, C: crate::AsyncCounterConnection>(
        keys: &'a [T::Key],
        conn: &'a mut C,
    ) -> impl std::future::Future<Output = Result<HashMap<T::Key, i64>>> + Send + 'a {
        async move {
            let span = crate::trace::span!(debug_span, "totals_async", &T::SPEC);
            crate::trace::in_span_async!(
                span,
                count::totals::<T, _>(&mut crate::exec::asynch::AsyncExec::new(conn), keys)
            )
        }
    }
}

/// Time buckets: for counters declared with `bucket = day` or `bucket = hour`. The bounds are on
/// the methods, not the `impl`, so that calling one on another counter reports
/// `BucketedCounterTable`'s own message instead of "method exists but its trait bounds were not
/// satisfied".
impl<'k, T: CounterTable> Counter<'k, T> {
    /// The same counter at another time: writes go to, and [`Counter::bucket_total`] reads, the
    /// bucket holding `time` instead of the current one. This is the clock, as a parameter.
    pub fn at(mut self, time: SystemTime) -> Self
    where
        T: BucketedCounterTable,
    {
        self.moment = Some(time);
        self
    }

    fn bucket_range(&self) -> Buckets {
        let start = T::SPEC.bucket.map_or(0, |width| width.start_of(self.now()));
        let width = T::SPEC.bucket.map_or(1, |width| width.seconds());
        Buckets::Range(start, start.saturating_add(width))
    }

    /// The count of one bucket: the one holding now, or [`Counter::at`].
    pub fn bucket_total<C: CounterConnection>(&self, conn: &mut C) -> Result<i64>
    where
        T: BucketedCounterTable,
    {
        self.sync_call("bucket_total", conn, |exec| {
            run_now(count::sum::<T, _>(exec, &self.key, self.bucket_range()))
        })
    }

    /// [`bucket_total`](Self::bucket_total) on an async connection (diesel-async, bb8,
    /// deadpool). The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn bucket_total_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<i64>> + Send + use<'a, 'k, T, C>
    where
        T: BucketedCounterTable,
    {
        self.async_call("bucket_total_async", async move {
            count::sum::<T, _>(&mut AsyncExec::new(conn), &self.key, self.bucket_range()).await
        })
    }

    /// The count of the buckets from the one holding `range.start` up to, not including, the
    /// one holding `range.end`; for a day counter, `day1..day3` counts two days.
    pub fn total_between<C: CounterConnection>(
        &self,
        range: Range<SystemTime>,
        conn: &mut C,
    ) -> Result<i64>
    where
        T: BucketedCounterTable,
    {
        self.sync_call("total_between", conn, |exec| {
            run_now(count::sum::<T, _>(exec, &self.key, between::<T>(range)))
        })
    }

    /// [`total_between`](Self::total_between) on an async connection (diesel-async, bb8,
    /// deadpool). The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn total_between_async<'a, C: AsyncCounterConnection>(
        &'a self,
        range: Range<SystemTime>,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<i64>> + Send + use<'a, 'k, T, C>
    where
        T: BucketedCounterTable,
    {
        self.async_call("total_between_async", async move {
            count::sum::<T, _>(&mut AsyncExec::new(conn), &self.key, between::<T>(range)).await
        })
    }
}

fn between<T: CounterTable>(range: Range<SystemTime>) -> Buckets {
    match T::SPEC.bucket {
        Some(width) => Buckets::Range(width.start_of(range.start), width.start_of(range.end)),
        None => Buckets::Range(i64::MIN, i64::MAX),
    }
}
