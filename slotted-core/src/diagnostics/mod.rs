//! Contention diagnostics for operators: what the counter tables hold, who waits on them right
//! now, and what to change. The public entry is [`diagnose`], whose documentation says how.

mod report;
mod run;
mod sql;

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::connection::LoadConnection;

use crate::backend::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::table::{CounterSpec, Storage, MAX_SLOTS};
use run::Bind;

pub use run::DiagnosticsBackend;

/// How [`diagnose_with`] looks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiagnoseOptions {
    /// How many of the records with the most rows to list per counter. Default 5.
    pub hottest: usize,
    /// How many times to look for lock waits (at least once). Default 1.
    pub samples: u32,
    /// The pause between two samples. Default 200 ms.
    pub interval: Duration,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        DiagnoseOptions {
            hottest: 5,
            samples: 1,
            interval: Duration::from_millis(200),
        }
    }
}

impl DiagnoseOptions {
    /// Lists the `n` records with the most rows per counter.
    pub fn hottest(mut self, n: usize) -> Self {
        self.hottest = n;
        self
    }

    /// Looks for lock waits `samples` times, `interval` apart; the report keeps every wait seen.
    pub fn samples(mut self, samples: u32, interval: Duration) -> Self {
        self.samples = samples.max(1);
        self.interval = interval;
        self
    }
}

/// What [`diagnose`] found, per counter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContentionReport {
    /// The backend's dialect.
    pub dialect: Dialect,
    /// How many times lock waits were looked for.
    pub samples: u32,
    /// One entry per counter asked about, in order.
    pub tables: Vec<TableReport>,
}

/// One counter's table, as [`diagnose`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableReport {
    /// The counter.
    pub spec: CounterSpec,
    /// Slot rows (of this counter only, in the shared table).
    pub rows: u64,
    /// Records with at least one row.
    pub records: u64,
    /// Records × buckets with at least one row: what a fully compacted table holds at most.
    pub groups: u64,
    /// The most rows one record (in one bucket) has: what its read sums.
    pub max_rows_per_group: u64,
    /// Rows a compaction would remove: every row but one per record and bucket, and every row
    /// of a record (bucket) whose count is 0.
    pub compactable_rows: u64,
    /// The records with the most rows, most first.
    pub hottest: Vec<HotRecord>,
    /// The lock waits on this table.
    pub lock_waits: LockWaits,
    /// What to change, in words.
    pub advice: Vec<Advice>,
}

/// A record of a counter, with how spread it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HotRecord {
    /// The record's key, as text.
    pub key: String,
    /// Its slot rows (over all its buckets).
    pub rows: u64,
    /// The distinct slots it has rows in.
    pub slots_in_use: u64,
    /// The buckets it has rows in (1 for a counter without buckets).
    pub buckets: u64,
}

/// The lock waits on a counter table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockWaits {
    /// The backend cannot show any: SQLite has no row locks (one writer for the whole database,
    /// the others wait on the busy timeout, invisibly).
    NotPossible,
    /// The backend could not say: the query failed (e.g. MariaDB's `information_schema` lock
    /// tables need the `PROCESS` privilege; MySQL 8 no longer has them).
    Unavailable {
        /// The database's message.
        reason: String,
    },
    /// The waits seen (empty: none).
    Seen(Vec<LockWait>),
}

impl LockWaits {
    /// The waits seen; none when the backend could not show them.
    pub fn waits(&self) -> &[LockWait] {
        match self {
            LockWaits::Seen(waits) => waits,
            _ => &[],
        }
    }
}

/// A session (PostgreSQL backend pid, MySQL connection id) waiting for a lock on a counter
/// table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockWait {
    /// The waiting session.
    pub waiter: i64,
    /// The sessions it waits for.
    pub blockers: Vec<i64>,
    /// The record whose row it waits for, as text, when the database says which row.
    pub record: Option<String>,
    /// The slot of that row.
    pub slot: Option<i16>,
    /// Its bucket, for a counter with buckets.
    pub bucket: Option<i64>,
    /// How long it has waited, in milliseconds: on PostgreSQL since its statement began.
    pub waited_ms: Option<i64>,
    /// What kind of lock (PostgreSQL's wait event, InnoDB's lock mode).
    pub lock: String,
    /// The waiting statement, cut to 200 characters (empty when the database hides it).
    pub query: String,
}

