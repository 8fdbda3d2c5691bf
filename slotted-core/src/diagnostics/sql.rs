//! The SQL text of the diagnostics, per dialect. Values are bound; identifiers come from a
//! [`CounterSpec`] (checked by the derive) and are quoted for the dialect all the same.

use crate::dialect::Dialect;
use crate::table::{CounterSpec, Storage};

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

/// `$n` on PostgreSQL, `?` elsewhere.
fn bind(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    }
}

/// The placeholders a statement of [`stats`] or [`hottest`] binds, in order: the record type
/// for a shared counter, then (for [`hottest`]) the limit.
pub(crate) struct Sql {
    pub text: String,
    /// Whether the first bind is the record type.
    pub binds_record_type: bool,
}

/// ` WHERE record_type = ?` for a shared counter, else nothing; and the next bind's number.
fn scope(dialect: Dialect, spec: &CounterSpec) -> (String, usize) {
    match spec.storage {
        Storage::Shared { .. } => (
            format!(
                " WHERE {} = {}",
                quote(dialect, "record_type"),
                bind(dialect, 1)
            ),
            2,
        ),
        _ => (String::new(), 1),
    }
}

/// What one record (per bucket) holds: `GROUP BY record_id[, bucket]`.
fn group_by(dialect: Dialect, spec: &CounterSpec) -> String {
    let mut cols = quote(dialect, "record_id");
    if spec.bucket.is_some() {
        cols.push_str(", ");
        cols.push_str(&quote(dialect, "bucket"));
    }
    cols
}

/// One row: `n_rows`, `n_records`, `n_groups` (records × buckets), `n_zero` (groups whose sum
/// is 0, which compaction deletes), `max_group_rows` (the most rows one read of a record and
/// bucket sums).
pub(crate) fn stats(dialect: Dialect, spec: &CounterSpec) -> Sql {
    let (scope, _) = scope(dialect, spec);
    let table = quote(dialect, spec.table);
    let record_id = quote(dialect, "record_id");
    let count = quote(dialect, "count");
    let group_by = group_by(dialect, spec);
    let text = format!(
        "SELECT {rows} AS n_rows, {records} AS n_records, {groups} AS n_groups, \
         {zero} AS n_zero, {max} AS max_group_rows \
         FROM (SELECT {record_id}, COUNT(*) AS n, SUM({count}) AS total FROM {table}{scope} \
         GROUP BY {group_by}) g",
        rows = int(dialect, "COALESCE(SUM(g.n), 0)"),
        records = int(dialect, &format!("COUNT(DISTINCT g.{record_id})")),
        groups = int(dialect, "COUNT(*)"),
        zero = int(
            dialect,
            "COALESCE(SUM(CASE WHEN g.total = 0 THEN 1 ELSE 0 END), 0)"
        ),
        max = int(dialect, "COALESCE(MAX(g.n), 0)"),
    );
    Sql {
        text,
        binds_record_type: matches!(spec.storage, Storage::Shared { .. }),
    }
}

