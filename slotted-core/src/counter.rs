//! The counter handle: `post.likes()` and `Post::likes_of(key)` return one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::time::SystemTime;

use diesel::RunQueryDsl;

use crate::backend::{
    AddToSlot, Buckets, ByText, ByType, CounterBackend, CounterConnection, Dialect, Scope, SumOne,
    UpdateSlot,
};
use crate::error::{Error, Result};
use crate::key::{CounterKey, KeyValue};
use crate::table::{BucketedCounterTable, CounterSpec, CounterTable};

/// Keys per `GROUP BY` query in [`Counter::totals`]: under every backend's bind limit (SQLite
/// 32,766; PostgreSQL and MySQL 65,535). A power of two, like every padded chunk size, so a
/// connection caches at most 14 statement shapes per counter.
pub const TOTALS_CHUNK: usize = 8192;

/// One record's counter: the handle every counter call goes through.
///
/// Made by the derive's accessors, `post.likes()` (borrowing the model's key) and
/// `Post::likes_of(key)` (owning it), or directly with [`Counter::new`] and [`Counter::of`].
/// `T` is the counter's table type, which the derive declares, so the handle of one counter
/// cannot be used for another, and the key type is checked at compile time.
pub struct Counter<'k, T: CounterTable> {
    key: Cow<'k, T::Key>,
    moment: Option<SystemTime>,
    table: PhantomData<T>,
}

impl<T: CounterTable> fmt::Debug for Counter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("counter", &T::SPEC.qualified_name())
            .field("key", &self.key)
            .field("at", &self.moment)
            .finish()
    }
}

impl<T: CounterTable> Clone for Counter<'_, T> {
    fn clone(&self) -> Self {
        Counter {
            key: self.key.clone(),
            moment: self.moment,
            table: PhantomData,
        }
    }
}

impl<'k, T: CounterTable> Counter<'k, T> {
    /// The counter of the record with this key, borrowing the key.
    pub fn new(key: &'k T::Key) -> Self {
        Counter {
            key: Cow::Borrowed(key),
            moment: None,
            table: PhantomData,
        }
    }

