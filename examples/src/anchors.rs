//! The contention benchmark's raw anchors: the same transactions as the library's, written in
//! plain SQL and run by a raw client, so that a ratio below 1 against them is the library's cost
//! and nothing else.
//!
//! - PostgreSQL: `pgbench -M prepared -j 2` (event-driven: two threads multiplex every
//!   connection), with a custom script per counter;
//! - PostgreSQL, threads: libpq's C API (the library under Diesel's `PgConnection`), one OS
//!   thread per connection, every statement prepared as pgbench's are;
//! - PostgreSQL, tasks (feature `async`): `tokio-postgres` (the client under diesel-async),
//!   prepared statements, one task per connection on the caller's tokio runtime;
//! - MariaDB, threads: libmariadb's C API (the library under Diesel's `MysqlConnection`), one OS
//!   thread per connection, text protocol;
//! - MariaDB, tasks (feature `async`): `mysql_async` (the client under diesel-async), prepared
//!   statements, one task per connection on the caller's tokio runtime.
//!
//! `mariadb-slap` cannot hold a transaction open on the client (its only pause is a server-side
//! `DO SLEEP`, a fifth round trip), hence the raw programs.
//!
//! Every anchor works on the benchmark's own tables: `bench_single (id, count)`,
//! `bench_private_hits_slots (record_id, slot, count)` and `bench_events (writer)`.
//!
//! The reads benchmark's raw anchors (pgbench scripts of its queries, libmariadb's prepared
//! statements) are in [`reads`].

use std::process::Command;
use std::time::Duration;

use crate::BoxError;

pub mod reads;

/// Which counter an anchor increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `UPDATE bench_single SET count = count + 1 WHERE id = 1`: one row for every writer.
    SingleRow,
    /// The upsert into `bench_private_hits_slots`, one record per writer: no row shared.
    PrivateRow,
}

impl Target {
    /// The anchor's name in the benchmark's tables.
    pub fn name(self) -> &'static str {
        match self {
            Target::SingleRow => "single-row",
            Target::PrivateRow => "private-row",
        }
    }
}

/// What a run of an anchor did.
#[derive(Debug, Default)]
pub struct Load {
    /// Transactions (or bare statements) committed.
    pub committed: u64,
    /// Over how long, in seconds.
    pub seconds: f64,
    /// Every committed transaction's latency, when the client reports them; else empty.
    pub latencies_ms: Vec<f64>,
    /// pgbench's average latency, when that is all it reports.
    pub average_ms: Option<f64>,
    /// Failed transactions.
    pub errors: u64,
}

/// The counter statement, `writer` standing for the writer's number (`:client_id` in pgbench,
/// a literal in the text protocol, `?` in a prepared statement).
fn counter_sql(target: Target, dialect_mysql: bool, writer: &str) -> String {
    match (target, dialect_mysql) {
        (Target::SingleRow, _) => "UPDATE bench_single SET count = count + 1 WHERE id = 1".into(),
        (Target::PrivateRow, false) => format!(
            "INSERT INTO bench_private_hits_slots (record_id, slot, count) VALUES ({writer}, 0, 1) \
             ON CONFLICT (record_id, slot) DO UPDATE SET count = bench_private_hits_slots.count + excluded.count"
        ),
        (Target::PrivateRow, true) => format!(
            "INSERT INTO bench_private_hits_slots (record_id, slot, count) VALUES ({writer}, 0, 1) \
             ON DUPLICATE KEY UPDATE count = count + 1"
        ),
    }
}

fn event_sql(writer: &str) -> String {
    format!("INSERT INTO bench_events (writer) VALUES ({writer})")
}

/// The pgbench script: the bare statement, or the business transaction (`BEGIN`, the event,
/// the counter, a client-side pause of `hold`, `COMMIT`).
pub fn pgbench_script(target: Target, hold: Option<Duration>) -> String {
    let counter = counter_sql(target, false, ":client_id");
    match hold {
        None => format!("{counter};\n"),
        Some(hold) => format!(
            "BEGIN;\n{};\n{counter};\n\\sleep {} us\nCOMMIT;\n",
            event_sql(":client_id"),
            hold.as_micros()
        ),
    }
}

