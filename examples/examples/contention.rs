//! The contention benchmark: slotted against the single-row counter and the private-row ceiling,
//! side by side in one run, through an r2d2 pool, on one backend.
//!
//!     cargo run --release --example contention --features postgres -- --backend postgres
//!     cargo run --release --example contention --features mysql -- --backend mysql
//!     cargo run --release --example contention -- --backend sqlite
//!
//! Options: `--writers 1,8,32,64`, `--seconds 2` (per measurement), `--rounds 3` (each mode
//! runs once per round, in turn; the median round counts), `--hold-ms 2` (the business
//! transaction's other work), `--slots 64` (the slotted modes), `--sweep-writers 32`, `--out
//! docs/bench` (JSON and SVG), `--smoke` (a few seconds in all, for CI). Server URLs come from
//! `PG_DATABASE_URL` and `MYSQL_DATABASE_URL` (a Unix socket URL, such as
//! `postgres:///test?host=/var/run/postgresql` or
//! `mysql://root@localhost/test?unix_socket=/run/mysqld/mysqld.sock`, spares the client and
//! server the TCP loopback); the benchmark works in tables of its own (`bench_*`), which it
//! empties before every measurement.
//!
//! Modes:
//! - `single-row`: `UPDATE bench_single SET count = count + 1 WHERE id = ?`, the naive counter;
//! - `slotted-thread`, `slotted-random`, `slotted-prefill`: the library's `increment`;
//! - `ceiling`: every writer increments a record of its own with one slot: the library's own
//!   upsert with no row shared, the most the database does without contention.
//!
//! Every statement is prepared once per connection, the hand-written ones included (see
//! `HandWritten`), so the modes differ only in which rows they lock.
//!
//! Shapes: `bare` (the increment alone) and `business` (`BEGIN`, insert an event row, increment,
//! hold the transaction open for `--hold-ms`, `COMMIT`). After every measurement the counter's
//! total must equal the increments committed, or the program fails.

use std::fmt::Write as _;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, Integer, SmallInt};
use slotted_core::{Counter, CounterConnection, CounterMaintenance, CounterTable, SlottedCounter};
use slotted_examples::chart::{throughput_chart, Series};
use slotted_examples::BoxError;

diesel::table! { bench_single (id) { id -> Integer, count -> BigInt, } }

/// One model per slot count and strategy: the slot count is a compile-time attribute.
macro_rules! bench_models {
    ($($model:ident, $table:ident, $slots:literal, $strategy:ident $(, $prefill:ident)?;)*) => {
        $(
            #[derive(SlottedCounter)]
            #[diesel(table_name = $table)]
            #[slotted(counter = hits, slots = $slots, strategy = $strategy $(, $prefill)?)]
            pub struct $model {
                pub id: i32,
            }
        )*
    };
}

bench_models! {
    // `ceiling`: one record per writer, one slot each: the library's own upsert, no sharing.
    Private, bench_private, 1, thread;
    T1, bench_t1, 1, thread;
    T2, bench_t2, 2, thread;
    T4, bench_t4, 4, thread;
    T8, bench_t8, 8, thread;
    T16, bench_t16, 16, thread;
    T32, bench_t32, 32, thread;
    T64, bench_t64, 64, thread;
    T128, bench_t128, 128, thread;
    R1, bench_r1, 1, random;
    R2, bench_r2, 2, random;
    R4, bench_r4, 4, random;
    R8, bench_r8, 8, random;
    R16, bench_r16, 16, random;
    R32, bench_r32, 32, random;
    R64, bench_r64, 64, random;
    R128, bench_r128, 128, random;
    P64, bench_p64, 64, thread, prefill;
}

/// A bound value of a [`HandWritten`] statement.
#[derive(Debug, Clone, Copy)]
enum Bind {
    Integer(i32),
    SmallInt(i16),
    BigInt(i64),
}

/// A statement written by hand, `pieces[0] bind[0] pieces[1] bind[1] …`, prepared once per
/// connection and found in Diesel's statement cache by its type `S`, as the library's own
/// increment is. Diesel's query builder never caches an `UPDATE`, an upsert or an insert of
/// `DEFAULT`-able columns (it parses them again on every call); built with it, the comparison
/// modes and the business transaction's event insert would pay a cost the library does not.
#[derive(Debug, Clone, Copy)]
struct HandWritten<'a, S> {
    pieces: &'static [&'static str],
    binds: &'a [Bind],
    statement: PhantomData<S>,
}

