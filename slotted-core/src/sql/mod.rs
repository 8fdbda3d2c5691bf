//! Every statement slotted runs, as values: small [`QueryFragment`]s whose text depends only on
//! the counter table, the backend and the number of keys or rows, never on the values, which
//! are all bound. The same values run on a sync Diesel connection and on a diesel-async one
//! ([`crate::exec`]); nothing here does I/O.
//!
//! - [`write`]: the increment (an upsert into one slot), the prefill `UPDATE`, the multi-row
//!   upsert of a buffer flush.
//! - [`flush`]: the buffer's flush log, which makes a flush exactly-once.
//! - [`read`]: totals, pages of keys.
//! - [`transaction`]: `BEGIN` and `COMMIT` as prepared statements (the sync face on MySQL).
//! - [`adopt`]: an adopted column's part of the totals, absorb and release, the claims table.
//! - [`maintenance`]: the locking read, the row-exact `DELETE`/`UPDATE`/`INSERT` of a fold, the
//!   cache roll-up, retention.
//! - [`compact`], [`refresh`]: PostgreSQL's compaction and roll-up of a batch, each one
//!   statement on the server.
//!
//! The DDL of a counter table is in [`crate::migration`], as text for diesel CLI folders.

pub(crate) mod adopt;
pub(crate) mod compact;
pub(crate) mod diagnostics;
pub(crate) mod flush;
pub(crate) mod follow;
pub(crate) mod json_table;
pub(crate) mod lease;
pub(crate) mod maintenance;
pub(crate) mod read;
pub(crate) mod refresh;
pub(crate) mod slot;
pub(crate) mod transaction;
pub(crate) mod write;

use std::marker::PhantomData;

use diesel::backend::Backend;
use diesel::deserialize::{self, QueryableByName};
use diesel::query_builder::AstPass;
use diesel::row::{Field, NamedRow, Row};
use diesel::QueryResult;

use crate::dialect::CounterBackend;
use crate::key::{KeyValue, RawKey, KEY_COLUMNS};
use crate::table::{CounterSpec, Storage};

pub(crate) const RECORD_TYPE: &str = "record_type";
/// The first key column: a row's key is read from it and those after it (`record_id_2`…).
pub(crate) const RECORD_ID: &str = KEY_COLUMNS[0];
pub(crate) const BUCKET: &str = "bucket";
pub(crate) const SLOT: &str = "slot";
/// The slot compaction folds a record's rows into, which no writer writes: a record whose rows
/// are all in it has had nothing written since its last compaction (a pass of the maintainer
/// finds the records written since the last one by their rows in other slots, through the index
/// of unsettled rows).
pub(crate) const SETTLED_SLOT: i16 = -1;

/// The name of a counter table's index of unsettled rows: `<table>_unsettled`, or, past the
/// identifier lengths of MySQL (64) and PostgreSQL (63), a hash of it.
pub(crate) fn unsettled_index(table: &str) -> String {
    let name = format!("{table}_unsettled");
    if name.len() <= 60 {
        name
    } else {
        format!(
            "slotted_unsettled_{:016x}",
            crate::table::stable_hash(table.as_bytes())
        )
    }
}

pub(crate) const COUNT: &str = "count";
/// The alias of a `SUM` read back by name.
pub(crate) const TOTAL: &str = "slotted_total";

/// Which buckets of a bucketed counter a statement touches; `All` for other counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buckets {
    All,
    /// `from <= bucket < to`.
    Range(i64, i64),
    /// `bucket < before`.
    Before(i64),
}

/// The rows of some records of one counter: `WHERE [record_type = ? AND] record_id IN (…)
/// [AND bucket …]`. An empty key list means every record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub spec: &'a CounterSpec,
    pub keys: &'a [KeyValue<'a>],
    pub buckets: Buckets,
}

impl<'a> Scope<'a> {
    pub fn new(spec: &'a CounterSpec, keys: &'a [KeyValue<'a>]) -> Self {
        Scope {
            spec,
            keys,
            buckets: Buckets::All,
        }
    }

    pub(crate) fn push_where<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        out.push_sql(" WHERE 1 = 1");
        push_record_type(out, self.spec)?;
        let columns = self.spec.key_columns();
        match self.keys {
            [] => {}
            [key] => {
                out.push_sql(" AND ");
                push_key_match(out, columns, None, key)?;
            }
            keys => {
                out.push_sql(" AND ");
                push_keys_in(out, columns, None, keys, |key| key)?;
            }
        }
        let mut bound = |op: &str, value: &'b i64| {
            out.push_sql(" AND ");
            out.push_identifier(BUCKET)?;
            out.push_sql(op);
            DB::push_big_int(out, value)
        };
        match &self.buckets {
            Buckets::All => Ok(()),
            Buckets::Range(from, to) => bound(" >= ", from).and_then(|()| bound(" < ", to)),
            Buckets::Before(before) => bound(" < ", before),
        }
    }
}

