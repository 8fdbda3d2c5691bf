//! Keeping counter tables small and caches fresh: compaction, set and reset, cache roll-ups,
//! bucket retention, pre-created slots.
//!
//! Every fold (compaction, set, retention) runs in one transaction per batch and is exact under
//! concurrent writers: it sums exactly the rows it deletes, at their latest committed values,
//! and puts the sum back into a slot row it holds locked.
//! - PostgreSQL: `SELECT … ORDER BY record_id, slot FOR UPDATE` locks the rows in key order
//!   (two maintenance jobs cannot deadlock), then `DELETE … RETURNING` deletes and returns them,
//!   including any row a writer inserted in between.
//! - MySQL/MariaDB: the same locking `SELECT`, then a `DELETE` of exactly those `(key, slot)`
//!   rows, so a row inserted by a writer meanwhile stays, uncounted and undeleted.
//! - SQLite: `DELETE … RETURNING`; SQLite lets one writer in at a time.
//!
//! A writer blocked on a locked slot goes on after the commit and adds to the folded row or to
//! a new one; either way its delta counts once.

use std::collections::BTreeMap;
use std::time::SystemTime;

use diesel::RunQueryDsl;

use crate::backend::{
    AddToSlot, Buckets, CounterBackend, CounterConnection, DeleteRows, DeleteScope, Dialect,
    InsertRows, KeyPage, RefreshCache, RowsQuery, Scope, SlotRow,
};
use crate::counter::{check_key, database_error, unexpected_key, Counter};
use crate::error::{Error, Result};
use crate::key::{CounterKey, KeyValue, RawKey};
use crate::table::{
    BucketedCounterTable, CachedCounterTable, CounterSpec, CounterTable, PrefilledCounterTable,
};

/// Records per transaction when compacting or refreshing many records.
pub const MAINTENANCE_BATCH: usize = 1000;

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
}

