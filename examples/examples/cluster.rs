//! The contention benchmark on a multi-primary cluster (MariaDB Galera): single-row against
//! slotted strategies, with writers spread over the nodes, in one run.
//!
//! ```sh
//! scripts/galera start
//! cargo run --release --example cluster --features mysql -- --urls "$(scripts/galera urls)" --out docs/bench
//! ```
//!
//! Writer `w` connects to node `w % nodes`; the writers of one node stand for one application
//! process there (thread `w / nodes` of it). Every increment is one autocommit upsert (or, with
//! `--hold-ms`, a transaction that holds it that long before `COMMIT`), with
//! `wsrep_retry_autocommit = 0`; one that loses certification (1213) is retried by the client
//! and counted as a conflict. The modes, all over the same number of slots (`--slots`, 16):
//!
//! - `single-row`: `UPDATE … SET count = count + 1` of one row;
//! - `random`: a slot drawn for every write;
//! - `thread`: slot `(offset + thread) % slots`, `offset` drawn once per process (per node), as
//!   slotted's `thread` strategy does in each process;
//! - `connection`: `MOD(CONNECTION_ID(), slots)`, computed by the server;
//! - `connection+node`: `MOD(CONNECTION_ID() * @@auto_increment_increment + @@auto_increment_offset - 1, slots)`:
//!   Galera gives each node its own `auto_increment_offset` (1, 2, 3) and sets the increment to
//!   the cluster size, so no two connections of the cluster get the same number before the
//!   `MOD` (after it they can: the nodes' connection ids are far apart);
//! - `node-range`: `MOD(CONNECTION_ID(), slots DIV @@auto_increment_increment) * @@auto_increment_increment + @@auto_increment_offset - 1`:
//!   each node writes only its own slots (node 1: 0, 3, 6, …; node 2: 1, 4, 7, …), so writers
//!   on two nodes never share a row; two on one node may, and then wait on the row lock
//!   instead of aborting. On a server without Galera (offset 1, increment 1) it is `connection`;
//! - `private`: writer `w` writes slot `w` alone (the ceiling: no row shared);
//! - `lib-thread`, `lib-random`: the library's own `increment`, with all writers in this one
//!   process (so `lib-thread` gives every writer its own slot, like `private`).
//!
//! Every mode's total is checked, on every node, against the increments committed.
//!
//! With `--maintenance`, it measures maintenance beside writers instead: writers in business
//! transactions (the library's `increment` of two records of `--records`, held open `--hold-ms`,
//! through `transaction_with_retry`), first alone, then while one more connection (on the last
//! node) runs `compact_all(MAINTENANCE_BATCH)` passes back to back. It prints passes completed
//! and failed, slot rows folded per second, batches rerun, records left for a later pass, and
//! the writers' transactions/s against writers alone, and checks every total. With one URL it
//! runs on that single server (`postgres://…` needs the `postgres` feature). `--append FILE`
//! adds the table, headed by `--label` and the command, to FILE.
//!
//! ```sh
//! cargo run --release --example cluster --features mysql,postgres -- --maintenance \
//!     --urls "$(scripts/galera urls)" --writers-per-node 8 --hold-ms 2 --label after \
//!     --append docs/bench/cluster-maintenance.txt
//! ```

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, SmallInt};
use diesel_migrations::MigrationHarness;
use slotted_core::{retry::Retryable, CounterMigrations, SlottedCounter};
use slotted_examples::chart::{throughput_chart, Series};
use slotted_examples::{with_database, BoxError};

#[derive(SlottedCounter)]
#[diesel(table_name = clips)]
#[slotted(counter = thread_likes, slots = 16)]
#[slotted(counter = random_likes, slots = 16, strategy = random)]
struct Clip {
    #[allow(dead_code)]
    id: i32,
}

const MODES: [&str; 9] = [
    "single-row",
    "random",
    "thread",
    "connection",
    "connection+node",
    "node-range",
    "private",
    "lib-thread",
    "lib-random",
];

