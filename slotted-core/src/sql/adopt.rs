//! The statements of an adopted column (`adopt = likes_count`), whose counts are part of the
//! total until `absorb` moves them into the slots, and of the claims table, which says which
//! columns of models' tables are slotted's roll-up caches.
//!
//! - the base part of a total: the column's value, unless the column is a claimed cache
//!   ([`push_base`], read with the slots in one statement: [`super::read`]);
//! - absorb and release: the parent rows' values, locked in key order ([`ColumnValues`]), and a
//!   delta added to each ([`AddToColumn`]);
//! - `set` on an adopted counter zeroes the column's part ([`ZeroBase`]);
//! - a roll-up's first run claims its column ([`Claimed`], [`Claim`], [`HoldsCounts`]).

use diesel::deserialize;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::row::NamedRow;
use diesel::QueryResult;

use super::diagnostics::quote as quote_for;
use super::{
    push_columns, push_key_match, push_keys_in, push_list, statement, varies_with_batch,
    FromCounterRow,
};
use crate::dialect::{CounterBackend, Dialect};
use crate::key::{KeyValue, RawKey};
use crate::table::{CacheSpec, CounterSpec};

/// The claims table: one row per column of a model's table that a roll-up owns.
pub const COLUMNS_TABLE: &str = "slotted_columns";
const TABLE_NAME: &str = "table_name";
const COLUMN_NAME: &str = "column_name";
/// The alias of a column's value read back.
const VALUE: &str = "slotted_value";

/// `CREATE TABLE slotted_columns (table_name, column_name)`.
pub(crate) fn up_sql(dialect: Dialect) -> String {
    let q = |ident| quote_for(dialect, ident);
    let text = match dialect {
        Dialect::Mysql => "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        Dialect::Sqlite | Dialect::Postgres => "VARCHAR(64)",
    };
    format!(
        "-- slotted: the columns of models' tables that slotted's roll-ups own (`cache = …`).\n\
         CREATE TABLE {table} (\n    {t} {text} NOT NULL,\n    {c} {text} NOT NULL,\n    \
         PRIMARY KEY ({t}, {c})\n);\n",
        table = q(COLUMNS_TABLE),
        t = q(TABLE_NAME),
        c = q(COLUMN_NAME),
    )
}

/// `DROP TABLE slotted_columns`.
pub(crate) fn down_sql(dialect: Dialect) -> String {
    format!("DROP TABLE {};\n", quote_for(dialect, COLUMNS_TABLE))
}

/// `table_name = ? AND column_name = ?` of `column`'s claim.
fn push_claim_match<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    column: &'b CacheSpec,
) -> QueryResult<()> {
    out.push_identifier(TABLE_NAME)?;
    out.push_sql(" = ");
    DB::push_text(out, column.table)?;
    out.push_sql(" AND ");
    out.push_identifier(COLUMN_NAME)?;
    out.push_sql(" = ");
    DB::push_text(out, column.column)
}

/// ` AND NOT EXISTS (SELECT 1 FROM slotted_columns WHERE …)`: the column is not a claimed
/// cache, so its values are counts.
pub(crate) fn push_unclaimed<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    column: &'b CacheSpec,
) -> QueryResult<()> {
    out.push_sql(" AND NOT EXISTS (SELECT 1 FROM ");
    out.push_identifier(COLUMNS_TABLE)?;
    out.push_sql(" WHERE ");
    push_claim_match(out, column)?;
    out.push_sql(")");
    Ok(())
}

/// `CAST(column AS BIGINT)`: an `INTEGER` column reads back as the totals do.
fn push_value<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    column: &CacheSpec,
) -> QueryResult<()> {
    out.push_sql("CAST(");
    out.push_identifier(column.column)?;
    out.push_sql(match DB::DIALECT {
        Dialect::Mysql => " AS SIGNED)",
        Dialect::Sqlite | Dialect::Postgres => " AS BIGINT)",
    });
    Ok(())
}

/// The base part of the totals of `keys`: `SELECT [key columns AS record_id, …,] CAST(column
/// AS BIGINT) AS count FROM parent WHERE <keys> AND NOT EXISTS (<its claim>)`, one row per
/// record that has a row in the model's table; `with_keys` names each row's key as the counter
/// table's key columns, for a `GROUP BY` over both parts.
pub(crate) fn push_base<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    column: &'b CacheSpec,
    keys: &'b [KeyValue<'b>],
    with_keys: bool,
) -> QueryResult<()> {
    out.push_sql("SELECT ");
    if with_keys {
        push_keys_as(out, spec, column)?;
        out.push_sql(", ");
    }
    push_value(out, column)?;
    out.push_sql(" AS ");
    out.push_identifier(super::COUNT)?;
    out.push_sql(" FROM ");
    out.push_identifier(column.table)?;
    out.push_sql(" WHERE ");
    match keys {
        [key] => push_key_match(out, column.key_columns, None, key)?,
        keys => push_keys_in(out, column.key_columns, None, keys, |key| key)?,
    }
    push_unclaimed(out, column)
}

