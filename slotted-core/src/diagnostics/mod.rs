//! Contention diagnostics for operators: what the counter tables hold, who waits on them right
//! now, and what to change. The entry is [`diagnose`] (and `diagnose_async`), whose
//! documentation says how.
//
// The statements are in `crate::sql::diagnostics`; the report is one job over `Exec`, run by
// the sync face or awaited by the async one.

mod advice;
mod report;
mod waits;

use std::time::Duration;

use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::sql::diagnostics as sql;
use crate::table::CounterSpec;
use advice::advise;
use waits::{lock_waits, merge, mysql_waits};

/// How [`diagnose_with`] looks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiagnoseOptions {
    /// How many of the records with the most rows to list per counter. Default 5.
    pub hottest: usize,
    /// How many times to look for lock waits (at least once). Default 1.
    pub samples: u32,
    /// The pause between two samples. Default 200 ms. MariaDB refreshes its lock tables only
    /// when nobody has read them for 100 ms: on MySQL/MariaDB the pause is at least 110 ms.
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
    /// The sessions that hold a writer index on this database: the live writers of the
    /// `connection` strategy (docs/guide/strategies.md). `None` on SQLite, which has none, or
    /// when the server could not say.
    pub writers: Option<WriterIndices>,
}

/// The writer indices held on a database (on a Galera cluster, on the node the diagnostics ran
/// on): each live session that has written through the `connection` strategy holds one, and
/// writes to slot `index % slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterIndices {
    /// The sessions holding one.
    pub held: u64,
    /// The largest index held; `None` when none is. Above `held - 1` when a session holding a
    /// smaller one ended since.
    pub highest: Option<u64>,
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
        /// A slot count to try (double, at most [`MAX_SLOTS`](crate::MAX_SLOTS)).
        suggested: u16,
    },
    /// Compaction would remove at least half of the table's rows.
    Compact {
        /// The rows it would remove.
        rows_removed: u64,
        /// The rows now.
        rows: u64,
    },
    /// More sessions hold a writer index than the counter has slots: some of its writers share
    /// a slot (the `connection` strategy).
    MoreWritersThanSlots {
        /// The sessions holding a writer index.
        writers: u64,
        /// The slot count now.
        slots: u16,
        /// A slot count to try (the writers, to the next power of two, at most
        /// [`MAX_SLOTS`](crate::MAX_SLOTS)).
        suggested: u16,
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
/// let report = slotted_core::diagnostics::diagnose(Post::COUNTERS, &mut conn)?;
/// assert_eq!(report.tables[0].rows, 1);
/// println!("{report}");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
///
/// Run it on a connection of its own, outside a transaction: its reads are plain `SELECT`s
/// (under `SERIALIZABLE` on InnoDB they would take shared locks themselves). The lock waits
/// are a snapshot; [`DiagnoseOptions::samples`] takes several, and the advice is only as good as
/// the moment it was taken: run it at peak load. MariaDB refreshes its lock tables
/// (`information_schema.INNODB_*`) only when nobody has read them for 100 ms, so calls (yours
/// or anyone's) less than 100 ms apart keep seeing the waits of the first.
pub fn diagnose<C>(specs: &[CounterSpec], conn: &mut C) -> Result<ContentionReport>
where
    C: crate::CounterConnection,
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
    C: crate::CounterConnection,
{
    crate::exec::sync::run_now(report(
        &mut crate::exec::sync::SyncExec(conn),
        specs,
        options,
    ))
}

/// [`diagnose`] on a diesel-async connection: the same report, the samples' pauses awaited.
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub async fn diagnose_async<C>(specs: &[CounterSpec], conn: &mut C) -> Result<ContentionReport>
where
    C: crate::AsyncCounterConnection,
{
    diagnose_with_async(specs, &DiagnoseOptions::default(), conn).await
}

/// [`diagnose_with`] on a diesel-async connection.
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub async fn diagnose_with_async<C>(
    specs: &[CounterSpec],
    options: &DiagnoseOptions,
    conn: &mut C,
) -> Result<ContentionReport>
where
    C: crate::AsyncCounterConnection,
{
    report(
        &mut crate::exec::asynch::AsyncExec::new(conn),
        specs,
        options,
    )
    .await
}

/// The report, over either face.
async fn report<E: Exec>(
    exec: &mut E,
    specs: &[CounterSpec],
    options: &DiagnoseOptions,
) -> Result<ContentionReport> {
    let dialect = E::Backend::DIALECT;
    let mut tables = Vec::with_capacity(specs.len());
    for spec in specs {
        tables.push(table_stats(spec, options.hottest, exec).await?);
    }
    // SQLite has no lock waits to look for: one look says so.
    let samples = match dialect {
        Dialect::Sqlite => 1,
        _ => options.samples.max(1),
    };
    for sample in 0..samples {
        if sample > 0 {
            let pause = match dialect {
                Dialect::Mysql => options.interval.max(Duration::from_millis(110)),
                _ => options.interval,
            };
            exec.pause(pause).await;
        }
        // MariaDB's lock tables come from a cache it refreshes only when nobody has read it for
        // 100 ms: one read per look, for every table.
        let innodb = match dialect {
            Dialect::Mysql => Some(
                exec.load::<_, sql::MysqlWaitRow>(sql::mysql_lock_waits())
                    .await
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        };
        for table in &mut tables {
            let seen = match &innodb {
                Some(Ok(rows)) => LockWaits::Seen(mysql_waits(&table.spec, rows)),
                Some(Err(reason)) => LockWaits::Unavailable {
                    reason: reason.clone(),
                },
                None => lock_waits(&table.spec, exec).await,
            };
            let before = std::mem::replace(&mut table.lock_waits, LockWaits::NotPossible);
            table.lock_waits = merge(before, seen);
        }
    }
    let writers = match sql::writers(dialect) {
        Some(statement) => exec
            .load::<_, sql::WritersRow>(statement)
            .await
            .ok()
            .and_then(|rows| rows.into_iter().next())
            .map(|row| WriterIndices {
                held: count(row.n),
                highest: u64::try_from(row.highest).ok(),
            }),
        None => None,
    };
    for table in &mut tables {
        table.advice = advise(table, writers.as_ref());
    }
    Ok(ContentionReport {
        dialect,
        samples,
        tables,
        writers,
    })
}

fn database_error(spec: &CounterSpec, source: diesel::result::Error) -> Error {
    Error::Database {
        counter: spec.qualified_name(),
        table: spec.table,
        source,
    }
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

async fn table_stats<E: Exec>(
    spec: &CounterSpec,
    hottest: usize,
    exec: &mut E,
) -> Result<TableReport> {
    let dialect = E::Backend::DIALECT;
    let row = exec
        .load::<_, sql::StatsRow>(sql::stats(dialect, spec))
        .await
        .map_err(|e| database_error(spec, e))?
        .into_iter()
        .next()
        .ok_or_else(|| database_error(spec, diesel::result::Error::NotFound))?;
    let hot_rows = if hottest == 0 {
        Vec::new()
    } else {
        let limit = i64::try_from(hottest).unwrap_or(i64::MAX);
        exec.load::<_, sql::HotRow>(sql::hottest(dialect, spec, limit))
            .await
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
