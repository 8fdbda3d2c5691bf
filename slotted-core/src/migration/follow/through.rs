//! Counts through a table between (`follow = comments(post_id), through = posts(community_id)`):
//! the lock the child table's PostgreSQL triggers take on the rows between, and the triggers on
//! the table between that keep the counts when its rows move, appear or go.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec, Through};
use crate::sql::follow::pg_foreign_key;
use crate::sql::slot::{mysql_trigger_takes_index, pg_trigger_takes_index, trigger_slot_sql};
use crate::table::CounterSpec;

use super::super::quote;
use super::upsert::{conflict_sum, sqlite_in_range};
use super::{via_owner, Followers};

/// PostgreSQL: `PERFORM 1 FROM "posts" WHERE "id" IN (SELECT "post_id" FROM slotted_new) ORDER
/// BY "id" FOR KEY SHARE`, once for each table between and the child's column that names its
/// rows: the rows between of the statement's child rows, locked before their parents are read,
/// in key order. A move of such a row to another parent locks it `FOR UPDATE` first (its
/// trigger, [`postgres_through`]), which waits for this transaction and then counts its child
/// rows; a move that came first is committed before this lock is granted, and the plpgsql
/// statements after it (each with a snapshot of its own in `READ COMMITTED`) read the new
/// parent. Without the locks, a post moved by one transaction while another adds a comment to
/// it would leave the comment counted for the old community.
///
/// `KEY SHARE`, the lock a foreign key's check takes: a transaction that inserted the comment
/// under a foreign key to the post holds it already, and taking it again writes nothing. A
/// `SHARE` lock would mark the hot post's row anew for every writer (a multixact each time): it
/// cost the benchmark's writers 0.73 of the ceiling, against 1.0 without it.
///
/// The lock is a statement of its own, and the parents are read by the next: tried and
/// rejected, locking the rows between in the upsert's own read (`… JOIN "posts" … ORDER BY
/// "posts"."id" FOR KEY SHARE OF "posts"`, relying on `READ COMMITTED`'s recheck of a row that
/// changed under the lock) saved about 4 µs a comment and lost counts: the concurrent test
/// (`concurrent_writers_beside_compaction_count_exactly`) found a community one comment short
/// in 2 runs of 3. The likely cause, not traced to the line: a move changes no key column, so a
/// `KEY SHARE` lock on the version the statement read can be granted without the recheck that
/// would have read the moved row.
pub(super) fn pg_lock_through(followers: &Followers, tables: &[&str]) -> Vec<String> {
    let q = |ident: &str| quote(Dialect::Postgres, ident);
    let mut locks: Vec<String> = Vec::new();
    for (_, follow) in &followers.counters {
        let Some(through) = follow.through else {
            continue;
        };
        let child_key = q(follow.key_columns[0]);
        let rows: Vec<String> = tables
            .iter()
            .map(|table| format!("SELECT {child_key} FROM {table}"))
            .collect();
        let lock = format!(
            "PERFORM 1 FROM {table} WHERE {key} IN ({rows}) ORDER BY {key} FOR KEY SHARE",
            table = q(through.table),
            key = q(through.key),
            rows = rows.join(" UNION "),
        );
        if !locks.contains(&lock) {
            locks.push(lock);
        }
    }
    locks
}

/// PostgreSQL: whether an `INSERT` into the child table needs none of [`pg_lock_through`]'s
/// locks, as the lines its function then carries and the condition, read when the migration
/// runs ([`pg_foreign_key`]); `None` when no counter passes through a table between. It holds
/// when every child column that names rows between has a foreign key to their key that is not
/// deferrable: its check, a row trigger, runs at the end of the statement, before every
/// statement trigger, and takes the same lock (`SELECT … FOR KEY SHARE` on the row between,
/// waiting for a move in flight to commit). The lock of our own then only repeats it, which
/// cost the benchmark's writers about 6 µs an insert and, on a hot post, a look into the row's
/// multixact (docs/bench/follow-trigger-cost). An `UPDATE` or a `DELETE` of a child row checks
/// no foreign key (or only the new one), and keeps the lock.
///
/// The function is made once, by the migration: a foreign key dropped, made deferrable or its
/// check trigger disabled afterwards leaves inserts without the lock, and a post moved while a
/// comment is added to it can then leave the comment counted for the old community. The verify
/// job reports such a key (`FollowReport::foreign_keys_missing`); the guide says to run the
/// migration again.
pub(super) fn pg_foreign_keys_lock(followers: &Followers) -> Option<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for (_, follow) in &followers.counters {
        if let Some(key) = pg_foreign_key(follow) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    let (markers, exists): (Vec<String>, Vec<String>) = keys.into_iter().unzip();
    (!exists.is_empty()).then(|| {
        (
            markers.iter().map(|m| format!("{m}\n")).collect(),
            exists.join("\n    AND "),
        )
    })
}