struct Options {
    urls: Vec<String>,
    seconds: f64,
    per_node: Vec<usize>,
    rounds: usize,
    slots: i16,
    hold: Duration,
    out: Option<std::path::PathBuf>,
    maintenance: bool,
    records: i32,
    label: String,
    append: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        urls: std::env::var("SLOTTED_GALERA_URLS")
            .unwrap_or_default()
            .split(',')
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect(),
        seconds: 3.0,
        per_node: vec![1, 2, 4],
        rounds: 2,
        slots: 16,
        hold: Duration::ZERO,
        out: None,
        maintenance: false,
        records: 20,
        label: String::new(),
        append: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--urls" => o.urls = value()?.split(',').map(str::to_owned).collect(),
            "--seconds" => o.seconds = value()?.parse()?,
            "--writers-per-node" => {
                o.per_node = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--rounds" => o.rounds = value()?.parse()?,
            "--slots" => o.slots = value()?.parse()?,
            "--hold-ms" => o.hold = Duration::from_millis(value()?.parse()?),
            "--out" => o.out = Some(value()?.into()),
            "--maintenance" => o.maintenance = true,
            "--records" => o.records = value()?.parse()?,
            "--label" => o.label = value()?,
            "--append" => o.append = Some(value()?.into()),
            "--smoke" => (o.seconds, o.per_node, o.rounds) = (0.3, vec![1], 1),
            _ => {
                return Err(format!(
                    "unknown argument {arg}; see the top of examples/examples/cluster.rs"
                )
                .into())
            }
        }
    }
    if o.maintenance && !o.urls.is_empty() {
        return Ok(o);
    }
    if o.urls.len() < 2 {
        return Err("--urls (or SLOTTED_GALERA_URLS): the nodes' URLs, comma-separated, at least 2 (scripts/galera urls)".into());
    }
    if !(1..=16).contains(&o.slots) {
        return Err("--slots: 1 to 16 (the library's modes have 16)".into());
    }
    Ok(o)
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn number(conn: &mut MysqlConnection, sql: &str) -> QueryResult<i64> {
    diesel::sql_query(sql)
        .get_result::<Number>(conn)
        .map(|r| r.n)
}

fn open(url: &str) -> Result<MysqlConnection, BoxError> {
    let mut conn = MysqlConnection::establish(url)?;
    conn.batch_execute("SET SESSION wsrep_retry_autocommit = 0, SESSION wsrep_sync_wait = 1")?;
    Ok(conn)
}

/// One increment in `mode` of record `id`, as writer `w` (thread `thread` of its node's
/// process, whose offset is `offset`).
fn increment(
    conn: &mut MysqlConnection,
    mode: &str,
    id: i32,
    slot: i16,
    slots: i16,
) -> QueryResult<()> {
    let upsert = |slot_sql: &str| {
        format!("INSERT INTO raw_slots (record_id, slot, count) VALUES (?, {slot_sql}, 1) ON DUPLICATE KEY UPDATE count = count + 1")
    };
    let bound = upsert("?");
    match mode {
        "single-row" => diesel::sql_query("UPDATE single_row SET count = count + 1 WHERE id = ?")
            .bind::<Integer, _>(id)
            .execute(conn)
            .map(drop),
        "random" | "thread" | "private" => diesel::sql_query(bound)
            .bind::<Integer, _>(id)
            .bind::<SmallInt, _>(slot)
            .execute(conn)
            .map(drop),
        "connection" => diesel::sql_query(upsert(&format!("MOD(CONNECTION_ID(), {slots})")))
            .bind::<Integer, _>(id)
            .execute(conn)
            .map(drop),
        "connection+node" => diesel::sql_query(upsert(&format!(
            "MOD(CONNECTION_ID() * @@auto_increment_increment + @@auto_increment_offset - 1, {slots})"
        )))
        .bind::<Integer, _>(id)
        .execute(conn)
        .map(drop),
        "node-range" => diesel::sql_query(upsert(&format!(
            "MOD(CONNECTION_ID(), {slots} DIV @@auto_increment_increment) * @@auto_increment_increment + @@auto_increment_offset - 1"
        )))
        .bind::<Integer, _>(id)
        .execute(conn)
        .map(drop),
        "lib-thread" => Clip::thread_likes_of(id).increment(conn).map_err(into_diesel),
        "lib-random" => Clip::random_likes_of(id).increment(conn).map_err(into_diesel),
        other => unreachable!("mode {other}"),
    }
}