/// Runs `pgbench -n -M prepared -c writers -j 2 -T seconds` with [`pgbench_script`] against
/// `url` (a libpq URI, such as `postgres:///test?host=/var/run/postgresql&user=postgres`).
pub fn pgbench(
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    pgbench_with("prepared", url, target, hold, writers, seconds)
}

/// What a pgbench run printed: its transactions, the time they took (transactions / tps), its
/// failed transactions and its average latency.
pub struct PgbenchRun {
    pub committed: u64,
    pub seconds: f64,
    pub failed: u64,
    pub average_ms: Option<f64>,
}

/// Reads a finished pgbench's output; its error output when it failed.
pub fn pgbench_run(output: &std::process::Output) -> Result<PgbenchRun, BoxError> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "pgbench failed: {}{}",
            stdout,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let field = |prefix: &str| -> Option<f64> {
        stdout.lines().find_map(|line| {
            let rest = line.trim().strip_prefix(prefix)?;
            // `-t` prints the transactions as `done/planned`.
            rest.split_whitespace()
                .next()?
                .split('/')
                .next()?
                .parse()
                .ok()
        })
    };
    let committed = field("number of transactions actually processed:")
        .ok_or_else(|| format!("pgbench printed no transaction count: {stdout}"))?;
    let tps = field("tps =").ok_or_else(|| format!("pgbench printed no tps: {stdout}"))?;
    Ok(PgbenchRun {
        committed: committed as u64,
        seconds: committed / tps,
        failed: field("number of failed transactions:").unwrap_or(0.0) as u64,
        average_ms: field("latency average ="),
    })
}

/// [`pgbench`] with another query protocol (`-M`): `extended` (unnamed statements, parsed on
/// every run, as behind a transaction pooler), `simple` or `prepared`.
pub fn pgbench_with(
    protocol: &str,
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    let script = std::env::temp_dir().join(format!(
        "slotted-pgbench-{}-{}-{}.sql",
        std::process::id(),
        target.name(),
        hold.map_or(0, |h| h.as_micros())
    ));
    std::fs::write(&script, pgbench_script(target, hold))?;
    let output = Command::new("pgbench")
        .args(["-n", "-M", protocol, "-c", &writers.to_string()])
        .args(["-j", &writers.min(2).to_string()])
        .args(["-T", &(seconds.ceil().max(1.0) as u64).to_string()])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output()
        .map_err(|e| format!("pgbench: {e} (is it installed?)"))?;
    let _ = std::fs::remove_file(&script);
    let run = pgbench_run(&output)?;
    Ok(Load {
        committed: run.committed,
        seconds: run.seconds,
        latencies_ms: Vec::new(),
        average_ms: run.average_ms,
        errors: run.failed,
    })
}

/// Host, user, password, database and socket of a `mysql://user:pass@host:port/db?unix_socket=…`
/// URL.
#[derive(Debug, Clone, Default)]
pub struct MysqlUrl {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
    pub socket: Option<String>,
}

impl MysqlUrl {
    pub fn parse(url: &str) -> Result<Self, BoxError> {
        let rest = url
            .strip_prefix("mysql://")
            .ok_or_else(|| format!("not a mysql:// URL: {url}"))?;
        let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (auth, hostdb) = main.rsplit_once('@').unwrap_or(("root", main));
        let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
        let (hostport, database) = hostdb.split_once('/').unwrap_or((hostdb, ""));
        let (host, port) = hostport.split_once(':').unwrap_or((hostport, "3306"));
        let socket = query
            .split('&')
            .find_map(|kv| {
                kv.strip_prefix("unix_socket=")
                    .or(kv.strip_prefix("socket="))
            })
            .map(str::to_owned);
        Ok(MysqlUrl {
            host: host.to_owned(),
            port: port.parse()?,
            user: user.to_owned(),
            password: password.to_owned(),
            database: database.to_owned(),
            socket,
        })
    }

    /// The URL as `mysql_async` (hence diesel-async) reads it: `socket=`, not libmysqlclient's
    /// (hence Diesel's) `unix_socket=`.
    pub fn for_mysql_async(url: &str) -> String {
        url.replace("unix_socket=", "socket=")
    }
}

