//! Record keys: the types a counter can be keyed by.
//!
//! A key has a Rust type (the model's primary key field) and an SQL type (its column in the
//! model's `table!`). The derive takes the SQL type from the parent table and checks that the
//! Rust type keys that SQL type ([`CounterKey::SqlType`]); the counter table's `record_id`
//! column gets the same SQL type, so `diesel print-schema` agrees with the derive.
//!
//! The runtime binds and reads every key as one of a few canonical values ([`KeyKind`]). A
//! newtype key (`struct PostId(i32)`, as `diesel-derive-newtype` makes) keys a counter once it
//! derives [`SlottedKey`](crate::SlottedKey): it is bound and read as its inner key, and its
//! column has its inner key's SQL type.

use std::fmt::Debug;
use std::hash::Hash;

/// The SQL type of a counter table's `record_id` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// `SMALLINT` (`i16`).
    SmallInt,
    /// `INTEGER` (`i32`).
    Integer,
    /// `BIGINT` (`i64`).
    BigInt,
    /// `INT UNSIGNED` (`u32`), MySQL and MariaDB only.
    UnsignedInteger,
    /// `BIGINT UNSIGNED` (`u64`), MySQL and MariaDB only.
    UnsignedBigInt,
    /// `TEXT` on PostgreSQL and SQLite, `VARCHAR(n)` on MySQL (`String`).
    Text,
    /// `UUID` (`uuid::Uuid`, the `uuid` feature), PostgreSQL only.
    Uuid,
}

impl KeyKind {
    /// Whether the shared table's `BIGINT` `record_id` holds every key of this kind exactly.
    pub const fn fits_big_int(self) -> bool {
        matches!(
            self,
            KeyKind::SmallInt | KeyKind::Integer | KeyKind::BigInt | KeyKind::UnsignedInteger
        )
    }

    /// The Rust type that keys this kind, for messages.
    pub const fn rust_type(self) -> &'static str {
        match self {
            KeyKind::SmallInt => "i16",
            KeyKind::Integer => "i32",
            KeyKind::BigInt => "i64",
            KeyKind::UnsignedInteger => "u32",
            KeyKind::UnsignedBigInt => "u64",
            KeyKind::Text => "String",
            KeyKind::Uuid => "uuid::Uuid",
        }
    }
}

/// A key, borrowed, as it is bound to a statement. `Debug` shows it as the model's key shows
/// itself (`7`, `"url"`): errors and reports name keys this way.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue<'a> {
    SmallInt(i16),
    Integer(i32),
    BigInt(i64),
    UnsignedInteger(u32),
    UnsignedBigInt(u64),
    Text(&'a str),
    /// The UUID's 16 bytes, big-endian (as `uuid::Uuid::as_bytes`).
    Uuid([u8; 16]),
}

impl KeyValue<'_> {
    /// The key, owned.
    pub fn to_raw(self) -> RawKey {
        match self {
            KeyValue::SmallInt(v) => RawKey::SmallInt(v),
            KeyValue::Integer(v) => RawKey::Integer(v),
            KeyValue::BigInt(v) => RawKey::BigInt(v),
            KeyValue::UnsignedInteger(v) => RawKey::UnsignedInteger(v),
            KeyValue::UnsignedBigInt(v) => RawKey::UnsignedBigInt(v),
            KeyValue::Text(v) => RawKey::Text(v.to_owned()),
            KeyValue::Uuid(v) => RawKey::Uuid(v),
        }
    }

    /// The same key as the shared table's `BIGINT` keeps it, when it fits there.
    pub(crate) fn widened(self) -> Option<i64> {
        match self {
            KeyValue::SmallInt(v) => Some(i64::from(v)),
            KeyValue::Integer(v) => Some(i64::from(v)),
            KeyValue::BigInt(v) => Some(v),
            KeyValue::UnsignedInteger(v) => Some(i64::from(v)),
            KeyValue::UnsignedBigInt(_) | KeyValue::Text(_) | KeyValue::Uuid(_) => None,
        }
    }
}

/// A key, owned, as it comes back from a `GROUP BY` query. `Debug` as [`KeyValue`]'s.
#[doc(hidden)]
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RawKey {
    SmallInt(i16),
    Integer(i32),
    BigInt(i64),
    UnsignedInteger(u32),
    UnsignedBigInt(u64),
    Text(String),
    Uuid([u8; 16]),
}

