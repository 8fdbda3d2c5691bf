//! The SQL dialects, and the one trait that says how each backend binds and decodes values.
//!
//! No statement and no I/O lives here: the statements are in [`crate::sql`], written once for
//! every backend and branching on [`CounterBackend::DIALECT`] where the dialects differ; the
//! code that runs them on a connection is in [`crate::exec`]. What must be stamped out per
//! backend is only what needs Diesel's per-backend `ToSql`/`FromSql` impls: binding a key, a
//! slot, a count, and reading them back from a row.

use diesel::backend::Backend;
use diesel::deserialize;
use diesel::query_builder::AstPass;
use diesel::row::NamedRow;
// Used by the per-backend impls only: with no backend feature on, nothing uses them.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use diesel::sql_types::{BigInt, Integer, Nullable, SmallInt, Text};
use diesel::QueryResult;

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use crate::key::KeyKind;
use crate::key::{KeyPart, RawPart};

/// The SQL dialects slotted writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite 3.35 or later (upsert, `RETURNING`).
    Sqlite,
    /// PostgreSQL 9.5 or later (upsert, and compaction's `FOR UPDATE SKIP LOCKED`).
    Postgres,
    /// MySQL and MariaDB (`ON DUPLICATE KEY UPDATE`): counting from MySQL 5.7 and MariaDB
    /// 10.3; maintenance, `set`, `reset` and the write-behind buffer from MySQL 8.0 and MariaDB
    /// 10.6 (compaction locks with `FOR UPDATE SKIP LOCKED`; a fold's `DELETE` and the buffer's
    /// flush take their rows from a `JSON_TABLE`).
    Mysql,
}

impl Dialect {
    /// `ident` quoted as an identifier: `"posts"`, or `` `posts` `` on MySQL (DDL and the
    /// fragments of SQL text slotted writes outside Diesel's `push_identifier`).
    pub(crate) fn quote(self, ident: &str) -> String {
        match self {
            Dialect::Mysql => format!("`{}`", ident.replace('`', "``")),
            Dialect::Sqlite | Dialect::Postgres => format!("\"{}\"", ident.replace('"', "\"\"")),
        }
    }

    /// The lowercase name used in folder names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Diesel backend slotted can write counters to: `Sqlite`, `Pg` and `Mysql`, each behind the
/// slotted-core feature of the same name (`sqlite`, `postgres`, `mysql`).
///
/// The compile error for a backend whose feature is off names only the features that are off
/// (one `cfg_attr` per combination): the exact one when a single feature is off.
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres", feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters do not support the `{Self}` backend",
        label = "this connection's backend",
        note = "slotted counters run on `Sqlite`, `Pg` and `Mysql` (SQLite, PostgreSQL, MySQL/MariaDB)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), feature = "postgres", feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `sqlite` feature: `slotted-core = {{ version = \"0.1\", features = [\"sqlite\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", not(feature = "postgres"), feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `postgres` feature: `slotted-core = {{ version = \"0.1\", features = [\"postgres\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres", not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's `mysql` feature: `slotted-core = {{ version = \"0.1\", features = [\"mysql\"] }}`"
    )
)]
#[cfg_attr(
    all(feature = "sqlite", not(feature = "postgres"), not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `postgres` for `Pg`, `mysql` for `Mysql` (`sqlite` is on)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), feature = "postgres", not(feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `sqlite` for `Sqlite`, `mysql` for `Mysql` (`postgres` is on)"
    )
)]
#[cfg_attr(
    all(not(feature = "sqlite"), not(feature = "postgres"), feature = "mysql"),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "enable slotted-core's feature for `{Self}`: `sqlite` for `Sqlite`, `postgres` for `Pg` (`mysql` is on)"
    )
)]
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    diagnostic::on_unimplemented(
        message = "slotted counters are not enabled for the `{Self}` backend",
        label = "this connection's backend",
        note = "slotted-core has no backend feature on: enable `sqlite`, `postgres` or `mysql`, the one for `{Self}`"
    )
)]
pub trait CounterBackend: Backend + sealed::Sealed + Sized + Send + 'static {
    /// The SQL this backend speaks.
    const DIALECT: Dialect;

    /// Binds one key column's value.
    #[doc(hidden)]
    fn push_key_part<'b>(out: &mut AstPass<'_, 'b, Self>, part: &'b KeyPart<'_>)
        -> QueryResult<()>;
    #[doc(hidden)]
    fn push_small_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i16) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_big_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i64) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b str) -> QueryResult<()>;

    /// Reads one key column's value by the type the server sent it as: a row does not know the
    /// counter it comes from (Diesel's `QueryableByName` gets no arguments), and a composite
    /// key's columns each have their own type. An integer comes back at the width the server
    /// sent (SQLite: 64 bits); `CounterKey::from_raw` narrows it.
    #[doc(hidden)]
    fn read_key_part(value: Self::RawValue<'_>) -> deserialize::Result<RawPart>;
    #[doc(hidden)]
    fn read_big_int<'a>(row: &impl NamedRow<'a, Self>, column: &str) -> deserialize::Result<i64>;
    #[doc(hidden)]
    fn read_small_int<'a>(row: &impl NamedRow<'a, Self>, column: &str) -> deserialize::Result<i16>;
    #[doc(hidden)]
    fn read_nullable_text<'a>(
        row: &impl NamedRow<'a, Self>,
        column: &str,
    ) -> deserialize::Result<Option<String>>;
}