/// The hand-written statements: each one's text is fixed on a connection.
enum SingleRow {}
enum Event {}
enum Upsert {}

impl<'a, S> HandWritten<'a, S> {
    fn new(pieces: &'static [&'static str], binds: &'a [Bind]) -> Self {
        HandWritten {
            pieces,
            binds,
            statement: PhantomData,
        }
    }
}

impl<DB, S> QueryFragment<DB> for HandWritten<'_, S>
where
    DB: diesel::backend::Backend,
    i16: ToSql<SmallInt, DB>,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        for (i, piece) in self.pieces.iter().enumerate() {
            out.push_sql(piece);
            if i + 1 == self.pieces.len() {
                break; // binds go between pieces; a dialect may use fewer than given
            }
            match self.binds.get(i) {
                Some(Bind::Integer(v)) => out.push_bind_param::<Integer, _>(v)?,
                Some(Bind::SmallInt(v)) => out.push_bind_param::<SmallInt, _>(v)?,
                Some(Bind::BigInt(v)) => out.push_bind_param::<BigInt, _>(v)?,
                None => {}
            }
        }
        Ok(())
    }
}

impl<S: 'static> QueryId for HandWritten<'_, S> {
    type QueryId = S;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<C, S> RunQueryDsl<C> for HandWritten<'_, S> {}

/// `UPDATE bench_single SET count = count + 1 WHERE id = ?`: the naive counter.
const SINGLE_ROW: &[&str] = &["UPDATE bench_single SET count = count + 1 WHERE id = ", ""];
/// The business transaction's own write.
const EVENT: &[&str] = &["INSERT INTO bench_events (writer) VALUES (", ")"];
/// The library's upsert into `T1`, written by hand: PostgreSQL and SQLite.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const ANSI_UPSERT: &[&str] = &[
    "INSERT INTO bench_t1_hits_slots (record_id, slot, count) VALUES (",
    ", ",
    ", ",
    ") ON CONFLICT (record_id, slot) DO UPDATE SET count = bench_t1_hits_slots.count + excluded.count",
];
/// The same for MySQL and MariaDB.
#[cfg(feature = "mysql")]
const MYSQL_UPSERT: &[&str] = &[
    "INSERT INTO bench_t1_hits_slots (record_id, slot, count) VALUES (",
    ", ",
    ", ",
    ") ON DUPLICATE KEY UPDATE count = count + ",
    "",
];

/// What differs per backend: DDL, the hand-written upsert, and running a hand-written statement.
trait BenchConnection: CounterConnection + R2D2Connection + SimpleConnection + Send + 'static {
    const NAME: &'static str;
    const EVENTS_DDL: &'static str;
    const UPSERT: &'static [&'static str];
    fn run<S: 'static>(&mut self, statement: HandWritten<'_, S>) -> QueryResult<usize>;

    fn single_row(&mut self) -> QueryResult<usize> {
        self.run(HandWritten::<SingleRow>::new(
            SINGLE_ROW,
            &[Bind::Integer(1)],
        ))
    }

    fn event(&mut self, writer: i32) -> QueryResult<usize> {
        self.run(HandWritten::<Event>::new(EVENT, &[Bind::Integer(writer)]))
    }

    /// The library's upsert for `T1`, slot 0, written by hand.
    fn hand_written_upsert(&mut self, key: i32) -> QueryResult<usize> {
        let (slot, delta) = (Bind::SmallInt(0), Bind::BigInt(1));
        let binds = [Bind::Integer(key), slot, delta, delta];
        self.run(HandWritten::<Upsert>::new(Self::UPSERT, &binds))
    }

    fn read_single(&mut self) -> QueryResult<i64>;

    /// The library's upsert for `T1`, slot 0, with Diesel's query builder.
    fn dsl_upsert(&mut self, key: i32) -> QueryResult<usize>;
}

