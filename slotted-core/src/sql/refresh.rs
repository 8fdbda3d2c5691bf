//! PostgreSQL's roll-up of a batch in one statement ([`RefreshFromSlots`]): the totals read,
//! the parent rows locked in key order and written, with no total sent to the client and back.
//! And what every roll-up takes before it reads a total ([`RollUpLock`]).

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::adopt::push_select_values;
use super::maintenance::push_same_key;
use super::read::SumMany;
use super::{
    push_columns, push_key_values, push_keys_in, push_list, push_qualified, read_keyed_total,
    statement, varies_with_batch, Scope, COUNT, TOTAL,
};
use crate::dialect::{CounterBackend, Dialect};
use crate::key::{KeyValue, RawKey};
use crate::table::{CacheSpec, CounterSpec};

/// The roll-up of `scope`'s keys into the cache column, in one statement (PostgreSQL): each
/// key's total (`SumMany`, exact as `NUMERIC`; 0 for a key with no row), the parent rows whose
/// cache differs from a total the column holds locked in key order (`FOR UPDATE`, so that two
/// roll-ups do not deadlock) and written, each found through the primary key; an unchanged row
/// is neither locked nor written.
/// Returns one [`RefreshedBatch`] row with the number written, and one more for each key whose
/// total the column cannot hold (left as it is).
///
/// The totals are the statement's snapshot: [`RollUpLock`] comes first in the transaction, so
/// that snapshot is taken after every other roll-up of the column has committed.
pub(crate) struct RefreshFromSlots<'a> {
    scope: Scope<'a>,
    cache: &'a CacheSpec,
    /// The totals of `scope`'s keys that have rows (a counter that adopts a column).
    sums: SumMany<'a>,
    /// `scope` without its keys: a correlated sum names its key.
    every_key: Scope<'a>,
}

impl<'a> RefreshFromSlots<'a> {
    pub(crate) fn new(scope: Scope<'a>, cache: &'a CacheSpec) -> Self {
        RefreshFromSlots {
            scope,
            cache,
            sums: SumMany(scope),
            every_key: Scope { keys: &[], ..scope },
        }
    }
}

/// The `CTE`s' names.
const TOTALS: &str = "slotted_totals";
const WRITTEN: &str = "slotted_written";