impl RawKey {
    /// The key, borrowed, to bind again.
    pub fn as_value(&self) -> KeyValue<'_> {
        match self {
            RawKey::SmallInt(v) => KeyValue::SmallInt(*v),
            RawKey::Integer(v) => KeyValue::Integer(*v),
            RawKey::BigInt(v) => KeyValue::BigInt(*v),
            RawKey::UnsignedInteger(v) => KeyValue::UnsignedInteger(*v),
            RawKey::UnsignedBigInt(v) => KeyValue::UnsignedBigInt(*v),
            RawKey::Text(v) => KeyValue::Text(v),
            RawKey::Uuid(v) => KeyValue::Uuid(*v),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> KeyKind {
        match self {
            RawKey::SmallInt(_) => KeyKind::SmallInt,
            RawKey::Integer(_) => KeyKind::Integer,
            RawKey::BigInt(_) => KeyKind::BigInt,
            RawKey::UnsignedInteger(_) => KeyKind::UnsignedInteger,
            RawKey::UnsignedBigInt(_) => KeyKind::UnsignedBigInt,
            RawKey::Text(_) => KeyKind::Text,
            RawKey::Uuid(_) => KeyKind::Uuid,
        }
    }

    /// An integer key, whatever width it was read back at (the shared table keeps every key as
    /// `BIGINT`).
    fn integer(&self) -> Option<i128> {
        match *self {
            RawKey::SmallInt(v) => Some(v.into()),
            RawKey::Integer(v) => Some(v.into()),
            RawKey::BigInt(v) => Some(v.into()),
            RawKey::UnsignedInteger(v) => Some(v.into()),
            RawKey::UnsignedBigInt(v) => Some(v.into()),
            RawKey::Text(_) | RawKey::Uuid(_) => None,
        }
    }
}

impl Debug for KeyValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyValue::SmallInt(v) => Debug::fmt(v, f),
            KeyValue::Integer(v) => Debug::fmt(v, f),
            KeyValue::BigInt(v) => Debug::fmt(v, f),
            KeyValue::UnsignedInteger(v) => Debug::fmt(v, f),
            KeyValue::UnsignedBigInt(v) => Debug::fmt(v, f),
            KeyValue::Text(v) => Debug::fmt(v, f),
            KeyValue::Uuid(bytes) => {
                // The hyphenated form, as `uuid::Uuid` shows itself.
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                write!(
                    f,
                    "{}-{}-{}-{}-{}",
                    &hex[0..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..32]
                )
            }
        }
    }
}

impl Debug for RawKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Debug::fmt(&self.as_value(), f)
    }
}

/// An SQL type a counter can be keyed by: the SQL type of the model's primary key column.
#[diagnostic::on_unimplemented(
    message = "a `{Self}` column cannot key a slotted counter",
    label = "the model's primary key",
    note = "slotted counters are keyed by a `SmallInt`, `Integer`, `BigInt`, `Text` (or `VarChar`), `Unsigned<Integer>`, `Unsigned<BigInt>` (MySQL) or `Uuid` (PostgreSQL, the `uuid` feature) column"
)]
pub trait KeySqlType: 'static {}

impl KeySqlType for diesel::sql_types::SmallInt {}
impl KeySqlType for diesel::sql_types::Integer {}
impl KeySqlType for diesel::sql_types::BigInt {}
impl KeySqlType for diesel::sql_types::Text {}
#[cfg(feature = "mysql")]
impl KeySqlType for diesel::sql_types::Unsigned<diesel::sql_types::Integer> {}
#[cfg(feature = "mysql")]
impl KeySqlType for diesel::sql_types::Unsigned<diesel::sql_types::BigInt> {}
#[cfg(feature = "uuid")]
impl KeySqlType for diesel::sql_types::Uuid {}

pub(crate) mod sealed {
    /// Implemented by slotted-core for its key types and by `#[derive(SlottedKey)]` for a
    /// newtype over one of them: every key is one of the canonical [`super::KeyKind`]s.
    pub trait Sealed {}
    impl Sealed for i16 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    #[cfg(feature = "mysql")]
    impl Sealed for u32 {}
    #[cfg(feature = "mysql")]
    impl Sealed for u64 {}
    impl Sealed for String {}
    #[cfg(feature = "uuid")]
    impl Sealed for uuid::Uuid {}
}