fn into_diesel(e: slotted_core::Error) -> diesel::result::Error {
    match e {
        slotted_core::Error::Database { source, .. } | slotted_core::Error::Diesel(source) => {
            source
        }
        other => diesel::result::Error::QueryBuilderError(other.to_string().into()),
    }
}

fn total(conn: &mut MysqlConnection, mode: &str, id: i32) -> Result<i64, BoxError> {
    Ok(match mode {
        "single-row" => number(conn, &format!("SELECT count AS n FROM single_row WHERE id = {id}"))?,
        "lib-thread" => Clip::thread_likes_of(id).total(conn)?,
        "lib-random" => Clip::random_likes_of(id).total(conn)?,
        _ => number(conn, &format!("SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) AS n FROM raw_slots WHERE record_id = {id}"))?,
    })
}

#[derive(Default, Clone)]
struct Run {
    committed: u64,
    conflicts: u64,
    seconds: f64,
}

/// Runs `mode` on record `id` with `writers` writers spread over the nodes for `o.seconds`.
fn run(o: &Options, urls: &[String], mode: &str, id: i32, writers: usize) -> Result<Run, BoxError> {
    let nodes = urls.len();
    if mode == "single-row" {
        open(&urls[0])?.batch_execute(&format!(
            "INSERT INTO single_row (id, count) VALUES ({id}, 0)"
        ))?;
    }
    // One offset per node's process, as slotted's thread strategy draws one per process.
    let offsets: Vec<i16> = (0..nodes).map(|_| rand::random_range(0..1024)).collect();
    let conns: Vec<MysqlConnection> = (0..writers)
        .map(|w| open(&urls[w % nodes]))
        .collect::<Result<_, _>>()?;
    let (committed, conflicts) = (AtomicU64::new(0), AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(writers + 1);
    let started = std::thread::scope(|s| -> Result<Instant, BoxError> {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(w, mut conn)| {
                let (committed, conflicts, stop, barrier, offsets) =
                    (&committed, &conflicts, &stop, &barrier, &offsets);
                s.spawn(move || -> QueryResult<()> {
                    let (node, thread) = (w % nodes, (w / nodes) as i16);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let slot = match mode {
                            "random" => rand::random_range(0..o.slots),
                            "thread" => (offsets[node] + thread) % o.slots,
                            "private" => (w as i16) % o.slots,
                            _ => 0,
                        };
                        let attempt = |conn: &mut MysqlConnection| {
                            if o.hold.is_zero() {
                                increment(conn, mode, id, slot, o.slots)
                            } else {
                                conn.transaction(|conn| {
                                    increment(conn, mode, id, slot, o.slots)?;
                                    std::thread::sleep(o.hold);
                                    Ok(())
                                })
                            }
                        };
                        match attempt(&mut conn) {
                            Ok(()) => committed.fetch_add(1, Ordering::Relaxed),
                            Err(e) if e.is_retryable() => conflicts.fetch_add(1, Ordering::Relaxed),
                            Err(e) => return Err(e),
                        };
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(o.seconds));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| "a writer panicked")??;
        }
        Ok(started)
    })?;
    let result = Run {
        committed: committed.into_inner(),
        conflicts: conflicts.into_inner(),
        seconds: started.elapsed().as_secs_f64(),
    };
    // Exact, and the same on every node.
    for url in urls {
        let t = total(&mut open(url)?, mode, id)?;
        if t != result.committed as i64 {
            return Err(format!(
                "{mode}: total {t} on {url}, but {} increments committed",
                result.committed
            )
            .into());
        }
    }
    Ok(result)
}

fn main() -> Result<(), BoxError> {
    let o = options()?;
    if o.maintenance {
        return maintenance::main(&o);
    }
    let nodes = o.urls.len();
    let db = "slotted_bench_cluster";
    let mut admin = MysqlConnection::establish(&o.urls[0])?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))?;
    admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
    let urls: Vec<String> = o.urls.iter().map(|u| with_database(u, db)).collect();
    let mut first = open(&urls[0])?;
    first.batch_execute(
        "CREATE TABLE single_row (id INT PRIMARY KEY, count BIGINT NOT NULL); \
         CREATE TABLE raw_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot))",
    )?;
    first.run_pending_migrations(CounterMigrations::of::<Clip>())?;
    for url in &urls[1..] {
        // The first read on each node waits until it has applied the tables.
        let mut conn = MysqlConnection::establish(&with_database(url, "test"))?;
        conn.batch_execute("SET SESSION wsrep_sync_wait = 1")?;
        number(
            &mut conn,
            &format!(
                "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = '{db}'"
            ),
        )?;
    }

    let mut report = String::new();
    let version = number(
        &mut first,
        "SELECT CAST(VARIABLE_VALUE AS SIGNED) AS n FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'",
    )
    .unwrap_or(0);
    writeln!(report, "MariaDB Galera, {version} nodes in the cluster, {nodes} used; {} slots; {} s per mode and round, {} rounds; {}",
        o.slots, o.seconds, o.rounds,
        if o.hold.is_zero() { "autocommit increments".to_owned() } else { format!("transactions holding the increment {} ms", o.hold.as_millis()) })?;
    // What the connection strategies see: CONNECTION_ID() and the node's auto_increment offset.
    for url in &urls {
        let mut c = open(url)?;
        let id = number(&mut c, "SELECT CAST(CONNECTION_ID() AS SIGNED) AS n")?;
        let off = number(
            &mut c,
            "SELECT CAST(@@auto_increment_offset AS SIGNED) AS n",
        )?;
        let inc = number(
            &mut c,
            "SELECT CAST(@@auto_increment_increment AS SIGNED) AS n",
        )?;
        let sid = number(&mut c, "SELECT CAST(@@server_id AS SIGNED) AS n")?;
        writeln!(report, "  {url}: CONNECTION_ID() {id}, auto_increment_offset {off}, auto_increment_increment {inc}, server_id {sid}")?;
    }
    writeln!(report, "\n| writers | mode | increments/s | committed | conflicts | conflicts per 1,000 increments |\n|---:|---|---:|---:|---:|---:|")?;
    print!("{report}");

    let mut json = String::from("{\n  \"backend\": \"mariadb-galera\",\n");
    writeln!(json, "  \"nodes\": {nodes}, \"slots\": {}, \"seconds\": {}, \"rounds\": {}, \"hold_ms\": {},\n  \"runs\": [", o.slots, o.seconds, o.rounds, o.hold.as_millis())?;
    let mut series: Vec<Series> = MODES
        .iter()
        .map(|m| Series {
            name: (*m).into(),
            points: vec![],
        })
        .collect();
    let mut id = 0;
    let mut rows = Vec::new();
    for &per_node in &o.per_node {
        let writers = per_node * nodes;
        let mut sums = vec![Run::default(); MODES.len()];
        for _ in 0..o.rounds {
            // Rounds interleave the modes, so that a slow moment of the machine hits them alike.
            for (m, mode) in MODES.iter().enumerate() {
                id += 1;
                let r = run(&o, &urls, mode, id, writers)?;
                sums[m].committed += r.committed;
                sums[m].conflicts += r.conflicts;
                sums[m].seconds += r.seconds;
            }
        }
        for (m, mode) in MODES.iter().enumerate() {
            let s = &sums[m];
            let rate = s.committed as f64 / s.seconds;
            let per_1000 = 1000.0 * s.conflicts as f64 / (s.committed.max(1)) as f64;
            let line = format!(
                "| {writers} | {mode} | {rate:.0} | {} | {} | {per_1000:.1} |",
                s.committed, s.conflicts
            );
            println!("{line}");
            report.push_str(&line);
            report.push('\n');
            series[m].points.push((writers as u32, rate));
            rows.push(format!(
                "    {{\"writers\": {writers}, \"mode\": \"{mode}\", \"increments_per_s\": {rate:.1}, \"committed\": {}, \"conflicts\": {}, \"conflicts_per_1000\": {per_1000:.2}}}",
                s.committed, s.conflicts
            ));
        }
    }
    json.push_str(&rows.join(",\n"));
    json.push_str("\n  ]\n}\n");
    if let Some(dir) = &o.out {
        std::fs::create_dir_all(dir)?;
        let name = if o.hold.is_zero() {
            "cluster-galera".to_owned()
        } else {
            format!("cluster-galera-hold{}ms", o.hold.as_millis())
        };
        std::fs::write(dir.join(format!("{name}.json")), &json)?;
        std::fs::write(dir.join(format!("{name}.txt")), &report)?;
        throughput_chart(
            &dir.join(format!("{name}.svg")),
            "MariaDB Galera, 3 nodes: committed increments/s",
            &series,
        )?;
        println!("wrote {}/{name}.{{json,txt,svg}}", dir.display());
    }
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"));
    Ok(())
}

