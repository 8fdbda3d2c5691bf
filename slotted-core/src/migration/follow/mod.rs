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
//! One set of triggers on a child table keeps every counter that follows it ([`Followers`]):
//! one migration per child table, one trigger call per statement (or row) whatever the number of
//! counters, the writer's index taken once per call.
//!
//! The slot is the writing session's writer slot (the `connection` strategy's, see
//! `sql/slot.rs`): concurrent writers of one parent write distinct rows, and one session's
//! writes of a multi-row statement all go to one slot, so two sessions never wait for each
//! other's slot rows and cannot deadlock on them.
//!
//! The migration (up) replaces any triggers of an earlier definition, empties the counter tables
//! and counts the child rows already there, with the child table's writers held off for that
//! time (PostgreSQL: `LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE` inside the migration's
//! transaction; MySQL: `LOCK TABLES … WRITE` around the DDL, which MySQL cannot run in a
//! transaction; SQLite: its one writer). So every child row is counted exactly once: before the
//! triggers exist by the backfill, after by the triggers. The removal (down) drops the triggers
//! (and PostgreSQL's trigger function) and nothing else.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec, Through, TRIGGER_EVENTS};
use crate::sql::slot::{mysql_trigger_takes_index, pg_trigger_takes_index, trigger_slot_sql};
use crate::table::CounterSpec;

use super::quote;

mod through;
use through::{pg_lock_through, through_triggers};

/// The counters that follow one child table, the unit of its triggers: one trigger per event
/// (and on PostgreSQL one function) keeps them all, so a child row costs one trigger call
/// whatever the number of counters following it. In the order of their counter tables' names:
/// every statement writes the counter tables in that order, and two statements that touch the
/// same slot rows take their locks in the same order.
#[derive(Debug, Clone)]
pub(crate) struct Followers<'a> {
    pub child: &'static str,
    pub counters: Vec<(&'a CounterSpec, &'a FollowSpec)>,
}

impl<'a> Followers<'a> {
    /// The counters of `specs` that follow `child`, each table once.
    pub fn of(child: &'static str, specs: &'a [CounterSpec]) -> Self {
        let mut counters: Vec<(&CounterSpec, &FollowSpec)> = specs
            .iter()
            .filter_map(|spec| Some((spec, spec.follow.as_ref()?)))
            .filter(|(_, follow)| follow.table == child)
            .collect();
        counters.sort_by_key(|(spec, _)| spec.table);
        counters.dedup_by_key(|(spec, _)| spec.table);
        Followers { child, counters }
    }

    /// What the triggers carry, for the migration's version: every counter's definition (its
    /// table, the child's columns, the filter, the record and the slot count).
    pub fn definition(&self) -> String {
        let mut definition = format!("follow/{}", self.child);
        for (spec, follow) in &self.counters {
            definition.push_str(&format!(
                "/{}/{}/{:?}/{:?}/{}/{:?}",
                spec.table,
                follow.key_columns.join(","),
                follow.sum,
                follow.filter,
                spec.slots,
                follow.record,
            ));
            // Added only when given, so that the versions of the counters without it stay.
            if let Some(through) = follow.through {
                definition.push_str(&format!(
                    "/through/{}/{}/{}",
                    through.table, through.key, through.column
                ));
            }
        }
        definition
    }

    /// The tables between of the counters that count through one (`through = posts(…)`),
    /// each once, in name order: each gets triggers of its own ([`through_triggers`]).
    pub fn through_tables(&self) -> Vec<&'static str> {
        let mut tables: Vec<&'static str> = self
            .counters
            .iter()
            .filter_map(|(_, follow)| Some(follow.through?.table))
            .collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    /// The counters that count through `table`, each with its [`Through`].
    fn through(
        &self,
        table: &str,
    ) -> impl Iterator<Item = (&CounterSpec, &FollowSpec, Through)> + '_ {
        let table = table.to_owned();
        self.counters.iter().filter_map(move |(spec, follow)| {
            let through = follow.through.filter(|t| t.table == table)?;
            Some((*spec, *follow, through))
        })
    }

    /// The tables the migration holds writers off while it counts the rows already there: the
    /// child table, then the tables between.
    fn held_tables(&self) -> Vec<&'static str> {
        std::iter::once(self.child)
            .chain(self.through_tables())
            .collect()
    }

    fn header(&self) -> String {
        let counters: Vec<String> = self
            .counters
            .iter()
            .map(|(spec, _)| format!("{}.{}", spec.model, spec.counter))
            .collect();
        format!(
            "-- slotted: {counters} follow {child}: triggers on {child} add each change of its \
             rows to one slot of each parent record.\n",
            counters = counters.join(", "),
            child = self.child,
        )
    }
}

