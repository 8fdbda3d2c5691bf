//! The backfill: the counts of the rows the child table holds when the triggers are made.

use crate::dialect::Dialect;
use crate::follow::FollowSpec;
use crate::table::CounterSpec;

use super::super::quote;
use super::Followers;

/// Every counter's backfill.
pub(super) fn backfills(followers: &Followers, dialect: Dialect) -> String {
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
