//! The contention diagnostics' statements, per dialect, and the rows they return. Values are
//! bound; identifiers come from a [`CounterSpec`] (checked by the derive) and are quoted for the
//! dialect all the same. Every column is cast to a 64-bit integer or to text, so that one row
//! reader serves every backend.

use diesel::deserialize;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::row::NamedRow;
use diesel::{QueryResult, QueryableByName};

use crate::dialect::{CounterBackend, Dialect};
use crate::table::{CounterSpec, Storage};

/// A piece of a diagnostics statement: SQL text, or a value to bind there.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Sql(String),
    Text(&'static str),
    BigInt(i64),
}

/// A diagnostics statement: its SQL with the values bound in place, by the backend's own
/// placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Diagnostic(Vec<Piece>);

impl Diagnostic {
    /// The text of `sql`, each `{}` in it a placeholder for the next of `binds`.
    fn new(sql: &str, binds: &[Piece]) -> Self {
        let mut pieces = Vec::with_capacity(2 * binds.len() + 1);
        let mut binds = binds.iter();
        for (i, part) in sql.split("{}").enumerate() {
            if i > 0 {
                pieces.extend(binds.next().cloned());
            }
            pieces.push(Piece::Sql(part.to_owned()));
        }
        Diagnostic(pieces)
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for Diagnostic {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        for piece in &self.0 {
            match piece {
                Piece::Sql(sql) => out.push_sql(sql),
                Piece::Text(value) => DB::push_text(&mut out, value)?,
                Piece::BigInt(value) => DB::push_big_int(&mut out, value)?,
            }
        }
        Ok(())
    }
}

/// Not cached by type: the text varies with the counter (as `statement!(by_text: …)` says for
/// the statements that borrow).
impl diesel::query_builder::QueryId for Diagnostic {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

/// `ident` quoted for `dialect`, the quote character doubled inside it.
pub(crate) fn quote(dialect: Dialect, ident: &str) -> String {
    let q = match dialect {
        Dialect::Mysql => '`',
        _ => '"',
    };
    let mut out = String::with_capacity(ident.len() + 2);
    out.push(q);
    for c in ident.chars() {
        if c == q {
            out.push(q);
        }
        out.push(c);
    }
    out.push(q);
    out
}

/// `CAST(expr AS <64-bit integer>)`.
fn int(dialect: Dialect, expr: &str) -> String {
    match dialect {
        Dialect::Mysql => format!("CAST({expr} AS SIGNED)"),
        _ => format!("CAST({expr} AS BIGINT)"),
    }
}

/// `CAST(expr AS <text>)`.
fn text(dialect: Dialect, expr: &str) -> String {
    match dialect {
        Dialect::Mysql => format!("CAST({expr} AS CHAR)"),
        _ => format!("CAST({expr} AS TEXT)"),
    }
}

/// ` WHERE record_type = {}` for a shared counter, else nothing; and its bind.
fn scope(dialect: Dialect, spec: &CounterSpec) -> (String, Vec<Piece>) {
    match spec.storage {
        Storage::Shared { record_type } => (
            format!(" WHERE {} = {{}}", quote(dialect, "record_type")),
            vec![Piece::Text(record_type)],
        ),
        Storage::Table => (String::new(), Vec::new()),
    }
}

/// The key columns, quoted, each prefixed by `prefix` (`g.`, or nothing), comma-separated.
fn key_columns(dialect: Dialect, spec: &CounterSpec, prefix: &str) -> String {
    let columns: Vec<String> = spec
        .key_columns()
        .iter()
        .map(|c| format!("{prefix}{}", quote(dialect, c)))
        .collect();
    columns.join(", ")
}

/// A record's key as text: its column's value, or a composite key's as `(7, 1.0.0)` (as
/// `diagnostics::waits::record_text` shows InnoDB's).
fn key_text(dialect: Dialect, spec: &CounterSpec, prefix: &str) -> String {
    let parts: Vec<String> = spec
        .key_columns()
        .iter()
        .map(|c| text(dialect, &format!("{prefix}{}", quote(dialect, c))))
        .collect();
    match (&parts[..], dialect) {
        ([one], _) => one.clone(),
        (parts, Dialect::Mysql) => format!("CONCAT('(', {}, ')')", parts.join(", ', ', ")),
        (parts, _) => format!("'(' || {} || ')'", parts.join(" || ', ' || ")),
    }
}

/// What one record (per bucket) holds: `GROUP BY record_id[, record_id_2…][, bucket]`.
fn group_by(dialect: Dialect, spec: &CounterSpec) -> String {
    let mut cols = key_columns(dialect, spec, "");
    if spec.bucket.is_some() {
        cols.push_str(", ");
        cols.push_str(&quote(dialect, "bucket"));
    }
    cols
}

/// One row: `n_rows`, `n_records`, `n_groups` (records × buckets), `n_zero` (groups whose sum
/// is 0, which compaction deletes), `max_group_rows` (the most rows one read of a record and
/// bucket sums).
pub(crate) fn stats(dialect: Dialect, spec: &CounterSpec) -> Diagnostic {
    let (scope, binds) = scope(dialect, spec);
    let table = quote(dialect, spec.table);
    let keys = key_columns(dialect, spec, "");
    let g_keys = key_columns(dialect, spec, "g.");
    let count = quote(dialect, "count");
    let group_by = group_by(dialect, spec);
    // Groups (a record's rows in one bucket) within records: a record is a distinct key of one
    // or more columns, counted by grouping again (SQLite has no `COUNT(DISTINCT a, b)`).
    let text = format!(
        "SELECT {rows} AS n_rows, {records} AS n_records, {groups} AS n_groups, \
         {zero} AS n_zero, {max} AS max_group_rows \
         FROM (SELECT {g_keys}, SUM(g.n) AS n, COUNT(*) AS n_bucket_groups, \
         SUM(CASE WHEN g.total = 0 THEN 1 ELSE 0 END) AS n_zero_groups, MAX(g.n) AS max_n \
         FROM (SELECT {keys}, COUNT(*) AS n, SUM({count}) AS total FROM {table}{scope} \
         GROUP BY {group_by}) g GROUP BY {g_keys}) r",
        rows = int(dialect, "COALESCE(SUM(r.n), 0)"),
        records = int(dialect, "COUNT(*)"),
        groups = int(dialect, "COALESCE(SUM(r.n_bucket_groups), 0)"),
        zero = int(dialect, "COALESCE(SUM(r.n_zero_groups), 0)"),
        max = int(dialect, "COALESCE(MAX(r.max_n), 0)"),
    );
    Diagnostic::new(&text, &binds)
}

/// The records with the most rows, at most the bound limit: `record`, `n_rows`, `n_slots`
/// (distinct slots), `n_buckets` (distinct buckets, 1 without buckets).
pub(crate) fn hottest(dialect: Dialect, spec: &CounterSpec, limit: i64) -> Diagnostic {
    let (scope, mut binds) = scope(dialect, spec);
    binds.push(Piece::BigInt(limit));
    let table = quote(dialect, spec.table);
    let keys = key_columns(dialect, spec, "");
    let buckets = if spec.bucket.is_some() {
        int(
            dialect,
            &format!("COUNT(DISTINCT {})", quote(dialect, "bucket")),
        )
    } else {
        int(dialect, "1")
    };
    let text = format!(
        "SELECT {record} AS record, {rows} AS n_rows, {slots} AS n_slots, {buckets} AS n_buckets \
         FROM {table}{scope} GROUP BY {keys} ORDER BY n_rows DESC, {keys} LIMIT {{}}",
        record = key_text(dialect, spec, ""),
        rows = int(dialect, "COUNT(*)"),
        slots = int(
            dialect,
            &format!("COUNT(DISTINCT {})", quote(dialect, "slot"))
        ),
    );
    Diagnostic::new(&text, &binds)
}

/// PostgreSQL: the sessions waiting for a lock on a row or on the whole of the table (bound:
/// its name), with the row they wait for when it is known. Columns: `waiter`, `blockers`
/// (comma-separated pids), `waited_ms` (since the waiting statement began), `lock_kind`,
/// `query`, `record`, `slot`, `bucket`, `record_type` (the last four `NULL` when the row is not
/// known).
///
/// A writer that waits for a row another transaction locked holds (or queues for) a `tuple`
/// lock naming the row's `ctid`, which finds the row. A writer that waits for a row being
/// inserted by another transaction holds no tuple lock; it is counted by the table it has
/// opened for writing, row unknown.
pub(crate) fn postgres_lock_waits(spec: &CounterSpec) -> Diagnostic {
    let d = Dialect::Postgres;
    let table = quote(d, spec.table);
    let bucket = if spec.bucket.is_some() {
        format!("CAST(t.{} AS TEXT)", quote(d, "bucket"))
    } else {
        "CAST(NULL AS TEXT)".to_owned()
    };
    let record_type = match spec.storage {
        Storage::Shared { .. } => format!("CAST(t.{} AS TEXT)", quote(d, "record_type")),
        Storage::Table => "CAST(NULL AS TEXT)".to_owned(),
    };
    let columns = "CAST(a.pid AS BIGINT) AS waiter, \
         CAST(array_to_string(pg_blocking_pids(a.pid), ',') AS TEXT) AS blockers, \
         CAST(CAST(EXTRACT(EPOCH FROM (clock_timestamp() - a.query_start)) * 1000 AS BIGINT) AS TEXT) AS waited_ms, \
         CAST(COALESCE(a.wait_event, l.locktype) AS TEXT) AS lock_kind, \
         CAST(COALESCE(a.query, '') AS TEXT) AS query";
    let text = format!(
        "SELECT {columns}, {record} AS record, CAST(t.{slot} AS TEXT) AS slot, \
         {bucket} AS bucket, {record_type} AS record_type \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         LEFT JOIN {table} t ON l.locktype = 'tuple' \
           AND t.ctid = CAST('(' || l.page || ',' || l.tuple || ')' AS tid) \
         WHERE l.relation = to_regclass(quote_ident({{}})) \
           AND (l.locktype = 'tuple' OR (l.locktype = 'relation' AND NOT l.granted)) \
           AND l.pid <> pg_backend_pid() \
           AND cardinality(pg_blocking_pids(l.pid)) > 0 \
         UNION ALL \
         SELECT {columns}, CAST(NULL AS TEXT), CAST(NULL AS TEXT), CAST(NULL AS TEXT), \
           CAST(NULL AS TEXT) \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.relation = to_regclass(quote_ident({{}})) \
           AND l.locktype = 'relation' AND l.granted AND l.mode = 'RowExclusiveLock' \
           AND a.wait_event_type = 'Lock' \
           AND a.wait_event IN ('transactionid', 'speculative token') \
           AND l.pid <> pg_backend_pid() \
           AND NOT EXISTS (SELECT 1 FROM pg_locks x WHERE x.pid = l.pid AND x.locktype = 'tuple') \
         ORDER BY waiter",
        record = key_text(d, spec, "t."),
        slot = quote(d, "slot"),
    );
    let table = Piece::Text(spec.table);
    Diagnostic::new(&text, &[table.clone(), table])
}

/// MySQL/MariaDB (`information_schema.INNODB_LOCK_WAITS`, `INNODB_LOCKS`, `INNODB_TRX`): the
/// transactions waiting for a lock, one row per blocker, in every table (InnoDB refreshes these
/// tables only when they were not read for 100 ms, so one query serves every counter). Columns:
/// `waiter`, `blocker` (connection ids), `waited_ms`, `lock_mode`, `lock_index`, `lock_data`
/// (the primary key of the locked row, as InnoDB prints it), `lock_table`
/// (`` `db`.`table` ``), `db_prefix` (`` `db`.` `` of the current database), `query`.
pub(crate) fn mysql_lock_waits() -> Diagnostic {
    Diagnostic::new(MYSQL_LOCK_WAITS, &[])
}

const MYSQL_LOCK_WAITS: &str = "SELECT CAST(r.trx_mysql_thread_id AS SIGNED) AS waiter, \
       CAST(b.trx_mysql_thread_id AS SIGNED) AS blocker, \
       CAST(TIMESTAMPDIFF(MICROSECOND, r.trx_wait_started, NOW(6)) DIV 1000 AS CHAR) AS waited_ms, \
       CAST(COALESCE(l.lock_mode, '') AS CHAR) AS lock_mode, \
       CAST(COALESCE(l.lock_index, '') AS CHAR) AS lock_index, \
       CAST(l.lock_data AS CHAR) AS lock_data, \
       CAST(COALESCE(l.lock_table, '') AS CHAR) AS lock_table, \
       CAST(CONCAT('`', REPLACE(COALESCE(DATABASE(), ''), '`', '``'), '`.`') AS CHAR) AS db_prefix, \
       CAST(COALESCE(r.trx_query, '') AS CHAR) AS query \
     FROM information_schema.INNODB_LOCK_WAITS w \
     JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
     JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id \
     JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id \
     WHERE r.trx_mysql_thread_id <> CONNECTION_ID() \
     ORDER BY waiter, blocker";

/// Reads a row's `BIGINT` column.
fn big_int<'a, DB: CounterBackend>(
    row: &impl NamedRow<'a, DB>,
    column: &str,
) -> deserialize::Result<i64> {
    DB::read_big_int(row, column)
}

/// Reads a row's text column, `None` for NULL.
fn text_or_null<'a, DB: CounterBackend>(
    row: &impl NamedRow<'a, DB>,
    column: &str,
) -> deserialize::Result<Option<String>> {
    DB::read_nullable_text(row, column)
}

