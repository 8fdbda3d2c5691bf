//! The contention benchmark: slotted against the single-row counter, the private-row ceiling and
//! raw clients, side by side in one run, on one backend: sync (a thread per writer, r2d2) and,
//! with the `async` feature, async (a task per writer on a 2-worker tokio runtime, deadpool).
//!
//!     cargo run --release --example contention --features postgres,mysql,async -- --backend postgres
//!     cargo run --release --example contention --features postgres,mysql,async -- --backend mysql
//!     cargo run --release --example contention -- --backend sqlite
//!
//! Options: `--writers 1,8,32,64`, `--seconds 2` (per measurement), `--rounds 3` (each mode
//! runs once per round, in turn; the median round counts), `--hold-ms 2` (the business
//! transaction's other work), `--slots 64` (the slotted modes), `--sweep-writers 32`,
//! `--sweep-slots 1,16,64,128` (default: 1 to 128; `none`: no sweep), `--out docs/bench` (JSON, TSV and SVG),
//! `--calls 2000` (per timing of the single-threaded reads and increments), `--shapes
//! bare,business`, `--modes single-row,ceiling,…` (by name; `single-row` and `ceiling` bring
//! their raw anchors), `--smoke` (a few seconds in all, for CI). Server URLs come from `PG_DATABASE_URL` and
//! `MYSQL_DATABASE_URL` (a Unix socket URL, such as
//! `postgres:///test?host=/var/run/postgresql` or
//! `mysql://root@localhost/test?unix_socket=/run/mysqld/mysqld.sock`, spares the client and
//! server the TCP loopback); the benchmark works in tables of its own (`bench_*`), which it
//! empties before every measurement.
//!
//! Modes, each sync and async:
//! - `single-row`: `UPDATE bench_single SET count = count + 1 WHERE id = ?`, the naive counter;
//! - `slotted-thread`, `slotted-connection`, `slotted-random`, `slotted-prefill`: the library's
//!   `increment` with each slot strategy;
//! - `ceiling`: every writer increments a record of its own with one slot: the library's own
//!   upsert with no row shared, the most the database does without contention;
//! - `hand-written ceiling`: the ceiling with the library's upsert written by hand and prepared
//!   (`ceiling` against it is what the library's own code costs in a transaction);
//! - PostgreSQL and MySQL, `skip-locked (64)`: a candidate strategy the library
//!   does not have, written by hand: each write adds to the first of 64 pre-created slots that
//!   no other transaction holds (`FOR UPDATE SKIP LOCKED`; one statement on PostgreSQL, two on
//!   MySQL), falling back to the library's increment when all are held;
//! - MySQL, sync only: `ceiling, Diesel's conn.transaction`, the ceiling in Diesel's own
//!   transactions instead of the retry helper's (whose `BEGIN` and `COMMIT` are prepared).
//!
//! Raw anchors (`slotted_examples::anchors`), in the same rounds: pgbench `-j 2`, libpq threads
//! and tokio-postgres tasks (feature `async`) on PostgreSQL; libmariadb threads and mysql_async
//! tasks (feature `async`) on MySQL.
//!
//! Every statement is prepared once per connection, the hand-written ones included (see
//! `HandWritten`), so the modes differ only in which rows they lock.
//!
//! Shapes: `bare` (the increment alone) and `business` (`BEGIN`, insert an event row, increment,
//! hold the transaction open for `--hold-ms`, `COMMIT`). The sync face's business transactions
//! run in `transaction_with_retry`, as README advises; the async face's in diesel-async's
//! `transaction`, which is what the async helper runs too. After every measurement the counter's
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
use slotted_core::{
    transaction_with_retry, Counter, CounterConnection, CounterTable, PrefilledCounterTable,
    RetryPolicy, SlottedCounter,
};
use slotted_examples::anchors::{self, Target};
use slotted_examples::chart::{throughput_chart, Series};
use slotted_examples::BoxError;

#[cfg(feature = "async")]
mod asynch;

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
    C1, bench_c1, 1, connection;
    C2, bench_c2, 2, connection;
    C4, bench_c4, 4, connection;
    C8, bench_c8, 8, connection;
    C16, bench_c16, 16, connection;
    C32, bench_c32, 32, connection;
    C64, bench_c64, 64, connection;
    C128, bench_c128, 128, connection;
    P64, bench_p64, 64, thread, prefill;
    K64, bench_k64, 64, connection, prefill;
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
    statement: PhantomData<fn() -> S>,
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

/// The `skip-locked` candidate on PostgreSQL: one statement adds to the first pre-created slot
/// of record 1 that no other transaction holds (0 rows when all are held).
const PG_SKIP_LOCKED: &[&str] = &["UPDATE bench_k64_hits_slots SET count = count + 1 \
     WHERE (record_id, slot) = (SELECT record_id, slot FROM bench_k64_hits_slots \
     WHERE record_id = 1 LIMIT 1 FOR UPDATE SKIP LOCKED)"];
/// The same on MySQL and MariaDB takes two statements: this one locks a free slot (MariaDB
/// does not skip locked rows inside a derived table of an `UPDATE`, measured: it waits)...
const MYSQL_SKIP_LOCKED: &str =
    "SELECT slot FROM bench_k64_hits_slots WHERE record_id = 1 LIMIT 1 FOR UPDATE SKIP LOCKED";
/// ... and this one adds to it.
const SLOT_UPDATE: &[&str] = &[
    "UPDATE bench_k64_hits_slots SET count = count + 1 WHERE record_id = 1 AND slot = ",
    "",
];
enum SkipLocked {}
enum SlotUpdate {}

/// The slot [`MYSQL_SKIP_LOCKED`] locked.
#[derive(QueryableByName)]
struct FreeSlot {
    #[diesel(sql_type = SmallInt)]
    slot: i16,
}

/// What differs per backend: DDL, the hand-written upsert, and running a hand-written statement.
trait BenchConnection: CounterConnection + R2D2Connection + SimpleConnection + Send + 'static {
    const NAME: &'static str;
    const EVENTS_DDL: &'static str;
    const UPSERT: &'static [&'static str];
    /// The diesel-async connection of the same backend.
    #[cfg(feature = "async")]
    type Async: asynch::AsyncBench;
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

    /// The `skip-locked` candidate's write: adds 1 to a pre-created slot of record 1 that no
    /// other transaction holds; 0 rows when every one is held.
    fn skip_locked(&mut self) -> QueryResult<usize> {
        if Self::NAME == "postgres" {
            return self.run(HandWritten::<SkipLocked>::new(PG_SKIP_LOCKED, &[]));
        }
        match self.free_slot()? {
            Some(slot) => self.run(HandWritten::<SlotUpdate>::new(
                SLOT_UPDATE,
                &[Bind::SmallInt(slot)],
            )),
            None => Ok(0),
        }
    }

    /// [`MYSQL_SKIP_LOCKED`].
    fn free_slot(&mut self) -> QueryResult<Option<i16>>;

    /// The library's upsert for `T1`, slot 0, with Diesel's query builder.
    fn dsl_upsert(&mut self, key: i32) -> QueryResult<usize>;
}