impl std::ops::AddAssign for CompactionReport {
    fn add_assign(&mut self, other: Self) {
        self.records += other.records;
        self.rows_before += other.rows_before;
        self.rows_after += other.rows_after;
        self.batches += other.batches;
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

/// Deletes every row in `scope` and returns them as they were when deleted, per dialect as the
/// module documentation says. Must run inside a transaction.
fn delete_rows<C: CounterConnection>(
    conn: &mut C,
    scope: Scope<'_>,
) -> diesel::QueryResult<Vec<SlotRow>> {
    match C::Backend::DIALECT {
        Dialect::Postgres => {
            C::Backend::load_rows(conn, RowsQuery::Lock(scope))?;
            C::Backend::load_rows(conn, RowsQuery::DeleteReturning(scope))
        }
        Dialect::Sqlite => C::Backend::load_rows(conn, RowsQuery::DeleteReturning(scope)),
        Dialect::Mysql => {
            let rows = C::Backend::load_rows(conn, RowsQuery::Lock(scope))?;
            let ids: Vec<(KeyValue<'_>, i64, i16)> = rows
                .iter()
                .map(|r| (r.key.as_value(), r.bucket, r.slot))
                .collect();
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                DeleteRows {
                    spec: scope.spec,
                    rows: chunk,
                }
                .execute(conn)?;
            }
            Ok(rows)
        }
    }
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
    conn.transaction(|conn| {
        let rows = delete_rows(
            conn,
            Scope {
                spec,
                keys,
                buckets,
            },
        )
        .map_err(|e| database_error(spec, e))?;
        // Per (record, bucket): the smallest slot deleted (locked by us until commit, so the
        // plain INSERT below cannot meet a writer's row) and the exact sum.
        let mut groups: BTreeMap<(&RawKey, i64), (i16, i128)> = BTreeMap::new();
        for row in &rows {
            let bucket = match how {
                Fold::Compact => row.bucket,
                Fold::IntoBucket(bucket) => bucket,
            };
            let group = groups.entry((&row.key, bucket)).or_insert((row.slot, 0));
            group.0 = group.0.min(row.slot);
            group.1 += i128::from(row.count);
        }
        let mut folded = Vec::with_capacity(groups.len());
        for ((key, bucket), (slot, sum)) in groups {
            let sum = i64::try_from(sum).map_err(|_| Error::TotalOutOfRange {
                counter: spec.qualified_name(),
                table: spec.table,
                key: format!("{key:?}"),
                total: format!("{sum} (its slots cannot be folded into one; nothing was changed)"),
            })?;
            if sum != 0 {
                folded.push((key.as_value(), bucket, slot, sum));
            }
        }
        match how {
            Fold::Compact => {
                for chunk in folded.chunks(ROWS_PER_STATEMENT) {
                    InsertRows {
                        spec,
                        rows: chunk,
                        if_absent: false,
                    }
                    .execute(conn)
                    .map_err(|e| database_error(spec, e))?;
                }
            }
            // The target bucket's row may not be one we locked: add to it instead.
            Fold::IntoBucket(_) => {
                for &(key, bucket, slot, delta) in &folded {
                    add_exactly(
                        conn,
                        AddToSlot {
                            spec,
                            key,
                            bucket,
                            slot,
                            delta,
                            cache: std::marker::PhantomData,
                        },
                    )?;
                }
            }
        }
        Ok(CompactionReport {
            records: keys.len() as u64,
            rows_before: rows.len() as u64,
            rows_after: folded.len() as u64,
            batches: 1,
        })
    })
}

/// Runs an upsert whose overflow must be an error (maintenance re-adding a sum).
fn add_exactly<C: CounterConnection>(conn: &mut C, statement: AddToSlot<'_>) -> Result<()> {
    let spec = statement.spec;
    match statement.execute(conn) {
        Ok(0) => Err(Error::Overflow {
            counter: spec.qualified_name(),
            table: spec.table,
            key: format!("{:?}", statement.key),
            delta: statement.delta,
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(database_error(spec, e)),
    }
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
    /// could otherwise insert a new slot unseen); then it deletes the record's rows and puts
    /// `value` into one slot it holds.
    pub fn set<C: CounterConnection>(&self, value: i64, conn: &mut C) -> Result<()> {
        let spec = &T::SPEC;
        let key = self.checked_key::<C::Backend>()?;
        let bucket = spec.bucket.map_or(0, |width| width.start_of(self.now()));
        let all_slots: Vec<(KeyValue<'_>, i64, i16, i64)> = (0..spec.slots as i16)
            .map(|slot| (key, bucket, slot, 0))
            .collect();
        conn.transaction(|conn| {
            for chunk in all_slots.chunks(ROWS_PER_STATEMENT) {
                InsertRows {
                    spec,
                    rows: chunk,
                    if_absent: true,
                }
                .execute(conn)
                .map_err(|e| database_error(spec, e))?;
            }
            delete_rows(conn, Scope::new(spec, &[key])).map_err(|e| database_error(spec, e))?;
            if value != 0 {
                let row = [(key, bucket, 0, value)];
                InsertRows {
                    spec,
                    rows: &row,
                    if_absent: false,
                }
                .execute(conn)
                .map_err(|e| database_error(spec, e))?;
            }
            Ok(())
        })
    }

    /// Sets the count to 0: [`Counter::set`]`(0, conn)`, which leaves the record no rows.
    pub fn reset<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.set(0, conn)
    }
}

/// Roll-up into the model's cache column (counters declared with `cache = column`).
impl<T: CachedCounterTable> Counter<'_, T> {
    /// Copies this record's total into its cache column: one short `UPDATE` of the model's row.
    pub fn refresh_cache<C: CounterConnection>(&self, conn: &mut C) -> Result<u64> {
        CounterMaintenance::refresh_cache(T::default(), std::slice::from_ref(self.key()), conn)
    }
}

/// Pre-created slots (counters declared with `prefill`).
impl<T: PrefilledCounterTable> Counter<'_, T> {
    /// Creates this record's slot rows (count 0) that do not exist yet, so increments are plain
    /// `UPDATE`s. Returns how many it created.
    pub fn create_slots<C: CounterConnection>(&self, conn: &mut C) -> Result<u64> {
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
    /// pages of `batch` records in key order, one transaction each.
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

    /// Retention: deletes every bucket that began before `cutoff`'s bucket. Returns the rows
    /// deleted. The deleted counts are gone from every total.
    fn delete_buckets_before<C: CounterConnection>(
        self,
        cutoff: SystemTime,
        conn: &mut C,
    ) -> Result<u64>
    where
        Self: BucketedCounterTable,
    {
        let spec = &Self::SPEC;
        let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
        let scope = Scope {
            spec,
            keys: &[],
            buckets: Buckets::Before(before),
        };
        Ok(DeleteScope(scope)
            .execute(conn)
            .map_err(|e| database_error(spec, e))? as u64)
    }

    /// Retention that keeps all-time totals exact: folds every bucket that began before
    /// `cutoff`'s bucket into the bucket at Unix time 0 (1970-01-01), one row per record, in
    /// pages of `batch` records. Per-bucket detail before the cutoff is gone; `total` is
    /// unchanged.
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
                if_absent: true,
            }
            .execute(conn)
            .map_err(|e| database_error(spec, e))?;
            created += inserted as u64;
        }
        Ok(created)
    }
}

impl<T: CounterTable> CounterMaintenance for T {}

/// Calls `fold_page` on pages of `batch` record keys that have rows in `buckets` needing a
/// fold, in key order, until none is left.
fn for_each_page<C: CounterConnection>(
    conn: &mut C,
    spec: &CounterSpec,
    batch: usize,
    buckets: Buckets,
    mut fold_page: impl FnMut(&mut C, &[KeyValue<'_>]) -> Result<CompactionReport>,
) -> Result<CompactionReport> {
    let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    let mut after: Option<RawKey> = None;
    let mut report = CompactionReport::default();
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
            return Ok(report);
        };
        let values: Vec<KeyValue<'_>> = keys.iter().map(RawKey::as_value).collect();
        report += fold_page(conn, &values)?;
        after = Some(last);
    }
}