/// `--maintenance`: compaction beside writers in business transactions.
mod maintenance {
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;
    use std::time::{Duration, Instant};

    use slotted_core::{
        retry::transaction_with_retry, retry::RetryPolicy, CounterMaintenance, CounterMigrations,
    };
    use slotted_examples::BoxError;
    use slotted_tests::TestConnection;

    use super::{clips_random_likes_slots, Clip, Options};
    use slotted_examples::with_database;

    pub fn main(o: &Options) -> Result<(), BoxError> {
        if o.urls[0].starts_with("postgres") {
            #[cfg(feature = "postgres")]
            return bench::<diesel::PgConnection>(o, "PostgreSQL");
            #[cfg(not(feature = "postgres"))]
            return Err("a postgres:// URL needs --features postgres".into());
        }
        let name = if o.urls.len() > 1 {
            "MariaDB Galera"
        } else {
            "MariaDB"
        };
        bench::<diesel::MysqlConnection>(o, name)
    }

    #[derive(Default)]
    struct Phase {
        transactions: u64,
        writer_retries: u64,
        seconds: f64,
        passes: u64,
        failed: u64,
        folded: u64,
        batches: u64,
        reruns: u64,
        skipped: u64,
        errors: Vec<String>,
    }

    fn open<C: TestConnection>(url: &str, cluster: bool) -> C {
        let mut conn = C::open(url);
        if cluster {
            conn.batch_execute(
                "SET SESSION wsrep_retry_autocommit = 0, SESSION wsrep_sync_wait = 1",
            )
            .expect("session settings");
        }
        conn
    }

