//! The jobs behind maintenance, written once over [`Exec`]: folding records into fewer rows,
//! setting a count, paging through records, rolling totals up, creating slots.
//!
//! Every fold (compaction, set, retention) runs in one transaction per batch and is exact under
//! concurrent writers: it sums exactly the rows it deletes, at their latest committed values,
//! and puts the sum back into a slot row it holds locked.
//! - PostgreSQL, MySQL/MariaDB: `SELECT … ORDER BY record_id, slot FOR UPDATE` locks the rows in
//!   key order and reads their latest values. Then, for each record, one of those rows is
//!   updated to the sum and a `DELETE` removes exactly the others. A row a writer inserts in
//!   between stays, counted once. Nothing is locked out of key order and nothing is inserted
//!   once the rows are locked, so two maintenance jobs cannot deadlock each other on
//!   PostgreSQL. Compaction adds `SKIP LOCKED`: a row a writer's open transaction holds is
//!   simply not folded this time (it is neither read nor deleted, so it still counts once),
//!   and compaction never waits behind a writer's transaction nor makes the writers queued
//!   behind it wait. `set` and folds into another bucket must hold every row, and wait.
//!   PostgreSQL's compaction runs the whole batch as one statement on the server
//!   (`CompactInPlace`), which moves no row to another key; the other folds, and MySQL's, read
//!   the rows into the client and write the result back (`take_rows`, `put_back`).
//! - SQLite: `DELETE … RETURNING`, then the sums inserted; SQLite lets one writer in at a time.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{CompactionReport, RecordFailure, MAINTENANCE_RETRY};
use crate::count::{check_key, database_error, parse_total, sums, total_out_of_range};
use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::exec::{load_keyed, Exec};
use crate::key::{CounterKey, KeyValue, RawKey};
use crate::retry::lost_a_deadlock;
use crate::retry::retried_transaction;
use crate::sql::adopt::ColumnValue;
use crate::sql::compact::{CompactInPlace, CompactedBatch};
use crate::sql::maintenance::{
    DeleteRows, DeleteScope, InsertRows, OnConflict, RefreshCache, RowCount, RowId, Rows,
    RowsQuery, UpdateRows, CASE_KEYS,
};
use crate::sql::read::{KeyPage, Keys};
use crate::sql::refresh::{key_named, RefreshFromSlots, RefreshedBatch, RollUpLock};
use crate::sql::{Buckets, Scope, SlotRow, SlotValue, SETTLED_SLOT};
use crate::table::{CacheSpec, CounterSpec};

/// Rows per multi-row `INSERT`, `DELETE` or `UPDATE`: at most 6 binds a row, under every bind
/// limit.
pub(crate) const ROWS_PER_STATEMENT: usize = 4096;

/// What a fold writes back.
#[derive(Clone, Copy)]
pub(crate) enum Fold {
    /// Each (record, bucket)'s sum, into one of its own slots.
    Compact,
    /// The records' buckets all into this bucket.
    IntoBucket(i64),
}

/// Runs one batch's `$attempt` in a transaction of its own (a savepoint inside the caller's),
/// once (the caller paces reruns), its error naming the counter of `$spec`: every maintenance
/// batch job. On PostgreSQL a transaction of its own runs without JIT ([`JitOff`] says why).
///
/// [`JitOff`]: crate::sql::transaction::JitOff
macro_rules! one_batch {
    ($exec:ident, $spec:expr, $attempt:expr) => {{
        let jit_off = $crate::maintenance::fold::runs_jit_off(&mut *$exec);
        $crate::retry::retried_transaction!(
            $crate::exec::Guard::Marked,
            $exec,
            $crate::maintenance::ONCE,
            $crate::retry::lost_a_deadlock,
            async {
                if jit_off {
                    $exec
                        .execute($crate::sql::transaction::JitOff)
                        .await
                        .map_err($crate::error::Error::from)?;
                }
                $attempt.await
            }
        )
        .map(|done| done.value)
        .map_err(|e| $crate::maintenance::fold::in_context($spec, e))
    }};
}
pub(crate) use one_batch;