/// A type a counter can be keyed by: the model's primary key type.
///
/// `i16`, `i32`, `i64`, `u32` and `u64` (MySQL's `UNSIGNED` columns, the `mysql` feature), `String` and, with the
/// `uuid` feature, `uuid::Uuid` (PostgreSQL). `SqlType` is the Diesel SQL type of the key's
/// column; the counter table's `record_id` gets the same one on each backend, so
/// `diesel print-schema` writes what the derive declares.
///
/// A newtype over one of them keys a counter too: `#[derive(SlottedKey)]` on it implements this
/// trait by its inner key (see [`SlottedKey`](crate::SlottedKey)).
///
/// Sealed otherwise: each key maps to one column type per backend, which is what makes the
/// generated migration and `diesel print-schema` agree.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a slotted counter",
    label = "the model's primary key type",
    note = "slotted counters are keyed by `i16`, `i32`, `i64`, `u32`, `u64` (MySQL), `String` or `uuid::Uuid` (PostgreSQL, slotted-core's `uuid` feature)",
    note = "a newtype over one of them keys a counter with `#[derive(slotted_core::SlottedKey)]` on it, e.g. `#[derive(DieselNewType, SlottedKey)] struct PostId(i32);`"
)]
pub trait CounterKey: sealed::Sealed + Clone + Eq + Hash + Debug + Send + Sync + 'static {
    /// The SQL type of the key's column.
    type SqlType: KeySqlType;
    /// How the runtime binds it.
    const KIND: KeyKind;
    #[doc(hidden)]
    fn key_value(&self) -> KeyValue<'_>;
    #[doc(hidden)]
    fn from_raw(raw: RawKey) -> Option<Self>;
}

/// The built-in keys: an integer of any width comes back narrowed when it fits (the shared
/// table keeps every integer key as `BIGINT`).
macro_rules! integer_key {
    ($($ty:ty => $kind:ident, $sql:ty;)*) => {$(
        impl CounterKey for $ty {
            type SqlType = $sql;
            const KIND: KeyKind = KeyKind::$kind;
            fn key_value(&self) -> KeyValue<'_> {
                KeyValue::$kind(*self)
            }
            fn from_raw(raw: RawKey) -> Option<Self> {
                raw.integer().and_then(|v| <$ty>::try_from(v).ok())
            }
        }
    )*};
}

integer_key! {
    i16 => SmallInt, diesel::sql_types::SmallInt;
    i32 => Integer, diesel::sql_types::Integer;
    i64 => BigInt, diesel::sql_types::BigInt;
}

// Diesel has `Unsigned` with its MySQL backend only.
#[cfg(feature = "mysql")]
integer_key! {
    u32 => UnsignedInteger, diesel::sql_types::Unsigned<diesel::sql_types::Integer>;
    u64 => UnsignedBigInt, diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

impl CounterKey for String {
    type SqlType = diesel::sql_types::Text;
    const KIND: KeyKind = KeyKind::Text;
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Text(self)
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw {
            RawKey::Text(v) => Some(v),
            _ => None,
        }
    }
}

#[cfg(feature = "uuid")]
impl CounterKey for uuid::Uuid {
    type SqlType = diesel::sql_types::Uuid;
    const KIND: KeyKind = KeyKind::Uuid;
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(*self.as_bytes())
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw {
            RawKey::Uuid(v) => Some(uuid::Uuid::from_bytes(v)),
            _ => None,
        }
    }
}

/// The SQL type of the `record_id` column of a counter keyed by a newtype `K`
/// (`#[derive(SlottedKey)]`): on each backend, the column type of `K`'s inner key
/// ([`CounterKey::SqlType`]), so `posts_likes_slots::record_id` is `KeyOf<PostId>` where a
/// `PostId(i32)`'s column is `INTEGER`.
///
/// The derive's `table!` names it because `table!` takes a column type, not a projection
/// (`<PostId as CounterKey>::SqlType`). Diesel queries on the counter table bind and load it as
/// the inner key's Rust type (`i32`, `String`, …), and a newtype whose `ToSql`/`FromSql` are
/// generic over the SQL type, as `diesel-derive-newtype` makes them, binds as itself:
/// `posts_likes_slots::record_id.eq(PostId(7))`.
pub struct KeyOf<K>(std::marker::PhantomData<fn() -> K>);

impl<K> Debug for KeyOf<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyOf")
    }
}

impl<K> Clone for KeyOf<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for KeyOf<K> {}

impl<K> Default for KeyOf<K> {
    fn default() -> Self {
        KeyOf(std::marker::PhantomData)
    }
}

// Whatever `K` is: a key type that keys nothing fails at the model's key field, not as well in
// every impl of the counter's `table!`.
impl<K: 'static> diesel::sql_types::SqlType for KeyOf<K> {
    type IsNull = diesel::sql_types::is_nullable::NotNull;
}

impl<K: 'static> diesel::sql_types::SingleValue for KeyOf<K> {}

