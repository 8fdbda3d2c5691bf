//! The reads: one record's total, many records' totals, pages of keys.

use std::marker::PhantomData;

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::{push_columns, push_key_after, statement, ByText, Scope, BUCKET, COUNT, SLOT, TOTAL};
use crate::dialect::{CounterBackend, Dialect};
use crate::key::KeyValue;
use crate::table::{CacheSpec, CounterSpec};

/// `CAST(SUM(count) AS TEXT) AS slotted_total`: the sum is NUMERIC on PostgreSQL and DECIMAL on
/// MySQL; as text it converts to `i64` exactly, or says by how much it does not fit.
fn push_sum_as_text<DB: CounterBackend>(out: &mut AstPass<'_, '_, DB>) -> QueryResult<()> {
    out.push_sql("CAST(SUM(");
    out.push_identifier(COUNT)?;
    out.push_sql(match DB::DIALECT {
        Dialect::Mysql => ") AS CHAR) AS ",
        Dialect::Sqlite | Dialect::Postgres => ") AS TEXT) AS ",
    });
    out.push_identifier(TOTAL)
}

/// `SELECT CAST(SUM(count) AS TEXT) FROM t WHERE …`: one row, NULL when no slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SumOne<'a, K = ByText>(pub Scope<'a>, pub PhantomData<K>);

impl<DB: CounterBackend, K> QueryFragment<DB> for SumOne<'_, K> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        push_sum_as_text(&mut out)?;
        out.push_sql(" FROM ");
        push_parts(&mut out, &self.0, false)
    }
}

/// What a total sums, after `FROM`: the counter table's rows in the scope; for a counter that
/// adopts a column, `(<the column's values> UNION ALL <the slots'>) AS slotted_parts`, one
/// statement, so one snapshot sees both parts (an absorb moves a count from one to the other
/// in one transaction). `with_keys`: each row names its key as the counter table's columns.
fn push_parts<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    scope: &'b Scope<'b>,
    with_keys: bool,
) -> QueryResult<()> {
    let spec = scope.spec;
    let Some(column) = &spec.adopt else {
        out.push_identifier(spec.table)?;
        return scope.push_where(out);
    };
    out.push_sql("(");
    super::adopt::push_base(out, spec, column, scope.keys, with_keys)?;
    out.push_sql(" UNION ALL SELECT ");
    if with_keys {
        push_columns(out, spec.key_columns(), None)?;
        out.push_sql(", ");
    }
    out.push_identifier(COUNT)?;
    out.push_sql(" FROM ");
    out.push_identifier(spec.table)?;
    scope.push_where(out)?;
    out.push_sql(") AS slotted_parts");
    Ok(())
}

/// `SELECT record_id[, record_id_2…], CAST(SUM(count) AS TEXT) FROM t WHERE … GROUP BY
/// record_id[, record_id_2…]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SumMany<'a>(pub Scope<'a>);

impl<DB: CounterBackend> QueryFragment<DB> for SumMany<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let columns = self.0.spec.key_columns();
        out.push_sql("SELECT ");
        push_columns(&mut out, columns, None)?;
        out.push_sql(", ");
        push_sum_as_text(&mut out)?;
        out.push_sql(" FROM ");
        push_parts(&mut out, &self.0, true)?;
        out.push_sql(" GROUP BY ");
        push_columns(&mut out, columns, None)
    }
}

/// A page of record keys in key order, after `after`: of the counter's records that need
/// compaction (`Compactable`), or of the model's table (`Parent`, for cache roll-ups).
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyPage<'a> {
    /// `all`: every record with rows in the scope, not only those with several rows, a 0 or
    /// a row outside the settled slot. `unsettled`: the records with rows outside the settled
    /// slot (written since their last compaction), found through the index of unsettled rows,
    /// at a cost that follows their number, not the table's.
    Compactable {
        scope: Scope<'a>,
        after: Option<KeyValue<'a>>,
        limit: i64,
        all: bool,
        unsettled: bool,
    },
    Parent {
        spec: &'a CounterSpec,
        cache: &'a CacheSpec,
        after: Option<KeyValue<'a>>,
        limit: i64,
    },
}

