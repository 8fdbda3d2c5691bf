//! The statements of a counter that follows a child table, beyond its triggers (which are DDL,
//! in `migration/follow.rs`): the verify page, which sets each record's count against the child
//! rows, and the check that the triggers are there and enabled.

use diesel::deserialize;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::row::NamedRow;
use diesel::QueryResult;

use super::{
    push_columns, push_key_after, read_key, statement, varies_with_batch, FromCounterRow, Sum,
    COUNT,
};
use crate::dialect::{CounterBackend, Dialect};
use crate::follow::FollowSpec;
use crate::key::{KeyValue, RawKey};
use crate::table::CounterSpec;

const HAVE: &str = "slotted_have";
const WANT: &str = "slotted_want";

/// A page of records, after `after` in key order, each with what its slots hold and what its
/// child rows add up to, from one statement, so one snapshot sees both (a trigger writes a
/// child row and its count in one transaction): a difference is drift, never a writer in
/// flight.
///
/// `SELECT record_id…, CAST(SUM(slotted_have) AS TEXT), CAST(SUM(slotted_want) AS TEXT) FROM
/// (SELECT record_id…, count, 0 FROM t WHERE <after> UNION ALL SELECT k…, 0, <delta> FROM child
/// WHERE <after> AND <counts>) AS slotted_verify GROUP BY record_id… ORDER BY record_id… LIMIT n`
#[derive(Debug, Clone, Copy)]
pub(crate) struct VerifyPage<'a> {
    pub spec: &'a CounterSpec,
    pub follow: &'a FollowSpec,
    pub after: Option<KeyValue<'a>>,
    /// The most the page's keys' first column reaches ([`PageBound`]): both sides read a
    /// range of keys, not every key after `after`.
    pub upper: Option<KeyValue<'a>>,
    pub limit: i64,
}

impl<DB: CounterBackend> QueryFragment<DB> for VerifyPage<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let columns = self.spec.key_columns();
        let text = match DB::DIALECT {
            Dialect::Mysql => "CHAR",
            Dialect::Sqlite | Dialect::Postgres => "TEXT",
        };
        out.push_sql("SELECT ");
        push_columns(&mut out, columns, None)?;
        out.push_sql(&format!(
            ", CAST(SUM({HAVE}) AS {text}) AS {HAVE}, CAST(SUM({WANT}) AS {text}) AS {WANT} FROM (SELECT "
        ));
        push_columns(&mut out, columns, None)?;
        out.push_sql(", ");
        out.push_identifier(COUNT)?;
        out.push_sql(&format!(" AS {HAVE}, 0 AS {WANT} FROM "));
        out.push_identifier(self.spec.table)?;
        out.push_sql(" WHERE 1 = 1");
        if let Some(after) = &self.after {
            out.push_sql(" AND ");
            push_key_after(&mut out, columns, after)?;
        }
        if let Some(upper) = &self.upper {
            out.push_sql(" AND ");
            out.push_identifier(columns[0])?;
            out.push_sql(" <= ");
            DB::push_key_part(&mut out, &upper.parts()[0])?;
        }
        out.push_sql(" UNION ALL SELECT ");
        let quote = |ident: &str| DB::DIALECT.quote(ident);
        let child = quote(self.follow.table);
        let parent = self.follow.parent_key_sql(&child, quote);
        for (i, (key, column)) in parent.iter().zip(columns).enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_sql(&format!("{key} AS "));
            out.push_identifier(column)?;
        }
        out.push_sql(&format!(
            ", 0 AS {HAVE}, {} AS {WANT} FROM {child}{} WHERE ",
            self.follow.delta_sql(&child, quote),
            self.follow.join_sql(&child, quote),
        ));
        if let Some(after) = &self.after {
            match (self.follow.record, self.follow.through) {
                // One record: past it, nothing. Through a table between: past the key in its
                // column (one column).
                (Some(_), _) | (None, Some(_)) => {
                    out.push_sql(&format!("{} > ", parent[0]));
                    DB::push_key_part(&mut out, &after.parts()[0])?;
                }
                (None, None) => push_key_after(&mut out, self.follow.key_columns, after)?,
            }
            out.push_sql(" AND ");
        }
        if let Some(upper) = &self.upper {
            out.push_sql(&format!("{} <= ", parent[0]));
            DB::push_key_part(&mut out, &upper.parts()[0])?;
            out.push_sql(" AND ");
        }
        out.push_sql(&self.follow.counts_sql(&child, quote));
        out.push_sql(") AS slotted_verify GROUP BY ");
        push_columns(&mut out, columns, None)?;
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, columns, None)?;
        out.push_sql(" LIMIT ");
        DB::push_big_int(&mut out, &self.limit)
    }
}