/// Advice from a [`TableReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advice {
    /// Writers wait for a row of this record: more slots would spread them.
    RaiseSlots {
        /// The record, or `None` when the waits are on rows the database did not name.
        record: Option<String>,
        /// How many writers wait.
        waiting: usize,
        /// The slot count now.
        slots: u16,
        /// A slot count to try (double, at most [`MAX_SLOTS`]).
        suggested: u16,
    },
    /// Compaction would remove at least half of the table's rows.
    Compact {
        /// The rows it would remove.
        rows_removed: u64,
        /// The rows now.
        rows: u64,
    },
    /// Reads of a record sum many rows, and no writer waited while the diagnostics looked.
    LowerSlots {
        /// The most rows one read sums.
        rows_per_read: u64,
        /// The slot count now.
        slots: u16,
        /// A slot count to try (half).
        suggested: u16,
    },
}

/// Reports on the tables of these counters, with the default [`DiagnoseOptions`]: the 5 records
/// with the most rows, one look at the lock waits.
///
/// It reads, per counter, the rows and records of its table, the records with the
/// most rows (the slots each has in use), the rows a compaction would remove, and the lock
/// waits on the table at this moment (PostgreSQL: `pg_locks` with `pg_stat_activity`;
/// MySQL/MariaDB: `information_schema.INNODB_LOCK_WAITS`; SQLite has none to show: it lets one
/// writer in at a time for the whole database). From these it gives advice in words. The report
/// prints readably with `Display`.
///
/// ```
/// # use diesel::prelude::*;
/// # use diesel_migrations::MigrationHarness;
/// # use slotted_core::{CounterMigrations, SlottedCounter, SlottedModel};
/// # diesel::table! { posts { id -> Integer, } }
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # pub struct Post { pub id: i32 }
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # conn.run_pending_migrations(CounterMigrations::of::<Post>())?;
/// Post::likes_of(1).add(3, &mut conn)?;
/// let report = slotted_core::diagnose(Post::COUNTERS, &mut conn)?;
/// assert_eq!(report.tables[0].rows, 1);
/// println!("{report}");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
///
/// Run it on a connection of its own, outside a transaction: its reads are plain `SELECT`s
/// (under `SERIALIZABLE` on InnoDB they would take shared locks themselves). The lock waits
/// are a snapshot; [`DiagnoseOptions::samples`] takes several, and the advice is only as good as
/// the moment it was taken: run it at peak load.
///
/// Generic code over [`CounterConnection`](crate::CounterConnection) adds the bound
/// `C::Backend: DiagnosticsBackend`, which every backend slotted supports has.
pub fn diagnose<C>(specs: &[CounterSpec], conn: &mut C) -> Result<ContentionReport>
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    diagnose_with(specs, &DiagnoseOptions::default(), conn)
}

/// Reports on the tables of these counters (e.g. `Post::COUNTERS`, or
/// `CounterMigrations::specs()`). Fails with [`Error::Database`], naming the counter, when a
/// table cannot be read; lock waits the backend cannot show are [`LockWaits::Unavailable`].
pub fn diagnose_with<C>(
    specs: &[CounterSpec],
    options: &DiagnoseOptions,
    conn: &mut C,
) -> Result<ContentionReport>
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    let dialect = <C::Backend as CounterBackend>::DIALECT;
    let mut tables = Vec::with_capacity(specs.len());
    for spec in specs {
        tables.push(table_stats(spec, options.hottest, conn)?);
    }
    // SQLite has no lock waits to look for: one look says so.
    let samples = match dialect {
        Dialect::Sqlite => 1,
        _ => options.samples.max(1),
    };
    for sample in 0..samples {
        if sample > 0 {
            std::thread::sleep(options.interval);
        }
        for table in &mut tables {
            let seen = lock_waits(&table.spec, conn);
            let before = std::mem::replace(&mut table.lock_waits, LockWaits::NotPossible);
            table.lock_waits = merge(before, seen);
        }
    }
    for table in &mut tables {
        table.advice = advise(table);
    }
    Ok(ContentionReport {
        dialect,
        samples,
        tables,
    })
}

