//! The one trait behind which each backend's SQL lives, and the statements it runs.
//!
//! Every statement is a small [`QueryFragment`] whose text depends only on the counter table,
//! the backend and the number of keys or rows, never on the values, which are all bound, so a
//! connection prepares each statement once. Diesel's statement cache finds most of them by
//! their text, which it builds on every call; the hot path (an increment, a total) is found by
//! the counter's type instead ([`ByType`]), so its text is built only once per connection.

use diesel::backend::Backend;
use diesel::connection::LoadConnection;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Integer, Nullable, SmallInt, Text};
use diesel::{QueryResult, RunQueryDsl};
use std::marker::PhantomData;

use crate::key::{KeyKind, KeyValue, RawKey};
use crate::table::{CacheSpec, CounterSpec, Storage};

/// The SQL dialects slotted writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite 3.35 or later (upsert, `RETURNING`).
    Sqlite,
    /// PostgreSQL 9.5 or later (upsert).
    Postgres,
    /// MySQL 5.7+ and MariaDB 10.3+ (`ON DUPLICATE KEY UPDATE`).
    Mysql,
}

impl Dialect {
    /// The lowercase name used in folder names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// One slot row, as maintenance reads or deletes it. `bucket` is 0 for counters without buckets.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    pub key: RawKey,
    pub bucket: i64,
    pub slot: i16,
    pub count: i64,
}

/// A Diesel backend slotted can write counters to: `Sqlite`, `Pg` and `Mysql`, each behind the
/// slotted-core feature of the same name (`sqlite`, `postgres`, `mysql`).
///
/// The compile error for a backend whose feature is off names only the features that are off
/// (one `cfg_attr` per combination): the exact one when a single feature is off.
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres", feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters do not support the `{Self}` backend",
        label = "this connection's backend",
        note = "slotted counters run on `Sqlite`, `Pg` and `Mysql` (SQLite, PostgreSQL, MySQL/MariaDB)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), feature = "postgres", feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `sqlite` feature: `slotted-core = {{ version = \"0.1\", features = [\"sqlite\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", not(feature = "postgres"), feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `postgres` feature: `slotted-core = {{ version = \"0.1\", features = [\"postgres\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres", not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `mysql` feature: `slotted-core = {{ version = \"0.1\", features = [\"mysql\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", not(feature = "postgres"), not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `postgres` for `Pg`, `mysql` for `Mysql` (`sqlite` is on)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), feature = "postgres", not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `sqlite` for `Sqlite`, `mysql` for `Mysql` (`postgres` is on)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), not(feature = "postgres"), feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `sqlite` for `Sqlite`, `postgres` for `Pg` (`mysql` is on)"
    )
)]
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "slotted-core has no backend feature on: enable `sqlite`, `postgres` or `mysql`, the one for `{Self}`"
    )
)]
pub trait CounterBackend: Backend + sealed::Sealed + Sized + 'static {
    /// The SQL this backend speaks.
    const DIALECT: Dialect;

    #[doc(hidden)]
    fn push_key<'b>(out: &mut AstPass<'_, 'b, Self>, key: &'b KeyValue<'_>) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_small_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i16) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_big_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i64) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b str) -> QueryResult<()>;
    #[doc(hidden)]
    fn load_sum<C: LoadConnection<Backend = Self>, K: CacheBy>(
        conn: &mut C,
        query: SumOne<'_, K>,
    ) -> QueryResult<Option<String>>;
    #[doc(hidden)]
    fn load_sums<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        scope: Scope<'_>,
    ) -> QueryResult<Vec<(RawKey, Option<String>)>>;
    #[doc(hidden)]
    fn load_rows<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        query: RowsQuery<'_>,
    ) -> QueryResult<Vec<SlotRow>>;
    #[doc(hidden)]
    fn load_keys<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        query: KeyPage<'_>,
    ) -> QueryResult<Vec<RawKey>>;
}

/// A connection whose backend slotted supports: `SqliteConnection`, `PgConnection`,
/// `MysqlConnection`, and r2d2's `PooledConnection`s of them.
///
/// Every counter call takes one and runs on it: inside its open transaction if it has one,
/// never opening one of its own (maintenance calls open one transaction per batch, which
/// becomes a savepoint inside yours).
///
/// A pool is not a connection: pass one of its connections, `&mut pool.get()?`. (rustc shows
/// this trait's message when the type is no `LoadConnection` at all; for a connection whose
/// backend is off it shows [`CounterBackend`]'s.)
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database connection slotted counters can run on",
    label = "expected a connection, such as `&mut SqliteConnection`",
    note = "a pool is not a connection: pass one of its connections, `&mut pool.get()?`",
    note = "counter calls take `&mut` of a Diesel connection (`SqliteConnection`, `PgConnection`, `MysqlConnection`) or of r2d2's `PooledConnection` of one"
)]
pub trait CounterConnection: LoadConnection<Backend: CounterBackend> {}