/// One backend's implementation: Diesel's own `ToSql` and `FromSql` impls, which exist per
/// backend, hence a macro.
macro_rules! counter_backend {
    ($feature:literal, $backend:ty, $dialect:expr, $special:ident) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $backend {}

        #[cfg(feature = $feature)]
        impl CounterBackend for $backend {
            const DIALECT: Dialect = $dialect;

            fn push_key_part<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                part: &'b KeyPart<'_>,
            ) -> QueryResult<()> {
                match part {
                    KeyPart::SmallInt(v) => out.push_bind_param::<SmallInt, i16>(v),
                    KeyPart::Integer(v) => out.push_bind_param::<Integer, i32>(v),
                    KeyPart::BigInt(v) => out.push_bind_param::<BigInt, i64>(v),
                    KeyPart::Text(v) => out.push_bind_param::<Text, str>(v),
                    #[cfg(feature = "chrono")]
                    KeyPart::Date(v) => {
                        out.push_bind_param::<diesel::sql_types::Date, chrono::NaiveDate>(v)
                    }
                    other => $special::push_key_part(out, other),
                }
            }

            fn push_small_int<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                value: &'b i16,
            ) -> QueryResult<()> {
                out.push_bind_param::<SmallInt, i16>(value)
            }

            fn push_big_int<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                value: &'b i64,
            ) -> QueryResult<()> {
                out.push_bind_param::<BigInt, i64>(value)
            }

            fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b str) -> QueryResult<()> {
                out.push_bind_param::<Text, str>(value)
            }

            fn read_key_part(value: Self::RawValue<'_>) -> deserialize::Result<RawPart> {
                $special::read_key_part(value)
            }

            fn read_big_int<'a>(
                row: &impl NamedRow<'a, Self>,
                column: &str,
            ) -> deserialize::Result<i64> {
                NamedRow::get::<BigInt, i64>(row, column)
            }

            fn read_small_int<'a>(
                row: &impl NamedRow<'a, Self>,
                column: &str,
            ) -> deserialize::Result<i16> {
                NamedRow::get::<SmallInt, i16>(row, column)
            }

            fn read_nullable_text<'a>(
                row: &impl NamedRow<'a, Self>,
                column: &str,
            ) -> deserialize::Result<Option<String>> {
                NamedRow::get::<Nullable<Text>, Option<String>>(row, column)
            }
        }
    };
}