macro_rules! bench_connection {
    ($feature:literal, $conn:ty, $events:literal, $upsert:expr, |$insert:ident| $on_conflict:expr) => {
        #[cfg(feature = $feature)]
        impl BenchConnection for $conn {
            const NAME: &'static str = $feature;
            const EVENTS_DDL: &'static str = $events;
            const UPSERT: &'static [&'static str] = $upsert;

            fn run<S: 'static>(&mut self, statement: HandWritten<'_, S>) -> QueryResult<usize> {
                statement.execute(self)
            }

            fn read_single(&mut self) -> QueryResult<i64> {
                bench_single::table
                    .find(1)
                    .select(bench_single::count)
                    .first(self)
            }

            fn dsl_upsert(&mut self, key: i32) -> QueryResult<usize> {
                use bench_t1_hits_slots as t;
                let $insert = diesel::insert_into(t::table).values((
                    t::record_id.eq(key),
                    t::slot.eq(0_i16),
                    t::count.eq(1_i64),
                ));
                $on_conflict.execute(self)
            }
        }
    };
}

/// PostgreSQL and SQLite: `ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! ansi_on_conflict {
    ($insert:ident) => {
        $insert
            .on_conflict((bench_t1_hits_slots::record_id, bench_t1_hits_slots::slot))
            .do_update()
            .set(
                bench_t1_hits_slots::count.eq(bench_t1_hits_slots::count
                    + diesel::upsert::excluded(bench_t1_hits_slots::count)),
            )
    };
}

bench_connection!(
    "sqlite",
    diesel::SqliteConnection,
    "CREATE TABLE bench_events (id INTEGER PRIMARY KEY AUTOINCREMENT, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "postgres",
    diesel::PgConnection,
    "CREATE TABLE bench_events (id BIGSERIAL PRIMARY KEY, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "mysql",
    diesel::MysqlConnection,
    "CREATE TABLE bench_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, writer INT NOT NULL)",
    MYSQL_UPSERT,
    |insert| insert
        .on_conflict(diesel::dsl::DuplicatedKeys)
        .do_update()
        .set(bench_t1_hits_slots::count.eq(bench_t1_hits_slots::count + 1_i64))
);

/// SQLite through a pool: a busy timeout and WAL on every connection, as README advises.
#[derive(Debug)]
struct SqlitePragmas;

impl<C: SimpleConnection> CustomizeConnection<C, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        conn.batch_execute(
            "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
        )
        .map_err(diesel::r2d2::Error::QueryError)
    }
}

type Op<C> = Box<dyn Fn(&mut C, i32) -> slotted_core::Result<()> + Send + Sync>;
type Total<C> = Box<dyn Fn(&mut C) -> slotted_core::Result<i64> + Send + Sync>;

/// A way to count: its increment, how to read its total, and the table it empties first.
struct Mode<C> {
    name: String,
    increment: Op<C>,
    total: Total<C>,
    table: String,
    prefill: bool,
}

fn slotted<C: BenchConnection, T: CounterTable<Key = i32>>(name: &str) -> Mode<C> {
    Mode {
        name: name.to_owned(),
        increment: Box::new(|conn, _| Counter::<T>::of(1).increment(conn)),
        total: Box::new(|conn| Counter::<T>::of(1).total(conn)),
        table: T::SPEC.table.to_owned(),
        prefill: T::SPEC.prefill,
    }
}

fn modes<C: BenchConnection>(slots: u32, max_writers: u32) -> Result<Vec<Mode<C>>, BoxError> {
    let (thread, random): (Mode<C>, Mode<C>) = match slots {
        16 => (
            slotted::<C, bench_t16_hits_slots::table>("slotted-thread"),
            slotted::<C, bench_r16_hits_slots::table>("slotted-random"),
        ),
        32 => (
            slotted::<C, bench_t32_hits_slots::table>("slotted-thread"),
            slotted::<C, bench_r32_hits_slots::table>("slotted-random"),
        ),
        64 => (
            slotted::<C, bench_t64_hits_slots::table>("slotted-thread"),
            slotted::<C, bench_r64_hits_slots::table>("slotted-random"),
        ),
        128 => (
            slotted::<C, bench_t128_hits_slots::table>("slotted-thread"),
            slotted::<C, bench_r128_hits_slots::table>("slotted-random"),
        ),
        other => return Err(format!("--slots {other}: choose 16, 32, 64 or 128").into()),
    };
    let mut prefill = slotted::<C, bench_p64_hits_slots::table>("slotted-prefill");
    prefill.name = "slotted-prefill (64)".into();
    Ok(vec![
        Mode {
            name: "single-row".into(),
            increment: Box::new(|conn: &mut C, _| Ok(conn.single_row().map(drop)?)),
            total: Box::new(|conn: &mut C| Ok(conn.read_single()?)),
            table: "bench_single".into(),
            prefill: false,
        },
        thread,
        random,
        prefill,
        Mode {
            name: "ceiling".into(),
            increment: Box::new(|conn: &mut C, writer| {
                Counter::<bench_private_hits_slots::table>::of(writer).increment(conn)
            }),
            total: Box::new(move |conn: &mut C| {
                let writers: Vec<i32> = (0..max_writers as i32).collect();
                let totals = Private::hits_totals(&writers, conn)?;
                Ok(totals.values().sum())
            }),
            table: "bench_private_hits_slots".into(),
            prefill: false,
        },
    ])
}