impl<C> CounterConnection for C
where
    C: LoadConnection,
    C::Backend: CounterBackend,
{
}

const RECORD_TYPE: &str = "record_type";
const RECORD_ID: &str = "record_id";
const BUCKET: &str = "bucket";
const SLOT: &str = "slot";
const COUNT: &str = "count";

/// Which buckets of a bucketed counter a statement touches; `All` for other counters.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buckets {
    All,
    /// `from <= bucket < to`.
    Range(i64, i64),
    /// `bucket < before`.
    Before(i64),
}

/// The rows of some records of one counter: `WHERE [record_type = ? AND] record_id IN (…)
/// [AND bucket …]`. An empty key list means every record.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
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

    fn push_where<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        out.push_sql(" WHERE 1 = 1");
        push_record_type(out, self.spec)?;
        match self.keys {
            [] => {}
            [key] => {
                out.push_sql(" AND ");
                out.push_identifier(RECORD_ID)?;
                out.push_sql(" = ");
                DB::push_key(out, key)?;
            }
            keys => {
                out.push_sql(" AND ");
                out.push_identifier(RECORD_ID)?;
                out.push_sql(" IN (");
                push_list(out, keys, |out, key| DB::push_key(out, key))?;
                out.push_sql(")");
            }
        }
        match &self.buckets {
            Buckets::All => {}
            Buckets::Range(from, to) => {
                out.push_sql(" AND ");
                out.push_identifier(BUCKET)?;
                out.push_sql(" >= ");
                DB::push_big_int(out, from)?;
                out.push_sql(" AND ");
                out.push_identifier(BUCKET)?;
                out.push_sql(" < ");
                DB::push_big_int(out, to)?;
            }
            Buckets::Before(before) => {
                out.push_sql(" AND ");
                out.push_identifier(BUCKET)?;
                out.push_sql(" < ");
                DB::push_big_int(out, before)?;
            }
        }
        Ok(())
    }
}

fn push_record_type<'b, DB: CounterBackend>(
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

fn push_list<'b, DB: Backend, T>(
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

/// The primary-key columns before `slot`, as a comma-separated list.
fn push_row_columns<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
) -> QueryResult<()> {
    if matches!(spec.storage, Storage::Shared { .. }) {
        out.push_identifier(RECORD_TYPE)?;
        out.push_sql(", ");
    }
    out.push_identifier(RECORD_ID)?;
    if spec.bucket.is_some() {
        out.push_sql(", ");
        out.push_identifier(BUCKET)?;
    }
    out.push_sql(", ");
    out.push_identifier(SLOT)
}

/// One row's values in the order of [`push_row_columns`], then `count` if given.
fn push_row_values<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b i16,
    count: Option<&'b i64>,
) -> QueryResult<()> {
    push_tuple(out, spec, true, key, bucket, slot, count)
}

/// `([record_type, ]key, [bucket, ]slot[, count])`, `record_type` only for shared storage and
/// when `with_record_type`.
fn push_tuple<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    with_record_type: bool,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b i16,
    count: Option<&'b i64>,
) -> QueryResult<()> {
    out.push_sql("(");
    if let (true, Storage::Shared { record_type }) = (with_record_type, &spec.storage) {
        DB::push_text(out, record_type)?;
        out.push_sql(", ");
    }
    DB::push_key(out, key)?;
    if spec.bucket.is_some() {
        out.push_sql(", ");
        DB::push_big_int(out, bucket)?;
    }
    out.push_sql(", ");
    DB::push_small_int(out, slot)?;
    if let Some(count) = count {
        out.push_sql(", ");
        DB::push_big_int(out, count)?;
    }
    out.push_sql(")");
    Ok(())
}

/// `record_id = ? [AND bucket = ?] AND slot = ?`: one slot row of the counter.
fn push_row_match<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &CounterSpec,
    key: &'b KeyValue<'_>,
    bucket: &'b i64,
    slot: &'b i16,
) -> QueryResult<()> {
    out.push_identifier(RECORD_ID)?;
    out.push_sql(" = ");
    DB::push_key(out, key)?;
    if spec.bucket.is_some() {
        out.push_sql(" AND ");
        out.push_identifier(BUCKET)?;
        out.push_sql(" = ");
        DB::push_big_int(out, bucket)?;
    }
    out.push_sql(" AND ");
    out.push_identifier(SLOT)?;
    out.push_sql(" = ");
    DB::push_small_int(out, slot)
}

