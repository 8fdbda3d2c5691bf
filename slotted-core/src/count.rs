//! Counting: an increment, a total, many totals; written once over [`Exec`], run by either face.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::SystemTime;

use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::exec::{load_keyed, Exec};
use crate::key::{CounterKey, KeyPart, KeyValue, RawKey};
use crate::sql::read::SumOne;
use crate::sql::slot::Returned;
use crate::sql::write::{AddOrTakeIndex, AddToSlot, UpdateSlot};
use crate::sql::{Buckets, ByText, ByType, Scope, SlotValue, Sum};
use crate::table::{CounterSpec, CounterTable};

/// Keys per `GROUP BY` query in [`Counter::totals`](crate::Counter::totals): under every
/// backend's bind limit (SQLite 32,766; PostgreSQL and MySQL 65,535). A power of two, like every
/// padded chunk size, so a connection caches at most 14 statement shapes per counter.
pub const TOTALS_CHUNK: usize = 8192;

/// Keys one statement takes for counter `spec`: [`TOTALS_CHUNK`] for a one-column key, fewer
/// (a power of two) as each key binds more values (a composite key's columns, an adopted
/// column's read beside the slots'): under SQLite's bind limit, and below the few thousand
/// `OR`ed key matches past which SQLite plans a composite key's lookup very slowly (measured:
/// 4,096 of them 13 ms, 8,192 over 13 s).
pub(crate) fn keys_per_statement(spec: &CounterSpec) -> usize {
    let per_key = spec.key.len().max(1) * if spec.adopt.is_some() { 2 } else { 1 };
    let n = (TOTALS_CHUNK / per_key).max(1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Adds `delta` to one slot of `key`'s record (see `Counter::add`).
pub(crate) async fn add<T: CounterTable, E: Exec>(
    exec: &mut E,
    key: &T::Key,
    at: SystemTime,
    delta: i64,
) -> Result<()> {
    if delta == 0 {
        return Ok(());
    }
    let spec = &T::SPEC;
    let statement = AddToSlot {
        spec,
        key: check_key::<E::Backend, _>(spec, key)?,
        bucket: spec.bucket.map_or(0, |width| width.start_of(at)),
        slot: spec.strategy.slot_value(spec.slots, E::Backend::DIALECT),
        delta,
        cache: PhantomData::<ByType<T>>,
    };
    #[cfg(feature = "tracing")]
    match statement.slot {
        SlotValue::Bound(slot) => crate::trace::record!("slot", i64::from(slot)),
        SlotValue::Connection(_) => crate::trace::record!("slot", "server"),
    }
    // Outside a transaction the write commits with its statement: lost with it, its outcome is
    // unknown. Inside one, the transaction is lost with the connection, and nothing of it was
    // committed (`Failure::Reconnect`).
    // Not asked on SQLite, which loses no connection, and whose async wrapper panics when its
    // state is read while a cut-off call still holds the connection on its blocking thread.
    let autocommit = E::Backend::DIALECT != Dialect::Sqlite && !exec.in_transaction();
    let mut retries = 0;
    let outcome = loop {
        let outcome = if spec.prefill {
            match exec.execute(UpdateSlot(statement)).await {
                // No pre-created row (or, on PostgreSQL and SQLite, an overflow; or, on MySQL, no
                // writer index yet): the upsert creates the row, or says which.
                Ok(0) => upsert(exec, statement).await,
                other => other,
            }
        } else {
            upsert(exec, statement).await
        };
        match &outcome {
            // Outside a transaction each statement is its own, and one that lost a deadlock (on
            // InnoDB, to a compaction's locks on the rows after a range; on Galera, a
            // certification conflict) was rolled back whole: nothing of this write is in the
            // database, so it runs again, as `set` and maintenance batches do. Inside the
            // caller's transaction the whole transaction was rolled back: the caller hears of
            // it, and reruns it (`transaction_with_retry`).
            Err(e)
                if autocommit
                    && retries < crate::retry::STANDARD.max_retries
                    && crate::error::is_deadlock(e) =>
            {
                let backoff = crate::retry::STANDARD.backoff(retries);
                #[cfg(feature = "tracing")]
                crate::trace::retrying(e, retries + 1, backoff);
                exec.after_failed_read();
                exec.pause(backoff).await;
                retries += 1;
            }
            _ => break outcome,
        }
    };
    let overflow = || Error::Overflow {
        counter: spec.qualified_name(),
        table: spec.table,
        key: format!("{key:?}"),
        delta,
    };
    // The connection is marked broken: pools discard it instead of handing it out again.
    let mut unknown = |reason: String| {
        exec.mark_broken();
        Err(Error::OutcomeUnknown {
            counter: spec.qualified_name(),
            table: spec.table,
            key: format!("{key:?}"),
            delta,
            reason,
        })
    };
    match outcome {
        // MySQL and MariaDB report 1 (inserted) or 2 (updated) for this upsert, and 1 for the
        // UPDATE of a pre-created row (found rows: Diesel and diesel-async both ask for them);
        // their overflow is error 1690. A 0 is another statement's reply: the connection is out
        // of step with the server, and this write's fate is unknown.
        Ok(0) if E::Backend::DIALECT == Dialect::Mysql => unknown(
            "the server reported 0 rows affected, which it never reports for this upsert, so the \
             reply belongs to another statement (a query cut off earlier on this connection left \
             it out of step)"
                .into(),
        ),
        // PostgreSQL and SQLite: the overflow guard let no row be updated.
        Ok(0) => Err(overflow()),
        Ok(_) => {
            crate::trace::record!("rows", 1_u64);
            Ok(())
        }
        Err(e) if E::Backend::DIALECT == Dialect::Mysql && is_mysql_overflow(&e) => Err(overflow()),
        Err(e) if autocommit && crate::error::is_connection_lost(&e) => unknown(format!(
            "the connection was lost with the write in flight ({e})"
        )),
        Err(source) => Err(database_error(spec, source)),
    }
}

/// Runs the upsert. With the `connection` strategy (`sql::slot`) the upsert only reads the
/// session's writer index. A MySQL session that holds none writes a NULL slot, which the
/// single-row `INSERT` refuses (error 1048, `NotNullViolation`; inside a transaction, only the
/// statement is rolled back): the session takes an index, and the upsert runs again. On
/// PostgreSQL (where an error would abort the caller's transaction) the upsert writes nothing
/// in a session that holds none; nothing written (that, or the overflow guard) is followed by
/// [`AddOrTakeIndex`], which writes to the session's slot or, without an index, to its
/// connection's, and says which: the session then takes an index for its next writes. Behind a
/// transaction pooler those statements may each run on another server session; every one of
/// them writes once or not at all, and a session that ends up holding no index finds out again
/// on its next write.
pub(crate) async fn upsert<E: Exec, K: crate::sql::CacheBy + Sync + Copy>(
    exec: &mut E,
    statement: AddToSlot<'_, K>,
) -> diesel::QueryResult<usize> {
    if statement.needs_index::<E::Backend>() {
        match exec.execute(statement).await? {
            0 => {}
            written => return Ok(written),
        }
        let rows = exec.load::<_, Returned>(AddOrTakeIndex(statement)).await?;
        if rows.first().is_some_and(|row| !row.holds_index()) {
            // The write is done (committed, outside a transaction): a failure to take the index
            // only leaves the next write to try again. Inside a transaction it has aborted the
            // caller's transaction, which must hear of it.
            let in_transaction = exec.in_transaction();
            if let Err(e) = take_writer_index(exec).await {
                if in_transaction {
                    return Err(e);
                }
            }
        }
        return Ok(rows.len());
    }
    match exec.execute(statement).await {
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::NotNullViolation,
            _,
        )) if needs_writer_index::<E>(statement.slot) => {
            take_writer_index(exec).await?;
            exec.execute(statement).await
        }
        other => other,
    }
}