fn database_error(spec: &CounterSpec, source: diesel::result::Error) -> Error {
    Error::Database {
        counter: spec.qualified_name(),
        table: spec.table,
        source,
    }
}

fn record_type_binds(spec: &CounterSpec) -> Vec<Bind<'static>> {
    match spec.storage {
        Storage::Shared { record_type } => vec![Bind::Text(record_type)],
        Storage::Table => Vec::new(),
    }
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn table_stats<C>(spec: &CounterSpec, hottest: usize, conn: &mut C) -> Result<TableReport>
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    let dialect = <C::Backend as CounterBackend>::DIALECT;
    let stats = sql::stats(dialect, spec);
    let binds = if stats.binds_record_type {
        record_type_binds(spec)
    } else {
        Vec::new()
    };
    let row = <C::Backend as DiagnosticsBackend>::load_stats(conn, &stats.text, &binds)
        .map_err(|e| database_error(spec, e))?
        .into_iter()
        .next()
        .ok_or_else(|| database_error(spec, diesel::result::Error::NotFound))?;

    let hot = sql::hottest(dialect, spec);
    let mut binds = if hot.binds_record_type {
        record_type_binds(spec)
    } else {
        Vec::new()
    };
    binds.push(Bind::BigInt(i64::try_from(hottest).unwrap_or(i64::MAX)));
    let hot_rows = if hottest == 0 {
        Vec::new()
    } else {
        <C::Backend as DiagnosticsBackend>::load_hottest(conn, &hot.text, &binds)
            .map_err(|e| database_error(spec, e))?
    };

    let rows = count(row.n_rows);
    let kept = count(row.n_groups).saturating_sub(count(row.n_zero));
    Ok(TableReport {
        spec: *spec,
        rows,
        records: count(row.n_records),
        groups: count(row.n_groups),
        max_rows_per_group: count(row.max_group_rows),
        compactable_rows: rows.saturating_sub(kept),
        hottest: hot_rows
            .into_iter()
            .map(|r| HotRecord {
                key: r.record,
                rows: count(r.n_rows),
                slots_in_use: count(r.n_slots),
                buckets: count(r.n_buckets),
            })
            .collect(),
        lock_waits: LockWaits::Seen(Vec::new()),
        advice: Vec::new(),
    })
}

/// The waits of two samples together: one entry per waiting session and row, the longest wait.
fn merge(before: LockWaits, now: LockWaits) -> LockWaits {
    match (before, now) {
        (LockWaits::Seen(mut all), LockWaits::Seen(now)) => {
            for wait in now {
                match all.iter_mut().find(|w| {
                    (w.waiter, &w.record, w.slot, w.bucket)
                        == (wait.waiter, &wait.record, wait.slot, wait.bucket)
                }) {
                    Some(w) => {
                        if wait.waited_ms > w.waited_ms {
                            *w = wait;
                        }
                    }
                    None => all.push(wait),
                }
            }
            LockWaits::Seen(all)
        }
        (LockWaits::Seen(_), other) | (other, _) => other,
    }
}

fn lock_waits<C>(spec: &CounterSpec, conn: &mut C) -> LockWaits
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    let result = match <C::Backend as CounterBackend>::DIALECT {
        Dialect::Postgres => postgres_waits(spec, conn),
        Dialect::Mysql => mysql_waits(spec, conn),
        _ => return LockWaits::NotPossible,
    };
    match result {
        Ok(waits) => LockWaits::Seen(waits),
        Err(e) => LockWaits::Unavailable {
            reason: e.to_string(),
        },
    }
}

fn cut(query: &str) -> String {
    let query = query.split_whitespace().collect::<Vec<_>>().join(" ");
    match query.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &query[..i]),
        None => query,
    }
}

