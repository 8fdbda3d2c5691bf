//! The default slot assignment (`strategy = connection`) in a deployment's shape: how many
//! distinct slots the writers alive at one time hold, against `min(writers, slots)`, the most
//! they can. Side by side, for the same connections, what the assignment before writer indices
//! gave (`pg_backend_pid() % slots`, `CONNECTION_ID() % slots`) and what a random draw per
//! connection gives on average.
//!
//! ```text
//! scripts/pgbouncer start                                                   # 8 server connections
//! SLOTTED_PGBOUNCER_DIR=/tmp/pgb32 SLOTTED_PGBOUNCER_PORT=21920 SLOTTED_PGBOUNCER_POOL_SIZE=32 scripts/pgbouncer start
//! cargo run --release --example spread --features postgres,mysql,async -- \
//!     --pooler "$(scripts/pgbouncer url)" --pooler32 postgres://postgres@127.0.0.1:21920/test --out docs/bench
//! ```
//!
//! Scenarios, on PostgreSQL and MariaDB, sync (Diesel) and async (diesel-async), 64 slots:
//! - `fresh`: a pool of 8, 32 or 64 connections opened with 0–74 other connections in between
//!   (as other processes, migrations and health checks do), each at a random place; fewer where
//!   the server's connection limit (`max_connections`, read from the server) leaves no room;
//! - `churned`: the same pool after it replaced every other connection, with more others opened
//!   meanwhile;
//! - `2 processes`: two processes' pools of 32, alive at once;
//! - PostgreSQL behind PgBouncer in transaction mode (`--pooler`, `--pooler32`): 64 client
//!   connections writing at once over the pooler's 8 or 32 server connections, where the
//!   writers that contend are the server sessions.
//!
//! Each scenario runs `--trials` times (5) with other random draws; the table gives the
//! smallest ratio over the trials (the target: at least 0.95) and the averages. Server URLs come
//! from `PG_DATABASE_URL` and `MYSQL_DATABASE_URL`; the benchmark works in databases of its own.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};

use diesel::prelude::*;
use diesel_migrations::MigrationHarness;
use slotted_core::CounterMigrations;
use slotted_examples::BoxError;
use slotted_tests::models::Reaction;
use slotted_tests::spread::{
    churn, open_interleaved, ready, slots, wait_for_room, warm_up, Face, Sync, WARM_UP,
};
use slotted_tests::{Dice, TestConnection, TestDb};

const SLOTS: usize = 64;
const TABLE: &str = "reactions_hearts_slots";

struct Args {
    trials: usize,
    backends: Vec<String>,
    pooler: Option<String>,
    pooler32: Option<String>,
    out: Option<String>,
}

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        trials: 5,
        backends: vec!["postgres".into(), "mysql".into()],
        pooler: None,
        pooler32: None,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--trials" => args.trials = value()?.parse()?,
            "--backend" => args.backends = vec![value()?],
            "--pooler" => args.pooler = Some(value()?),
            "--pooler32" => args.pooler32 = Some(value()?),
            "--out" => args.out = Some(value()?),
            "--smoke" => args.trials = 1,
            "--child" => return child(it.collect()).map(|()| std::process::exit(0)),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

/// One scenario's trials.
#[derive(Default)]
struct Row {
    name: String,
    writers: usize,
    others: Vec<usize>,
    ours: Vec<usize>,
    before: Vec<usize>,
}

impl Row {
    fn target(&self) -> usize {
        self.writers.min(SLOTS)
    }

    fn line(&self) -> String {
        let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
        let target = self.target() as f64;
        let worst = self.ours.iter().min().copied().unwrap_or(0) as f64;
        // The expected distinct slots of `writers` uniform draws over SLOTS.
        let random = SLOTS as f64 * (1.0 - (1.0 - 1.0 / SLOTS as f64).powi(self.writers as i32));
        format!(
            "{:<34} {:>7} {:>9} {:>6} {:>10.1} {:>6.2} {:>10.1} {:>6.2} {:>8.1} {:>6.2}\n",
            self.name,
            self.writers,
            format!(
                "{}-{}",
                self.others.iter().min().unwrap_or(&0),
                self.others.iter().max().unwrap_or(&0)
            ),
            self.target(),
            mean(&self.ours),
            worst / target,
            mean(&self.before),
            mean(&self.before) / target,
            random,
            random / target,
        )
    }
}

const HEADER: &str = "scenario                           writers    others target  index avg  worst    pid/id avg  ratio   random  ratio\n";

