//! The writes of the hot path: an upsert into one slot, the `UPDATE` of a pre-created slot, and
//! the key-ordered multi-row upsert a buffer flushes.

use std::marker::PhantomData;

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::json_table::{self, JsonRows};
use super::slot::Use;
use super::{
    push_columns, push_key_values, push_list, push_qualified, push_record_type, push_row_columns,
    push_row_match, push_tuple, push_tuple_items, statement, ByText, SlotValue, COUNT,
};
use crate::dialect::{CounterBackend, Dialect};
use crate::key::KeyValue;
use crate::table::CounterSpec;

/// PostgreSQL and SQLite: `AND` a condition true when `count + delta` stays within BIGINT. An
/// overflowing sum would abort a PostgreSQL transaction and silently turn into a REAL on
/// SQLite; with the guard the statement updates no row instead, which the caller reports as
/// `Error::Overflow`. CASE keeps either subtraction in range. (MySQL raises error 1690, which
/// rolls back the statement alone.)
fn push_overflow_guard<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    current: impl Fn(&mut AstPass<'_, 'b, DB>) -> QueryResult<()>,
    delta: impl Fn(&mut AstPass<'_, 'b, DB>) -> QueryResult<()>,
) -> QueryResult<()> {
    out.push_sql(" AND CASE WHEN ");
    delta(out)?;
    out.push_sql(" >= 0 THEN ");
    current(out)?;
    out.push_sql(" <= 9223372036854775807 - ");
    delta(out)?;
    out.push_sql(" ELSE ");
    current(out)?;
    out.push_sql(" >= (-9223372036854775807 - 1) - ");
    delta(out)?;
    out.push_sql(" END");
    Ok(())
}

/// `ON CONFLICT (…) DO UPDATE SET count = t.count + excluded.count WHERE <no overflow>`
/// (PostgreSQL, SQLite), for one row or many.
fn push_on_conflict_add<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
) -> QueryResult<()> {
    let table = spec.table;
    out.push_sql(" ON CONFLICT (");
    push_row_columns(out, spec)?;
    out.push_sql(") DO UPDATE SET ");
    out.push_identifier(COUNT)?;
    out.push_sql(" = ");
    push_qualified(out, table, COUNT)?;
    out.push_sql(" + excluded.");
    out.push_identifier(COUNT)?;
    out.push_sql(" WHERE 1 = 1");
    push_overflow_guard(
        out,
        |out| push_qualified(out, table, COUNT),
        |out| {
            out.push_sql("excluded.");
            out.push_identifier(COUNT)
        },
    )
}

/// `INSERT [IGNORE] INTO t ([record_type,] record_id, …, [bucket,] slot, count) `.
pub(crate) fn push_insert_into<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
    ignore: bool,
) -> QueryResult<()> {
    out.push_sql(if ignore {
        "INSERT IGNORE INTO "
    } else {
        "INSERT INTO "
    });
    out.push_identifier(spec.table)?;
    out.push_sql(" (");
    push_row_columns(out, spec)?;
    out.push_sql(", ");
    out.push_identifier(COUNT)?;
    out.push_sql(") ");
    Ok(())
}

/// `INSERT … ON CONFLICT/ON DUPLICATE KEY … count = count + delta` into one slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddToSlot<'a, K = ByText> {
    pub spec: &'a CounterSpec,
    pub key: KeyValue<'a>,
    pub bucket: i64,
    pub slot: SlotValue,
    pub delta: i64,
    pub cache: PhantomData<K>,
}