/// `key_a AS record_id, key_b AS record_id_2`: the model's key columns named as the counter
/// table's.
fn push_keys_as<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
    column: &CacheSpec,
) -> QueryResult<()> {
    for (i, (key, name)) in column
        .key_columns
        .iter()
        .zip(spec.key_columns())
        .enumerate()
    {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_identifier(key)?;
        out.push_sql(" AS ");
        out.push_identifier(name)?;
    }
    Ok(())
}

/// `SELECT <key as record_id…>, CAST(column AS BIGINT) AS slotted_value FROM parent WHERE <keys>
/// [AND column <> 0] ORDER BY <key> [FOR UPDATE]`: the model's rows of `keys` and their values
/// in the column, locked in key order on PostgreSQL and MySQL (SQLite has one writer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColumnValues<'a> {
    pub spec: &'a CounterSpec,
    pub column: &'a CacheSpec,
    pub keys: &'a [KeyValue<'a>],
    /// Only the rows whose value is not 0.
    pub nonzero: bool,
}

impl<DB: CounterBackend> QueryFragment<DB> for ColumnValues<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        push_select_values(&mut out, self.spec, self.column)?;
        push_keys_in(&mut out, self.column.key_columns, None, self.keys, |key| {
            key
        })?;
        if self.nonzero {
            out.push_sql(" AND ");
            out.push_identifier(self.column.column)?;
            out.push_sql(" <> 0");
        }
        // A column a roll-up took over holds copies of totals, never counts to move: checked in
        // the batch's own transaction, not only before the job.
        push_unclaimed(&mut out, self.column)?;
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, self.column.key_columns, None)?;
        if DB::DIALECT != Dialect::Sqlite {
            out.push_sql(" FOR UPDATE");
        }
        Ok(())
    }
}

/// `SELECT <key as record_id…>, CAST(column AS BIGINT) AS slotted_value FROM parent WHERE `: the
/// head of [`ColumnValues`], [`HoldsCounts`] and MySQL's
/// [`RollUpLock`](super::refresh::RollUpLock), whose rows are [`ColumnValue`]s.
pub(crate) fn push_select_values<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
    column: &CacheSpec,
) -> QueryResult<()> {
    out.push_sql("SELECT ");
    push_keys_as(out, spec, column)?;
    out.push_sql(", ");
    push_value(out, column)?;
    out.push_sql(" AS ");
    out.push_identifier(VALUE)?;
    out.push_sql(" FROM ");
    out.push_identifier(column.table)?;
    out.push_sql(" WHERE ");
    Ok(())
}

/// A model's row and its value in a counter column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnValue {
    pub key: RawKey,
    pub value: i64,
}

impl FromCounterRow for ColumnValue {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(ColumnValue {
            key: super::read_key(row)?,
            value: DB::read_big_int(row, VALUE)?,
        })
    }
    fn key_mut(&mut self) -> &mut RawKey {
        &mut self.key
    }
}

/// `UPDATE parent SET column = column + CASE WHEN <key> THEN ? … ELSE 0 END WHERE <keys>`: adds
/// each delta to its record's column (rows the caller holds locked).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddToColumn<'a> {
    pub column: &'a CacheSpec,
    pub deltas: &'a [(KeyValue<'a>, i64)],
}

impl<DB: CounterBackend> QueryFragment<DB> for AddToColumn<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let column = self.column;
        out.push_sql("UPDATE ");
        out.push_identifier(column.table)?;
        out.push_sql(" SET ");
        out.push_identifier(column.column)?;
        out.push_sql(" = ");
        out.push_identifier(column.column)?;
        out.push_sql(" + CASE");
        for (key, delta) in self.deltas {
            out.push_sql(" WHEN ");
            push_key_match(&mut out, column.key_columns, None, key)?;
            out.push_sql(" THEN ");
            DB::push_big_int(&mut out, delta)?;
        }
        out.push_sql(" ELSE 0 END WHERE ");
        push_keys_in(
            &mut out,
            column.key_columns,
            None,
            self.deltas,
            |(key, _)| key,
        )
    }
}

/// `UPDATE parent SET column = column WHERE 1 = 0` (SQLite): a write that changes nothing, run
/// first in a transaction that reads before it writes. It takes SQLite's one write lock at once,
/// waiting for it (the busy timeout), so that a writer committing between the read and the first
/// real write cannot make the transaction fail (`SQLITE_BUSY_SNAPSHOT`, which does not wait).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TakeWriteLock<'a>(pub &'a CacheSpec);

