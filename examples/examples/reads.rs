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
//! its latencies is reported, with the ratio to its anchor. The counts are Zipf-like (record k
//! of n has about n / k likes), over 1 to 4 slot rows each. `--smoke` runs 1,000 records and a
//! few repetitions, to check that it runs. Figures are saved in `docs/bench/reads-<backend>.txt`
//! unless `--no-out`.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use slotted_core::prelude::*;
use slotted_examples::BoxError;
use slotted_tests::{TestConnection, TestDb};

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

/// The queries, written once for each connection type.
trait Reads {
    fn top_by_column(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn top_by_column_exact_counts(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn top_by_exact(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    fn page_column(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>>;
    fn page_exact(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>>;
}

macro_rules! reads {
    ($conn:ty) => {
        impl Reads for $conn {
            fn top_by_column(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, items::likes_count))
                    .order_by(items::likes_count.desc())
                    .limit(20)
                    .load(self)
            }
            fn top_by_column_exact_counts(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, Item::likes_total(items::id)))
                    .order_by(items::likes_count.desc())
                    .limit(20)
                    .load(self)
            }
            fn top_by_exact(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, Item::likes_total(items::id)))
                    .order_by(Item::likes_total(items::id).desc())
                    .limit(20)
                    .load(self)
            }
            fn page_column(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, items::likes_count))
                    .filter(items::id.ge(from))
                    .order_by(items::id)
                    .limit(20)
                    .load(self)
            }
            fn page_exact(&mut self, from: i32) -> QueryResult<Vec<(i32, i64)>> {
                items::table
                    .select((items::id, Item::likes_total(items::id)))
                    .filter(items::id.ge(from))
                    .order_by(items::id)
                    .limit(20)
                    .load(self)
            }
        }
    };
}

reads!(diesel::PgConnection);
reads!(diesel::MysqlConnection);

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
    pass: Duration,
    hand_update: Duration,
    pass_updated: u64,
    changed: Duration,
    changed_records: u64,
}

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
        rows.push(measure(&mut conn, n, o.reps)?);
    }
    Ok(render::<C>(&version, o, &rows))
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

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
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
    n: usize,
    reps: usize,
) -> Result<Row, BoxError> {
    let (mut top_column, mut top_exact_counts, mut page_column, mut page_exact) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Warm-up: every statement prepared and cached.
    conn.top_by_column()?;
    conn.top_by_column_exact_counts()?;
    conn.page_column(1)?;
    conn.page_exact(1)?;
    for _ in 0..reps {
        let from = rand::random_range(1..=(n.saturating_sub(20).max(1)) as i32);
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
    // exactly those records' columns from their slots. Alternated, 3 times each.
    let touched = (n / 100).max(1);
    let (mut pass, mut hand, mut pass_updated) = (Vec::new(), Vec::new(), 0);
    let (mut changed, mut changed_records) = (Vec::new(), 0);
    for _ in 0..3 {
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
        for id in &ids {
            Item::likes_of(*id).increment(conn)?;
        }
        let list: Vec<String> = ids.iter().map(i32::to_string).collect();
        let sql = format!(
            "UPDATE items SET likes_count = (SELECT COALESCE(SUM(count), 0) FROM items_likes_slots \
             WHERE record_id = items.id) WHERE id IN ({})",
            list.join(", ")
        );
        let (t, _) = timed(|| conn.batch_execute(&sql))?;
        hand.push(t);
    }
    Ok(Row {
        records: n,
        top_column: median(top_column),
        top_exact_counts: median(top_exact_counts),
        top_exact,
        page_column: median(page_column),
        page_exact: median(page_exact),
        pass: median(pass),
        hand_update: median(hand),
        pass_updated,
        changed: median(changed),
        changed_records,
    })
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
}

fn render<C: TestConnection>(version: &str, o: &Options, rows: &[Row]) -> String {
    let mut out = format!(
        "# reads (issue 41), {}: a page of 20 and the top 20 by likes, the counts as an indexed \
         column (the anchor) and as slotted's exact totals; a roll-up pass after 1% of the \
         records were written\n# {}\n# {}; 2 cores, a shared machine; medians of {} runs \
         of each query, alternated, through one Diesel connection\n# cargo run --release \
         --example reads --features postgres,mysql -- --backend {} --records {} --reps {}\n\n",
        C::NAME,
        version.trim(),
        slotted_examples::now_utc(),
        o.reps,
        C::NAME,
        o.records
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        o.reps
    );
    out += "## Latency, microseconds (median)\n\n\
        | records | top 20 by the column (anchor) | top 20 by the column, exact counts | ratio | page of 20, column (anchor) | page of 20, exact counts | ratio | top 20 by the exact total |\n\
        |---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.records,
            us(r.top_column),
            us(r.top_exact_counts),
            ratio(r.top_exact_counts, r.top_column),
            us(r.page_column),
            us(r.page_exact),
            ratio(r.page_exact, r.page_column),
            r.top_exact.map_or("not run".to_owned(), us),
        );
    }
    out += "\n## A pass after 1% of the records were written, milliseconds (median of 3)\n\n\
        | records | maintain_changed (compaction and roll-up) | records it took | refresh_cache_all | rows it updated | hand-written UPDATE of those records | maintain_changed / hand | refresh_cache_all / hand |\n\
        |---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.records,
            ms(r.changed),
            r.changed_records,
            ms(r.pass),
            r.pass_updated,
            ms(r.hand_update),
            ratio(r.changed, r.hand_update),
            ratio(r.pass, r.hand_update)
        );
    }
    out += "\nmaintain_changed finds the records written since the last pass through the index of \
            unsettled rows, compacts them into the settled slot and rolls them up (the \
            maintainer's pass); refresh_cache_all reads every record's total (its cost follows \
            the table); both write only the rows whose total changed. The hand-written UPDATE \
            knows which records changed and does not compact.\n";
    out
}