/// Whether a batch's transaction turns JIT off: on PostgreSQL, when it is a transaction of its
/// own (outside one, a savepoint would carry the setting into the caller's transaction).
pub(crate) fn runs_jit_off<E: Exec>(exec: &mut E) -> bool {
    E::Backend::DIALECT == Dialect::Postgres && !exec.in_transaction()
}

/// A maintenance transaction's own error, `BEGIN` and `COMMIT` included, naming the counter.
pub(crate) fn in_context(spec: &CounterSpec, error: Error) -> Error {
    match error {
        Error::Diesel(source) => database_error(spec, source),
        other => other,
    }
}

/// Takes every row in `scope` to rewrite it (with `skip_locked`, every row no other transaction
/// holds), and returns the rows at their latest values. On PostgreSQL and MySQL they are
/// locked, in key order, and still there; on SQLite they are deleted already. Must run inside a
/// transaction; [`put_back`] then leaves what remains.
pub(crate) async fn take_rows<E: Exec>(
    exec: &mut E,
    scope: Scope<'_>,
    skip_locked: bool,
) -> Result<Vec<SlotRow>> {
    let query = match E::Backend::DIALECT {
        Dialect::Sqlite => RowsQuery::DeleteReturning(scope),
        Dialect::Postgres | Dialect::Mysql => RowsQuery::Lock { scope, skip_locked },
    };
    load_keyed(exec, Rows(query), scope.spec.key_column_kinds())
        .await
        .map_err(|e| database_error(scope.spec, e))
}

/// After [`take_rows`]: leaves exactly `result` in place of the `taken` rows. On PostgreSQL and
/// MySQL a result row that was taken (locked) is updated in place and the other taken rows are
/// deleted, so nothing is inserted over a locked range but the result rows that did not exist
/// (folding old buckets into one that had no row); on SQLite, where the taken rows are gone
/// already, the result rows are inserted.
pub(crate) async fn put_back<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    taken: &[RowId<'_>],
    result: &[RowCount<'_>],
) -> Result<()> {
    let fail = |e| database_error(spec, e);
    let mut inserts: Vec<RowCount<'_>> = Vec::new();
    if E::Backend::DIALECT == Dialect::Sqlite {
        inserts.extend_from_slice(result);
    } else {
        let taken_ids: HashSet<&RowId<'_>> = taken.iter().collect();
        let (updates, new): (Vec<_>, Vec<_>) = result
            .iter()
            .copied()
            .partition(|(key, bucket, slot, _)| taken_ids.contains(&(*key, *bucket, *slot)));
        let kept: HashSet<RowId<'_>> = updates.iter().map(|&(k, b, s, _)| (k, b, s)).collect();
        let deletes: Vec<RowId<'_>> = taken
            .iter()
            .filter(|id| !kept.contains(id))
            .copied()
            .collect();
        for chunk in deletes.chunks(ROWS_PER_STATEMENT) {
            let deleted = exec
                .execute(DeleteRows::new(spec, chunk))
                .await
                .map_err(fail)?;
            // This transaction holds every row it deletes, so each one is there: a statement
            // that missed one would leave a count that the fold also adds to the row it keeps.
            // Failing rolls the batch back, and nothing is counted twice.
            if deleted != chunk.len() {
                return Err(fail(diesel::result::Error::QueryBuilderError(
                    format!(
                        "slotted: a fold deleted {deleted} of the {} slot rows it holds; \
                         its batch was rolled back",
                        chunk.len()
                    )
                    .into(),
                )));
            }
        }
        for chunk in updates.chunks(ROWS_PER_STATEMENT) {
            exec.execute(UpdateRows { spec, rows: chunk })
                .await
                .map_err(fail)?;
        }
        inserts = new;
    }
    for chunk in inserts.chunks(ROWS_PER_STATEMENT) {
        let insert = InsertRows {
            spec,
            rows: chunk,
            on_conflict: OnConflict::Fail,
        };
        exec.execute(insert)
            .await
            .map_err(|e| fail(settled_first(e)))?;
    }
    Ok(())
}

/// A fold whose new row (a row into a bucket it took nothing from, or on SQLite a settled
/// row) met the same row made by a concurrent transaction that committed first: the batch is
/// rolled back and run again, as a deadlock's loser is, and its next run takes that row too.
fn settled_first(e: diesel::result::Error) -> diesel::result::Error {
    use diesel::result::{DatabaseErrorKind, Error as DieselError};
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            DieselError::DatabaseError(
                DatabaseErrorKind::SerializationFailure,
                Box::new(format!(
                    "{} (a concurrent compaction settled the record first: run again)",
                    info.message()
                )),
            )
        }
        other => other,
    }
}

