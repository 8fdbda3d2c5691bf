//! Counts inside the user's own Diesel queries: a counter's exact total as a typed SQL
//! expression ([`Total`]), usable in `select`, `filter` and `order_by` beside the user's columns
//! and joins, so that a page of models comes with its counts in one round trip.
//!
//! The derive writes one function per counter, `Post::likes_total(key)`, whose `key` is the
//! record's key as an expression of the query (a column such as `posts::id`, a tuple of columns
//! for a composite key, or a value):
//!
//! ```
//! # use diesel::prelude::*;
//! # use slotted_core::SlottedCounter;
//! # diesel::table! { posts { id -> Integer, title -> Text, } }
//! #[derive(Queryable, Selectable, SlottedCounter)]
//! #[diesel(table_name = posts)]
//! #[slotted(counter = likes, slots = 16)]
//! struct Post { id: i32, title: String }
//! # use diesel_migrations::MigrationHarness;
//! # let mut conn = SqliteConnection::establish(":memory:")?;
//! # diesel::sql_query("CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT NOT NULL)").execute(&mut conn)?;
//! # conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?;
//! # diesel::sql_query("INSERT INTO posts VALUES (1, 'a'), (2, 'b')").execute(&mut conn)?;
//! # Post::likes_of(2).increment(&mut conn)?;
//!
//! // A page of posts with their likes, the most liked first: one statement.
//! let page: Vec<(Post, i64)> = posts::table
//!     .select((Post::as_select(), Post::likes_total(posts::id)))
//!     .filter(Post::likes_total(posts::id).gt(0))
//!     .order_by(Post::likes_total(posts::id).desc())
//!     .limit(20)
//!     .load(&mut conn)?;
//! assert_eq!(page.len(), 1);
//! assert_eq!((page[0].0.id, page[0].1), (2, 1));
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! Each row's total is a correlated subquery over its slot rows (an index range of the counter
//! table's primary key): cheap for a page of rows, and as exact as
//! [`Counter::total`](crate::Counter::total), in the statement's snapshot. Sorting or filtering a
//! whole table by it computes it for every row: for "the top 20 of a million", sort by a cached
//! column (`cache = …`, kept by the roll-ups) and read the exact totals of the page with this.
//! A total past `i64` is an error of the statement, never a wrong number (PostgreSQL: `bigint
//! out of range`; SQLite: `integer overflow`; MySQL and MariaDB: `Subquery returns more than 1
//! row`, which is how the expression raises it there). A write-behind buffer's increments count
//! once they are flushed.

use std::marker::PhantomData;

use diesel::expression::{AppearsOnTable, Expression, SelectableExpression, ValidGrouping};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::BigInt;
use diesel::QueryResult;

use crate::dialect::{CounterBackend, Dialect};
use crate::table::{CacheSpec, CounterTable};

/// The exact total of the counter `T` for the record whose key is `K` (an expression of the
/// query the total is part of): a `BigInt` SQL expression, a correlated subquery over the
/// record's slot rows (and, for a counter that adopts a column, plus that column of the
/// record's row, read by key). Made by the derive's `Model::counter_total(key)`; see the
/// [module](self).
#[derive(Debug, Clone, Copy)]
pub struct Total<T, K> {
    key: K,
    counter: PhantomData<T>,
}

impl<T: CounterTable, K> Total<T, K> {
    /// The total of `T` for the record `key`.
    pub fn new(key: K) -> Self {
        Total {
            key,
            counter: PhantomData,
        }
    }
}

/// What `Model::counter_total(key)` takes as `key`: an expression (a column, a tuple of
/// columns, a value) of the counter's key type, `<T::Key as CounterKey>::SqlType`.
pub trait TotalKey<T: CounterTable> {
    /// The key as an expression.
    type Expression;
    /// `self` as that expression.
    fn into_key(self) -> Self::Expression;
}

impl<T, E> TotalKey<T> for E
where
    T: CounterTable,
    <T::Key as crate::CounterKey>::SqlType:
        diesel::sql_types::SqlType + diesel::expression::TypedExpressionType,
    E: diesel::expression::AsExpression<<T::Key as crate::CounterKey>::SqlType>,
{
    type Expression = E::Expression;
    fn into_key(self) -> Self::Expression {
        self.as_expression()
    }
}

impl<T, K: Expression> Expression for Total<T, K> {
    type SqlType = BigInt;
}

impl<T, K: AppearsOnTable<QS>, QS> AppearsOnTable<QS> for Total<T, K> {}

impl<T, K: SelectableExpression<QS>, QS> SelectableExpression<QS> for Total<T, K> {}

/// As its key: a subquery that reads the key of the row, not an aggregate of the rows.
impl<T, K: ValidGrouping<GB>, GB> ValidGrouping<GB> for Total<T, K> {
    type IsAggregate = K::IsAggregate;
}