impl<DB: CounterBackend> QueryFragment<DB> for RefreshFromSlots<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let CacheSpec {
            table,
            key_columns,
            column,
            bits,
        } = *self.cache;
        let keys = self.scope.keys;
        let counter_keys = self.scope.spec.key_columns();
        // The range the column holds.
        let in_range = if bits >= 64 {
            " BETWEEN -9223372036854775808 AND 9223372036854775807"
        } else {
            " BETWEEN -2147483648 AND 2147483647"
        };
        let adopts = self.scope.spec.adopt.is_some();
        out.push_sql("WITH ");
        if adopts {
            // The totals of a counter that adopts a column: its two parts (`SumMany`).
            out.push_sql("slotted_sums AS (");
            self.sums.walk_ast(out.reborrow())?;
            out.push_sql("), ");
        }
        // Every key of the batch, named as the parent's columns, with its total.
        out.push_sql(TOTALS);
        out.push_sql(" AS (SELECT ");
        push_columns(&mut out, key_columns, Some("slotted_k"))?;
        out.push_sql(", COALESCE(");
        if adopts {
            out.push_sql("CAST(slotted_s.");
            out.push_identifier(TOTAL)?;
            out.push_sql(" AS NUMERIC)");
        } else {
            // A sum per key through the primary key, correlated: an `IN` list of the keys
            // let the planner scan the whole table (12 ms for 1,000 keys of 100,000).
            out.push_sql("(SELECT SUM(");
            out.push_identifier(COUNT)?;
            out.push_sql(") FROM ");
            out.push_identifier(self.scope.spec.table)?;
            self.every_key.push_where(&mut out)?;
            for (parent, counter) in key_columns.iter().zip(counter_keys) {
                out.push_sql(" AND ");
                push_qualified(&mut out, self.scope.spec.table, counter)?;
                out.push_sql(" = ");
                push_qualified(&mut out, "slotted_k", parent)?;
            }
            out.push_sql(")");
        }
        out.push_sql(", 0) AS total FROM (VALUES ");
        push_list(&mut out, keys, |out, key| {
            out.push_sql("(");
            push_key_values(out, key)?;
            out.push_sql(")");
            Ok(())
        })?;
        out.push_sql(") AS slotted_k (");
        push_columns(&mut out, key_columns, None)?;
        out.push_sql(")");
        if adopts {
            out.push_sql(" LEFT JOIN slotted_sums slotted_s ON ");
            for (i, (parent, counter)) in key_columns.iter().zip(counter_keys).enumerate() {
                if i > 0 {
                    out.push_sql(" AND ");
                }
                push_qualified(&mut out, "slotted_k", parent)?;
                out.push_sql(" = ");
                push_qualified(&mut out, "slotted_s", counter)?;
            }
        }
        // The rows to write, locked in key order.
        out.push_sql("), slotted_locked AS (SELECT ");
        push_columns(&mut out, key_columns, Some("slotted_parent"))?;
        out.push_sql(", slotted_t.total FROM ");
        out.push_identifier(table)?;
        out.push_sql(" AS slotted_parent JOIN ");
        out.push_sql(TOTALS);
        out.push_sql(" slotted_t ON ");
        push_same_key(&mut out, key_columns, "slotted_parent", "slotted_t")?;
        out.push_sql(" AND slotted_parent.");
        out.push_identifier(column)?;
        out.push_sql(" IS DISTINCT FROM slotted_t.total AND slotted_t.total");
        out.push_sql(in_range);
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, key_columns, Some("slotted_parent"))?;
        out.push_sql(" FOR UPDATE OF slotted_parent), ");
        out.push_sql(WRITTEN);
        out.push_sql(" AS (UPDATE ");
        out.push_identifier(table)?;
        out.push_sql(" SET ");
        out.push_identifier(column)?;
        out.push_sql(" = CAST(slotted_l.total AS BIGINT) FROM slotted_locked slotted_l WHERE ");
        push_same_key(&mut out, key_columns, table, "slotted_l")?;
        // One row with the count written; beside it, each key whose total the column cannot
        // hold, named as the counter table's key columns.
        out.push_sql(" RETURNING 1) SELECT (SELECT CAST(COUNT(*) AS BIGINT) FROM ");
        out.push_sql(WRITTEN);
        out.push_sql(") AS updated");
        for (parent, counter) in key_columns.iter().zip(counter_keys) {
            out.push_sql(", ");
            push_columns(&mut out, &[parent], Some("slotted_f"))?;
            out.push_sql(" AS ");
            out.push_identifier(counter)?;
        }
        out.push_sql(", CAST(slotted_f.total AS TEXT) AS ");
        out.push_identifier(TOTAL)?;
        out.push_sql(" FROM (SELECT 1) AS slotted_one LEFT JOIN ");
        out.push_sql(TOTALS);
        out.push_sql(" slotted_f ON NOT (slotted_f.total");
        out.push_sql(in_range);
        out.push_sql(") ORDER BY ");
        push_columns(&mut out, key_columns, Some("slotted_f"))
    }
}

/// A row of [`RefreshFromSlots`]: the rows written (the same in every row), and a key whose
/// total the column cannot hold, if any (its key and the total, as text).
pub(crate) struct RefreshedBatch {
    pub updated: i64,
    pub out_of_range: Option<(RawKey, String)>,
}

impl<DB: CounterBackend> diesel::deserialize::QueryableByName<DB> for RefreshedBatch {
    fn build<'a>(row: &impl diesel::row::NamedRow<'a, DB>) -> diesel::deserialize::Result<Self> {
        // The key columns are NULL on the row of a batch whose totals all fit.
        let out_of_range = read_keyed_total(row)?;
        Ok(RefreshedBatch {
            updated: DB::read_big_int(row, "updated")?,
            out_of_range,
        })
    }
}