fn postgres_waits<C>(spec: &CounterSpec, conn: &mut C) -> diesel::QueryResult<Vec<LockWait>>
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    let sql = sql::postgres_lock_waits(spec);
    let rows =
        <C::Backend as DiagnosticsBackend>::load_pg_waits(conn, &sql, &[Bind::Text(spec.table)])?;
    let mut waits: Vec<LockWait> = Vec::new();
    for row in rows {
        // In the shared table, a row of another counter is that counter's wait.
        if let (Storage::Shared { record_type }, Some(rt)) = (&spec.storage, &row.record_type) {
            if rt != record_type {
                continue;
            }
        }
        if waits.iter().any(|w| i64::from(row.waiter) == w.waiter) {
            continue;
        }
        waits.push(LockWait {
            waiter: i64::from(row.waiter),
            blockers: row
                .blockers
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect(),
            record: row.record,
            slot: row.slot,
            bucket: row.bucket,
            waited_ms: row.waited_ms,
            lock: row.lock_kind,
            query: cut(&row.query),
        });
    }
    Ok(waits)
}

fn mysql_waits<C>(spec: &CounterSpec, conn: &mut C) -> diesel::QueryResult<Vec<LockWait>>
where
    C: LoadConnection<Backend: DiagnosticsBackend>,
{
    let rows = <C::Backend as DiagnosticsBackend>::load_mysql_waits(
        conn,
        sql::mysql_lock_waits(),
        &[Bind::Text(spec.table)],
    )?;
    let mut waits: Vec<LockWait> = Vec::new();
    for row in rows {
        let key = row
            .lock_data
            .as_deref()
            .filter(|_| row.lock_index == "PRIMARY" && !row.lock_mode.contains("GAP"))
            .and_then(|data| primary_key_of(spec, data));
        if let Some(PrimaryKey {
            record_type: Some(rt),
            ..
        }) = &key
        {
            if matches!(spec.storage, Storage::Shared { record_type } if record_type != rt) {
                continue;
            }
        }
        if let Some(wait) = waits.iter_mut().find(|w| w.waiter == row.waiter) {
            if !wait.blockers.contains(&row.blocker) {
                wait.blockers.push(row.blocker);
            }
            continue;
        }
        let (record, slot, bucket) = match key {
            Some(k) => (Some(k.record), k.slot, k.bucket),
            None => (None, None, None),
        };
        waits.push(LockWait {
            waiter: row.waiter,
            blockers: vec![row.blocker],
            record,
            slot,
            bucket,
            waited_ms: row.waited_ms,
            lock: row.lock_mode,
            query: cut(&row.query),
        });
    }
    Ok(waits)
}

/// A counter row's primary key, read back from InnoDB's `lock_data`.
#[derive(Debug, PartialEq, Eq)]
struct PrimaryKey {
    record_type: Option<String>,
    record: String,
    bucket: Option<i64>,
    slot: Option<i16>,
}

/// Parses InnoDB's `lock_data` of a counter table's primary key: its columns in key order,
/// `, `-separated, strings in single quotes (`'posts.likes', 7, 3`). `None` for the pseudo-rows
/// (`supremum pseudo-record`) and anything else.
fn primary_key_of(spec: &CounterSpec, data: &str) -> Option<PrimaryKey> {
    let values = split_lock_data(data)?;
    let mut values = values.into_iter();
    let record_type = match spec.storage {
        Storage::Shared { .. } => Some(values.next()?),
        Storage::Table => None,
    };
    let record = values.next()?;
    let bucket = match spec.bucket {
        Some(_) => Some(values.next()?.parse().ok()?),
        None => None,
    };
    let slot = values.next()?.parse().ok();
    if values.next().is_some() {
        return None;
    }
    Some(PrimaryKey {
        record_type,
        record,
        bucket,
        slot,
    })
}