pub(crate) fn push_record_type<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
) -> QueryResult<()> {
    if let Storage::Shared { record_type } = &spec.storage {
        out.push_sql(" AND ");
        out.push_identifier(RECORD_TYPE)?;
        out.push_sql(" = ");
        DB::push_text(out, record_type)?;
    }
    Ok(())
}

pub(crate) fn push_list<'b, DB: Backend, T>(
    out: &mut AstPass<'_, 'b, DB>,
    items: &'b [T],
    mut push: impl FnMut(&mut AstPass<'_, 'b, DB>, &'b T) -> QueryResult<()>,
) -> QueryResult<()> {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        push(out, item)?;
    }
    Ok(())
}

/// The primary-key columns, ending with `slot`, as a comma-separated list.
pub(crate) fn push_row_columns<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
) -> QueryResult<()> {
    if matches!(spec.storage, Storage::Shared { .. }) {
        out.push_identifier(RECORD_TYPE)?;
        out.push_sql(", ");
    }
    push_columns(out, spec.key_columns(), None)?;
    if spec.bucket.is_some() {
        out.push_sql(", ");
        out.push_identifier(BUCKET)?;
    }
    out.push_sql(", ");
    out.push_identifier(SLOT)
}

pub(crate) use crate::slot::SlotValue;

/// One row's values in the order of [`push_row_columns`], then `count` if given; `record_type`
/// only for shared storage and when `with_record_type`; the slot as `slot_use` says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_tuple<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    with_record_type: bool,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b SlotValue,
    count: Option<&'b i64>,
    slot_use: slot::Use,
) -> QueryResult<()> {
    out.push_sql("(");
    push_tuple_items(
        out,
        spec,
        with_record_type,
        key,
        bucket,
        slot,
        count,
        slot_use,
    )?;
    out.push_sql(")");
    Ok(())
}

/// [`push_tuple`]'s values without the parentheses: a `SELECT` list.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_tuple_items<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    with_record_type: bool,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b SlotValue,
    count: Option<&'b i64>,
    slot_use: slot::Use,
) -> QueryResult<()> {
    if let (true, Storage::Shared { record_type }) = (with_record_type, &spec.storage) {
        DB::push_text(out, record_type)?;
        out.push_sql(", ");
    }
    push_key_values(out, key)?;
    if spec.bucket.is_some() {
        out.push_sql(", ");
        DB::push_big_int(out, bucket)?;
    }
    out.push_sql(", ");
    slot.push_as(out, slot_use)?;
    if let Some(count) = count {
        out.push_sql(", ");
        DB::push_big_int(out, count)?;
    }
    Ok(())
}

/// `record_id = ? [AND bucket = ?] AND slot = ?`: one slot row of the counter.
pub(crate) fn push_row_match<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &CounterSpec,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b SlotValue,
) -> QueryResult<()> {
    push_key_match(out, spec.key_columns(), None, key)?;
    if spec.bucket.is_some() {
        out.push_sql(" AND ");
        out.push_identifier(BUCKET)?;
        out.push_sql(" = ");
        DB::push_big_int(out, bucket)?;
    }
    out.push_sql(" AND ");
    out.push_identifier(SLOT)?;
    out.push_sql(" = ");
    slot.push_match(out)
}

/// Columns, comma-separated, each qualified by `table` when given: a key's (`record_id[,
/// record_id_2…]`, or the parent table's), or a derived table's.
pub(crate) fn push_columns<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    columns: &[&str],
    table: Option<&str>,
) -> QueryResult<()> {
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        if let Some(table) = table {
            out.push_identifier(table)?;
            out.push_sql(".");
        }
        out.push_identifier(column)?;
    }
    Ok(())
}

/// A key's values, one bind per column, comma-separated.
pub(crate) fn push_key_values<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    key: &'b KeyValue<'_>,
) -> QueryResult<()> {
    push_list(out, key.parts(), |out, part| DB::push_key_part(out, part))
}

/// `record_id = ? [AND record_id_2 = ?…]`: the rows of one key (columns qualified by `table`
/// when given).
pub(crate) fn push_key_match<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    columns: &[&str],
    table: Option<&str>,
    key: &'b KeyValue<'_>,
) -> QueryResult<()> {
    for (i, (column, part)) in columns.iter().zip(key.parts()).enumerate() {
        if i > 0 {
            out.push_sql(" AND ");
        }
        push_columns(out, &[column], table)?;
        out.push_sql(" = ");
        DB::push_key_part(out, part)?;
    }
    Ok(())
}

