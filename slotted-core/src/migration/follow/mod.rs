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
//! triggers exist by the backfill, after by the triggers. With [`Backfill::Online`] it makes no
//! backfill, and holds the writers off only for the DDL: the repair job counts those rows later,
//! beside the writers (`backfill.rs` says why that is exact). The removal (down) drops the
//! triggers (and PostgreSQL's trigger function) and nothing else.

use crate::dialect::Dialect;
use crate::follow::{trigger_name, FollowSpec, Through, TRIGGER_EVENTS};
use crate::key::KeyKind;
use crate::table::CounterSpec;

use super::quote;

mod backfill;
pub use backfill::Backfill;
mod mysql;
mod postgres;
mod sqlite;
#[cfg(test)]
mod tests;
mod through;
mod upsert;

/// The counters that follow one child table, the unit of its triggers: one trigger per event
/// (and on PostgreSQL one function) keeps them all, so a child row costs one trigger call
/// whatever the number of counters following it. In the order of their counter tables' names:
/// every statement writes the counter tables in that order, and two statements that touch the
/// same slot rows take their locks in the same order.
#[derive(Debug, Clone)]
pub(crate) struct Followers<'a> {
    pub child: &'static str,
    pub counters: Vec<(&'a CounterSpec, &'a FollowSpec)>,
    /// Whether the migration counts the rows already there.
    pub backfill: Backfill,
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
        Followers {
            child,
            counters,
            backfill: Backfill::Locked,
        }
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
        let mut header = format!(
            "-- slotted: {counters} follow {child}: triggers on {child} add each change of its \
             rows to one slot of each parent record.\n",
            counters = counters.join(", "),
            child = self.child,
        );
        if self.backfill == Backfill::Online {
            header.push_str(&format!(
                "-- The rows {child} holds now are not counted here (Backfill::Online): count them \
                 with repair_follow_all once this has run.\n",
                child = self.child,
            ));
        }
        header
    }
}

/// The migration that makes the counters of `specs` that follow the child table `child` follow
/// it: one set of triggers for them all, and each counter's backfill. Every counter that
/// follows `child` belongs in one migration: the triggers of `child` keep exactly the counters
/// given, and replace those of an earlier migration.
pub fn follow_up_sql(child: &'static str, specs: &[CounterSpec], dialect: Dialect) -> String {
    follow_up_sql_with(child, specs, dialect, Backfill::Locked)
}

/// [`follow_up_sql`], with the rows already there counted as `backfill` says.
pub fn follow_up_sql_with(
    child: &'static str,
    specs: &[CounterSpec],
    dialect: Dialect,
    backfill: Backfill,
) -> String {
    let mut followers = Followers::of(child, specs);
    followers.backfill = backfill;
    if followers.counters.is_empty() {
        return String::new();
    }
    match dialect {
        Dialect::Postgres => postgres::up(&followers),
        Dialect::Mysql => mysql::up(&followers),
        Dialect::Sqlite => sqlite::up(&followers),
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
pub(super) fn drop_before_up(followers: &Followers, dialect: Dialect) -> String {
    let mut sql = drop_triggers(followers.child, dialect);
    sql.push_str(&drop_via(followers, dialect));
    for (spec, _) in &followers.counters {
        sql.push_str(&drop_named(followers.child, spec.table, dialect));
    }
    sql
}

/// `DELETE FROM` every counter table: the backfill counts afresh.
pub(super) fn empty_tables(followers: &Followers, dialect: Dialect) -> String {
    followers
        .counters
        .iter()
        .map(|(spec, _)| format!("DELETE FROM {};\n", quote(dialect, spec.table)))
        .collect()
}

/// The columns whose values are a follow counter's text keys, each with the longest key the
/// counter's key column holds (`max_key_length`): each child key column of a text key part,
/// and the column of a table between that holds a text key.
pub(super) fn text_key_columns(followers: &Followers) -> Vec<(&'static str, &'static str, u16)> {
    let mut columns = Vec::new();
    for (spec, follow) in &followers.counters {
        let kinds = spec.key_column_kinds();
        let longest = spec.max_key_length;
        match follow.through {
            Some(through) => {
                if kinds.first() == Some(&KeyKind::Text) {
                    columns.push((through.table, through.column, longest));
                }
            }
            None => columns.extend(
                follow
                    .key_columns
                    .iter()
                    .zip(kinds)
                    .filter(|(_, kind)| **kind == KeyKind::Text)
                    .map(|(column, _)| (followers.child, *column, longest)),
            ),
        }
    }
    columns.sort_unstable();
    columns.dedup();
    columns
}