impl<T: 'static, K: QueryId> QueryId for Total<T, K> {
    type QueryId = Total<T, K::QueryId>;
    const HAS_STATIC_QUERY_ID: bool = K::HAS_STATIC_QUERY_ID;
}

impl<T, K, DB> QueryFragment<DB> for Total<T, K>
where
    T: CounterTable,
    K: QueryFragment<DB>,
    DB: CounterBackend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let Some(adopted) = &T::SPEC.adopt else {
            return self.push_slots(&mut out);
        };
        // A counter that adopts a column: that column of the record's row too, until a roll-up
        // claimed it as its cache (`absorb_all` moved it into the slots then), as every total
        // reads it.
        match DB::DIALECT {
            // SQLite's `+` turns a sum past `i64` into a REAL; its `SUM` raises instead.
            Dialect::Sqlite => {
                out.push_sql("(SELECT SUM(slotted_part) FROM (SELECT ");
                self.push_adopted(&mut out, adopted)?;
                out.push_sql(" AS slotted_part UNION ALL SELECT ");
                self.push_slots(&mut out)?;
                out.push_sql("))");
            }
            // BIGINT addition past `i64` is an error on both servers.
            Dialect::Postgres | Dialect::Mysql => {
                out.push_sql("(COALESCE(");
                self.push_adopted(&mut out, adopted)?;
                out.push_sql(", 0) + ");
                self.push_slots(&mut out)?;
                out.push_sql(")");
            }
        }
        Ok(())
    }
}

impl<T: CounterTable, K> Total<T, K> {
    /// `(SELECT SUM(count) FROM <counter table> AS slotted_slots WHERE <key>)`, as `BIGINT`, 0
    /// without a row.
    fn push_slots<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()>
    where
        K: QueryFragment<DB>,
    {
        let spec = &T::SPEC;
        out.push_sql("(SELECT ");
        let sum = format!("COALESCE(SUM({}), 0)", DB::DIALECT.quote("count"));
        match DB::DIALECT {
            Dialect::Postgres => out.push_sql(&format!("CAST({sum} AS BIGINT)")),
            Dialect::Sqlite => out.push_sql(&sum),
            // MySQL's CAST clips a DECIMAL past BIGINT (a warning): the subquery that returns
            // two rows makes it an error instead. It is only evaluated when the sum is past.
            Dialect::Mysql => out.push_sql(&format!(
                "IF({sum} BETWEEN {} AND {}, CAST({sum} AS SIGNED), (SELECT 1 UNION ALL SELECT 2))",
                i64::MIN,
                i64::MAX
            )),
        }
        out.push_sql(" FROM ");
        out.push_identifier(spec.table)?;
        out.push_sql(" AS slotted_slots WHERE ");
        self.push_key_match(out, "slotted_slots", spec.key_columns())?;
        crate::sql::push_record_type(out, spec)?;
        out.push_sql(")");
        Ok(())
    }

    /// `(SELECT CAST(column AS BIGINT) FROM <model's table> AS slotted_adopted WHERE <key> AND
    /// NOT EXISTS (<its claim>))`: the adopted column of the record's row, `NULL` without one
    /// or once claimed.
    fn push_adopted<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        adopted: &'b CacheSpec,
    ) -> QueryResult<()>
    where
        K: QueryFragment<DB>,
    {
        out.push_sql(&format!(
            "(SELECT CAST({} AS {}) FROM ",
            DB::DIALECT.quote(adopted.column),
            match DB::DIALECT {
                Dialect::Mysql => "SIGNED",
                Dialect::Postgres | Dialect::Sqlite => "BIGINT",
            }
        ));
        out.push_identifier(adopted.table)?;
        out.push_sql(" AS slotted_adopted WHERE ");
        self.push_key_match(out, "slotted_adopted", adopted.key_columns)?;
        crate::sql::adopt::push_unclaimed(out, adopted)?;
        out.push_sql(")");
        Ok(())
    }
    /// `(alias.c1, alias.c2…) = (<key>)`: the row whose key columns `columns` hold the key. The
    /// subquery's table is aliased, so that a key column of a table of the same name (the
    /// model's own, for an adopted column) names the outer query's row.
    fn push_key_match<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        alias: &str,
        columns: &[&str],
    ) -> QueryResult<()>
    where
        K: QueryFragment<DB>,
    {
        out.push_sql("(");
        for (i, column) in columns.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_sql(alias);
            out.push_sql(".");
            out.push_identifier(column)?;
        }
        out.push_sql(") = (");
        self.key.walk_ast(out.reborrow())?;
        out.push_sql(")");
        Ok(())
    }
}