/// The records with the most rows, at most the bound limit: `record`, `n_rows`, `n_slots`
/// (distinct slots), `n_buckets` (distinct buckets, 1 without buckets).
pub(crate) fn hottest(dialect: Dialect, spec: &CounterSpec) -> Sql {
    let (scope, next) = scope(dialect, spec);
    let table = quote(dialect, spec.table);
    let record_id = quote(dialect, "record_id");
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
         FROM {table}{scope} GROUP BY {record_id} ORDER BY n_rows DESC, {record_id} LIMIT {limit}",
        record = text(dialect, &record_id),
        rows = int(dialect, "COUNT(*)"),
        slots = int(
            dialect,
            &format!("COUNT(DISTINCT {})", quote(dialect, "slot"))
        ),
        limit = bind(dialect, next),
    );
    Sql {
        text,
        binds_record_type: matches!(spec.storage, Storage::Shared { .. }),
    }
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
pub(crate) fn postgres_lock_waits(spec: &CounterSpec) -> String {
    let d = Dialect::Postgres;
    let table = quote(d, spec.table);
    let bucket = if spec.bucket.is_some() {
        format!("t.{}", quote(d, "bucket"))
    } else {
        "CAST(NULL AS BIGINT)".to_owned()
    };
    let record_type = match spec.storage {
        Storage::Shared { .. } => format!("CAST(t.{} AS TEXT)", quote(d, "record_type")),
        Storage::Table => "CAST(NULL AS TEXT)".to_owned(),
    };
    let columns = "a.pid AS waiter, \
         CAST(array_to_string(pg_blocking_pids(a.pid), ',') AS TEXT) AS blockers, \
         CAST(EXTRACT(EPOCH FROM (clock_timestamp() - a.query_start)) * 1000 AS BIGINT) AS waited_ms, \
         CAST(COALESCE(a.wait_event, l.locktype) AS TEXT) AS lock_kind, \
         CAST(COALESCE(a.query, '') AS TEXT) AS query";
    format!(
        "SELECT {columns}, CAST(t.{record_id} AS TEXT) AS record, t.{slot} AS slot, \
         {bucket} AS bucket, {record_type} AS record_type \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         LEFT JOIN {table} t ON l.locktype = 'tuple' \
           AND t.ctid = CAST('(' || l.page || ',' || l.tuple || ')' AS tid) \
         WHERE l.relation = to_regclass(quote_ident($1)) \
           AND (l.locktype = 'tuple' OR (l.locktype = 'relation' AND NOT l.granted)) \
           AND l.pid <> pg_backend_pid() \
           AND cardinality(pg_blocking_pids(l.pid)) > 0 \
         UNION ALL \
         SELECT {columns}, CAST(NULL AS TEXT), CAST(NULL AS SMALLINT), CAST(NULL AS BIGINT), \
           CAST(NULL AS TEXT) \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.relation = to_regclass(quote_ident($1)) \
           AND l.locktype = 'relation' AND l.granted AND l.mode = 'RowExclusiveLock' \
           AND a.wait_event_type = 'Lock' \
           AND a.wait_event IN ('transactionid', 'speculative token') \
           AND l.pid <> pg_backend_pid() \
           AND NOT EXISTS (SELECT 1 FROM pg_locks x WHERE x.pid = l.pid AND x.locktype = 'tuple') \
         ORDER BY waiter",
        record_id = quote(d, "record_id"),
        slot = quote(d, "slot"),
    )
}

/// MySQL/MariaDB (`information_schema.INNODB_LOCK_WAITS`, `INNODB_LOCKS`, `INNODB_TRX`): the
/// transactions waiting for a lock, one row per blocker, in every table (InnoDB refreshes these
/// tables only when they were not read for 100 ms, so one query serves every counter). Columns:
/// `waiter`, `blocker` (connection ids), `waited_ms`, `lock_mode`, `lock_index`, `lock_data`
/// (the primary key of the locked row, as InnoDB prints it), `lock_table`
/// (`` `db`.`table` ``), `db_prefix` (`` `db`.` `` of the current database), `query`.
pub(crate) fn mysql_lock_waits() -> &'static str {
    "SELECT CAST(r.trx_mysql_thread_id AS SIGNED) AS waiter, \
       CAST(b.trx_mysql_thread_id AS SIGNED) AS blocker, \
       CAST(TIMESTAMPDIFF(MICROSECOND, r.trx_wait_started, NOW(6)) DIV 1000 AS SIGNED) AS waited_ms, \
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
     ORDER BY waiter, blocker"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_per_dialect_with_the_quote_doubled() {
        assert_eq!(quote(Dialect::Postgres, "a\"b"), "\"a\"\"b\"");
        assert_eq!(quote(Dialect::Mysql, "a`b"), "`a``b`");
        assert_eq!(quote(Dialect::Sqlite, "posts"), "\"posts\"");
    }
}