/// The migration that makes the counters of `specs` that follow the child table `child` follow
/// it: one set of triggers for them all, and each counter's backfill. Every counter that
/// follows `child` belongs in one migration: the triggers of `child` keep exactly the counters
/// given, and replace those of an earlier migration.
pub fn follow_up_sql(child: &'static str, specs: &[CounterSpec], dialect: Dialect) -> String {
    let followers = Followers::of(child, specs);
    if followers.counters.is_empty() {
        return String::new();
    }
    match dialect {
        Dialect::Postgres => postgres_up(&followers),
        Dialect::Mysql => mysql_up(&followers),
        Dialect::Sqlite => sqlite_up(&followers),
    }
}

/// The removal of [`follow_up_sql`]'s triggers (and PostgreSQL's trigger function) on `child`.
/// The counter tables and their counts stay (each counter's own migration drops its table).
pub fn follow_down_sql(child: &'static str, dialect: Dialect) -> String {
    drop_triggers(child, dialect)
}

/// Drops the triggers on `child` named after `owner` (the child table; or, for the triggers
/// of earlier versions of this library, which had one set per counter, a counter table).
fn drop_named(child: &str, owner: &str, dialect: Dialect) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let mut sql: String = TRIGGER_EVENTS
        .iter()
        .map(|event| {
            let trigger = q(&trigger_name(owner, event));
            match dialect {
                Dialect::Postgres => format!("DROP TRIGGER IF EXISTS {trigger} ON {};\n", q(child)),
                Dialect::Mysql | Dialect::Sqlite => format!("DROP TRIGGER IF EXISTS {trigger};\n"),
            }
        })
        .collect();
    if dialect == Dialect::Postgres {
        sql.push_str(&format!(
            "DROP FUNCTION IF EXISTS {}();\n",
            q(&trigger_name(owner, ""))
        ));
    }
    sql
}

fn drop_triggers(child: &str, dialect: Dialect) -> String {
    drop_named(child, child, dialect)
}

/// The name the triggers on the table between `through` carry, for the counters of `child`:
/// `slotted_follow_comments_via_posts_update`.
pub(crate) fn via_owner(child: &str, through: &str) -> String {
    format!("{child}_via_{through}")
}

/// Drops the triggers that the counters of `followers` put on their tables between.
fn drop_via(followers: &Followers, dialect: Dialect) -> String {
    followers
        .through_tables()
        .into_iter()
        .map(|through| drop_named(through, &via_owner(followers.child, through), dialect))
        .collect()
}

/// The removal of the triggers of `child`'s follow migration for the counters of `specs`: those
/// on the child table, and those on the tables between of counters that count through one.
pub(crate) fn down(child: &'static str, specs: &[CounterSpec], dialect: Dialect) -> String {
    let mut sql = drop_triggers(child, dialect);
    sql.push_str(&drop_via(&Followers::of(child, specs), dialect));
    sql
}

/// The up migration's drops: the child table's triggers, and any of the one-set-per-counter
/// triggers an earlier version of this library made for these counters (which would otherwise
/// count every row twice).
fn drop_before_up(followers: &Followers, dialect: Dialect) -> String {
    let mut sql = drop_triggers(followers.child, dialect);
    sql.push_str(&drop_via(followers, dialect));
    for (spec, _) in &followers.counters {
        sql.push_str(&drop_named(followers.child, spec.table, dialect));
    }
    sql
}

/// `DELETE FROM` every counter table: the backfill counts afresh.
fn empty_tables(followers: &Followers, dialect: Dialect) -> String {
    followers
        .counters
        .iter()
        .map(|(spec, _)| format!("DELETE FROM {};\n", quote(dialect, spec.table)))
        .collect()
}

