//! The statements of maintenance: the locking read of a fold, the row-exact `DELETE`, `UPDATE`
//! and `INSERT` that put its result back, the cache roll-up, retention.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::json_table::{self, JsonRows};
use super::slot::Use;
use super::{
    push_columns, push_key_match, push_key_values, push_keys_in, push_list, push_qualified,
    push_tuple, statement, varies_with_batch, Scope, SlotValue, BUCKET, COUNT, RECORD_TYPE, SLOT,
};
use crate::dialect::{CounterBackend, Dialect};
use crate::key::KeyValue;
use crate::table::{CacheSpec, CounterSpec, Storage};

/// A slot row's identity: `(key, bucket, slot)`.
pub(crate) type RowId<'a> = (KeyValue<'a>, i64, SlotValue);
/// A slot row with its count: `(key, bucket, slot, count)`.
pub(crate) type RowCount<'a> = (KeyValue<'a>, i64, SlotValue, i64);

/// `bucket`, or a BIGINT 0 named `bucket` for counters without buckets.
fn push_bucket_or_zero<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    spec: &CounterSpec,
) -> QueryResult<()> {
    if spec.bucket.is_some() {
        return out.push_identifier(BUCKET);
    }
    out.push_sql(match DB::DIALECT {
        Dialect::Mysql => "CAST(0 AS SIGNED) AS ",
        Dialect::Sqlite | Dialect::Postgres => "CAST(0 AS BIGINT) AS ",
    });
    out.push_identifier(BUCKET)?;
    Ok(())
}

/// Statements that return whole slot rows: `(record_id[, record_id_2…], bucket, slot, count)`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RowsQuery<'a> {
    /// `SELECT … ORDER BY record_id, bucket, slot FOR UPDATE [SKIP LOCKED]`: locks in key order
    /// (PostgreSQL, MySQL), with `skip_locked` only the rows no other transaction holds
    /// (PostgreSQL 9.5, MariaDB 10.6, MySQL 8.0 and later).
    Lock { scope: Scope<'a>, skip_locked: bool },
    /// The same `SELECT` with no lock: a consistent read, which waits for no writer.
    Read(Scope<'a>),
    /// `DELETE … RETURNING …`: exactly the rows deleted, at their latest values (SQLite).
    DeleteReturning(Scope<'a>),
}

#[derive(Debug)]
pub(crate) struct Rows<'a>(pub RowsQuery<'a>);

impl<DB: CounterBackend> QueryFragment<DB> for Rows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let push_row = |out: &mut AstPass<'_, 'b, DB>, spec: &CounterSpec| {
            push_columns(out, spec.key_columns(), None)?;
            out.push_sql(", ");
            push_bucket_or_zero(out, spec)?;
            out.push_sql(", ");
            out.push_identifier(SLOT)?;
            out.push_sql(", ");
            out.push_identifier(COUNT)
        };
        match &self.0 {
            RowsQuery::Lock { scope, .. } | RowsQuery::Read(scope) => {
                out.push_sql("SELECT ");
                push_row(&mut out, scope.spec)?;
                out.push_sql(" FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                out.push_sql(" ORDER BY ");
                push_columns(&mut out, scope.spec.key_columns(), None)?;
                if scope.spec.bucket.is_some() {
                    out.push_sql(", ");
                    out.push_identifier(BUCKET)?;
                }
                out.push_sql(", ");
                out.push_identifier(SLOT)?;
                if let RowsQuery::Lock { skip_locked, .. } = &self.0 {
                    out.push_sql(" FOR UPDATE");
                    if *skip_locked {
                        out.push_sql(" SKIP LOCKED");
                    }
                }
            }
            RowsQuery::DeleteReturning(scope) => {
                out.push_sql("DELETE FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                out.push_sql(" RETURNING ");
                push_row(&mut out, scope.spec)?;
            }
        }
        Ok(())
    }
}

/// `(VALUES (?, [?,] ?[, ?]), …) AS slotted_rows (record_id, [bucket,] slot[, count]) WHERE
/// [t.record_type = ? AND] t.record_id = slotted_rows.record_id AND …` (PostgreSQL): `rows` as a
/// table joined to the counter table by its primary key. PostgreSQL does not look a row
/// constructor `IN` list up by the key: with thousands of rows it scanned the table for each.
pub(crate) fn push_rows_join<'b, DB: CounterBackend, R>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    rows: &'b [R],
    row: impl Fn(&'b R) -> (&'b KeyValue<'b>, &'b i64, &'b SlotValue, Option<&'b i64>),
) -> QueryResult<()> {
    let with_count = rows.first().is_some_and(|r| row(r).3.is_some());
    out.push_sql("(VALUES ");
    // `record_type` is one value for the whole statement: joined on below, not in each row.
    push_list(out, rows, |out, r| {
        let (key, bucket, slot, count) = row(r);
        push_tuple(out, spec, false, key, bucket, slot, count, Use::Take)
    })?;
    out.push_sql(") AS slotted_rows (");
    let joined = row_id_columns(spec);
    push_columns(out, &joined, None)?;
    if with_count {
        out.push_sql(", ");
        out.push_identifier(COUNT)?;
    }
    out.push_sql(") WHERE 1 = 1");
    push_names_rows(out, spec, &joined)
}