    /// The counter of the record with this key, owning the key.
    pub fn of(key: T::Key) -> Counter<'static, T> {
        Counter {
            key: Cow::Owned(key),
            moment: None,
            table: PhantomData,
        }
    }

    /// The record key.
    pub fn key(&self) -> &T::Key {
        &self.key
    }

    /// Adds 1. See [`Counter::add`].
    pub fn increment<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.add(1, conn)
    }

    /// Subtracts 1. See [`Counter::add`].
    pub fn decrement<C: CounterConnection>(&self, conn: &mut C) -> Result<()> {
        self.add(-1, conn)
    }

    /// Adds `delta` (negative to subtract) to one slot, chosen by the counter's
    /// [`SlotStrategy`](crate::SlotStrategy): one upsert, on `conn`, inside its transaction if
    /// one is open. A counter declared with `prefill` first tries a plain `UPDATE` of the
    /// pre-created slot row, and upserts only when the row is not there. Adding 0 does nothing
    /// and sends nothing. A bucketed counter adds to the bucket of now, or of [`Counter::at`].
    ///
    /// Returns [`Error::Overflow`] and writes nothing when the slot would leave `i64`,
    /// [`Error::InvalidKey`] when the key cannot be stored exactly on this backend, and
    /// [`Error::Database`] for anything the database refuses.
    pub fn add<C: CounterConnection>(&self, delta: i64, conn: &mut C) -> Result<()> {
        if delta == 0 {
            return Ok(());
        }
        let spec = &T::SPEC;
        let key = self.checked_key::<C::Backend>()?;
        let statement = AddToSlot {
            spec,
            key,
            bucket: spec.bucket.map_or(0, |width| width.start_of(self.now())),
            slot: spec.strategy.choose(spec.slots) as i16,
            delta,
            cache: PhantomData::<ByType<T>>,
        };
        let outcome = if spec.prefill {
            match UpdateSlot(statement).execute(conn) {
                // No pre-created row (or, on PostgreSQL and SQLite, an overflow): the upsert
                // creates the row, or says which.
                Ok(0) => statement.execute(conn),
                other => other,
            }
        } else {
            statement.execute(conn)
        };
        match outcome {
            // PostgreSQL and SQLite: the overflow guard let no row be updated.
            Ok(0) => Err(self.overflow(delta)),
            Ok(_) => Ok(()),
            Err(e) if C::Backend::DIALECT == Dialect::Mysql && is_mysql_overflow(&e) => {
                Err(self.overflow(delta))
            }
            Err(source) => Err(database_error(spec, source)),
        }
    }

    /// The count: the sum of the record's slots (of every bucket, for a bucketed counter), 0
    /// when it has none.
    ///
    /// Returns [`Error::TotalOutOfRange`] when the sum does not fit an `i64`.
    pub fn total<C: CounterConnection>(&self, conn: &mut C) -> Result<i64> {
        self.sum(Buckets::All, conn)
    }

    fn sum<C: CounterConnection>(&self, buckets: Buckets, conn: &mut C) -> Result<i64> {
        let spec = &T::SPEC;
        let keys = [self.checked_key::<C::Backend>()?];
        let scope = Scope {
            spec,
            keys: &keys,
            buckets,
        };
        // The all-time total's text is fixed by the counter: cached by type. A bucket range's
        // text differs from it.
        let sum = match buckets {
            Buckets::All => C::Backend::load_sum(conn, SumOne(scope, PhantomData::<ByType<T>>)),
            _ => C::Backend::load_sum(conn, SumOne(scope, PhantomData::<ByText>)),
        };
        match sum {
            Ok(sum) => parse_total(spec, &*self.key, sum),
            Err(e) => Err(sum_error::<C::Backend, _>(spec, &*self.key, e)),
        }
    }

    /// The counts of many records: one `GROUP BY` query per [`TOTALS_CHUNK`] distinct keys.
    /// Every key asked for is in the map, 0 when it has no slot; an empty slice sends nothing.
    pub fn totals<C: CounterConnection>(
        keys: &[T::Key],
        conn: &mut C,
    ) -> Result<HashMap<T::Key, i64>> {
        let spec = &T::SPEC;
        let mut totals: HashMap<T::Key, i64> = HashMap::with_capacity(keys.len());
        let mut unique: Vec<KeyValue<'_>> = Vec::with_capacity(keys.len());
        for key in keys {
            if totals.insert(key.clone(), 0).is_none() {
                unique.push(check_key::<C::Backend, _>(spec, key)?);
            }
        }
        let mut padded = Vec::with_capacity(TOTALS_CHUNK.min(unique.len()));
        for chunk in unique.chunks(TOTALS_CHUNK) {
            // Repeat the last key up to a power of two: `IN` ignores duplicates, and the
            // statement text then takes few shapes, so it stays in the statement cache.
            padded.clear();
            padded.extend_from_slice(chunk);
            padded.resize(chunk.len().next_power_of_two(), chunk[chunk.len() - 1]);
            let rows = C::Backend::load_sums(conn, Scope::new(spec, &padded))
                .map_err(|e| sum_error::<C::Backend, _>(spec, "(one of the keys)", e))?;
            for (raw, sum) in rows {
                let key = T::Key::from_raw(raw).ok_or_else(|| unexpected_key(spec))?;
                let total = parse_total(spec, &key, sum)?;
                totals.insert(key, total);
            }
        }
        Ok(totals)
    }

    pub(crate) fn checked_key<DB: CounterBackend>(&self) -> Result<KeyValue<'_>> {
        check_key::<DB, _>(&T::SPEC, &*self.key)
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.moment.unwrap_or_else(SystemTime::now)
    }

    fn overflow(&self, delta: i64) -> Error {
        let spec = &T::SPEC;
        Error::Overflow {
            counter: spec.qualified_name(),
            table: spec.table,
            key: format!("{:?}", self.key),
            delta,
        }
    }
}

/// Time buckets: for counters declared with `bucket = day` or `bucket = hour`. The bounds are on
/// the methods, not the `impl`, so that calling one on another counter reports
/// `BucketedCounterTable`'s own message instead of "method exists but its trait bounds were not
/// satisfied".
impl<T: CounterTable> Counter<'_, T> {
    /// The same counter at another time: writes go to, and [`Counter::bucket_total`] reads, the
    /// bucket holding `time` instead of the current one. This is the clock, as a parameter.
    pub fn at(mut self, time: SystemTime) -> Self
    where
        T: BucketedCounterTable,
    {
        self.moment = Some(time);
        self
    }

    /// The count of one bucket: the one holding now, or [`Counter::at`].
    pub fn bucket_total<C: CounterConnection>(&self, conn: &mut C) -> Result<i64>
    where
        T: BucketedCounterTable,
    {
        let start = T::SPEC.bucket.map_or(0, |width| width.start_of(self.now()));
        let width = T::SPEC.bucket.map_or(1, |width| width.seconds());
        self.sum(Buckets::Range(start, start.saturating_add(width)), conn)
    }

    /// The count of the buckets from the one holding `range.start` up to, not including, the
    /// one holding `range.end`; for a day counter, `day1..day3` counts two days.
    pub fn total_between<C: CounterConnection>(
        &self,
        range: Range<SystemTime>,
        conn: &mut C,
    ) -> Result<i64>
    where
        T: BucketedCounterTable,
    {
        let (from, to) = match T::SPEC.bucket {
            Some(width) => (width.start_of(range.start), width.start_of(range.end)),
            None => (i64::MIN, i64::MAX),
        };
        self.sum(Buckets::Range(from, to), conn)
    }
}

