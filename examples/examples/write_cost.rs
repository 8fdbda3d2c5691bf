//! What one increment costs the client, in instructions: the same single-row write with a bound
//! slot (`strategy = thread`) and with the server's writer index (`strategy = connection`, the
//! default), on PostgreSQL and MariaDB. Instruction counts (valgrind's callgrind) are the same
//! from run to run whatever else the machine is doing, where throughput on a shared 2-core
//! machine moves by 10–20% between runs: they show a per-write cost of a few percent that a
//! contention run cannot.
//!
//! ```text
//! cargo build --release --example write_cost --features postgres,mysql
//! target/release/examples/write_cost --out docs/bench
//! ```
//!
//! For each backend and strategy the program runs itself under `valgrind --tool=callgrind` twice,
//! with no writes and with `--writes` (2,000) writes after the same warm-up (the first write of
//! each strategy, which prepares its statement and takes the writer index), and prints the
//! difference per write. Server URLs come from `PG_DATABASE_URL` and `MYSQL_DATABASE_URL`; it
//! works in databases of its own.

use std::process::Command;

use diesel::prelude::*;
use slotted_core::prelude::*;
use slotted_examples::BoxError;
use slotted_tests::{TestConnection, TestDb};

diesel::table! {
    cost_posts (id) {
        id -> Integer,
    }
}

/// The same counter table shape twice: 64 slots, a bound slot per thread and the writer index.
#[derive(SlottedCounter)]
#[diesel(table_name = cost_posts)]
#[slotted(counter = bound, slots = 64, strategy = thread)]
#[slotted(counter = indexed, slots = 64, strategy = connection)]
pub struct CostPost {
    pub id: i32,
}

const STRATEGIES: [&str; 2] = ["thread", "connection"];

fn write<C: CounterConnection>(conn: &mut C, strategy: &str) -> Result<(), BoxError> {
    match strategy {
        "thread" => CostPost::bound_of(1).increment(conn)?,
        _ => CostPost::indexed_of(1).increment(conn)?,
    }
    Ok(())
}

/// The measured run: the warm-up, then `writes` writes of `strategy`.
fn child<C: TestConnection + CounterConnection>(
    url: &str,
    strategy: &str,
    writes: usize,
) -> Result<(), BoxError> {
    let mut conn = C::establish(url)?;
    for warm in STRATEGIES {
        write(&mut conn, warm)?;
    }
    for _ in 0..writes {
        write(&mut conn, strategy)?;
    }
    Ok(())
}

/// A database of the program's own with the counter tables.
fn prepare<C: TestConnection>(backend: &str) -> Result<TestDb, BoxError> {
    let db = TestDb::new::<C>("write_cost").ok_or(format!("no {backend} server URL"))?;
    let mut conn = C::open(&db.url);
    conn.batch_execute("CREATE TABLE cost_posts (id INTEGER PRIMARY KEY)")?;
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut conn,
        CounterMigrations::of::<CostPost>(),
    )
    .map_err(|e| format!("migrations: {e}"))?;
    Ok(db)
}

/// The instructions callgrind counted in a run of this program as `child` with `args`.
fn instructions(args: &[&str]) -> Result<u64, BoxError> {
    let exe = std::env::current_exe()?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(exe)
        .arg("--child")
        .args(args)
        .output()
        .map_err(|e| format!("valgrind (Debian's package valgrind): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("the measured run failed: {stderr}").into());
    }
    stderr
        .lines()
        .find_map(|line| line.split("Collected : ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no instruction count in valgrind's output: {stderr}").into())
}

fn main() -> Result<(), BoxError> {
    let mut writes = 2000_usize;
    let mut out_dir = None;
    let mut backends = vec!["postgres".to_owned(), "mysql".to_owned()];
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--writes" => writes = value()?.parse()?,
            "--out" => out_dir = Some(value()?),
            "--backend" => backends = vec![value()?],
            "--child" => {
                let (backend, url, strategy, n) = (value()?, value()?, value()?, value()?);
                return match backend.as_str() {
                    #[cfg(feature = "postgres")]
                    "postgres" => child::<PgConnection>(&url, &strategy, n.parse()?),
                    #[cfg(feature = "mysql")]
                    "mysql" => child::<MysqlConnection>(&url, &strategy, n.parse()?),
                    other => Err(format!("no backend {other} in this build").into()),
                };
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let mut report = format!(
        "# Client instructions per increment (valgrind --tool=callgrind), {writes} writes after a \
         warm-up, 64 slots\n# cargo build --release --example write_cost --features \
         postgres,mysql && target/release/examples/write_cost\n\n\
         | backend | strategy | instructions per write | × bound slot |\n|---|---|---:|---:|\n"
    );
    for backend in &backends {
        let db = match backend.as_str() {
            #[cfg(feature = "postgres")]
            "postgres" => prepare::<PgConnection>(backend)?,
            #[cfg(feature = "mysql")]
            "mysql" => prepare::<MysqlConnection>(backend)?,
            other => return Err(format!("no backend {other} in this build").into()),
        };
        let mut bound = None;
        for strategy in STRATEGIES {
            let run = |n: usize| instructions(&[backend, &db.url, strategy, &n.to_string()]);
            let per_write = (run(writes)?.saturating_sub(run(0)?)) / writes.max(1) as u64;
            let base = *bound.get_or_insert(per_write);
            report.push_str(&format!(
                "| {backend} | {strategy} | {per_write} | {:.3} |\n",
                per_write as f64 / base as f64
            ));
        }
    }
    print!("{report}");
    if let Some(dir) = out_dir {
        std::fs::write(format!("{dir}/write-cost.txt"), &report)?;
    }
    Ok(())
}
