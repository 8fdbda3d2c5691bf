//! An adopted column (`adopt = likes_count`): its counts are part of every total until `absorb`
//! moves them into the slots; `release` moves the slots back into it, for a counter being
//! removed. And the claim a roll-up makes on its cache column, so that it never overwrites
//! counts a column holds of its own.
//!
//! Every move runs in one transaction per batch and keeps every total exact while old-style
//! writers (`UPDATE posts SET likes_count = likes_count + 1`) and new ones go on: the model's
//! rows of the batch are locked first, in key order (as `set` locks them, and as an old-style
//! writer locks its one row), then the slots; the count leaves one part and enters the other in
//! the same commit, and a total reads both parts in one statement.

use std::collections::BTreeMap;

use super::fold::{id_of, one_batch, put_back, take_rows};
use super::{MoveReport, RecordFailure};
use crate::count::database_error;
use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::exec::{load_keyed, Exec};
use crate::key::{KeyValue, RawKey};
use crate::slot::SlotStrategy;
use crate::sql::adopt::{
    AddToColumn, Claim, Claimed, ColumnValue, ColumnValues, HoldsCounts, TakeWriteLock,
};
use crate::sql::maintenance::CASE_KEYS;
use crate::sql::write::{AddRows, DeltaRow};
use crate::sql::Scope;
use crate::table::{CacheSpec, CounterSpec};

/// The row of [`Claimed`].
struct Count(i64);

impl<DB: CounterBackend> diesel::deserialize::QueryableByName<DB> for Count {
    fn build<'a>(row: &impl diesel::row::NamedRow<'a, DB>) -> diesel::deserialize::Result<Self> {
        DB::read_big_int(row, "n").map(Count)
    }
}

/// Whether `column` is a roll-up's cache (claimed).
pub(crate) async fn claimed<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
) -> Result<bool> {
    let rows = exec
        .load::<_, Count>(Claimed(column))
        .await
        .map_err(|e| database_error(spec, e))?;
    Ok(rows.first().is_some_and(|n| n.0 > 0))
}

/// Whether `cache` is the column the counter adopts.
fn adopts(spec: &CounterSpec, cache: &CacheSpec) -> bool {
    spec.adopt
        .is_some_and(|a| a.table == cache.table && a.column == cache.column)
}

/// Before a roll-up writes into `column`: the column must be the roll-up's. A plain cache
/// column becomes so the first time every row holds 0 there (a new column); while some row holds
/// a count of its own, the roll-up fails with [`Error::ColumnHoldsCounts`] and writes nothing. A
/// column the counter adopts becomes so only through `absorb_all` ([`take_over_after_absorb`]):
/// until then [`Error::ColumnNotAbsorbed`]. The column of a counter that follows a child table
/// becomes so at once, whatever it holds: its counts are the child rows', which the follow
/// migration counted, so the column's values (an aggregate column the application's trigger
/// kept, say) are at most an old copy of them.
pub(crate) async fn claim<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
) -> Result<()> {
    if claimed(exec, spec, column).await? {
        return Ok(());
    }
    if adopts(spec, column) {
        return Err(Error::ColumnNotAbsorbed {
            counter: spec.qualified_name(),
            table: column.table,
            column: column.column,
        });
    }
    take_over(exec, spec, column).await
}

/// Makes `column` the roll-up's when every row holds 0 there (the check and the claim one
/// statement); [`Error::ColumnHoldsCounts`] otherwise.
async fn take_over<E: Exec>(exec: &mut E, spec: &CounterSpec, column: &CacheSpec) -> Result<()> {
    exec.execute(Claim {
        column,
        whatever_it_holds: spec.follow.is_some(),
    })
    .await
    .map_err(|e| database_error(spec, e))?;
    if claimed(exec, spec, column).await? {
        return Ok(());
    }
    let holding: Vec<ColumnValue> =
        load_keyed(exec, HoldsCounts { spec, column }, spec.key_column_kinds())
            .await
            .map_err(|e| database_error(spec, e))?;
    if let Some(row) = holding.first() {
        return Err(Error::ColumnHoldsCounts {
            counter: spec.qualified_name(),
            table: column.table,
            column: column.column,
            key: format!("{:?}", row.key),
            value: row.value,
        });
    }
    // A count that went between the two statements: say it as the next attempt will.
    Err(Error::ColumnHoldsCounts {
        counter: spec.qualified_name(),
        table: column.table,
        column: column.column,
        key: "(a record written meanwhile)".to_owned(),
        value: 0,
    })
}

