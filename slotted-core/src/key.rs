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
    /// `DATE` (`chrono::NaiveDate`, the `chrono` feature): a day, as a composite key's
    /// `(version_id, date)` has it.
    Date,
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
            KeyKind::Date => "chrono::NaiveDate",
        }
    }
}

/// The most columns a key has: a composite primary key (`#[diesel(primary_key(a, b))]`) of up to
/// three columns keys a counter.
pub const MAX_KEY_COLUMNS: usize = 3;

/// The names of a counter table's key columns, in order: `record_id` for a one-column key,
/// `record_id`, `record_id_2`[, `record_id_3`] for a composite one.
pub const KEY_COLUMNS: [&str; MAX_KEY_COLUMNS] = ["record_id", "record_id_2", "record_id_3"];

/// One key column's value, borrowed, as it is bound to a statement. `Debug` shows it as the
/// model's key shows itself (`7`, `"url"`).
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyPart<'a> {
    SmallInt(i16),
    Integer(i32),
    BigInt(i64),
    UnsignedInteger(u32),
    UnsignedBigInt(u64),
    Text(&'a str),
    /// The UUID's 16 bytes, big-endian (as `uuid::Uuid::as_bytes`).
    Uuid([u8; 16]),
    #[cfg(feature = "chrono")]
    Date(chrono::NaiveDate),
}

impl KeyPart<'_> {
    /// The value, owned.
    pub fn to_raw(self) -> RawPart {
        match self {
            KeyPart::SmallInt(v) => RawPart::SmallInt(v),
            KeyPart::Integer(v) => RawPart::Integer(v),
            KeyPart::BigInt(v) => RawPart::BigInt(v),
            KeyPart::UnsignedInteger(v) => RawPart::UnsignedInteger(v),
            KeyPart::UnsignedBigInt(v) => RawPart::UnsignedBigInt(v),
            KeyPart::Text(v) => RawPart::Text(v.to_owned()),
            KeyPart::Uuid(v) => RawPart::Uuid(v),
            #[cfg(feature = "chrono")]
            KeyPart::Date(v) => RawPart::Date(v),
        }
    }

    /// Its kind.
    pub fn kind(self) -> KeyKind {
        match self {
            KeyPart::SmallInt(_) => KeyKind::SmallInt,
            KeyPart::Integer(_) => KeyKind::Integer,
            KeyPart::BigInt(_) => KeyKind::BigInt,
            KeyPart::UnsignedInteger(_) => KeyKind::UnsignedInteger,
            KeyPart::UnsignedBigInt(_) => KeyKind::UnsignedBigInt,
            KeyPart::Text(_) => KeyKind::Text,
            KeyPart::Uuid(_) => KeyKind::Uuid,
            #[cfg(feature = "chrono")]
            KeyPart::Date(_) => KeyKind::Date,
        }
    }
}

/// A key, borrowed, as it is bound to a statement: one value per key column (one, or two or
/// three for a composite key). `Debug` shows it as the model's key shows itself (`7`, `"url"`,
/// `(7, "url")`): errors and reports name keys this way.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyValue<'a> {
    len: u8,
    // Unused places hold `SmallInt(0)`, so the derived comparisons see the parts alone.
    parts: [KeyPart<'a>; MAX_KEY_COLUMNS],
}

impl<'a> KeyValue<'a> {
    /// A one-column key.
    pub const fn one(part: KeyPart<'a>) -> Self {
        KeyValue {
            len: 1,
            parts: [part, KeyPart::SmallInt(0), KeyPart::SmallInt(0)],
        }
    }

    /// A composite key of these columns' values, in order (2 to [`MAX_KEY_COLUMNS`]).
    pub fn composite(parts: &[KeyPart<'a>]) -> Self {
        assert!(
            (1..=MAX_KEY_COLUMNS).contains(&parts.len()),
            "a key has 1 to {MAX_KEY_COLUMNS} columns"
        );
        let mut value = KeyValue::one(parts[0]);
        value.parts[..parts.len()].copy_from_slice(parts);
        value.len = parts.len() as u8;
        value
    }

    /// The value of each key column, in order.
    pub fn parts(&self) -> &[KeyPart<'a>] {
        &self.parts[..usize::from(self.len)]
    }

    /// The value of a one-column key; `None` for a composite one.
    pub fn single(&self) -> Option<KeyPart<'a>> {
        match self.parts() {
            [part] => Some(*part),
            _ => None,
        }
    }