/// ` AND [t.record_type = ? AND] t.record_id = slotted_rows.record_id AND …` over `columns` (a
/// row's identity, [`row_id_columns`]): the counter table's row that a row of `slotted_rows`
/// names, for PostgreSQL's join ([`push_rows_join`]) and MySQL's ([`DeleteRows`]).
fn push_names_rows<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    columns: &[&str],
) -> QueryResult<()> {
    if let Storage::Shared { record_type } = &spec.storage {
        out.push_sql(" AND ");
        push_qualified(out, spec.table, RECORD_TYPE)?;
        out.push_sql(" = ");
        DB::push_text(out, record_type)?;
    }
    for column in columns {
        out.push_sql(" AND ");
        push_qualified(out, spec.table, column)?;
        out.push_sql(" = slotted_rows.");
        out.push_identifier(column)?;
    }
    Ok(())
}

/// A slot row's identity columns in the counter table, but `record_type`: the key's, [`bucket`,]
/// `slot`.
fn row_id_columns(spec: &CounterSpec) -> Vec<&'static str> {
    let mut columns = spec.key_columns().to_vec();
    if spec.bucket.is_some() {
        columns.push(BUCKET);
    }
    columns.push(SLOT);
    columns
}

/// `DELETE t FROM JSON_TABLE(?, …) AS slotted_rows STRAIGHT_JOIN t ON <join>` (MySQL), or
/// `DELETE FROM t USING (VALUES …) AS slotted_rows (…) WHERE <join>` (PostgreSQL): exactly the
/// rows a `Lock` read, each found by its primary key ([`json_table`], [`push_rows_join`]).
#[derive(Debug, Clone)]
pub(crate) struct DeleteRows<'a> {
    spec: &'a CounterSpec,
    rows: &'a [RowId<'a>],
    json: JsonRows,
}

impl<'a> DeleteRows<'a> {
    pub(crate) fn new(spec: &'a CounterSpec, rows: &'a [RowId<'a>]) -> Self {
        DeleteRows {
            spec,
            rows,
            json: JsonRows::default(),
        }
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for DeleteRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let spec = self.spec;
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql("DELETE FROM ");
            out.push_identifier(spec.table)?;
            out.push_sql(" USING ");
            return push_rows_join(&mut out, spec, self.rows, |(k, b, s)| (k, b, s, None));
        }
        let json = self.json.text(self.rows, |row, (key, bucket, slot)| {
            row.row_id(spec, key, *bucket)?;
            let SlotValue::Bound(slot) = slot else {
                return Err("a writer's slot".into());
            };
            row.int(slot);
            Ok(())
        })?;
        out.push_sql("DELETE ");
        out.push_identifier(spec.table)?;
        out.push_sql(" FROM ");
        let columns = json_table::columns(spec, &[(SLOT, "SMALLINT")])?;
        json_table::push(&mut out, json, &columns, "slotted_rows")?;
        out.push_sql(" STRAIGHT_JOIN ");
        out.push_identifier(spec.table)?;
        out.push_sql(" ON 1 = 1");
        push_names_rows(&mut out, spec, &row_id_columns(spec))
    }
}

/// `a.c = b.c AND …` over `columns`.
pub(crate) fn push_same_key<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    columns: &[&str],
    a: &str,
    b: &str,
) -> QueryResult<()> {
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            out.push_sql(" AND ");
        }
        push_qualified(out, a, column)?;
        out.push_sql(" = ");
        push_qualified(out, b, column)?;
    }
    Ok(())
}

/// What a multi-row `INSERT` does with a row that exists already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnConflict {
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
#[derive(Debug, Clone, Copy)]
pub(crate) struct InsertRows<'a> {
    pub spec: &'a CounterSpec,
    pub rows: &'a [RowCount<'a>],
    pub on_conflict: OnConflict,
}