pub(crate) fn id_of(row: &SlotRow) -> RowId<'_> {
    (row.key.as_value(), row.bucket, SlotValue::Bound(row.slot))
}

/// Folds the rows of `keys` in one transaction (a savepoint inside the caller's), once: the
/// caller paces reruns (`pace`). A record whose rows cannot be folded (their sum leaves `i64`)
/// is left as it is and reported in [`CompactionReport::failed`]; the others are folded.
pub(crate) async fn fold<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    keys: &[KeyValue<'_>],
    buckets: Buckets,
    how: Fold,
) -> Result<CompactionReport> {
    if keys.is_empty() {
        return Ok(CompactionReport::default());
    }
    let scope = Scope {
        spec,
        keys,
        buckets,
    };
    if E::Backend::DIALECT == Dialect::Mysql && matches!(how, Fold::Compact) {
        settled_rows_first(exec, scope).await?;
    }
    one_batch!(exec, spec, fold_once(exec, scope, how))
}

/// MySQL: creates the settled row (count 0) of every (record, bucket) of `scope` that has
/// unsettled rows and none, before the fold locks anything, so that the fold only updates
/// and deletes rows it holds. An insert by the fold itself, into the gap before a record's
/// rows that it holds locked, deadlocked writers queued on those rows (InnoDB queues their
/// next-key locks on that gap, and the insert waits behind them). Read without locks and
/// inserted with `INSERT IGNORE` (one statement, its own transaction unless the caller's is
/// open): it waits for no lock this job holds, and a row a concurrent compaction made first is
/// left alone. A zero row the fold then does not reach (a writer held the record's rows) adds
/// nothing to the total, and the next compaction folds it.
async fn settled_rows_first<E: Exec>(exec: &mut E, scope: Scope<'_>) -> Result<()> {
    let spec = scope.spec;
    let fail = |e| database_error(spec, e);
    let rows: Vec<SlotRow> =
        load_keyed(exec, Rows(RowsQuery::Read(scope)), spec.key_column_kinds())
            .await
            .map_err(fail)?;
    let mut groups: BTreeMap<(&RawKey, i64), bool> = BTreeMap::new();
    for row in &rows {
        *groups.entry((&row.key, row.bucket)).or_default() |= row.slot == SETTLED_SLOT;
    }
    let missing: Vec<RowCount<'_>> = groups
        .into_iter()
        .filter(|(_, settled)| !settled)
        .map(|((key, bucket), _)| (key.as_value(), bucket, SlotValue::Bound(SETTLED_SLOT), 0))
        .collect();
    for chunk in missing.chunks(ROWS_PER_STATEMENT) {
        let insert = InsertRows {
            spec,
            rows: chunk,
            on_conflict: OnConflict::Skip,
        };
        exec.execute(insert).await.map_err(fail)?;
    }
    Ok(())
}