/// `bucket`, or a BIGINT 0 for counters without buckets.
fn push_bucket_or_zero<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
) -> QueryResult<()> {
    if spec.bucket.is_some() {
        return out.push_identifier(BUCKET);
    }
    out.push_sql(match DB::DIALECT {
        Dialect::Mysql => "CAST(0 AS SIGNED)",
        Dialect::Sqlite | Dialect::Postgres => "CAST(0 AS BIGINT)",
    });
    Ok(())
}

fn push_qualified<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    table: &str,
    column: &str,
) -> QueryResult<()> {
    out.push_identifier(table)?;
    out.push_sql(".");
    out.push_identifier(column)
}

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

/// How Diesel's per-connection statement cache finds a prepared statement: by its SQL text
/// ([`ByText`]: Diesel builds the text on every call to look it up), or by a Rust type
/// ([`ByType`]: the text is built once, when the statement is first prepared).
#[doc(hidden)]
pub trait CacheBy: 'static {
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
/// is fixed by `T::SPEC` (the hot path: an increment, a total).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ByType<T>(PhantomData<T>);

impl<T: 'static> CacheBy for ByType<T> {
    const BY_TYPE: bool = true;
}

/// For a statement whose text varies with the number of keys or rows it carries: prepared for
/// this call and closed after it, never kept in the connection's statement cache, which would
/// otherwise keep one prepared statement per batch size seen, forever (on MySQL and MariaDB,
/// toward the server-wide `max_prepared_stmt_count`). Maintenance statements only, where a
/// prepare is small beside the batch.
fn varies_with_batch<DB: Backend>(out: &mut AstPass<'_, '_, DB>) {
    out.unsafe_to_cache_prepared();
}

/// `INSERT … ON CONFLICT/ON DUPLICATE KEY … count = count + delta` into one slot.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct AddToSlot<'a, K = ByText> {
    pub spec: &'a CounterSpec,
    pub key: KeyValue<'a>,
    pub bucket: i64,
    pub slot: i16,
    pub delta: i64,
    pub cache: PhantomData<K>,
}

impl<DB: CounterBackend, K> QueryFragment<DB> for AddToSlot<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let table = self.spec.table;
        out.push_sql("INSERT INTO ");
        out.push_identifier(table)?;
        out.push_sql(" (");
        push_row_columns(&mut out, self.spec)?;
        out.push_sql(", ");
        out.push_identifier(COUNT)?;
        out.push_sql(") VALUES ");
        push_row_values(
            &mut out,
            self.spec,
            &self.key,
            &self.bucket,
            &self.slot,
            Some(&self.delta),
        )?;
        match DB::DIALECT {
            Dialect::Mysql => {
                out.push_sql(" ON DUPLICATE KEY UPDATE ");
                out.push_identifier(COUNT)?;
                out.push_sql(" = ");
                out.push_identifier(COUNT)?;
                out.push_sql(" + ");
                DB::push_big_int(&mut out, &self.delta)?;
            }
            Dialect::Sqlite | Dialect::Postgres => {
                out.push_sql(" ON CONFLICT (");
                push_row_columns(&mut out, self.spec)?;
                out.push_sql(") DO UPDATE SET ");
                out.push_identifier(COUNT)?;
                out.push_sql(" = ");
                push_qualified(&mut out, table, COUNT)?;
                out.push_sql(" + excluded.");
                out.push_identifier(COUNT)?;
                out.push_sql(" WHERE 1 = 1");
                push_overflow_guard(
                    &mut out,
                    |out| push_qualified(out, table, COUNT),
                    |out| {
                        out.push_sql("excluded.");
                        out.push_identifier(COUNT)
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// `UPDATE t SET count = count + ? WHERE … AND slot = ?`: the write into a pre-created slot.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct UpdateSlot<'a, K = ByText>(pub AddToSlot<'a, K>);

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

/// `CAST(SUM(count) AS TEXT)`: the sum is NUMERIC on PostgreSQL and DECIMAL on MySQL; as text
/// it converts to `i64` exactly, or says by how much it does not fit.
fn push_sum_as_text<DB: CounterBackend>(out: &mut AstPass<'_, '_, DB>) -> QueryResult<()> {
    out.push_sql("CAST(SUM(");
    out.push_identifier(COUNT)?;
    out.push_sql(match DB::DIALECT {
        Dialect::Mysql => ") AS CHAR)",
        Dialect::Sqlite | Dialect::Postgres => ") AS TEXT)",
    });
    Ok(())
}

/// `SELECT CAST(SUM(count) AS TEXT) FROM t WHERE …`: one row, NULL when no slot.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct SumOne<'a, K = ByText>(pub Scope<'a>, pub PhantomData<K>);

impl<DB: CounterBackend, K> QueryFragment<DB> for SumOne<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        push_sum_as_text(&mut out)?;
        out.push_sql(" FROM ");
        out.push_identifier(self.0.spec.table)?;
        self.0.push_where(&mut out)
    }
}

impl<K> Query for SumOne<'_, K> {
    type SqlType = Nullable<Text>;
}

/// `SELECT record_id, CAST(SUM(count) AS TEXT) FROM t WHERE … GROUP BY record_id`.
#[doc(hidden)]
#[derive(Debug)]
pub struct SumMany<'a, ST>(pub Scope<'a>, PhantomData<ST>);