/// The triggers on each table between (`through = posts(community_id)`), which keep the counts
/// of the counters of `followers` that pass through it when its rows change: a row inserted
/// takes on the child rows that already name it; one whose parent column (or key) changes
/// moves its counted child rows from the old parent to the new; one deleted takes them away
/// from its parent. Row triggers, which read the child rows of that row (an index on the
/// child's column keeps this a lookup), and write into the writer's slot like the child
/// table's triggers.
///
/// The update and delete triggers run `BEFORE`: a foreign key's `ON DELETE CASCADE` (or `ON
/// UPDATE CASCADE`) changes the child rows after the row between has gone (or changed), and
/// their own triggers then find it no longer there (or count for the new parent); before, the
/// row's child rows are all still its own.
pub(super) fn through_triggers(followers: &Followers, dialect: Dialect) -> String {
    followers
        .through_tables()
        .into_iter()
        .map(|through| match dialect {
            Dialect::Postgres => postgres_through(followers, through),
            Dialect::Mysql => mysql_through(followers, through),
            Dialect::Sqlite => sqlite_through(followers, through),
        })
        .collect()
}

/// The watched columns of the table between `through` (its key and each parent column), and
/// the condition under which an update changes a parent: `OLD."id" IS DISTINCT FROM NEW."id"
/// OR …` (`<=>` on MySQL, `IS NOT` on SQLite).
fn through_changes(followers: &Followers, through: &str, dialect: Dialect) -> (String, String) {
    let mut columns: Vec<&str> = Vec::new();
    for (_, _, t) in followers.through(through) {
        for column in [t.key, t.column] {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
    }
    let changed: Vec<String> = columns
        .iter()
        .map(|column| {
            let column = quote(dialect, column);
            match dialect {
                Dialect::Mysql => format!("NOT (OLD.{column} <=> NEW.{column})"),
                Dialect::Postgres => format!("OLD.{column} IS DISTINCT FROM NEW.{column}"),
                // SQLite's `IS NOT` compares NULLs too, and needs no SQLite newer than 3.39.
                Dialect::Sqlite => format!("OLD.{column} IS NOT NEW.{column}"),
            }
        })
        .collect();
    let columns: Vec<String> = columns.iter().map(|c| quote(dialect, c)).collect();
    (columns.join(", "), changed.join(" OR "))
}

/// `INSERT INTO t (record_id, slot, count) SELECT R."community_id", <slot>, <sign>slotted_s
/// FROM (SELECT SUM(<delta>) AS slotted_s FROM "comments" AS slotted_c WHERE
/// slotted_c."post_id" = R."id" AND <counts>) AS slotted_sum WHERE slotted_s <> 0 AND
/// R."community_id" IS NOT NULL ON CONFLICT …`: the counted child rows of the row between `row`
/// (`NEW` or `OLD`), added to (or, with `sign` `-`, taken from) its parent. PostgreSQL and
/// SQLite.
fn through_add(
    spec: &CounterSpec,
    follow: &FollowSpec,
    through: Through,
    dialect: Dialect,
    row: &str,
    sign: &str,
) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let parent = format!("{row}.{}", q(through.column));
    let columns: Vec<String> = spec.key_columns().iter().map(|c| q(c)).collect();
    format!(
        "INSERT INTO {table} ({columns}, {slot}, {count}) \
         SELECT {parent}, {slot_value}, {value} FROM (SELECT SUM({delta}) AS slotted_s \
         FROM {child} AS slotted_c WHERE slotted_c.{child_key} = {row}.{key} AND {counts}) AS slotted_sum \
         WHERE slotted_s <> 0 AND {parent} IS NOT NULL \
         ON CONFLICT ({columns}, {slot}) DO UPDATE SET {count} = {sum}",
        table = q(spec.table),
        columns = columns.join(", "),
        slot = q("slot"),
        count = q("count"),
        slot_value = trigger_slot_sql(dialect, spec.slots),
        sum = conflict_sum(spec, dialect),
        value = match dialect {
            Dialect::Sqlite => sqlite_in_range(spec, &format!("{sign}slotted_s")),
            Dialect::Postgres | Dialect::Mysql => format!("{sign}slotted_s"),
        },
        delta = follow.delta_sql("slotted_c", q),
        child = q(follow.table),
        child_key = q(follow.key_columns[0]),
        key = q(through.key),
        counts = follow.counts_sql("slotted_c", q),
    )
}