    /// The key, owned.
    pub fn to_raw(&self) -> RawKey {
        RawKey {
            first: self.parts[0].to_raw(),
            rest: self.parts()[1..].iter().map(|p| p.to_raw()).collect(),
        }
    }

    /// The same key as the shared table's `BIGINT` keeps it, when it fits there.
    pub(crate) fn widened(&self) -> Option<i64> {
        match self.single()? {
            KeyPart::SmallInt(v) => Some(i64::from(v)),
            KeyPart::Integer(v) => Some(i64::from(v)),
            KeyPart::BigInt(v) => Some(v),
            KeyPart::UnsignedInteger(v) => Some(i64::from(v)),
            _ => None,
        }
    }
}

/// One key column's value, owned, as it comes back from a query. `Debug` as [`KeyPart`]'s.
#[doc(hidden)]
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RawPart {
    SmallInt(i16),
    Integer(i32),
    BigInt(i64),
    UnsignedInteger(u32),
    UnsignedBigInt(u64),
    Text(String),
    Uuid([u8; 16]),
    #[cfg(feature = "chrono")]
    Date(chrono::NaiveDate),
}

impl RawPart {
    /// The value, borrowed, to bind again.
    pub fn as_value(&self) -> KeyPart<'_> {
        match self {
            RawPart::SmallInt(v) => KeyPart::SmallInt(*v),
            RawPart::Integer(v) => KeyPart::Integer(*v),
            RawPart::BigInt(v) => KeyPart::BigInt(*v),
            RawPart::UnsignedInteger(v) => KeyPart::UnsignedInteger(*v),
            RawPart::UnsignedBigInt(v) => KeyPart::UnsignedBigInt(*v),
            RawPart::Text(v) => KeyPart::Text(v),
            RawPart::Uuid(v) => KeyPart::Uuid(*v),
            #[cfg(feature = "chrono")]
            RawPart::Date(v) => KeyPart::Date(*v),
        }
    }

    /// The value as a column of `kind` holds it: an integer read back at another width (SQLite
    /// sends every integer as a 64-bit one) at the key's own, when it fits; anything else as it
    /// is.
    fn conformed(self, kind: KeyKind) -> RawPart {
        // SQLite keeps a `DATE` as text.
        #[cfg(feature = "chrono")]
        if let (KeyKind::Date, RawPart::Text(text)) = (kind, &self) {
            return match chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
                Ok(date) => RawPart::Date(date),
                Err(_) => self,
            };
        }
        let Some(v) = self.integer() else {
            return self;
        };
        let conformed = match kind {
            KeyKind::SmallInt => i16::try_from(v).ok().map(RawPart::SmallInt),
            KeyKind::Integer => i32::try_from(v).ok().map(RawPart::Integer),
            KeyKind::BigInt => i64::try_from(v).ok().map(RawPart::BigInt),
            KeyKind::UnsignedInteger => u32::try_from(v).ok().map(RawPart::UnsignedInteger),
            KeyKind::UnsignedBigInt => u64::try_from(v).ok().map(RawPart::UnsignedBigInt),
            KeyKind::Text | KeyKind::Uuid | KeyKind::Date => None,
        };
        conformed.unwrap_or(self)
    }

    /// An integer value, whatever width it was read back at (the shared table keeps every key
    /// as `BIGINT`, SQLite every integer as a 64-bit one).
    fn integer(&self) -> Option<i128> {
        match *self {
            RawPart::SmallInt(v) => Some(v.into()),
            RawPart::Integer(v) => Some(v.into()),
            RawPart::BigInt(v) => Some(v.into()),
            RawPart::UnsignedInteger(v) => Some(v.into()),
            RawPart::UnsignedBigInt(v) => Some(v.into()),
            _ => None,
        }
    }
}