statement!(by_text: VerifyPage);

/// The bound of the next verify page: the first key column of the `limit`-th key after
/// `after`, of the counter table or of the child table (through a table between: of that
/// table's parent column), whichever is smaller; no row when neither has `limit` keys left (the
/// last page). Each side an index range of `limit` keys. The page then reads the keys after
/// `after` whose first column is at most the bound: at least `limit` keys, and for a composite
/// key the rest of the bound's first column too. Without it a page read every child row after
/// `after` to find its first `limit` keys: a pass cost pages x child rows (10^6 comments on
/// 10^5 posts: 0.4 s on PostgreSQL and 0.8 s on MariaDB for the first page of 1,000).
///
/// `SELECT record_id FROM (SELECT MIN(slotted_b) AS record_id FROM (SELECT MAX(k) AS slotted_b
/// FROM (SELECT record_id AS k FROM t WHERE (record_id, record_id_2) > (?, ?) GROUP BY
/// record_id, record_id_2 ORDER BY record_id, record_id_2 LIMIT n) AS a HAVING COUNT(*) = n
/// UNION ALL SELECT MAX(k) FROM (SELECT post_id AS k FROM reactions WHERE (post_id, kind) >
/// (?, ?) AND post_id IS NOT NULL AND kind IS NOT NULL GROUP BY post_id, kind ORDER BY post_id,
/// kind LIMIT n) AS b HAVING COUNT(*) = n) AS c) AS d WHERE record_id IS NOT NULL` (the row
/// comparisons written out column by column, as [`push_key_after`] writes them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageBound<'a> {
    pub spec: &'a CounterSpec,
    pub follow: &'a FollowSpec,
    /// The last key verified: a whole key, or the bound of the page before (its first column).
    pub after: Option<KeyValue<'a>>,
    pub limit: i64,
}

impl<DB: CounterBackend> QueryFragment<DB> for PageBound<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        let quote = |ident: &str| DB::DIALECT.quote(ident);
        let record_id = quote(self.spec.key_columns()[0]);
        // The columns whose keys bound the page, in the table that holds them.
        let through;
        let (table, keys) = match &self.follow.through {
            Some(between) => {
                through = [between.column];
                (between.table, &through[..])
            }
            None => (self.follow.table, self.follow.key_columns),
        };
        out.push_sql(&format!(
            "SELECT {record_id} FROM (SELECT MIN(slotted_b) AS {record_id} FROM ("
        ));
        for (i, (table, keys)) in [(self.spec.table, self.spec.key_columns()), (table, keys)]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                out.push_sql(" UNION ALL ");
            }
            let columns: Vec<String> = keys.iter().map(|key| quote(key)).collect();
            let columns = columns.join(", ");
            out.push_sql(&format!(
                "SELECT MAX(slotted_k) AS slotted_b FROM (SELECT {} AS slotted_k FROM {} WHERE ",
                quote(keys[0]),
                quote(table),
            ));
            for (j, key) in keys.iter().enumerate() {
                if j > 0 {
                    out.push_sql(" AND ");
                }
                out.push_sql(&format!("{} IS NOT NULL", quote(key)));
            }
            if let Some(after) = &self.after {
                out.push_sql(" AND ");
                push_key_after(&mut out, keys, after)?;
            }
            out.push_sql(&format!(" GROUP BY {columns} ORDER BY {columns} LIMIT "));
            DB::push_big_int(&mut out, &self.limit)?;
            out.push_sql(&format!(") AS slotted_side{i} HAVING COUNT(*) = "));
            DB::push_big_int(&mut out, &self.limit)?;
        }
        out.push_sql(&format!(
            ") AS slotted_sides) AS slotted_bound WHERE {record_id} IS NOT NULL"
        ));
        Ok(())
    }
}

statement!(by_text: PageBound);

