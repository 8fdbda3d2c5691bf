//! PostgreSQL through PgBouncer in transaction mode, against PostgreSQL directly: what
//! `slotted_core::pooling::set(Pooling::Transaction)` costs, and what the pooler costs, with
//! pgbench in the same run as the ceiling of each path.
//!
//! ```text
//! scripts/pgbouncer start
//! cargo run --release --example pooler --features postgres,async -- \
//!     --pooler "$(scripts/pgbouncer url)" --out docs/bench
//! ```
//!
//! Every writer counts on its own record (no row shared: this measures the statements and the
//! path, not contention), `--writers` client connections (16) for 8 server connections behind
//! the pooler. Two shapes: a bare increment, and the business transaction (`BEGIN`, an event
//! row, the increment, a client-side hold of `--hold-ms`, `COMMIT`). The anchors are pgbench
//! running the same statements: `-M prepared` (named statements, as slotted's default) directly,
//! `-M extended` (unnamed, parsed every time: what any client must do behind a transaction
//! pooler) directly and through the pooler. After every slotted run the slot rows are summed
//! through a direct connection and must equal the increments acknowledged.

use std::time::{Duration, Instant};

use diesel::connection::{CacheSize, SimpleConnection};
use diesel::prelude::*;
use diesel_async::pooled_connection::deadpool;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use diesel_migrations::MigrationHarness;
use slotted_core::pooling::{self, Pooling};
use slotted_core::CounterMigrations;
use slotted_examples::anchors::{pgbench_with, Target};
use slotted_examples::private::Private;
use slotted_examples::{with_database, BoxError};

#[derive(Debug, Clone)]
struct Args {
    direct: String,
    pooler: String,
    seconds: f64,
    writers: usize,
    hold: Duration,
    out: Option<String>,
}

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        direct: std::env::var("PG_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
        pooler: std::env::var("SLOTTED_PGBOUNCER_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:21900/test".into()),
        seconds: 5.0,
        writers: 16,
        hold: Duration::from_millis(2),
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--direct" => args.direct = value()?,
            "--pooler" => args.pooler = value()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--writers" => args.writers = value()?.parse()?,
            "--hold-ms" => args.hold = Duration::from_millis(value()?.parse()?),
            "--out" => args.out = Some(value()?),
            "--smoke" => args.seconds = 0.3,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

const DATABASE: &str = "slotted_bench_pooler";

fn prepare(direct: &str) -> Result<(), BoxError> {
    let mut admin = PgConnection::establish(direct)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))?;
    admin.batch_execute(&format!("CREATE DATABASE {DATABASE}"))?;
    let mut conn = PgConnection::establish(&with_database(direct, DATABASE))?;
    conn.run_pending_migrations(CounterMigrations::of::<Private>())?;
    conn.batch_execute(
        "CREATE TABLE bench_events (id BIGSERIAL PRIMARY KEY, writer INTEGER NOT NULL)",
    )?;
    Ok(())
}

/// What one measured run did.
struct Run {
    committed: u64,
    seconds: f64,
    p99_ms: Option<f64>,
    errors: u64,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.committed as f64 / self.seconds
    }
}

fn p99(latencies: &mut [f64]) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    latencies.sort_by(f64::total_cmp);
    Some(latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)])
}

/// The sum of every slot row, read directly: the increments that were committed.
fn committed_increments(direct: &str) -> Result<i64, BoxError> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = PgConnection::establish(&with_database(direct, DATABASE))?;
    Ok(diesel::sql_query(
        "SELECT CAST(COALESCE(SUM(count), 0) AS BIGINT) AS n FROM bench_private_hits_slots",
    )
    .get_result::<N>(&mut conn)?
    .n)
}

fn sync_run(url: &str, args: &Args, business: bool) -> Result<Run, BoxError> {
    let pool = diesel::r2d2::Pool::builder()
        .max_size(args.writers as u32)
        .connection_customizer(Box::new(NoCache))
        .build(diesel::r2d2::ConnectionManager::<PgConnection>::new(url))?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let results: Vec<(u64, u64, Vec<f64>)> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..args.writers)
            .map(|w| {
                let pool = &pool;
                s.spawn(move || {
                    let (mut done, mut errors, mut latencies) = (0, 0, Vec::new());
                    let mut conn = pool.get().expect("a connection");
                    let id = w as i32 + 1;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let result = if business {
                            conn.transaction(|c| {
                                c.batch_execute(&format!(
                                    "INSERT INTO bench_events (writer) VALUES ({id})"
                                ))?;
                                Private::hits_of(id).increment(c)?;
                                std::thread::sleep(args.hold);
                                Ok::<_, slotted_core::Error>(())
                            })
                        } else {
                            Private::hits_of(id).increment(&mut *conn)
                        };
                        tally(&mut done, &mut errors, &mut latencies, t, result);
                    }
                    (done, errors, latencies)
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|w| w.join().expect("a writer"))
            .collect()
    });
    finish(started, results)
}

#[derive(Debug)]
struct NoCache;

impl diesel::r2d2::CustomizeConnection<PgConnection, diesel::r2d2::Error> for NoCache {
    fn on_acquire(&self, conn: &mut PgConnection) -> Result<(), diesel::r2d2::Error> {
        conn.set_prepared_statement_cache_size(CacheSize::Disabled);
        Ok(())
    }
}

/// One call's outcome: counted with its latency, or as an error.
fn tally(
    done: &mut u64,
    errors: &mut u64,
    latencies: &mut Vec<f64>,
    started: Instant,
    result: Result<(), slotted_core::Error>,
) {
    match result {
        Ok(()) => {
            *done += 1;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
        }
        Err(_) => *errors += 1,
    }
}