impl<DB: CounterBackend> QueryFragment<DB> for InsertRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let ignore = self.on_conflict == OnConflict::Skip && DB::DIALECT == Dialect::Mysql;
        push_insert(&mut out, self.spec, self.rows, ignore)?;
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

/// `INSERT [IGNORE] INTO t ([record_type,] record_id, …, [bucket,] slot, count) VALUES (…), …`.
fn push_insert<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    spec: &'b CounterSpec,
    rows: &'b [RowCount<'b>],
    ignore: bool,
) -> QueryResult<()> {
    super::write::push_insert_into(out, spec, ignore)?;
    out.push_sql("VALUES ");
    push_list(out, rows, |out, (key, bucket, slot, count)| {
        push_tuple(out, spec, true, key, bucket, slot, Some(count), Use::Take)
    })
}

/// New counts for rows this transaction holds locked. PostgreSQL: `UPDATE t SET count =
/// slotted_rows.count FROM (VALUES …) AS slotted_rows (…) WHERE <join>`. MySQL: `INSERT INTO t
/// (…) VALUES (…), … ON DUPLICATE KEY UPDATE count = VALUES(count)`: every row exists (this
/// transaction holds it), so each one is a duplicate that takes its new count by primary key.
/// Not an `UPDATE … CASE WHEN <row> THEN ? …`, which tests each row against every `WHEN` (1,365
/// rows took 58 ms on MariaDB 10.11, against 14 ms as an upsert), nor a multi-table `UPDATE`
/// over a derived table, which Galera refuses (error 4165) once `wsrep_max_ws_size` is set, nor
/// the upsert reading `SELECT * FROM (SELECT ? AS record_id, … UNION ALL SELECT …)`, for which
/// MariaDB prepares a `SELECT` per row (857 rows: 5.1–5.5 ms, against 2.7 ms as a `VALUES`
/// list; `docs/bench/scale-mysql-fold-statements.txt`). `VALUES(count)` is deprecated from MySQL
/// 8.0.20 (a warning; its replacement, a row alias, is not MariaDB's). Only for rows the
/// transaction holds (`put_back` passes nothing else): a row that did not exist would be
/// inserted. Never on SQLite, which inserts its result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpdateRows<'a> {
    pub spec: &'a CounterSpec,
    pub rows: &'a [RowCount<'a>],
}

impl<DB: CounterBackend> QueryFragment<DB> for UpdateRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let spec = self.spec;
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql("UPDATE ");
            out.push_identifier(spec.table)?;
            out.push_sql(" SET ");
            out.push_identifier(COUNT)?;
            out.push_sql(" = slotted_rows.");
            out.push_identifier(COUNT)?;
            out.push_sql(" FROM ");
            return push_rows_join(&mut out, spec, self.rows, |(k, b, s, c)| (k, b, s, Some(c)));
        }
        push_insert(&mut out, spec, self.rows, false)?;
        out.push_sql(" ON DUPLICATE KEY UPDATE ");
        out.push_identifier(COUNT)?;
        out.push_sql(" = VALUES(");
        out.push_identifier(COUNT)?;
        out.push_sql(")");
        Ok(())
    }
}

/// The most totals one MySQL [`RefreshCache`] takes, and the most deltas one
/// [`AddToColumn`](super::adopt::AddToColumn) takes on every backend: a `CASE` tests each row
/// against every `WHEN`, so a statement's cost grows with the square of its keys. 1,000 rows of
/// 100,000 on MariaDB 10.11 (one transaction, the server's own statement times, `SHOW
/// PROFILES`): one statement 26 ms; ten of 100 keys 8.5 ms, about what a hand-written `UPDATE`
/// of the same rows takes (7.9 ms). `refresh_cache` of 1,000 such records, its read of the
/// totals included: 27–30 ms in one statement, 16–20 ms in pieces of 100 (50 and 200 alike).
pub(crate) const CASE_KEYS: usize = 100;