/// The rows of several keys: `record_id IN (?, …)`; for a composite key `((record_id = ? AND
/// record_id_2 = ?) OR …)`, which every backend looks up by the key (SQLite plans a row-value
/// `IN (VALUES …)` list as a scan of the table, and MariaDB and PostgreSQL plan one no better).
/// The `OR`s nest as a balanced tree, not a chain: SQLite refuses an expression more than 1,000
/// deep.
pub(crate) fn push_keys_in<'b, DB: CounterBackend, T>(
    out: &mut AstPass<'_, 'b, DB>,
    columns: &[&str],
    table: Option<&str>,
    items: &'b [T],
    key: impl Fn(&'b T) -> &'b KeyValue<'b>,
) -> QueryResult<()> {
    if let [column] = columns {
        push_columns(out, &[column], table)?;
        out.push_sql(" IN (");
        push_list(out, items, |out, item| push_key_values(out, key(item)))?;
        out.push_sql(")");
        return Ok(());
    }
    push_or_tree(out, columns, table, items, &key)
}

/// `(<left half> OR <right half>)`, down to `(<key match>)`.
fn push_or_tree<'b, DB: CounterBackend, T>(
    out: &mut AstPass<'_, 'b, DB>,
    columns: &[&str],
    table: Option<&str>,
    items: &'b [T],
    key: &impl Fn(&'b T) -> &'b KeyValue<'b>,
) -> QueryResult<()> {
    out.push_sql("(");
    match items {
        [] => out.push_sql("1 = 0"),
        [one] => push_key_match(out, columns, table, key(one))?,
        many => {
            let (left, right) = many.split_at(many.len() / 2);
            push_or_tree(out, columns, table, left, key)?;
            out.push_sql(" OR ");
            push_or_tree(out, columns, table, right, key)?;
        }
    }
    out.push_sql(")");
    Ok(())
}

/// The keys after `key` in key order: `record_id > ?`; for a composite key `(record_id >= ? AND
/// (record_id > ? OR (record_id = ? AND record_id_2 > ?)))`. The leading `>=` is what every
/// backend reads the key's index from: PostgreSQL takes the `OR` alone as a filter over a
/// scan from the first key, which made each keyset page cost the pages before it.
pub(crate) fn push_key_after<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    columns: &[&str],
    key: &'b KeyValue<'_>,
) -> QueryResult<()> {
    let parts = key.parts();
    let len = columns.len().min(parts.len());
    if len > 1 {
        out.push_sql("(");
        out.push_identifier(columns[0])?;
        out.push_sql(" >= ");
        DB::push_key_part(out, &parts[0])?;
        out.push_sql(" AND ");
    }
    // `(a > ? OR (a = ? AND (b > ? OR (b = ? AND c > ?))))`, the last column `c > ?` alone.
    for i in 0..len {
        if i + 1 < len {
            out.push_sql("(");
        }
        out.push_identifier(columns[i])?;
        out.push_sql(" > ");
        DB::push_key_part(out, &parts[i])?;
        if i + 1 < len {
            out.push_sql(" OR (");
            out.push_identifier(columns[i])?;
            out.push_sql(" = ");
            DB::push_key_part(out, &parts[i])?;
            out.push_sql(" AND ");
        }
    }
    for _ in 1..len {
        out.push_sql("))");
    }
    if len > 1 {
        out.push_sql(")");
    }
    Ok(())
}

pub(crate) fn push_qualified<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    table: &str,
    column: &str,
) -> QueryResult<()> {
    out.push_identifier(table)?;
    out.push_sql(".");
    out.push_identifier(column)
}

/// How Diesel's per-connection statement cache finds a prepared statement: by its SQL text
/// ([`ByText`]: Diesel builds the text on every call to look it up), or by a Rust type
/// ([`ByType`]: the text is built once, when the statement is first prepared).
#[doc(hidden)]
pub trait CacheBy: Send + 'static {
    const BY_TYPE: bool;
}

/// Cached by SQL text: for statements whose text varies with their arguments.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum ByText {}

impl CacheBy for ByText {
    const BY_TYPE: bool = false;
}

/// Cached by the counter table type `T`: only for a statement whose text, on one connection,
/// is fixed by `T::SPEC` (the hot path: an increment, a total). `fn() -> T` keeps it `Send`
/// and `Sync` whatever `T` is, so futures holding a statement stay `Send`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ByType<T>(PhantomData<fn() -> T>);

impl<T: 'static> CacheBy for ByType<T> {
    const BY_TYPE: bool = true;
}

/// For a statement whose text varies with the number of keys or rows it carries: prepared for
/// this call and closed after it, never kept in the connection's statement cache, which would
/// otherwise keep one prepared statement per batch size seen, forever (on MySQL and MariaDB,
/// toward the server-wide `max_prepared_stmt_count`). Maintenance statements only, where a
/// prepare is small beside the batch.
pub(crate) fn varies_with_batch<DB: Backend>(out: &mut AstPass<'_, '_, DB>) {
    out.unsafe_to_cache_prepared();
}