/// A key, owned, as it comes back from a `GROUP BY` query: one value per key column. `Debug`
/// as [`KeyValue`]'s.
#[doc(hidden)]
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RawKey {
    first: RawPart,
    // Empty (no allocation) for a one-column key.
    rest: Box<[RawPart]>,
}

impl RawKey {
    /// A one-column key.
    pub fn one(part: RawPart) -> Self {
        RawKey {
            first: part,
            rest: Box::default(),
        }
    }

    /// A key of these columns' values, in order; `None` for no value.
    pub fn from_parts(parts: Vec<RawPart>) -> Option<Self> {
        let mut parts = parts.into_iter();
        Some(RawKey {
            first: parts.next()?,
            rest: parts.collect(),
        })
    }

    /// The value of a one-column key; `None` for a composite one.
    pub fn into_single(self) -> Option<RawPart> {
        self.rest.is_empty().then_some(self.first)
    }

    /// The values of each column, in order.
    pub fn into_parts(self) -> impl Iterator<Item = RawPart> {
        std::iter::once(self.first).chain(self.rest.into_vec())
    }

    /// The key as columns of `kinds` hold it (see `RawPart::conformed`): equal to the
    /// `to_raw()` of the same key bound as `kinds`, whatever width the server sent.
    pub(crate) fn conform(&mut self, kinds: &[KeyKind]) {
        let mut kinds = kinds.iter();
        for part in std::iter::once(&mut self.first).chain(self.rest.iter_mut()) {
            if let Some(&kind) = kinds.next() {
                *part = std::mem::replace(part, RawPart::SmallInt(0)).conformed(kind);
            }
        }
    }

    /// The key, borrowed, to bind again.
    pub fn as_value(&self) -> KeyValue<'_> {
        let mut value = KeyValue::one(self.first.as_value());
        for (place, part) in value.parts[1..].iter_mut().zip(self.rest.iter()) {
            *place = part.as_value();
        }
        value.len = 1 + self.rest.len().min(MAX_KEY_COLUMNS - 1) as u8;
        value
    }
}

impl Debug for KeyPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPart::SmallInt(v) => Debug::fmt(v, f),
            KeyPart::Integer(v) => Debug::fmt(v, f),
            KeyPart::BigInt(v) => Debug::fmt(v, f),
            KeyPart::UnsignedInteger(v) => Debug::fmt(v, f),
            KeyPart::UnsignedBigInt(v) => Debug::fmt(v, f),
            KeyPart::Text(v) => Debug::fmt(v, f),
            KeyPart::Uuid(bytes) => {
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
            #[cfg(feature = "chrono")]
            KeyPart::Date(v) => Debug::fmt(v, f),
        }
    }
}

impl Debug for KeyValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.parts() {
            [one] => Debug::fmt(one, f),
            parts => {
                // As a tuple shows itself.
                let mut tuple = f.debug_tuple("");
                for part in parts {
                    tuple.field(part);
                }
                tuple.finish()
            }
        }
    }
}

impl Debug for RawPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Debug::fmt(&self.as_value(), f)
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
    note = "slotted counters are keyed by a `SmallInt`, `Integer`, `BigInt`, `Text` (or `VarChar`), `Unsigned<Integer>`, `Unsigned<BigInt>` (MySQL), `Uuid` (PostgreSQL, the `uuid` feature) or `Date` (the `chrono` feature) column"
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
#[cfg(feature = "chrono")]
impl KeySqlType for diesel::sql_types::Date {}

pub(crate) mod sealed {
    /// Implemented by slotted-core for its key types and tuples of them, and by
    /// `#[derive(SlottedKey)]` for a newtype over one of them: every key is one or more of the
    /// canonical [`super::KeyKind`]s.
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
    #[cfg(feature = "chrono")]
    impl Sealed for chrono::NaiveDate {}
    impl<A: super::CounterKey, B: super::CounterKey> Sealed for (A, B) {}
    impl<A: super::CounterKey, B: super::CounterKey, C: super::CounterKey> Sealed for (A, B, C) {}
}