/// The roll-up of a page of totals into the cache column, in one statement, writing only the
/// rows whose cache differs from their total (an unchanged row costs no write). MySQL: `UPDATE
/// parent SET cache = CASE WHEN key = ? THEN ? … ELSE cache END WHERE key IN (…) ORDER BY key`,
/// of the rows whose cache differs only (the caller read the caches under its locks,
/// [`super::refresh::RollUpLock`]; for a composite key,
/// `key = ?` and `IN` are over its columns), locking the parent rows in key order. Each row is
/// tested against every `WHEN`, so a page goes in statements of [`CASE_KEYS`] totals. Not
/// `UPDATE JSON_TABLE(?, …) STRAIGHT_JOIN parent ON <key> SET …`,
/// which took the roll-up of the reads benchmark's 1% pass from 28 ms to about 10: a Galera
/// node with a limited write set (`wsrep_max_ws_size` set) refuses a multi-table `UPDATE` with a
/// non-transactional table in it, `JSON_TABLE` included ("Galera replication not supported",
/// error 4165; tried on MariaDB 10.11), where the `DELETE` of the same shape passes.
/// SQLite: `UPDATE parent SET cache = v.column2 FROM (VALUES (key, total), …) AS v WHERE key =
/// v.column1 AND cache IS NOT v.column2`. Not PostgreSQL, which reads the totals and writes
/// them in one statement ([`super::refresh::RefreshFromSlots`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefreshCache<'a> {
    pub cache: &'a CacheSpec,
    /// Sorted by key.
    pub totals: &'a [(KeyValue<'a>, i64)],
}

impl RefreshCache<'_> {
    /// `(key…, total), …`: the page's totals as rows of a `VALUES` list.
    fn push_values<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        push_list(out, self.totals, |out, (key, total)| {
            out.push_sql("(");
            push_key_values(out, key)?;
            out.push_sql(", ");
            DB::push_big_int(out, total)?;
            out.push_sql(")");
            Ok(())
        })
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for RefreshCache<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let CacheSpec {
            table,
            key_columns,
            column,
            ..
        } = *self.cache;
        if DB::DIALECT == Dialect::Postgres {
            return Err(diesel::result::Error::QueryBuilderError(
                "slotted: PostgreSQL rolls up with RefreshFromSlots, not RefreshCache".into(),
            ));
        }
        out.push_sql("UPDATE ");
        out.push_identifier(table)?;
        out.push_sql(" SET ");
        out.push_identifier(column)?;
        if DB::DIALECT == Dialect::Sqlite {
            // `UPDATE … FROM (VALUES (key, total), …)`, only where the cache differs: SQLite
            // writes the page of every row an `UPDATE` matches, changed or not. Its `VALUES`
            // columns are `column1`, `column2`…
            let total_column = format!("column{}", key_columns.len() + 1);
            out.push_sql(&format!(" = slotted_totals.{total_column} FROM (VALUES "));
            self.push_values(&mut out)?;
            out.push_sql(") AS slotted_totals WHERE ");
            for (i, key_column) in key_columns.iter().enumerate() {
                push_qualified(&mut out, table, key_column)?;
                out.push_sql(&format!(" = slotted_totals.column{} AND ", i + 1));
            }
            push_qualified(&mut out, table, column)?;
            out.push_sql(&format!(" IS NOT slotted_totals.{total_column}"));
            return Ok(());
        }
        // MySQL and MariaDB: the totals as a `CASE`, of the rows whose cache differs only (the
        // roll-up read the caches under its lock, `RollUpLock`): Diesel connects with
        // `CLIENT_FOUND_ROWS`, so every matched row counts as updated.
        out.push_sql(" = CASE");
        for (key, total) in self.totals {
            out.push_sql(" WHEN ");
            push_key_match(&mut out, key_columns, Some(table), key)?;
            out.push_sql(" THEN ");
            DB::push_big_int(&mut out, total)?;
        }
        out.push_sql(" ELSE ");
        push_qualified(&mut out, table, column)?;
        out.push_sql(" END WHERE ");
        push_keys_in(&mut out, key_columns, None, self.totals, |(key, _)| key)?;
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, key_columns, None)
    }
}

/// `DELETE FROM t WHERE … AND bucket < ?`: retention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeleteScope<'a>(pub Scope<'a>);

impl<DB: CounterBackend> QueryFragment<DB> for DeleteScope<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql("DELETE FROM ");
        out.push_identifier(self.0.spec.table)?;
        self.0.push_where(&mut out)
    }
}

statement!(
    by_text: Rows,
    DeleteRows,
    InsertRows,
    UpdateRows,
    RefreshCache,
    DeleteScope
);

/// Whether a PostgreSQL server refuses writes: a hot standby (`pg_is_in_recovery()`), or a
/// session whose transactions are read-only. Maintenance asks before its first batch, whose
/// first statements only read, so that it fails on a standby instead of finding nothing to do.
/// (MySQL's `read_only` lets privileged users write, so it is not asked there.)
pub(crate) struct ServerReadOnly;