/// The sweep's modes: every slot count, both strategies.
fn sweep_modes<C: BenchConnection>() -> Vec<(u32, Mode<C>, Mode<C>)> {
    macro_rules! pair {
        ($slots:literal, $t:ident, $r:ident) => {
            (
                $slots,
                slotted::<C, $t::table>("thread"),
                slotted::<C, $r::table>("random"),
            )
        };
    }
    vec![
        pair!(1, bench_t1_hits_slots, bench_r1_hits_slots),
        pair!(2, bench_t2_hits_slots, bench_r2_hits_slots),
        pair!(4, bench_t4_hits_slots, bench_r4_hits_slots),
        pair!(8, bench_t8_hits_slots, bench_r8_hits_slots),
        pair!(16, bench_t16_hits_slots, bench_r16_hits_slots),
        pair!(32, bench_t32_hits_slots, bench_r32_hits_slots),
        pair!(64, bench_t64_hits_slots, bench_r64_hits_slots),
        pair!(128, bench_t128_hits_slots, bench_r128_hits_slots),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Bare,
    Business,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Bare => "bare",
            Shape::Business => "business",
        }
    }
}

struct Options {
    backend: String,
    writers: Vec<u32>,
    seconds: f64,
    hold: Duration,
    slots: u32,
    sweep_writers: u32,
    rounds: u32,
    out: Option<std::path::PathBuf>,
}

/// What one writer thread saw.
#[derive(Default)]
struct Tally {
    committed: u64,
    errors: u64,
    retries: u64,
    latencies_ms: Vec<f64>,
}

/// One measurement's figures.
struct Run {
    mode: String,
    shape: Shape,
    writers: u32,
    committed: u64,
    tps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    retries: u64,
}

/// Deadlocks, serialization failures and SQLite's busy: the transaction rolled back whole and
/// is simply run again (a retry); anything else is an error.
fn retryable(e: &slotted_core::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as D};
    let source = match e {
        slotted_core::Error::Database { source, .. } | slotted_core::Error::Diesel(source) => {
            source
        }
        _ => return false,
    };
    match source {
        D::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        D::DatabaseError(_, info) => {
            let m = info.message();
            m.contains("deadlock")
                || m.contains("Deadlock")
                || m.contains("database is locked")
                || m.contains("Lock wait timeout")
        }
        _ => false,
    }
}