impl<K> AddToSlot<'_, K> {
    /// Whether the statement writes only when the session holds a writer index (PostgreSQL,
    /// the `connection` strategy): then no row written says the session holds none, or that
    /// the overflow guard stopped the write, and [`AddOrTakeIndex`] tells which.
    pub(crate) fn needs_index<DB: CounterBackend>(&self) -> bool {
        DB::DIALECT == Dialect::Postgres && matches!(self.slot, SlotValue::Connection(_))
    }

    /// `INSERT INTO t (…) VALUES (…)`, the slot only read ([`Use::Write`]), or (`guarded`)
    /// `INSERT INTO t (…) SELECT … WHERE <the session holds a writer index>`, its slot
    /// [`Use::Match`]; then the upsert's `ON CONFLICT`/`ON DUPLICATE KEY` part.
    fn push_add<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        guarded: bool,
    ) -> QueryResult<()> {
        push_insert_into(out, self.spec, false)?;
        out.push_sql(if guarded { "SELECT " } else { "VALUES (" });
        push_tuple_items(
            out,
            self.spec,
            true,
            &self.key,
            &self.bucket,
            &self.slot,
            Some(&self.delta),
            if guarded { Use::Match } else { Use::Write },
        )?;
        if guarded {
            out.push_sql(" WHERE ");
            super::slot::push_holds_index(out);
        } else {
            out.push_sql(")");
        }
        match DB::DIALECT {
            Dialect::Mysql => {
                out.push_sql(" ON DUPLICATE KEY UPDATE ");
                out.push_identifier(COUNT)?;
                out.push_sql(" = ");
                out.push_identifier(COUNT)?;
                out.push_sql(" + ");
                DB::push_big_int(out, &self.delta)
            }
            Dialect::Sqlite | Dialect::Postgres => push_on_conflict_add(out, self.spec),
        }
    }
}

/// `INSERT … VALUES (…) ON CONFLICT/ON DUPLICATE KEY …`, the slot only read ([`Use::Write`]).
/// On PostgreSQL with the `connection` strategy ([`AddToSlot::needs_index`]) the row is
/// `SELECT`ed only when the session holds a writer index (its slot [`Use::Match`]), so that a
/// write in the steady state is executed, not read: a write that returns a row costs the
/// client about 3,000 instructions more, 13% of a write (`callgrind`, PostgreSQL 15).
impl<DB: CounterBackend, K> QueryFragment<DB> for AddToSlot<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.push_add(&mut out, self.needs_index::<DB>())
    }
}

/// PostgreSQL, the `connection` strategy: the write after an [`AddToSlot`] that wrote nothing.
/// It writes to the session's writer slot, or, in a session that holds no index, to its
/// connection's slot ([`Use::Write`]), and returns the session's index
/// ([`super::slot::push_returning_index`]), empty when it holds none: a row when it wrote,
/// none when the overflow guard stopped it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddOrTakeIndex<'a, K = ByText>(pub AddToSlot<'a, K>);

impl<DB: CounterBackend, K> QueryFragment<DB> for AddOrTakeIndex<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.push_add(&mut out, false)?;
        super::slot::push_returning_index(&mut out);
        Ok(())
    }
}

/// `UPDATE t SET count = count + ? WHERE … AND slot = ?`: the write into a pre-created slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpdateSlot<'a, K = ByText>(pub AddToSlot<'a, K>);

impl<DB: CounterBackend, K> QueryFragment<DB> for UpdateSlot<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let AddToSlot {
            spec,
            key,
            bucket,
            slot,
            delta,
            ..
        } = &self.0;
        out.push_sql("UPDATE ");
        out.push_identifier(spec.table)?;
        out.push_sql(" SET ");
        out.push_identifier(COUNT)?;
        out.push_sql(" = ");
        out.push_identifier(COUNT)?;
        out.push_sql(" + ");
        DB::push_big_int(&mut out, delta)?;
        out.push_sql(" WHERE 1 = 1");
        push_record_type(&mut out, spec)?;
        out.push_sql(" AND ");
        push_row_match(&mut out, spec, key, bucket, slot)?;
        if DB::DIALECT != Dialect::Mysql {
            push_overflow_guard(
                &mut out,
                |out| out.push_identifier(COUNT),
                |out| DB::push_big_int(out, delta),
            )?;
        }
        Ok(())
    }
}

/// One row of a multi-row upsert: `(key, bucket, delta)`.
pub(crate) type DeltaRow<'a> = (KeyValue<'a>, i64, i64);