impl<DB: CounterBackend, ST> QueryFragment<DB> for SumMany<'_, ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        out.push_identifier(RECORD_ID)?;
        out.push_sql(", ");
        push_sum_as_text(&mut out)?;
        out.push_sql(" FROM ");
        out.push_identifier(self.0.spec.table)?;
        self.0.push_where(&mut out)?;
        out.push_sql(" GROUP BY ");
        out.push_identifier(RECORD_ID)
    }
}

impl<ST: 'static> Query for SumMany<'_, ST> {
    type SqlType = (ST, Nullable<Text>);
}

/// Statements that return whole slot rows: `(record_id, bucket, slot, count)`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum RowsQuery<'a> {
    /// `SELECT … ORDER BY record_id, bucket, slot FOR UPDATE`: locks in key order
    /// (PostgreSQL, MySQL).
    Lock(Scope<'a>),
    /// `DELETE … RETURNING …`: exactly the rows deleted, at their latest values (SQLite).
    DeleteReturning(Scope<'a>),
}

#[doc(hidden)]
#[derive(Debug)]
pub struct Rows<'a, ST>(pub RowsQuery<'a>, PhantomData<ST>);

impl<DB: CounterBackend, ST> QueryFragment<DB> for Rows<'_, ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let push_columns = |out: &mut AstPass<'_, 'b, DB>, spec: &CounterSpec| {
            out.push_identifier(RECORD_ID)?;
            out.push_sql(", ");
            push_bucket_or_zero(out, spec)?;
            out.push_sql(", ");
            out.push_identifier(SLOT)?;
            out.push_sql(", ");
            out.push_identifier(COUNT)
        };
        match &self.0 {
            RowsQuery::Lock(scope) => {
                out.push_sql("SELECT ");
                push_columns(&mut out, scope.spec)?;
                out.push_sql(" FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                out.push_sql(" ORDER BY ");
                out.push_identifier(RECORD_ID)?;
                if scope.spec.bucket.is_some() {
                    out.push_sql(", ");
                    out.push_identifier(BUCKET)?;
                }
                out.push_sql(", ");
                out.push_identifier(SLOT)?;
                out.push_sql(" FOR UPDATE");
            }
            RowsQuery::DeleteReturning(scope) => {
                out.push_sql("DELETE FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                out.push_sql(" RETURNING ");
                push_columns(&mut out, scope.spec)?;
            }
        }
        Ok(())
    }
}

impl<ST: 'static> Query for Rows<'_, ST> {
    type SqlType = (ST, BigInt, SmallInt, BigInt);
}

/// `WHERE ([record_type,] record_id, [bucket,] slot) IN ((…), …)` (MySQL): exactly `rows`, each
/// found by its whole primary key, so that after the locking read a fold touches exactly the rows
/// it holds. A list of one row is written twice: MariaDB turns `(…) IN ((…))` into a row
/// equality, which it does not look up by the key, and an `UPDATE` or `DELETE` scanning the table
/// in REPEATABLE READ locks every row it scans.
fn push_where_rows<'b, DB: CounterBackend, R>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    rows: &'b [R],
    row: impl Fn(&'b R) -> (&'b KeyValue<'b>, &'b i64, &'b i16),
) -> QueryResult<()> {
    out.push_sql(" WHERE (");
    push_row_columns(out, spec)?;
    out.push_sql(") IN (");
    let push_row = |out: &mut AstPass<'_, 'b, DB>, r: &'b R| {
        let (key, bucket, slot) = row(r);
        push_row_values(out, spec, key, bucket, slot, None)
    };
    push_list(out, rows, push_row)?;
    if let [only] = rows {
        out.push_sql(", ");
        push_row(out, only)?;
    }
    out.push_sql(")");
    Ok(())
}