/// Reads a row's non-NULL text column.
fn text_of<'a, DB: CounterBackend>(
    row: &impl NamedRow<'a, DB>,
    column: &str,
) -> deserialize::Result<String> {
    Ok(DB::read_nullable_text(row, column)?.unwrap_or_default())
}

/// A number the statement cast to text (so that NULL reads on every backend), `None` for NULL.
fn number<'a, DB: CounterBackend, T: std::str::FromStr>(
    row: &impl NamedRow<'a, DB>,
    column: &str,
) -> deserialize::Result<Option<T>> {
    match DB::read_nullable_text(row, column)? {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("column {column}: {text:?} is not a number").into()),
    }
}

/// The sessions that hold a writer index on this database (the `connection` strategy's: see
/// `sql::slot`), one row: `n`, and `highest`, the largest index held (-1 for none).
/// PostgreSQL: its advisory locks in `pg_locks`; MySQL, MariaDB: `IS_USED_LOCK` of every index's
/// name (the node's own, on a Galera cluster). `None` on SQLite, which has none.
pub(crate) fn writers(dialect: Dialect) -> Option<Diagnostic> {
    use super::slot::{mysql_lock_name, mysql_over_indices, INDEX_LOCK_CLASS};
    let text = match dialect {
        Dialect::Sqlite => return None,
        Dialect::Postgres => format!(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n, \
             CAST(COALESCE(MAX(CAST(objid AS BIGINT)), -1) AS BIGINT) AS highest FROM pg_locks \
             WHERE locktype = 'advisory' AND classid = {INDEX_LOCK_CLASS} AND objsubid = 2 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ),
        Dialect::Mysql => mysql_over_indices(
            "CAST(COUNT(*) AS SIGNED) AS n, CAST(COALESCE(MAX({i}), -1) AS SIGNED) AS highest",
            &format!("IS_USED_LOCK({}) IS NOT NULL", mysql_lock_name("{i}")),
        ),
    };
    Some(Diagnostic::new(&text, &[]))
}

