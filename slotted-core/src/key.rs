//! Record keys: the types a counter can be keyed by.

use std::fmt::Debug;
use std::hash::Hash;

/// The SQL type of a counter table's `record_id` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// `INTEGER` (`i32`).
    Integer,
    /// `BIGINT` (`i64`).
    BigInt,
    /// `TEXT` on PostgreSQL and SQLite, `VARCHAR(n)` on MySQL (`String`).
    Text,
}

/// A key, borrowed, as it is bound to a statement.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue<'a> {
    Integer(i32),
    BigInt(i64),
    Text(&'a str),
}

impl KeyValue<'_> {
    /// The key, owned.
    pub fn to_raw(self) -> RawKey {
        match self {
            KeyValue::Integer(v) => RawKey::Integer(v),
            KeyValue::BigInt(v) => RawKey::BigInt(v),
            KeyValue::Text(v) => RawKey::Text(v.to_owned()),
        }
    }
}

/// A key, owned, as it comes back from a `GROUP BY` query.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RawKey {
    Integer(i32),
    BigInt(i64),
    Text(String),
}

impl RawKey {
    /// The key, borrowed, to bind again.
    pub fn as_value(&self) -> KeyValue<'_> {
        match self {
            RawKey::Integer(v) => KeyValue::Integer(*v),
            RawKey::BigInt(v) => KeyValue::BigInt(*v),
            RawKey::Text(v) => KeyValue::Text(v),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for String {}
}

/// A type a counter can be keyed by: `i32`, `i64` or `String`, the primary key of the model.
///
/// Sealed: these three map to the same column type on every backend, which is what makes the
/// generated migration and `diesel print-schema` agree.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a slotted counter",
    note = "slotted counters are keyed by `i32`, `i64` or `String`"
)]
pub trait CounterKey:
    sealed::Sealed + Clone + Eq + Ord + Hash + Debug + Send + Sync + 'static
{
    /// The column type.
    const KIND: KeyKind;
    #[doc(hidden)]
    fn key_value(&self) -> KeyValue<'_>;
    #[doc(hidden)]
    fn from_raw(raw: RawKey) -> Option<Self>;
}

impl CounterKey for i32 {
    const KIND: KeyKind = KeyKind::Integer;
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Integer(*self)
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw {
            RawKey::Integer(v) => Some(v),
            // The shared table keeps every key as BIGINT.
            RawKey::BigInt(v) => i32::try_from(v).ok(),
            RawKey::Text(_) => None,
        }
    }
}

impl CounterKey for i64 {
    const KIND: KeyKind = KeyKind::BigInt;
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::BigInt(*self)
    }
    fn from_raw(raw: RawKey) -> Option<Self> {
        match raw {
            RawKey::BigInt(v) => Some(v),
            _ => None,
        }
    }
}

impl CounterKey for String {
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
