//! The backfill: the counts of the rows the child table holds when the triggers are made.

use crate::dialect::Dialect;
use crate::follow::FollowSpec;
use crate::table::CounterSpec;

use super::super::quote;
use super::Followers;

/// How a follow migration counts the child rows already there when it makes the triggers
/// ([`CounterMigrations::backfill`](crate::CounterMigrations::backfill)).
///
/// Either way every child row ends up counted exactly once. The choice is what waits:
/// [`Locked`](Self::Locked) holds the child table's writers off while the migration counts
/// (about 1.4 s per 10^6 child rows on PostgreSQL, measured in docs/bench/follow-prototype),
/// and the counts are whole from its commit on; [`Online`](Self::Online) holds them off only
/// while the triggers are made, and the counts lack the rows that were there until
/// [`repair_follow_all`](crate::CounterMaintenance::repair_follow_all) has counted them,
/// beside the writers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backfill {
    /// The migration counts the rows already there itself, with the child table's writers
    /// held off (PostgreSQL: `LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE` in the migration's
    /// transaction; MySQL and MariaDB: `LOCK TABLES … WRITE`; SQLite: its one writer), so that
    /// each row is counted by the backfill or by the triggers, never both.
    #[default]
    Locked,
    /// The migration makes the triggers (writers wait for that DDL only) and counts nothing:
    /// run [`repair_follow_all`](crate::CounterMaintenance::repair_follow_all) of every counter
    /// that follows the table once it has run, or give a
    /// [`Maintainer`](crate::maintenance::Maintainer) `repair_follow`, whose first pass does.
    /// The repair reads each page of records and their child rows in one statement (one
    /// snapshot) and adds the difference: once the triggers exist, that difference is the rows
    /// written before them, and an add commutes with every writer's, so nothing is lost or
    /// counted twice while writers go on.
    Online,
}

/// Every counter's backfill: none with [`Backfill::Online`].
pub(super) fn backfills(followers: &Followers, dialect: Dialect) -> String {
    if followers.backfill == Backfill::Online {
        return String::new();
    }
    followers
        .counters
        .iter()
        .map(|(spec, follow)| backfill(spec, follow, dialect))
        .collect()
}

/// `INSERT INTO t (record_id…, slot, count) SELECT <key of alias>, <slots>, SUM(delta) FROM
/// child WHERE <counts> GROUP BY <key> HAVING SUM(delta) <> 0`: the counts of the rows already
/// there, in the slot just past the writers' (the repair's): on Galera, whose table locks are
/// each node's own, it meets no writer of another node in certification (slot 0 is the first
/// writer's of the node of offset 1). On MySQL the child table is named, not aliased: `LOCK
/// TABLES` holds the name.
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
         SELECT {keys}, {slots}, SUM({delta}) FROM {child}{join}\n\
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
        slots = spec.slots,
        count = q("count"),
        child = q(follow.table),
        join = follow.join_sql(&alias, q),
        counts = follow.counts_sql(&alias, q),
    )
}