/// A row type a statement returns, read by column name (the statements' `SqlType` is
/// `Untyped`).
pub(crate) trait FromCounterRow: Sized + Send + 'static {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self>;
    /// The row's key, to conform to the counter's key kinds (`exec::load_keyed`).
    fn key_mut(&mut self) -> &mut RawKey;
}

/// A row of type `R`, as Diesel loads it (`QueryableByName` is Diesel's, and `R` may be a tuple).
pub(crate) struct CounterRow<R>(pub R);

impl<DB: CounterBackend, R: FromCounterRow> QueryableByName<DB> for CounterRow<R> {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        R::from_row(row).map(CounterRow)
    }
}

/// A row's key and its `slotted_total` as text, or `None` when the total is NULL (a summary row
/// that names no record). The key is read by the server's types: the caller conforms it to the
/// counter's key kinds.
pub(crate) fn read_keyed_total<'a, DB: CounterBackend>(
    row: &impl NamedRow<'a, DB>,
) -> deserialize::Result<Option<(RawKey, String)>> {
    match DB::read_nullable_text(row, TOTAL)? {
        Some(total) => Ok(Some((read_key(row)?, total))),
        None => Ok(None),
    }
}

/// A row's key: `record_id`, and `record_id_2`… when the row has them (a composite key), each
/// read by the type the server sent it as.
pub(crate) fn read_key<'a, DB: CounterBackend>(
    row: &impl NamedRow<'a, DB>,
) -> deserialize::Result<RawKey> {
    let part = |column: &str| -> Option<deserialize::Result<crate::key::RawPart>> {
        let field = Row::get(row, column)?;
        let part = match field.value() {
            Some(value) => DB::read_key_part(value),
            None => Err(format!("the key column `{column}` is NULL").into()),
        };
        Some(part)
    };
    let first = part(RECORD_ID).ok_or("the row has no `record_id` column")??;
    // A one-column key, the common case, allocates nothing.
    let Some(second) = part(KEY_COLUMNS[1]) else {
        return Ok(RawKey::one(first));
    };
    let mut parts = vec![first, second?];
    for column in &KEY_COLUMNS[2..] {
        match part(column) {
            Some(value) => parts.push(value?),
            None => break,
        }
    }
    Ok(RawKey::from_parts(parts).expect("at least one part"))
}

/// One slot row, as maintenance reads or deletes it. `bucket` is 0 for counters without buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRow {
    pub key: RawKey,
    pub bucket: i64,
    pub slot: i16,
    pub count: i64,
}

impl FromCounterRow for SlotRow {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(SlotRow {
            key: read_key(row)?,
            bucket: DB::read_big_int(row, BUCKET)?,
            slot: DB::read_small_int(row, SLOT)?,
            count: DB::read_big_int(row, COUNT)?,
        })
    }
    fn key_mut(&mut self) -> &mut RawKey {
        &mut self.key
    }
}

impl FromCounterRow for RawKey {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        read_key(row)
    }
    fn key_mut(&mut self) -> &mut RawKey {
        self
    }
}

/// A `SUM` as text (NUMERIC on PostgreSQL, DECIMAL on MySQL: as text it converts to `i64`
/// exactly, or says by how much it does not fit); `None` when there was no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sum(pub Option<String>);

impl<DB: CounterBackend> QueryableByName<DB> for Sum {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        DB::read_nullable_text(row, TOTAL).map(Sum)
    }
}

impl FromCounterRow for (RawKey, Sum) {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok((read_key(row)?, Sum(DB::read_nullable_text(row, TOTAL)?)))
    }
    fn key_mut(&mut self) -> &mut RawKey {
        &mut self.0
    }
}

/// Implements Diesel's `QueryId` and sync `RunQueryDsl` for a statement type.
///
/// `cached: T` (the hot path): cached by text or by counter type as its `K: CacheBy` says.
/// `by_text: T`: the statement's text varies with its arguments, so Diesel caches a prepared
/// statement by its text, or not at all ([`varies_with_batch`]).
macro_rules! statement {
    (cached: $($ty:ident),*) => {$(
        impl<K: $crate::sql::CacheBy> diesel::query_builder::QueryId for $ty<'_, K> {
            type QueryId = ($ty<'static>, K);
            const HAS_STATIC_QUERY_ID: bool = K::BY_TYPE;
        }
        impl<Conn, K> diesel::RunQueryDsl<Conn> for $ty<'_, K> {}
    )*};
    (by_text: $($ty:ident),*) => {$(
        impl diesel::query_builder::QueryId for $ty<'_> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl<Conn> diesel::RunQueryDsl<Conn> for $ty<'_> {}
    )*};
}
pub(crate) use statement;