/// PostgreSQL: one row-trigger function for the table between `through`, run `AFTER INSERT`,
/// `BEFORE UPDATE OF` its watched columns (when one of them changes) and `BEFORE DELETE`. A
/// move first locks its row `FOR UPDATE` (a `DELETE` holds that lock already): it waits for the
/// transactions that hold the row `FOR KEY SHARE` while they add child rows to it
/// ([`pg_lock_through`]), then counts their child rows too.
fn postgres_through(followers: &Followers, through: &'static str) -> String {
    let dialect = Dialect::Postgres;
    let q = |ident: &str| quote(dialect, ident);
    let owner = via_owner(followers.child, through);
    let function = q(&trigger_name(&owner, ""));
    let adds = |row: &str, sign: &str| -> String {
        followers
            .through(through)
            .map(|(spec, follow, t)| {
                format!(
                    "{};\n        ",
                    through_add(spec, follow, t, dialect, row, sign)
                )
            })
            .collect()
    };
    let (declare, take) = pg_trigger_takes_index();
    let (columns, changed) = through_changes(followers, through, dialect);
    let table = q(through);
    format!(
        "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $slotted$\n\
         DECLARE\n    \
             {declare}\
         BEGIN\n    \
             {take}    \
             IF TG_OP = 'INSERT' THEN\n        {insert}RETURN NULL;\n    \
             ELSIF TG_OP = 'DELETE' THEN\n        {delete}RETURN OLD;\n    \
             END IF;\n    \
             {lock}{update_old}{update_new}RETURN NEW;\n\
         END\n$slotted$;\n\
         CREATE TRIGGER {insert_trigger} AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {function}();\n\
         CREATE TRIGGER {update_trigger} BEFORE UPDATE OF {columns} ON {table} FOR EACH ROW\n    \
             WHEN ({changed}) EXECUTE FUNCTION {function}();\n\
         CREATE TRIGGER {delete_trigger} BEFORE DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}();\n",
        insert = adds("NEW", ""),
        delete = adds("OLD", "-"),
        lock = followers
            .through(through)
            .next()
            .map(|(_, _, t)| format!(
                "PERFORM 1 FROM {table} WHERE {key} = OLD.{key} FOR UPDATE;\n    ",
                key = q(t.key)
            ))
            .unwrap_or_default(),
        update_old = adds("OLD", "-").replace("\n        ", "\n    "),
        update_new = adds("NEW", "").replace("\n        ", "\n    "),
        insert_trigger = q(&trigger_name(&owner, "insert")),
        update_trigger = q(&trigger_name(&owner, "update")),
        delete_trigger = q(&trigger_name(&owner, "delete")),
    )
}