fn measure<C: BenchConnection>(
    pool: &Pool<ConnectionManager<C>>,
    mode: &Mode<C>,
    writers: u32,
    shape: Shape,
    opts: &Options,
) -> Result<Run, BoxError> {
    {
        let mut conn = pool.get()?;
        conn.batch_execute(&format!("DELETE FROM {}", mode.table))?;
        if mode.table == "bench_single" {
            conn.batch_execute("INSERT INTO bench_single (id, count) VALUES (1, 0)")?;
        }
        if mode.prefill {
            bench_p64_hits_slots::table.create_slots(&[1], &mut *conn)?;
        }
    }
    let before = (mode.total)(&mut *pool.get()?)?;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(writers as usize + 1));
    let hold = opts.hold;
    let results = std::thread::scope(|scope| -> Result<Vec<Tally>, BoxError> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, barrier) = (stop.clone(), barrier.clone());
                let mut conn = pool.get();
                scope.spawn(move || -> Result<Tally, BoxError> {
                    let conn = conn.as_mut().map_err(|e| e.to_string())?;
                    let mut tally = Tally::default();
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let result = match shape {
                            Shape::Bare => (mode.increment)(conn, w as i32),
                            Shape::Business => conn.transaction(|conn| {
                                conn.event(w as i32)?;
                                (mode.increment)(conn, w as i32)?;
                                std::thread::sleep(hold);
                                Ok(())
                            }),
                        };
                        match result {
                            Ok(()) => {
                                tally.committed += 1;
                                tally
                                    .latencies_ms
                                    .push(started.elapsed().as_secs_f64() * 1e3);
                            }
                            Err(e) if retryable(&e) => tally.retries += 1,
                            Err(_) => tally.errors += 1,
                        }
                    }
                    Ok(tally)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(opts.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a writer panicked")?)
            .collect()
    });
    let elapsed = opts.seconds; // writers stop within one transaction of the deadline
    let results = results?;
    let committed: u64 = results.iter().map(|r| r.committed).sum();
    let after = (mode.total)(&mut *pool.get()?)?;
    if after - before != committed as i64 {
        return Err(format!(
            "{} {} x{writers}: the total moved by {}, but {committed} increments committed",
            mode.name,
            shape.name(),
            after - before
        )
        .into());
    }
    let mut latencies: Vec<f64> = results
        .iter()
        .flat_map(|r| r.latencies_ms.iter().copied())
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    Ok(Run {
        mode: mode.name.clone(),
        shape,
        writers,
        committed,
        tps: committed as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        errors: results.iter().map(|r| r.errors).sum(),
        retries: results.iter().map(|r| r.retries).sum(),
    })
}

/// Measures `modes` side by side: `opts.rounds` rounds, each running every mode once in turn,
/// so that a slow moment of a shared machine hits all of them alike. Per mode, the round of
/// median throughput, with the errors and retries of every round.
fn interleaved<C: BenchConnection>(
    pool: &Pool<ConnectionManager<C>>,
    modes: &[&Mode<C>],
    writers: u32,
    shape: Shape,
    opts: &Options,
) -> Result<Vec<Run>, BoxError> {
    let mut rounds: Vec<Vec<Run>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..opts.rounds.max(1) {
        for (mode, runs) in modes.iter().zip(&mut rounds) {
            runs.push(measure(pool, mode, writers, shape, opts)?);
        }
    }
    Ok(rounds
        .into_iter()
        .map(|mut runs| {
            let (errors, retries) = runs
                .iter()
                .fold((0, 0), |(e, r), run| (e + run.errors, r + run.retries));
            runs.sort_by(|a, b| a.tps.total_cmp(&b.tps));
            let mut median = runs.swap_remove(runs.len() / 2);
            median.errors = errors;
            median.retries = retries;
            median
        })
        .collect())
}

/// Average time of `op` over `n` calls, given the call's index `0..n`, in microseconds.
fn time_us<C>(
    conn: &mut C,
    n: i32,
    mut op: impl FnMut(&mut C, i32) -> Result<(), BoxError>,
) -> Result<f64, BoxError> {
    let started = Instant::now();
    for i in 0..n {
        op(conn, i)?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / f64::from(n))
}