/// Deletes the rows of `keys` in `buckets` (retention) in one transaction, once; returns how
/// many it deleted.
pub(crate) async fn delete<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    keys: &[KeyValue<'_>],
    buckets: Buckets,
) -> Result<u64> {
    let scope = Scope {
        spec,
        keys,
        buckets,
    };
    let deleted = one_batch!(exec, spec, async {
        exec.execute(DeleteScope(scope))
            .await
            .map_err(|e| database_error(spec, e))
    })?;
    Ok(deleted as u64)
}

async fn fold_once<E: Exec>(exec: &mut E, scope: Scope<'_>, how: Fold) -> Result<CompactionReport> {
    let spec = scope.spec;
    if E::Backend::DIALECT == Dialect::Postgres && matches!(how, Fold::Compact) {
        return compact_in_place(exec, scope).await;
    }
    let skip_locked = matches!(how, Fold::Compact);
    let rows = take_rows(exec, scope, skip_locked).await?;
    // Per (record, target bucket): the exact sum, and the slot it goes into: the smallest of
    // the rows taken in the target bucket (one we hold), else the smallest taken.
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
    let mut poisoned: BTreeMap<&RawKey, i128> = BTreeMap::new();
    let mut folded = Vec::with_capacity(groups.len());
    for ((key, bucket), group) in groups {
        match i64::try_from(group.sum) {
            Ok(0) => {}
            Ok(sum) => {
                let slot = match how {
                    // Into the settled slot, which no writer writes: on MySQL only the row
                    // `settled_rows_first` made and this fold holds (no insert while rows are
                    // locked); when it has none, the record's lowest row it holds, left
                    // unsettled for the next compaction.
                    Fold::Compact
                        if E::Backend::DIALECT != Dialect::Mysql
                            || group.in_target == Some(SETTLED_SLOT) =>
                    {
                        SETTLED_SLOT
                    }
                    Fold::Compact | Fold::IntoBucket(_) => group.in_target.unwrap_or(group.any),
                };
                folded.push((key.as_value(), bucket, SlotValue::Bound(slot), sum));
            }
            Err(_) => {
                poisoned.insert(key, group.sum);
            }
        }
    }
    let mut failed = Vec::with_capacity(poisoned.len());
    for (key, sum) in &poisoned {
        failed.push(RecordFailure {
            key: format!("{key:?}"),
            reason: format!(
                "its slots add up to {sum}, outside i64: they cannot be folded into one row, \
                 and were left as they are"
            ),
        });
    }
    let (mut taken, mut result) = (Vec::with_capacity(rows.len()), Vec::new());
    for row in &rows {
        let made_by_compaction = row.slot == SETTLED_SLOT && row.count == 0;
        if !poisoned.contains_key(&row.key) {
            taken.push(id_of(row));
        } else if made_by_compaction {
            // A record left as it was keeps only its own rows: the zero row that
            // `settled_rows_first` made for it goes (deleted; on SQLite not put back).
            if E::Backend::DIALECT != Dialect::Sqlite {
                taken.push(id_of(row));
            }
        } else if E::Backend::DIALECT == Dialect::Sqlite {
            // Deleted by the read already: put them back as they were.
            let (key, bucket, slot) = id_of(row);
            result.push((key, bucket, slot, row.count));
        }
    }
    folded.retain(|(key, ..)| !poisoned.keys().any(|p| p.as_value() == *key));
    result.extend_from_slice(&folded);
    put_back(exec, spec, &taken, &result).await?;
    // The rows taken, but for the settled rows holding 0: only compaction makes those (MySQL's
    // `settled_rows_first`, for this fold or for one a writer's lock held back), and they were
    // no row of the record's before it.
    let own_rows = || {
        rows.iter()
            .filter(|r| !poisoned.contains_key(&r.key))
            .filter(|r| !(r.slot == SETTLED_SLOT && r.count == 0))
    };
    Ok(CompactionReport {
        // Records with rows taken: with `SKIP LOCKED` a record whose rows writers all hold
        // is not folded, and not counted.
        records: own_rows().map(|r| &r.key).collect::<BTreeSet<_>>().len() as u64,
        rows_before: own_rows().count() as u64,
        rows_after: folded.len() as u64,
        batches: 1,
        retries: 0,
        failed,
        skipped: Vec::new(),
    })
}

