//! MySQL's and MariaDB's follow triggers.

use crate::dialect::Dialect;
use crate::follow::trigger_name;
use crate::sql::slot::mysql_trigger_takes_index;

use super::super::quote;
use super::backfill::backfills;
use super::through::through_triggers;
use super::upsert::{add_to_slot, same_parent};
use super::{drop_before_up, empty_tables, text_key_columns, Followers};

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
         {key_checks}\
         LOCK TABLES {tables};\n\
         {drop}\
         {empty}\
         {insert}{update}{delete}\
         {via}\
         {backfills}\
         UNLOCK TABLES;\n",
        header = followers.header(),
        key_checks = text_key_checks(followers),
        tables = tables.join(", "),
        drop = drop_before_up(followers, dialect),
        empty = empty_tables(followers, dialect),
        via = through_triggers(followers, dialect),
        backfills = backfills(followers, dialect),
    )
}

/// Fails the migration, before it changes anything, when a column whose values are a follow
/// counter's text keys cannot hand the triggers every key it holds:
/// - its collation is not binary (MariaDB's and MySQL's default, `utf8mb4_general_ci`, is
///   not): the counter's key column compares keys byte for byte (`utf8mb4_bin`), so `Rust`
///   and `rust`, one parent to the application, would be two records to the counter, and the
///   verify job's pages, ordered one way on one side and the other on the other, would not end;
/// - it holds longer values than the counter's key column (`max_key_length`): a child row
///   with such a key would fail its `INSERT` in the trigger ("Data too long"), a write that
///   succeeds without slotted.
///
/// A `SIGNAL` prepared from a text that the column's definition chooses (no stored procedure,
/// so no `CREATE ROUTINE` privilege needed).
fn text_key_checks(followers: &Followers) -> String {
    let mut sql = String::new();
    for (table, column, longest) in text_key_columns(followers) {
        let checks = [
            (
                "collation_name IS NOT NULL AND collation_name NOT LIKE '%\\_bin'".to_owned(),
                format!(
                    "slotted: {table}.{column} keys a follow counter: give it a binary collation \
                     (utf8mb4_bin)"
                ),
            ),
            (
                format!("character_maximum_length > {longest}"),
                format!(
                    "slotted: {table}.{column} holds keys longer than the counter's \
                     max_key_length, {longest}: raise it or shorten the column"
                ),
            ),
        ];
        for (fails, message) in checks {
            // `MESSAGE_TEXT` holds 128 characters.
            let message: String = message.chars().take(128).collect();
            let signal = format!(
                "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{}'",
                message.replace('\'', "''")
            );
            sql.push_str(&format!(
                "SET @slotted_check = (SELECT IF(COUNT(*) = 0, 'DO 0', '{signal}') \
                 FROM information_schema.columns WHERE table_schema = DATABASE() \
                 AND table_name = '{table}' AND column_name = '{column}' AND {fails});\n\
                 PREPARE slotted_check FROM @slotted_check;\n\
                 EXECUTE slotted_check;\n\
                 DEALLOCATE PREPARE slotted_check;\n",
                signal = signal.replace('\'', "''"),
            ));
        }
    }
    sql
}
