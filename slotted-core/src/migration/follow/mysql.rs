//! MySQL's and MariaDB's follow triggers.

use crate::dialect::Dialect;
use crate::follow::trigger_name;
use crate::sql::slot::mysql_trigger_takes_index;

use super::super::quote;
use super::backfill::backfills;
use super::through::through_triggers;
use super::upsert::{add_to_slot, same_parent};
use super::{drop_before_up, empty_tables, Followers};

/// MySQL: row triggers, one per event, which take the session's writer index once and then
/// add the row's change to each counter.
pub(super) fn up(followers: &Followers) -> String {
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
