//! Keeping counter tables small and caches fresh: compaction, set and reset, cache roll-ups,
//! bucket retention, pre-created slots. The public calls, each in a sync and an async face;
//! the jobs they run are in `fold.rs`.
//!
//! A writer blocked on a locked slot goes on after the commit and adds to the folded row or to
//! a new one; either way its delta counts once.

pub(crate) mod fold;

use std::time::{Duration, SystemTime};

use crate::count::{check_key, database_error};
use crate::counter::{two_faces, Counter};
use crate::error::Result;
use crate::exec::sync::{run_now, SyncExec};
use crate::exec::Exec;
use crate::key::KeyValue;
use crate::retry::RetryPolicy;
use crate::sql::maintenance::{DeleteScope, InsertRows, OnConflict, RowCount};
use crate::sql::read::KeyPage;
use crate::sql::{Buckets, Scope, SlotValue};
use crate::table::{BucketedCounterTable, CachedCounterTable, CounterTable, PrefilledCounterTable};
use crate::CounterConnection;
use fold::{for_each_page, Fold, ROWS_PER_STATEMENT};

/// Records per transaction when compacting or refreshing many records.
pub const MAINTENANCE_BATCH: usize = 1000;

/// The most records one page of `compact_all`, `fold_buckets_before` or
/// `delete_buckets_before` takes: its keys are bound in one statement, and this stays under every
/// backend's bind limit (SQLite's 32,766 is the lowest).
pub const MAX_PAGE: usize = crate::count::TOTALS_CHUNK;

/// How maintenance reruns a batch that lost a deadlock, when the batch is its own transaction.
/// On InnoDB two maintenance jobs over neighbouring records can still deadlock: a range scan
/// locks the row after the range, even when the range is one row.
const MAINTENANCE_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 10,
    base_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(250),
};

/// A record maintenance could not do, and why; the job went on with the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFailure {
    /// The record key, formatted with `Debug`.
    pub key: String,
    /// What stopped it, e.g. slots whose sum is outside `i64`.
    pub reason: String,
}

/// What a compaction or fold did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Records (keys) folded.
    pub records: u64,
    /// Slot rows of those records before.
    pub rows_before: u64,
    /// Slot rows of those records after: one per record and bucket, none where the count is 0.
    pub rows_after: u64,
    /// Transactions it took.
    pub batches: u64,
    /// Transactions run again after losing a deadlock to a concurrent transaction: each was
    /// rolled back whole before it ran again, so nothing was counted twice. Only a batch that is
    /// its own transaction is run again; a lock wait timeout is not (a rerun would wait as long
    /// again), it comes back as an error.
    pub retries: u64,
    /// Records left as they were, with the reason (their slots add up past `i64`): every other
    /// record was folded. A database error, by contrast, stops the job and comes back as `Err`.
    pub failed: Vec<RecordFailure>,
}

impl std::ops::AddAssign for CompactionReport {
    fn add_assign(&mut self, other: Self) {
        self.records += other.records;
        self.rows_before += other.rows_before;
        self.rows_after += other.rows_after;
        self.batches += other.batches;
        self.retries += other.retries;
        self.failed.extend(other.failed);
    }
}

/// What a cache roll-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Rows of the model's table updated.
    pub updated: u64,
    /// Records whose cache was left as it was, with the reason (a total outside `i64`): every
    /// other record was refreshed.
    pub failed: Vec<RecordFailure>,
}

impl std::ops::AddAssign for RefreshReport {
    fn add_assign(&mut self, other: Self) {
        self.updated += other.updated;
        self.failed.extend(other.failed);
    }
}

/// One record's maintenance.
impl<'k, T: CounterTable> Counter<'k, T> {
    two_faces! {
        /// Folds this record's slots into one row (per bucket), deleting it where the count is 0.
        /// Exact while writers go on; see [`CounterMaintenance::compact`].
        fn compact / compact_async(&self) -> Result<CompactionReport> =
            |exec| compact::<T, _>(exec, std::slice::from_ref(self.key()));

        /// Sets the count to `value`, atomically: once this commits, the total is `value` plus
        /// the deltas committed after it, and a `total` in the same transaction reads `value`.
        /// One transaction (a savepoint inside yours). It creates whichever of the record's slot
        /// rows of the current bucket do not exist and locks the record's rows, again until it
        /// holds every slot row a writer of the current bucket could write to (a concurrent
        /// compaction may have deleted one between the two); then it puts `value` into slot 0
        /// and deletes the others. Every writer of the record is then ordered either before it
        /// (erased) or after it (counted). A write with [`Counter::at`] into another bucket
        /// that has no row yet is not held back. Outside a transaction of yours, a set that
        /// loses a deadlock is rolled back and run again, up to 10 times.
        fn set / set_async(&self, value: i64) -> Result<()> = |exec| self.set_on(exec, value);

        /// Sets the count to 0: [`Counter::set`]`(0, conn)`, which leaves the record no rows.
        fn reset / reset_async(&self) -> Result<()> = |exec| self.set_on(exec, 0);
    }

