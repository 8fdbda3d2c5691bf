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

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, SmallInt};
use diesel_migrations::MigrationHarness;
use slotted_core::{CounterMigrations, Retryable, SlottedCounter};
use slotted_examples::chart::{throughput_chart, Series};
use slotted_examples::BoxError;

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
            "--smoke" => (o.seconds, o.per_node, o.rounds) = (0.3, vec![1], 1),
            _ => {
                return Err(format!(
                    "unknown argument {arg}; see the top of examples/examples/cluster.rs"
                )
                .into())
            }
        }
    }
    if o.urls.len() < 2 {
        return Err("--urls (or SLOTTED_GALERA_URLS): the nodes' URLs, comma-separated, at least 2 (scripts/galera urls)".into());
    }
    if !(1..=16).contains(&o.slots) {
        return Err("--slots: 1 to 16 (the library's modes have 16)".into());
    }
    Ok(o)
}

/// `url` with its database replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = &base[..base
        .rfind('/')
        .filter(|&i| i > base.find("://").map_or(0, |j| j + 2))
        .unwrap_or(base.len())];
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
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