/// PostgreSQL's compaction of a batch: the same fold as `fold_once`'s, in one statement on the
/// server ([`CompactInPlace`]), with no row sent to the client and back. A record with a group
/// whose sum leaves `i64` is left as it is, as `fold_once` leaves it, and named by the same
/// statement (the sum of the rows it locked, as `fold_once` reports it).
async fn compact_in_place<E: Exec>(exec: &mut E, scope: Scope<'_>) -> Result<CompactionReport> {
    let spec = scope.spec;
    let fail = |e| database_error(spec, e);
    let rows: Vec<CompactedBatch> = exec.load(CompactInPlace::new(scope)).await.map_err(fail)?;
    // At least one row (the summary's `LEFT JOIN`); the figures are the same in every row.
    let first = rows
        .first()
        .ok_or_else(|| fail(diesel::result::Error::NotFound))?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let (records, rows_before, rows_after) = (
        count(first.records),
        count(first.rows_before),
        count(first.rows_after),
    );
    let mut failed = Vec::new();
    for (mut key, sum) in rows.into_iter().filter_map(|row| row.poisoned) {
        key.conform(spec.key_column_kinds());
        failed.push(RecordFailure {
            key: format!("{key:?}"),
            reason: format!(
                "its slots add up to {sum}, outside i64: they cannot be folded into one row, \
                 and were left as they are"
            ),
        });
    }
    Ok(CompactionReport {
        records,
        rows_before,
        rows_after,
        batches: 1,
        retries: 0,
        failed,
        skipped: Vec::new(),
    })
}

/// PostgreSQL's roll-up of a batch: the same as `refresh_once`'s, in one statement on the
/// server ([`RefreshFromSlots`]), with no total sent to the client and back. A key whose total
/// the column cannot hold is left as it is and reported, as `refresh_once` reports it.
async fn refresh_in_place<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    cache: &CacheSpec,
    batch: &[KeyValue<'_>],
    report: &mut super::RefreshReport,
) -> Result<()> {
    let statement = RefreshFromSlots::new(Scope::new(spec, batch), cache);
    let rows: Vec<RefreshedBatch> = exec
        .load(statement)
        .await
        .map_err(|e| database_error(spec, e))?;
    for row in &rows {
        let Some((raw, total)) = &row.out_of_range else {
            continue;
        };
        let mut raw = raw.clone();
        raw.conform(spec.key_column_kinds());
        // Named as `refresh_once` names it: the batch's key.
        let key: &dyn std::fmt::Debug = match key_named(batch, &raw) {
            Some(key) => key,
            None => &raw,
        };
        report
            .failed
            .push(match parse_total(spec, key, Some(total.clone())) {
                Ok(total) => does_not_fit(cache, key, total),
                Err(e) => RecordFailure {
                    key: format!("{key:?}"),
                    reason: e.to_string(),
                },
            });
    }
    // At least one row (the `LEFT JOIN`); the count is the same in every row.
    let first = rows
        .first()
        .ok_or_else(|| database_error(spec, diesel::result::Error::NotFound))?;
    report.updated += u64::try_from(first.updated).unwrap_or(0);
    Ok(())
}

/// The report's line for a total the cache column is too narrow for (an `Integer` column past
/// `i32`): the column is left as it is.
fn does_not_fit(cache: &CacheSpec, key: &dyn std::fmt::Debug, total: i64) -> RecordFailure {
    RecordFailure {
        key: format!("{key:?}"),
        reason: format!(
            "its total, {total}, does not fit the {}-bit column `{}.{}`: the column was left as \
             it is",
            cache.bits, cache.table, cache.column
        ),
    }
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
pub(crate) fn sorted_keys<'k, DB: CounterBackend, K: CounterKey>(
    spec: &CounterSpec,
    keys: &'k [K],
) -> Result<Vec<KeyValue<'k>>> {
    let checked: BTreeSet<KeyValue<'k>> = keys
        .iter()
        .map(|k| check_key::<DB, K>(spec, k))
        .collect::<Result<_>>()?;
    Ok(checked.into_iter().collect())
}