/// What one trial found: the writers' distinct slots now and under `identity % slots`.
fn measure<C: TestConnection>(observer: &mut C, record: i32, identities: &[i64]) -> (usize, usize) {
    let ours = slots(observer, TABLE, record.into()).len();
    let before: std::collections::BTreeSet<i64> =
        identities.iter().map(|id| id % SLOTS as i64).collect();
    (ours, before.len())
}

/// Each live writer: its server identity, then one increment of `record` (after one of
/// [`WARM_UP`]: a PostgreSQL session's first write goes to its connection's slot and takes its
/// writer index for the next).
async fn write_all<F: Face>(writers: &mut [F::Conn], record: i32) -> Vec<i64> {
    warm_up::<F>(writers).await;
    let mut identities = Vec::with_capacity(writers.len());
    for conn in writers.iter_mut() {
        identities.push(F::identity(conn).await);
        F::heart(conn, record).await;
    }
    identities
}

/// Room for others: the server's limit (`max_connections`, read from it), less the pool, the
/// observer and a margin of 5; 74 at most.
fn others_cap<C: TestConnection>(observer: &mut C, pool: usize) -> usize {
    let limit = observer.query_i64(slotted_tests::connection_limit_sql(C::NAME));
    usize::try_from(limit)
        .unwrap_or(0)
        .saturating_sub(pool + 1 + 5)
        .min(74)
}

struct Trial<'a> {
    url: &'a str,
    record: i32,
    dice: Dice,
}

async fn fresh<F: Face>(
    t: &mut Trial<'_>,
    observer: &mut F::Sync,
    pool: usize,
) -> (usize, usize, usize) {
    let others = t.dice.below(others_cap(observer, pool) as u64 + 1) as usize;
    wait_for_room(observer, (pool + others) as i64);
    let (mut writers, bystanders) = open_interleaved::<F>(t.url, pool, others, &mut t.dice).await;
    let ids = write_all::<F>(&mut writers, t.record).await;
    let (ours, before) = measure(observer, t.record, &ids);
    drop((writers, bystanders));
    (others, ours, before)
}

async fn churned<F: Face>(
    t: &mut Trial<'_>,
    observer: &mut F::Sync,
    pool: usize,
) -> (usize, usize, usize) {
    let cap = others_cap(observer, pool);
    let others = t.dice.below(cap as u64 / 2 + 1) as usize;
    wait_for_room(observer, (pool + cap) as i64);
    let (mut writers, mut bystanders) =
        open_interleaved::<F>(t.url, pool, others, &mut t.dice).await;
    // The first generation writes too: it holds writer indices (and connection ids) when it goes.
    write_all::<F>(&mut writers, t.record + 1_000_000).await;
    let more = t.dice.below((cap - others) as u64 + 1) as usize;
    let mut writers =
        churn::<F>(t.url, observer, writers, &mut bystanders, more, &mut t.dice).await;
    let ids = write_all::<F>(&mut writers, t.record).await;
    let (ours, before) = measure(observer, t.record, &ids);
    drop((writers, bystanders));
    (others + more, ours, before)
}

/// Two processes' pools of `pool`, alive at once: the second process is this program.
async fn two_processes<F: Face>(
    t: &mut Trial<'_>,
    observer: &mut F::Sync,
    pool: usize,
) -> Result<(usize, usize, usize), BoxError> {
    let cap = others_cap(observer, 2 * pool);
    let others = t.dice.below(cap as u64 + 1) as usize;
    wait_for_room(observer, (2 * pool + others) as i64);
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--child",
            F::Sync::NAME,
            t.url,
            &pool.to_string(),
            &t.record.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("the child's stdout")?).lines();
    let mut child_ids = Vec::new();
    for line in lines.by_ref() {
        let line = line?;
        if line == "written" {
            break;
        }
        child_ids.push(line.parse::<i64>()?);
    }
    let (mut writers, bystanders) = open_interleaved::<F>(t.url, pool, others, &mut t.dice).await;
    let mut ids = write_all::<F>(&mut writers, t.record).await;
    ids.extend(child_ids);
    let (ours, before) = measure(observer, t.record, &ids);
    drop(child.stdin.take());
    child.wait()?;
    drop((writers, bystanders));
    Ok((others, ours, before))
}