macro_rules! bench_connection {
    ($feature:literal, $conn:ty, $async:ty, $events:literal, $upsert:expr, |$insert:ident| $on_conflict:expr) => {
        #[cfg(feature = $feature)]
        impl BenchConnection for $conn {
            const NAME: &'static str = $feature;
            #[cfg(feature = "async")]
            type Async = $async;
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

            fn free_slot(&mut self) -> QueryResult<Option<i16>> {
                let rows: Vec<FreeSlot> = diesel::sql_query(MYSQL_SKIP_LOCKED).load(self)?;
                Ok(rows.first().map(|row| row.slot))
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
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>,
    "CREATE TABLE bench_events (id INTEGER PRIMARY KEY AUTOINCREMENT, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "postgres",
    diesel::PgConnection,
    diesel_async::AsyncPgConnection,
    "CREATE TABLE bench_events (id BIGSERIAL PRIMARY KEY, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "mysql",
    diesel::MysqlConnection,
    diesel_async::AsyncMysqlConnection,
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

/// The retry helper's policy for business transactions: one attempt; the benchmark counts a
/// deadlock victim as a retry and runs the next transaction.
const ONCE: RetryPolicy = RetryPolicy {
    max_retries: 0,
    base_delay: Duration::ZERO,
    max_delay: Duration::ZERO,
};

type Op<C> = Box<dyn Fn(&mut C, i32) -> slotted_core::Result<()> + Send + Sync>;
type Total<C> = Box<dyn Fn(&mut C) -> slotted_core::Result<i64> + Send + Sync>;

/// A way to count: its increment, how to read its total, and the table it empties first.
struct Mode<C: BenchConnection> {
    name: String,
    increment: Op<C>,
    total: Total<C>,
    table: String,
    /// Pre-creates the slots of record 1, for a mode that writes into pre-created slots.
    prefill: Option<Prefill<C>>,
    /// Business transactions run in Diesel's `conn.transaction` instead of slotted's retry
    /// helper (sync only: a diagnosis of Diesel's MySQL transactions, see `modes`).
    diesel_tx: bool,
    /// The same increment on a diesel-async connection.
    #[cfg(feature = "async")]
    async_increment: Arc<asynch::AsyncOp<C::Async>>,
}

fn slotted<C: BenchConnection, T: CounterTable<Key = i32>>(name: &str) -> Mode<C> {
    Mode {
        name: name.to_owned(),
        increment: Box::new(|conn, _| Counter::<T>::of(1).increment(conn)),
        total: Box::new(|conn| Counter::<T>::of(1).total(conn)),
        table: T::SPEC.table.to_owned(),
        prefill: None,
        diesel_tx: false,
        #[cfg(feature = "async")]
        async_increment: Arc::new(asynch::slotted::<C::Async, T>()),
    }
}

/// Creates the slot rows of record 1 of `T`.
type Prefill<C> = fn(&mut C) -> slotted_core::Result<u64>;

fn prefill_record_1<C: BenchConnection, T: PrefilledCounterTable<Key = i32>>(
    conn: &mut C,
) -> slotted_core::Result<u64> {
    Counter::<T>::of(1).create_slots(conn)
}

/// The sum of every writer's own record of `T` (the ceilings: a record per writer).
fn per_writer_total<C: BenchConnection, T: CounterTable<Key = i32>>(max_writers: u32) -> Total<C> {
    Box::new(move |conn: &mut C| {
        let writers: Vec<i32> = (0..max_writers as i32).collect();
        Ok(Counter::<T>::totals(&writers, conn)?.values().sum())
    })
}

fn modes<C: BenchConnection>(slots: u32, max_writers: u32) -> Result<Vec<Mode<C>>, BoxError> {
    macro_rules! strategies {
        ($t:ident, $r:ident, $c:ident) => {
            (
                slotted::<C, $t::table>("slotted-thread"),
                slotted::<C, $r::table>("slotted-random"),
                slotted::<C, $c::table>("slotted-connection"),
            )
        };
    }
    let (thread, random, connection): (Mode<C>, Mode<C>, Mode<C>) = match slots {
        16 => strategies!(
            bench_t16_hits_slots,
            bench_r16_hits_slots,
            bench_c16_hits_slots
        ),
        32 => strategies!(
            bench_t32_hits_slots,
            bench_r32_hits_slots,
            bench_c32_hits_slots
        ),
        64 => strategies!(
            bench_t64_hits_slots,
            bench_r64_hits_slots,
            bench_c64_hits_slots
        ),
        128 => strategies!(
            bench_t128_hits_slots,
            bench_r128_hits_slots,
            bench_c128_hits_slots
        ),
        other => return Err(format!("--slots {other}: choose 16, 32, 64 or 128").into()),
    };
    let mut prefill = slotted::<C, bench_p64_hits_slots::table>("slotted-prefill");
    prefill.name = "slotted-prefill (64)".into();
    prefill.prefill = Some(prefill_record_1::<C, bench_p64_hits_slots::table>);
    let mut all = vec![
        Mode {
            name: "single-row".into(),
            increment: Box::new(|conn: &mut C, _| Ok(conn.single_row().map(drop)?)),
            total: Box::new(|conn: &mut C| Ok(conn.read_single()?)),
            table: "bench_single".into(),
            prefill: None,
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(asynch::single_row()),
        },
        thread,
        connection,
        random,
        prefill,
        Mode {
            name: "ceiling".into(),
            increment: Box::new(|conn: &mut C, writer| {
                Counter::<bench_private_hits_slots::table>::of(writer).increment(conn)
            }),
            total: per_writer_total::<C, bench_private_hits_slots::table>(max_writers),
            table: "bench_private_hits_slots".into(),
            prefill: None,
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(
                asynch::private::<C::Async, bench_private_hits_slots::table>(),
            ),
        },
    ];
    // The ceiling with the library's upsert written by hand (prepared, into a one-slot table,
    // a record per writer): what the library's own code costs inside a business transaction.
    all.push(Mode {
        name: "hand-written ceiling".into(),
        increment: Box::new(|conn: &mut C, writer| {
            Ok(conn.hand_written_upsert(writer).map(drop)?)
        }),
        total: per_writer_total::<C, bench_t1_hits_slots::table>(max_writers),
        table: "bench_t1_hits_slots".into(),
        prefill: None,
        diesel_tx: false,
        #[cfg(feature = "async")]
        async_increment: Arc::new(asynch::hand_written_ceiling::<C>()),
    });
    if C::NAME != "sqlite" {
        // A candidate strategy, written by hand: a server-side choice of a slot nobody holds,
        // `FOR UPDATE SKIP LOCKED` over 64 pre-created slots; when every slot is held, the
        // library's increment (`connection`) adds beside them.
        all.push(Mode {
            name: "skip-locked (64)".into(),
            increment: Box::new(|conn: &mut C, _| {
                if conn.skip_locked()? == 0 {
                    Counter::<bench_k64_hits_slots::table>::of(1).increment(conn)?;
                }
                Ok(())
            }),
            total: Box::new(|conn: &mut C| {
                Counter::<bench_k64_hits_slots::table>::of(1).total(conn)
            }),
            table: "bench_k64_hits_slots".into(),
            prefill: Some(prefill_record_1::<C, bench_k64_hits_slots::table>),
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(asynch::skip_locked::<C::Async>()),
        });
    }
    if C::NAME == "mysql" {
        // The ceiling again, in Diesel's `conn.transaction`: what Diesel's MySQL transaction
        // manager costs (it turns multi-statements on and off around `BEGIN` and `COMMIT`,
        // four round trips per transaction that the retry helper's prepared ones do not take).
        all.push(Mode {
            name: "ceiling, Diesel's conn.transaction".into(),
            increment: Box::new(|conn: &mut C, writer| {
                Counter::<bench_private_hits_slots::table>::of(writer).increment(conn)
            }),
            total: per_writer_total::<C, bench_private_hits_slots::table>(max_writers),
            table: "bench_private_hits_slots".into(),
            prefill: None,
            diesel_tx: true,
            #[cfg(feature = "async")]
            async_increment: Arc::new(
                asynch::private::<C::Async, bench_private_hits_slots::table>(),
            ),
        });
    }
    Ok(all)
}

/// The sweep's modes: every slot count, every strategy (thread, random, connection).
fn sweep_modes<C: BenchConnection>() -> Vec<(u32, [Mode<C>; 3])> {
    macro_rules! strategies {
        ($slots:literal, $t:ident, $r:ident, $c:ident) => {
            (
                $slots,
                [
                    slotted::<C, $t::table>("thread"),
                    slotted::<C, $r::table>("random"),
                    slotted::<C, $c::table>("connection"),
                ],
            )
        };
    }
    vec![
        strategies!(
            1,
            bench_t1_hits_slots,
            bench_r1_hits_slots,
            bench_c1_hits_slots
        ),
        strategies!(
            2,
            bench_t2_hits_slots,
            bench_r2_hits_slots,
            bench_c2_hits_slots
        ),
        strategies!(
            4,
            bench_t4_hits_slots,
            bench_r4_hits_slots,
            bench_c4_hits_slots
        ),
        strategies!(
            8,
            bench_t8_hits_slots,
            bench_r8_hits_slots,
            bench_c8_hits_slots
        ),
        strategies!(
            16,
            bench_t16_hits_slots,
            bench_r16_hits_slots,
            bench_c16_hits_slots
        ),
        strategies!(
            32,
            bench_t32_hits_slots,
            bench_r32_hits_slots,
            bench_c32_hits_slots
        ),
        strategies!(
            64,
            bench_t64_hits_slots,
            bench_r64_hits_slots,
            bench_c64_hits_slots
        ),
        strategies!(
            128,
            bench_t128_hits_slots,
            bench_r128_hits_slots,
            bench_c128_hits_slots
        ),
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
    /// The sweep's slot counts: `None`, all of them; `Some(vec![])` (`--sweep-slots none`), no
    /// sweep.
    sweep_slots: Option<Vec<u32>>,
    /// Calls per timing of the single-threaded reads and increments.
    calls: i32,
    out: Option<std::path::PathBuf>,
    /// The shapes to measure.
    shapes: Vec<Shape>,
    /// The modes to measure, by name (`single-row` and `ceiling` bring their raw anchors);
    /// empty: all of them.
    modes: Vec<String>,
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
    /// `sync` (threads, r2d2), `async` (tasks, deadpool) or `raw` (an anchor).
    face: &'static str,
    shape: Shape,
    writers: u32,
    committed: u64,
    tps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    retries: u64,
    /// CPU time per committed transaction, in µs: the client's (this process, or the anchor's
    /// child process) and the whole machine's (client, server and kernel); NaN where
    /// `/proc` cannot tell.
    client_cpu_us: f64,
    machine_cpu_us: f64,
    /// Throughput in every round, in round order (the median round is the one reported).
    round_tps: Vec<f64>,
}

/// `a`'s throughput over `b`'s, round by round: the median and the range over the rounds.
#[derive(Clone, Copy)]
struct PairedRatio {
    median: f64,
    low: f64,
    high: f64,
}

impl PairedRatio {
    fn of(a: &Run, b: &Run) -> Option<PairedRatio> {
        let mut ratios: Vec<f64> = a
            .round_tps
            .iter()
            .zip(&b.round_tps)
            .map(|(a, b)| a / b)
            .collect();
        ratios.sort_by(f64::total_cmp);
        Some(PairedRatio {
            median: median(ratios.clone()),
            low: *ratios.first()?,
            high: *ratios.last()?,
        })
    }

    fn show(self, digits: usize) -> String {
        if self.low == self.high {
            format!("{:.digits$}", self.median)
        } else {
            format!(
                "{:.digits$} ({:.digits$}–{:.digits$})",
                self.median, self.low, self.high
            )
        }
    }
}

/// CPU time consumed so far, in seconds, from Linux's `/proc`: this process's and its
/// waited-for children's (pgbench), and the whole machine's busy time.
#[derive(Clone, Copy)]
struct CpuTimes {
    client: f64,
    machine: f64,
}

impl CpuTimes {
    fn now() -> Option<CpuTimes> {
        // USER_HZ, in which both files count, is 100 on every Linux architecture Rust targets.
        const TICK: f64 = 0.01;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name: state is the 3rd field; utime, stime, cutime and
        // cstime the 14th to 17th.
        let fields: Vec<f64> = own
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .skip(11)
            .take(4)
            .map(|f| f.parse().unwrap_or(f64::NAN))
            .collect();
        let all = std::fs::read_to_string("/proc/stat").ok()?;
        // `cpu  user nice system idle iowait irq softirq steal …`: busy is user to softirq but
        // idle and iowait (steal is time a hypervisor gave to other machines).
        let machine: Vec<f64> = all
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(7)
            .map(|f| f.parse().unwrap_or(f64::NAN))
            .collect();
        let busy = machine.iter().sum::<f64>() - machine.get(3)? - machine.get(4)?;
        Some(CpuTimes {
            client: fields.iter().sum::<f64>() * TICK,
            machine: busy * TICK,
        })
    }
}

/// Empties the mode's table (and pre-creates its slots where it pre-creates them).
fn reset<C: BenchConnection>(conn: &mut C, mode: &Mode<C>) -> Result<(), BoxError> {
    conn.batch_execute(&format!("DELETE FROM {}", mode.table))?;
    if mode.table == "bench_single" {
        conn.batch_execute("INSERT INTO bench_single (id, count) VALUES (1, 0)")?;
    }
    if let Some(prefill) = mode.prefill {
        prefill(conn)?;
    }
    Ok(())
}

/// One measurement's figures from its writers' tallies; fails unless the total moved by
/// exactly the increments committed.
fn summarize(
    mode: &str,
    face: &'static str,
    shape: Shape,
    writers: u32,
    seconds: f64,
    results: Vec<Tally>,
    moved: i64,
) -> Result<Run, BoxError> {
    let committed: u64 = results.iter().map(|r| r.committed).sum();
    if moved != committed as i64 {
        return Err(format!(
            "{mode} {} x{writers}: the total moved by {moved}, but {committed} increments committed",
            shape.name(),
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
            .unwrap_or(f64::NAN)
    };
    Ok(Run {
        mode: mode.to_owned(),
        face,
        shape,
        writers,
        committed,
        tps: committed as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        errors: results.iter().map(|r| r.errors).sum(),
        retries: results.iter().map(|r| r.retries).sum(),
        client_cpu_us: f64::NAN,
        machine_cpu_us: f64::NAN,
        round_tps: Vec::new(),
    })
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
    writers_pool: Pool<ConnectionManager<C>>,
    mode: &Mode<C>,
    writers: u32,
    shape: Shape,
    opts: &Options,
) -> Result<Run, BoxError> {
    reset(&mut *pool.get()?, mode)?;
    let before = (mode.total)(&mut *pool.get()?)?;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(writers as usize + 1));
    let hold = opts.hold;
    let results = std::thread::scope(|scope| -> Result<Vec<Tally>, BoxError> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, barrier) = (stop.clone(), barrier.clone());
                let mut conn = writers_pool.get();
                scope.spawn(move || -> Result<Tally, BoxError> {
                    let conn = conn.as_mut().map_err(|e| e.to_string())?;
                    let mut tally = Tally::default();
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let result = match shape {
                            Shape::Bare => (mode.increment)(conn, w as i32),
                            Shape::Business if mode.diesel_tx => conn.transaction(|conn| {
                                conn.event(w as i32)?;
                                (mode.increment)(conn, w as i32)?;
                                std::thread::sleep(hold);
                                Ok(())
                            }),
                            // What README advises: the retry helper, here with no reruns
                            // (the benchmark counts and reruns them itself).
                            Shape::Business => transaction_with_retry(conn, &ONCE, |conn| {
                                conn.event(w as i32)?;
                                (mode.increment)(conn, w as i32)?;
                                std::thread::sleep(hold);
                                Ok(())
                            })
                            .map(|done| done.value),
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
    // Writers stop within one transaction of the deadline.
    let results = results?;
    let after = (mode.total)(&mut *pool.get()?)?;
    summarize(
        &mode.name,
        "sync",
        shape,
        writers,
        opts.seconds,
        results,
        after - before,
    )
}

/// A raw anchor's run as a [`Run`]: `reset` empties its table, `total` reads the counter's
/// total before and after.
fn anchor_run<C: BenchConnection>(
    pool: &Pool<ConnectionManager<C>>,
    name: &str,
    mode: &Mode<C>,
    shape: Shape,
    writers: u32,
    load: impl FnOnce() -> Result<anchors::Load, BoxError>,
) -> Result<Run, BoxError> {
    reset(&mut *pool.get()?, mode)?;
    let before = (mode.total)(&mut *pool.get()?)?;
    let load = load()?;
    let after = (mode.total)(&mut *pool.get()?)?;
    let average = load.average_ms;
    let tally = Tally {
        committed: load.committed,
        errors: load.errors,
        retries: 0,
        latencies_ms: load.latencies_ms,
    };
    let mut run = summarize(
        name,
        "raw",
        shape,
        writers,
        load.seconds,
        vec![tally],
        after - before,
    )?;
    if let Some(average) = average {
        run.p50_ms = average; // pgbench reports the average only
    }
    Ok(run)
}

/// One measurement, run once per round.
type Entry<'a> = Box<dyn Fn() -> Result<Run, BoxError> + 'a>;

/// Measures `entries` side by side: `opts.rounds` rounds, each running every entry once in
/// turn, so that a slow moment of a shared machine hits all of them alike. Per entry, the round
/// of median throughput, with the errors and retries of every round.
fn interleaved(entries: &[Entry<'_>], opts: &Options) -> Result<Vec<Run>, BoxError> {
    let mut rounds: Vec<Vec<Run>> = entries.iter().map(|_| Vec::new()).collect();
    for _ in 0..opts.rounds.max(1) {
        for (entry, runs) in entries.iter().zip(&mut rounds) {
            let before = CpuTimes::now();
            let mut run = entry()?;
            if let (Some(before), Some(after)) = (before, CpuTimes::now()) {
                // Includes the mode's reset and total reads around the measurement: a few ms.
                let per_tx = |from: f64, to: f64| (to - from) * 1e6 / run.committed.max(1) as f64;
                run.client_cpu_us = per_tx(before.client, after.client);
                run.machine_cpu_us = per_tx(before.machine, after.machine);
            }
            runs.push(run);
        }
    }
    Ok(rounds
        .into_iter()
        .map(|mut runs| {
            let (errors, retries) = runs
                .iter()
                .fold((0, 0), |(e, r), run| (e + run.errors, r + run.retries));
            let round_tps = runs.iter().map(|run| run.tps).collect();
            runs.sort_by(|a, b| a.tps.total_cmp(&b.tps));
            let mut median = runs.swap_remove(runs.len() / 2);
            median.errors = errors;
            median.retries = retries;
            median.round_tps = round_tps;
            median
        })
        .collect())
}

/// One timed operation on a sync connection, given the call's index.
type SyncOp<'a, C> = &'a mut dyn FnMut(&mut C, i32) -> Result<(), BoxError>;

/// Calls `ops` in turn, `n` times each (call `i` of each gets `i`), timing every call alone:
/// per op, its calls' times in microseconds.
fn interleaved_samples<C>(
    conn: &mut C,
    n: i32,
    ops: &mut [SyncOp<'_, C>],
) -> Result<Vec<Vec<f64>>, BoxError> {
    let mut samples = vec![Vec::with_capacity(n.max(0) as usize); ops.len()];
    for i in 0..n {
        for (op, samples) in ops.iter_mut().zip(&mut samples) {
            let started = Instant::now();
            op(conn, i)?;
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(samples)
}

/// [`interleaved_samples`] over `warm + n` calls; per op, the median of the last `n`.
fn interleaved_us<C>(
    conn: &mut C,
    warm: i32,
    n: i32,
    ops: &mut [SyncOp<'_, C>],
) -> Result<Vec<f64>, BoxError> {
    let samples = interleaved_samples(conn, warm + n, ops)?;
    Ok(samples
        .into_iter()
        .map(|s| median(s[warm as usize..].to_vec()))
        .collect())
}

/// The median of some timings.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
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
        C1::COUNTERS,
        C2::COUNTERS,
        C4::COUNTERS,
        C8::COUNTERS,
        C16::COUNTERS,
        C32::COUNTERS,
        C64::COUNTERS,
        C128::COUNTERS,
        P64::COUNTERS,
        K64::COUNTERS,
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

/// What every measurement of a run shares: the server, the options, the sync pool and (with
/// the `async` feature) the runtime and the async pool.
struct Bench<'a, C: BenchConnection> {
    url: &'a str,
    opts: &'a Options,
    pool: Pool<ConnectionManager<C>>,
    #[cfg(feature = "async")]
    side: asynch::AsyncSide<C::Async>,
}

impl<C: BenchConnection> Bench<'_, C> {
    /// A pool for one measurement's writers, closed after it: the server's connection limit
    /// (100 on PostgreSQL) would not hold every face's connections at once.
    fn writers_pool(&self, size: u32) -> Result<Pool<ConnectionManager<C>>, BoxError> {
        let mut builder = Pool::builder().max_size(size.max(1)).min_idle(Some(0));
        if C::NAME == "sqlite" {
            builder = builder.connection_customizer(Box::new(SqlitePragmas));
        }
        Ok(builder.build(ConnectionManager::<C>::new(self.url))?)
    }

    /// Each of `modes` through the sync face, then (with `async`) through the async one.
    fn library<'b>(&'b self, modes: &[&'b Mode<C>], writers: u32, shape: Shape) -> Vec<Entry<'b>> {
        let mut entries: Vec<Entry<'b>> = Vec::new();
        for &mode in modes {
            entries.push(Box::new(move || {
                let writers_pool = self.writers_pool(writers)?;
                measure(&self.pool, writers_pool, mode, writers, shape, self.opts)
            }));
        }
        #[cfg(feature = "async")]
        for &mode in modes.iter().filter(|m| !m.diesel_tx) {
            entries.push(Box::new(move || {
                self.side.measure(
                    &self.pool,
                    mode,
                    &mode.async_increment,
                    writers,
                    shape,
                    self.opts,
                )
            }));
        }
        entries
    }

    /// The raw anchors: pgbench, libpq threads and (with `async`) tokio-postgres tasks on
    /// PostgreSQL;
    /// libmariadb threads and mysql_async tasks on MariaDB (with `async`). `single` and `ceiling` reset and check their tables.
    fn anchors<'b>(
        &'b self,
        single: &'b Mode<C>,
        ceiling: &'b Mode<C>,
        writers: u32,
        shape: Shape,
    ) -> Vec<Entry<'b>> {
        let hold = (shape == Shape::Business).then_some(self.opts.hold);
        let seconds = self.opts.seconds;
        let mut entries: Vec<Entry<'b>> = Vec::new();
        let wanted =
            |mode: &Mode<C>| self.opts.modes.is_empty() || self.opts.modes.contains(&mode.name);
        for (target, mode) in [(Target::SingleRow, single), (Target::PrivateRow, ceiling)] {
            if !wanted(mode) {
                continue;
            }
            match C::NAME {
                "postgres" => {
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (pgbench -j 2)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::pgbench(self.url, target, hold, writers, seconds)
                        })
                    }));
                    #[cfg(feature = "postgres")]
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (libpq threads)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::libpq_threads(self.url, target, hold, writers, seconds)
                        })
                    }));
                    #[cfg(all(feature = "async", feature = "postgres"))]
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (tokio-postgres tasks)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            self.side.runtime.block_on(anchors::tokio_postgres_tasks(
                                self.url, target, hold, writers, seconds,
                            ))
                        })
                    }));
                }
                #[cfg(feature = "async")]
                "mysql" => {
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (libmariadb threads)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::libmariadb_threads(self.url, target, hold, writers, seconds)
                        })
                    }));
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (mysql_async tasks)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            self.side.runtime.block_on(anchors::mysql_async_tasks(
                                self.url, target, hold, writers, seconds,
                            ))
                        })
                    }));
                }
                _ => {}
            }
        }
        entries
    }
}