/// A type a counter can be keyed by: the model's primary key type.
///
/// `i16`, `i32`, `i64`, `u32` and `u64` (MySQL's `UNSIGNED` columns, the `mysql` feature), `String`,
/// with the `uuid` feature `uuid::Uuid` (PostgreSQL), and with the `chrono` feature
/// `chrono::NaiveDate` (`Date`, every backend). `SqlType` is the Diesel SQL type of the key's
/// column; the counter table's `record_id` gets the same one on each backend, so
/// `diesel print-schema` writes what the derive declares.
///
/// A newtype over one of them keys a counter too: `#[derive(SlottedKey)]` on it implements this
/// trait by its inner key (see [`SlottedKey`](crate::SlottedKey)). A tuple of two or three of
/// them keys a counter by a composite primary key (`#[diesel(primary_key(a, b))]`), one
/// counter-table column each (`record_id`, `record_id_2`, `record_id_3`).
///
/// Sealed otherwise: each key maps to one column type per backend, which is what makes the
/// generated migration and `diesel print-schema` agree.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a slotted counter",
    label = "the model's primary key type",
    note = "slotted counters are keyed by `i16`, `i32`, `i64`, `u32`, `u64` (MySQL), `String`, `uuid::Uuid` (PostgreSQL, slotted-core's `uuid` feature) or `chrono::NaiveDate` (the `chrono` feature), or a composite primary key of two or three of them",
    note = "a newtype over one of them keys a counter with `#[derive(slotted_core::SlottedKey)]` on it, e.g. `#[derive(DieselNewType, SlottedKey)] struct PostId(i32);`"
)]
#[cfg_attr(
    not(feature = "uuid"),
    diagnostic::on_unimplemented(
        note = "`uuid::Uuid` keys a counter with slotted-core's `uuid` feature, which is off: `slotted-core = {{ …, features = [\"uuid\"] }}`"
    )
)]
#[cfg_attr(
    not(feature = "chrono"),
    diagnostic::on_unimplemented(
        note = "`chrono::NaiveDate` keys a counter with slotted-core's `chrono` feature, which is off: `slotted-core = {{ …, features = [\"chrono\"] }}`"
    )
)]
pub trait CounterKey: sealed::Sealed + Clone + Eq + Hash + Debug + Send + Sync + 'static {
    /// The SQL type of the key's column (a tuple of them for a composite key).
    type SqlType: KeySqlType;
    /// How the runtime binds it: one kind per key column.
    const KINDS: &'static [KeyKind];
    #[doc(hidden)]
    fn key_value(&self) -> KeyValue<'_>;
    #[doc(hidden)]
    fn from_raw(raw: RawKey) -> Option<Self>;
}

/// The built-in keys: an integer of any width comes back narrowed when it fits (the shared
/// table keeps every integer key as `BIGINT`, SQLite every integer as a 64-bit one).
macro_rules! integer_key {
    ($($ty:ty => $kind:ident, $sql:ty;)*) => {$(
        impl CounterKey for $ty {
            type SqlType = $sql;
            const KINDS: &'static [KeyKind] = &[KeyKind::$kind];
            fn key_value(&self) -> KeyValue<'_> {
                KeyValue::one(KeyPart::$kind(*self))
            }
            fn from_raw(raw: RawKey) -> Option<Self> {
                raw.into_single()?.integer().and_then(|v| <$ty>::try_from(v).ok())
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
    const KINDS: &'static [KeyKind] = &[KeyKind::Text];
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::one(KeyPart::Text(self))
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw.into_single()? {
            RawPart::Text(v) => Some(v),
            _ => None,
        }
    }
}

#[cfg(feature = "uuid")]
impl CounterKey for uuid::Uuid {
    type SqlType = diesel::sql_types::Uuid;
    const KINDS: &'static [KeyKind] = &[KeyKind::Uuid];
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::one(KeyPart::Uuid(*self.as_bytes()))
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw.into_single()? {
            RawPart::Uuid(v) => Some(uuid::Uuid::from_bytes(v)),
            _ => None,
        }
    }
}

#[cfg(feature = "chrono")]
impl CounterKey for chrono::NaiveDate {
    type SqlType = diesel::sql_types::Date;
    const KINDS: &'static [KeyKind] = &[KeyKind::Date];
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::one(KeyPart::Date(*self))
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw.into_single()? {
            RawPart::Date(v) => Some(v),
            _ => None,
        }
    }
}