fn setup<C: BenchConnection>(conn: &mut C) -> Result<(), BoxError> {
    for table in ["bench_single", "bench_events"] {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.batch_execute(
        "CREATE TABLE bench_single (id INTEGER PRIMARY KEY NOT NULL, count BIGINT NOT NULL)",
    )?;
    conn.batch_execute(C::EVENTS_DDL)?;
    let specs: Vec<_> = [
        Private::COUNTERS,
        T1::COUNTERS,
        T2::COUNTERS,
        T4::COUNTERS,
        T8::COUNTERS,
        T16::COUNTERS,
        T32::COUNTERS,
        T64::COUNTERS,
        T128::COUNTERS,
        R1::COUNTERS,
        R2::COUNTERS,
        R4::COUNTERS,
        R8::COUNTERS,
        R16::COUNTERS,
        R32::COUNTERS,
        R64::COUNTERS,
        R128::COUNTERS,
        P64::COUNTERS,
    ]
    .concat();
    for spec in &specs {
        // The migration's SQL, without the migration log: the benchmark's tables are throwaway.
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {}", spec.table))?;
        conn.batch_execute(&slotted_core::up_sql(
            spec,
            <C::Backend as slotted_core::CounterBackend>::DIALECT,
        ))?;
    }
    Ok(())
}
use slotted_core::SlottedModel;

fn run<C: BenchConnection>(url: &str, opts: &Options, pragmas: bool) -> Result<(), BoxError> {
    let max_writers = opts
        .writers
        .iter()
        .copied()
        .chain([opts.sweep_writers])
        .max()
        .unwrap_or(1);
    let mut builder = Pool::builder().max_size(max_writers + 1).min_idle(Some(0));
    if pragmas {
        builder = builder.connection_customizer(Box::new(SqlitePragmas));
    }
    let pool = builder.build(ConnectionManager::<C>::new(url))?;
    setup(&mut *pool.get()?)?;
    let modes = modes::<C>(opts.slots, max_writers)?;
    println!(
        "# {} — {} s per measurement, business transactions hold {:?}, slotted modes {} slots",
        C::NAME,
        opts.seconds,
        opts.hold,
        opts.slots
    );

    let mut runs = Vec::new();
    for shape in [Shape::Bare, Shape::Business] {
        println!("\n## {} increments\n", shape.name());
        println!("| mode | writers | tx/s | p50 ms | p99 ms | errors | retries |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for &writers in &opts.writers {
            let all: Vec<&Mode<C>> = modes.iter().collect();
            for run in interleaved(&pool, &all, writers, shape, opts)? {
                println!(
                    "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {} |",
                    run.mode, run.writers, run.tps, run.p50_ms, run.p99_ms, run.errors, run.retries
                );
                runs.push(run);
            }
        }
    }

    // Ratios at the sweep's writer count, business shape: the targets.
    let tps = |mode: &str, writers: u32| {
        runs.iter()
            .find(|r| r.mode == mode && r.writers == writers && r.shape == Shape::Business)
            .map_or(0.0, |r| r.tps)
    };
    let w = opts.sweep_writers;
    let best = ["slotted-thread", "slotted-random", "slotted-prefill (64)"]
        .into_iter()
        .map(|m| (m, tps(m, w)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("none", 0.0));
    if tps("ceiling", w) > 0.0 {
        println!(
            "\n{w} writers, business: best slotted mode `{}` at {:.0} tx/s = {:.3} x ceiling ({:.0}), {:.1} x single-row ({:.0}); random = {:.3} x ceiling",
            best.0,
            best.1,
            best.1 / tps("ceiling", w),
            tps("ceiling", w),
            best.1 / tps("single-row", w).max(1e-9),
            tps("single-row", w),
            tps("slotted-random", w) / tps("ceiling", w),
        );
    }

    // The slot-count sweep.
    println!("\n## slot-count sweep: {w} writers, business transactions\n");
    println!("| slots | thread tx/s | random tx/s |");
    println!("|---:|---:|---:|");
    let mut sweep = Vec::new();
    for (slots, thread, random) in sweep_modes::<C>() {
        let pair = interleaved(&pool, &[&thread, &random], w, Shape::Business, opts)?;
        let (t, r) = (pair[0].tps, pair[1].tps);
        println!("| {slots} | {t:.0} | {r:.0} |");
        sweep.push((slots, t, r));
    }
    let smallest = |pick: fn(&(u32, f64, f64)) -> f64| {
        let best = sweep.iter().map(pick).fold(0.0, f64::max);
        sweep
            .iter()
            .find(|s| pick(s) >= 0.95 * best)
            .map_or(0, |s| s.0)
    };
    let (smallest_thread, smallest_random) = (smallest(|s| s.1), smallest(|s| s.2));
    println!("\nsmallest slot count within 5% of the best: thread {smallest_thread}, random {smallest_random}");

    // The read side and the library's own cost, single-threaded.
    let mut conn = pool.get()?;
    let conn = &mut *conn;
    let reads = 2000;
    conn.batch_execute("DELETE FROM bench_t16_hits_slots; DELETE FROM bench_t64_hits_slots")?;
    for (table, slots) in [("bench_t16_hits_slots", 16), ("bench_t64_hits_slots", 64)] {
        let rows: Vec<String> = (0..slots).map(|s| format!("(1, {s}, 1)")).collect();
        conn.batch_execute(&format!(
            "INSERT INTO {table} (record_id, slot, count) VALUES {}",
            rows.join(", ")
        ))?;
    }
    let keys: Vec<i32> = (1..=1000).collect();
    let rows: Vec<String> = (2..=1000).map(|k| format!("({k}, 0, 1)")).collect();
    conn.batch_execute(&format!(
        "INSERT INTO bench_t16_hits_slots (record_id, slot, count) VALUES {}",
        rows.join(", ")
    ))?;
    let single_read = time_us(conn, reads, |c, _| Ok(c.read_single().map(drop)?))?;
    let total16 = time_us(conn, reads, |c, _| {
        Ok(T16::hits_of(1).total(c).map(drop)?)
    })?;
    let total64 = time_us(conn, reads, |c, _| {
        Ok(T64::hits_of(1).total(c).map(drop)?)
    })?;
    let totals1000 = time_us(conn, reads / 20, |c, _| {
        let totals = T16::hits_totals(&keys, c)?;
        match totals.values().sum::<i64>() {
            1015 => Ok(()), // 16 slots of record 1, one of each other record
            other => Err(format!("totals of 1,000 keys summed to {other}, not 1,015").into()),
        }
    })?;
    println!("\n## reads, single-threaded\n");
    println!("| read | µs per call | per s |");
    println!("|---|---:|---:|");
    for (name, us) in [
        ("single-row column", single_read),
        ("total, 16 slots", total16),
        ("total, 64 slots", total64),
        ("totals of 1,000 keys (one query)", totals1000),
    ] {
        println!("| {name} | {us:.1} | {:.0} |", 1e6 / us);
    }

    // The library's increment against the same upsert written by hand, two ways: a prepared
    // statement (the strict comparison: what the library adds is its own work) and Diesel's
    // query builder (what a user would write; Diesel parses it again every call). Rounds
    // alternate the three, each inside one transaction so that the commit's fsync (the same for
    // all) does not drown the statements' own cost; each touches every record of its own key
    // range once, as increments of a busy table do (the same row again and again inside one
    // transaction would measure the row's growing version chain instead). Round 0 inserts the
    // rows and warms the statements up; the median of the others times the update path.
    let n: i32 = if opts.seconds < 1.0 { 200 } else { 2000 };
    let rounds: i64 = 11;
    let mut times: [Vec<f64>; 3] = Default::default();
    conn.batch_execute("DELETE FROM bench_t1_hits_slots")?;
    for round in 0..rounds {
        let l = conn.transaction(|c| time_us(c, n, |c, i| Ok(T1::hits_of(i).increment(c)?)))?;
        let h = conn
            .transaction(|c| time_us(c, n, |c, i| Ok(c.hand_written_upsert(n + i).map(drop)?)))?;
        let d =
            conn.transaction(|c| time_us(c, n, |c, i| Ok(c.dsl_upsert(2 * n + i).map(drop)?)))?;
        if round > 0 {
            for (times, t) in times.iter_mut().zip([l, h, d]) {
                times.push(t);
            }
        }
    }
    let us = times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2] // the median round
    });
    let [library, hand, dsl] = us;
    println!(
        "\nincrement, single writer: library {library:.1} µs, hand-written prepared upsert {hand:.1} µs \
         ({:+.1}%), Diesel query-builder upsert {dsl:.1} µs ({:+.1}%)",
        (library / hand - 1.0) * 100.0,
        (library / dsl - 1.0) * 100.0
    );
    let keys: Vec<i32> = (0..3 * n).collect();
    let counted = T1::hits_totals(&keys, conn)?;
    if let Some((key, total)) = counted.iter().find(|(_, &total)| total != rounds) {
        return Err(format!("record {key} counted {total} increments, not {rounds}").into());
    }

    if let Some(dir) = &opts.out {
        std::fs::create_dir_all(dir)?;
        let mut json = String::new();
        writeln!(
            json,
            "{{\n  \"backend\": \"{}\",\n  \"seconds\": {},\n  \"hold_ms\": {},\n  \"slots\": {},",
            C::NAME,
            opts.seconds,
            opts.hold.as_secs_f64() * 1e3,
            opts.slots
        )?;
        json.push_str("  \"runs\": [\n");
        for (i, r) in runs.iter().enumerate() {
            let comma = if i + 1 < runs.len() { "," } else { "" };
            writeln!(
                json,
                "    {{\"mode\": \"{}\", \"shape\": \"{}\", \"writers\": {}, \"committed\": {}, \"tps\": {:.1}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"errors\": {}, \"retries\": {}}}{comma}",
                r.mode, r.shape.name(), r.writers, r.committed, r.tps, r.p50_ms, r.p99_ms, r.errors, r.retries
            )?;
        }
        json.push_str("  ],\n  \"sweep\": [");
        let sweep_json: Vec<String> = sweep
            .iter()
            .map(|(s, t, r)| {
                format!("{{\"slots\": {s}, \"thread_tps\": {t:.1}, \"random_tps\": {r:.1}}}")
            })
            .collect();
        json.push_str(&sweep_json.join(", "));
        writeln!(json, "],\n  \"sweep_writers\": {w},\n  \"smallest_within_5pct\": {{\"thread\": {smallest_thread}, \"random\": {smallest_random}}},")?;
        writeln!(
            json,
            "  \"reads_us\": {{\"single_row\": {single_read:.2}, \"total_16_slots\": {total16:.2}, \"total_64_slots\": {total64:.2}, \"totals_1000_keys\": {totals1000:.2}}},"
        )?;
        writeln!(
            json,
            "  \"increment_us\": {{\"library\": {library:.2}, \"hand_written_prepared\": {hand:.2}, \"diesel_query_builder\": {dsl:.2}}}\n}}"
        )?;
        std::fs::write(dir.join(format!("contention-{}.json", C::NAME)), json)?;
        for shape in [Shape::Bare, Shape::Business] {
            let series: Vec<Series> = modes
                .iter()
                .map(|m| Series {
                    name: m.name.clone(),
                    points: runs
                        .iter()
                        .filter(|r| r.mode == m.name && r.shape == shape)
                        .map(|r| (r.writers, r.tps))
                        .collect(),
                })
                .collect();
            let title = format!(
                "{}: {} increments, {} slots",
                C::NAME,
                shape.name(),
                opts.slots
            );
            throughput_chart(
                &dir.join(format!("contention-{}-{}.svg", C::NAME, shape.name())),
                &title,
                &series,
            )?;
        }
        println!("\nwrote {}", dir.display());
    }
    Ok(())
}