/// `(VALUES (?, [?,] ?[, ?]), …) AS slotted_rows (record_id, [bucket,] slot[, count]) WHERE
/// [t.record_type = ? AND] t.record_id = slotted_rows.record_id AND …` (PostgreSQL): `rows` as a
/// table joined to the counter table by its primary key. PostgreSQL does not look a row
/// constructor `IN` list up by the key: with thousands of rows it scanned the table for each.
fn push_rows_join<'b, DB: CounterBackend, R>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    rows: &'b [R],
    row: impl Fn(&'b R) -> (&'b KeyValue<'b>, &'b i64, &'b i16, Option<&'b i64>),
) -> QueryResult<()> {
    let with_count = rows.first().is_some_and(|r| row(r).3.is_some());
    out.push_sql("(VALUES ");
    // `record_type` is one value for the whole statement: joined on below, not in each row.
    push_list(out, rows, |out, r| {
        let (key, bucket, slot, count) = row(r);
        push_tuple(out, spec, false, key, bucket, slot, count)
    })?;
    out.push_sql(") AS slotted_rows (");
    out.push_identifier(RECORD_ID)?;
    let mut joined = vec![RECORD_ID];
    if spec.bucket.is_some() {
        out.push_sql(", ");
        out.push_identifier(BUCKET)?;
        joined.push(BUCKET);
    }
    out.push_sql(", ");
    out.push_identifier(SLOT)?;
    joined.push(SLOT);
    if with_count {
        out.push_sql(", ");
        out.push_identifier(COUNT)?;
    }
    out.push_sql(") WHERE 1 = 1");
    if let Storage::Shared { record_type } = &spec.storage {
        out.push_sql(" AND ");
        push_qualified(out, spec.table, RECORD_TYPE)?;
        out.push_sql(" = ");
        DB::push_text(out, record_type)?;
    }
    for column in joined {
        out.push_sql(" AND ");
        push_qualified(out, spec.table, column)?;
        out.push_sql(" = slotted_rows.");
        out.push_identifier(column)?;
    }
    Ok(())
}

/// `DELETE FROM t WHERE (<key>) IN ((…), …)`, or on PostgreSQL `DELETE FROM t USING (VALUES …)
/// AS slotted_rows (…) WHERE <join>`: exactly the rows a `Lock` read (PostgreSQL, MySQL).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct DeleteRows<'a> {
    pub spec: &'a CounterSpec,
    pub rows: &'a [(KeyValue<'a>, i64, i16)],
}

impl<DB: CounterBackend> QueryFragment<DB> for DeleteRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql("DELETE FROM ");
        out.push_identifier(self.spec.table)?;
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql(" USING ");
            return push_rows_join(&mut out, self.spec, self.rows, |(k, b, s)| (k, b, s, None));
        }
        push_where_rows(&mut out, self.spec, self.rows, |(k, b, s)| (k, b, s))
    }
}

/// What a multi-row `INSERT` does with a row that exists already.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Fails: the rows are known not to exist.
    Fail,
    /// Leaves it, and does not count it (pre-creating slots): `INSERT IGNORE` on MySQL, not
    /// `ON DUPLICATE KEY UPDATE`, which Diesel's CLIENT_FOUND_ROWS would count as a row
    /// written. Keys are length-checked before they get here and the other values are integers,
    /// so IGNORE has no other error to hide.
    Skip,
    /// Leaves it, and on MySQL locks it exclusively at once (`ON DUPLICATE KEY UPDATE count =
    /// count`): `INSERT IGNORE` would take a shared lock that the locking read after it must
    /// upgrade, and two such upgrades deadlock. PostgreSQL's `DO NOTHING` locks nothing.
    Lock,
}

/// A multi-row `INSERT` of `(key, bucket, slot, count)` rows.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct InsertRows<'a> {
    pub spec: &'a CounterSpec,
    pub rows: &'a [(KeyValue<'a>, i64, i16, i64)],
    pub on_conflict: OnConflict,
}

impl<DB: CounterBackend> QueryFragment<DB> for InsertRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql(match (self.on_conflict, DB::DIALECT) {
            (OnConflict::Skip, Dialect::Mysql) => "INSERT IGNORE INTO ",
            _ => "INSERT INTO ",
        });
        out.push_identifier(self.spec.table)?;
        out.push_sql(" (");
        push_row_columns(&mut out, self.spec)?;
        out.push_sql(", ");
        out.push_identifier(COUNT)?;
        out.push_sql(") VALUES ");
        let spec = self.spec;
        push_list(&mut out, self.rows, |out, (key, bucket, slot, count)| {
            push_row_values(out, spec, key, bucket, slot, Some(count))
        })?;
        match (self.on_conflict, DB::DIALECT) {
            (OnConflict::Fail, _) | (OnConflict::Skip, Dialect::Mysql) => {}
            (OnConflict::Lock, Dialect::Mysql) => {
                out.push_sql(" ON DUPLICATE KEY UPDATE ");
                out.push_identifier(COUNT)?;
                out.push_sql(" = ");
                out.push_identifier(COUNT)?;
            }
            (_, Dialect::Sqlite | Dialect::Postgres) => out.push_sql(" ON CONFLICT DO NOTHING"),
        }
        Ok(())
    }
}