/// MySQL: row triggers on the table between `through`, `AFTER INSERT`, `BEFORE UPDATE` (doing
/// something when a watched column changes) and `BEFORE DELETE`. The child rows are read with
/// a share lock: a child row written meanwhile by another transaction waits for this one, or
/// is counted here.
fn mysql_through(followers: &Followers, through: &'static str) -> String {
    let dialect = Dialect::Mysql;
    let q = |ident: &str| quote(dialect, ident);
    let owner = via_owner(followers.child, through);
    let adds = |row: &str, sign: &str| -> String {
        followers
            .through(through)
            .map(|(spec, follow, t)| {
                let child = q(follow.table);
                let parent = format!("{row}.{}", q(t.column));
                format!(
                    "    SELECT COALESCE(SUM({delta}), 0) INTO slotted_s FROM {child} \
                     WHERE {child}.{child_key} = {row}.{key} AND {counts} LOCK IN SHARE MODE;\n    \
                     IF slotted_s <> 0 AND {parent} IS NOT NULL THEN\n        \
                         INSERT INTO {table} ({column}, {slot}, {count}) VALUES ({parent}, {slot_value}, {sign}slotted_s) \
                         ON DUPLICATE KEY UPDATE {table}.{count} = {table}.{count} + ({sign}slotted_s);\n    \
                     END IF;\n",
                    delta = follow.delta_sql(&child, q),
                    child_key = q(follow.key_columns[0]),
                    key = q(t.key),
                    counts = follow.counts_sql(&child, q),
                    table = q(spec.table),
                    column = spec.key_columns().iter().map(|c| q(c)).collect::<Vec<_>>().join(", "),
                    slot = q("slot"),
                    count = q("count"),
                    slot_value = trigger_slot_sql(dialect, spec.slots),
                )
            })
            .collect()
    };
    let (_, changed) = through_changes(followers, through, dialect);
    let take = format!("    {};\n", mysql_trigger_takes_index());
    let trigger = |suffix: &str, when: &str, event: &str, body: String| {
        format!(
            "CREATE TRIGGER {name} {when} {event} ON {table} FOR EACH ROW\n\
             BEGIN\n    \
                 DECLARE slotted_s BIGINT DEFAULT 0;\n\
             {body}END;\n",
            name = q(&trigger_name(&owner, suffix)),
            table = q(through),
        )
    };
    // Every other update of the table between (a roll-up into one of its columns, say) does
    // nothing, and takes no writer index.
    let indent = |body: String| {
        body.replace("\n    ", "\n        ")
            .replacen("    ", "        ", 1)
    };
    let update = format!(
        "    IF {changed} THEN\n{take}{old}{new}    END IF;\n",
        take = indent(take.clone()),
        old = indent(adds("OLD", "-")),
        new = indent(adds("NEW", "")),
    );
    [
        trigger(
            "insert",
            "AFTER",
            "INSERT",
            format!("{take}{}", adds("NEW", "")),
        ),
        trigger("update", "BEFORE", "UPDATE", update),
        trigger(
            "delete",
            "BEFORE",
            "DELETE",
            format!("{take}{}", adds("OLD", "-")),
        ),
    ]
    .concat()
}

/// SQLite: row triggers on the table between `through`, `AFTER INSERT`, `BEFORE UPDATE OF` its
/// watched columns (when one changes) and `BEFORE DELETE`.
fn sqlite_through(followers: &Followers, through: &'static str) -> String {
    let dialect = Dialect::Sqlite;
    let q = |ident: &str| quote(dialect, ident);
    let owner = via_owner(followers.child, through);
    let adds = |row: &str, sign: &str| -> String {
        followers
            .through(through)
            .map(|(spec, follow, t)| {
                format!(
                    "    {};\n",
                    through_add(spec, follow, t, dialect, row, sign)
                )
            })
            .collect()
    };
    let (columns, changed) = through_changes(followers, through, dialect);
    let table = q(through);
    format!(
        "CREATE TRIGGER {insert_trigger} AFTER INSERT ON {table} FOR EACH ROW\nBEGIN\n{insert}END;\n\
         CREATE TRIGGER {update_trigger} BEFORE UPDATE OF {columns} ON {table} FOR EACH ROW WHEN {changed}\nBEGIN\n{old}{new}END;\n\
         CREATE TRIGGER {delete_trigger} BEFORE DELETE ON {table} FOR EACH ROW\nBEGIN\n{delete}END;\n",
        insert = adds("NEW", ""),
        old = adds("OLD", "-"),
        new = adds("NEW", ""),
        delete = adds("OLD", "-"),
        insert_trigger = q(&trigger_name(&owner, "insert")),
        update_trigger = q(&trigger_name(&owner, "update")),
        delete_trigger = q(&trigger_name(&owner, "delete")),
    )
}