/// Whether a write to `slot` that MySQL refused for its NULL slot read a session's writer index
/// it does not hold yet.
fn needs_writer_index<E: Exec>(slot: crate::sql::SlotValue) -> bool {
    E::Backend::DIALECT == Dialect::Mysql && matches!(slot, crate::sql::SlotValue::Connection(_))
}

/// Makes sure this session holds a writer index (see `sql::slot`). A MySQL session that loses
/// the race for an index to another tries the next; after 16 losses (or with every index
/// taken) it keeps its connection id's slot.
pub(crate) async fn take_writer_index<E: Exec>(exec: &mut E) -> diesel::QueryResult<()> {
    use crate::sql::slot::{TakeWriterIndex, WriterIndex};
    const TRIES: i64 = 16;
    for attempt in 1..=TRIES {
        let fallback = i64::from(attempt == TRIES);
        let rows = exec
            .load::<_, WriterIndex>(TakeWriterIndex { fallback })
            .await?;
        match rows.first() {
            Some(WriterIndex(index)) if *index >= 0 => return Ok(()),
            Some(_) => continue,
            // Never for this one-row SELECT, but an empty reply cannot say the index is taken.
            None => return Err(diesel::result::Error::NotFound),
        }
    }
    Ok(())
}

/// The slot of a multi-row write of this session (a buffer's flush, an absorb): on PostgreSQL
/// and MySQL the session's writer slot, which the statement reads (PostgreSQL's statement takes
/// an index when the session holds none). A MySQL session takes its index first: a multi-row
/// `INSERT` would write a `NULL` slot as 0 (non-strict SQL modes) where a single-row one refuses
/// it. On SQLite, whose one writer waits for no other, `sqlite_slot` of the `slots`.
pub(crate) async fn rows_writer_slot<E: Exec>(
    exec: &mut E,
    slots: u16,
    sqlite_slot: u16,
) -> diesel::QueryResult<SlotValue> {
    match E::Backend::DIALECT {
        Dialect::Sqlite => Ok(SlotValue::Bound((sqlite_slot % slots.max(1)) as i16)),
        Dialect::Postgres => Ok(SlotValue::Connection(slots.clamp(1, crate::MAX_SLOTS))),
        Dialect::Mysql => {
            take_writer_index(exec).await?;
            Ok(SlotValue::Connection(slots.clamp(1, crate::MAX_SLOTS)))
        }
    }
}