fn parse() -> Result<Options, BoxError> {
    let mut opts = Options {
        backend: "sqlite".into(),
        writers: vec![1, 8, 32, 64],
        seconds: 2.0,
        hold: Duration::from_millis(2),
        slots: 64,
        sweep_writers: 32,
        rounds: 3,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--backend" => opts.backend = value()?,
            "--writers" => {
                opts.writers = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--seconds" => opts.seconds = value()?.parse()?,
            "--hold-ms" => opts.hold = Duration::from_secs_f64(value()?.parse::<f64>()? / 1e3),
            "--slots" => opts.slots = value()?.parse()?,
            "--sweep-writers" => opts.sweep_writers = value()?.parse()?,
            "--rounds" => opts.rounds = value()?.parse()?,
            "--out" => opts.out = Some(value()?.into()),
            "--smoke" => {
                opts.writers = vec![1, 4];
                opts.seconds = 0.2;
                opts.sweep_writers = 4;
                opts.rounds = 1;
            }
            other => {
                return Err(format!(
                    "unknown option {other}; see the comment at the top of examples/contention.rs"
                )
                .into())
            }
        }
    }
    Ok(opts)
}

fn main() -> Result<(), BoxError> {
    let opts = parse()?;
    match opts.backend.as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let path = std::env::temp_dir().join("slotted-contention.db");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            run::<diesel::SqliteConnection>(&path.to_string_lossy(), &opts, true)
        }
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(&std::env::var("PG_DATABASE_URL")?, &opts, false),
        #[cfg(feature = "mysql")]
        "mysql" => run::<diesel::MysqlConnection>(&std::env::var("MYSQL_DATABASE_URL")?, &opts, false),
        other => Err(format!("backend `{other}` unknown or not enabled: sqlite, postgres (--features postgres), mysql (--features mysql)").into()),
    }
}