/// Sets `key`'s count to `value` in one transaction, rerun when it loses a deadlock (see
/// `Counter::set`).
pub(crate) async fn set<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    key: KeyValue<'_>,
    bucket: i64,
    value: i64,
) -> Result<()> {
    retried_transaction!(
        crate::exec::Guard::Marked,
        exec,
        MAINTENANCE_RETRY,
        lost_a_deadlock,
        set_once(exec, spec, key, bucket, value)
    )
    .map(|_| ())
    .map_err(|e| in_context(spec, e))
}

async fn set_once<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    key: KeyValue<'_>,
    bucket: i64,
    value: i64,
) -> Result<()> {
    let keys = [key];
    let scope = Scope::new(spec, &keys);
    // An adopted column's part goes: the value is all in the slots. Its row is locked first,
    // as absorb locks it, and an old-style `UPDATE` of the column that commits after this one
    // adds to 0, after the set.
    if let Some(column) = &spec.adopt {
        exec.execute(crate::sql::adopt::ZeroBase { column, key: &key })
            .await
            .map_err(|e| database_error(spec, e))?;
    }
    let mut taken: Vec<SlotRow> = Vec::new();
    // Hold every slot row a writer of this bucket could write to. A row missing now is created
    // (and so held); a row a concurrent fold deletes between our insert and our lock is not
    // seen by the lock, and its writer could then insert it anew, unordered with this set: so
    // check that every slot is held, and create and lock again until it is. Locks only grow,
    // so this ends; a fold holding rows makes us wait, then its deletions show here. Should
    // the slots still not all be held after one round per slot, this attempt fails as a
    // serialization failure: it rolls back and the whole `set` runs again, and it never writes
    // the value beside a row it does not hold.
    let mut round = 0;
    loop {
        let held: BTreeSet<i16> = taken
            .iter()
            .filter(|r| r.bucket == bucket)
            .map(|r| r.slot)
            .collect();
        let missing: Vec<RowCount<'_>> = (0..spec.slots as i16)
            .filter(|slot| !held.contains(slot))
            .map(|slot| (key, bucket, SlotValue::Bound(slot), 0))
            .collect();
        if missing.is_empty() {
            break;
        }
        if round > spec.slots {
            return Err(database_error(
                spec,
                diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::SerializationFailure,
                    Box::new(format!(
                        "set: {} of {} slot rows still not held after {round} rounds",
                        missing.len(),
                        spec.slots
                    )),
                ),
            ));
        }
        round += 1;
        for chunk in missing.chunks(ROWS_PER_STATEMENT) {
            let insert = InsertRows {
                spec,
                rows: chunk,
                on_conflict: OnConflict::Lock,
            };
            exec.execute(insert)
                .await
                .map_err(|e| database_error(spec, e))?;
        }
        let more = take_rows(exec, scope, false).await?;
        if E::Backend::DIALECT == Dialect::Sqlite {
            // Deleted by the read, under SQLite's one writer: nothing can come between.
            taken.extend(more);
            break;
        }
        taken = more;
    }
    let ids: Vec<RowId<'_>> = taken.iter().map(id_of).collect();
    let value_row = [(key, bucket, SlotValue::Bound(0), value)];
    put_back(exec, spec, &ids, if value == 0 { &[] } else { &value_row }).await
}