/// Refuses a key the backend would store inexactly, before anything is sent.
pub(crate) fn check_key<'k, DB: CounterBackend, K: CounterKey>(
    spec: &CounterSpec,
    key: &'k K,
) -> Result<KeyValue<'k>> {
    let value = match (key.key_value(), spec.key_column_kind()) {
        (KeyValue::Integer(v), crate::KeyKind::BigInt) => KeyValue::BigInt(i64::from(v)),
        (value, _) => value,
    };
    let KeyValue::Text(text) = value else {
        return Ok(value);
    };
    let reason = if text.chars().count() > usize::from(spec.max_key_length) {
        format!(
            "it is {} characters long, and the column holds at most {} (raise `max_key_length` in the \
             #[slotted] attribute, up to 767)",
            text.chars().count(),
            spec.max_key_length
        )
    } else if DB::DIALECT == Dialect::Postgres && text.contains('\0') {
        "PostgreSQL text cannot hold a NUL character".to_owned()
    } else if DB::DIALECT == Dialect::Mysql && text.ends_with(' ') {
        "MySQL compares VARCHAR keys ignoring trailing spaces (PAD SPACE), so it would share a \
         count with the key without them"
            .to_owned()
    } else {
        return Ok(value);
    };
    let mut shown = format!("{text:?}");
    if shown.chars().count() > 80 {
        shown = shown.chars().take(77).chain("...".chars()).collect();
    }
    Err(Error::InvalidKey {
        counter: spec.qualified_name(),
        table: spec.table,
        key: shown,
        reason,
    })
}

fn parse_total<K: fmt::Debug + ?Sized>(
    spec: &CounterSpec,
    key: &K,
    sum: Option<String>,
) -> Result<i64> {
    let Some(sum) = sum else { return Ok(0) };
    sum.trim()
        .parse::<i64>()
        .map_err(|_| total_out_of_range(spec, key, sum))
}

fn total_out_of_range<K: fmt::Debug + ?Sized>(spec: &CounterSpec, key: &K, total: String) -> Error {
    Error::TotalOutOfRange {
        counter: spec.qualified_name(),
        table: spec.table,
        key: format!("{key:?}"),
        total,
    }
}

/// A failed `SUM`: SQLite's own overflow error becomes `TotalOutOfRange`, the rest `Database`.
fn sum_error<DB: CounterBackend, K: fmt::Debug + ?Sized>(
    spec: &CounterSpec,
    key: &K,
    e: diesel::result::Error,
) -> Error {
    let sqlite_overflow = DB::DIALECT == Dialect::Sqlite
        && matches!(&e, diesel::result::Error::DatabaseError(_, info) if info.message() == "integer overflow");
    if sqlite_overflow {
        total_out_of_range(spec, key, "outside i64 (SQLite: integer overflow)".into())
    } else {
        database_error(spec, e)
    }
}

pub(crate) fn database_error(spec: &CounterSpec, source: diesel::result::Error) -> Error {
    Error::Database {
        counter: spec.qualified_name(),
        table: spec.table,
        source,
    }
}

pub(crate) fn unexpected_key(spec: &CounterSpec) -> Error {
    database_error(
        spec,
        diesel::result::Error::DeserializationError(
            "the record key came back with another type".into(),
        ),
    )
}

fn is_mysql_overflow(e: &diesel::result::Error) -> bool {
    // Diesel does not expose MySQL's error number; error 1690's text is stable across MySQL
    // and MariaDB: "BIGINT value is out of range in …".
    matches!(e, diesel::result::Error::DatabaseError(_, info) if info.message().contains("BIGINT value is out of range"))
}