/// A row of [`VerifyPage`]: a record's key, what its slots hold, what its child rows add.
#[derive(Debug, Clone)]
pub(crate) struct VerifyRow {
    pub key: RawKey,
    pub have: Sum,
    pub want: Sum,
}

impl FromCounterRow for VerifyRow {
    fn from_row<'a, DB: CounterBackend>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        Ok(VerifyRow {
            key: read_key(row)?,
            have: Sum(DB::read_nullable_text(row, HAVE)?),
            want: Sum(DB::read_nullable_text(row, WANT)?),
        })
    }
    fn key_mut(&mut self) -> &mut RawKey {
        &mut self.key
    }
}

/// How many of the child table's triggers exist, are enabled and keep the counter table
/// `counter` (their SQL names it, quoted), as the text of one `slotted_total`: all of `names`
/// when all is well (one trigger for every event). A trigger missing, disabled, or made by a
/// migration of other counters (every counter that follows a table belongs in one
/// [`CounterMigrations`](crate::CounterMigrations)) counts less. MySQL cannot disable a
/// trigger, only drop it; PostgreSQL's `ALTER TABLE … DISABLE TRIGGER` leaves it in
/// `pg_trigger` with `tgenabled = 'D'`; SQLite has neither.
#[derive(Debug, Clone)]
pub(crate) struct EnabledTriggers<'a> {
    pub child: &'a str,
    pub which: Which,
    /// The counter table, quoted as the trigger's SQL quotes it.
    pub counter: String,
}

/// Which triggers [`EnabledTriggers`] counts.
#[derive(Debug, Clone)]
pub(crate) enum Which {
    /// These, on the child table.
    OnChild(Vec<String>),
    /// slotted's follow triggers (`slotted_follow…`) on any other table, but for these names
    /// (the triggers of a count through a table between, on that table), which should write
    /// into no counter table that follows `child`.
    Elsewhere(Vec<String>),
}

impl<DB: CounterBackend> QueryFragment<DB> for EnabledTriggers<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql(match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT CAST(COUNT(*) AS TEXT) AS slotted_total FROM pg_trigger t \
                 JOIN pg_class c ON c.oid = t.tgrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_proc p ON p.oid = t.tgfoid \
                 WHERE n.nspname = ANY (current_schemas(false)) AND t.tgenabled <> 'D' \
                 AND strpos(p.prosrc, "
            }
            Dialect::Mysql => {
                "SELECT CAST(COUNT(*) AS CHAR) AS slotted_total FROM information_schema.triggers \
                 WHERE trigger_schema = DATABASE() AND LOCATE("
            }
            Dialect::Sqlite => {
                "SELECT CAST(COUNT(*) AS TEXT) AS slotted_total FROM sqlite_master WHERE type = 'trigger' \
                 AND instr(sql, "
            }
        });
        // The counter table's quoted name, within the trigger's (or its function's) SQL.
        DB::push_text(&mut out, &self.counter)?;
        let names = match &self.which {
            Which::OnChild(names) => names,
            Which::Elsewhere(expected) => {
                out.push_sql(match DB::DIALECT {
                    Dialect::Postgres => ") > 0 AND c.relname <> ",
                    Dialect::Mysql => ", action_statement) > 0 AND event_object_table <> ",
                    Dialect::Sqlite => ") > 0 AND tbl_name <> ",
                });
                DB::push_text(&mut out, self.child)?;
                out.push_sql(match DB::DIALECT {
                    Dialect::Postgres => " AND t.tgname LIKE 'slotted\\_follow\\_%'",
                    Dialect::Mysql => " AND trigger_name LIKE 'slotted\\_follow\\_%'",
                    Dialect::Sqlite => " AND name LIKE 'slotted\\_follow\\_%' ESCAPE '\\'",
                });
                if !expected.is_empty() {
                    out.push_sql(match DB::DIALECT {
                        Dialect::Postgres => " AND t.tgname NOT IN (",
                        Dialect::Mysql => " AND trigger_name NOT IN (",
                        Dialect::Sqlite => " AND name NOT IN (",
                    });
                    for (i, name) in expected.iter().enumerate() {
                        if i > 0 {
                            out.push_sql(", ");
                        }
                        DB::push_text(&mut out, name)?;
                    }
                    out.push_sql(")");
                }
                return Ok(());
            }
        };
        out.push_sql(match DB::DIALECT {
            Dialect::Postgres => ") > 0 AND c.relname = ",
            Dialect::Mysql => ", action_statement) > 0 AND event_object_table = ",
            Dialect::Sqlite => ") > 0 AND tbl_name = ",
        });
        DB::push_text(&mut out, self.child)?;
        out.push_sql(match DB::DIALECT {
            Dialect::Postgres => " AND t.tgname IN (",
            Dialect::Mysql => " AND trigger_name IN (",
            Dialect::Sqlite => " AND name IN (",
        });
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            DB::push_text(&mut out, name)?;
        }
        out.push_sql(")");
        Ok(())
    }
}