/// One raw thread-per-connection client's connection, ready for the benchmark's statements.
#[cfg(any(feature = "async", feature = "postgres", feature = "mysql"))]
trait RawThread: Send {
    /// The counter statement alone.
    fn bare(&mut self) -> Result<(), String>;
    /// `BEGIN`, the event, the counter, `std::thread::sleep(hold)`, `COMMIT`.
    fn business(&mut self, hold: Duration) -> Result<(), String>;
    /// After a failed transaction.
    fn rollback(&mut self);
}

/// Runs one OS thread per connection for `seconds`, each running transactions back to back.
#[cfg(any(feature = "async", feature = "postgres", feature = "mysql"))]
fn run_threads<T: RawThread>(
    conns: Vec<T>,
    hold: Option<Duration>,
    seconds: f64,
) -> Result<Load, BoxError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Instant;

    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(conns.len() + 1));
    let tallies = std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let (stop, barrier) = (stop.clone(), barrier.clone());
                scope.spawn(move || {
                    let mut load = Load::default();
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let result = match hold {
                            None => conn.bare(),
                            Some(hold) => conn.business(hold),
                        };
                        match result {
                            Ok(()) => {
                                load.committed += 1;
                                load.latencies_ms
                                    .push(started.elapsed().as_secs_f64() * 1e3);
                            }
                            Err(_) => {
                                conn.rollback();
                                load.errors += 1;
                            }
                        }
                    }
                    load
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a raw writer panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(merge(tallies, seconds))
}

#[cfg(any(feature = "async", feature = "mysql"))]
mod raw_mysql;

#[cfg(feature = "async")]
pub use raw_mysql::threads as libmariadb_threads;

#[cfg(feature = "mysql")]
pub use raw_mysql::scripted as libmariadb_scripted;

#[cfg(feature = "postgres")]
mod raw_pq;

#[cfg(feature = "postgres")]
pub use raw_pq::threads as libpq_threads;

/// Sums the writers' loads.
#[cfg(any(feature = "async", feature = "postgres", feature = "mysql"))]
fn merge(loads: Vec<Load>, seconds: f64) -> Load {
    let mut all = Load {
        seconds,
        ..Load::default()
    };
    for load in loads {
        all.committed += load.committed;
        all.errors += load.errors;
        all.latencies_ms.extend(load.latencies_ms);
    }
    all
}

/// One raw async client's connection, prepared for the benchmark's statements.
#[cfg(feature = "async")]
trait RawTask: Send + 'static {
    /// The counter statement alone.
    fn bare(&mut self, w: i32) -> impl std::future::Future<Output = Result<(), BoxError>> + Send;
    /// `BEGIN`, the event, the counter, `timer.sleep(hold)`, `COMMIT`.
    fn business(
        &mut self,
        w: i32,
        timer: &mut crate::hold::Hold,
        hold: Duration,
    ) -> impl std::future::Future<Output = Result<(), BoxError>> + Send;
    /// After a failed transaction.
    fn rollback(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

/// Runs one task per connection on the current tokio runtime for `seconds`, each running
/// transactions back to back.
#[cfg(feature = "async")]
async fn run_tasks<T: RawTask>(
    conns: Vec<T>,
    hold: Option<Duration>,
    seconds: f64,
) -> Result<Load, BoxError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(tokio::sync::Barrier::new(conns.len() + 1));
    // The timers are made before the tasks: a task that failed before the barrier would hang it.
    let timers = (0..conns.len())
        .map(|_| crate::hold::Hold::new())
        .collect::<Result<Vec<_>, _>>()?;
    let tasks: Vec<_> = conns
        .into_iter()
        .zip(timers)
        .enumerate()
        .map(|(w, (mut conn, mut timer))| {
            let (stop, barrier) = (stop.clone(), barrier.clone());
            tokio::spawn(async move {
                let w = w as i32;
                let mut load = Load::default();
                barrier.wait().await;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = match hold {
                        None => conn.bare(w).await,
                        Some(hold) => conn.business(w, &mut timer, hold).await,
                    };
                    match result {
                        Ok(()) => {
                            load.committed += 1;
                            load.latencies_ms
                                .push(started.elapsed().as_secs_f64() * 1e3);
                        }
                        Err(_) => {
                            conn.rollback().await;
                            load.errors += 1;
                        }
                    }
                }
                load
            })
        })
        .collect();
    barrier.wait().await;
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut loads = Vec::new();
    for task in tasks {
        loads.push(task.await?);
    }
    Ok(merge(loads, seconds))
}

