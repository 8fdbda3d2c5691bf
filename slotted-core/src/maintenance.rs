//! Keeping counter tables small and caches fresh: compaction, set and reset, cache roll-ups,
//! bucket retention, pre-created slots.
//!
//! Every fold (compaction, set, retention) runs in one transaction per batch and is exact under
//! concurrent writers: it sums exactly the rows it deletes, at their latest committed values,
//! and puts the sum back into a slot row it holds locked.
//! - PostgreSQL, MySQL/MariaDB: `SELECT … ORDER BY record_id, slot FOR UPDATE` locks the rows in
//!   key order and reads their latest values. Then, for each record, one of those rows is
//!   updated to the sum and a `DELETE` removes exactly the others. A row a writer inserts in
//!   between stays, counted once. Nothing is locked out of key order and nothing is inserted
//!   once the rows are locked, so two maintenance jobs cannot deadlock each other: a `DELETE …
//!   RETURNING` of the whole scope locked a writer's new row in scan order (two compactions then
//!   deadlocked on PostgreSQL), and re-inserting the sum after deleting every row needed an
//!   insert-intention lock on a gap another compaction's waiting lock covered (deadlocked on
//!   InnoDB).
//! - SQLite: `DELETE … RETURNING`, then the sums inserted; SQLite lets one writer in at a time.
//!
//! A writer blocked on a locked slot goes on after the commit and adds to the folded row or to
//! a new one; either way its delta counts once.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use diesel::RunQueryDsl;

use crate::backend::{
    Buckets, CounterBackend, CounterConnection, DeleteRows, DeleteScope, Dialect, InsertRows,
    KeyPage, OnConflict, RefreshCache, RowsQuery, Scope, SlotRow, UpdateRows,
};
use crate::counter::{check_key, database_error, unexpected_key, Counter};
use crate::error::{Error, Result};
use crate::key::{CounterKey, KeyValue, RawKey};
use crate::retry::{lost_a_deadlock, retry_transaction, RetryPolicy};
use crate::table::{
    BucketedCounterTable, CachedCounterTable, CounterSpec, CounterTable, PrefilledCounterTable,
};

/// Records per transaction when compacting or refreshing many records.
pub const MAINTENANCE_BATCH: usize = 1000;

/// How maintenance reruns a batch that lost a deadlock, when the batch is its own transaction.
/// On InnoDB two maintenance jobs over neighbouring records can still deadlock: a range scan
/// locks the row after the range, even when the range is one row.
const MAINTENANCE_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 10,
    base_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(250),
};

/// Rows per multi-row `INSERT` or `DELETE`: at most 5 binds a row, under every bind limit.
const ROWS_PER_STATEMENT: usize = 4096;

/// What a compaction or fold did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

impl std::ops::AddAssign for CompactionReport {
    fn add_assign(&mut self, other: Self) {
        self.records += other.records;
        self.rows_before += other.rows_before;
        self.rows_after += other.rows_after;
        self.batches += other.batches;
        self.retries += other.retries;
    }
}

/// What a fold writes back.
#[derive(Clone, Copy)]
enum Fold {
    /// Each (record, bucket)'s sum, into one of its own slots.
    Compact,
    /// The records' buckets all into this bucket.
    IntoBucket(i64),
}

/// Takes every row in `scope` to rewrite it, and returns the rows at their latest values. On
/// PostgreSQL and MySQL they are locked, in key order, and still there; on SQLite they are
/// deleted already. Must run inside a transaction; [`put_back`] then leaves what remains.
fn take_rows<C: CounterConnection>(
    conn: &mut C,
    scope: Scope<'_>,
) -> diesel::QueryResult<Vec<SlotRow>> {
    let query = match C::Backend::DIALECT {
        Dialect::Sqlite => RowsQuery::DeleteReturning(scope),
        Dialect::Postgres | Dialect::Mysql => RowsQuery::Lock(scope),
    };
    C::Backend::load_rows(conn, query)
}

/// Rows per `UPDATE … CASE`: each row has a `WHEN` that every updated row is tested against.
const ROWS_PER_UPDATE: usize = 512;