/// Runs `$on_page` (a `Result<()>` using `$page: Vec<KeyValue>` and adding what it did into
/// `$report: &mut P`, a `pace::Committing`) on pages of `$batch` (at most `MAX_PAGE`) record
/// keys that have rows in `$buckets` needing a fold, in key order, until none is left; with
/// `unsettled` instead of buckets, on the records with rows outside the settled slot (written
/// since their last compaction), found through the index of unsettled rows. Evaluates to
/// `Result<P>`; an error after work was committed says what (`pace::stopped`).
macro_rules! for_each_page {
    ($exec:ident, $spec:expr, $batch:expr, unsettled, |$page:ident, $report:ident| $on_page:expr) => {
        $crate::maintenance::fold::for_each_page!(@pages $exec, $spec, $batch, $crate::sql::Buckets::All, true, |$page, $report| $on_page)
    };
    ($exec:ident, $spec:expr, $batch:expr, $buckets:expr, |$page:ident, $report:ident| $on_page:expr) => {
        $crate::maintenance::fold::for_each_page!(@pages $exec, $spec, $batch, $buckets, false, |$page, $report| $on_page)
    };
    (@pages $exec:ident, $spec:expr, $batch:expr, $buckets:expr, $unsettled:expr, |$page:ident, $report:ident| $on_page:expr) => {{
        let spec: &$crate::table::CounterSpec = $spec;
        let limit = i64::try_from($batch.clamp(1, $crate::maintenance::MAX_PAGE)).unwrap_or(1);
        let mut after: Option<$crate::key::RawKey> = None;
        let mut total = Default::default();
        loop {
            let scope = $crate::sql::Scope {
                spec,
                keys: &[],
                buckets: $buckets,
            };
            let page = $crate::sql::read::KeyPage::Compactable {
                scope,
                after: after.as_ref().map($crate::key::RawKey::as_value),
                limit,
                all: $buckets != $crate::sql::Buckets::All,
                unsettled: $unsettled,
            };
            let mut keys = match $crate::maintenance::fold::key_page($exec, page).await {
                Ok(keys) => keys,
                Err(e) => break Err($crate::maintenance::pace::stopped(&mut *$exec, total, e)),
            };
            // A page shorter than its limit is the last: no query for an empty one.
            let last_page = (keys.len() as i64) < limit;
            keys.dedup();
            let Some(last) = keys.last().cloned() else {
                break Ok(total);
            };
            let $page: Vec<$crate::key::KeyValue<'_>> =
                keys.iter().map($crate::key::RawKey::as_value).collect();
            let $report = &mut total;
            if let Err(e) = $on_page {
                break Err($crate::maintenance::pace::stopped(&mut *$exec, total, e));
            }
            if last_page {
                break Ok(total);
            }
            after = Some(last);
        }
    }};
}
pub(crate) use for_each_page;

/// A page of keys.
pub(crate) async fn key_page<E: Exec>(exec: &mut E, page: KeyPage<'_>) -> Result<Vec<RawKey>> {
    let spec = match page {
        KeyPage::Compactable { scope, .. } => scope.spec,
        KeyPage::Parent { spec, .. } => spec,
    };
    load_keyed(exec, Keys(page), page.key_kinds())
        .await
        .map_err(|e| database_error(spec, e))
}

/// Copies the totals of `keys` (sorted, distinct; one batch) into the cache column: the totals'
/// read and the `UPDATE` (on MySQL one per [`CASE_KEYS`] totals, in `keys`' order), in one
/// transaction, once (the caller paces reruns). A key whose total does not fit `i64` is skipped
/// and reported.
pub(crate) async fn refresh<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    cache: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<super::RefreshReport> {
    one_batch!(exec, spec, refresh_once(exec, spec, cache, keys))
}