/// The raw private-row or single-row anchor a face is judged against: pgbench for both faces
/// on PostgreSQL; on MariaDB, libmariadb threads for the sync face, mysql_async tasks for the
/// async one.
fn anchor_name(backend: &str, face: &str, target: Target) -> String {
    let client = match (backend, face) {
        ("postgres", _) => "pgbench -j 2",
        ("mysql", "async") => "mysql_async tasks",
        _ => "libmariadb threads",
    };
    format!("raw {} ({client})", target.name())
}

/// The raw private-row anchor on the face's own client library and concurrency model, where the
/// benchmark runs one: libmariadb threads (sync, MariaDB), mysql_async tasks (async, MariaDB),
/// tokio-postgres tasks (async, PostgreSQL), which holds its transactions with the same timer as
/// the async face.
fn client_anchor_name(backend: &str, face: &str) -> Option<String> {
    let client = match (backend, face) {
        ("postgres", "async") => "tokio-postgres tasks",
        ("postgres", _) => "libpq threads",
        ("mysql", "async") => "mysql_async tasks",
        ("mysql", _) => "libmariadb threads",
        _ => return None,
    };
    Some(format!("raw {} ({client})", Target::PrivateRow.name()))
}

fn print_run(run: &Run) {
    let ms = |v: f64| {
        if v.is_nan() {
            "–".to_owned()
        } else {
            format!("{v:.2}")
        }
    };
    let us = |v: f64| {
        if v.is_nan() {
            "–".to_owned()
        } else {
            format!("{v:.0}")
        }
    };
    println!(
        "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
        run.face,
        run.mode,
        run.writers,
        run.tps,
        ms(run.p50_ms),
        ms(run.p99_ms),
        run.errors,
        run.retries,
        us(run.client_cpu_us),
        us(run.machine_cpu_us)
    );
}

