//! The upsert a row trigger (MySQL's, SQLite's, and every dialect's on a table between) writes
//! one row's change with.

use crate::dialect::Dialect;
use crate::follow::FollowSpec;
use crate::sql::slot::trigger_slot_sql;
use crate::table::CounterSpec;

use super::super::quote;

/// The statement that adds `delta` to the record whose key is `row`'s (`NEW` or `OLD`), in
/// `slot`: an upsert. With `only_if`, the row is written only where that condition holds (a
/// `SELECT … WHERE`: SQLite's triggers have no `IF`).
pub(super) fn add_to_slot(
    spec: &CounterSpec,
    follow: &FollowSpec,
    dialect: Dialect,
    row: &str,
    delta: &str,
    only_if: Option<&str>,
) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let slot = trigger_slot_sql(dialect, spec.slots);
    let columns: Vec<String> = spec.key_columns().iter().map(|c| q(c)).collect();
    let keys = row_keys(follow, dialect, row);
    let lookup = follow.lookup_sql(row, q);
    let checked;
    let delta = if dialect == Dialect::Sqlite {
        checked = sqlite_in_range(spec, delta);
        checked.as_str()
    } else {
        delta
    };
    let source = match (only_if, lookup.is_empty()) {
        (None, true) => format!("VALUES ({keys}, {slot}, {delta})"),
        // SQLite reads `INSERT … SELECT … ON CONFLICT` without a `WHERE` as a join's `ON`.
        (Some(condition), true) => format!("SELECT {keys}, {slot}, {delta} WHERE {condition}"),
        // Through a table between: its row, read as it stands once no writer changes it (a
        // share lock on MySQL and MariaDB, whose plain reads in `REPEATABLE READ` would see
        // the transaction's snapshot). A move of that row to another parent waits for this
        // transaction, then moves this child row's count with the others; one that came
        // first has moved the row, and this count goes to its new parent.
        (condition, false) => format!(
            "SELECT {keys}, {slot}, {delta}{lookup}{and}{condition}{lock}",
            and = if condition.is_some() { " AND " } else { "" },
            condition = condition.unwrap_or_default(),
            lock = if dialect == Dialect::Mysql {
                " LOCK IN SHARE MODE"
            } else {
                ""
            },
        ),
    };
    let insert = format!(
        "INSERT INTO {table} ({columns}, {slot_column}, {count}) {source}",
        table = q(spec.table),
        columns = columns.join(", "),
        slot_column = q("slot"),
        count = q("count"),
    );
    match dialect {
        // The counter table named: a table between may have a `count` column of its own.
        Dialect::Mysql => format!(
            "{insert} ON DUPLICATE KEY UPDATE {table}.{count} = {table}.{count} + ({delta})",
            table = q(spec.table),
            count = q("count")
        ),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "{insert} ON CONFLICT ({columns}, {slot_column}) DO UPDATE SET {count} = {sum}",
            columns = columns.join(", "),
            slot_column = q("slot"),
            count = q("count"),
            sum = conflict_sum(spec, dialect),
        ),
    }
}

/// What an upsert's conflict sets the slot to, `t."count" + excluded."count"`: on SQLite,
/// checked to stay an integer ([`sqlite_in_range`]).
pub(super) fn conflict_sum(spec: &CounterSpec, dialect: Dialect) -> String {
    let count = quote(dialect, "count");
    let sum = format!("{}.{count} + excluded.{count}", quote(dialect, spec.table));
    match dialect {
        Dialect::Sqlite => sqlite_in_range(spec, &sum),
        Dialect::Postgres | Dialect::Mysql => sum,
    }
}

/// SQLite: `expr` while it is an integer, else the trigger's statement fails: SQLite's integer
/// arithmetic does not fail past 64 bits, it turns the value into a floating-point one, and a
/// slot holding one would no longer add up to the child rows. PostgreSQL, MySQL and MariaDB
/// fail such a statement themselves (`bigint out of range`). The child row's statement fails
/// with it, and nothing of it is written: the one exact choice.
pub(super) fn sqlite_in_range(spec: &CounterSpec, expr: &str) -> String {
    format!(
        "CASE WHEN typeof({expr}) = 'integer' THEN {expr} ELSE RAISE(ABORT, \
         'slotted: a count of {table} would pass BIGINT; the change of the child row is not written') END",
        table = spec.table.replace('\'', "''"),
    )
}

/// `OLD.k = NEW.k [AND …]`: the update keeps the row's parent (both rows count, so no key
/// column is `NULL`). Always true for a counter of one record.
pub(super) fn same_parent(follow: &FollowSpec, dialect: Dialect) -> String {
    if follow.key_columns.is_empty() {
        return "TRUE".to_owned();
    }
    follow
        .key_columns
        .iter()
        .map(|column| {
            let column = quote(dialect, column);
            format!("OLD.{column} = NEW.{column}")
        })
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// `NEW."post_id"[, …]`: the parent key of `row`.
pub(super) fn row_keys(follow: &FollowSpec, dialect: Dialect, row: &str) -> String {
    follow
        .parent_key_sql(row, |ident| quote(dialect, ident))
        .join(", ")
}