/// A row of [`writers`].
#[derive(Debug)]
pub(crate) struct WritersRow {
    pub n: i64,
    pub highest: i64,
}

impl<DB: CounterBackend> QueryableByName<DB> for WritersRow {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(WritersRow {
            n: big_int(row, "n")?,
            highest: big_int(row, "highest")?,
        })
    }
}

/// A row of [`stats`].
#[derive(Debug)]
pub(crate) struct StatsRow {
    pub n_rows: i64,
    pub n_records: i64,
    pub n_groups: i64,
    pub n_zero: i64,
    pub max_group_rows: i64,
}

impl<DB: CounterBackend> QueryableByName<DB> for StatsRow {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(StatsRow {
            n_rows: big_int(row, "n_rows")?,
            n_records: big_int(row, "n_records")?,
            n_groups: big_int(row, "n_groups")?,
            n_zero: big_int(row, "n_zero")?,
            max_group_rows: big_int(row, "max_group_rows")?,
        })
    }
}

/// A row of [`hottest`].
#[derive(Debug)]
pub(crate) struct HotRow {
    pub record: String,
    pub n_rows: i64,
    pub n_slots: i64,
    pub n_buckets: i64,
}

impl<DB: CounterBackend> QueryableByName<DB> for HotRow {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(HotRow {
            record: text_of(row, "record")?,
            n_rows: big_int(row, "n_rows")?,
            n_slots: big_int(row, "n_slots")?,
            n_buckets: big_int(row, "n_buckets")?,
        })
    }
}