    async fn set_on<E: Exec>(&self, exec: &mut E, value: i64) -> Result<()> {
        let spec = &T::SPEC;
        let key = check_key::<E::Backend, _>(spec, self.key())?;
        let bucket = spec.bucket.map_or(0, |width| width.start_of(self.now()));
        fold::set(exec, spec, key, bucket, value).await
    }
}

/// Roll-up into the model's cache column (counters declared with `cache = column`), and
/// pre-created slots (counters declared with `prefill`). The bounds are on the methods, so that a
/// call on another counter reports the marker trait's own message.
impl<'k, T: CounterTable> Counter<'k, T> {
    two_faces! {
        /// Copies this record's total into its cache column: one short `UPDATE` of the model's
        /// row.
        fn refresh_cache / refresh_cache_async(&self) -> Result<RefreshReport>
            where T: CachedCounterTable =
            |exec| refresh::<T, _>(exec, std::slice::from_ref(self.key()));

        /// Creates this record's slot rows (count 0) that do not exist yet, so increments are
        /// plain `UPDATE`s. Returns how many it created.
        fn create_slots / create_slots_async(&self) -> Result<u64>
            where T: PrefilledCounterTable =
            |exec| create_slots::<T, _>(exec, std::slice::from_ref(self.key()));
    }
}

/// Declares each table-level call twice, like `two_faces!` does for the handle.
macro_rules! table_faces {
    ($(
        $(#[$doc:meta])*
        fn $sync:ident / $async:ident ($this:ident $(, $arg:ident: $ty:ty)*) -> $out:ty
            $(where Self: $bound:path)? = |$exec:ident| $job:expr;
    )*) => {$(
        $(#[$doc])*
        fn $sync<C: CounterConnection>($this, $($arg: $ty,)* conn: &mut C) -> $out
        $(where Self: $bound)?
        {
            let span = crate::trace::span!(info_span, stringify!($sync), &Self::SPEC);
            crate::trace::in_span!(span, {
                let $exec = &mut SyncExec(conn);
                run_now($job)
            })
        }

        #[doc = concat!("[`", stringify!($sync), "`](Self::", stringify!($sync), ") on an async \
            connection (diesel-async, bb8, deadpool). The future is `Send`.")]
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        fn $async<C: crate::AsyncCounterConnection>(
            $this,
            $($arg: $ty,)*
            conn: &mut C,
        ) -> impl std::future::Future<Output = $out> + Send
        $(where Self: $bound)?
        {
            async move {
                let span = crate::trace::span!(info_span, stringify!($async), &Self::SPEC);
                crate::trace::in_span_async!(span, async {
                    let $exec = &mut crate::exec::asynch::AsyncExec(conn);
                    $job.await
                })
            }
        }
    )*};
}

/// Maintenance of a whole counter table, called on the table value the derive declares:
/// `posts_likes_slots::table.compact_all(1000, &mut conn)`, or with the `async` feature
/// `posts_likes_slots::table.compact_all_async(1000, &mut conn).await`.
pub trait CounterMaintenance: CounterTable {
    table_faces! {
        /// Compacts these records, [`MAINTENANCE_BATCH`] per transaction, in key order.
        ///
        /// Exact while writers keep writing. It sums exactly the rows it deletes, at their latest
        /// values, and writes the sum back into a slot row it still holds locked: on PostgreSQL
        /// and MySQL a `SELECT … ORDER BY record_id, slot FOR UPDATE`, then one row per record
        /// updated to the sum and a `DELETE` of exactly the others; on SQLite a
        /// `DELETE … RETURNING`, then the sums inserted. A record whose slots add up past `i64`
        /// is left as it is and listed in [`CompactionReport::failed`]; the others are folded.
        fn compact / compact_async(self, keys: &[Self::Key]) -> Result<CompactionReport> =
            |exec| compact::<Self, _>(exec, keys);

        /// Compacts every record that has more than one row (in some bucket) or a zero count:
        /// pages of `batch` records (at most [`MAX_PAGE`]) in key order, one transaction each.
        fn compact_all / compact_all_async(self, batch: usize) -> Result<CompactionReport> =
            |exec| compact_all::<Self, _>(exec, batch);

        /// Copies the totals of these records into the cache column, [`MAINTENANCE_BATCH`]
        /// records per `UPDATE`, in key order. Each `UPDATE` is its own short statement (when no
        /// transaction is open), so parent rows stay locked no longer than it runs. A record
        /// whose total is outside `i64` is skipped and listed in [`RefreshReport::failed`].
        fn refresh_cache / refresh_cache_async(self, keys: &[Self::Key]) -> Result<RefreshReport>
            where Self: CachedCounterTable = |exec| refresh::<Self, _>(exec, keys);

        /// Refreshes the cache column of every row of the model's table, in pages of `batch` keys.
        fn refresh_cache_all / refresh_cache_all_async(self, batch: usize) -> Result<RefreshReport>
            where Self: CachedCounterTable = |exec| refresh_all::<Self, _>(exec, batch);

        /// Retention: deletes every bucket that began before `cutoff`'s bucket, in pages of
        /// `batch` records (at most [`MAX_PAGE`]) in key order, one `DELETE` each: the rows of the
        /// other records and of newer buckets stay unlocked while it runs. Returns the rows
        /// deleted. The deleted counts are gone from every total.
        fn delete_buckets_before / delete_buckets_before_async(self, cutoff: SystemTime, batch: usize)
            -> Result<u64> where Self: BucketedCounterTable =
            |exec| delete_buckets_before::<Self, _>(exec, cutoff, batch);

        /// Retention that keeps all-time totals exact: folds every bucket that began before
        /// `cutoff`'s bucket into the bucket at Unix time 0 (1970-01-01), one row per record, in
        /// pages of `batch` records (at most [`MAX_PAGE`]), one transaction each. Per-bucket
        /// detail before the cutoff is gone; `total` is unchanged.
        fn fold_buckets_before / fold_buckets_before_async(self, cutoff: SystemTime, batch: usize)
            -> Result<CompactionReport> where Self: BucketedCounterTable =
            |exec| fold_buckets_before::<Self, _>(exec, cutoff, batch);

        /// Creates the slot rows (count 0) of these records that do not exist yet. Returns how
        /// many it created.
        fn create_slots / create_slots_async(self, keys: &[Self::Key]) -> Result<u64>
            where Self: PrefilledCounterTable = |exec| create_slots::<Self, _>(exec, keys);
    }
}

impl<T: CounterTable> CounterMaintenance for T {}

async fn compact<T: CounterTable, E: Exec>(
    exec: &mut E,
    keys: &[T::Key],
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    let mut report = CompactionReport::default();
    for batch in keys.chunks(MAINTENANCE_BATCH) {
        report += fold::fold(exec, spec, batch, Buckets::All, Fold::Compact).await?;
    }
    Ok(report)
}

async fn compact_all<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    for_each_page!(exec, spec, batch, Buckets::All, |page| fold::fold(
        exec,
        spec,
        &page,
        Buckets::All,
        Fold::Compact
    ))
}

async fn refresh<T: CounterTable, E: Exec>(exec: &mut E, keys: &[T::Key]) -> Result<RefreshReport> {
    let spec = &T::SPEC;
    let Some(cache) = &spec.cache else {
        return Ok(RefreshReport::default());
    };
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    fold::refresh(exec, spec, cache, &keys).await
}

async fn refresh_all<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
) -> Result<RefreshReport> {
    let spec = &T::SPEC;
    let Some(cache) = &spec.cache else {
        return Ok(RefreshReport::default());
    };
    let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    let (mut after, mut report) = (None, RefreshReport::default());
    loop {
        let page = KeyPage::Parent {
            spec,
            cache,
            after: after.as_ref().map(crate::key::RawKey::as_value),
            limit,
        };
        let keys = fold::key_page(exec, page).await?;
        let Some(last) = keys.last().cloned() else {
            return Ok(report);
        };
        let keys: Vec<KeyValue<'_>> = keys.iter().map(crate::key::RawKey::as_value).collect();
        report += fold::refresh(exec, spec, cache, &keys).await?;
        after = Some(last);
    }
}

