//! Reads where apps make them (issue 41): a page of 20 rows with their counts and "the top 20 by
//! likes", with the counts as a plain indexed column (the anchor: what an application reads
//! without slotted) and with slotted's exact totals (`Item::likes_total(items::id)`), at 10^4
//! and 10^5 records (10^6 with `--records`), on PostgreSQL and MariaDB; and a roll-up pass after
//! 1% of the records were written, against a hand-written `UPDATE` of exactly those records.
//!
//! ```text
//! cargo run --release --example reads --features postgres,mysql -- --backend postgres
//! cargo run --release --example reads --features postgres,mysql -- --backend mysql --records 10000,100000,1000000
//! ```
//!
//! Each query runs through the same Diesel connection, its modes alternated, and the median of
//! its latencies is reported, with the ratio to its anchor. The anchors also run by a raw client
//! in the same run, on the same tables, the same SQL text ([`slotted_examples::anchors::reads`]):
//! pgbench (`-n -M prepared -c 1`) on PostgreSQL, libmariadb's prepared statements on MariaDB,
//! in rounds between the Diesel rounds, in the same mix of queries; and the hand-written
//! `UPDATE` by Diesel, by a raw connection kept open (libpq, libmariadb) and by a fresh raw
//! connection each time (pgbench, libmariadb), in turn. The counts are Zipf-like (record k of n has about n / k likes), over 1 to 4 slot
//! rows each. `--smoke` runs 1,000 records and a few repetitions, to check that it runs. Figures
//! are saved in `docs/bench/reads-<backend>.txt` unless `--no-out`.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use slotted_core::prelude::*;
use slotted_examples::anchors::reads::{Param, Pgbench, RawConnection, RawQuery, RawReads};
use slotted_examples::BoxError;
use slotted_tests::{TestConnection, TestDb};

mod raw;
mod report;

use raw::RawClient;
use report::render;

diesel::table! {
    items (id) {
        id -> Integer,
        likes_count -> BigInt,
    }
}

/// An item whose likes are rolled up into `likes_count` (indexed, for sorting).
#[derive(SlottedCounter)]
#[diesel(table_name = items)]
#[slotted(counter = likes, slots = 8, cache = likes_count)]
pub struct Item {
    pub id: i32,
}

/// The anchor "top 20 by likes": the indexed column, ordered.
macro_rules! top_by_column {
    () => {
        items::table
            .select((items::id, items::likes_count))
            .order_by(items::likes_count.desc())
            .limit(20)
    };
}

/// The anchor "a page of 20 with their counts", from record `from`.
macro_rules! page_column {
    ($from:expr) => {
        items::table
            .select((items::id, items::likes_count))
            .filter(items::id.ge($from))
            .order_by(items::id)
            .limit(20)
    };
}

/// slotted's "top 20 by likes": the column's order, the exact totals shown.
macro_rules! top_by_column_exact_counts {
    () => {
        items::table
            .select((items::id, Item::likes_total(items::id)))
            .order_by(items::likes_count.desc())
            .limit(20)
    };
}

/// slotted's "a page of 20 with their counts": the exact totals.
macro_rules! page_exact {
    ($from:expr) => {
        items::table
            .select((items::id, Item::likes_total(items::id)))
            .filter(items::id.ge($from))
            .order_by(items::id)
            .limit(20)
    };
}