/// The sum of `key`'s slots in `buckets`.
pub(crate) async fn sum<T: CounterTable, E: Exec>(
    exec: &mut E,
    key: &T::Key,
    buckets: Buckets,
) -> Result<i64> {
    let spec = &T::SPEC;
    let keys = [check_key::<E::Backend, _>(spec, key)?];
    let scope = Scope {
        spec,
        keys: &keys,
        buckets,
    };
    // The all-time total's text is fixed by the counter: cached by type. A bucket range's
    // text differs from it.
    let rows = match buckets {
        Buckets::All => {
            exec.load::<_, Sum>(SumOne(scope, PhantomData::<ByType<T>>))
                .await
        }
        _ => {
            exec.load::<_, Sum>(SumOne(scope, PhantomData::<ByText>))
                .await
        }
    };
    match rows {
        Ok(rows) => parse_total(spec, key, rows.into_iter().next().and_then(|s| s.0)),
        Err(e) => Err(sum_error::<E::Backend, _>(spec, key, e)),
    }
}

/// The totals of `keys`, every key present (see `Counter::totals`).
pub(crate) async fn totals<T: CounterTable, E: Exec>(
    exec: &mut E,
    keys: &[T::Key],
) -> Result<HashMap<T::Key, i64>> {
    let spec = &T::SPEC;
    let mut totals: HashMap<T::Key, i64> = HashMap::with_capacity(keys.len());
    let mut unique: Vec<KeyValue<'_>> = Vec::with_capacity(keys.len());
    for key in keys {
        if totals.insert(key.clone(), 0).is_none() {
            unique.push(check_key::<E::Backend, _>(spec, key)?);
        }
    }
    for (raw, sum) in sums(exec, spec, &unique).await? {
        let key = T::Key::from_raw(raw).ok_or_else(|| unexpected_key(spec))?;
        let total = parse_total(spec, &key, sum.0)?;
        totals.insert(key, total);
    }
    Ok(totals)
}

/// The sums of `keys` that have rows, one `GROUP BY` per [`TOTALS_CHUNK`] keys.
pub(crate) async fn sums<E: Exec>(
    exec: &mut E,
    spec: &CounterSpec,
    keys: &[KeyValue<'_>],
) -> Result<Vec<(RawKey, Sum)>> {
    let mut sums = Vec::with_capacity(keys.len());
    let per_statement = keys_per_statement(spec);
    let mut padded = Vec::with_capacity(per_statement.min(keys.len()));
    for chunk in keys.chunks(per_statement) {
        // Repeat the last key up to a power of two: `IN` ignores duplicates, and the
        // statement text then takes few shapes, so it stays in the statement cache.
        padded.clear();
        padded.extend_from_slice(chunk);
        padded.resize(chunk.len().next_power_of_two(), chunk[chunk.len() - 1]);
        let statement = crate::sql::read::SumMany(Scope::new(spec, &padded));
        let rows = load_keyed(exec, statement, spec.key_column_kinds())
            .await
            .map_err(|e| sum_error::<E::Backend, _>(spec, "(one of the keys)", e))?;
        sums.extend(rows);
    }
    Ok(sums)
}

/// Refuses a key the backend would store inexactly, before anything is sent.
pub(crate) fn check_key<'k, DB: CounterBackend, K: CounterKey>(
    spec: &CounterSpec,
    key: &'k K,
) -> Result<KeyValue<'k>> {
    check_key_in(DB::DIALECT, spec, key)
}

