//! PostgreSQL's follow triggers.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec};
use crate::sql::slot::{pg_trigger_takes_index, trigger_slot_sql};
use crate::table::CounterSpec;

use super::super::quote;
use super::backfill::backfills;
use super::through::{pg_foreign_keys_lock, pg_lock_through, through_triggers};
use super::{drop_before_up, empty_tables, text_key_columns, Followers};

/// PostgreSQL: statement triggers over the statement's transition tables, one per event (a
/// trigger with transition tables has one event), sharing one function, which takes the
/// session's writer index once and then, for each counter, adds the statement's rows' changes
/// up per record and writes them in one upsert, in key order: a multi-row statement costs one
/// write per record it touched (a row trigger updates the same slot row once per child row,
/// and PostgreSQL walks that row's versions of the transaction on each: an `INSERT … SELECT`
/// of 100,000 rows took 77-95 s with row triggers, 1 s with these, 0.8 s without triggers,
/// docs/bench/follow-prototype), and two statements lock the slot rows they share in the same
/// order. Transition tables take no column list, so an `UPDATE` of any column fires it; one
/// that changes nothing counted writes nothing.
pub(super) fn up(followers: &Followers) -> String {
    let dialect = Dialect::Postgres;
    let q = |ident: &str| quote(dialect, ident);
    let function = q(&trigger_name(followers.child, ""));
    let upserts = |sources: &dyn Fn(&FollowSpec) -> String, tables: &[&str], lock: bool| {
        let locks = if lock {
            pg_lock_through(followers, tables)
        } else {
            Vec::new()
        };
        locks
            .into_iter()
            .chain(
                followers
                    .counters
                    .iter()
                    .map(|(spec, follow)| pg_upsert(spec, follow, &sources(follow))),
            )
            .collect::<Vec<_>>()
            .join(";\n        ")
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
            name = q(&trigger_name(followers.child, suffix)),
            child = q(followers.child),
        )
    })
    .collect();
    let (declare, take) = pg_trigger_takes_index();
    // `insert_locks`: whether an `INSERT` locks the rows between itself.
    let create_function = |insert_locks: bool, markers: &str| {
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $slotted$\n\
             {markers}\
             DECLARE\n    \
                 {declare}\
             BEGIN\n    \
                 {take}    \
                 IF TG_OP = 'INSERT' THEN\n        {insert};\n    \
                 ELSIF TG_OP = 'DELETE' THEN\n        {delete};\n    \
                 ELSE\n        {update};\n    \
                 END IF;\n    \
                 RETURN NULL;\n\
             END\n$slotted$;\n",
            insert = upserts(
                &|follow| pg_changes(follow, "slotted_new", ""),
                &["slotted_new"],
                insert_locks
            ),
            delete = upserts(
                &|follow| pg_changes(follow, "slotted_old", "-"),
                &["slotted_old"],
                true
            ),
            update = upserts(
                &|follow| format!(
                    "{} UNION ALL {}",
                    pg_changes(follow, "slotted_new", ""),
                    pg_changes(follow, "slotted_old", "-")
                ),
                &["slotted_new", "slotted_old"],
                true
            ),
        )
    };
    // Where the child's foreign keys lock the rows between already (checked when the
    // migration runs), an `INSERT` takes no lock of its own: `pg_foreign_keys_lock`.
    let create_function = match pg_foreign_keys_lock(followers) {
        None => create_function(true, ""),
        Some((markers, covered)) => format!(
            "DO $slotted_fk$\nBEGIN\nIF {covered} THEN\n{without}ELSE\n{with}END IF;\nEND\n$slotted_fk$;\n",
            without = create_function(false, &markers),
            with = create_function(true, ""),
        ),
    };
    format!(
        "{header}\
         {key_checks}\
         LOCK TABLE {held} IN SHARE ROW EXCLUSIVE MODE;\n\
         {drop}\
         {empty}\
         {create_function}\
         {triggers}\
         {via}\
         {backfills}",
        header = followers.header(),
        key_checks = text_key_checks(followers),
        drop = drop_before_up(followers, dialect),
        empty = empty_tables(followers, dialect),
        held = followers
            .held_tables()
            .iter()
            .map(|table| q(table))
            .collect::<Vec<_>>()
            .join(", "),
        via = through_triggers(followers, dialect),
        backfills = backfills(followers, dialect),
    )
}

