//! The maintenance calls: each in two faces, on one record's [`Counter`] and on a counter's
//! table ([`CounterMaintenance`]), over the jobs of this module.
//!
//! The faces are written out, not generated: each is a signature and one line that runs the job
//! (`table_call` or `Counter::sync_call`, and their async twins, hold what they share), so that
//! a misused call's error note shows the method's own signature, not a macro's internals. Their
//! likeness is that of the signatures.

use super::*;

/// One record's maintenance.
impl<'k, T: CounterTable> Counter<'k, T> {
    /// Folds this record's slots into one row (per bucket), deleting it where the count is 0.
    /// Exact while writers go on; see [`CounterMaintenance::compact`].
    pub fn compact<C: CounterConnection>(&self, conn: &mut C) -> Result<CompactionReport> {
        self.sync_call("compact", conn, |exec| {
            run_now(compact::<T, _>(exec, std::slice::from_ref(self.key())))
        })
    }

    /// [`compact`](Self::compact) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn compact_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<CompactionReport>> + Send + use<'a, 'k, T, C> {
        self.async_call("compact_async", async move {
            compact::<T, _>(&mut AsyncExec::new(conn), std::slice::from_ref(self.key())).await
        })
    }

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
    pub fn set<C: CounterConnection>(&self, value: i64, conn: &mut C) -> Result<()> {
        self.sync_call("set", conn, |exec| run_now(self.set_on(exec, value)))
    }

    /// [`set`](Self::set) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn set_async<'a, C: AsyncCounterConnection>(
        &'a self,
        value: i64,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<()>> + Send + use<'a, 'k, T, C> {
        self.async_call("set_async", async move {
            self.set_on(&mut AsyncExec::new(conn), value).await
        })
    }

    /// Sets the count to 0: [`Counter::set`]`(0, conn)`, which leaves the record no rows.
    pub fn reset<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.sync_call("reset", conn, |exec| run_now(self.set_on(exec, 0)))
    }

    /// [`reset`](Self::reset) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn reset_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<()>> + Send + use<'a, 'k, T, C> {
        self.async_call("reset_async", async move {
            self.set_on(&mut AsyncExec::new(conn), 0).await
        })
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
    /// Copies this record's total into its cache column: one short `UPDATE` of the model's
    /// row.
    pub fn refresh_cache<C: CounterConnection>(&self, conn: &mut C) -> Result<RefreshReport>
    where
        T: CachedCounterTable,
    {
        self.sync_call("refresh_cache", conn, |exec| {
            run_now(refresh::<T, _>(exec, std::slice::from_ref(self.key())))
        })
    }

    /// [`refresh_cache`](Self::refresh_cache) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn refresh_cache_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<RefreshReport>> + Send + use<'a, 'k, T, C>
    where
        T: CachedCounterTable,
    {
        self.async_call("refresh_cache_async", async move {
            refresh::<T, _>(&mut AsyncExec::new(conn), std::slice::from_ref(self.key())).await
        })
    }

    /// Creates this record's slot rows (count 0) that do not exist yet, so increments are
    /// plain `UPDATE`s. Returns how many it created.
    pub fn create_slots<C: CounterConnection>(&self, conn: &mut C) -> Result<u64>
    where
        T: PrefilledCounterTable,
    {
        self.sync_call("create_slots", conn, |exec| {
            run_now(create_slots::<T, _>(exec, std::slice::from_ref(self.key())))
        })
    }

    /// [`create_slots`](Self::create_slots) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn create_slots_async<'a, C: AsyncCounterConnection>(
        &'a self,
        conn: &'a mut C,
    ) -> impl Future<Output = Result<u64>> + Send + use<'a, 'k, T, C>
    where
        T: PrefilledCounterTable,
    {
        self.async_call("create_slots_async", async move {
            create_slots::<T, _>(&mut AsyncExec::new(conn), std::slice::from_ref(self.key())).await
        })
    }
}