counter_backend!(
    "sqlite",
    diesel::sqlite::Sqlite,
    Dialect::Sqlite,
    sqlite_keys
);
counter_backend!("postgres", diesel::pg::Pg, Dialect::Postgres, pg_keys);
counter_backend!("mysql", diesel::mysql::Mysql, Dialect::Mysql, mysql_keys);

/// The error for a key kind whose SQL type the backend does not have (the model's `table!`
/// says `Unsigned<…>` or `Uuid`, and it runs on another backend).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn unsupported_key(kind: KeyKind, backend: &str) -> Box<dyn std::error::Error + Send + Sync> {
    let needs = match kind {
        KeyKind::UnsignedInteger | KeyKind::UnsignedBigInt => "MySQL or MariaDB",
        KeyKind::Uuid if cfg!(feature = "uuid") => "PostgreSQL",
        KeyKind::Uuid => "PostgreSQL and slotted-core's `uuid` feature",
        _ => "another backend",
    };
    format!(
        "a `{}` key ({kind:?}) needs {needs}: {backend} has no such column type",
        kind.rust_type()
    )
    .into()
}

/// The error for a key column whose type the server sent is not a key type.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn unexpected_key_type(
    backend: &str,
    found: impl std::fmt::Debug,
) -> Box<dyn std::error::Error + Send + Sync> {
    format!("a key column came back from {backend} as {found:?}, which is no key type").into()
}

/// SQLite: the common kinds only. Every integer comes back as a 64-bit one.
#[cfg(feature = "sqlite")]
mod sqlite_keys {
    use super::*;
    use diesel::deserialize::FromSql;
    use diesel::sqlite::{Sqlite, SqliteType, SqliteValue};

    pub(super) fn push_key_part(
        _: &mut AstPass<'_, '_, Sqlite>,
        part: &KeyPart<'_>,
    ) -> QueryResult<()> {
        Err(diesel::result::Error::SerializationError(unsupported_key(
            part.kind(),
            "SQLite",
        )))
    }

    pub(super) fn read_key_part(value: SqliteValue<'_, '_, '_>) -> deserialize::Result<RawPart> {
        match value.value_type() {
            Some(SqliteType::Long) => Ok(RawPart::BigInt(
                <i64 as FromSql<BigInt, Sqlite>>::from_sql(value)?,
            )),
            Some(SqliteType::Text) => Ok(RawPart::Text(
                <String as FromSql<Text, Sqlite>>::from_sql(value)?,
            )),
            other => Err(unexpected_key_type("SQLite", other)),
        }
    }
}

/// PostgreSQL: `UUID` keys, with the `uuid` feature. Read by the value's type OID.
#[cfg(feature = "postgres")]
mod pg_keys {
    use super::*;
    use diesel::deserialize::FromSql;
    use diesel::pg::{Pg, PgValue};

