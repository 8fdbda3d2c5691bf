//! The DDL of a counter that follows a child table (`follow = comments(post_id)`): triggers on
//! the child table that add each change of a child row to one slot of its parent record, in the
//! writer's own transaction, and the backfill that counts the rows the child table already holds.
//!
//! What a change of a child row adds, in every dialect:
//!
//! | change | adds |
//! |---|---|
//! | `INSERT` of a row that counts | its delta (1, or its summed value) to its parent |
//! | `DELETE` of a row that counted | minus its delta, to its parent |
//! | `UPDATE` | minus the old delta to the old parent (if the old row counted), plus the new delta to the new parent (if the new row counts); one write of the difference when both are the same parent |
//!
//! "Counts" is [`FollowSpec::counts_sql`]: the key columns are not `NULL` and every filter
//! column holds its value. A change that adds 0 writes nothing.
//!
//! The slot is the writing session's writer slot (the `connection` strategy's, see
//! `sql/slot.rs`): concurrent writers of one parent write distinct rows, and one session's
//! writes of a multi-row statement all go to one slot, so two sessions never wait for each
//! other's slot rows and cannot deadlock on them.
//!
//! The migration (up) replaces any triggers of an earlier definition, empties the counter table
//! and counts the child rows already there, with the child table's writers held off for that
//! time (PostgreSQL: `LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE` inside the migration's
//! transaction; MySQL: `LOCK TABLES … WRITE` around the DDL, which MySQL cannot run in a
//! transaction; SQLite: its one writer). So every child row is counted exactly once: before the
//! triggers exist by the backfill, after by the triggers. The removal (down) drops the triggers
//! (and PostgreSQL's trigger function) and nothing else.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec, TRIGGER_EVENTS};
use crate::sql::slot::{mysql_trigger_takes_index, trigger_slot_sql};
use crate::table::CounterSpec;

use super::quote;

/// The trigger's (and PostgreSQL's trigger function's) name, `suffix` the event on MySQL and
/// SQLite (see [`crate::follow::trigger_name`]).
fn object_name(spec: &CounterSpec, suffix: &str) -> String {
    trigger_name(spec.table, suffix)
}

/// The migration that makes `spec`'s counter follow its child table: the triggers and the
/// backfill.
pub fn follow_up_sql(spec: &CounterSpec, follow: &FollowSpec, dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => postgres_up(spec, follow),
        Dialect::Mysql => mysql_up(spec, follow),
        Dialect::Sqlite => sqlite_up(spec, follow),
    }
}

/// The removal of [`follow_up_sql`]'s triggers (and PostgreSQL's trigger function). The counter
/// table and its counts stay (the counter's own migration drops the table).
pub fn follow_down_sql(spec: &CounterSpec, follow: &FollowSpec, dialect: Dialect) -> String {
    drop_triggers(spec, follow, dialect)
}

fn drop_triggers(spec: &CounterSpec, follow: &FollowSpec, dialect: Dialect) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let mut sql: String = TRIGGER_EVENTS
        .iter()
        .map(|event| {
            let trigger = q(&object_name(spec, event));
            match dialect {
                Dialect::Postgres => {
                    format!("DROP TRIGGER IF EXISTS {trigger} ON {};\n", q(follow.table))
                }
                Dialect::Mysql | Dialect::Sqlite => format!("DROP TRIGGER IF EXISTS {trigger};\n"),
            }
        })
        .collect();
    if dialect == Dialect::Postgres {
        sql.push_str(&format!(
            "DROP FUNCTION IF EXISTS {}();\n",
            q(&object_name(spec, ""))
        ));
    }
    sql
}

/// `INSERT INTO t (record_id…, slot, count) SELECT <key of alias>, 0, SUM(delta) FROM child
/// WHERE <counts> GROUP BY <key> HAVING SUM(delta) <> 0`: the counts of the rows already there,
/// in slot 0. On MySQL the child table is named, not aliased: `LOCK TABLES` holds the name.
fn backfill(spec: &CounterSpec, follow: &FollowSpec, dialect: Dialect) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let alias = q(follow.table);
    let keys = follow.parent_key_sql(&alias, q).join(", ");
    let delta = follow.delta_sql(&alias, q);
    // One record: one group of every row (an integer literal after GROUP BY would name a
    // column by its position).
    let group_by = match follow.record {
        Some(_) => String::new(),
        None => format!("GROUP BY {keys}\n"),
    };
    format!(
        "INSERT INTO {table} ({columns}, {slot}, {count})\n\
         SELECT {keys}, 0, SUM({delta}) FROM {child}\n\
         WHERE {counts}\n\
         {group_by}\
         HAVING SUM({delta}) <> 0;\n",
        table = q(spec.table),
        columns = spec
            .key_columns()
            .iter()
            .map(|c| q(c))
            .collect::<Vec<_>>()
            .join(", "),
        slot = q("slot"),
        count = q("count"),
        child = q(follow.table),
        counts = follow.counts_sql(&alias, q),
    )
}

