//! Counters that follow a child table (`follow = comments(post_id)`): what such a counter is,
//! as data ([`FollowSpec`]), and the checks the derive's expansion makes of the child table's
//! columns, so that a declaration that cannot work does not compile.
//!
//! The triggers themselves are DDL, written by `migration/follow.rs`.

use diesel::sql_types::{BigInt, Bool, Integer, Nullable, SmallInt};

/// The child table a counter follows (`follow = comments(post_id)`): the database counts its
/// rows, through triggers the counter's migration creates on it, into one slot of each parent
/// record, in the writer's own transaction, whatever writes them (the application, raw SQL,
/// another service, a bulk load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowSpec {
    /// The child table, e.g. `comments`.
    pub table: &'static str,
    /// The child's columns that hold the parent's key, in the order of the counter table's
    /// `record_id`, `record_id_2`…: e.g. `["post_id"]`. A row whose key column is `NULL`
    /// counts for no record. Empty for a counter of one record ([`FollowSpec::record`]).
    pub key_columns: &'static [&'static str],
    /// The one record every child row counts for (`follow = comments, record = 1`): a
    /// site-wide counter, whose parent is no column of the child row. `None` when the child's
    /// `key_columns` name each row's parent.
    pub record: Option<i64>,
    /// What a child row adds: `None`, 1 (a count of rows); `Some(column)`, the value of that
    /// integer column (a sum; `NULL` adds 0).
    pub sum: Option<&'static str>,
    /// The boolean columns a child row must hold to count, and the value: `("local", true)`
    /// counts rows whose `local` is true, `("deleted", false)` rows whose `deleted` is not true
    /// (false or `NULL`). Every condition must hold.
    pub filter: &'static [(&'static str, bool)],
    /// The table between the child and the parent (`through = posts(community_id)`): the
    /// child's one key column names a row of this table by its primary key, and that row's
    /// column names the parent. A comment counts for its post's community. `None`: the child's
    /// key columns name the parent themselves.
    pub through: Option<Through>,
}

/// The table a count passes through (`follow = comments(post_id), through =
/// posts(community_id)`): a comment counts for the community of its post. The migration puts
/// triggers on this table too, so that a post that moves to another community takes its
/// counted comments along, and one deleted takes them away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Through {
    /// The table between, e.g. `posts`.
    pub table: &'static str,
    /// Its one-column primary key, which the child's key column holds: `id`.
    pub key: &'static str,
    /// Its column that holds the parent's key: `community_id`. A row whose column is `NULL`
    /// counts for no record, and so do child rows whose key names no row of this table.
    pub column: &'static str,
}

/// The most characters an identifier may have on every backend (PostgreSQL: 63).
const MAX_IDENTIFIER: usize = 63;

/// The name suffixes of the triggers, one per event (PostgreSQL's three share one function,
/// named without a suffix).
pub(crate) const TRIGGER_EVENTS: [&str; 3] = ["insert", "update", "delete"];

/// The name of a trigger (and PostgreSQL's trigger function) on the child table `child`, which
/// keeps every counter that follows it: `slotted_follow_{child}`, with `_{suffix}` (an event)
/// when `suffix` is not empty; shortened with a hash when it would be longer than every backend
/// takes.
pub(crate) fn trigger_name(child: &str, suffix: &str) -> String {
    let name = if suffix.is_empty() {
        format!("slotted_follow_{child}")
    } else {
        format!("slotted_follow_{child}_{suffix}")
    };
    if name.len() <= MAX_IDENTIFIER {
        return name;
    }
    let hash = crate::table::stable_hash(name.as_bytes());
    let mut cut = MAX_IDENTIFIER - 17;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{hash:016x}", &name[..cut])
}

/// The names of the triggers on the child table `child`, one per event.
pub(crate) fn trigger_names(child: &str) -> Vec<String> {
    TRIGGER_EVENTS
        .iter()
        .map(|event| trigger_name(child, event))
        .collect()
}

impl FollowSpec {
    /// The condition under which a child row counts, on the row `alias` (`NEW`, `OLD`, or a
    /// table alias), with identifiers quoted by `quote`: `NEW."post_id" IS NOT NULL AND
    /// NEW."deleted" IS NOT TRUE`.
    pub(crate) fn counts_sql(&self, alias: &str, quote: impl Fn(&str) -> String) -> String {
        let mut conditions: Vec<String> = self
            .key_columns
            .iter()
            .map(|column| format!("{alias}.{} IS NOT NULL", quote(column)))
            .collect();
        conditions.extend(self.filter.iter().map(|(column, value)| {
            let column = quote(column);
            if *value {
                format!("{alias}.{column} IS TRUE")
            } else {
                format!("{alias}.{column} IS NOT TRUE")
            }
        }));
        if conditions.is_empty() {
            return "TRUE".to_owned();
        }
        conditions.join(" AND ")
    }