/// Maintenance of a whole counter table, called on the table value the derive declares:
/// `posts_likes_slots::table.compact_all(1000, &mut conn)`, or with the `async` feature
/// `posts_likes_slots::table.compact_all_async(1000, &mut conn).await`.
pub trait CounterMaintenance: CounterTable {
    /// Compacts these records, at most [`MAINTENANCE_BATCH`] per transaction, in key order.
    ///
    /// Exact while writers keep writing. It sums exactly the rows it deletes, at their latest
    /// values, and writes the sum back into a slot row it still holds locked: on PostgreSQL
    /// and MySQL a `SELECT … ORDER BY record_id, slot FOR UPDATE SKIP LOCKED` (a row a
    /// writer's open transaction holds is left for later, never waited for), then one row
    /// per record updated to the sum and a `DELETE` of exactly the others; on SQLite a
    /// `DELETE … RETURNING`, then the sums inserted. A record whose slots add up past `i64`
    /// is left as it is and listed in [`CompactionReport::failed`]; the others are folded.
    ///
    /// A batch that loses a deadlock or a certification conflict (Galera) is rolled back
    /// and run again at half the size after a short jittered pause; batches that commit
    /// grow back. A record that writers win over every time is left for a later pass and
    /// listed in [`CompactionReport::skipped`]. An error that stops the job after some
    /// batches committed comes back as
    /// [`Error::MaintenanceStopped`](crate::Error::MaintenanceStopped), with what they did.
    fn compact<C: CounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> Result<CompactionReport> {
        table_call::<Self, _, _>("compact", conn, |exec| {
            run_now(compact::<Self, _>(exec, keys))
        })
    }