/// The second process: `<backend> <url> <writers> <record>`; prints each writer's identity,
/// then `written`, and keeps its connections until stdin closes.
fn child(args: Vec<String>) -> Result<(), BoxError> {
    let [backend, url, n, record] = &args[..] else {
        return Err("--child <backend> <url> <writers> <record>".into());
    };
    fn run<C: TestConnection>(url: &str, n: usize, record: i32) {
        let mut writers: Vec<C> = (0..n).map(|_| C::open(url)).collect();
        for id in ready(write_all::<Sync<C>>(&mut writers, record)) {
            println!("{id}");
        }
        println!("written");
        let _ = std::io::stdout().flush();
        let mut rest = String::new();
        let _ = std::io::stdin().read_line(&mut rest);
    }
    let (n, record) = (n.parse()?, record.parse()?);
    match backend.as_str() {
        "postgres" => run::<diesel::PgConnection>(url, n, record),
        "mysql" => run::<diesel::MysqlConnection>(url, n, record),
        other => return Err(format!("no backend {other}").into()),
    }
    Ok(())
}

type Scenario = (&'static str, usize);

const SCENARIOS: [Scenario; 6] = [
    ("fresh", 8),
    ("fresh", 32),
    ("fresh", 64),
    ("churned", 32),
    ("churned", 64),
    ("2 processes", 32),
];

/// Every scenario on one face.
async fn face<F: Face>(
    url: &str,
    observer: &mut F::Sync,
    trials: usize,
    label: &str,
    record: &mut i32,
) -> Result<Vec<Row>, BoxError> {
    let mut rows = Vec::new();
    for (kind, pool) in SCENARIOS {
        let writers = if kind == "2 processes" {
            2 * pool
        } else {
            pool
        };
        let mut row = Row {
            name: format!("{label}, {kind}"),
            writers,
            ..Row::default()
        };
        for trial in 0..trials {
            *record += 1;
            let mut t = Trial {
                url,
                record: *record,
                dice: Dice((0x5eed ^ ((*record as u64) << 8)) | (trial as u64 + 1)),
            };
            let (others, ours, before) = match kind {
                "fresh" => fresh::<F>(&mut t, observer, pool).await,
                "churned" => churned::<F>(&mut t, observer, pool).await,
                _ => two_processes::<F>(&mut t, observer, pool).await?,
            };
            row.others.push(others);
            row.ours.push(ours);
            row.before.push(before);
        }
        eprint!("{}", row.line());
        rows.push(row);
    }
    Ok(rows)
}

/// 64 clients writing at once through a pooler: the server sessions that wrote hold one index
/// each, so the slots written are as many as they are. A database of its own, so that another
/// pooler's sessions hold no index on it.
fn behind_pooler(
    direct: &str,
    pooler: &str,
    server_connections: usize,
    trials: usize,
    record: &mut i32,
    runtime: &tokio::runtime::Runtime,
) -> Result<Vec<Row>, BoxError> {
    use diesel::connection::CacheSize;
    use slotted_core::pooling::{self, Pooling};
    pooling::set(Pooling::Transaction);
    let mut rows = Vec::new();
    for face in ["sync", "async"] {
        let mut row = Row {
            name: format!("postgres {face}, PgBouncer {server_connections}"),
            ..Row::default()
        };
        for _ in 0..trials {
            *record += 1;
            let r = *record;
            let mut observer = diesel::PgConnection::establish(direct)?;
            if face == "sync" {
                #[derive(Debug)]
                struct NoCache;
                impl diesel::r2d2::CustomizeConnection<diesel::PgConnection, diesel::r2d2::Error> for NoCache {
                    fn on_acquire(
                        &self,
                        conn: &mut diesel::PgConnection,
                    ) -> Result<(), diesel::r2d2::Error> {
                        conn.set_prepared_statement_cache_size(CacheSize::Disabled);
                        Ok(())
                    }
                }
                let pool = diesel::r2d2::Pool::builder()
                    .max_size(64)
                    .connection_customizer(Box::new(NoCache))
                    .build(diesel::r2d2::ConnectionManager::<diesel::PgConnection>::new(pooler))?;
                std::thread::scope(|s| {
                    for _ in 0..64 {
                        s.spawn(|| {
                            for r in [WARM_UP, r] {
                                for _ in 0..20 {
                                    let mut conn =
                                        pool.get().expect("a connection through the pooler");
                                    Reaction::hearts_of(r)
                                        .increment(&mut *conn)
                                        .expect("an increment");
                                }
                            }
                        });
                    }
                });
            } else {
                runtime.block_on(async {
                    let pool = diesel_async::pooled_connection::deadpool::Pool::builder(
                        slotted_tests::asynch::pooler_manager(pooler),
                    )
                    .max_size(64)
                    .build()?;
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..64 {
                        let pool = pool.clone();
                        tasks.spawn(async move {
                            for r in [WARM_UP, r] {
                                for _ in 0..20 {
                                    let mut conn =
                                        pool.get().await.expect("a connection through the pooler");
                                    Reaction::hearts_of(r)
                                        .increment_async(&mut conn)
                                        .await
                                        .expect("an increment");
                                }
                            }
                        });
                    }
                    while let Some(task) = tasks.join_next().await {
                        task?;
                    }
                    Ok::<(), BoxError>(())
                })?;
            }
            // The server sessions that wrote: the writer indices held on this database.
            #[derive(QueryableByName)]
            struct Pid {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                pid: i32,
            }
            let pids: Vec<Pid> = diesel::sql_query(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936486260 \
                 AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .load(&mut observer)?;
            let ids: Vec<i64> = pids.iter().map(|p| i64::from(p.pid)).collect();
            let (ours, before) = measure(&mut observer, r, &ids);
            let total: i64 = slots(&mut observer, TABLE, r.into()).values().sum();
            assert_eq!(total, 64 * 20, "every increment counted");
            row.writers = row.writers.max(ids.len());
            row.others.push(0);
            row.ours.push(ours);
            row.before.push(before);
            // A trial's sessions are the pooler's: the next trial's sessions are the same ones.
        }
        eprint!("{}", row.line());
        rows.push(row);
    }
    Ok(rows)
}

fn main() -> Result<(), BoxError> {
    let args = args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut out = format!(
        "# The default slot assignment: distinct slots of the writers alive at once, {SLOTS} slots, {} trials each\n\
         # cargo run --release --example spread --features postgres,mysql,async -- --trials {}{}\n\
         # index: writer indices (this version); pid/id: pg_backend_pid() or CONNECTION_ID() % slots (before),\n\
         # for the same connections; random: the expected distinct slots of one draw per writer.\n\
         # worst and ratio: against min(writers, slots); the target is worst >= 0.95.\n\n{HEADER}",
        args.trials,
        args.trials,
        if args.pooler.is_some() { " --pooler URL --pooler32 URL" } else { "" },
    );
    eprint!("{HEADER}");
    let mut record = 0;
    for backend in &args.backends {
        macro_rules! on {
            ($sync:ty, $async:ty) => {{
                let db = TestDb::new::<$sync>(&format!("spread_bench"))
                    .ok_or_else(|| format!("{backend}: its URL is not set"))?;
                let mut observer = <$sync>::open(&db.url);
                observer
                    .run_pending_migrations(CounterMigrations::of::<Reaction>())
                    .map_err(|e| e.to_string())?;
                let mut rows = ready(face::<Sync<$sync>>(
                    &db.url,
                    &mut observer,
                    args.trials,
                    &format!("{backend} sync"),
                    &mut record,
                ))?;
                rows.extend(
                    runtime.block_on(face::<slotted_tests::spread::Async<$async>>(
                        &db.url,
                        &mut observer,
                        args.trials,
                        &format!("{backend} async"),
                        &mut record,
                    ))?,
                );
                (db, rows)
            }};
        }
        let (db, rows) = match backend.as_str() {
            "postgres" => on!(diesel::PgConnection, diesel_async::AsyncPgConnection),
            "mysql" => on!(diesel::MysqlConnection, diesel_async::AsyncMysqlConnection),
            other => return Err(format!("no backend {other}").into()),
        };
        for row in &rows {
            out += &row.line();
        }
        drop(db);
        if backend == "postgres" {
            for (url, n) in [(&args.pooler, 8), (&args.pooler32, 32)] {
                if let Some(url) = url {
                    let db = TestDb::new::<diesel::PgConnection>(&format!("spread_pooler_{n}"))
                        .ok_or("postgres: its URL is not set")?;
                    diesel::PgConnection::establish(&db.url)?
                        .run_pending_migrations(CounterMigrations::of::<Reaction>())
                        .map_err(|e| e.to_string())?;
                    let through = slotted_examples::with_database(
                        url,
                        db.url.rsplit('/').next().unwrap_or_default(),
                    );
                    for row in
                        behind_pooler(&db.url, &through, n, args.trials, &mut record, &runtime)?
                    {
                        out += &row.line();
                    }
                }
            }
        }
    }
    println!("{out}");
    if let Some(dir) = &args.out {
        let path = std::path::Path::new(dir).join("spread.txt");
        std::fs::write(&path, &out)?;
        eprintln!("saved {}", path.display());
    }
    Ok(())
}