/// The one kind of a composite key's column: each column of a composite key is a one-column
/// key (a tuple of tuples fails here, when the counter's `SPEC` is evaluated).
const fn column_kind(kinds: &'static [KeyKind]) -> KeyKind {
    assert!(
        kinds.len() == 1,
        "each column of a composite key is a one-column key (an integer, `String`, `uuid::Uuid` or a newtype over one), not a tuple"
    );
    kinds[0]
}

/// One column's value of a composite key.
fn column_value<K: CounterKey>(key: &K) -> KeyPart<'_> {
    let value = key.key_value();
    debug_assert_eq!(value.parts().len(), 1, "checked by `column_kind`");
    value.parts()[0]
}

/// Composite keys: a tuple of one-column keys, one counter-table column each.
macro_rules! composite_key {
    ($($name:ident: $index:tt),+) => {
        impl<$($name: KeySqlType),+> KeySqlType for ($($name,)+) {}

        impl<$($name: CounterKey),+> CounterKey for ($($name,)+) {
            type SqlType = ($($name::SqlType,)+);
            const KINDS: &'static [KeyKind] = &[$(column_kind($name::KINDS)),+];
            fn key_value(&self) -> KeyValue<'_> {
                KeyValue::composite(&[$(column_value(&self.$index)),+])
            }
            fn from_raw(raw: RawKey) -> Option<Self> {
                let mut parts = raw.into_parts();
                let key = ($($name::from_raw(RawKey::one(parts.next()?))?,)+);
                parts.next().is_none().then_some(key)
            }
        }
    };
}

composite_key!(A: 0, B: 1);
composite_key!(A: 0, B: 1, C: 2);

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
    (load) #[cfg(feature = "chrono")]
    chrono::NaiveDate => diesel::sql_types::Date;
}

/// What the derive's expansion checks a key with.
#[doc(hidden)]
pub mod check {
    use super::CounterKey;

    // Each check is a `const fn` the derive's expansion evaluates in a constant of the user's
    // crate, `if !check::<T>() { panic!("…") }`, so that the error is the message alone, at the
    // user's attribute or field (a panic in here would add a note pointing into slotted-core).
    // Through `T`, so that a key type that keys nothing is reported once, at `CounterTable::Key`,
    // and not by these too.

    /// Whether column `index` of the key of counter `T` is of `kind`: the derive declares the
    /// counter table's column of a key field called `Uuid` (`NaiveDate`) as `Uuid` (`Date`),
    /// by that name, and a type of the user's may be called so too.
    pub const fn keys_kind<T: crate::CounterTable>(index: usize, kind: super::KeyKind) -> bool {
        let kinds = <T::Key as CounterKey>::KINDS;
        index < kinds.len() && kinds[index] as u8 == kind as u8
    }

    /// Whether the key of counter `T` is a text key, or a composite key with a text column:
    /// `max_key_length` sizes MySQL's `VARCHAR` column of a `String` key, or of a newtype over
    /// one.
    pub const fn has_text_column<T: crate::CounterTable>() -> bool {
        let kinds = <T::Key as CounterKey>::KINDS;
        let mut i = 0;
        while i < kinds.len() {
            if matches!(kinds[i], super::KeyKind::Text) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Whether the key of counter `T` has `columns` columns, as many as the model's primary
    /// key names: a field's type that keys several columns (a tuple) is not a one-column key.
    pub const fn has_columns<T: crate::CounterTable>(columns: usize) -> bool {
        <T::Key as CounterKey>::KINDS.len() == columns
    }

    /// Whether the key of counter `T` fits the shared table's `BIGINT` `record_id`.
    pub const fn fits_shared<T: crate::CounterTable>() -> bool {
        let kinds = <T::Key as CounterKey>::KINDS;
        kinds.len() == 1 && kinds[0].fits_big_int()
    }
}