impl KeyPage<'_> {
    /// The SQL types of the key columns it returns.
    pub(crate) fn key_kinds(&self) -> &'static [crate::key::KeyKind] {
        match self {
            KeyPage::Compactable { scope, .. } => scope.spec.key_column_kinds(),
            // As the counter table keeps them (the shared table: BIGINT), so that they compare
            // with its rows' keys.
            KeyPage::Parent { spec, .. } => spec.key_column_kinds(),
        }
    }
}

/// The keys of a [`KeyPage`], as `record_id[, record_id_2…]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys<'a>(pub KeyPage<'a>);

impl<DB: CounterBackend> QueryFragment<DB> for Keys<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let (columns, after, limit) = match &self.0 {
            KeyPage::Compactable {
                scope,
                after,
                limit,
                unsettled: true,
                ..
            } if DB::DIALECT == Dialect::Mysql => {
                return push_mysql_unsettled(&mut out, scope, after.as_ref(), limit);
            }
            KeyPage::Compactable {
                scope,
                after,
                limit,
                unsettled,
                ..
            } => {
                // Records whose rows can shrink: several slots, a zero count, a row outside
                // the settled slot.
                let columns = scope.spec.key_columns();
                out.push_sql("SELECT ");
                push_columns(&mut out, columns, None)?;
                out.push_sql(" FROM ");
                out.push_identifier(scope.spec.table)?;
                scope.push_where(&mut out)?;
                if *unsettled {
                    // The partial index's condition, word for word (PostgreSQL and SQLite
                    // use such an index only for a query that implies it).
                    out.push_sql(" AND ");
                    out.push_identifier(SLOT)?;
                    out.push_sql(" >= 0");
                }
                (columns, after, limit)
            }
            KeyPage::Parent {
                spec,
                cache,
                after,
                limit,
            } => {
                // The parent's key columns, named as the counter table's.
                out.push_sql("SELECT ");
                for (i, (column, name)) in
                    cache.key_columns.iter().zip(spec.key_columns()).enumerate()
                {
                    if i > 0 {
                        out.push_sql(", ");
                    }
                    out.push_identifier(column)?;
                    out.push_sql(" AS ");
                    out.push_identifier(name)?;
                }
                out.push_sql(" FROM ");
                out.push_identifier(cache.table)?;
                out.push_sql(" WHERE 1 = 1");
                (cache.key_columns, after, limit)
            }
        };
        if let Some(after) = after {
            out.push_sql(" AND ");
            push_key_after(&mut out, columns, after)?;
        }
        if let KeyPage::Compactable {
            scope,
            all,
            unsettled,
            ..
        } = &self.0
        {
            let all = *all || *unsettled;
            out.push_sql(" GROUP BY ");
            push_columns(&mut out, columns, None)?;
            if scope.spec.bucket.is_some() && !all {
                out.push_sql(", ");
                out.push_identifier(BUCKET)?;
            }
            if !all {
                // `MIN`, not `SUM`: with one row they agree, and SQLite's `SUM` fails the
                // whole query when one record's rows add up past i64.
                out.push_sql(" HAVING COUNT(*) > 1 OR MIN(");
                out.push_identifier(COUNT)?;
                out.push_sql(") = 0 OR MAX(");
                out.push_identifier(SLOT)?;
                // A record's one row in a writer's slot: folded into the settled slot.
                out.push_sql(") >= 0");
            }
        }
        out.push_sql(" ORDER BY ");
        push_columns(&mut out, columns, None)?;
        out.push_sql(" LIMIT ");
        DB::push_big_int(&mut out, limit)
    }
}