    // Without `uuid`, every key kind that reaches here is refused and `out` goes unused.
    #[cfg_attr(not(feature = "uuid"), allow(unused_variables))]
    pub(super) fn push_key_part<'b>(
        out: &mut AstPass<'_, 'b, Pg>,
        part: &'b KeyPart<'_>,
    ) -> QueryResult<()> {
        match part {
            #[cfg(feature = "uuid")]
            KeyPart::Uuid(bytes) => out.push_bind_param::<diesel::sql_types::Uuid, uuid::Uuid>(
                uuid::Uuid::from_bytes_ref(bytes),
            ),
            other => Err(diesel::result::Error::SerializationError(unsupported_key(
                other.kind(),
                "PostgreSQL",
            ))),
        }
    }

    // `pg_type`'s OIDs, fixed since PostgreSQL 7: int2, int4, int8, text, varchar, uuid.
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const INT8: u32 = 20;
    const TEXT: u32 = 25;
    const VARCHAR: u32 = 1043;
    const BPCHAR: u32 = 1042;
    const NAME: u32 = 19;
    #[cfg(feature = "uuid")]
    const UUID: u32 = 2950;
    #[cfg(feature = "chrono")]
    const DATE: u32 = 1082;

    pub(super) fn read_key_part(value: PgValue<'_>) -> deserialize::Result<RawPart> {
        Ok(match value.get_oid().get() {
            INT2 => RawPart::SmallInt(<i16 as FromSql<SmallInt, Pg>>::from_sql(value)?),
            INT4 => RawPart::Integer(<i32 as FromSql<Integer, Pg>>::from_sql(value)?),
            INT8 => RawPart::BigInt(<i64 as FromSql<BigInt, Pg>>::from_sql(value)?),
            TEXT | VARCHAR | BPCHAR | NAME => {
                RawPart::Text(<String as FromSql<Text, Pg>>::from_sql(value)?)
            }
            #[cfg(feature = "uuid")]
            UUID => RawPart::Uuid(
                <uuid::Uuid as FromSql<diesel::sql_types::Uuid, Pg>>::from_sql(value)?.into_bytes(),
            ),
            #[cfg(feature = "chrono")]
            DATE => RawPart::Date(<chrono::NaiveDate as FromSql<
                diesel::sql_types::Date,
                Pg,
            >>::from_sql(value)?),
            oid => {
                return Err(unexpected_key_type(
                    "PostgreSQL",
                    format_args!("type OID {oid}"),
                ))
            }
        })
    }
}

/// MySQL and MariaDB: `UNSIGNED` keys. Read by the value's column type.
#[cfg(feature = "mysql")]
mod mysql_keys {
    use super::*;
    use diesel::deserialize::FromSql;
    use diesel::mysql::{Mysql, MysqlType, MysqlValue};
    use diesel::sql_types::Unsigned;

    pub(super) fn push_key_part<'b>(
        out: &mut AstPass<'_, 'b, Mysql>,
        part: &'b KeyPart<'_>,
    ) -> QueryResult<()> {
        match part {
            KeyPart::UnsignedInteger(v) => out.push_bind_param::<Unsigned<Integer>, u32>(v),
            KeyPart::UnsignedBigInt(v) => out.push_bind_param::<Unsigned<BigInt>, u64>(v),
            other => Err(diesel::result::Error::SerializationError(unsupported_key(
                other.kind(),
                "MySQL",
            ))),
        }
    }

    pub(super) fn read_key_part(value: MysqlValue<'_>) -> deserialize::Result<RawPart> {
        Ok(match value.value_type() {
            MysqlType::Short => {
                RawPart::SmallInt(<i16 as FromSql<SmallInt, Mysql>>::from_sql(value)?)
            }
            MysqlType::Long => RawPart::Integer(<i32 as FromSql<Integer, Mysql>>::from_sql(value)?),
            MysqlType::LongLong => {
                RawPart::BigInt(<i64 as FromSql<BigInt, Mysql>>::from_sql(value)?)
            }
            MysqlType::UnsignedLong => RawPart::UnsignedInteger(<u32 as FromSql<
                Unsigned<Integer>,
                Mysql,
            >>::from_sql(value)?),
            MysqlType::UnsignedLongLong => {
                RawPart::UnsignedBigInt(<u64 as FromSql<Unsigned<BigInt>, Mysql>>::from_sql(value)?)
            }
            MysqlType::String | MysqlType::Blob => {
                RawPart::Text(<String as FromSql<Text, Mysql>>::from_sql(value)?)
            }
            #[cfg(feature = "chrono")]
            MysqlType::Date => RawPart::Date(<chrono::NaiveDate as FromSql<
                diesel::sql_types::Date,
                Mysql,
            >>::from_sql(value)?),
            other => return Err(unexpected_key_type("MySQL", other)),
        })
    }
}