/// Every counter's backfill.
fn backfills(followers: &Followers, dialect: Dialect) -> String {
    followers
        .counters
        .iter()
        .map(|(spec, follow)| backfill(spec, follow, dialect))
        .collect()
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
         SELECT {keys}, 0, SUM({delta}) FROM {child}{join}\n\
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
        join = follow.join_sql(&alias, q),
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
fn conflict_sum(spec: &CounterSpec, dialect: Dialect) -> String {
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
fn sqlite_in_range(spec: &CounterSpec, expr: &str) -> String {
    format!(
        "CASE WHEN typeof({expr}) = 'integer' THEN {expr} ELSE RAISE(ABORT, \
         'slotted: a count of {table} would pass BIGINT; the change of the child row is not written') END",
        table = spec.table.replace('\'', "''"),
    )
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
fn postgres_up(followers: &Followers) -> String {
    let dialect = Dialect::Postgres;
    let q = |ident: &str| quote(dialect, ident);
    let function = q(&trigger_name(followers.child, ""));
    let upserts = |sources: &dyn Fn(&FollowSpec) -> String, tables: &[&str]| -> String {
        pg_lock_through(followers, tables)
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
    format!(
        "{header}\
         LOCK TABLE {held} IN SHARE ROW EXCLUSIVE MODE;\n\
         {drop}\
         {empty}\
         CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $slotted$\n\
         DECLARE\n    \
             {declare}\
         BEGIN\n    \
             {take}    \
             IF TG_OP = 'INSERT' THEN\n        {insert};\n    \
             ELSIF TG_OP = 'DELETE' THEN\n        {delete};\n    \
             ELSE\n        {update};\n    \
             END IF;\n    \
             RETURN NULL;\n\
         END\n$slotted$;\n\
         {triggers}\
         {via}\
         {backfills}",
        header = followers.header(),
        drop = drop_before_up(followers, dialect),
        empty = empty_tables(followers, dialect),
        insert = upserts(
            &|follow| pg_changes(follow, "slotted_new", ""),
            &["slotted_new"]
        ),
        delete = upserts(
            &|follow| pg_changes(follow, "slotted_old", "-"),
            &["slotted_old"]
        ),
        update = upserts(
            &|follow| format!(
                "{} UNION ALL {}",
                pg_changes(follow, "slotted_new", ""),
                pg_changes(follow, "slotted_old", "-")
            ),
            &["slotted_new", "slotted_old"]
        ),
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

/// MySQL: row triggers, one per event, which take the session's writer index once and then
/// add the row's change to each counter.
fn mysql_up(followers: &Followers) -> String {
    let dialect = Dialect::Mysql;
    let q = |ident: &str| quote(dialect, ident);
    let name = |suffix: &str| q(&trigger_name(followers.child, suffix));
    // An insert adds the new row where it counts, a delete takes the old one away.
    let one_row = |suffix: &str, event: &str, row: &str, sign: &str| {
        let adds: String = followers
            .counters
            .iter()
            .map(|(spec, follow)| {
                format!(
                    "    IF {counts} THEN\n        {add};\n    END IF;\n",
                    counts = follow.counts_sql(row, q),
                    add = add_to_slot(
                        spec,
                        follow,
                        dialect,
                        row,
                        &format!("{sign}{}", follow.delta_sql(row, q)),
                        None,
                    ),
                )
            })
            .collect();
        format!(
            "CREATE TRIGGER {name} AFTER {event} ON {child} FOR EACH ROW\n\
             BEGIN\n    {take};\n{adds}END;\n",
            name = name(suffix),
            take = mysql_trigger_takes_index(),
            child = q(followers.child),
        )
    };
    let insert = one_row("insert", "INSERT", "NEW", "");
    let delete = one_row("delete", "DELETE", "OLD", "-");
    // Per counter: the old row's delta where it counted, the new row's where it counts; one
    // write of the difference when both are the same parent.
    let updates: String = followers
        .counters
        .iter()
        .map(|(spec, follow)| {
            format!(
                "    SET slotted_old = 0, slotted_new = 0;\n    \
                 IF {old_counts} THEN\n        SET slotted_old = {old_delta};\n    END IF;\n    \
                 IF {new_counts} THEN\n        SET slotted_new = {new_delta};\n    END IF;\n    \
                 IF slotted_old <> 0 AND slotted_new <> 0 AND {same} THEN\n        \
                     SET slotted_new = slotted_new - slotted_old;\n        SET slotted_old = 0;\n    END IF;\n    \
                 IF slotted_old <> 0 THEN\n        {add_old};\n    END IF;\n    \
                 IF slotted_new <> 0 THEN\n        {add_new};\n    END IF;\n",
                old_counts = follow.counts_sql("OLD", q),
                new_counts = follow.counts_sql("NEW", q),
                old_delta = follow.delta_sql("OLD", q),
                new_delta = follow.delta_sql("NEW", q),
                same = same_parent(follow, dialect),
                add_old = add_to_slot(spec, follow, dialect, "OLD", "-slotted_old", None),
                add_new = add_to_slot(spec, follow, dialect, "NEW", "slotted_new", None),
            )
        })
        .collect();
    let update = format!(
        "CREATE TRIGGER {name} AFTER UPDATE ON {child} FOR EACH ROW\n\
         BEGIN\n    \
             DECLARE slotted_old BIGINT DEFAULT 0;\n    \
             DECLARE slotted_new BIGINT DEFAULT 0;\n    \
             {take};\n\
         {updates}\
         END;\n",
        name = name("update"),
        take = mysql_trigger_takes_index(),
        child = q(followers.child),
    );
    let tables: Vec<String> = followers
        .held_tables()
        .into_iter()
        .chain(followers.counters.iter().map(|(spec, _)| spec.table))
        .map(|table| format!("{} WRITE", q(table)))
        .collect();
    format!(
        "{header}\
         LOCK TABLES {tables};\n\
         {drop}\
         {empty}\
         {insert}{update}{delete}\
         {via}\
         {backfills}\
         UNLOCK TABLES;\n",
        header = followers.header(),
        tables = tables.join(", "),
        drop = drop_before_up(followers, dialect),
        empty = empty_tables(followers, dialect),
        via = through_triggers(followers, dialect),
        backfills = backfills(followers, dialect),
    )
}

fn sqlite_up(followers: &Followers) -> String {
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
        "{header}{empty}{drop}{insert}{update}{delete}{via}{backfills}",
        header = followers.header(),
        empty = empty_tables(followers, dialect),
        drop = drop_before_up(followers, dialect),
        insert = trigger("insert", "INSERT", &insert),
        update = trigger("update", &update_event, &update),
        delete = trigger("delete", "DELETE", &delete),
        via = through_triggers(followers, dialect),
        backfills = backfills(followers, dialect),
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
        through: None,
    };

    const SCORE: FollowSpec = FollowSpec {
        table: "post_votes",
        key_columns: &["post_id"],
        record: None,
        sum: Some("score"),
        filter: &[],
        through: None,
    };

    fn spec(table: &'static str, follow: FollowSpec) -> CounterSpec {
        CounterSpec {
            table,
            follow: Some(follow),
            ..TEST_SPEC
        }
    }

    #[test]
    fn the_triggers_count_only_rows_that_pass_the_filter() {
        let comments = [spec("posts_comments_slots", COMMENTS)];
        let up = follow_up_sql("comments", &comments, Dialect::Postgres);
        assert!(
            up.contains(r#"slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE"#),
            "{up}"
        );
        assert!(
            up.contains(
                r#"CREATE TRIGGER "slotted_follow_comments_update" AFTER UPDATE ON "comments""#
            ),
            "{up}"
        );
        let up = follow_up_sql("comments", &comments, Dialect::Sqlite);
        assert!(
            up.contains(r#"AFTER UPDATE OF "post_id", "deleted", "removed" ON "comments""#),
            "{up}"
        );
        let votes = [spec("posts_score_slots", SCORE)];
        let up = follow_up_sql("post_votes", &votes, Dialect::Mysql);
        assert!(
            up.contains("SET slotted_new = COALESCE(NEW.`score`, 0)"),
            "{up}"
        );
        assert!(
            up.starts_with("-- slotted: Post.likes follow post_votes"),
            "{up}"
        );
        // A table no counter follows: nothing.
        assert_eq!(follow_up_sql("post_votes", &comments, Dialect::Mysql), "");
    }

    #[test]
    fn one_set_of_triggers_keeps_every_counter_of_a_child_table_in_table_order() {
        let site = FollowSpec {
            table: "comments",
            key_columns: &[],
            record: Some(1),
            sum: None,
            filter: &[("local", true)],
            through: None,
        };
        let specs = [
            spec("sites_comments_slots", site),
            spec("posts_comments_slots", COMMENTS),
            spec("posts_score_slots", SCORE),
        ];
        for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
            let up = follow_up_sql("comments", &specs, dialect);
            let creates = up.matches("CREATE TRIGGER").count();
            assert_eq!(creates, 3, "{dialect:?}: {up}");
            let posts = up.find("INSERT INTO ").map(|_| ()).and(up.find(&format!(
                "INSERT INTO {}",
                quote(dialect, "posts_comments_slots")
            )));
            let sites = up.find(&format!(
                "INSERT INTO {}",
                quote(dialect, "sites_comments_slots")
            ));
            assert!(posts.unwrap() < sites.unwrap(), "{dialect:?}: {up}");
            // The counter of another child table is not in them.
            assert!(!up.contains("posts_score_slots"), "{dialect:?}: {up}");
            // The writer index is taken once per trigger.
            let takes = match dialect {
                Dialect::Postgres => up.matches("pg_try_advisory_lock").count(),
                Dialect::Mysql => up.matches("WHILE @slotted_writer IS NULL").count(),
                Dialect::Sqlite => 0,
            };
            assert_eq!(
                takes,
                match dialect {
                    Dialect::Postgres => 1,
                    Dialect::Mysql => 3,
                    Dialect::Sqlite => 0,
                },
                "{dialect:?}: {up}"
            );
        }
    }

    #[test]
    fn a_count_through_a_table_between_puts_triggers_on_it_too() {
        let through = FollowSpec {
            through: Some(crate::follow::Through {
                table: "posts",
                key: "id",
                column: "community_id",
            }),
            ..COMMENTS
        };
        let specs = [spec("communities_comments_slots", through)];
        for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
            let up = follow_up_sql("comments", &specs, dialect);
            assert_eq!(up.matches("CREATE TRIGGER").count(), 6, "{dialect:?}: {up}");
            let on_posts = format!("ON {} FOR EACH ROW", quote(dialect, "posts"));
            assert_eq!(up.matches(&on_posts).count(), 3, "{dialect:?}: {up}");
            // The moves and deletes of a post run before the row changes, so that a
            // cascade's changes of its comments come after.
            assert!(up.contains("BEFORE DELETE"), "{dialect:?}: {up}");
            let down = down("comments", &specs, dialect);
            assert_eq!(
                down.matches("DROP TRIGGER").count(),
                6,
                "{dialect:?}: {down}"
            );
        }
        let up = follow_up_sql("comments", &specs, Dialect::Postgres);
        assert!(
            up.contains(r#"LOCK TABLE "comments", "posts" IN SHARE ROW EXCLUSIVE MODE"#),
            "{up}"
        );
        assert!(
            up.contains(r#"ORDER BY "id" FOR KEY SHARE"#),
            "the posts of a statement's comments are locked in key order: {up}"
        );
        assert!(
            up.contains(r#"PERFORM 1 FROM "posts" WHERE "id" = OLD."id" FOR UPDATE"#),
            "a move waits for the comments being added to its post: {up}"
        );
        let up = follow_up_sql("comments", &specs, Dialect::Mysql);
        assert!(up.contains("LOCK IN SHARE MODE"), "{up}");
    }

    #[test]
    fn the_removal_drops_only_the_triggers() {
        let down = follow_down_sql("comments", Dialect::Postgres);
        assert_eq!(
            down,
            "DROP TRIGGER IF EXISTS \"slotted_follow_comments_insert\" ON \"comments\";\n\
             DROP TRIGGER IF EXISTS \"slotted_follow_comments_update\" ON \"comments\";\n\
             DROP TRIGGER IF EXISTS \"slotted_follow_comments_delete\" ON \"comments\";\n\
             DROP FUNCTION IF EXISTS \"slotted_follow_comments\"();\n"
        );
        let down = follow_down_sql("comments", Dialect::Sqlite);
        assert_eq!(down.lines().count(), 3);
        assert!(down
            .lines()
            .all(|l| l.starts_with("DROP TRIGGER IF EXISTS")));
    }

    #[test]
    fn long_names_are_shortened_within_every_backends_limit() {
        let long = "a_child_table_whose_name_is_long_enough_to_pass_the_identifier_limit";
        let name = trigger_name(long, "update");
        assert!(name.len() <= 63, "{name}");
        assert_ne!(name, trigger_name(long, "insert"));
    }

    /// `SLOTTED_PRINT_FOLLOW=1 cargo test -p slotted-core --lib follow -- --nocapture`: the DDL.
    #[test]
    fn print() {
        if std::env::var("SLOTTED_PRINT_FOLLOW").is_ok() {
            let specs = [spec("posts_comments_slots", COMMENTS)];
            for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
                println!("{}", follow_up_sql("comments", &specs, dialect));
            }
        }
    }
}