/// New counts for rows this transaction holds locked: `UPDATE t SET count = CASE WHEN <row> THEN
/// ? … ELSE count END WHERE (<key>) IN (…)`, or on PostgreSQL `UPDATE t SET count =
/// slotted_rows.count FROM (VALUES …) AS slotted_rows (…) WHERE <join>`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct UpdateRows<'a> {
    pub spec: &'a CounterSpec,
    pub rows: &'a [(KeyValue<'a>, i64, i16, i64)],
}

impl<DB: CounterBackend> QueryFragment<DB> for UpdateRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let spec = self.spec;
        out.push_sql("UPDATE ");
        out.push_identifier(spec.table)?;
        out.push_sql(" SET ");
        out.push_identifier(COUNT)?;
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql(" = slotted_rows.");
            out.push_identifier(COUNT)?;
            out.push_sql(" FROM ");
            return push_rows_join(&mut out, spec, self.rows, |(k, b, s, c)| (k, b, s, Some(c)));
        }
        out.push_sql(" = CASE");
        // `record_type` is fixed by the WHERE below.
        for (key, bucket, slot, count) in self.rows {
            out.push_sql(" WHEN ");
            push_row_match(&mut out, spec, key, bucket, slot)?;
            out.push_sql(" THEN ");
            DB::push_big_int(&mut out, count)?;
        }
        out.push_sql(" ELSE ");
        out.push_identifier(COUNT)?;
        out.push_sql(" END");
        push_where_rows(&mut out, spec, self.rows, |(k, b, s, _)| (k, b, s))
    }
}

/// A page of record keys in key order, after `after`: of the counter's records that need
/// compaction (`Compactable`), or of the model's table (`Parent`, for cache roll-ups).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum KeyPage<'a> {
    /// `all`: every record with rows in the scope, not only those with several rows or a 0.
    Compactable {
        scope: Scope<'a>,
        after: Option<KeyValue<'a>>,
        limit: i64,
        all: bool,
    },
    Parent {
        spec: &'a CounterSpec,
        cache: &'a CacheSpec,
        after: Option<KeyValue<'a>>,
        limit: i64,
    },
}

#[doc(hidden)]
#[derive(Debug)]
pub struct Keys<'a, ST>(pub KeyPage<'a>, PhantomData<ST>);

impl<DB: CounterBackend, ST> QueryFragment<DB> for Keys<'_, ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let (column, after, limit) = match &self.0 {
            KeyPage::Compactable {
                scope,
                after,
                limit,
                ..
            } => {
                // Records whose rows can shrink: several slots, or a zero count.
                out.push_sql("SELECT ");
                out.push_identifier(RECORD_ID)?;
                out.push_sql(" FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                (RECORD_ID, after, limit)
            }
            KeyPage::Parent {
                cache,
                after,
                limit,
                ..
            } => {
                out.push_sql("SELECT ");
                out.push_identifier(cache.key_column)?;
                out.push_sql(" FROM ");
                out.push_identifier(cache.table)?;
                out.push_sql(" WHERE 1 = 1");
                (cache.key_column, after, limit)
            }
        };
        if let Some(after) = after {
            out.push_sql(" AND ");
            out.push_identifier(column)?;
            out.push_sql(" > ");
            DB::push_key(&mut out, after)?;
        }
        if let KeyPage::Compactable { scope, all, .. } = &self.0 {
            out.push_sql(" GROUP BY ");
            out.push_identifier(RECORD_ID)?;
            if scope.spec.bucket.is_some() && !all {
                out.push_sql(", ");
                out.push_identifier(BUCKET)?;
            }
            if !all {
                out.push_sql(" HAVING COUNT(*) > 1 OR SUM(");
                out.push_identifier(COUNT)?;
                out.push_sql(") = 0");
            }
        }
        out.push_sql(" ORDER BY ");
        out.push_identifier(column)?;
        out.push_sql(" LIMIT ");
        DB::push_big_int(&mut out, limit)
    }
}

impl<ST: 'static> Query for Keys<'_, ST> {
    type SqlType = ST;
}

/// `UPDATE parent SET cache = CASE key WHEN ? THEN ? … ELSE cache END WHERE key IN (…)`, locking
/// the parent rows in key order, in one statement.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct RefreshCache<'a> {
    pub cache: &'a CacheSpec,
    /// Sorted by key.
    pub totals: &'a [(KeyValue<'a>, i64)],
}

