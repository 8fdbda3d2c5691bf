//! Running the diagnostics' statements: one sealed trait, implemented per backend, so each
//! statement is loaded with the backend's concrete types.

use diesel::connection::LoadConnection;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use diesel::query_builder::BoxedSqlQuery;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use diesel::query_dsl::RunQueryDsl as _;
use diesel::sql_types::{BigInt, Nullable, SmallInt, Text};
use diesel::{QueryResult, QueryableByName};

/// A value bound to a diagnostics statement.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    Text(&'a str),
    BigInt(i64),
}

mod sealed {
    pub trait Sealed {}
}

/// A backend the contention diagnostics run on: `Sqlite`, `Pg` and `Mysql`, behind the same
/// slotted-core features as [`CounterBackend`](crate::CounterBackend), whose supertrait it is: every
/// connection counters run on can be diagnosed.
#[diagnostic::on_unimplemented(
    message = "slotted's diagnostics are not enabled for the `{Self}` backend",
    label = "this connection's backend",
    note = "enable the slotted-core feature for this backend: `sqlite`, `postgres` or `mysql`"
)]
pub trait DiagnosticsBackend: diesel::backend::Backend + sealed::Sealed {
    #[doc(hidden)]
    fn load_stats<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> QueryResult<Vec<StatsRow>>;
    #[doc(hidden)]
    fn load_hottest<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> QueryResult<Vec<HotRow>>;
    #[doc(hidden)]
    fn load_pg_waits<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> QueryResult<Vec<PgWaitRow>>;
    #[doc(hidden)]
    fn load_mysql_waits<C: LoadConnection<Backend = Self>>(
        conn: &mut C,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> QueryResult<Vec<MysqlWaitRow>>;
}

macro_rules! diagnostics_backend {
    ($feature:literal, $backend:ty) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $backend {}

        #[cfg(feature = $feature)]
        impl DiagnosticsBackend for $backend {
            fn load_stats<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                sql: &str,
                binds: &[Bind<'_>],
            ) -> QueryResult<Vec<StatsRow>> {
                boxed::<$backend>(sql, binds).load(conn)
            }
            fn load_hottest<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                sql: &str,
                binds: &[Bind<'_>],
            ) -> QueryResult<Vec<HotRow>> {
                boxed::<$backend>(sql, binds).load(conn)
            }
            fn load_pg_waits<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                sql: &str,
                binds: &[Bind<'_>],
            ) -> QueryResult<Vec<PgWaitRow>> {
                boxed::<$backend>(sql, binds).load(conn)
            }
            fn load_mysql_waits<C: LoadConnection<Backend = Self>>(
                conn: &mut C,
                sql: &str,
                binds: &[Bind<'_>],
            ) -> QueryResult<Vec<MysqlWaitRow>> {
                boxed::<$backend>(sql, binds).load(conn)
            }
        }
    };
}

/// `sql` with its values bound.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn boxed<'a, DB>(
    sql: &str,
    binds: &[Bind<'a>],
) -> BoxedSqlQuery<'a, DB, diesel::query_builder::SqlQuery>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<Text>
        + diesel::sql_types::HasSqlType<BigInt>,
    &'a str: diesel::serialize::ToSql<Text, DB>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    let mut query = diesel::sql_query(sql).into_boxed::<'a, DB>();
    for bind in binds {
        query = match *bind {
            Bind::Text(v) => query.bind::<Text, _>(v),
            Bind::BigInt(v) => query.bind::<BigInt, _>(v),
        };
    }
    query
}

diagnostics_backend!("sqlite", diesel::sqlite::Sqlite);
diagnostics_backend!("postgres", diesel::pg::Pg);
diagnostics_backend!("mysql", diesel::mysql::Mysql);

/// A row of [`super::sql::stats`].
#[doc(hidden)]
#[derive(Debug, QueryableByName)]
pub struct StatsRow {
    #[diesel(sql_type = BigInt)]
    pub n_rows: i64,
    #[diesel(sql_type = BigInt)]
    pub n_records: i64,
    #[diesel(sql_type = BigInt)]
    pub n_groups: i64,
    #[diesel(sql_type = BigInt)]
    pub n_zero: i64,
    #[diesel(sql_type = BigInt)]
    pub max_group_rows: i64,
}

/// A row of [`super::sql::hottest`].
#[doc(hidden)]
#[derive(Debug, QueryableByName)]
pub struct HotRow {
    #[diesel(sql_type = Text)]
    pub record: String,
    #[diesel(sql_type = BigInt)]
    pub n_rows: i64,
    #[diesel(sql_type = BigInt)]
    pub n_slots: i64,
    #[diesel(sql_type = BigInt)]
    pub n_buckets: i64,
}

/// A row of [`super::sql::postgres_lock_waits`].
#[doc(hidden)]
#[derive(Debug, QueryableByName)]
pub struct PgWaitRow {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub waiter: i32,
    #[diesel(sql_type = Text)]
    pub blockers: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub waited_ms: Option<i64>,
    #[diesel(sql_type = Text)]
    pub lock_kind: String,
    #[diesel(sql_type = Text)]
    pub query: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub record: Option<String>,
    #[diesel(sql_type = Nullable<SmallInt>)]
    pub slot: Option<i16>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub bucket: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    pub record_type: Option<String>,
}

/// A row of [`super::sql::mysql_lock_waits`].
#[doc(hidden)]
#[derive(Debug, QueryableByName)]
pub struct MysqlWaitRow {
    #[diesel(sql_type = BigInt)]
    pub waiter: i64,
    #[diesel(sql_type = BigInt)]
    pub blocker: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub waited_ms: Option<i64>,
    #[diesel(sql_type = Text)]
    pub lock_mode: String,
    #[diesel(sql_type = Text)]
    pub lock_index: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub lock_data: Option<String>,
    #[diesel(sql_type = Text)]
    pub lock_table: String,
    #[diesel(sql_type = Text)]
    pub db_prefix: String,
    #[diesel(sql_type = Text)]
    pub query: String,
}