/// [`check_key`] for a dialect known at run time (a buffer's).
pub(crate) fn check_key_in<'k, K: CounterKey>(
    dialect: Dialect,
    spec: &CounterSpec,
    key: &'k K,
) -> Result<KeyValue<'k>> {
    let value = key.key_value();
    // The shared table keeps every key as BIGINT (the derive lets only keys that fit it in).
    let value = match (spec.storage, value.widened()) {
        (crate::Storage::Shared { .. }, Some(wide)) => KeyValue::one(KeyPart::BigInt(wide)),
        _ => value,
    };
    let reason = value.parts().iter().find_map(|part| match part {
        KeyPart::Text(text) => text_problem(dialect, spec, text),
        _ => None,
    });
    let Some(reason) = reason else {
        return Ok(value);
    };
    let mut shown = format!("{value:?}");
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

/// Why the backend would store a text key (or a composite key's text column) inexactly.
fn text_problem(dialect: Dialect, spec: &CounterSpec, text: &str) -> Option<String> {
    let reason = if text.chars().count() > usize::from(spec.max_key_length) {
        format!(
            "it is {} characters long, and the column holds at most {} (raise `max_key_length` in the \
             #[slotted] attribute, up to {})",
            text.chars().count(),
            spec.max_key_length,
            if spec.bucket.is_some() {
                crate::MAX_BUCKETED_KEY_LENGTH
            } else {
                crate::MAX_KEY_LENGTH
            }
        )
    } else if dialect == Dialect::Postgres && text.contains('\0') {
        "PostgreSQL text cannot hold a NUL character".to_owned()
    } else if dialect == Dialect::Mysql && text.ends_with(' ') {
        "MySQL compares VARCHAR keys ignoring trailing spaces (PAD SPACE), so it would share a \
         count with the key without them"
            .to_owned()
    } else {
        return None;
    };
    Some(reason)
}

pub(crate) fn parse_total<K: fmt::Debug + ?Sized>(
    spec: &CounterSpec,
    key: &K,
    sum: Option<String>,
) -> Result<i64> {
    let Some(sum) = sum else { return Ok(0) };
    sum.trim()
        .parse::<i64>()
        .map_err(|_| total_out_of_range(spec, key, sum))
}

pub(crate) fn total_out_of_range<K: fmt::Debug + ?Sized>(
    spec: &CounterSpec,
    key: &K,
    total: String,
) -> Error {
    Error::TotalOutOfRange {
        counter: spec.qualified_name(),
        table: spec.table,
        key: format!("{key:?}"),
        total,
    }
}

/// A failed `SUM`: SQLite's own overflow error becomes `TotalOutOfRange`, the rest `Database`.
pub(crate) fn sum_error<DB: CounterBackend, K: fmt::Debug + ?Sized>(
    spec: &CounterSpec,
    key: &K,
    e: diesel::result::Error,
) -> Error {
    if DB::DIALECT == Dialect::Sqlite && is_sqlite_overflow(&e) {
        total_out_of_range(spec, key, "outside i64 (SQLite: integer overflow)".into())
    } else {
        database_error(spec, e)
    }
}

pub(crate) fn is_sqlite_overflow(e: &diesel::result::Error) -> bool {
    matches!(e, diesel::result::Error::DatabaseError(_, info) if info.message() == "integer overflow")
}

pub(crate) fn database_error(spec: &CounterSpec, source: diesel::result::Error) -> Error {
    if crate::error::is_statement_name_error(&source)
        && crate::pooling::get() == crate::pooling::Pooling::Session
    {
        return Error::TransactionPooler {
            counter: spec.qualified_name(),
            table: spec.table,
            source,
        };
    }
    if crate::error::is_read_only(&source) {
        return Error::ReadOnlyServer {
            counter: spec.qualified_name(),
            table: spec.table,
            source,
        };
    }
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