/// The multi-row upsert of a buffer flush, rows sorted by key so that concurrent flushes lock in
/// one order, every row into `slot`. SQLite: `INSERT … VALUES (…), (…) ON CONFLICT … DO UPDATE
/// SET count = t.count + excluded.count`. PostgreSQL: the same over `SELECT …, <slot>, … FROM
/// (VALUES (…), (…)) AS slotted_new (…)`, so the server's slot is written once in the text, not
/// once per row. MySQL, which has no `excluded` but the deprecated `VALUES(col)` (which Vitess
/// rejects): `INSERT … SELECT …, <slot>, … FROM JSON_TABLE(?, …) AS slotted_new ON DUPLICATE KEY
/// UPDATE count = t.count + slotted_new.count`, the rows one bound JSON text ([`json_table`]).
#[derive(Debug, Clone)]
pub(crate) struct AddRows<'a> {
    spec: &'a CounterSpec,
    slot: SlotValue,
    rows: &'a [DeltaRow<'a>],
    json: JsonRows,
}

impl<'a> AddRows<'a> {
    pub(crate) fn new(spec: &'a CounterSpec, slot: SlotValue, rows: &'a [DeltaRow<'a>]) -> Self {
        AddRows {
            spec,
            slot,
            rows,
            json: JsonRows::default(),
        }
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for AddRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        super::varies_with_batch(&mut out);
        let spec = self.spec;
        push_insert_into(&mut out, spec, false)?;
        if DB::DIALECT == Dialect::Sqlite {
            out.push_sql("VALUES ");
            push_list(&mut out, self.rows, |out, (key, bucket, delta)| {
                push_tuple(
                    out,
                    spec,
                    true,
                    key,
                    bucket,
                    &self.slot,
                    Some(delta),
                    Use::Take,
                )
            })?;
            return push_on_conflict_add(&mut out, spec);
        }
        // `SELECT [record_type,] slotted_new.record_id, [slotted_new.bucket,] <slot>,
        // slotted_new.count FROM (<the rows>) AS slotted_new`
        out.push_sql("SELECT ");
        if let crate::table::Storage::Shared { record_type } = &spec.storage {
            DB::push_text(&mut out, record_type)?;
            out.push_sql(", ");
        }
        // The columns of `slotted_new`: the key's, [bucket,] count.
        let mut columns: Vec<&'static str> = spec.key_columns().to_vec();
        if spec.bucket.is_some() {
            columns.push(super::BUCKET);
        }
        columns.push(COUNT);
        for column in &columns[..columns.len() - 1] {
            out.push_sql("slotted_new.");
            out.push_identifier(column)?;
            out.push_sql(", ");
        }
        self.slot.push(&mut out)?;
        out.push_sql(", slotted_new.");
        out.push_identifier(COUNT)?;
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql(" FROM (VALUES ");
            push_list(&mut out, self.rows, |out, (key, bucket, delta)| {
                out.push_sql("(");
                push_key_values(out, key)?;
                if spec.bucket.is_some() {
                    out.push_sql(", ");
                    DB::push_big_int(out, bucket)?;
                }
                out.push_sql(", ");
                DB::push_big_int(out, delta)?;
                out.push_sql(")");
                Ok(())
            })?;
            out.push_sql(") AS slotted_new (");
            push_columns(&mut out, &columns, None)?;
            out.push_sql(")");
            return push_on_conflict_add(&mut out, spec);
        }
        out.push_sql(" FROM ");
        let json = self.json.text(self.rows, |row, (key, bucket, delta)| {
            row.row_id(spec, key, *bucket)?;
            row.int(delta);
            Ok(())
        })?;
        let columns = json_table::columns(spec, &[(COUNT, "BIGINT")])?;
        json_table::push(&mut out, json, &columns, "slotted_new")?;
        out.push_sql(" ON DUPLICATE KEY UPDATE ");
        out.push_identifier(COUNT)?;
        out.push_sql(" = ");
        push_qualified(&mut out, spec.table, COUNT)?;
        out.push_sql(" + slotted_new.");
        out.push_identifier(COUNT)
    }
}

statement!(cached: AddToSlot, AddOrTakeIndex, UpdateSlot);
statement!(by_text: AddRows);