/// The statement that adds `delta` to the record whose key is `row`'s (`NEW` or `OLD`), in
/// `slot`: an upsert. With `only_if`, the row is written only where that condition holds (a
/// `SELECT … WHERE`: SQLite's triggers have no `IF`).
fn add_to_slot(
    spec: &CounterSpec,
    follow: &FollowSpec,
    dialect: Dialect,
    row: &str,
    slot: &str,
    delta: &str,
    only_if: Option<&str>,
) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let columns: Vec<String> = spec.key_columns().iter().map(|c| q(c)).collect();
    let keys = row_keys(follow, dialect, row);
    let source = match only_if {
        None => format!("VALUES ({keys}, {slot}, {delta})"),
        // SQLite reads `INSERT … SELECT … ON CONFLICT` without a `WHERE` as a join's `ON`.
        Some(condition) => format!("SELECT {keys}, {slot}, {delta} WHERE {condition}"),
    };
    let insert = format!(
        "INSERT INTO {table} ({columns}, {slot_column}, {count}) {source}",
        table = q(spec.table),
        columns = columns.join(", "),
        slot_column = q("slot"),
        count = q("count"),
    );
    match dialect {
        Dialect::Mysql => format!(
            "{insert} ON DUPLICATE KEY UPDATE {count} = {count} + ({delta})",
            count = q("count")
        ),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "{insert} ON CONFLICT ({columns}, {slot_column}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}",
            columns = columns.join(", "),
            slot_column = q("slot"),
            count = q("count"),
            table = q(spec.table),
        ),
    }
}