/// MySQL's page of unsettled records. Its index of unsettled rows is `(slot, key…)` (MySQL has
/// no partial index), which holds the keys in order within each slot only: one range `slot >=
/// 0` ordered by key would read and sort every unsettled row for each page, so a pass after a
/// backlog cost pages x backlog (a page of 1,000 among 480,000 unsettled rows: 29-71 ms, 2.1 ms
/// this way). So, per slot, the first `limit` keys after `after` (an index range in key order),
/// and of those together the first `limit`: every key among the first `limit` of the whole is
/// among the first `limit` of each slot it has rows in. Rows in a slot past the counter's
/// `slots` (none are written) are read by a last range of the first form.
///
/// `SELECT k FROM ((SELECT k FROM t FORCE INDEX (u) WHERE … AND slot = 0 AND k > ? GROUP BY k
/// ORDER BY k LIMIT n) UNION ALL … UNION ALL (… AND slot >= <slots> …)) AS slotted_unsettled
/// GROUP BY k ORDER BY k LIMIT n`
fn push_mysql_unsettled<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    scope: &'b Scope<'b>,
    after: Option<&'b KeyValue<'b>>,
    limit: &'b i64,
) -> QueryResult<()> {
    let columns = scope.spec.key_columns();
    out.push_sql("SELECT ");
    push_columns(out, columns, None)?;
    out.push_sql(" FROM (");
    let slots = i64::from(scope.spec.slots);
    for slot in 0..=slots {
        if slot > 0 {
            out.push_sql(" UNION ALL ");
        }
        out.push_sql("(SELECT ");
        push_columns(out, columns, None)?;
        out.push_sql(" FROM ");
        out.push_identifier(scope.spec.table)?;
        out.push_sql(" FORCE INDEX (");
        out.push_identifier(&super::unsettled_index(scope.spec.table))?;
        out.push_sql(")");
        scope.push_where(out)?;
        out.push_sql(" AND ");
        out.push_identifier(SLOT)?;
        // The slot a literal: part of the index range the statement is planned for.
        out.push_sql(&if slot < slots {
            format!(" = {slot}")
        } else {
            format!(" >= {slot}")
        });
        if let Some(after) = after {
            out.push_sql(" AND ");
            push_key_after(out, columns, after)?;
        }
        push_first_keys(out, columns, limit)?;
        out.push_sql(")");
    }
    out.push_sql(") AS slotted_unsettled");
    push_first_keys(out, columns, limit)
}

/// ` GROUP BY k… ORDER BY k… LIMIT n`: the first `limit` distinct keys.
fn push_first_keys<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    columns: &[&str],
    limit: &'b i64,
) -> QueryResult<()> {
    out.push_sql(" GROUP BY ");
    push_columns(out, columns, None)?;
    out.push_sql(" ORDER BY ");
    push_columns(out, columns, None)?;
    out.push_sql(" LIMIT ");
    DB::push_big_int(out, limit)
}

statement!(cached: SumOne);
statement!(by_text: SumMany, Keys);

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::key::{KeyKind, KeyPart};
    use crate::table::TEST_SPEC;

    fn text(
        query: impl QueryFragment<diesel::sqlite::Sqlite> + diesel::query_builder::QueryId,
    ) -> String {
        let text = diesel::debug_query::<diesel::sqlite::Sqlite, _>(&query).to_string();
        // The SQL, without Diesel's `-- binds: […]`.
        text.split(" -- binds")
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn a_composite_key_pages_from_its_first_column_and_groups_by_every_column() {
        let spec = CounterSpec {
            key: &[KeyKind::Integer, KeyKind::Text, KeyKind::Integer],
            ..TEST_SPEC
        };
        let after =
            KeyValue::composite(&[KeyPart::Integer(5), KeyPart::Text("b"), KeyPart::Integer(7)]);
        let keys = [after, after];
        let page = KeyPage::Compactable {
            scope: Scope::new(&spec, &keys),
            after: Some(after),
            limit: 10,
            all: true,
            unsettled: false,
        };
        assert_eq!(
            text(Keys(page)),
            "SELECT `record_id`, `record_id_2`, `record_id_3` FROM `posts_likes_slots` WHERE 1 = 1 \
             AND ((`record_id` = ? AND `record_id_2` = ? AND `record_id_3` = ?) \
             OR (`record_id` = ? AND `record_id_2` = ? AND `record_id_3` = ?)) \
             AND (`record_id` >= ? AND (`record_id` > ? OR (`record_id` = ? AND \
             (`record_id_2` > ? OR (`record_id_2` = ? AND `record_id_3` > ?))))) \
             GROUP BY `record_id`, `record_id_2`, `record_id_3` \
             ORDER BY `record_id`, `record_id_2`, `record_id_3` LIMIT ?"
        );
        let one = CounterSpec {
            key: &[KeyKind::Integer],
            ..TEST_SPEC
        };
        let key = KeyValue::one(KeyPart::Integer(5));
        let page = KeyPage::Compactable {
            scope: Scope::new(&one, &[]),
            after: Some(key),
            limit: 10,
            all: true,
            unsettled: false,
        };
        assert_eq!(
            text(Keys(page)),
            "SELECT `record_id` FROM `posts_likes_slots` WHERE 1 = 1 AND `record_id` > ? \
             GROUP BY `record_id` ORDER BY `record_id` LIMIT ?"
        );
    }
}