    /// The parent key of the row `alias`, one SQL expression per key column: its key columns
    /// (`NEW."post_id"`), the one record's key, or, through a table between, that table's
    /// column (`"posts"."community_id"`: the table joined by [`FollowSpec::join_sql`], or read
    /// by [`FollowSpec::lookup_sql`], under its own name).
    pub(crate) fn parent_key_sql(
        &self,
        alias: &str,
        quote: impl Fn(&str) -> String,
    ) -> Vec<String> {
        match (self.record, self.through) {
            (Some(record), _) => vec![record.to_string()],
            (None, Some(through)) => {
                vec![format!(
                    "{}.{}",
                    quote(through.table),
                    quote(through.column)
                )]
            }
            (None, None) => self
                .key_columns
                .iter()
                .map(|column| format!("{alias}.{}", quote(column)))
                .collect(),
        }
    }

    /// ` JOIN "posts" ON "posts"."id" = alias."post_id" AND "posts"."community_id" IS NOT
    /// NULL`: the row between, for a child row `alias` in a `FROM`, where it names a parent.
    /// Empty without `through`.
    pub(crate) fn join_sql(&self, alias: &str, quote: impl Fn(&str) -> String) -> String {
        let Some(through) = self.through else {
            return String::new();
        };
        let table = quote(through.table);
        format!(
            " JOIN {table} ON {table}.{key} = {alias}.{child_key} AND {table}.{column} IS NOT NULL",
            key = quote(through.key),
            child_key = quote(self.key_columns[0]),
            column = quote(through.column),
        )
    }

    /// ` FROM "posts" WHERE "posts"."id" = NEW."post_id" AND "posts"."community_id" IS NOT
    /// NULL`: the row between, for the one child row `row` of a row trigger (`NEW`, `OLD`).
    /// Empty without `through`, and then the statement it goes into selects no table.
    pub(crate) fn lookup_sql(&self, row: &str, quote: impl Fn(&str) -> String) -> String {
        let Some(through) = self.through else {
            return String::new();
        };
        let table = quote(through.table);
        format!(
            " FROM {table} WHERE {table}.{key} = {row}.{child_key} AND {table}.{column} IS NOT NULL",
            key = quote(through.key),
            child_key = quote(self.key_columns[0]),
            column = quote(through.column),
        )
    }

    /// What a child row adds, on the row `alias`: `1`, or `COALESCE(NEW."score", 0)`.
    pub(crate) fn delta_sql(&self, alias: &str, quote: impl Fn(&str) -> String) -> String {
        match self.sum {
            None => "1".to_owned(),
            Some(column) => format!("COALESCE({alias}.{}, 0)", quote(column)),
        }
    }

    /// The child's columns a change of which can change a count: the key columns, the summed
    /// column and the filter's columns, each once.
    pub(crate) fn watched_columns(&self) -> Vec<&'static str> {
        let mut columns: Vec<&'static str> = Vec::new();
        let all = self
            .key_columns
            .iter()
            .copied()
            .chain(self.sum)
            .chain(self.filter.iter().map(|(column, _)| *column));
        for column in all {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    }
}

/// The SQL types a child's key column may have for a counter keyed by `K`'s SQL type: the same
/// type, or it nullable (a row whose key is `NULL` counts for no record).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the child's key column is `{Self}`, but the counter is keyed by `{K}`",
    label = "this column of the child table must hold the parent's key",
    note = "name the child's column that holds this model's key, declared in the child's `table!` as the key's SQL type or its `Nullable`: `follow = comments(post_id)` with `post_id -> Integer` (or `Nullable<Integer>`) for an `i32` key"
)]
pub trait FollowKeyColumn<K> {
    /// Read by the derive's expansion, so that a column of another type fails there.
    const CHECKED: () = ();
}

impl<K> FollowKeyColumn<K> for K {}
impl<K> FollowKeyColumn<K> for Nullable<K> {}

/// The SQL types a summed column may have (`sum = score`): an integer, nullable or not.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`sum` adds an integer column, not a `{Self}` column",
    label = "the column `sum` names",
    note = "name a `SmallInt`, `Integer` or `BigInt` column of the child table (nullable or not: `NULL` adds 0): `follow = post_votes(post_id), sum = score` with `score -> SmallInt`; to count the rows, leave `sum` out"
)]
pub trait SummedColumn {
    /// Read by the derive's expansion, so that a column of another type fails there.
    const CHECKED: () = ();
}

impl SummedColumn for SmallInt {}
impl SummedColumn for Integer {}
impl SummedColumn for BigInt {}
impl SummedColumn for Nullable<SmallInt> {}
impl SummedColumn for Nullable<Integer> {}
impl SummedColumn for Nullable<BigInt> {}

