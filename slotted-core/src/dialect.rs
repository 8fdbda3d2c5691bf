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

use crate::key::{KeyKind, KeyValue, RawKey};

/// The SQL dialects slotted writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite 3.35 or later (upsert, `RETURNING`).
    Sqlite,
    /// PostgreSQL 9.5 or later (upsert, and compaction's `FOR UPDATE SKIP LOCKED`).
    Postgres,
    /// MySQL and MariaDB (`ON DUPLICATE KEY UPDATE`): counting from MySQL 5.7 and MariaDB
    /// 10.3; compaction, which locks with `FOR UPDATE SKIP LOCKED`, from MySQL 8.0 and MariaDB
    /// 10.6.
    Mysql,
}

impl Dialect {
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

    #[doc(hidden)]
    fn push_key<'b>(out: &mut AstPass<'_, 'b, Self>, key: &'b KeyValue<'_>) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_small_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i16) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_big_int<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b i64) -> QueryResult<()>;
    #[doc(hidden)]
    fn push_text<'b>(out: &mut AstPass<'_, 'b, Self>, value: &'b str) -> QueryResult<()>;

    #[doc(hidden)]
    fn read_key<'a>(
        row: &impl NamedRow<'a, Self>,
        column: &str,
        kind: KeyKind,
    ) -> deserialize::Result<RawKey>;
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

            fn push_key<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                key: &'b KeyValue<'_>,
            ) -> QueryResult<()> {
                match key {
                    KeyValue::SmallInt(v) => out.push_bind_param::<SmallInt, i16>(v),
                    KeyValue::Integer(v) => out.push_bind_param::<Integer, i32>(v),
                    KeyValue::BigInt(v) => out.push_bind_param::<BigInt, i64>(v),
                    KeyValue::Text(v) => out.push_bind_param::<Text, str>(v),
                    other => $special::push_key(out, other),
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

            fn read_key<'a>(
                row: &impl NamedRow<'a, Self>,
                column: &str,
                kind: KeyKind,
            ) -> deserialize::Result<RawKey> {
                Ok(match kind {
                    KeyKind::SmallInt => {
                        RawKey::SmallInt(NamedRow::get::<SmallInt, i16>(row, column)?)
                    }
                    KeyKind::Integer => {
                        RawKey::Integer(NamedRow::get::<Integer, i32>(row, column)?)
                    }
                    KeyKind::BigInt => RawKey::BigInt(NamedRow::get::<BigInt, i64>(row, column)?),
                    KeyKind::Text => RawKey::Text(NamedRow::get::<Text, String>(row, column)?),
                    other => $special::read_key(row, column, other)?,
                })
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

/// SQLite: the common kinds only.
#[cfg(feature = "sqlite")]
mod sqlite_keys {
    use super::*;
    use diesel::sqlite::Sqlite;

    pub(super) fn push_key(_: &mut AstPass<'_, '_, Sqlite>, key: &KeyValue<'_>) -> QueryResult<()> {
        Err(diesel::result::Error::SerializationError(unsupported_key(
            key.to_raw().kind(),
            "SQLite",
        )))
    }

    pub(super) fn read_key<'a>(
        _: &impl NamedRow<'a, Sqlite>,
        _: &str,
        kind: KeyKind,
    ) -> deserialize::Result<RawKey> {
        Err(unsupported_key(kind, "SQLite"))
    }
}

/// PostgreSQL: `UUID` keys, with the `uuid` feature.
#[cfg(feature = "postgres")]
mod pg_keys {
    use super::*;
    use diesel::pg::Pg;

    // Without `uuid`, every key kind that reaches here is refused and `out` goes unused.
    #[cfg_attr(not(feature = "uuid"), allow(unused_variables))]
    pub(super) fn push_key<'b>(
        out: &mut AstPass<'_, 'b, Pg>,
        key: &'b KeyValue<'_>,
    ) -> QueryResult<()> {
        match key {
            #[cfg(feature = "uuid")]
            KeyValue::Uuid(bytes) => out.push_bind_param::<diesel::sql_types::Uuid, uuid::Uuid>(
                uuid::Uuid::from_bytes_ref(bytes),
            ),
            other => Err(diesel::result::Error::SerializationError(unsupported_key(
                other.to_raw().kind(),
                "PostgreSQL",
            ))),
        }
    }

    pub(super) fn read_key<'a>(
        row: &impl NamedRow<'a, Pg>,
        column: &str,
        kind: KeyKind,
    ) -> deserialize::Result<RawKey> {
        match kind {
            #[cfg(feature = "uuid")]
            KeyKind::Uuid => Ok(RawKey::Uuid(
                NamedRow::get::<diesel::sql_types::Uuid, uuid::Uuid>(row, column)?.into_bytes(),
            )),
            other => {
                let _ = (row, column);
                Err(unsupported_key(other, "PostgreSQL"))
            }
        }
    }
}

/// MySQL and MariaDB: `UNSIGNED` keys.
#[cfg(feature = "mysql")]
mod mysql_keys {
    use super::*;
    use diesel::mysql::Mysql;
    use diesel::sql_types::Unsigned;

    pub(super) fn push_key<'b>(
        out: &mut AstPass<'_, 'b, Mysql>,
        key: &'b KeyValue<'_>,
    ) -> QueryResult<()> {
        match key {
            KeyValue::UnsignedInteger(v) => out.push_bind_param::<Unsigned<Integer>, u32>(v),
            KeyValue::UnsignedBigInt(v) => out.push_bind_param::<Unsigned<BigInt>, u64>(v),
            other => Err(diesel::result::Error::SerializationError(unsupported_key(
                other.to_raw().kind(),
                "MySQL",
            ))),
        }
    }

    pub(super) fn read_key<'a>(
        row: &impl NamedRow<'a, Mysql>,
        column: &str,
        kind: KeyKind,
    ) -> deserialize::Result<RawKey> {
        match kind {
            KeyKind::UnsignedInteger => Ok(RawKey::UnsignedInteger(NamedRow::get::<
                Unsigned<Integer>,
                u32,
            >(row, column)?)),
            KeyKind::UnsignedBigInt => Ok(RawKey::UnsignedBigInt(NamedRow::get::<
                Unsigned<BigInt>,
                u64,
            >(row, column)?)),
            other => Err(unsupported_key(other, "MySQL")),
        }
    }
}