/// PostgreSQL, a count through a table between: the line its child table's function
/// carries when an `INSERT` leaves the lock on the rows between to a foreign key's check,
/// and the condition, on `pg_constraint`, under which such a key exists (from the child's
/// column to the key of the table between, not deferrable, its check of an insert a trigger of
/// the child that fires in an ordinary session, the child not partitioned); `None` without a
/// table between. The migration reads the condition once, to choose the function; the verify
/// job reads it again for a function that carries the line (a key dropped since then).
pub(crate) fn pg_foreign_key(follow: &FollowSpec) -> Option<(String, String)> {
    let through = follow.through?;
    let q = |ident: &str| Dialect::Postgres.quote(ident);
    let literal = |text: &str| text.replace('\'', "''");
    let column = follow.key_columns.first()?;
    let marker = format!(
        "-- slotted: an INSERT's lock on {table} is the check of the foreign key {child}({column})",
        table = q(through.table),
        child = q(follow.table),
        column = q(column),
    );
    // The key's check of an insert must be there and fire in an ordinary session ('O', or 'A':
    // always): a key `NOT ENFORCED` (PostgreSQL 18) has none, a trigger disabled ('D') or made
    // a replica's ('R') does not run. A partitioned child table checks on its partitions,
    // whose triggers this does not read: it keeps the lock.
    let exists = format!(
        "EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contype = 'f' AND NOT k.condeferrable \
         AND k.conrelid = to_regclass('{child}') AND k.confrelid = to_regclass('{table}') \
         AND k.conkey = ARRAY(SELECT a.attnum FROM pg_attribute a \
         WHERE a.attrelid = k.conrelid AND a.attname = '{column}') \
         AND k.confkey = ARRAY(SELECT a.attnum FROM pg_attribute a \
         WHERE a.attrelid = k.confrelid AND a.attname = '{key}') \
         AND (SELECT c.relkind FROM pg_class c WHERE c.oid = k.conrelid) = 'r' \
         AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgconstraint = k.oid \
         AND t.tgrelid = k.conrelid AND t.tgfoid = 'pg_catalog.\"RI_FKey_check_ins\"'::regproc \
         AND t.tgenabled IN ('O', 'A')))",
        child = literal(&q(follow.table)),
        table = literal(&q(through.table)),
        column = literal(column),
        key = literal(through.key),
    );
    Some((marker, exists))
}

/// PostgreSQL: how many functions named `function` carry `marker` (their `INSERT` leaves the
/// lock on the rows between to a foreign key's check, [`pg_foreign_key`]) while the key does
/// not lock any more, `exists` false: 1 when it was dropped, made deferrable or its check
/// trigger disabled since the migration, as the text of one `slotted_total`.
#[derive(Debug, Clone)]
pub(crate) struct ForeignKeyGone<'a> {
    pub function: &'a str,
    pub marker: &'a str,
    /// The condition on `pg_constraint`, SQL made from the counter's identifiers.
    pub exists: &'a str,
}

impl<DB: CounterBackend> QueryFragment<DB> for ForeignKeyGone<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        varies_with_batch(&mut out);
        out.push_sql(
            "SELECT CAST(COUNT(*) AS TEXT) AS slotted_total FROM pg_proc p \
             JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = ANY (current_schemas(false)) AND p.proname = ",
        );
        DB::push_text(&mut out, self.function)?;
        out.push_sql(" AND strpos(p.prosrc, ");
        DB::push_text(&mut out, self.marker)?;
        out.push_sql(") > 0 AND NOT ");
        out.push_sql(self.exists);
        Ok(())
    }
}

statement!(by_text: EnabledTriggers, ForeignKeyGone);
