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
//! their raw anchors), `--deployed` (each library measurement starts from a pool as a service
//! has it: other connections opened in between, half of its connections replaced; see
//! `measure::deploy`), `--smoke` (a few seconds in all, for CI). Server URLs come from `PG_DATABASE_URL` and
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
//!
//! The code: `models.rs` (the counters, the hand-written statements, what differs per backend),
//! `modes.rs` (the ways to count), `measure.rs` (writers, tallies, CPU, interleaved rounds),
//! `report.rs` (a run, printed and saved), `asynch.rs` (the async face); this file, the options.

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
    retry::transaction_with_retry, retry::RetryPolicy, Counter, CounterConnection, CounterTable,
    PrefilledCounterTable, SlottedCounter,
};
use slotted_examples::anchors::{self, Target};
use slotted_examples::chart::{throughput_chart, Series};
use slotted_examples::BoxError;

#[cfg(feature = "async")]
mod asynch;

diesel::table! { bench_single (id) { id -> Integer, count -> BigInt, } }

#[macro_use]
mod models;
mod measure;
mod modes;
mod report;

use measure::*;
use models::*;
use modes::*;
use report::*;

pub(crate) struct Options {
    pub(crate) backend: String,
    pub(crate) writers: Vec<u32>,
    pub(crate) seconds: f64,
    pub(crate) hold: Duration,
    pub(crate) slots: u32,
    pub(crate) sweep_writers: u32,
    pub(crate) rounds: u32,
    /// The sweep's slot counts: `None`, all of them; `Some(vec![])` (`--sweep-slots none`), no
    /// sweep.
    pub(crate) sweep_slots: Option<Vec<u32>>,
    /// Calls per timing of the single-threaded reads and increments.
    pub(crate) calls: i32,
    pub(crate) out: Option<std::path::PathBuf>,
    /// The shapes to measure.
    pub(crate) shapes: Vec<Shape>,
    /// The modes to measure, by name (`single-row` and `ceiling` bring their raw anchors);
    /// empty: all of them.
    pub(crate) modes: Vec<String>,
    /// `--deployed`: every library measurement starts from a deployed pool (see `deploy`).
    pub(crate) deployed: bool,
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
        deployed: false,
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
            "--deployed" => opts.deployed = true,
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