/// A row of [`postgres_lock_waits`].
#[derive(Debug)]
pub(crate) struct PgWaitRow {
    pub waiter: i64,
    pub blockers: String,
    pub waited_ms: Option<i64>,
    pub lock_kind: String,
    pub query: String,
    pub record: Option<String>,
    pub slot: Option<i16>,
    pub bucket: Option<i64>,
    pub record_type: Option<String>,
}

impl<DB: CounterBackend> QueryableByName<DB> for PgWaitRow {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(PgWaitRow {
            waiter: big_int(row, "waiter")?,
            blockers: text_of(row, "blockers")?,
            waited_ms: number(row, "waited_ms")?,
            lock_kind: text_of(row, "lock_kind")?,
            query: text_of(row, "query")?,
            record: text_or_null(row, "record")?,
            slot: number(row, "slot")?,
            bucket: number(row, "bucket")?,
            record_type: text_or_null(row, "record_type")?,
        })
    }
}

/// A row of [`mysql_lock_waits`].
#[derive(Debug)]
pub(crate) struct MysqlWaitRow {
    pub waiter: i64,
    pub blocker: i64,
    pub waited_ms: Option<i64>,
    pub lock_mode: String,
    pub lock_index: String,
    pub lock_data: Option<String>,
    pub lock_table: String,
    pub db_prefix: String,
    pub query: String,
}

