//! SQLite's follow triggers.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec};
use crate::table::CounterSpec;

use super::super::quote;
use super::backfill::backfills;
use super::through::through_triggers;
use super::upsert::{add_to_slot, same_parent};
use super::{drop_before_up, empty_tables, text_key_columns, Followers};

/// `UPDATE OF "post_id", "deleted"`: the updates that can change a count of any of the
/// counters. With no column to watch (counts of every row of the table) no update can: `None`.
fn update_of(followers: &Followers, dialect: Dialect) -> Option<String> {
    let mut watched: Vec<&str> = Vec::new();
    for (_, follow) in &followers.counters {
        for column in follow.watched_columns() {
            if !watched.contains(&column) {
                watched.push(column);
            }
        }
    }
    let watched: Vec<String> = watched.iter().map(|c| quote(dialect, c)).collect();
    (!watched.is_empty()).then(|| format!("UPDATE OF {}", watched.join(", ")))
}

pub(super) fn up(followers: &Followers) -> String {
    let dialect = Dialect::Sqlite;
    let q = |ident: &str| quote(dialect, ident);
    // A sum's row adds nothing where its value is 0: no write. A count's always adds.
    let upsert =
        |spec: &CounterSpec, follow: &FollowSpec, row: &str, delta: &str, condition: &str| {
            let condition = match follow.sum {
                Some(_) => format!("{condition} AND {delta} <> 0"),
                None => condition.to_owned(),
            };
            add_to_slot(spec, follow, dialect, row, delta, Some(&condition))
        };
    let statements = |each: &dyn Fn(&CounterSpec, &FollowSpec) -> Vec<String>| -> String {
        followers
            .counters
            .iter()
            .flat_map(|(spec, follow)| each(spec, follow))
            .map(|statement| format!("    {statement};\n"))
            .collect()
    };
    let insert = statements(&|spec, follow| {
        vec![upsert(
            spec,
            follow,
            "NEW",
            &follow.delta_sql("NEW", q),
            &follow.counts_sql("NEW", q),
        )]
    });
    let delete = statements(&|spec, follow| {
        vec![upsert(
            spec,
            follow,
            "OLD",
            &format!("-{}", follow.delta_sql("OLD", q)),
            &follow.counts_sql("OLD", q),
        )]
    });
    // Same parent, both counting: one write of the difference. Otherwise the old row's and the
    // new row's, each where it counts.
    let update = statements(&|spec, follow| {
        let old_counts = follow.counts_sql("OLD", q);
        let new_counts = follow.counts_sql("NEW", q);
        let old_delta = follow.delta_sql("OLD", q);
        let new_delta = follow.delta_sql("NEW", q);
        let both = format!(
            "({old_counts}) AND ({new_counts}) AND {}",
            same_parent(follow, dialect)
        );
        vec![
            upsert(
                spec,
                follow,
                "NEW",
                &format!("({new_delta}) - ({old_delta})"),
                &format!("{both} AND ({new_delta}) <> ({old_delta})"),
            ),
            upsert(
                spec,
                follow,
                "OLD",
                &format!("-{old_delta}"),
                &format!("{old_counts} AND NOT ({both})"),
            ),
            upsert(
                spec,
                follow,
                "NEW",
                &new_delta,
                &format!("{new_counts} AND NOT ({both})"),
            ),
        ]
    });
    let trigger = |suffix: &str, event: &str, body: &str| {
        format!(
            "CREATE TRIGGER {name} AFTER {event} ON {child} FOR EACH ROW\nBEGIN\n{body}END;\n",
            name = q(&trigger_name(followers.child, suffix)),
            child = q(followers.child),
        )
    };
    let update_event = update_of(followers, dialect).unwrap_or_else(|| "UPDATE".to_owned());
    format!(
        // The DELETEs first: a write statement takes SQLite's write lock before it reads,
        // through the busy timeout; `DROP TRIGGER IF EXISTS` first would read the schema in a
        // snapshot, and the transaction's first write would then fail at once with `database
        // is locked` whenever a writer of the child table committed in between.
        "{header}{empty}{key_checks}{drop}{insert}{update}{delete}{via}{backfills}",
        header = followers.header(),
        empty = empty_tables(followers, dialect),
        key_checks = text_key_checks(followers),
        drop = drop_before_up(followers, dialect),
        insert = trigger("insert", "INSERT", &insert),
        update = trigger("update", &update_event, &update),
        delete = trigger("delete", "DELETE", &delete),
        via = through_triggers(followers, dialect),
        backfills = backfills(followers, dialect),
    )
}

/// Fails the migration (its transaction rolled back, nothing changed) when a column whose values
/// are a follow counter's text keys has a collation that is not `BINARY` (`NOCASE`, `RTRIM`):
/// the counter's key column compares keys byte for byte, so `Rust` and `rust`, one parent to
/// the application, would be two records to the counter. SQLite keeps no catalog of a column's
/// collation, so the check asks the column itself: six values that differ only by case, a
/// trailing space, an accent and its Unicode form (`a`, `A`, `a `, `e`, `é` and `e` with a
/// combining acute), compared under the column's collation (a compound `SELECT` takes it from
/// its first column), are six distinct values only under `BINARY`, or a collation of the app's
/// own (`register_collation`) that tells them apart. A failed check is a named `CHECK`
/// constraint of a temporary table, whose name is the message.
fn text_key_checks(followers: &Followers) -> String {
    let q = |ident: &str| quote(Dialect::Sqlite, ident);
    text_key_columns(followers)
        .into_iter()
        .map(|(table, column, _)| {
            let message = format!(
                "slotted: {table}.{column} keys a follow counter: give it the BINARY collation \
                 (the default)"
            );
            format!(
                "CREATE TEMP TABLE slotted_check (failed INTEGER CONSTRAINT {name} \
                 CHECK (failed = 0));\n\
                 INSERT INTO slotted_check SELECT COUNT(DISTINCT slotted_k) < 6 FROM \
                 (SELECT {column} AS slotted_k FROM {table} WHERE 0 \
                 UNION ALL SELECT 'a' UNION ALL SELECT 'A' UNION ALL SELECT 'a ' \
                 UNION ALL SELECT 'e' UNION ALL SELECT '\u{e9}' UNION ALL SELECT 'e\u{301}');\n\
                 DROP TABLE temp.slotted_check;\n",
                name = q(&message),
                column = q(column),
                table = q(table),
            )
        })
        .collect()
}