fn split_lock_data(data: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut chars = data.trim().chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => value.push(chars.next()?),
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        value.push('\'');
                    }
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            let trimmed = value.trim();
            if trimmed.is_empty() || trimmed.contains(' ') {
                return None;
            }
            value = trimmed.to_owned();
        }
        values.push(value);
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.next() {
            None => return Some(values),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

fn advise(table: &TableReport) -> Vec<Advice> {
    let mut advice = Vec::new();
    let slots = table.spec.slots;
    let waits = table.lock_waits.waits();
    let mut by_record: BTreeMap<Option<&String>, usize> = BTreeMap::new();
    for wait in waits {
        *by_record.entry(wait.record.as_ref()).or_default() += 1;
    }
    let mut by_record: Vec<_> = by_record.into_iter().collect();
    by_record.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (record, waiting) in by_record {
        advice.push(Advice::RaiseSlots {
            record: record.cloned(),
            waiting,
            slots,
            suggested: slots.saturating_mul(2).min(MAX_SLOTS),
        });
    }
    if table.compactable_rows > 0 && table.compactable_rows.saturating_mul(2) >= table.rows {
        advice.push(Advice::Compact {
            rows_removed: table.compactable_rows,
            rows: table.rows,
        });
    }
    let seen = matches!(table.lock_waits, LockWaits::Seen(_));
    if seen
        && waits.is_empty()
        && slots > 1
        && table.max_rows_per_group >= 4
        && table.max_rows_per_group * 2 > u64::from(slots)
    {
        advice.push(Advice::LowerSlots {
            rows_per_read: table.max_rows_per_group,
            slots,
            suggested: (slots / 2).max(1),
        });
    }
    advice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyKind;
    use crate::slot::SlotStrategy;

    const SPEC: CounterSpec = CounterSpec {
        model: "Post",
        counter: "likes",
        table: "posts_likes_slots",
        slots: 16,
        strategy: SlotStrategy::Thread,
        key: KeyKind::Integer,
        max_key_length: 255,
        storage: Storage::Table,
        bucket: None,
        prefill: false,
        cache: None,
    };

    #[test]
    fn innodb_lock_data_gives_the_row() {
        let key = primary_key_of(&SPEC, "7, 3").unwrap();
        assert_eq!((key.record.as_str(), key.slot), ("7", Some(3)));
        let text = CounterSpec {
            key: KeyKind::Text,
            ..SPEC
        };
        let key = primary_key_of(&text, "'a, ''b''\\\\', 0").unwrap();
        assert_eq!(key.record, "a, 'b'\\");
        let shared = CounterSpec {
            storage: Storage::Shared {
                record_type: "posts.likes",
            },
            ..SPEC
        };
        let key = primary_key_of(&shared, "'posts.likes', 12, 1").unwrap();
        assert_eq!(key.record_type.as_deref(), Some("posts.likes"));
        assert_eq!((key.record.as_str(), key.slot), ("12", Some(1)));
        assert_eq!(primary_key_of(&SPEC, "supremum pseudo-record"), None);
        assert_eq!(primary_key_of(&SPEC, "1, 2, 3"), None);
    }

    fn table(rows: u64, compactable: u64, max: u64, waits: Vec<LockWait>) -> TableReport {
        TableReport {
            spec: SPEC,
            rows,
            records: 1,
            groups: 1,
            max_rows_per_group: max,
            compactable_rows: compactable,
            hottest: Vec::new(),
            lock_waits: LockWaits::Seen(waits),
            advice: Vec::new(),
        }
    }

    #[test]
    fn advice_follows_waits_rows_and_spread() {
        let wait = |record: &str| LockWait {
            waiter: 1,
            blockers: vec![2],
            record: Some(record.into()),
            slot: Some(0),
            bucket: None,
            waited_ms: Some(5),
            lock: "tuple".into(),
            query: String::new(),
        };
        let advice = advise(&table(16, 15, 16, vec![wait("1"), wait("1"), wait("2")]));
        assert_eq!(
            advice,
            vec![
                Advice::RaiseSlots {
                    record: Some("1".into()),
                    waiting: 2,
                    slots: 16,
                    suggested: 32
                },
                Advice::RaiseSlots {
                    record: Some("2".into()),
                    waiting: 1,
                    slots: 16,
                    suggested: 32
                },
                Advice::Compact {
                    rows_removed: 15,
                    rows: 16
                },
            ]
        );
        assert_eq!(
            advise(&table(16, 0, 16, Vec::new())),
            vec![Advice::LowerSlots {
                rows_per_read: 16,
                slots: 16,
                suggested: 8
            }]
        );
        assert_eq!(advise(&table(4, 1, 2, Vec::new())), Vec::new());
    }
}