impl<DB: CounterBackend> QueryableByName<DB> for MysqlWaitRow {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(MysqlWaitRow {
            waiter: big_int(row, "waiter")?,
            blocker: big_int(row, "blocker")?,
            waited_ms: number(row, "waited_ms")?,
            lock_mode: text_of(row, "lock_mode")?,
            lock_index: text_of(row, "lock_index")?,
            lock_data: text_or_null(row, "lock_data")?,
            lock_table: text_of(row, "lock_table")?,
            db_prefix: text_of(row, "db_prefix")?,
            query: text_of(row, "query")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_take_the_binds_in_order() {
        let spec = CounterSpec {
            storage: Storage::Shared {
                record_type: "posts.likes",
            },
            ..crate::table::TEST_SPEC
        };
        let Diagnostic(pieces) = hottest(Dialect::Postgres, &spec, 5);
        let binds: Vec<&Piece> = pieces
            .iter()
            .filter(|p| !matches!(p, Piece::Sql(_)))
            .collect();
        assert_eq!(binds, [&Piece::Text("posts.likes"), &Piece::BigInt(5)]);
        let Diagnostic(pieces) = postgres_lock_waits(&crate::table::TEST_SPEC);
        let binds = pieces
            .iter()
            .filter(|p| !matches!(p, Piece::Sql(_)))
            .count();
        assert_eq!(binds, 2, "the table's name, once in each half of the UNION");
    }

    #[test]
    fn identifiers_are_quoted_per_dialect_with_the_quote_doubled() {
        assert_eq!(quote(Dialect::Postgres, "a\"b"), "\"a\"\"b\"");
        assert_eq!(quote(Dialect::Mysql, "a`b"), "`a``b`");
        assert_eq!(quote(Dialect::Sqlite, "posts"), "\"posts\"");
    }
}