/// The key of `keys` that `raw` names.
pub(crate) fn key_named<'k>(keys: &'k [KeyValue<'k>], raw: &RawKey) -> Option<&'k KeyValue<'k>> {
    keys.iter().find(|key| key.to_raw() == *raw)
}

/// The advisory-lock class of the roll-ups of a cache column on PostgreSQL (`'slor'`), beside
/// the lease's (`'slom'`) and the writer indices' (`'slot'`).
const ROLL_UP_LOCK_CLASS: i32 = 0x736c_6f72;

/// What a roll-up takes before it reads a total, held to the end of its transaction: then a
/// roll-up that commits after another has read its totals after the other committed, and never
/// writes an older total over a newer one, nor leaves one there because its own total equals
/// what the column held before (the record is settled then: no later pass would take it).
/// Without it, a roll-up that read its totals and waited for a parent row (held by the app, or
/// by a roll-up of another page) wrote them after a later roll-up of the same record had
/// written a newer total (`a_roll_up_never_writes_a_total_older_than_one_written_before_it`).
/// - PostgreSQL: a transaction-level advisory lock of the cache column (its table and name):
///   roll-ups of one column take turns, batch by batch; writers, and the parent rows a roll-up
///   does not write, are not touched. In `READ COMMITTED` the roll-up's statement then takes
///   its snapshot after the lock; in a caller's `REPEATABLE READ` transaction, whose snapshot
///   may be older, a parent row that another roll-up wrote since fails with `40001`.
/// - MySQL and MariaDB: the parent rows of `keys`, locked `FOR UPDATE` (a consistent read, as
///   the totals' is, takes its snapshot at the transaction's first such read, after these
///   locks). Most of them are written in the same transaction anyway: a pass rolls up the
///   records written since the last. `keys` at most `MAINTENANCE_BATCH` (one `IN` list).
///   Locked in key order, as [`ColumnValues`](super::adopt::ColumnValues) locks them, and
///   read as its rows are ([`ColumnValue`](super::adopt::ColumnValue)s): each row's key and
///   its cache, which no one else may change until the roll-up commits, so the `UPDATE` names
///   only the rows whose cache differs from their total.
/// - SQLite: nothing (`BEGIN IMMEDIATE` holds the database's one write lock already).
///
/// PostgreSQL and SQLite: one `slotted_total`, ignored.
pub(crate) struct RollUpLock<'a> {
    spec: &'a CounterSpec,
    cache: &'a CacheSpec,
    keys: &'a [KeyValue<'a>],
}

impl<'a> RollUpLock<'a> {
    pub(crate) fn new(
        spec: &'a CounterSpec,
        cache: &'a CacheSpec,
        keys: &'a [KeyValue<'a>],
    ) -> Self {
        RollUpLock { spec, cache, keys }
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for RollUpLock<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let CacheSpec {
            table,
            key_columns,
            column,
            ..
        } = *self.cache;
        match DB::DIALECT {
            Dialect::Postgres => {
                let hash = crate::table::stable_hash(format!("{table}\n{column}").as_bytes());
                let key = i32::try_from(hash & 0x7fff_ffff).unwrap_or(0);
                out.push_sql(&format!(
                    "SELECT '1' AS {TOTAL} FROM (SELECT pg_advisory_xact_lock(\
                     {ROLL_UP_LOCK_CLASS}, {key})) AS slotted_lock"
                ));
            }
            Dialect::Mysql => {
                varies_with_batch(&mut out);
                push_select_values(&mut out, self.spec, self.cache)?;
                push_keys_in(&mut out, key_columns, None, self.keys, |key| key)?;
                out.push_sql(" ORDER BY ");
                push_columns(&mut out, key_columns, None)?;
                out.push_sql(" FOR UPDATE");
            }
            Dialect::Sqlite => out.push_sql(&format!("SELECT '1' AS {TOTAL}")),
        }
        Ok(())
    }
}

statement!(by_text: RefreshFromSlots, RollUpLock);