/// The queries, written once for each connection type.
trait Reads {
    fn top_by_column(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn top_by_column_exact_counts(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn top_by_exact(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn page_column(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>>;
    fn page_exact(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>>;
    /// The records among `ids` (all, without) whose cached column differs from their exact total.
    fn stale(&mut self, ids: Option<&[i32]>) -> QueryResult<i64>;
    /// The SQL text Diesel sends for the timed loop's four queries, in its order (the top 20
    /// by the column, the same with exact counts, a page by the column, the same with exact
    /// counts), placeholders and all.
    fn read_sql() -> QueryResult<[String; 4]>;
}

macro_rules! reads {
    ($conn:ty, $backend:ty, $builder:ty) => {
        impl Reads for $conn {
            fn top_by_column(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                top_by_column!().load(self)
            }
            fn top_by_column_exact_counts(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                top_by_column_exact_counts!().load(self)
            }
            fn top_by_exact(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, Item::likes_total(items::id)))
                    .order_by(Item::likes_total(items::id).desc())
                    .limit(20)
                    .load(self)
            }
            fn page_column(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>> {
                page_column!(from).load(self)
            }
            fn page_exact(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>> {
                page_exact!(from).load(self)
            }
            fn stale(&mut self, ids: Option<&[i32]>) -> QueryResult<i64> {
                let mut query = items::table
                    .filter(items::likes_count.ne(Item::likes_total(items::id)))
                    .into_boxed();
                if let Some(ids) = ids {
                    query = query.filter(items::id.eq_any(ids));
                }
                query.count().get_result(self)
            }
            fn read_sql() -> QueryResult<[String; 4]> {
                use diesel::query_builder::{QueryBuilder, QueryFragment};
                let sql = |query: &dyn QueryFragment<$backend>| -> QueryResult<String> {
                    let mut builder = <$builder>::new();
                    query.to_sql(&mut builder, &<$backend>::default())?;
                    Ok(builder.finish())
                };
                Ok([
                    sql(&top_by_column!())?,
                    sql(&top_by_column_exact_counts!())?,
                    sql(&page_column!(1))?,
                    sql(&page_exact!(1))?,
                ])
            }
        }
    };
}

reads!(
    diesel::PgConnection,
    diesel::pg::Pg,
    diesel::pg::PgQueryBuilder
);
reads!(
    diesel::MysqlConnection,
    diesel::mysql::Mysql,
    diesel::mysql::MysqlQueryBuilder
);

struct Options {
    backends: Vec<String>,
    records: Vec<usize>,
    reps: usize,
    smoke: bool,
    save: bool,
}

fn main() -> Result<(), BoxError> {
    let mut o = Options {
        backends: vec!["postgres".into(), "mysql".into()],
        records: vec![10_000, 100_000],
        reps: 200,
        smoke: false,
        save: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} takes a value"));
        match arg.as_str() {
            "--backend" => o.backends = vec![value()?],
            "--records" => {
                o.records = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--reps" => o.reps = value()?.parse()?,
            "--smoke" => o.smoke = true,
            "--no-out" => o.save = false,
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    if o.smoke {
        (o.records, o.reps, o.save) = (vec![1_000], 5, false);
    }
    for backend in o.backends.clone() {
        let report = match backend.as_str() {
            "postgres" => run::<diesel::PgConnection>(&o)?,
            "mysql" => run::<diesel::MysqlConnection>(&o)?,
            other => return Err(format!("--backend postgres or mysql, not `{other}`").into()),
        };
        println!("{report}");
        if o.save {
            let path = format!("docs/bench/reads-{backend}.txt");
            std::fs::write(&path, &report)?;
            println!("saved {path}");
        }
    }
    Ok(())
}

/// The medians of one size.
struct Row {
    records: usize,
    top_column: Duration,
    top_exact_counts: Duration,
    top_exact: Option<Duration>,
    page_column: Duration,
    page_exact: Duration,
    raw: RawAnchors,
    pass: Duration,
    hand_update: Duration,
    pass_updated: u64,
    changed: Duration,
    changed_records: u64,
}

/// What the raw client measured at one size.
struct RawAnchors {
    /// The medians of the timed loop's four queries, in its order: the anchor "top" (`TOP`),
    /// slotted's (`TOP_EXACT`), the anchor "page" (`PAGE`), slotted's (`PAGE_EXACT`).
    reads: [Duration; 4],
    /// Timed runs of each, over every round.
    runs: [usize; 4],
    /// pgbench's own throughput, the mean over its runs.
    tps: Option<f64>,
    /// The hand-written UPDATE on a raw connection kept open, and on a fresh one each time.
    hand_update: Duration,
    hand_update_fresh: Duration,
    /// How they were run: the command lines and scripts.
    commands: String,
}

const TOP: usize = 0;
const TOP_EXACT: usize = 1;
const PAGE: usize = 2;
const PAGE_EXACT: usize = 3;

/// Rounds of the raw client's anchors, each after a share of the Diesel runs.
const ROUNDS: usize = 4;

/// The raw client's runs of each of the loop's queries per Diesel run (they are cheap; more
/// runs make its medians steadier).
const RAW_RUNS_PER_REP: usize = 10;

fn run<C: TestConnection + Reads>(o: &Options) -> Result<String, BoxError> {
    let (mut rows, mut version) = (Vec::new(), String::new());
    for &n in &o.records {
        let db = TestDb::new::<C>(&format!("reads_{n}")).ok_or("no server URL")?;
        let mut conn = C::open(&db.url);
        if version.is_empty() {
            version = conn
                .query_text("SELECT CAST(version() AS CHAR(200)) AS name")
                .or_else(|_| conn.query_text("SELECT version() AS name"))?;
        }
        let started = Instant::now();
        fill(&mut conn, n)?;
        eprintln!(
            "{} {n} records filled in {:.1?}",
            C::NAME,
            started.elapsed()
        );
        rows.push(measure(&mut conn, &db.url, n, o.reps)?);
    }
    Ok(render::<C>(&version, o, &rows))
}

/// Who runs the hand-written UPDATE: Diesel, a raw connection kept open, a fresh one.
#[derive(Clone, Copy)]
enum By {
    Diesel,
    Kept,
    Fresh,
}

/// The hand-written UPDATE of the records `ids`: their cached column from their slots.
fn hand_update(ids: &[i32]) -> String {
    let list: Vec<String> = ids.iter().map(i32::to_string).collect();
    format!(
        "UPDATE items SET likes_count = (SELECT COALESCE(SUM(count), 0) FROM items_likes_slots \
         WHERE record_id = items.id) WHERE id IN ({})",
        list.join(", ")
    )
}

/// The first record of the last page: a page starts anywhere in `1..=last_page(n)`.
fn last_page(n: usize) -> i32 {
    n.saturating_sub(20).max(1) as i32
}

/// `n` items and their slot rows: record k has about n / k likes, over 1 to 4 slots; then one
/// roll-up, so the cache holds every total, and the planner's statistics.
fn fill<C: TestConnection>(conn: &mut C, n: usize) -> Result<(), BoxError> {
    conn.batch_execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, likes_count BIGINT NOT NULL DEFAULT 0); \
         CREATE INDEX items_likes_count ON items (likes_count)",
    )?;
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Item>())?;
    for chunk in (1..=n).collect::<Vec<_>>().chunks(1000) {
        let ids: Vec<String> = chunk.iter().map(|k| format!("({k})")).collect();
        conn.batch_execute(&format!("INSERT INTO items (id) VALUES {}", ids.join(", ")))?;
        let mut slots = Vec::new();
        for &k in chunk {
            let total = (n / k).max(1) as i64;
            let spread = 1 + k % 4;
            for slot in 0..spread {
                let share = total / spread as i64 + i64::from(slot == 0) * (total % spread as i64);
                slots.push(format!(
                    "({k}, {}, {share})",
                    rand::random_range(0..2) * 4 + slot
                ));
            }
        }
        conn.batch_execute(&format!(
            "INSERT INTO items_likes_slots (record_id, slot, count) VALUES {}",
            slots.join(", ")
        ))?;
    }
    items_likes_slots::table.refresh_cache_all(1000, conn)?;
    // Every record settled: the passes after it take only what is written since.
    items_likes_slots::table.compact_all(1000, conn)?;
    conn.batch_execute(if C::NAME == "mysql" {
        "ANALYZE TABLE items, items_likes_slots"
    } else {
        "ANALYZE items, items_likes_slots"
    })?;
    Ok(())
}

/// The median: of an even number of samples, the mean of the two in the middle (the upper one
/// alone would make an anchor of 6 runs look slower than it is).
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2
    }
}

fn timed<T, E: Into<BoxError>>(
    f: impl FnOnce() -> Result<T, E>,
) -> Result<(Duration, T), BoxError> {
    let start = Instant::now();
    let out = f().map_err(Into::into)?;
    Ok((start.elapsed(), out))
}

fn measure<C: TestConnection + Reads>(
    conn: &mut C,
    url: &str,
    n: usize,
    reps: usize,
) -> Result<Row, BoxError> {
    let (mut top_column, mut top_exact_counts, mut page_column, mut page_exact) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The raw client's rounds: one after each share of the Diesel runs.
    let per_round = reps.div_ceil(ROUNDS).max(1);
    let raw = RawClient::new::<C>(url, n, per_round * RAW_RUNS_PER_REP)?;
    let (mut raw_reads, mut raw_tps) = (vec![Vec::new(); 4], Vec::new());
    // Warm-up: every statement prepared and cached.
    conn.top_by_column()?;
    conn.top_by_column_exact_counts()?;
    conn.page_column(1)?;
    conn.page_exact(1)?;
    for rep in 0..reps {
        let from = rand::random_range(1..=last_page(n));
        let (a, by_column) = timed(|| conn.top_by_column())?;
        let (b, exact_counts) = timed(|| conn.top_by_column_exact_counts())?;
        let (c, page) = timed(|| conn.page_column(from))?;
        let (d, exact_page) = timed(|| conn.page_exact(from))?;
        // The cache was rolled up after the last write: both read the same counts.
        assert_eq!(by_column.len(), exact_counts.len());
        assert_eq!(page, exact_page, "the cache and the exact totals agree");
        top_column.push(a);
        top_exact_counts.push(b);
        page_column.push(c);
        page_exact.push(d);
        if (rep + 1) % per_round == 0 || rep + 1 == reps {
            let run = raw.reads()?;
            for (all, latencies) in raw_reads.iter_mut().zip(run.latencies) {
                all.extend(latencies);
            }
            raw_tps.extend(run.tps);
        }
    }
    // Sorting by the exact total computes it for every row: a few runs, up to 10^5 records.
    let top_exact = if n <= 100_000 {
        let mut samples = Vec::new();
        for _ in 0..reps.clamp(1, 5) {
            let (t, top) = timed(|| conn.top_by_exact())?;
            assert_eq!(
                top.first().map(|r| r.0),
                Some(1),
                "record 1 has the most likes"
            );
            samples.push(t);
        }
        Some(median(samples))
    } else {
        None
    };
    // 1% of the records written, then the roll-up pass; against a hand-written UPDATE of
    // exactly those records' columns from their slots, by Diesel and by the raw client.
    // 3 times; the UPDATE twice by each client each time.
    let touched = (n / 100).max(1);
    let (mut pass, mut hand, mut raw_hand, mut pass_updated) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    let (mut changed, mut changed_records) = (Vec::new(), 0);
    let mut hand_command = String::new();
    // The raw connection kept open, warmed as the fresh ones are.
    let mut kept = RawConnection::connect(url)?;
    kept.time(&hand_update(&[0]))?;
    let mut raw_fresh = Vec::new();
    for iteration in 0..3 {
        let ids: Vec<i32> = (0..touched)
            .map(|_| rand::random_range(1..=n as i32))
            .collect();
        // What the other measurements wrote, settled (untimed): the pass then meets exactly
        // the records written below.
        items_likes_slots::table.maintain_changed(1000, conn)?;
        for id in &ids {
            Item::likes_of(*id).increment(conn)?;
        }
        // The maintainer's pass: compaction and roll-up of the records written since the last.
        let (t, report) = timed(|| items_likes_slots::table.maintain_changed(1000, conn))?;
        changed.push(t);
        changed_records = report.compaction.records;
        for id in &ids {
            Item::likes_of(*id).increment(conn)?;
        }
        let (t, report) = timed(|| items_likes_slots::table.refresh_cache_all(1000, conn))?;
        pass.push(t);
        pass_updated = report.updated;
        let sql = hand_update(&ids);
        // By Diesel, by the raw connection kept open, by a fresh raw connection: each after the
        // same records were written again (so that each has as many rows to change), twice
        // each, in the order ABCCBA (CBAABC next time), so that none is more often the first
        // after the passes.
        let mut order = [
            By::Diesel,
            By::Kept,
            By::Fresh,
            By::Fresh,
            By::Kept,
            By::Diesel,
        ];
        if iteration % 2 == 1 {
            order.reverse();
        }
        for client in order {
            for id in &ids {
                Item::likes_of(*id).increment(conn)?;
            }
            match client {
                By::Diesel => hand.push(timed(|| conn.batch_execute(&sql))?.0),
                By::Kept => raw_hand.push(kept.time(&sql)?),
                By::Fresh => {
                    let (t, command) = raw.statement(&hand_update(&[0]), &sql)?;
                    raw_fresh.push(t);
                    hand_command = command;
                }
            }
            // Each leaves those records' cache equal to their exact totals.
            assert_eq!(
                conn.stale(Some(&ids))?,
                0,
                "the hand-written UPDATE is exact"
            );
        }
    }
    // Exact after all of it: the pass settles what the UPDATEs left, and then every record's
    // cache equals its total.
    items_likes_slots::table.maintain_changed(1000, conn)?;
    assert_eq!(conn.stale(None)?, 0, "every cached total is exact");
    let raw_anchors = RawAnchors {
        runs: [0, 1, 2, 3].map(|i| raw_reads[i].len()),
        reads: [0, 1, 2, 3].map(|i| median(raw_reads[i].clone())),
        tps: (!raw_tps.is_empty()).then(|| raw_tps.iter().sum::<f64>() / raw_tps.len() as f64),
        hand_update: median(raw_hand),
        hand_update_fresh: median(raw_fresh),
        commands: format!(
            "{}\nThe hand-written UPDATE, by {} on its connection kept open (warmed by the \
             same UPDATE of no record): {}\nThe hand-written UPDATE, by {}: {hand_command}",
            raw.describe()?,
            RawClient::kept_name::<C>(),
            RawClient::kept_call::<C>(),
            RawClient::fresh_name::<C>(),
        ),
    };
    Ok(Row {
        records: n,
        top_column: median(top_column),
        top_exact_counts: median(top_exact_counts),
        top_exact,
        page_column: median(page_column),
        page_exact: median(page_exact),
        raw: raw_anchors,
        pass: median(pass),
        hand_update: median(hand),
        pass_updated,
        changed: median(changed),
        changed_records,
    })
}