/// The SQL types a filter column may have (`filter(local, not(deleted))`): a boolean, nullable or
/// not (`NULL` is not true).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`filter` names boolean columns, not a `{Self}` column",
    label = "the column in `filter(…)`",
    note = "name a `Bool` column of the child table: `filter(local)` counts rows where it is true, `filter(not(deleted))` rows where it is not"
)]
pub trait FilterColumn {
    /// Read by the derive's expansion, so that a column of another type fails there.
    const CHECKED: () = ();
}

impl FilterColumn for Bool {}
impl FilterColumn for Nullable<Bool> {}

/// The child's columns: each a column of the child table named in `follow = …(…)`, read for
/// its SQL name and type.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a column of the child table `{T}`",
    label = "not a column of the table `follow` names",
    note = "every column of `follow`, `sum` and `filter` is a column of the child table's `table!`: `follow = comments(post_id), sum = score` needs `comments::post_id` and `comments::score`"
)]
pub trait ChildColumn<T> {
    /// Its SQL name.
    const NAME: &'static str;
    /// Its SQL type.
    type SqlType;
}

// `do_not_recommend`: a type that is not a column of `T` fails at `ChildColumn` (the message
// above), not at this impl's bounds, in slotted's source.
#[diagnostic::do_not_recommend]
impl<T: diesel::Table, C: diesel::Column<Table = T>> ChildColumn<T> for C {
    const NAME: &'static str = C::NAME;
    type SqlType = C::SqlType;
}

/// The primary key of the table between (`through = posts(community_id)`): one column, which
/// the child's key column holds.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the table `through` names has a primary key of more than one column: `{Self}`",
    label = "the table between",
    note = "`follow = comments(post_id), through = posts(community_id)` reads a comment's post by the post's one-column primary key: `comments.post_id` holds `posts.id`"
)]
pub trait ThroughKey<T> {
    /// Its SQL name.
    const NAME: &'static str;
    /// Its SQL type.
    type SqlType;
}

#[diagnostic::do_not_recommend]
impl<T: diesel::Table, C: diesel::Column<Table = T>> ThroughKey<T> for C {
    const NAME: &'static str = C::NAME;
    type SqlType = C::SqlType;
}

/// A column of the table between (`through = posts(community_id)`).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a column of the table `{T}` that `through` names",
    label = "not a column of the table between",
    note = "`through = posts(community_id)` names the column of `posts` that holds this model's key: it needs `posts::community_id`"
)]
pub trait ThroughColumn<T> {
    /// Its SQL name.
    const NAME: &'static str;
    /// Its SQL type.
    type SqlType;
}

#[diagnostic::do_not_recommend]
impl<T: diesel::Table, C: diesel::Column<Table = T>> ThroughColumn<T> for C {
    const NAME: &'static str = C::NAME;
    type SqlType = C::SqlType;
}

/// The SQL types the child's key column may have when the count passes through a table: that
/// table's primary key's type, or it nullable.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the child's key column is `{Self}`, but the primary key of the table `through` names is `{K}`",
    label = "this column of the child table must hold the primary key of the table between",
    note = "with `through = posts(community_id)`, name the child's column that holds a post's key: `follow = comments(post_id)` with `post_id` of the type of `posts.id` (or its `Nullable`)"
)]
pub trait ThroughKeyColumn<K> {
    /// Read by the derive's expansion, so that a column of another type fails there.
    const CHECKED: () = ();
}

impl<K> ThroughKeyColumn<K> for K {}
impl<K> ThroughKeyColumn<K> for Nullable<K> {}

/// The SQL types the column of the table between may have for a counter keyed by `K`'s SQL
/// type: the same type, or it nullable.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the column `through` names is `{Self}`, but the counter is keyed by `{K}`",
    label = "this column of the table between must hold the parent's key",
    note = "name the column of the table between that holds this model's key, of the key's SQL type or its `Nullable`: `through = posts(community_id)` with `community_id -> Integer` (or `Nullable<Integer>`) for an `i32` key"
)]
pub trait ThroughParentColumn<K> {
    /// Read by the derive's expansion, so that a column of another type fails there.
    const CHECKED: () = ();
}

impl<K> ThroughParentColumn<K> for K {}
impl<K> ThroughParentColumn<K> for Nullable<K> {}

/// What the derive's expansion reads each column of a followed table through, as projections
/// (`<<comments::post_id as ChildColumn<comments::table>>::SqlType as FollowKeyColumn<…>>::CHECKED`,
/// then its `NAME`) rather than calls of generic functions: a column that cannot play its role
/// fails at the user's column, with the message of the role's trait and no note pointing at a
/// bound in slotted's source.
#[doc(hidden)]
pub mod __check {
    pub use super::{
        ChildColumn, FilterColumn, FollowKeyColumn, SummedColumn, Through, ThroughColumn,
        ThroughKey, ThroughKeyColumn, ThroughParentColumn,
    };
}