async fn delete_buckets_before<T: CounterTable, E: Exec>(
    exec: &mut E,
    cutoff: SystemTime,
    batch: usize,
) -> Result<u64> {
    let spec = &T::SPEC;
    let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
    let old = Buckets::Before(before);
    for_each_page!(exec, spec, batch, old, |page| delete_page(
        exec, spec, &page, old
    ))
}

async fn delete_page<E: Exec>(
    exec: &mut E,
    spec: &crate::table::CounterSpec,
    keys: &[KeyValue<'_>],
    buckets: Buckets,
) -> Result<u64> {
    let scope = Scope {
        spec,
        keys,
        buckets,
    };
    let deleted = crate::exec::retried_transaction!(
        exec,
        MAINTENANCE_RETRY,
        crate::retry::lost_a_deadlock,
        async {
            exec.execute(DeleteScope(scope))
                .await
                .map_err(|e| database_error(spec, e))
        }
    )?;
    Ok(deleted.value as u64)
}

async fn fold_buckets_before<T: CounterTable, E: Exec>(
    exec: &mut E,
    cutoff: SystemTime,
    batch: usize,
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
    let old = Buckets::Range(1, before);
    for_each_page!(exec, spec, batch, old, |page| fold::fold(
        exec,
        spec,
        &page,
        Buckets::Before(before),
        Fold::IntoBucket(0)
    ))
}

async fn create_slots<T: CounterTable, E: Exec>(exec: &mut E, keys: &[T::Key]) -> Result<u64> {
    let spec = &T::SPEC;
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    let rows: Vec<RowCount<'_>> = keys
        .iter()
        .flat_map(|&k| (0..spec.slots as i16).map(move |slot| (k, 0, SlotValue::Bound(slot), 0)))
        .collect();
    let mut created = 0;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let insert = InsertRows {
            spec,
            rows: chunk,
            on_conflict: OnConflict::Skip,
        };
        created += exec
            .execute(insert)
            .await
            .map_err(|e| database_error(spec, e))? as u64;
    }
    Ok(created)
}