    /// [`compact`](Self::compact) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn compact_async<C: AsyncCounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> impl Future<Output = Result<CompactionReport>> + Send {
        table_call_async::<Self, _>("compact_async", async move {
            compact::<Self, _>(&mut AsyncExec::new(conn), keys).await
        })
    }

    /// Compacts every record that has more than one row (in some bucket) or a zero count:
    /// pages of `batch` records (at most [`MAX_PAGE`]) in key order, in transactions of at
    /// most `batch` records, smaller while they lose to writers (see
    /// [`compact`](Self::compact)). [`MAINTENANCE_BATCH`] suits every backend and cluster.
    fn compact_all<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<CompactionReport> {
        table_call::<Self, _, _>("compact_all", conn, |exec| {
            run_now(compact_all::<Self, _>(exec, batch))
        })
    }

    /// [`compact_all`](Self::compact_all) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn compact_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<CompactionReport>> + Send {
        table_call_async::<Self, _>("compact_all_async", async move {
            compact_all::<Self, _>(&mut AsyncExec::new(conn), batch).await
        })
    }

    /// A pass over the records written since the last one: compaction of every record with
    /// rows outside the settled slot (the slot compaction folds into, which no writer writes),
    /// found through the index of unsettled rows that the counter migrations create, then the
    /// roll-up of the same records into the cached column (with `cache`). Its cost follows
    /// what was written since the last pass, not the size of the table. What the maintainer
    /// runs at every pass, with [`compact_all`](Self::compact_all) and
    /// [`refresh_cache_all`](Self::refresh_cache_all) at the verify interval for what no write
    /// unsettles (a retention that deleted buckets of a cached counter).
    fn maintain_changed<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<PassReport> {
        table_call::<Self, _, _>("maintain_changed", conn, |exec| {
            run_now(maintain_changed::<Self, _>(exec, batch))
        })
    }

    /// [`maintain_changed`](Self::maintain_changed) on an async connection (diesel-async,
    /// bb8, deadpool). The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn maintain_changed_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<PassReport>> + Send {
        table_call_async::<Self, _>("maintain_changed_async", async move {
            maintain_changed::<Self, _>(&mut AsyncExec::new(conn), batch).await
        })
    }

    /// Copies the totals of these records into the cache column, at most
    /// [`MAINTENANCE_BATCH`] records per `UPDATE`, in key order. Each batch (its totals'
    /// read and its `UPDATE`) is its own short transaction (when no transaction is open), so
    /// parent rows stay locked no longer than it runs; one that loses to writers runs again
    /// smaller, as compaction's do. A record whose total is outside `i64` is skipped and
    /// listed in [`RefreshReport::failed`].
    fn refresh_cache<C: CounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> Result<RefreshReport>
    where
        Self: CachedCounterTable,
    {
        table_call::<Self, _, _>("refresh_cache", conn, |exec| {
            run_now(refresh::<Self, _>(exec, keys))
        })
    }

    /// [`refresh_cache`](Self::refresh_cache) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn refresh_cache_async<C: AsyncCounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> impl Future<Output = Result<RefreshReport>> + Send
    where
        Self: CachedCounterTable,
    {
        table_call_async::<Self, _>("refresh_cache_async", async move {
            refresh::<Self, _>(&mut AsyncExec::new(conn), keys).await
        })
    }

    /// Sets every record's count against what its child rows add up to (a counter that
    /// follows a child table), in pages of `batch` records, each page one statement and so one
    /// snapshot of both: beside writers, a difference is drift the triggers did not see
    /// (triggers disabled or dropped for a bulk load, rows written behind them), never a write
    /// in flight. Also says whether the counter's triggers are there and enabled. Writes
    /// nothing; [`repair_follow_all`](Self::repair_follow_all) fixes what it finds. Reads every
    /// child row and slot row once: run it as counter_culture's users run `fix_counts`, on a
    /// schedule and after bulk loads, not on every request.
    fn verify_follow_all<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<FollowReport>
    where
        Self: FollowingCounterTable,
    {
        table_call::<Self, _, _>("verify_follow_all", conn, |exec| {
            run_now(follow::verify_all::<Self, _>(exec, batch, false))
        })
    }

    /// [`verify_follow_all`](Self::verify_follow_all) on an async connection (diesel-async,
    /// bb8, deadpool). The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn verify_follow_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<FollowReport>> + Send
    where
        Self: FollowingCounterTable,
    {
        table_call_async::<Self, _>("verify_follow_all_async", async move {
            follow::verify_all::<Self, _>(&mut AsyncExec::new(conn), batch, false).await
        })
    }

    /// [`verify_follow_all`](Self::verify_follow_all), and each record found drifting gets the
    /// difference added to its row of the slot just past the writers' (slot `slots`, which no
    /// writer writes; the next compaction settles it), so that its count equals its child rows
    /// again. Each page's drifted records are repaired
    /// in a short transaction that locks their rows and reads them again: writers go on
    /// meanwhile (what they change moves the count and the child rows alike), and two repairs of
    /// one record add its difference once. Run it after the triggers are back
    /// (`report.triggers_enabled == report.triggers_expected`), or the drift comes back. On
    /// MySQL and MariaDB, outside a transaction of yours: inside one its reads would see your
    /// snapshot, which may predate another repair, and it is refused
    /// ([`Error::InTransaction`](crate::Error::InTransaction)).
    fn repair_follow_all<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<FollowReport>
    where
        Self: FollowingCounterTable,
    {
        table_call::<Self, _, _>("repair_follow_all", conn, |exec| {
            run_now(follow::verify_all::<Self, _>(exec, batch, true))
        })
    }

    /// [`repair_follow_all`](Self::repair_follow_all) on an async connection (diesel-async,
    /// bb8, deadpool). The future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn repair_follow_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<FollowReport>> + Send
    where
        Self: FollowingCounterTable,
    {
        table_call_async::<Self, _>("repair_follow_all_async", async move {
            follow::verify_all::<Self, _>(&mut AsyncExec::new(conn), batch, true).await
        })
    }

    /// Refreshes the cache column of every row of the model's table, in pages of `batch` keys.
    fn refresh_cache_all<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<RefreshReport>
    where
        Self: CachedCounterTable,
    {
        table_call::<Self, _, _>("refresh_cache_all", conn, |exec| {
            run_now(refresh_all::<Self, _>(exec, batch))
        })
    }

    /// [`refresh_cache_all`](Self::refresh_cache_all) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn refresh_cache_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<RefreshReport>> + Send
    where
        Self: CachedCounterTable,
    {
        table_call_async::<Self, _>("refresh_cache_all_async", async move {
            refresh_all::<Self, _>(&mut AsyncExec::new(conn), batch).await
        })
    }

    /// Retention: deletes every bucket that began before `cutoff`'s bucket, in pages of
    /// `batch` records (at most [`MAX_PAGE`]) in key order, one `DELETE` each: the rows of the
    /// other records and of newer buckets stay unlocked while it runs. Returns the rows
    /// deleted. The deleted counts are gone from every total.
    fn delete_buckets_before<C: CounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> Result<u64>
    where
        Self: BucketedCounterTable,
    {
        table_call::<Self, _, _>("delete_buckets_before", conn, |exec| {
            run_now(delete_buckets_before::<Self, _>(exec, cutoff, batch))
        })
    }

    /// [`delete_buckets_before`](Self::delete_buckets_before) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn delete_buckets_before_async<C: AsyncCounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<u64>> + Send
    where
        Self: BucketedCounterTable,
    {
        table_call_async::<Self, _>("delete_buckets_before_async", async move {
            delete_buckets_before::<Self, _>(&mut AsyncExec::new(conn), cutoff, batch).await
        })
    }

    /// Retention that keeps all-time totals exact: folds every bucket that began before
    /// `cutoff`'s bucket into the bucket at Unix time 0 (1970-01-01), one row per record, in
    /// pages of `batch` records (at most [`MAX_PAGE`]), one transaction each. Per-bucket
    /// detail before the cutoff is gone; `total` is unchanged.
    fn fold_buckets_before<C: CounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> Result<CompactionReport>
    where
        Self: BucketedCounterTable,
    {
        table_call::<Self, _, _>("fold_buckets_before", conn, |exec| {
            run_now(fold_buckets_before::<Self, _>(exec, cutoff, batch))
        })
    }

    /// [`fold_buckets_before`](Self::fold_buckets_before) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn fold_buckets_before_async<C: AsyncCounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<CompactionReport>> + Send
    where
        Self: BucketedCounterTable,
    {
        table_call_async::<Self, _>("fold_buckets_before_async", async move {
            fold_buckets_before::<Self, _>(&mut AsyncExec::new(conn), cutoff, batch).await
        })
    }

    /// Moves the adopted column's counts of these records into their slots (counters declared
    /// with `adopt = column`): per batch of at most [`MAINTENANCE_BATCH`] records, in key
    /// order, one transaction that locks the model's rows, adds each non-zero value to the
    /// record's row of the session's writer slot (on Galera the node's own share) and
    /// subtracts it from the column. Every total stays exact throughout,
    /// with old-style writers of the column and new writers of the slots going on; run it once
    /// no old-style writer is left, and again after a rolled-back deploy put one back. It can be
    /// stopped at any point and run again: a record already absorbed holds 0 and is skipped.
    /// Once the column is the roll-up's cache (see [`absorb_all`](Self::absorb_all)) it moves
    /// nothing.
    fn absorb<C: CounterConnection>(self, keys: &[Self::Key], conn: &mut C) -> Result<MoveReport>
    where
        Self: AdoptingCounterTable,
    {
        table_call::<Self, _, _>("absorb", conn, |exec| {
            run_now(absorb::<Self, _>(exec, keys))
        })
    }

    /// [`absorb`](Self::absorb) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn absorb_async<C: AsyncCounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> impl Future<Output = Result<MoveReport>> + Send
    where
        Self: AdoptingCounterTable,
    {
        table_call_async::<Self, _>("absorb_async", async move {
            absorb::<Self, _>(&mut AsyncExec::new(conn), keys).await
        })
    }

    /// [`absorb`](Self::absorb) for every row of the model's table, in pages of `batch` keys.
    /// For a counter whose `cache` is the adopted column, the end of the pass takes the column
    /// over as the roll-up's cache when every row holds 0 ([`MoveReport::took_over_cache`]):
    /// run it only once no old binary writes the column.
    fn absorb_all<C: CounterConnection>(self, batch: usize, conn: &mut C) -> Result<MoveReport>
    where
        Self: AdoptingCounterTable,
    {
        table_call::<Self, _, _>("absorb_all", conn, |exec| {
            run_now(absorb_all::<Self, _>(exec, batch))
        })
    }

    /// [`absorb_all`](Self::absorb_all) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn absorb_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<MoveReport>> + Send
    where
        Self: AdoptingCounterTable,
    {
        table_call_async::<Self, _>("absorb_all_async", async move {
            absorb_all::<Self, _>(&mut AsyncExec::new(conn), batch).await
        })
    }

    /// The reverse of [`absorb_all`](Self::absorb_all), for a counter being removed: moves
    /// every record's slots into the adopted column and deletes them, per batch one
    /// transaction that locks the model's rows, then the slots. Totals stay exact throughout.
    /// A record whose count the column cannot hold (an `INTEGER` column past `i32`), or
    /// without a row in the model's table, keeps its slots and is listed in
    /// [`MoveReport::failed`]. Run it again after the last writer of the slots is gone, then
    /// revert the counter's migration.
    fn release_all<C: CounterConnection>(self, batch: usize, conn: &mut C) -> Result<MoveReport>
    where
        Self: AdoptingCounterTable,
    {
        table_call::<Self, _, _>("release_all", conn, |exec| {
            run_now(release_all::<Self, _>(exec, batch))
        })
    }

    /// [`release_all`](Self::release_all) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn release_all_async<C: AsyncCounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> impl Future<Output = Result<MoveReport>> + Send
    where
        Self: AdoptingCounterTable,
    {
        table_call_async::<Self, _>("release_all_async", async move {
            release_all::<Self, _>(&mut AsyncExec::new(conn), batch).await
        })
    }

    /// Creates the slot rows (count 0) of these records that do not exist yet. Returns how
    /// many it created.
    fn create_slots<C: CounterConnection>(self, keys: &[Self::Key], conn: &mut C) -> Result<u64>
    where
        Self: PrefilledCounterTable,
    {
        table_call::<Self, _, _>("create_slots", conn, |exec| {
            run_now(create_slots::<Self, _>(exec, keys))
        })
    }

    /// [`create_slots`](Self::create_slots) on an async connection (diesel-async, bb8, deadpool). The
    /// future is `Send`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    fn create_slots_async<C: AsyncCounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> impl Future<Output = Result<u64>> + Send
    where
        Self: PrefilledCounterTable,
    {
        table_call_async::<Self, _>("create_slots_async", async move {
            create_slots::<Self, _>(&mut AsyncExec::new(conn), keys).await
        })
    }
}

impl<T: CounterTable> CounterMaintenance for T {}

/// Runs a table-level maintenance call in its span: `job` on `conn`, to its end.
pub(super) fn table_call<T: CounterTable, C: CounterConnection, O: crate::trace::Outcome>(
    op: &'static str,
    conn: &mut C,
    job: impl FnOnce(&mut SyncExec<'_, C>) -> O,
) -> O {
    let span = crate::trace::span!(info_span, op, &T::SPEC);
    crate::trace::in_span!(span, job(&mut SyncExec(conn)))
}

/// Awaits a table-level maintenance call's `job` in its span.
#[cfg(feature = "async")]
pub(super) async fn table_call_async<T: CounterTable, O: crate::trace::Outcome>(
    op: &'static str,
    job: impl Future<Output = O> + Send,
) -> O {
    let span = crate::trace::span!(info_span, op, &T::SPEC);
    crate::trace::in_span_async!(span, job)
}