async fn refresh_once<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    cache: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<super::RefreshReport> {
    let mut report = super::RefreshReport::default();
    // Before any total is read (see `RollUpLock`): on PostgreSQL one lock; on MySQL each
    // piece's parent rows, with the cache each holds (`None`: no lock taken, SQLite).
    let mut held: Option<HashMap<RawKey, i64>> = None;
    match E::Backend::DIALECT {
        _ if keys.is_empty() => {}
        Dialect::Postgres => {
            exec.load::<_, crate::sql::Sum>(RollUpLock::new(spec, cache, keys))
                .await
                .map_err(|e| database_error(spec, e))?;
        }
        Dialect::Mysql => {
            let held = held.get_or_insert_with(HashMap::new);
            for piece in keys.chunks(super::MAINTENANCE_BATCH) {
                let rows: Vec<ColumnValue> = load_keyed(
                    exec,
                    RollUpLock::new(spec, cache, piece),
                    spec.key_column_kinds(),
                )
                .await
                .map_err(|e| database_error(spec, e))?;
                held.extend(rows.into_iter().map(|row| (row.key, row.value)));
            }
        }
        Dialect::Sqlite => {}
    }
    for batch in keys.chunks(super::MAINTENANCE_BATCH) {
        if E::Backend::DIALECT == Dialect::Postgres {
            refresh_in_place(exec, spec, cache, batch, &mut report).await?;
            continue;
        }
        // The totals come from a plain, non-locking read, after `RollUpLock`: the cache is as
        // fresh as it, and no older than what another roll-up wrote.
        let mut totals: BTreeMap<KeyValue<'_>, Result<i64>> =
            batch.iter().map(|&k| (k, Ok(0))).collect();
        match sums(exec, spec, batch).await {
            Ok(rows) => {
                let found: std::collections::HashMap<RawKey, Option<String>> =
                    rows.into_iter().map(|(key, sum)| (key, sum.0)).collect();
                for (key, total) in totals.iter_mut() {
                    let sum = found.get(&key.to_raw()).cloned().flatten();
                    *total = parse_total(spec, key, sum);
                }
            }
            // SQLite fails the whole `SUM` when one record overflows: find it key by key.
            Err(Error::TotalOutOfRange { .. }) => {
                for (key, total) in totals.iter_mut() {
                    *total = match sums(exec, spec, std::slice::from_ref(key)).await {
                        Ok(rows) => {
                            let sum = rows.into_iter().next().and_then(|(_, s)| s.0);
                            parse_total(spec, key, sum)
                        }
                        // Named by its key, not as one of many.
                        Err(Error::TotalOutOfRange { total, .. }) => {
                            Err(total_out_of_range(spec, key, total))
                        }
                        Err(e) => Err(e),
                    };
                }
            }
            Err(e) => return Err(e),
        }
        // In the page's order, the database's (a text key's collation may sort otherwise than
        // Rust): the statements below lock the parent rows in it, piece after piece.
        let mut pairs = Vec::with_capacity(totals.len());
        for &key in batch {
            let Some(total) = totals.remove(&key) else {
                continue;
            };
            // On MySQL only the rows whose cache differs (locked: it cannot change now).
            let unchanged = |total: i64| match &held {
                // A key the rows do not name (no parent row, or one the column's collation
                // spells otherwise): left to the `UPDATE`, which matches as the server does.
                Some(held) => held.get(&key.to_raw()) == Some(&total),
                None => false,
            };
            match total {
                Ok(total) if unchanged(total) => {}
                Ok(total) if cache.holds(total) => pairs.push((key, total)),
                Ok(total) => report.failed.push(does_not_fit(cache, &key, total)),
                Err(e @ Error::TotalOutOfRange { .. }) => report.failed.push(RecordFailure {
                    key: format!("{key:?}"),
                    reason: e.to_string(),
                }),
                Err(e) => return Err(e),
            }
        }
        // MySQL and MariaDB test each row against every `WHEN` of the `CASE`: a statement per
        // `CASE_KEYS` totals, in key order, in this one transaction.
        let piece = match E::Backend::DIALECT {
            Dialect::Mysql => CASE_KEYS,
            Dialect::Sqlite | Dialect::Postgres => pairs.len().max(1),
        };
        for totals in pairs.chunks(piece) {
            let updated = exec
                .execute(RefreshCache { cache, totals })
                .await
                .map_err(|e| database_error(spec, e))?;
            report.updated += updated as u64;
        }
    }
    Ok(report)
}