/// `OLD.k = NEW.k [AND …]`: the update keeps the row's parent (both rows count, so no key
/// column is `NULL`). Always true for a counter of one record.
fn same_parent(follow: &FollowSpec, dialect: Dialect) -> String {
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

/// `UPDATE OF "post_id", "deleted"`: the updates that can change a count. With no column to
/// watch (a count of every row of the table) no update can: `None`.
fn update_of(follow: &FollowSpec, dialect: Dialect) -> Option<String> {
    let watched: Vec<String> = follow
        .watched_columns()
        .iter()
        .map(|c| quote(dialect, c))
        .collect();
    (!watched.is_empty()).then(|| format!("UPDATE OF {}", watched.join(", ")))
}

fn header(spec: &CounterSpec, follow: &FollowSpec) -> String {
    format!(
        "-- slotted: {model}.{counter} follows {child}: triggers on {child} add each change of its \
         rows to one slot of the parent record.\n",
        model = spec.model,
        counter = spec.counter,
        child = follow.table,
    )
}

/// PostgreSQL: statement triggers over the statement's transition tables, one per event (a
/// trigger with transition tables has one event), sharing one function. Each statement adds
/// its rows' changes up per record and writes them in one upsert, in key order: a multi-row
/// statement costs one write per record it touched (a row trigger updates the same slot row
/// once per child row, and PostgreSQL walks that row's versions of the transaction on each:
/// an `INSERT … SELECT` of 100,000 rows took 77-95 s with row triggers, 1 s with these, 0.8 s
/// without triggers, docs/bench/follow-prototype), and two statements lock the slot rows they
/// share in the same order. Transition tables take no column list, so an `UPDATE` of any
/// column fires it; one that changes nothing counted writes nothing.
fn postgres_up(spec: &CounterSpec, follow: &FollowSpec) -> String {
    let dialect = Dialect::Postgres;
    let q = |ident: &str| quote(dialect, ident);
    let function = q(&object_name(spec, ""));
    let columns: Vec<String> = spec.key_columns().iter().map(|c| q(c)).collect();
    let keys: Vec<String> = (1..=columns.len())
        .map(|i| format!("slotted_k{i}"))
        .collect();
    // The changes of the rows of `table` (`slotted_new` or `slotted_old`), each with its
    // parent's key and its delta, `sign` 1 or -1.
    let changes = |table: &str, sign: &str| {
        let alias = "slotted_r";
        let parent: Vec<String> = follow
            .parent_key_sql(alias, q)
            .into_iter()
            .zip(&keys)
            .map(|(key, name)| format!("{key} AS {name}"))
            .collect();
        format!(
            "SELECT {parent}, {sign}{delta} AS slotted_d FROM {table} AS {alias} WHERE {counts}",
            parent = parent.join(", "),
            delta = follow.delta_sql(alias, q),
            counts = follow.counts_sql(alias, q),
        )
    };
    let upsert = |source: String| {
        format!(
            "INSERT INTO {table} ({columns}, {slot}, {count})\n        \
             SELECT {keys}, slotted_slot, SUM(slotted_d) FROM ({source}) AS slotted_changes\n        \
             GROUP BY {keys} HAVING SUM(slotted_d) <> 0 ORDER BY {keys}\n        \
             ON CONFLICT ({columns}, {slot}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}",
            table = q(spec.table),
            columns = columns.join(", "),
            slot = q("slot"),
            count = q("count"),
            keys = keys.join(", "),
        )
    };
    let triggers: String = [
        ("insert", "INSERT", "NEW TABLE AS slotted_new"),
        (
            "update",
            "UPDATE",
            "OLD TABLE AS slotted_old NEW TABLE AS slotted_new",
        ),
        ("delete", "DELETE", "OLD TABLE AS slotted_old"),
    ]
    .iter()
    .map(|(suffix, event, tables)| {
        format!(
            "CREATE TRIGGER {name} AFTER {event} ON {child}\n    \
             REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION {function}();\n",
            name = q(&object_name(spec, suffix)),
            child = q(follow.table),
        )
    })
    .collect();
    format!(
        "{header}\
         LOCK TABLE {child} IN SHARE ROW EXCLUSIVE MODE;\n\
         {drop}\
         DELETE FROM {table};\n\
         CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $slotted$\n\
         DECLARE\n    \
             slotted_slot SMALLINT := {slot};\n\
         BEGIN\n    \
             IF TG_OP = 'INSERT' THEN\n        {insert};\n    \
             ELSIF TG_OP = 'DELETE' THEN\n        {delete};\n    \
             ELSE\n        {update};\n    \
             END IF;\n    \
             RETURN NULL;\n\
         END\n$slotted$;\n\
         {triggers}\
         {backfill}",
        header = header(spec, follow),
        child = q(follow.table),
        drop = drop_triggers(spec, follow, dialect),
        table = q(spec.table),
        slot = trigger_slot_sql(dialect, spec.slots),
        insert = upsert(changes("slotted_new", "")),
        delete = upsert(changes("slotted_old", "-")),
        update = upsert(format!(
            "{} UNION ALL {}",
            changes("slotted_new", ""),
            changes("slotted_old", "-")
        )),
        backfill = backfill(spec, follow, dialect),
    )
}

fn mysql_up(spec: &CounterSpec, follow: &FollowSpec) -> String {
    let dialect = Dialect::Mysql;
    let q = |ident: &str| quote(dialect, ident);
    let slot = trigger_slot_sql(dialect, spec.slots);
    // An insert adds the new row where it counts, a delete takes the old one away.
    let one_row = |suffix: &str, event: &str, row: &str, sign: &str| {
        format!(
            "CREATE TRIGGER {name} AFTER {event} ON {child} FOR EACH ROW\n\
             BEGIN\n    \
                 {take};\n    \
                 IF {counts} THEN\n        {add};\n    END IF;\n\
             END;\n",
            take = mysql_trigger_takes_index(),
            name = q(&object_name(spec, suffix)),
            child = q(follow.table),
            counts = follow.counts_sql(row, q),
            add = add_to_slot(
                spec,
                follow,
                dialect,
                row,
                &slot,
                &format!("{sign}{}", follow.delta_sql(row, q)),
                None,
            ),
        )
    };
    let insert = one_row("insert", "INSERT", "NEW", "");
    let delete = one_row("delete", "DELETE", "OLD", "-");
    let update = format!(
        "CREATE TRIGGER {name} AFTER UPDATE ON {child} FOR EACH ROW\n\
         BEGIN\n    \
             DECLARE slotted_old BIGINT DEFAULT 0;\n    \
             DECLARE slotted_new BIGINT DEFAULT 0;\n    \
             {take};\n    \
             IF {old_counts} THEN\n        SET slotted_old = {old_delta};\n    END IF;\n    \
             IF {new_counts} THEN\n        SET slotted_new = {new_delta};\n    END IF;\n    \
             IF slotted_old <> 0 AND slotted_new <> 0 AND {same} THEN\n        \
                 SET slotted_new = slotted_new - slotted_old;\n        SET slotted_old = 0;\n    END IF;\n    \
             IF slotted_old <> 0 THEN\n        {add_old};\n    END IF;\n    \
             IF slotted_new <> 0 THEN\n        {add_new};\n    END IF;\n\
         END;\n",
        name = q(&object_name(spec, "update")),
        take = mysql_trigger_takes_index(),
        child = q(follow.table),
        old_counts = follow.counts_sql("OLD", q),
        new_counts = follow.counts_sql("NEW", q),
        old_delta = follow.delta_sql("OLD", q),
        new_delta = follow.delta_sql("NEW", q),
        same = same_parent(follow, dialect),
        add_old = add_to_slot(spec, follow, dialect, "OLD", &slot, "-slotted_old", None),
        add_new = add_to_slot(spec, follow, dialect, "NEW", &slot, "slotted_new", None),
    );
    format!(
        "{header}\
         LOCK TABLES {child} WRITE, {table} WRITE;\n\
         {drop}\
         DELETE FROM {table};\n\
         {insert}{update}{delete}\
         {backfill}\
         UNLOCK TABLES;\n",
        header = header(spec, follow),
        child = q(follow.table),
        table = q(spec.table),
        drop = drop_triggers(spec, follow, dialect),
        backfill = backfill(spec, follow, dialect),
    )
}

fn sqlite_up(spec: &CounterSpec, follow: &FollowSpec) -> String {
    let dialect = Dialect::Sqlite;
    let q = |ident: &str| quote(dialect, ident);
    let slot = trigger_slot_sql(dialect, spec.slots);
    // A sum's row adds nothing where its value is 0: no write. A count's always adds.
    let upsert = |row: &str, delta: &str, condition: &str| {
        let condition = match follow.sum {
            Some(_) => format!("{condition} AND {delta} <> 0"),
            None => condition.to_owned(),
        };
        add_to_slot(spec, follow, dialect, row, &slot, delta, Some(&condition))
    };
    let update = update_of(follow, dialect).unwrap_or_else(|| "UPDATE".to_owned());
    let old_counts = follow.counts_sql("OLD", q);
    let new_counts = follow.counts_sql("NEW", q);
    let old_delta = follow.delta_sql("OLD", q);
    let new_delta = follow.delta_sql("NEW", q);
    let same = same_parent(follow, dialect);
    let insert = format!(
        "CREATE TRIGGER {name} AFTER INSERT ON {child} FOR EACH ROW\n\
         BEGIN\n    {add};\nEND;\n",
        name = q(&object_name(spec, "insert")),
        child = q(follow.table),
        add = upsert("NEW", &new_delta, &new_counts),
    );
    let delete = format!(
        "CREATE TRIGGER {name} AFTER DELETE ON {child} FOR EACH ROW\n\
         BEGIN\n    {add};\nEND;\n",
        name = q(&object_name(spec, "delete")),
        child = q(follow.table),
        add = upsert("OLD", &format!("-{old_delta}"), &old_counts),
    );
    // Same parent, both counting: one write of the difference. Otherwise the old row's and the
    // new row's, each where it counts.
    let both = format!("({old_counts}) AND ({new_counts}) AND {same}");
    let update = format!(
        "CREATE TRIGGER {name} AFTER {update} ON {child} FOR EACH ROW\n\
         BEGIN\n    {difference};\n    {add_old};\n    {add_new};\nEND;\n",
        name = q(&object_name(spec, "update")),
        child = q(follow.table),
        difference = upsert(
            "NEW",
            &format!("({new_delta}) - ({old_delta})"),
            &format!("{both} AND ({new_delta}) <> ({old_delta})")
        ),
        add_old = upsert(
            "OLD",
            &format!("-{old_delta}"),
            &format!("{old_counts} AND NOT ({both})")
        ),
        add_new = upsert("NEW", &new_delta, &format!("{new_counts} AND NOT ({both})")),
    );
    format!(
        // The DELETE first: a write statement takes SQLite's write lock before it reads, through
        // the busy timeout; `DROP TRIGGER IF EXISTS` first would read the schema in a snapshot,
        // and the transaction's first write would then fail at once with `database is locked`
        // whenever a writer of the child table committed in between.
        "{header}DELETE FROM {table};\n{drop}{insert}{update}{delete}{backfill}",
        header = header(spec, follow),
        drop = drop_triggers(spec, follow, dialect),
        table = q(spec.table),
        backfill = backfill(spec, follow, dialect),
    )
}

/// `NEW."post_id"[, …]`: the parent key of `row`.
fn row_keys(follow: &FollowSpec, dialect: Dialect, row: &str) -> String {
    follow
        .parent_key_sql(row, |ident| quote(dialect, ident))
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TEST_SPEC;

    const COMMENTS: FollowSpec = FollowSpec {
        table: "comments",
        key_columns: &["post_id"],
        record: None,
        sum: None,
        filter: &[("deleted", false), ("removed", false)],
    };

    const SCORE: FollowSpec = FollowSpec {
        table: "post_votes",
        key_columns: &["post_id"],
        record: None,
        sum: Some("score"),
        filter: &[],
    };

    fn spec(table: &'static str) -> CounterSpec {
        CounterSpec { table, ..TEST_SPEC }
    }

    #[test]
    fn the_triggers_count_only_rows_that_pass_the_filter() {
        let up = follow_up_sql(&spec("posts_comments_slots"), &COMMENTS, Dialect::Postgres);
        assert!(
            up.contains(r#"slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE"#),
            "{up}"
        );
        assert!(
            up.contains(r#"CREATE TRIGGER "slotted_follow_posts_comments_slots_update" AFTER UPDATE ON "comments""#),
            "{up}"
        );
        let up = follow_up_sql(&spec("posts_comments_slots"), &COMMENTS, Dialect::Sqlite);
        assert!(
            up.contains(r#"AFTER UPDATE OF "post_id", "deleted", "removed" ON "comments""#),
            "{up}"
        );
        let up = follow_up_sql(&spec("posts_score_slots"), &SCORE, Dialect::Mysql);
        assert!(
            up.contains("SET slotted_new = COALESCE(NEW.`score`, 0)"),
            "{up}"
        );
        assert!(
            up.starts_with("-- slotted: Post.likes follows post_votes"),
            "{up}"
        );
    }

    #[test]
    fn the_removal_drops_only_the_triggers() {
        let down = follow_down_sql(&spec("posts_comments_slots"), &COMMENTS, Dialect::Postgres);
        assert_eq!(
            down,
            "DROP TRIGGER IF EXISTS \"slotted_follow_posts_comments_slots_insert\" ON \"comments\";\n\
             DROP TRIGGER IF EXISTS \"slotted_follow_posts_comments_slots_update\" ON \"comments\";\n\
             DROP TRIGGER IF EXISTS \"slotted_follow_posts_comments_slots_delete\" ON \"comments\";\n\
             DROP FUNCTION IF EXISTS \"slotted_follow_posts_comments_slots\"();\n"
        );
        let down = follow_down_sql(&spec("posts_comments_slots"), &COMMENTS, Dialect::Sqlite);
        assert_eq!(down.lines().count(), 3);
        assert!(down
            .lines()
            .all(|l| l.starts_with("DROP TRIGGER IF EXISTS")));
    }

    #[test]
    fn long_names_are_shortened_within_every_backends_limit() {
        let long = "a_counter_table_whose_name_is_long_enough_to_pass_the_limit_slots";
        let name = object_name(&spec(long), "update");
        assert!(name.len() <= 63, "{name}");
        assert_ne!(name, object_name(&spec(long), "insert"));
    }

    /// `SLOTTED_PRINT_FOLLOW=1 cargo test -p slotted-core --lib follow -- --nocapture`: the DDL.
    #[test]
    fn print() {
        if std::env::var("SLOTTED_PRINT_FOLLOW").is_ok() {
            for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
                println!(
                    "{}",
                    follow_up_sql(&spec("posts_comments_slots"), &COMMENTS, dialect)
                );
            }
        }
    }
}