impl<DB: CounterBackend> QueryFragment<DB> for ServerReadOnly {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(
            "SELECT CAST(CASE WHEN pg_is_in_recovery() \
             OR current_setting('transaction_read_only') = 'on' THEN 1 ELSE 0 END AS BIGINT) AS n",
        );
        Ok(())
    }
}

impl diesel::query_builder::QueryId for ServerReadOnly {
    type QueryId = ServerReadOnly;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// [`ServerReadOnly`]'s one row.
pub(crate) struct ReadOnlyRow(pub bool);

impl<DB: CounterBackend> diesel::deserialize::QueryableByName<DB> for ReadOnlyRow {
    fn build<'a>(row: &impl diesel::row::NamedRow<'a, DB>) -> diesel::deserialize::Result<Self> {
        DB::read_big_int(row, "n").map(|n| ReadOnlyRow(n != 0))
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;
    use crate::key::{KeyKind, KeyPart};
    use crate::table::TEST_SPEC;
    use diesel::mysql::Mysql;

    fn text(query: impl QueryFragment<Mysql> + diesel::query_builder::QueryId) -> String {
        diesel::debug_query::<Mysql, _>(&query).to_string()
    }

    #[test]
    fn mysql_deletes_rows_through_a_json_table_typed_as_the_key_columns() {
        let spec = CounterSpec {
            key: &[KeyKind::UnsignedBigInt, KeyKind::SmallInt],
            ..TEST_SPEC
        };
        let (a, b) = (
            KeyValue::composite(&[KeyPart::UnsignedBigInt(u64::MAX), KeyPart::SmallInt(-3)]),
            KeyValue::composite(&[KeyPart::UnsignedBigInt(7), KeyPart::SmallInt(0)]),
        );
        let rows = [(a, 0, SlotValue::Bound(1)), (b, 0, SlotValue::Bound(15))];
        assert_eq!(
            text(DeleteRows::new(&spec, &rows)),
            "DELETE `posts_likes_slots` FROM JSON_TABLE(?, '$[*]' COLUMNS (\
             `record_id` BIGINT UNSIGNED PATH '$[0]' ERROR ON EMPTY ERROR ON ERROR, \
             `record_id_2` SMALLINT PATH '$[1]' ERROR ON EMPTY ERROR ON ERROR, \
             `slot` SMALLINT PATH '$[2]' ERROR ON EMPTY ERROR ON ERROR)) AS slotted_rows \
             STRAIGHT_JOIN `posts_likes_slots` ON 1 = 1 \
             AND `posts_likes_slots`.`record_id` = slotted_rows.`record_id` \
             AND `posts_likes_slots`.`record_id_2` = slotted_rows.`record_id_2` \
             AND `posts_likes_slots`.`slot` = slotted_rows.`slot` \
             -- binds: [\"[[18446744073709551615,-3,1],[7,0,15]]\"]"
        );
    }

    #[test]
    fn a_text_key_goes_into_json_escaped_and_is_compared_in_the_key_columns_collation() {
        let spec = CounterSpec {
            key: &[KeyKind::Text],
            max_key_length: 40,
            ..TEST_SPEC
        };
        let key = KeyValue::one(KeyPart::Text("it's \"q\" \\ \n é"));
        let ids = [(key, 0, SlotValue::Bound(2))];
        let json = r#"[["it's \"q\" \\ \u000a é",2]]"#;
        assert_eq!(
            text(DeleteRows::new(&spec, &ids)),
            format!(
                "DELETE `posts_likes_slots` FROM JSON_TABLE(?, '$[*]' COLUMNS (`record_id` \
                 VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]' \
                 ERROR ON EMPTY ERROR ON ERROR, \
                 `slot` SMALLINT PATH '$[1]' ERROR ON EMPTY ERROR ON ERROR)) AS slotted_rows \
                 STRAIGHT_JOIN `posts_likes_slots` ON 1 = 1 \
                 AND `posts_likes_slots`.`record_id` = slotted_rows.`record_id` \
                 AND `posts_likes_slots`.`slot` = slotted_rows.`slot` -- binds: [{json:?}]"
            )
        );
        let rows = [(key, 0, SlotValue::Bound(0), 41)];
        assert_eq!(
            text(UpdateRows {
                spec: &spec,
                rows: &rows
            }),
            "INSERT INTO `posts_likes_slots` (`record_id`, `slot`, `count`) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE `count` = VALUES(`count`) \
             -- binds: [\"it's \\\"q\\\" \\\\ \\n é\", 0, 41]"
        );
    }
}