fn finish(started: Instant, results: Vec<(u64, u64, Vec<f64>)>) -> Result<Run, BoxError> {
    let seconds = started.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    let (mut committed, mut errors) = (0, 0);
    for (d, e, l) in results {
        committed += d;
        errors += e;
        latencies.extend(l);
    }
    Ok(Run {
        committed,
        seconds,
        p99_ms: p99(&mut latencies),
        errors,
    })
}

async fn async_run(url: &str, args: &Args, business: bool, behind: bool) -> Result<Run, BoxError> {
    let manager = if behind {
        slotted_tests::asynch::pooler_manager(url)
    } else {
        AsyncDieselConnectionManager::<AsyncPgConnection>::new(url)
    };
    let pool = deadpool::Pool::builder(manager)
        .max_size(args.writers)
        .build()?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..args.writers {
        let (pool, hold) = (pool.clone(), args.hold);
        tasks.spawn(async move {
            let (mut done, mut errors, mut latencies) = (0, 0, Vec::new());
            let mut conn = pool.get().await.expect("a connection");
            let id = w as i32 + 1;
            while Instant::now() < deadline {
                let t = Instant::now();
                let result = if business {
                    let conn: &mut AsyncPgConnection = &mut conn;
                    conn.transaction(async |c| {
                        let event = format!("INSERT INTO bench_events (writer) VALUES ({id})");
                        diesel_async::SimpleAsyncConnection::batch_execute(&mut *c, &event).await?;
                        Private::hits_of(id).increment_async(c).await?;
                        tokio::time::sleep(hold).await;
                        Ok::<(), slotted_core::Error>(())
                    })
                    .await
                } else {
                    Private::hits_of(id).increment_async(&mut conn).await
                };
                tally(&mut done, &mut errors, &mut latencies, t, result);
            }
            (done, errors, latencies)
        });
    }
    let mut results = Vec::new();
    while let Some(task) = tasks.join_next().await {
        results.push(task?);
    }
    finish(started, results)
}

fn main() -> Result<(), BoxError> {
    let args = args()?;
    prepare(&args.direct)?;
    let direct = with_database(&args.direct, DATABASE);
    let pooler = with_database(&args.pooler, DATABASE);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut out = format!(
        "# PostgreSQL through PgBouncer (transaction mode, 8 server connections) and directly\n\
         # {} writers, each on its own record; {:.1} s per run; business transactions hold {} ms\n\
         # cargo run --release --example pooler --features postgres,async -- --pooler URL --seconds {}\n",
        args.writers,
        args.seconds,
        args.hold.as_millis(),
        args.seconds
    );
    for business in [false, true] {
        let shape = if business {
            "business transaction"
        } else {
            "bare increment"
        };
        out += &format!(
            "\n## {shape}\n{:<44} {:>10} {:>9} {:>7}\n",
            "run", "per s", "p99 ms", "errors"
        );
        let hold = business.then_some(args.hold);
        let mut anchors = Vec::new();
        for (name, protocol, url) in [
            ("pgbench -M prepared, direct", "prepared", &direct),
            ("pgbench -M extended, direct", "extended", &direct),
            (
                "pgbench -M extended, through PgBouncer",
                "extended",
                &pooler,
            ),
        ] {
            let load = pgbench_with(
                protocol,
                url,
                Target::PrivateRow,
                hold,
                args.writers as u32,
                args.seconds,
            )?;
            let rate = load.committed as f64 / load.seconds;
            anchors.push(rate);
            out += &format!(
                "{name:<44} {rate:>10.0} {:>9} {:>7}\n",
                load.average_ms
                    .map_or("-".into(), |a| format!("avg {a:.2}")),
                load.errors
            );
        }
        for (name, mode, url, face) in [
            (
                "slotted sync, Session, direct",
                Pooling::Session,
                &direct,
                "sync",
            ),
            (
                "slotted sync, Transaction, direct",
                Pooling::Transaction,
                &direct,
                "sync",
            ),
            (
                "slotted sync, Transaction, through PgBouncer",
                Pooling::Transaction,
                &pooler,
                "sync",
            ),
            (
                "slotted async, Session, direct",
                Pooling::Session,
                &direct,
                "async",
            ),
            (
                "slotted async, Transaction, direct",
                Pooling::Transaction,
                &direct,
                "async",
            ),
            (
                "slotted async, Transaction, through PgBouncer",
                Pooling::Transaction,
                &pooler,
                "async",
            ),
        ] {
            pooling::set(mode);
            let before = committed_increments(&args.direct)?;
            let run = if face == "sync" {
                sync_run(url, &args, business)?
            } else {
                runtime.block_on(async_run(url, &args, business, url == &pooler))?
            };
            let after = committed_increments(&args.direct)?;
            if after - before != run.committed as i64 {
                return Err(format!(
                    "{name}: {} increments acknowledged, {} committed",
                    run.committed,
                    after - before
                )
                .into());
            }
            let anchor = if url == &pooler {
                anchors[2]
            } else if mode == Pooling::Session {
                anchors[0]
            } else {
                anchors[1]
            };
            out += &format!(
                "{name:<44} {:>10.0} {:>9} {:>7}   {:.2}x its pgbench\n",
                run.per_second(),
                run.p99_ms.map_or("-".into(), |p| format!("{p:.2}")),
                run.errors,
                run.per_second() / anchor
            );
        }
    }
    pooling::set(Pooling::Session);
    print!("{out}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        let path = format!("{dir}/pooler-postgres.txt");
        std::fs::write(&path, &out)?;
        eprintln!("saved {path}");
    }
    let mut admin = PgConnection::establish(&args.direct)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))?;
    Ok(())
}