/// Fails the migration, before it changes anything, when a column whose values are a follow
/// counter's text keys takes different text for one value: a nondeterministic collation (an ICU
/// collation made with `deterministic = false`, such as a case-insensitive one), or the `citext`
/// type. The counter's key column compares keys byte for byte, so `Rust` and `rust`, one parent
/// to the application, would be two records to the counter, and the trigger's `GROUP BY` would
/// add both under one of them.
fn text_key_checks(followers: &Followers) -> String {
    let checks = [
        (
            "JOIN pg_collation c ON c.oid = a.attcollation",
            "NOT c.collisdeterministic",
            "give it a deterministic collation (the database default, or COLLATE \"C\")",
        ),
        (
            "",
            // NULL, and so no row, where the extension is not installed.
            "a.atttypid = to_regtype('citext')",
            "make it text (citext ignores case)",
        ),
    ];
    let mut sql = String::new();
    for (table, column, _) in text_key_columns(followers) {
        for (join, fails, fix) in checks {
            sql.push_str(&format!(
                "DO $slotted_check$\nBEGIN\n\
                 IF EXISTS (SELECT 1 FROM pg_attribute a {join} \
                 WHERE a.attrelid = to_regclass('{relation}') AND a.attname = '{column}' \
                 AND {fails}) THEN\n\
                 RAISE EXCEPTION 'slotted: %.% keys a follow counter: {fix}', '{table}', \
                 '{column}';\n\
                 END IF;\nEND\n$slotted_check$;\n",
                relation = quote(Dialect::Postgres, table).replace('\'', "''"),
                table = table.replace('\'', "''"),
                column = column.replace('\'', "''"),
            ));
        }
    }
    sql
}

/// The changes of the rows of the transition table `table` (`slotted_new` or `slotted_old`)
/// that count for `follow`'s counter, each with its parent's key and its delta, `sign` `""`
/// or `"-"`.
fn pg_changes(follow: &FollowSpec, table: &str, sign: &str) -> String {
    let q = |ident: &str| quote(Dialect::Postgres, ident);
    let alias = "slotted_r";
    let parent: Vec<String> = follow
        .parent_key_sql(alias, q)
        .into_iter()
        .enumerate()
        .map(|(i, key)| format!("{key} AS slotted_k{}", i + 1))
        .collect();
    format!(
        "SELECT {parent}, {sign}{delta} AS slotted_d FROM {table} AS {alias}{join} WHERE {counts}",
        parent = parent.join(", "),
        join = follow.join_sql(alias, q),
        delta = follow.delta_sql(alias, q),
        counts = follow.counts_sql(alias, q),
    )
}

/// One upsert of the changes `source` ([`pg_changes`]), added up per record, in key order.
fn pg_upsert(spec: &CounterSpec, follow: &FollowSpec, source: &str) -> String {
    let q = |ident: &str| quote(Dialect::Postgres, ident);
    let columns: Vec<String> = spec.key_columns().iter().map(|c| q(c)).collect();
    let keys: Vec<String> = (1..=follow.parent_key_sql("", q).len())
        .map(|i| format!("slotted_k{i}"))
        .collect();
    format!(
        "INSERT INTO {table} ({columns}, {slot}, {count})\n        \
         SELECT {keys}, {slot_value}, SUM(slotted_d) FROM ({source}) AS slotted_changes\n        \
         GROUP BY {keys} HAVING SUM(slotted_d) <> 0 ORDER BY {keys}\n        \
         ON CONFLICT ({columns}, {slot}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}",
        table = q(spec.table),
        columns = columns.join(", "),
        slot = q("slot"),
        slot_value = trigger_slot_sql(Dialect::Postgres, spec.slots),
        count = q("count"),
        keys = keys.join(", "),
    )
}