impl<K: 'static> diesel::query_builder::QueryId for KeyOf<K> {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// `KeyOf<K>` has the metadata of `K`'s inner SQL type on each backend.
macro_rules! key_of_metadata {
    ($($feature:literal => $backend:ty;)*) => {$(
        #[cfg(feature = $feature)]
        impl<K: CounterKey> diesel::sql_types::HasSqlType<KeyOf<K>> for $backend
        where
            $backend: diesel::sql_types::HasSqlType<K::SqlType>,
        {
            fn metadata(lookup: &mut Self::MetadataLookup) -> Self::TypeMetadata {
                <$backend as diesel::sql_types::HasSqlType<K::SqlType>>::metadata(lookup)
            }
        }
    )*};
}

key_of_metadata! {
    "sqlite" => diesel::sqlite::Sqlite;
    "postgres" => diesel::pg::Pg;
    "mysql" => diesel::mysql::Mysql;
}

/// The inner keys' Rust types bind as `KeyOf<K>` as they bind as `K`'s SQL type; the integers
/// and UUIDs load from it too (Diesel loads `String` through a trait of its own, for every SQL
/// type, so a text key's column loads as the newtype, or as `KeyOf`'s inner SQL type).
macro_rules! key_of_values {
    ($(($load:tt) $(#[$cfg:meta])* $rust:ty => $sql:ty;)*) => {$(
        $(#[$cfg])*
        impl<K, DB> diesel::serialize::ToSql<KeyOf<K>, DB> for $rust
        where
            K: CounterKey<SqlType = $sql>,
            DB: diesel::backend::Backend,
            $rust: diesel::serialize::ToSql<$sql, DB>,
        {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, DB>,
            ) -> diesel::serialize::Result {
                <$rust as diesel::serialize::ToSql<$sql, DB>>::to_sql(self, out)
            }
        }

        key_of_values!(@load $load $(#[$cfg])* $rust => $sql);
    )*};
    (@load load $(#[$cfg:meta])* $rust:ty => $sql:ty) => {
        $(#[$cfg])*
        impl<K, DB> diesel::deserialize::FromSql<KeyOf<K>, DB> for $rust
        where
            K: CounterKey<SqlType = $sql>,
            DB: diesel::backend::Backend,
            $rust: diesel::deserialize::FromSql<$sql, DB>,
        {
            fn from_sql(value: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
                <$rust as diesel::deserialize::FromSql<$sql, DB>>::from_sql(value)
            }
        }
    };
    (@load bind $(#[$cfg:meta])* $rust:ty => $sql:ty) => {};
}

key_of_values! {
    (load) i16 => diesel::sql_types::SmallInt;
    (load) i32 => diesel::sql_types::Integer;
    (load) i64 => diesel::sql_types::BigInt;
    (bind) str => diesel::sql_types::Text;
    (load) #[cfg(feature = "mysql")]
    u32 => diesel::sql_types::Unsigned<diesel::sql_types::Integer>;
    (load) #[cfg(feature = "mysql")]
    u64 => diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
    (load) #[cfg(feature = "uuid")]
    uuid::Uuid => diesel::sql_types::Uuid;
}

/// What the derive's expansion checks a key with.
#[doc(hidden)]
pub mod check {
    use super::CounterKey;

    /// The key type's SQL type is the one the derive declared for it by name.
    #[diagnostic::on_unimplemented(
        message = "this key type keys a `{Self}` column, not a `{S}` one",
        label = "the model's primary key type",
        note = "a `Uuid` key is `uuid::Uuid`, with slotted-core's `uuid` feature"
    )]
    pub trait SameSqlType<S> {}
    impl<T> SameSqlType<T> for T {}

    /// Fails to compile unless the key of counter `T` keys an `S` column (through `T`, so that a
    /// key type that keys nothing fails once, at `CounterTable::Key`).
    pub const fn sql_type<T, S>()
    where
        T: crate::CounterTable,
        <T::Key as CounterKey>::SqlType: SameSqlType<S>,
    {
    }

    /// Fails to compile (a constant's evaluation) unless `K` is a text key: `max_key_length`
    /// sizes MySQL's `VARCHAR` column of a `String` key, or of a newtype over one.
    pub const fn max_key_length<T: crate::CounterTable>() {
        assert!(
            matches!(<T::Key as CounterKey>::KIND, super::KeyKind::Text),
            "`max_key_length` applies only to text keys (`String`, or a newtype over one): remove it"
        );
    }

    /// Fails to compile (a constant's evaluation) when the key of counter `T` does not fit the
    /// shared table.
    pub const fn shared<T: crate::CounterTable>() {
        assert!(
            <T::Key as CounterKey>::KIND.fits_big_int(),
            "shared storage keeps integer keys of up to 63 bits (its `record_id` is BIGINT): key the model by `i16`, `i32`, `i64` or `u32` (or a newtype over one), or use `storage = table`"
        );
    }
}
