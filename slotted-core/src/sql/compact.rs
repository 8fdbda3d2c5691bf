//! PostgreSQL's compaction of a batch in one statement ([`CompactInPlace`]): the locking read,
//! the exact sums and the rewrite, as writable CTEs, with no row sent to the client and back.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::maintenance::{push_same_key, Rows, RowsQuery};
use super::read_keyed_total;
use super::write::push_insert_into;
use super::{
    push_columns, push_record_type, statement, varies_with_batch, Scope, BUCKET, COUNT, SLOT, TOTAL,
};
use crate::dialect::CounterBackend;
use crate::key::RawKey;
use crate::table::Storage;

/// PostgreSQL's compaction of one batch in one statement: the rows of `scope` no other
/// transaction holds are locked in key order (`FOR UPDATE SKIP LOCKED`, at their latest values)
/// and summed per (record, bucket) exactly (`SUM` of `BIGINT` is `NUMERIC`). A group that holds
/// its settled row (slot -1, the lowest) writes the sum into it; a group that holds none inserts
/// it, with the sum, unless another transaction made it (then the group's lowest slot row takes
/// the sum, for the next compaction to settle). The group's other locked rows are deleted (all
/// of them when the sum is 0). A record with a group whose sum leaves `BIGINT` keeps all its
/// rows, and is named in the statement's rows.
///
/// No row changes its key, here or anywhere. The `DELETE` and `UPDATE` find the rows they write
/// by key, through the statement's snapshot, and where a transaction committed a newer version
/// before the lock they act on that version, the one locked and summed (READ COMMITTED's
/// recheck). That holds only while the newer version has the key the snapshot saw: when
/// compaction moved a row into the settled slot, a compaction whose snapshot predated the move
/// summed the moved row and then found no row to write the sum into, and lost the rows it
/// deleted (`a_compaction_that_began_before_another_settled_the_record_loses_nothing`). For the
/// same reason the conditions test only what no writer changes (the key, the slot) and the
/// CTEs' own values, never a row's `count`: a row the snapshot's version filters out is not
/// rechecked.
/// Returns [`CompactedBatch`] rows.
pub(crate) struct CompactInPlace<'a> {
    scope: Scope<'a>,
    /// The locking read of `scope`'s rows.
    taken: Rows<'a>,
}

impl<'a> CompactInPlace<'a> {
    pub(crate) fn new(scope: Scope<'a>) -> Self {
        let taken = Rows(RowsQuery::Lock {
            scope,
            skip_locked: true,
        });
        CompactInPlace { scope, taken }
    }
}

/// The `CTE`s' names (lower case, so that they need no quoting).
const TAKEN: &str = "slotted_taken";
const GROUPS: &str = "slotted_groups";
const GOOD: &str = "slotted_good";
const SETTLED: &str = "slotted_settled";
const FATE: &str = "slotted_fate";

/// The `BIGINT` range, as a `NUMERIC` sum is tested against it.
const IN_BIGINT: &str = " BETWEEN -9223372036854775808 AND 9223372036854775807";