/// `writers` tasks on the current tokio runtime, one `mysql_async` connection each, prepared
/// statements, for `seconds`.
#[cfg(feature = "async")]
pub async fn mysql_async_tasks(
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    use mysql_async::prelude::Queryable;

    struct Task {
        conn: mysql_async::Conn,
        event: mysql_async::Statement,
        counter: mysql_async::Statement,
        target: Target,
    }
    impl Task {
        fn counter_params(&self, w: i32) -> mysql_async::Params {
            match self.target {
                Target::SingleRow => mysql_async::Params::Empty,
                Target::PrivateRow => (w,).into(),
            }
        }
    }
    impl RawTask for Task {
        async fn bare(&mut self, w: i32) -> Result<(), BoxError> {
            let params = self.counter_params(w);
            Ok(self.conn.exec_drop(&self.counter, params).await?)
        }
        async fn business(
            &mut self,
            w: i32,
            timer: &mut crate::hold::Hold,
            hold: Duration,
        ) -> Result<(), BoxError> {
            let params = self.counter_params(w);
            self.conn.query_drop("BEGIN").await?;
            self.conn.exec_drop(&self.event, (w,)).await?;
            self.conn.exec_drop(&self.counter, params).await?;
            timer.sleep(hold).await?;
            Ok(self.conn.query_drop("COMMIT").await?)
        }
        async fn rollback(&mut self) {
            let _ = self.conn.query_drop("ROLLBACK").await;
        }
    }

    let opts = mysql_async::Opts::from_url(&MysqlUrl::for_mysql_async(url))?;
    let mut conns = Vec::new();
    for _ in 0..writers {
        let mut conn = mysql_async::Conn::new(opts.clone()).await?;
        let event = conn.prep(event_sql("?")).await?;
        let counter = conn.prep(counter_sql(target, true, "?")).await?;
        conns.push(Task {
            conn,
            event,
            counter,
            target,
        });
    }
    run_tasks(conns, hold, seconds).await
}

/// `writers` tasks on the current tokio runtime, one `tokio-postgres` connection each (the
/// client under diesel-async's `AsyncPgConnection`), prepared statements, for `seconds`: the
/// async face's raw client on the same runtime and timer.
#[cfg(all(feature = "async", feature = "postgres"))]
pub async fn tokio_postgres_tasks(
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    struct Task {
        client: tokio_postgres::Client,
        event: tokio_postgres::Statement,
        counter: tokio_postgres::Statement,
        target: Target,
    }
    impl Task {
        async fn counter(&self, w: i32) -> Result<u64, tokio_postgres::Error> {
            match self.target {
                Target::SingleRow => self.client.execute(&self.counter, &[]).await,
                Target::PrivateRow => self.client.execute(&self.counter, &[&w]).await,
            }
        }
    }
    impl RawTask for Task {
        async fn bare(&mut self, w: i32) -> Result<(), BoxError> {
            Ok(self.counter(w).await.map(drop)?)
        }
        async fn business(
            &mut self,
            w: i32,
            timer: &mut crate::hold::Hold,
            hold: Duration,
        ) -> Result<(), BoxError> {
            self.client.batch_execute("BEGIN").await?;
            self.client.execute(&self.event, &[&w]).await?;
            self.counter(w).await?;
            timer.sleep(hold).await?;
            Ok(self.client.batch_execute("COMMIT").await?)
        }
        async fn rollback(&mut self) {
            let _ = self.client.batch_execute("ROLLBACK").await;
        }
    }

    let mut conns = Vec::new();
    for _ in 0..writers {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let event = client.prepare(&event_sql("$1")).await?;
        let counter = client.prepare(&counter_sql(target, false, "$1")).await?;
        conns.push(Task {
            client,
            event,
            counter,
            target,
        });
    }
    run_tasks(conns, hold, seconds).await
}