    /// Writers for `o.seconds`, with a compactor beside them when `compact`; `acked` gets every
    /// committed increment per record.
    fn phase<C: TestConnection>(
        o: &Options,
        urls: &[String],
        compact: bool,
        acked: &mut [i64],
    ) -> Phase {
        let cluster = urls.len() > 1;
        let writers = o.per_node[0] * urls.len();
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(writers + 2);
        let mut p = Phase::default();
        std::thread::scope(|s| {
            let compactor = s.spawn(|| {
                let mut conn: C = open(&urls[urls.len() - 1], cluster);
                let mut p = Phase::default();
                barrier.wait();
                while compact && !stop.load(Ordering::Relaxed) {
                    match clips_random_likes_slots::table
                        .compact_all(slotted_core::maintenance::MAINTENANCE_BATCH, &mut conn)
                    {
                        Ok(r) => {
                            p.passes += 1;
                            p.folded += r.rows_before - r.rows_after;
                            p.batches += r.batches;
                            p.reruns += r.retries;
                            p.skipped += r.skipped.len() as u64;
                        }
                        Err(e) => {
                            p.failed += 1;
                            if p.errors.len() < 3 {
                                p.errors.push(e.to_string());
                            }
                        }
                    }
                }
                p
            });
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let (stop, barrier) = (&stop, &barrier);
                    s.spawn(move || {
                        let mut conn: C = open(&urls[w % urls.len()], cluster);
                        let mut acked = vec![0i64; o.records as usize + 1];
                        let (mut transactions, mut retries) = (0u64, 0u64);
                        let policy = RetryPolicy {
                            max_retries: 10_000,
                            ..RetryPolicy::default()
                        };
                        barrier.wait();
                        while !stop.load(Ordering::Relaxed) {
                            let x = rand::random_range(1..=o.records);
                            let y = rand::random_range(1..=o.records);
                            let (a, b) = (x.min(y), x.max(y));
                            let done = transaction_with_retry(&mut conn, &policy, |c| {
                                Clip::random_likes_of(a).increment(c)?;
                                Clip::random_likes_of(b).increment(c)?;
                                std::thread::sleep(o.hold);
                                Ok::<_, slotted_core::Error>(())
                            })
                            .expect("a writer's retried transaction commits");
                            retries += u64::from(done.retries);
                            transactions += 1;
                            acked[a as usize] += 1;
                            acked[b as usize] += 1;
                        }
                        (acked, transactions, retries)
                    })
                })
                .collect();
            barrier.wait();
            let started = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(o.seconds));
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                let (a, t, r) = h.join().expect("a writer panicked");
                for (sum, n) in acked.iter_mut().zip(a) {
                    *sum += n;
                }
                p.transactions += t;
                p.writer_retries += r;
            }
            p.seconds = started.elapsed().as_secs_f64();
            let c = compactor.join().expect("the compactor panicked");
            (
                p.passes, p.failed, p.folded, p.batches, p.reruns, p.skipped, p.errors,
            ) = (
                c.passes, c.failed, c.folded, c.batches, c.reruns, c.skipped, c.errors,
            );
        });
        p
    }

    fn bench<C: TestConnection>(o: &Options, server: &str) -> Result<(), BoxError> {
        let db = format!("slotted_bench_maintenance_{}", std::process::id());
        let mut admin = C::open(&o.urls[0]);
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))?;
        admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
        let urls: Vec<String> = o.urls.iter().map(|u| with_database(u, &db)).collect();
        let cluster = urls.len() > 1;
        let mut first: C = open(&urls[0], cluster);
        first.run_pending_migrations(CounterMigrations::of::<Clip>())?;
        for url in &urls[1..] {
            let mut conn: C = open(url, cluster);
            // Waits until the node has applied the table.
            conn.query_i64("SELECT COUNT(*) AS n FROM clips_random_likes_slots");
        }
        let writers = o.per_node[0] * urls.len();
        let mut acked = vec![0i64; o.records as usize + 1];
        let mut report = String::new();
        writeln!(
            report,
            "\n## {} ({server}, {} node(s)): {writers} writers in business transactions (2 \
             increments of {} records, 16 random slots, held {} ms), {} s per phase, {} rounds; \
             compact_all(MAINTENANCE_BATCH = {}) back to back on the last node\n\ncommand: \
             cargo run --release --example cluster --features mysql,postgres -- {}\n",
            o.label,
            urls.len(),
            o.records,
            o.hold.as_millis(),
            o.seconds,
            o.rounds,
            slotted_core::maintenance::MAINTENANCE_BATCH,
            std::env::args().skip(1).collect::<Vec<_>>().join(" ")
        )?;
        writeln!(
            report,
            "| round | phase | writer tx/s | vs alone | writer retries | passes done | passes failed | slot rows folded/s | batches | batches rerun | records skipped |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        let mut errors = Vec::new();
        let (mut alone_sum, mut with_sum) = (0.0, 0.0);
        for round in 1..=o.rounds {
            let alone = phase::<C>(o, &urls, false, &mut acked);
            let with = phase::<C>(o, &urls, true, &mut acked);
            let rate = |p: &Phase| p.transactions as f64 / p.seconds;
            alone_sum += rate(&alone);
            with_sum += rate(&with);
            for (name, p) in [("writers alone", &alone), ("with compaction", &with)] {
                writeln!(
                    report,
                    "| {round} | {name} | {:.0} | {:.2} | {} | {} | {} | {:.0} | {} | {} | {} |",
                    rate(p),
                    rate(p) / rate(&alone),
                    p.writer_retries,
                    p.passes,
                    p.failed,
                    p.folded as f64 / p.seconds,
                    p.batches,
                    p.reruns,
                    p.skipped
                )?;
            }
            errors.extend(with.errors);
        }
        writeln!(
            report,
            "\nwriters with compaction / writers alone, all rounds: {:.2}",
            with_sum / alone_sum
        )?;
        for e in errors.iter().take(3) {
            writeln!(report, "a failed pass: {e}")?;
        }
        // Exact: every acknowledged increment, on every node.
        for url in &urls {
            let mut conn: C = open(url, cluster);
            for key in 1..=o.records {
                let total = Clip::random_likes_of(key).total(&mut conn)?;
                if total != acked[key as usize] {
                    return Err(format!(
                        "record {key} on {url}: total {total}, {} acknowledged",
                        acked[key as usize]
                    )
                    .into());
                }
            }
        }
        writeln!(
            report,
            "totals checked on every node: {} increments acknowledged, all counted",
            acked.iter().sum::<i64>()
        )?;
        print!("{report}");
        if let Some(path) = &o.append {
            use std::io::Write as _;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?
                .write_all(report.as_bytes())?;
        }
        drop(first);
        let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"));
        Ok(())
    }
}