impl<DB: CounterBackend> QueryFragment<DB> for RefreshCache<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let CacheSpec {
            table,
            key_column,
            column,
        } = *self.cache;
        out.push_sql("UPDATE ");
        out.push_identifier(table)?;
        out.push_sql(" SET ");
        out.push_identifier(column)?;
        out.push_sql(" = CASE ");
        push_qualified(&mut out, table, key_column)?;
        for (key, total) in self.totals {
            out.push_sql(" WHEN ");
            DB::push_key(&mut out, key)?;
            out.push_sql(" THEN ");
            DB::push_big_int(&mut out, total)?;
        }
        out.push_sql(" ELSE ");
        push_qualified(&mut out, table, column)?;
        out.push_sql(" END");
        let push_keys = |out: &mut AstPass<'_, 'b, DB>| {
            out.push_identifier(key_column)?;
            out.push_sql(" IN (");
            push_list(out, self.totals, |out, (key, _)| DB::push_key(out, key))?;
            out.push_sql(")");
            Ok::<(), diesel::result::Error>(())
        };
        match DB::DIALECT {
            // Lock the rows in key order first, in the same statement.
            Dialect::Postgres => {
                out.push_sql(" FROM (SELECT ");
                out.push_identifier(key_column)?;
                out.push_sql(" FROM ");
                out.push_identifier(table)?;
                out.push_sql(" WHERE ");
                push_keys(&mut out)?;
                out.push_sql(" ORDER BY ");
                out.push_identifier(key_column)?;
                out.push_sql(" FOR UPDATE) AS slotted_locked WHERE ");
                push_qualified(&mut out, table, key_column)?;
                out.push_sql(" = slotted_locked.");
                out.push_identifier(key_column)?;
            }
            Dialect::Mysql => {
                out.push_sql(" WHERE ");
                push_keys(&mut out)?;
                out.push_sql(" ORDER BY ");
                out.push_identifier(key_column)?;
            }
            Dialect::Sqlite => {
                out.push_sql(" WHERE ");
                push_keys(&mut out)?;
            }
        }
        Ok(())
    }
}

/// `DELETE FROM t WHERE … AND bucket < ?`: retention.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct DeleteScope<'a>(pub Scope<'a>);

impl<DB: CounterBackend> QueryFragment<DB> for DeleteScope<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql("DELETE FROM ");
        out.push_identifier(self.0.spec.table)?;
        self.0.push_where(&mut out)
    }
}

/// The statements of the hot path, cached by text or by counter type as `K` says.
macro_rules! cached_by {
    ($($ty:ident),*) => {$(
        impl<K: CacheBy> QueryId for $ty<'_, K> {
            type QueryId = ($ty<'static>, K);
            const HAS_STATIC_QUERY_ID: bool = K::BY_TYPE;
        }
        impl<Conn, K> RunQueryDsl<Conn> for $ty<'_, K> {}
    )*};
}
cached_by!(AddToSlot, UpdateSlot, SumOne);

/// Statements whose text varies with their arguments (how many keys or rows).
macro_rules! executable {
    ($($ty:ident),*) => {$(
        // Not static ids: Diesel then caches each prepared statement by its SQL text.
        impl QueryId for $ty<'_> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl<Conn> RunQueryDsl<Conn> for $ty<'_> {}
    )*};
}
executable!(
    DeleteRows,
    InsertRows,
    UpdateRows,
    RefreshCache,
    DeleteScope
);

/// Statements whose result's first column is the record key, typed by `ST`.
macro_rules! keyed {
    ($($ty:ident),*) => {$(
        impl<ST: 'static> QueryId for $ty<'_, ST> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl<Conn, ST> RunQueryDsl<Conn> for $ty<'_, ST> {}
    )*};
}
keyed!(SumMany, Rows, Keys);

/// After a statement that returns rows fails on MySQL or MariaDB, drops the connection's cached
/// prepared statements, resetting Diesel's statement cache to its default (`Unbounded`).
///
/// Such a statement can fail after its result set has begun: a deadlock or lock wait timeout in
/// a locking read or a SERIALIZABLE transaction's read, `KILL QUERY`, a statement time limit.
/// libmariadb then leaves the prepared statement in a state where executing it again waits
/// forever for rows the server never sends, and Diesel would keep it in the cache; closing it is
/// safe. Only failures pay: the next calls prepare their statements again.
pub(crate) fn forget_statements_on_mysql<C: diesel::Connection>(conn: &mut C) {
    use diesel::connection::CacheSize;
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    conn.set_prepared_statement_cache_size(CacheSize::Unbounded);
}