impl<DB: CounterBackend> QueryFragment<DB> for TakeWriteLock<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        out.push_identifier(self.0.table)?;
        out.push_sql(" SET ");
        out.push_identifier(self.0.column)?;
        out.push_sql(" = ");
        out.push_identifier(self.0.column)?;
        out.push_sql(" WHERE 1 = 0");
        Ok(())
    }
}

/// `UPDATE parent SET column = 0 WHERE <key> AND NOT EXISTS (<its claim>)`: `set` on an adopted
/// counter, which puts the whole value into the slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZeroBase<'a> {
    pub column: &'a CacheSpec,
    pub key: &'a KeyValue<'a>,
}

impl<DB: CounterBackend> QueryFragment<DB> for ZeroBase<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql("UPDATE ");
        out.push_identifier(self.column.table)?;
        out.push_sql(" SET ");
        out.push_identifier(self.column.column)?;
        out.push_sql(" = 0 WHERE ");
        push_key_match(&mut out, self.column.key_columns, None, self.key)?;
        push_unclaimed(&mut out, self.column)
    }
}

/// `SELECT CAST(COUNT(*) AS BIGINT) AS n FROM slotted_columns WHERE <its claim>`: 1 when the
/// column is a roll-up's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claimed<'a>(pub &'a CacheSpec);

impl<DB: CounterBackend> QueryFragment<DB> for Claimed<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(match DB::DIALECT {
            Dialect::Mysql => "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM ",
            Dialect::Sqlite | Dialect::Postgres => "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM ",
        });
        out.push_identifier(COLUMNS_TABLE)?;
        out.push_sql(" WHERE ");
        push_claim_match(&mut out, self.0)
    }
}

/// `INSERT INTO slotted_columns (…) SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM parent WHERE
/// column <> 0) ON CONFLICT DO NOTHING` (`INSERT IGNORE … FROM DUAL` on MySQL): claims the
/// column only if no row holds a count there, the check and the claim one statement. With
/// `whatever_it_holds`, without the check: the column of a counter that follows a child table,
/// whose values are at most an old copy of counts the triggers and the backfill count afresh
/// from the child rows (an aggregate column the application's own trigger kept).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub column: &'a CacheSpec,
    pub whatever_it_holds: bool,
}

impl<DB: CounterBackend> QueryFragment<DB> for Claim<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        // Once per column: not worth a statement kept on the connection.
        varies_with_batch(&mut out);
        out.push_sql(match DB::DIALECT {
            Dialect::Mysql => "INSERT IGNORE INTO ",
            Dialect::Sqlite | Dialect::Postgres => "INSERT INTO ",
        });
        out.push_identifier(COLUMNS_TABLE)?;
        out.push_sql(" (");
        push_list(&mut out, &[TABLE_NAME, COLUMN_NAME], |out, c| {
            out.push_identifier(c)
        })?;
        out.push_sql(") SELECT ");
        DB::push_text(&mut out, self.column.table)?;
        out.push_sql(", ");
        DB::push_text(&mut out, self.column.column)?;
        if DB::DIALECT == Dialect::Mysql {
            out.push_sql(" FROM DUAL");
        }
        if self.whatever_it_holds {
            // SQLite reads `ON CONFLICT` after a `SELECT` without `WHERE` as a join's `ON`.
            out.push_sql(" WHERE 1 = 1");
        } else {
            out.push_sql(" WHERE NOT EXISTS (SELECT 1 FROM ");
            out.push_identifier(self.column.table)?;
            out.push_sql(" WHERE ");
            out.push_identifier(self.column.column)?;
            out.push_sql(" <> 0)");
        }
        if DB::DIALECT != Dialect::Mysql {
            out.push_sql(" ON CONFLICT DO NOTHING");
        }
        Ok(())
    }
}

/// `SELECT <key as record_id…>, CAST(column AS BIGINT) AS slotted_value FROM parent WHERE
/// column <> 0 LIMIT 1`: a row whose column holds a count, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldsCounts<'a> {
    pub spec: &'a CounterSpec,
    pub column: &'a CacheSpec,
}

impl<DB: CounterBackend> QueryFragment<DB> for HoldsCounts<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        // Until the column is claimed: not worth a statement kept on the connection.
        varies_with_batch(&mut out);
        push_select_values(&mut out, self.spec, self.column)?;
        out.push_identifier(self.column.column)?;
        out.push_sql(" <> 0 LIMIT 1");
        Ok(())
    }
}

statement!(by_text: ColumnValues, AddToColumn, ZeroBase, Claimed, Claim, HoldsCounts, TakeWriteLock);