impl<DB: CounterBackend> QueryFragment<DB> for CompactInPlace<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let spec = self.scope.spec;
        let keys = spec.key_columns();
        let bucketed = spec.bucket.is_some();
        let same_group = |out: &mut AstPass<'_, 'b, DB>, a: &str, b: &str| {
            push_same_key(out, keys, a, b)?;
            if bucketed {
                out.push_sql(" AND ");
                push_same_key(out, &[BUCKET], a, b)?;
            }
            QueryResult::Ok(())
        };
        // The counter table's row that `alias`'s row names: its group, its slot, its type.
        let same_row = |out: &mut AstPass<'_, 'b, DB>, alias: &str| {
            same_group(out, spec.table, alias)?;
            out.push_sql(" AND ");
            push_same_key(out, &[SLOT], spec.table, alias)?;
            push_record_type(out, spec)
        };
        let group_columns = |out: &mut AstPass<'_, 'b, DB>| {
            push_columns(out, keys, None)?;
            out.push_sql(", ");
            out.push_identifier(BUCKET)
        };
        out.push_sql("WITH ");
        out.push_sql(TAKEN);
        out.push_sql(" AS (");
        self.taken.walk_ast(out.reborrow())?;
        out.push_sql("), ");
        out.push_sql(GROUPS);
        out.push_sql(" AS (SELECT ");
        group_columns(&mut out)?;
        out.push_sql(", MIN(");
        out.push_identifier(SLOT)?;
        out.push_sql(") AS ");
        out.push_identifier(SLOT)?;
        out.push_sql(", SUM(");
        out.push_identifier(COUNT)?;
        out.push_sql(") AS total, COUNT(*) AS n FROM ");
        out.push_sql(TAKEN);
        out.push_sql(" GROUP BY ");
        group_columns(&mut out)?;
        out.push_sql("), ");
        // The groups of records none of whose groups leaves BIGINT.
        out.push_sql(GOOD);
        out.push_sql(" AS (SELECT * FROM ");
        out.push_sql(GROUPS);
        out.push_sql(" slotted_g WHERE NOT EXISTS (SELECT 1 FROM ");
        out.push_sql(GROUPS);
        out.push_sql(" slotted_p WHERE ");
        push_same_key(&mut out, keys, "slotted_p", "slotted_g")?;
        out.push_sql(" AND slotted_p.total NOT");
        out.push_sql(IN_BIGINT);
        out.push_sql(")), ");
        // The settled row of each group that holds none, with the group's sum, where no other
        // transaction made it (`DO NOTHING`, which waits for no row lock; only for another
        // transaction inserting the same row), in key order (so that two of these never wait
        // for each other). A group whose settled row exists (a concurrent compaction holds it,
        // or made it since this statement's snapshot) keeps its sum in its lowest slot row, for
        // the next compaction to settle.
        out.push_sql(SETTLED);
        out.push_sql(" AS (");
        push_insert_into(&mut out, spec, false)?;
        out.push_sql("SELECT ");
        if let Storage::Shared { record_type } = &spec.storage {
            DB::push_text(&mut out, record_type)?;
            out.push_sql(", ");
        }
        // The group's columns that the counter table has (a bucket only when bucketed).
        let stored_group = |out: &mut AstPass<'_, 'b, DB>| {
            push_columns(out, keys, None)?;
            if bucketed {
                out.push_sql(", ");
                out.push_identifier(BUCKET)?;
            }
            QueryResult::Ok(())
        };
        stored_group(&mut out)?;
        out.push_sql(", -1, CAST(total AS BIGINT) FROM ");
        out.push_sql(GOOD);
        out.push_sql(" WHERE ");
        out.push_identifier(SLOT)?;
        out.push_sql(" <> -1 AND total <> 0 ORDER BY ");
        group_columns(&mut out)?;
        out.push_sql(" ON CONFLICT DO NOTHING RETURNING ");
        stored_group(&mut out)?;
        // The groups, each with whether it got its settled row from this statement: an `EXISTS`
        // in the select list (a hashed subquery), which keeps the estimate at the groups' own.
        // A `LEFT JOIN` of two CTEs, which have no statistics, is estimated at their product
        // over 200, and the `DELETE` joined to it then costs enough for JIT compilation (0.4 s
        // more for a batch of 8192 records).
        out.push_sql("), ");
        out.push_sql(FATE);
        out.push_sql(" AS (SELECT slotted_g.*, EXISTS (SELECT 1 FROM ");
        out.push_sql(SETTLED);
        out.push_sql(" slotted_s WHERE ");
        same_group(&mut out, "slotted_s", "slotted_g")?;
        out.push_sql(") AS made FROM ");
        out.push_sql(GOOD);
        out.push_sql(" slotted_g");
        out.push_sql("), slotted_gone AS (DELETE FROM ");
        out.push_identifier(spec.table)?;
        out.push_sql(" USING ");
        out.push_sql(TAKEN);
        out.push_sql(" slotted_k, ");
        out.push_sql(FATE);
        out.push_sql(" slotted_g WHERE ");
        same_row(&mut out, "slotted_k")?;
        out.push_sql(" AND ");
        same_group(&mut out, "slotted_k", "slotted_g")?;
        out.push_sql(" AND (slotted_k.");
        out.push_identifier(SLOT)?;
        out.push_sql(" <> slotted_g.");
        out.push_identifier(SLOT)?;
        out.push_sql(" OR slotted_g.total = 0 OR slotted_g.made)), slotted_kept AS (UPDATE ");
        out.push_identifier(spec.table)?;
        out.push_sql(" SET ");
        out.push_identifier(COUNT)?;
        out.push_sql(" = CAST(slotted_g.total AS BIGINT) FROM ");
        out.push_sql(FATE);
        out.push_sql(" slotted_g WHERE ");
        same_row(&mut out, "slotted_g")?;
        // A group of one row holds its sum already. Never a test of the row's `count` here:
        // it is read as the snapshot saw it, and a row that a writer changed before the lock
        // and that the test filtered out would be skipped, not rechecked at its locked version
        // (the sum would lose the other rows the `DELETE` removes).
        out.push_sql(" AND slotted_g.total <> 0 AND slotted_g.n > 1 AND NOT slotted_g.made) ");
        // One row: what was folded; and, beside it, each record left whole (a group of its
        // locked rows whose sum leaves BIGINT: the first such group's sum), one row each.
        out.push_sql(
            "SELECT slotted_summary.records, slotted_summary.rows_before, \
             slotted_summary.rows_after, ",
        );
        push_columns(&mut out, keys, Some("slotted_poisoned"))?;
        out.push_sql(", slotted_poisoned.");
        out.push_identifier(TOTAL)?;
        out.push_sql(" FROM (SELECT CAST(COUNT(DISTINCT (");
        push_columns(&mut out, keys, None)?;
        out.push_sql(
            ")) AS BIGINT) AS records, CAST(COALESCE(SUM(n), 0) AS BIGINT) AS rows_before, \
             CAST(COUNT(*) FILTER (WHERE total <> 0) AS BIGINT) AS rows_after FROM ",
        );
        out.push_sql(GOOD);
        out.push_sql(") AS slotted_summary LEFT JOIN (SELECT DISTINCT ON (");
        push_columns(&mut out, keys, None)?;
        out.push_sql(") ");
        push_columns(&mut out, keys, None)?;
        out.push_sql(", CAST(total AS TEXT) AS ");
        out.push_identifier(TOTAL)?;
        out.push_sql(" FROM ");
        out.push_sql(GROUPS);
        out.push_sql(" WHERE total NOT");
        out.push_sql(IN_BIGINT);
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, keys, None)?;
        out.push_sql(", ");
        out.push_identifier(BUCKET)?;
        out.push_sql(") AS slotted_poisoned ON TRUE");
        Ok(())
    }
}

/// A row of [`CompactInPlace`]: what the batch folded (the same in every row), and a record it
/// left whole, if any (its key and the sum, as text, of its group that leaves `BIGINT`).
pub(crate) struct CompactedBatch {
    /// Records whose groups were folded.
    pub records: i64,
    pub rows_before: i64,
    pub rows_after: i64,
    pub poisoned: Option<(RawKey, String)>,
}

impl<DB: CounterBackend> diesel::deserialize::QueryableByName<DB> for CompactedBatch {
    fn build<'a>(row: &impl diesel::row::NamedRow<'a, DB>) -> diesel::deserialize::Result<Self> {
        // The key columns are NULL on the one row of a batch that left no record whole.
        let poisoned = read_keyed_total(row)?;
        Ok(CompactedBatch {
            records: DB::read_big_int(row, "records")?,
            rows_before: DB::read_big_int(row, "rows_before")?,
            rows_after: DB::read_big_int(row, "rows_after")?,
            poisoned,
        })
    }
}

statement!(by_text: CompactInPlace);
