//! The counter handle: `post.likes()` and `Post::likes_of(key)` return one. Each call exists in
//! two faces, `add` on a sync Diesel connection and `add_async` on a diesel-async one, both
//! running the one job in `count.rs` or `maintenance/`.

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

/// Declares each call twice: `$sync` on a [`CounterConnection`], run to its end on this thread,
/// and (with the `async` feature) `$async` on an
/// [`AsyncCounterConnection`](crate::AsyncCounterConnection), returning a `Send` future. Both
/// run `$job`, written once over `$exec: &mut impl Exec`.
macro_rules! two_faces {
    ($(
        $(#[$doc:meta])*
        fn $sync:ident / $async:ident (&$this:ident $(, $arg:ident: $ty:ty)*) -> $out:ty
            $(where T: $bound:path)? = |$exec:ident| $job:expr;
    )*) => {$(
        $(#[$doc])*
        pub fn $sync<C: CounterConnection>(&$this, $($arg: $ty,)* conn: &mut C) -> $out
        $(where T: $bound)?
        {
            let span = crate::trace::span!(debug_span, stringify!($sync), &T::SPEC);
            crate::trace::in_span!(span, {
                crate::trace::record!("key", tracing::field::debug($this.key()));
                let $exec = &mut SyncExec(conn);
                run_now($job)
            })
        }

        #[doc = concat!("[`", stringify!($sync), "`](Self::", stringify!($sync), ") on an async \
            connection (diesel-async, bb8, deadpool). The future is `Send`.")]
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn $async<'a, C: crate::AsyncCounterConnection>(
            &'a $this,
            $($arg: $ty,)*
            conn: &'a mut C,
        ) -> impl std::future::Future<Output = $out> + Send + use<'a, 'k, T, C>
        $(where T: $bound)?
        {
            async move {
                let span = crate::trace::span!(debug_span, stringify!($async), &T::SPEC);
                crate::trace::in_span_async!(span, async {
                    crate::trace::record!("key", tracing::field::debug($this.key()));
                    let $exec = &mut crate::exec::asynch::AsyncExec(conn);
                    $job.await
                })
            }
        }
    )*};
}
pub(crate) use two_faces;

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

    two_faces! {
        /// Adds 1. See [`Counter::add`].
        fn increment / increment_async(&self) -> Result<()> = |exec| self.add_on(1, exec);

        /// Subtracts 1. See [`Counter::add`].
        fn decrement / decrement_async(&self) -> Result<()> = |exec| self.add_on(-1, exec);

        /// Adds `delta` (negative to subtract) to one slot, chosen by the counter's
        /// [`SlotStrategy`](crate::SlotStrategy): one upsert, on `conn`, inside its transaction if
        /// one is open. A counter declared with `prefill` first tries a plain `UPDATE` of the
        /// pre-created slot row, and upserts only when the row is not there. Adding 0 does nothing
        /// and sends nothing. A bucketed counter adds to the bucket of now, or of [`Counter::at`].
        ///
        /// Returns [`Error::Overflow`](crate::Error::Overflow) and writes nothing when the slot
        /// would leave `i64`, [`Error::InvalidKey`](crate::Error::InvalidKey) when the key cannot
        /// be stored exactly on this backend, and [`Error::Database`](crate::Error::Database) for
        /// anything the database refuses.
        fn add / add_async(&self, delta: i64) -> Result<()> = |exec| self.add_on(delta, exec);

        /// The count: the sum of the record's slots (of every bucket, for a bucketed counter), 0
        /// when it has none.
        ///
        /// Returns [`Error::TotalOutOfRange`](crate::Error::TotalOutOfRange) when the sum does not
        /// fit an `i64`.
        fn total / total_async(&self) -> Result<i64> =
            |exec| count::sum::<T, _>(exec, &self.key, Buckets::All);
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
                count::totals::<T, _>(&mut crate::exec::asynch::AsyncExec(conn), keys)
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

    two_faces! {
        /// The count of one bucket: the one holding now, or [`Counter::at`].
        fn bucket_total / bucket_total_async(&self) -> Result<i64> where T: BucketedCounterTable =
            |exec| count::sum::<T, _>(exec, &self.key, self.bucket_range());

        /// The count of the buckets from the one holding `range.start` up to, not including, the
        /// one holding `range.end`; for a day counter, `day1..day3` counts two days.
        fn total_between / total_between_async(&self, range: Range<SystemTime>) -> Result<i64>
            where T: BucketedCounterTable =
            |exec| count::sum::<T, _>(exec, &self.key, between::<T>(range));
    }
}

fn between<T: CounterTable>(range: Range<SystemTime>) -> Buckets {
    match T::SPEC.bucket {
        Some(width) => Buckets::Range(width.start_of(range.start), width.start_of(range.end)),
        None => Buckets::Range(i64::MIN, i64::MAX),
    }
}