/// After [`take_rows`]: leaves exactly `result`, `(key, bucket, slot, count)` rows, in place of
/// the `taken` ones. On PostgreSQL and MySQL a result row that was taken (locked) is updated in
/// place and the other taken rows are deleted, so nothing is inserted over a locked range but
/// the result rows that did not exist (folding old buckets into one that had no row); on SQLite,
/// where the taken rows are gone already, the result rows are inserted.
fn put_back<C: CounterConnection>(
    conn: &mut C,
    spec: &CounterSpec,
    taken: &[SlotRow],
    result: &[(KeyValue<'_>, i64, i16, i64)],
) -> Result<()> {
    let mut inserts: Vec<(KeyValue<'_>, i64, i16, i64)> = Vec::new();
    if C::Backend::DIALECT == Dialect::Sqlite {
        inserts.extend_from_slice(result);
    } else {
        let taken_ids: HashSet<(KeyValue<'_>, i64, i16)> = taken
            .iter()
            .map(|r| (r.key.as_value(), r.bucket, r.slot))
            .collect();
        let (updates, new): (Vec<_>, Vec<_>) = result
            .iter()
            .copied()
            .partition(|(key, bucket, slot, _)| taken_ids.contains(&(*key, *bucket, *slot)));
        let kept: HashSet<(KeyValue<'_>, i64, i16)> =
            updates.iter().map(|&(k, b, s, _)| (k, b, s)).collect();
        let deletes: Vec<(KeyValue<'_>, i64, i16)> = taken
            .iter()
            .map(|r| (r.key.as_value(), r.bucket, r.slot))
            .filter(|id| !kept.contains(id))
            .collect();
        for chunk in deletes.chunks(ROWS_PER_STATEMENT) {
            DeleteRows { spec, rows: chunk }
                .execute(conn)
                .map_err(|e| database_error(spec, e))?;
        }
        for chunk in updates.chunks(ROWS_PER_UPDATE) {
            UpdateRows { spec, rows: chunk }
                .execute(conn)
                .map_err(|e| database_error(spec, e))?;
        }
        inserts = new;
    }
    for chunk in inserts.chunks(ROWS_PER_STATEMENT) {
        InsertRows {
            spec,
            rows: chunk,
            on_conflict: OnConflict::Fail,
        }
        .execute(conn)
        .map_err(|e| database_error(spec, e))?;
    }
    Ok(())
}

/// Folds the rows of `keys` in one transaction (a savepoint inside the caller's).
fn fold<C: CounterConnection>(
    conn: &mut C,
    spec: &CounterSpec,
    keys: &[KeyValue<'_>],
    buckets: Buckets,
    how: Fold,
) -> Result<CompactionReport> {
    if keys.is_empty() {
        return Ok(CompactionReport::default());
    }
    let done = retry_transaction(conn, &MAINTENANCE_RETRY, lost_a_deadlock, |conn| {
        let scope = Scope {
            spec,
            keys,
            buckets,
        };
        let rows = take_rows(conn, scope).map_err(|e| database_error(spec, e))?;
        // Per (record, target bucket): the exact sum, and the slot it goes into: the smallest
        // of the rows taken in the target bucket (one we hold), else the smallest taken.
        let mut groups: BTreeMap<(&RawKey, i64), Group> = BTreeMap::new();
        for row in &rows {
            let target = match how {
                Fold::Compact => row.bucket,
                Fold::IntoBucket(bucket) => bucket,
            };
            let group = groups.entry((&row.key, target)).or_insert(Group {
                in_target: None,
                any: row.slot,
                sum: 0,
            });
            if row.bucket == target {
                group.in_target = Some(group.in_target.map_or(row.slot, |s| s.min(row.slot)));
            }
            group.any = group.any.min(row.slot);
            group.sum += i128::from(row.count);
        }
        let mut folded = Vec::with_capacity(groups.len());
        for ((key, bucket), group) in groups {
            let sum = i64::try_from(group.sum).map_err(|_| Error::TotalOutOfRange {
                counter: spec.qualified_name(),
                table: spec.table,
                key: format!("{key:?}"),
                total: format!(
                    "{} (its slots cannot be folded into one; nothing was changed)",
                    group.sum
                ),
            })?;
            if sum != 0 {
                let slot = group.in_target.unwrap_or(group.any);
                folded.push((key.as_value(), bucket, slot, sum));
            }
        }
        put_back(conn, spec, &rows, &folded)?;
        Ok::<_, Error>(CompactionReport {
            records: keys.len() as u64,
            rows_before: rows.len() as u64,
            rows_after: folded.len() as u64,
            batches: 1,
            retries: 0,
        })
    })?;
    Ok(CompactionReport {
        retries: u64::from(done.retries),
        ..done.value
    })
}

/// One record's rows on their way into one row.
struct Group {
    /// The smallest slot taken in the target bucket.
    in_target: Option<i16>,
    /// The smallest slot taken.
    any: i16,
    sum: i128,
}

/// The keys, checked, deduplicated and sorted: maintenance locks rows in key order.
fn sorted_keys<'k, DB: CounterBackend, K: CounterKey>(
    spec: &CounterSpec,
    keys: &'k [K],
) -> Result<Vec<KeyValue<'k>>> {
    let mut sorted: Vec<&K> = keys.iter().collect();
    sorted.sort();
    sorted.dedup();
    sorted
        .into_iter()
        .map(|k| check_key::<DB, K>(spec, k))
        .collect()
}

/// One record's maintenance.
impl<T: CounterTable> Counter<'_, T> {
    /// Folds this record's slots into one row (per bucket), deleting it where the count is 0.
    /// Exact while writers go on; see the module documentation.
    pub fn compact<C: CounterConnection>(&self, conn: &mut C) -> Result<CompactionReport> {
        CounterMaintenance::compact(T::default(), std::slice::from_ref(self.key()), conn)
    }

    /// Sets the count to `value`, atomically: once this commits, the total is `value` plus the
    /// deltas committed after it. One transaction (a savepoint inside yours): it first creates
    /// whichever of the record's slot rows (of the current bucket) do not exist, so that every
    /// row a writer could touch exists and is locked by the next step (on PostgreSQL a writer
    /// could otherwise insert a new slot unseen); then it locks the record's rows, puts `value`
    /// into slot 0 of the current bucket and deletes the others. Outside a transaction of yours,
    /// a set that loses a deadlock is rolled back and run again, up to 10 times.
    pub fn set<C: CounterConnection>(&self, value: i64, conn: &mut C) -> Result<()> {
        let spec = &T::SPEC;
        let key = self.checked_key::<C::Backend>()?;
        let bucket = spec.bucket.map_or(0, |width| width.start_of(self.now()));
        let all_slots: Vec<(KeyValue<'_>, i64, i16, i64)> = (0..spec.slots as i16)
            .map(|slot| (key, bucket, slot, 0))
            .collect();
        retry_transaction(conn, &MAINTENANCE_RETRY, lost_a_deadlock, |conn| {
            for chunk in all_slots.chunks(ROWS_PER_STATEMENT) {
                InsertRows {
                    spec,
                    rows: chunk,
                    on_conflict: OnConflict::Lock,
                }
                .execute(conn)
                .map_err(|e| database_error(spec, e))?;
            }
            let taken =
                take_rows(conn, Scope::new(spec, &[key])).map_err(|e| database_error(spec, e))?;
            let value_row = [(key, bucket, 0, value)];
            put_back(
                conn,
                spec,
                &taken,
                if value == 0 { &[] } else { &value_row },
            )
        })
        .map(|_| ())
    }

    /// Sets the count to 0: [`Counter::set`]`(0, conn)`, which leaves the record no rows.
    pub fn reset<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.set(0, conn)
    }
}

/// Roll-up into the model's cache column (counters declared with `cache = column`). The bound is
/// on the method, not the `impl`, so that calling it on another counter reports
/// `CachedCounterTable`'s own message instead of "method exists but its trait bounds were not
/// satisfied".
impl<T: CounterTable> Counter<'_, T> {
    /// Copies this record's total into its cache column: one short `UPDATE` of the model's row.
    pub fn refresh_cache<C: CounterConnection>(&self, conn: &mut C) -> Result<u64>
    where
        T: CachedCounterTable,
    {
        CounterMaintenance::refresh_cache(T::default(), std::slice::from_ref(self.key()), conn)
    }
}

/// Pre-created slots (counters declared with `prefill`); the bound is on the method, as above.
impl<T: CounterTable> Counter<'_, T> {
    /// Creates this record's slot rows (count 0) that do not exist yet, so increments are plain
    /// `UPDATE`s. Returns how many it created.
    pub fn create_slots<C: CounterConnection>(&self, conn: &mut C) -> Result<u64>
    where
        T: PrefilledCounterTable,
    {
        CounterMaintenance::create_slots(T::default(), std::slice::from_ref(self.key()), conn)
    }
}

/// Maintenance of a whole counter table, called on the table value the derive declares:
/// `posts_likes_slots::table.compact_all(1000, &mut conn)`.
pub trait CounterMaintenance: CounterTable {
    /// Compacts these records, [`MAINTENANCE_BATCH`] per transaction, in key order.
    fn compact<C: CounterConnection>(
        self,
        keys: &[Self::Key],
        conn: &mut C,
    ) -> Result<CompactionReport> {
        let spec = &Self::SPEC;
        let keys = sorted_keys::<C::Backend, _>(spec, keys)?;
        let mut report = CompactionReport::default();
        for batch in keys.chunks(MAINTENANCE_BATCH) {
            report += fold(conn, spec, batch, Buckets::All, Fold::Compact)?;
        }
        Ok(report)
    }

    /// Compacts every record that has more than one row (in some bucket) or a zero count:
    /// pages of `batch` records (at most [`MAX_PAGE`]) in key order, one transaction each.
    fn compact_all<C: CounterConnection>(
        self,
        batch: usize,
        conn: &mut C,
    ) -> Result<CompactionReport> {
        let spec = &Self::SPEC;
        for_each_page(conn, spec, batch, Buckets::All, |conn, keys| {
            fold(conn, spec, keys, Buckets::All, Fold::Compact)
        })
    }

    /// Copies the totals of these records into the cache column, [`MAINTENANCE_BATCH`] records
    /// per `UPDATE`, in key order. Each `UPDATE` is its own short statement (when no transaction
    /// is open), so parent rows stay locked no longer than it runs. Returns the rows updated.
    fn refresh_cache<C: CounterConnection>(self, keys: &[Self::Key], conn: &mut C) -> Result<u64>
    where
        Self: CachedCounterTable,
    {
        let spec = &Self::SPEC;
        let Some(cache) = &spec.cache else {
            return Ok(0);
        };
        let mut sorted: Vec<Self::Key> = keys.to_vec();
        sorted.sort();
        sorted.dedup();
        let mut updated = 0;
        for batch in sorted.chunks(MAINTENANCE_BATCH) {
            // The totals come from a plain, non-locking read; the cache is then as fresh as
            // that read.
            let totals = Counter::<Self>::totals(batch, conn)?;
            let pairs: Vec<(KeyValue<'_>, i64)> =
                batch.iter().map(|k| (k.key_value(), totals[k])).collect();
            let refreshed = RefreshCache {
                cache,
                totals: &pairs,
            }
            .execute(conn)
            .map_err(|e| database_error(spec, e))?;
            updated += refreshed as u64;
        }
        Ok(updated)
    }

    /// Refreshes the cache column of every row of the model's table, in pages of `batch` keys.
    fn refresh_cache_all<C: CounterConnection>(self, batch: usize, conn: &mut C) -> Result<u64>
    where
        Self: CachedCounterTable,
    {
        let spec = &Self::SPEC;
        let Some(cache) = &spec.cache else {
            return Ok(0);
        };
        let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        let (mut after, mut updated) = (None::<RawKey>, 0);
        loop {
            let page = KeyPage::Parent {
                spec,
                cache,
                after: after.as_ref().map(RawKey::as_value),
                limit,
            };
            let keys = C::Backend::load_keys(conn, page).map_err(|e| database_error(spec, e))?;
            let Some(last) = keys.last().cloned() else {
                return Ok(updated);
            };
            let keys: Vec<Self::Key> = keys
                .into_iter()
                .map(|k| Self::Key::from_raw(k).ok_or_else(|| unexpected_key(spec)))
                .collect::<Result<_>>()?;
            updated += self.refresh_cache(&keys, conn)?;
            after = Some(last);
        }
    }

    /// Retention: deletes every bucket that began before `cutoff`'s bucket, in pages of `batch`
    /// records (at most [`MAX_PAGE`]) in key order, one `DELETE` each: the rows of the other
    /// records and of newer buckets stay unlocked while it runs. Returns the rows deleted. The
    /// deleted counts are gone from every total.
    fn delete_buckets_before<C: CounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> Result<u64>
    where
        Self: BucketedCounterTable,
    {
        let spec = &Self::SPEC;
        let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
        let old = Buckets::Before(before);
        for_each_page(conn, spec, batch, old, |conn, keys| {
            let scope = Scope {
                spec,
                keys,
                buckets: old,
            };
            let deleted = retry_transaction(conn, &MAINTENANCE_RETRY, lost_a_deadlock, |conn| {
                DeleteScope(scope)
                    .execute(conn)
                    .map_err(|e| database_error(spec, e))
            })?;
            Ok(deleted.value as u64)
        })
    }

    /// Retention that keeps all-time totals exact: folds every bucket that began before
    /// `cutoff`'s bucket into the bucket at Unix time 0 (1970-01-01), one row per record, in
    /// pages of `batch` records (at most [`MAX_PAGE`]), one transaction each. Per-bucket detail
    /// before the cutoff is gone; `total` is unchanged.
    fn fold_buckets_before<C: CounterConnection>(
        self,
        cutoff: SystemTime,
        batch: usize,
        conn: &mut C,
    ) -> Result<CompactionReport>
    where
        Self: BucketedCounterTable,
    {
        let spec = &Self::SPEC;
        let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
        let old = Buckets::Range(1, before);
        for_each_page(conn, spec, batch, old, |conn, keys| {
            fold(
                conn,
                spec,
                keys,
                Buckets::Before(before),
                Fold::IntoBucket(0),
            )
        })
    }

    /// Creates the slot rows (count 0) of these records that do not exist yet. Returns how many
    /// it created.
    fn create_slots<C: CounterConnection>(self, keys: &[Self::Key], conn: &mut C) -> Result<u64>
    where
        Self: PrefilledCounterTable,
    {
        let spec = &Self::SPEC;
        let keys = sorted_keys::<C::Backend, _>(spec, keys)?;
        let rows: Vec<(KeyValue<'_>, i64, i16, i64)> = keys
            .iter()
            .flat_map(|&k| (0..spec.slots as i16).map(move |slot| (k, 0, slot, 0)))
            .collect();
        let mut created = 0;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let inserted = InsertRows {
                spec,
                rows: chunk,
                on_conflict: OnConflict::Skip,
            }
            .execute(conn)
            .map_err(|e| database_error(spec, e))?;
            created += inserted as u64;
        }
        Ok(created)
    }
}

impl<T: CounterTable> CounterMaintenance for T {}

/// The most records one page of `compact_all`, `fold_buckets_before` or
/// `delete_buckets_before` takes: its keys are bound in one statement, and this stays under every
/// backend's bind limit (SQLite's 32,766 is the lowest).
pub const MAX_PAGE: usize = crate::counter::TOTALS_CHUNK;

/// Calls `on_page` on pages of `batch` (at most [`MAX_PAGE`]) record keys that have rows in
/// `buckets` needing a fold, in key order, until none is left, and adds up what it returns.
fn for_each_page<C: CounterConnection, R: Default + std::ops::AddAssign>(
    conn: &mut C,
    spec: &CounterSpec,
    batch: usize,
    buckets: Buckets,
    mut on_page: impl FnMut(&mut C, &[KeyValue<'_>]) -> Result<R>,
) -> Result<R> {
    let limit = i64::try_from(batch.clamp(1, MAX_PAGE)).unwrap_or(1);
    let mut after: Option<RawKey> = None;
    let mut total = R::default();
    loop {
        let scope = Scope {
            spec,
            keys: &[],
            buckets,
        };
        let page = KeyPage::Compactable {
            scope,
            after: after.as_ref().map(RawKey::as_value),
            limit,
            all: buckets != Buckets::All,
        };
        let mut keys = C::Backend::load_keys(conn, page).map_err(|e| database_error(spec, e))?;
        keys.dedup();
        let Some(last) = keys.last().cloned() else {
            return Ok(total);
        };
        let values: Vec<KeyValue<'_>> = keys.iter().map(RawKey::as_value).collect();
        total += on_page(conn, &values)?;
        after = Some(last);
    }
}