/// After a whole `absorb_all` pass of a counter whose cache is its adopted column: takes the
/// column over for the roll-up if every row now holds 0 there. Whether it did.
pub(crate) async fn take_over_after_absorb<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
) -> Result<bool> {
    let Some(cache) = spec.cache.as_ref().filter(|c| adopts(spec, c)) else {
        return Ok(false);
    };
    match take_over(exec, spec, cache).await {
        Ok(()) => Ok(true),
        Err(Error::ColumnHoldsCounts { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Fails with [`Error::ColumnIsCache`] when the adopted `column` is a roll-up's cache: its
/// values are copies of totals, and moving them would count them twice.
pub(crate) async fn refuse_cache<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    call: &'static str,
) -> Result<()> {
    if claimed(exec, spec, column).await? {
        return Err(Error::ColumnIsCache {
            counter: spec.qualified_name(),
            table: column.table,
            column: column.column,
            call,
        });
    }
    Ok(())
}

/// The model's rows of `keys` and their values in `column`, locked in key order (on SQLite,
/// inside its one write transaction, taken first). Keys as the counter table keeps them, so
/// that they compare with its rows' (the shared table keeps every key as `BIGINT`).
async fn column_values<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    keys: &[KeyValue<'_>],
    nonzero: bool,
) -> Result<Vec<ColumnValue>> {
    if <E::Backend as CounterBackend>::DIALECT == Dialect::Sqlite {
        exec.execute(TakeWriteLock(column))
            .await
            .map_err(|e| database_error(spec, e))?;
    }
    let query = ColumnValues {
        spec,
        column,
        keys,
        nonzero,
    };
    load_keyed(exec, query, spec.key_column_kinds())
        .await
        .map_err(|e| database_error(spec, e))
}

/// Moves the column's counts of `keys` (sorted) into their slots, in one transaction, once.
pub(crate) async fn absorb<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<MoveReport> {
    one_batch!(exec, spec, absorb_once(exec, spec, column, keys))
}

async fn absorb_once<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<MoveReport> {
    let mut values = column_values(exec, spec, column, keys, true).await?;
    let mut report = MoveReport {
        batches: 1,
        ..MoveReport::default()
    };
    // `i64::MIN` has no negation to take it out of the column with: left there, reported.
    values.retain(|v| {
        let movable = v.value.checked_neg().is_some();
        if !movable {
            report.failed.push(RecordFailure {
                key: format!("{:?}", v.key),
                reason: format!("its column holds {}, which cannot be moved", v.value),
            });
        }
        movable
    });
    if values.is_empty() {
        return Ok(report);
    }
    // Into each record's row of this session's writer slot (as a write of this session goes:
    // on Galera the node's own share, which no other node's writer meets in certification),
    // then out of the column: the same commit.
    let rows: Vec<DeltaRow<'_>> = values
        .iter()
        .map(|v| (v.key.as_value(), 0, v.value))
        .collect();
    let sqlite_slot = SlotStrategy::Connection.choose(spec.slots);
    let slot = crate::count::rows_writer_slot(exec, spec.slots, sqlite_slot)
        .await
        .map_err(|e| database_error(spec, e))?;
    let written = exec
        .execute(AddRows::new(spec, slot, &rows))
        .await
        .map_err(|e| database_error(spec, e))?;
    // PostgreSQL and SQLite count a row per key written, none for one the overflow guard
    // skipped; MySQL fails the statement instead (error 1690).
    if <E::Backend as CounterBackend>::DIALECT != Dialect::Mysql && written != rows.len() {
        return Err(Error::Overflow {
            counter: spec.qualified_name(),
            table: spec.table,
            key: format!("(one of the {} records absorbed together)", rows.len()),
            delta: values.iter().map(|v| v.value).max().unwrap_or_default(),
        });
    }
    let back: Vec<(KeyValue<'_>, i64)> = values
        .iter()
        .map(|v| (v.key.as_value(), -v.value))
        .collect();
    add_to_column(exec, spec, column, &back).await?;
    report.records = values.len() as u64;
    report.moved = values.iter().map(|v| i128::from(v.value)).sum();
    Ok(report)
}

/// Moves the slots of `keys` (sorted) into the column, in one transaction, once: a record
/// whose new value the column cannot hold, or that has no row in the model's table, keeps its
/// slots and is reported.
pub(crate) async fn release<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<MoveReport> {
    one_batch!(exec, spec, release_once(exec, spec, column, keys))
}

async fn release_once<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    keys: &[KeyValue<'_>],
) -> Result<MoveReport> {
    // The model's rows first, in key order, as absorb and `set` lock them; then the slots.
    let parents: BTreeMap<RawKey, i64> = column_values(exec, spec, column, keys, false)
        .await?
        .into_iter()
        .map(|v| (v.key, v.value))
        .collect();
    let rows = take_rows(exec, Scope::new(spec, keys), false).await?;
    let mut sums: BTreeMap<&RawKey, i128> = BTreeMap::new();
    for row in &rows {
        *sums.entry(&row.key).or_default() += i128::from(row.count);
    }
    let mut report = MoveReport {
        batches: 1,
        ..MoveReport::default()
    };
    let mut moved: Vec<(KeyValue<'_>, i64)> = Vec::new();
    let mut kept: Vec<&RawKey> = Vec::new();
    for (key, sum) in sums {
        let reason = match parents.get(key) {
            None => Some("it has no row in the model's table to hold its count".to_owned()),
            Some(&value) => match i64::try_from(i128::from(value) + sum) {
                Ok(new) if column.holds(new) => None,
                _ => Some(format!(
                    "its count, {}, does not fit the {}-bit column",
                    i128::from(value) + sum,
                    column.bits
                )),
            },
        };
        match (reason, i64::try_from(sum)) {
            (None, Ok(sum)) => {
                report.records += 1;
                report.moved += i128::from(sum);
                moved.push((key.as_value(), sum));
            }
            (reason, _) => {
                report.failed.push(RecordFailure {
                    key: format!("{key:?}"),
                    reason: format!(
                        "{}: its slots were left as they are",
                        reason.unwrap_or_else(|| format!("its slots add up to {sum}, outside i64"))
                    ),
                });
                kept.push(key);
            }
        }
    }
    // Delete the moved records' rows; on SQLite, where the read deleted them all, put the
    // others back.
    let (mut taken, mut result) = (Vec::new(), Vec::new());
    for row in &rows {
        if !kept.contains(&&row.key) {
            taken.push(id_of(row));
        } else if <E::Backend as CounterBackend>::DIALECT == Dialect::Sqlite {
            let (key, bucket, slot) = id_of(row);
            result.push((key, bucket, slot, row.count));
        }
    }
    put_back(exec, spec, &taken, &result).await?;
    let moved: Vec<_> = moved.into_iter().filter(|(_, sum)| *sum != 0).collect();
    if !moved.is_empty() {
        add_to_column(exec, spec, column, &moved).await?;
    }
    Ok(report)
}

/// Adds each delta to its record's column: a statement per [`CASE_KEYS`] records (the
/// `CASE` tests each row against every `WHEN`), in the caller's order and transaction.
async fn add_to_column<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    column: &CacheSpec,
    deltas: &[(KeyValue<'_>, i64)],
) -> Result<()> {
    for deltas in deltas.chunks(CASE_KEYS) {
        exec.execute(AddToColumn { column, deltas })
            .await
            .map_err(|e| database_error(spec, e))?;
    }
    Ok(())
}