fn run<C: BenchConnection>(url: &str, opts: &Options, pragmas: bool) -> Result<(), BoxError> {
    let max_writers = opts
        .writers
        .iter()
        .copied()
        .chain([opts.sweep_writers])
        .max()
        .unwrap_or(1);
    let mut builder = Pool::builder().max_size(3).min_idle(Some(0));
    if pragmas {
        builder = builder.connection_customizer(Box::new(SqlitePragmas));
    }
    let bench = Bench {
        url,
        opts,
        pool: builder.build(ConnectionManager::<C>::new(url))?,
        #[cfg(feature = "async")]
        side: asynch::AsyncSide::<C::Async>::new(url, max_writers as usize + 1)?,
    };
    let pool = &bench.pool;
    setup(&mut *pool.get()?)?;
    let modes = modes::<C>(opts.slots, max_writers)?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "# {} — {} s per measurement, {} rounds (median), business transactions hold {:?}, \
         slotted modes {} slots; sync: a thread per writer, r2d2; async: a task per writer on \
         a 2-worker tokio runtime, deadpool; load average at start {}",
        C::NAME,
        opts.seconds,
        opts.rounds,
        opts.hold,
        opts.slots,
        load.join(" ")
    );
    // What a transaction's hold really lasts, per face: a thread's sleep (pgbench's `\sleep`
    // is a `ppoll` timeout, as precise), and the async face's timerfd; tokio's own timer, which
    // fires on millisecond ticks, for contrast.
    let thread_hold = median(
        (0..100)
            .map(|_| {
                let started = Instant::now();
                std::thread::sleep(opts.hold);
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    #[allow(unused_mut)] // extended with `async`
    let mut hold_note = format!(
        "std::thread::sleep({:?}) lasts {thread_hold:.3} ms",
        opts.hold
    );
    #[cfg(feature = "async")]
    {
        let (exact, tokio) = bench.side.hold_ms(opts.hold, 100)?;
        hold_note.push_str(&format!(
            "; the async face's and async anchors' timerfd hold lasts {exact:.3} ms \
             (tokio::time::sleep({:?}) would last {tokio:.3} ms)",
            opts.hold
        ));
    }
    println!("hold (median of 100): {hold_note}");

    let all: Vec<&Mode<C>> = modes
        .iter()
        .filter(|m| opts.modes.is_empty() || opts.modes.contains(&m.name))
        .collect();
    let single = &modes[0];
    let ceiling = modes
        .iter()
        .find(|m| m.name == "ceiling")
        .ok_or("no ceiling mode")?;
    let mut runs = Vec::new();
    for &shape in &opts.shapes {
        println!("\n## {} increments\n", shape.name());
        println!(
            "| face | mode | writers | tx/s | p50 ms | p99 ms | errors | retries | client CPU µs/tx \
             | machine CPU µs/tx |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &writers in &opts.writers {
            let mut entries = bench.library(&all, writers, shape);
            entries.extend(bench.anchors(single, ceiling, writers, shape));
            for run in interleaved(&entries, opts)? {
                print_run(&run);
                runs.push(run);
            }
        }
    }

    // Ratios at the sweep's writer count, business shape: the targets.
    let w = opts.sweep_writers;
    let find = |face: &str, mode: &str| {
        runs.iter().find(|r| {
            r.face == face && r.mode == mode && r.writers == w && r.shape == Shape::Business
        })
    };
    println!("\n## {w} writers, business transactions: ratios\n");
    println!(
        "Each ratio pairs the two measurements of one round (they ran minutes apart at most), \
         then takes the median over the rounds; the range is the lowest and highest round.\n"
    );
    println!(
        "| face | mode | tx/s | × raw private-row | × raw single-row | × library ceiling | × raw \
         private-row, same client and runtime |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for face in ["sync", "async"] {
        let raw_private = find("raw", &anchor_name(C::NAME, face, Target::PrivateRow));
        let raw_single = find("raw", &anchor_name(C::NAME, face, Target::SingleRow));
        let raw_client = client_anchor_name(C::NAME, face).and_then(|name| find("raw", &name));
        let ceiling = find(
            face,
            match face {
                "sync" => "ceiling",
                _ => "async ceiling",
            },
        );
        for mode in &modes {
            let name = match face {
                "sync" => mode.name.clone(),
                _ => format!("async {}", mode.name),
            };
            let Some(run) = find(face, &name) else {
                continue;
            };
            let of = |anchor: Option<&Run>| anchor.and_then(|a| PairedRatio::of(run, a));
            let (private, single, own, client) =
                (of(raw_private), of(raw_single), of(ceiling), of(raw_client));
            let show =
                |r: Option<PairedRatio>, digits: usize| r.map_or("–".into(), |r| r.show(digits));
            println!(
                "| {face} | {name} | {:.0} | {} | {} | {} | {} |",
                run.tps,
                show(private, 3),
                show(single, 1),
                show(own, 3),
                show(client, 3)
            );
            let json = |key: &str, r: Option<PairedRatio>| match r {
                Some(r) => format!(
                    "\"{key}\": {:.4}, \"{key}_range\": [{:.4}, {:.4}]",
                    r.median, r.low, r.high
                ),
                None => format!("\"{key}\": null"),
            };
            ratios.push(format!(
                "{{\"face\": \"{face}\", \"mode\": \"{name}\", \"tps\": {:.1}, {}, {}, {}, {}}}",
                run.tps,
                json("x_raw_private_row", private),
                json("x_raw_single_row", single),
                json("x_library_ceiling", own),
                json("x_raw_client_private_row", client),
            ));
        }
    }

    // The slot-count sweep: every strategy, sync and async.
    let sweeping = opts
        .sweep_slots
        .as_ref()
        .is_none_or(|slots| !slots.is_empty());
    if sweeping {
        println!("\n## slot-count sweep: {w} writers, business transactions (tx/s)\n");
    }
    let sweep_all = sweep_modes::<C>();
    let faces: &[&str] = if cfg!(feature = "async") {
        &["sync", "async"]
    } else {
        &["sync"]
    };
    let columns: Vec<String> = faces
        .iter()
        .flat_map(|face| {
            ["thread", "random", "connection"].map(|s| match *face {
                "sync" => s.to_owned(),
                _ => format!("async {s}"),
            })
        })
        .collect();
    if sweeping {
        println!("| slots | {} |", columns.join(" | "));
        println!("|---:|{}", "---:|".repeat(columns.len()));
    }
    let mut sweep: Vec<(u32, Vec<f64>)> = Vec::new();
    for (slots, strategies) in &sweep_all {
        if opts
            .sweep_slots
            .as_ref()
            .is_some_and(|wanted| !wanted.contains(slots))
        {
            continue;
        }
        let refs: Vec<&Mode<C>> = strategies.iter().collect();
        let entries = bench.library(&refs, w, Shape::Business);
        let measured: Vec<f64> = interleaved(&entries, opts)?.iter().map(|r| r.tps).collect();
        let cells: Vec<String> = measured.iter().map(|t| format!("{t:.0}")).collect();
        println!("| {slots} | {} |", cells.join(" | "));
        sweep.push((*slots, measured));
    }
    let smallest: Vec<u32> = (0..columns.len())
        .map(|i| {
            let best = sweep.iter().map(|s| s.1[i]).fold(0.0, f64::max);
            sweep
                .iter()
                .find(|s| s.1[i] >= 0.95 * best)
                .map_or(0, |s| s.0)
        })
        .collect();
    let within: Vec<String> = columns
        .iter()
        .zip(&smallest)
        .map(|(c, s)| format!("{c} {s}"))
        .collect();
    if sweeping {
        println!(
            "\nsmallest slot count within 5% of the best: {}",
            within.join(", ")
        );
    }

    // The read side and the library's own cost, single-threaded.
    let reads = opts.calls;
    {
        let conn = &mut *pool.get()?;
        conn.batch_execute("DELETE FROM bench_t16_hits_slots; DELETE FROM bench_t64_hits_slots")?;
        conn.batch_execute("DELETE FROM bench_single")?;
        conn.batch_execute("INSERT INTO bench_single (id, count) VALUES (1, 0)")?;
        for (table, slots) in [("bench_t16_hits_slots", 16), ("bench_t64_hits_slots", 64)] {
            let rows: Vec<String> = (0..slots).map(|s| format!("(1, {s}, 1)")).collect();
            conn.batch_execute(&format!(
                "INSERT INTO {table} (record_id, slot, count) VALUES {}",
                rows.join(", ")
            ))?;
        }
        let rows: Vec<String> = (2..=1000).map(|k| format!("({k}, 0, 1)")).collect();
        conn.batch_execute(&format!(
            "INSERT INTO bench_t16_hits_slots (record_id, slot, count) VALUES {}",
            rows.join(", ")
        ))?;
        if C::NAME == "postgres" {
            // The tables were written hard; read them as a settled table is read.
            for table in [
                "bench_single",
                "bench_t16_hits_slots",
                "bench_t64_hits_slots",
            ] {
                conn.batch_execute(&format!("VACUUM ANALYZE {table}"))?;
            }
        }
    }
    let keys: Vec<i32> = (1..=1000).collect();
    // Each face's reads run interleaved call by call, each call timed alone, and the median
    // call counts: on a shared machine, a batch of one read timed after a batch of another
    // meets another machine (wake-up latencies move by 3× between batches), so ratios of
    // batch averages said more about the moment than about the reads. The first 10% of calls
    // warm the statements and caches up and are dropped.
    let warm = reads / 10;
    #[allow(unused_mut)] // extended with `async`
    let mut read_us = {
        let conn = &mut *pool.get()?;
        let mut ops: [SyncOp<'_, C>; 3] = [
            &mut |c, _| Ok(c.read_single().map(drop)?),
            &mut |c, _| Ok(T16::hits_of(1).total(c).map(drop)?),
            &mut |c, _| Ok(T64::hits_of(1).total(c).map(drop)?),
        ];
        let mut us = interleaved_us(conn, warm, reads, &mut ops)?;
        us.extend(interleaved_us(
            conn,
            1,
            (reads / 20).max(5),
            &mut [&mut |c, _| {
                let totals = T16::hits_totals(&keys, c)?;
                match totals.values().sum::<i64>() {
                    1015 => Ok(()), // 16 slots of record 1, one of each other record
                    other => {
                        Err(format!("totals of 1,000 keys summed to {other}, not 1,015").into())
                    }
                }
            }],
        )?);
        us
    };
    #[cfg(feature = "async")]
    read_us.extend(bench.side.interleaved_us(
        warm,
        reads,
        &[
            &|c, _| {
                Box::pin(async move {
                    Ok(<C::Async as asynch::AsyncBench>::read_single(c)
                        .await
                        .map(drop)?)
                })
            },
            &|c, _| Box::pin(async move { Ok(T16::hits_of(1).total_async(c).await.map(drop)?) }),
            &|c, _| Box::pin(async move { Ok(T64::hits_of(1).total_async(c).await.map(drop)?) }),
        ],
    )?);
    let read_names = [
        "single-row column",
        "total, 16 slots",
        "total, 64 slots",
        "totals of 1,000 keys (one query)",
        "async single-row column",
        "async total, 16 slots",
        "async total, 64 slots",
    ];
    println!("\n## reads, single-threaded\n");
    println!("| read | µs per call (median) | per s | × single-row read |");
    println!("|---|---:|---:|---:|");
    for (i, (name, us)) in read_names.iter().zip(&read_us).enumerate() {
        let single = if i < 4 { read_us[0] } else { read_us[4] };
        println!(
            "| {name} | {us:.1} | {:.0} | {:.2} |",
            1e6 / us,
            us / single
        );
    }

    // The library's increment against the same upsert written by hand, two ways: a prepared
    // statement (the strict comparison: what the library adds is its own work) and Diesel's
    // query builder (what a user would write). Each round is one transaction, so that the
    // commit's fsync (the same for all) does not drown the statements' own cost, in which the
    // three alternate call by call, each call timed alone (see the reads); each touches every
    // record of its own key range once, as increments of a busy table do (the same row again
    // and again inside one transaction would measure the row's growing version chain
    // instead). Round 0 inserts the rows and warms the statements up; the median call of the
    // others times the update path. With `async`, the library's `increment_async` against the
    // hand-written prepared upsert on diesel-async, alternating the same way.
    let n: i32 = opts.calls;
    let rounds: i64 = 11;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 5];
    let conn = &mut *pool.get()?;
    conn.batch_execute("DELETE FROM bench_t1_hits_slots")?;
    for round in 0..rounds {
        #[allow(unused_mut)]
        let mut measured = conn.transaction(|c| {
            interleaved_samples(
                c,
                n,
                &mut [
                    &mut |c, i| Ok(T1::hits_of(i).increment(c)?),
                    &mut |c, i| Ok(c.hand_written_upsert(n + i).map(drop)?),
                    &mut |c, i| Ok(c.dsl_upsert(2 * n + i).map(drop)?),
                ],
            )
        })?;
        #[cfg(feature = "async")]
        measured.extend(bench.side.interleaved_samples(
            n,
            true,
            &[
                &|c, i| {
                    Box::pin(async move { Ok(T1::hits_of(3 * n + i).increment_async(c).await?) })
                },
                &|c, i| {
                    Box::pin(async move {
                        Ok(asynch::hand_written_upsert::<C, _>(c, 4 * n + i)
                            .await
                            .map(drop)?)
                    })
                },
            ],
        )?);
        if round > 0 {
            for (all, new) in samples.iter_mut().zip(measured) {
                all.extend(new);
            }
        }
    }
    let us: Vec<f64> = samples
        .into_iter()
        .filter(|t| !t.is_empty())
        .map(median)
        .collect();
    let (library, hand, dsl) = (us[0], us[1], us[2]);
    println!(
        "\nincrement, single writer (median call): library {library:.1} µs, hand-written prepared \
         upsert {hand:.1} µs ({:.3}×), Diesel query-builder upsert {dsl:.1} µs ({:.3}×)",
        library / hand,
        library / dsl
    );
    let async_increment = (us.len() == 5).then(|| (us[3], us[4]));
    if let Some((library, hand)) = async_increment {
        println!(
            "async increment, single writer (median call): library {library:.1} µs, hand-written \
             prepared diesel-async upsert {hand:.1} µs ({:.3}×)",
            library / hand
        );
    }
    let written = if async_increment.is_some() { 5 } else { 3 };
    let keys: Vec<i32> = (0..written * n).collect();
    let counted = T1::hits_totals(&keys, conn)?;
    if let Some((key, total)) = counted.iter().find(|(_, &total)| total != rounds) {
        return Err(format!("record {key} counted {total} increments, not {rounds}").into());
    }

    if let Some(dir) = &opts.out {
        std::fs::create_dir_all(dir)?;
        let mut json = String::new();
        writeln!(
            json,
            "{{\n  \"backend\": \"{}\",\n  \"seconds\": {},\n  \"rounds\": {},\n  \"hold_ms\": {},\n  \"hold_note\": \"{}\",\n  \"slots\": {},\n  \"load_average_at_start\": \"{}\",\n  \"async\": \"tokio multi-thread, 2 workers, deadpool\",",
            C::NAME,
            opts.seconds,
            opts.rounds,
            opts.hold.as_secs_f64() * 1e3,
            hold_note,
            opts.slots,
            load.join(" ")
        )?;
        json.push_str("  \"runs\": [\n");
        let num = |v: f64| {
            if v.is_nan() {
                "null".to_owned()
            } else {
                format!("{v:.3}")
            }
        };
        for (i, r) in runs.iter().enumerate() {
            let comma = if i + 1 < runs.len() { "," } else { "" };
            writeln!(
                json,
                "    {{\"face\": \"{}\", \"mode\": \"{}\", \"shape\": \"{}\", \"writers\": {}, \"committed\": {}, \"tps\": {:.1}, \"p50_ms\": {}, \"p99_ms\": {}, \"errors\": {}, \"retries\": {}, \"client_cpu_us_per_tx\": {}, \"machine_cpu_us_per_tx\": {}}}{comma}",
                r.face, r.mode, r.shape.name(), r.writers, r.committed, r.tps, num(r.p50_ms), num(r.p99_ms), r.errors, r.retries, num(r.client_cpu_us), num(r.machine_cpu_us)
            )?;
        }
        writeln!(
            json,
            "  ],\n  \"ratios_business_{w}_writers\": [\n    {}\n  ],",
            ratios.join(",\n    ")
        )?;
        json.push_str("  \"sweep\": [");
        let sweep_json: Vec<String> = sweep
            .iter()
            .map(|(s, tps)| {
                let cells: Vec<String> = columns
                    .iter()
                    .zip(tps)
                    .map(|(c, t)| format!("\"{c}\": {t:.1}"))
                    .collect();
                format!("{{\"slots\": {s}, {}}}", cells.join(", "))
            })
            .collect();
        json.push_str(&sweep_json.join(",\n    "));
        let within_json: Vec<String> = columns
            .iter()
            .zip(&smallest)
            .map(|(c, s)| format!("\"{c}\": {s}"))
            .collect();
        writeln!(
            json,
            "],\n  \"sweep_writers\": {w},\n  \"smallest_within_5pct\": {{{}}},",
            within_json.join(", ")
        )?;
        let reads_json: Vec<String> = read_names
            .iter()
            .zip(&read_us)
            .map(|(n, us)| format!("\"{n}\": {us:.2}"))
            .collect();
        writeln!(json, "  \"reads_us\": {{{}}},", reads_json.join(", "))?;
        let async_json = async_increment.map_or(String::new(), |(l, h)| {
            format!(", \"async_library\": {l:.2}, \"async_hand_written_prepared\": {h:.2}")
        });
        writeln!(
            json,
            "  \"increment_us\": {{\"library\": {library:.2}, \"hand_written_prepared\": {hand:.2}, \"diesel_query_builder\": {dsl:.2}{async_json}}}\n}}"
        )?;
        std::fs::write(dir.join(format!("contention-{}.json", C::NAME)), json)?;
        for shape in [Shape::Bare, Shape::Business] {
            let mut names: Vec<&str> = Vec::new();
            for r in runs.iter().filter(|r| r.shape == shape) {
                if !names.contains(&r.mode.as_str()) {
                    names.push(&r.mode);
                }
            }
            let series: Vec<Series> = names
                .iter()
                .map(|name| Series {
                    name: (*name).to_owned(),
                    points: runs
                        .iter()
                        .filter(|r| r.mode == *name && r.shape == shape)
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
        let mut text = String::new();
        for r in &runs {
            writeln!(
                text,
                "{}\t{}\t{}\t{}\t{:.1}",
                r.face,
                r.mode,
                r.shape.name(),
                r.writers,
                r.tps
            )?;
        }
        std::fs::write(dir.join(format!("contention-{}.tsv", C::NAME)), text)?;
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
        sweep_slots: None,
        calls: 2000,
        out: None,
        shapes: vec![Shape::Bare, Shape::Business],
        modes: Vec::new(),
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
            "--sweep-slots" => {
                opts.sweep_slots = Some(match value()?.as_str() {
                    "none" => Vec::new(),
                    list => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
                })
            }
            "--calls" => opts.calls = value()?.parse()?,
            "--shapes" => {
                opts.shapes = value()?
                    .split(',')
                    .map(|s| match s {
                        "bare" => Ok(Shape::Bare),
                        "business" => Ok(Shape::Business),
                        other => Err(format!("unknown shape {other}: bare, business")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--modes" => opts.modes = value()?.split(',').map(str::to_owned).collect(),
            "--out" => opts.out = Some(value()?.into()),
            "--smoke" => {
                opts.writers = vec![1, 4];
                opts.seconds = 0.2;
                opts.sweep_writers = 4;
                opts.rounds = 1;
                opts.sweep_slots = Some(vec![1, 16]);
                opts.calls = 200;
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