/// `result` of a read on `conn`, after [`forget_statements_on_mysql`] if it failed on MySQL.
fn after_read<DB: CounterBackend, C: diesel::Connection, T>(
    conn: &mut C,
    result: QueryResult<T>,
) -> QueryResult<T> {
    if DB::DIALECT == Dialect::Mysql
        && matches!(result, Err(diesel::result::Error::DatabaseError(..)))
    {
        forget_statements_on_mysql(conn);
    }
    result
}

/// One backend's implementation. Each arm binds with Diesel's own `ToSql` impls and loads with
/// its `FromSql` impls, which is why this is written once and stamped out per backend; the SQL
/// text is shared above and branches on [`CounterBackend::DIALECT`] where the dialects differ.
macro_rules! counter_backend {
    ($feature:literal, $backend:ty, $dialect:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $backend {}

        #[cfg(feature = $feature)]
        impl CounterBackend for $backend {
            const DIALECT: Dialect = $dialect;

            fn push_key<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                key: &'b KeyValue<'_>,
            ) -> QueryResult<()> {
                match key {
                    KeyValue::Integer(v) => out.push_bind_param::<Integer, i32>(v),
                    KeyValue::BigInt(v) => out.push_bind_param::<BigInt, i64>(v),
                    KeyValue::Text(v) => out.push_bind_param::<Text, str>(v),
                }
            }

            fn push_small_int<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                value: &'b i16,
            ) -> QueryResult<()> {
                out.push_bind_param::<SmallInt, i16>(value)
            }

            fn push_big_int<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                value: &'b i64,
            ) -> QueryResult<()> {
                out.push_bind_param::<BigInt, i64>(value)
            }

            fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b str) -> QueryResult<()> {
                out.push_bind_param::<Text, str>(value)
            }

            fn load_sum<C: LoadConnection<Backend = Self>, K: CacheBy>(
                conn: &mut C,
                query: SumOne<'_, K>,
            ) -> QueryResult<Option<String>> {
                let sum = query.get_result(conn);
                after_read::<Self, _, _>(conn, sum)
            }

            fn load_sums<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                scope: Scope<'_>,
            ) -> QueryResult<Vec<(RawKey, Option<String>)>> {
                let sums = by_key_kind!(scope.spec.key_column_kind(), |ST, K, raw| SumMany::<ST>(
                    scope,
                    PhantomData
                )
                .load::<(K, Option<String>)>(conn)
                .map(|rows| rows.into_iter().map(|(k, s)| (raw(k), s)).collect()));
                after_read::<Self, _, _>(conn, sums)
            }

            fn load_rows<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                query: RowsQuery<'_>,
            ) -> QueryResult<Vec<SlotRow>> {
                let spec = match query {
                    RowsQuery::Lock(scope) | RowsQuery::DeleteReturning(scope) => scope.spec,
                };
                let rows = by_key_kind!(spec.key_column_kind(), |ST, K, raw| Rows::<ST>(
                    query,
                    PhantomData
                )
                .load::<(K, i64, i16, i64)>(conn)
                .map(|rows| {
                    rows.into_iter()
                        .map(|(k, bucket, slot, count)| SlotRow {
                            key: raw(k),
                            bucket,
                            slot,
                            count,
                        })
                        .collect()
                }));
                after_read::<Self, _, _>(conn, rows)
            }

            fn load_keys<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                query: KeyPage<'_>,
            ) -> QueryResult<Vec<RawKey>> {
                let kind = match query {
                    KeyPage::Compactable { scope, .. } => scope.spec.key_column_kind(),
                    KeyPage::Parent { spec, .. } => spec.key,
                };
                let keys = by_key_kind!(kind, |ST, K, raw| Keys::<ST>(query, PhantomData)
                    .load::<K>(conn)
                    .map(|keys| keys.into_iter().map(raw).collect()));
                after_read::<Self, _, _>(conn, keys)
            }
        }
    };
}

/// Runs `$body` with `ST` the key's SQL type, `K` its Rust type and `raw` its `RawKey` variant.
macro_rules! by_key_kind {
    ($kind:expr, |$st:ident, $k:ident, $raw:ident| $body:expr) => {
        match $kind {
            KeyKind::Integer => {
                type $st = Integer;
                type $k = i32;
                let $raw = RawKey::Integer;
                $body
            }
            KeyKind::BigInt => {
                type $st = BigInt;
                type $k = i64;
                let $raw = RawKey::BigInt;
                $body
            }
            KeyKind::Text => {
                type $st = Text;
                type $k = String;
                let $raw = RawKey::Text;
                $body
            }
        }
    };
}

counter_backend!("sqlite", diesel::sqlite::Sqlite, Dialect::Sqlite);
counter_backend!("postgres", diesel::pg::Pg, Dialect::Postgres);
counter_backend!("mysql", diesel::mysql::Mysql, Dialect::Mysql);
