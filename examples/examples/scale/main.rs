//! At production size (issue 26, first part): how a counter table's storage, compaction and reads
//! grow with the number of records, each against an anchor measured in the same run.
//!
//! At each size (10^4, 10^5, 10^6 records), the writes follow a Zipf-like skew: every record is
//! written once, and 3 writes per record more go to records by `1 / rank` (the hottest record
//! takes about 200,000 of them at 10^6, most records none). Each write lands on a random one of
//! 16 slots, as `strategy = random` spreads them. The rows are written straight into the tables
//! (as that many increments would leave them), so a size takes seconds, not hours.
//!
//! - **storage**: bytes (table and indexes) per record of the slot table after the writes, after
//!   `compact_all`, and after the database made that space reusable or gave it back (PostgreSQL:
//!   `VACUUM`, then `VACUUM FULL`; MariaDB: `OPTIMIZE TABLE`), against a plain
//!   `(record_id INT PRIMARY KEY, count BIGINT)` table of the same totals;
//! - **compaction**: slot rows folded per second by `compact_all` (batches of
//!   `MAINTENANCE_BATCH` records, each its own transaction, `SKIP LOCKED`), against the same fold
//!   written by hand in plain SQL over the same rows in batches of the same size (the anchor), in
//!   `COMPACTION_ROUNDS` rounds that each start both tables from the same written rows;
//! - **reads**: `total` of the hottest record, `totals` of 1,000 and of 10,000 random records,
//!   and `refresh_cache` of the 10,000 (against the same roll-up written by hand), before
//!   compaction.
//!
//! The figures are charted against records beside the output (`<out>-storage.svg`,
//! `-compaction.svg`, `-reads.svg`).
//!
//! Every size checks that compaction kept each total (the sum of all counts and the hottest
//! record's total).
//!
//!     cargo run --release --example scale --features postgres,mysql -- --backend postgres
//!     cargo run --release --example scale --features postgres,mysql -- --backend mysql
//!     cargo run --example scale --features postgres,mysql -- --backend mysql --smoke
//!
//! Options: `--sizes 10000,100000,1000000` (the default), `--smoke` (1,000 and 5,000 records,
//! nothing saved), `--out FILE` (default `docs/bench/scale-<backend>.txt`), `--churn SECONDS`
//! (instead of the sweep: the steady-churn run of `churn.rs` at the first size, 8 writers,
//! `compact_all` every 30 s, 20 samples; saved as `docs/bench/scale-churn-<backend>.txt`), and
//! with it `--vacuum` (`VACUUM` the slot table after each pass, as autovacuum would on a
//! PostgreSQL server where it is on; `docs/bench/scale-churn-vacuum-<backend>.txt`), and
//! `--live SECONDS` (instead of the sweep: `live.rs`, live traffic under maintenance at the first
//! size, windows this long, `--rounds N` on windows (3), `--writers N` (32); saved as
//! `docs/bench/scale-live-<backend>.txt`). Uses
//! `PG_DATABASE_URL` / `MYSQL_DATABASE_URL`, and only the tables it creates there.

use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use slotted_core::maintenance::MAINTENANCE_BATCH;
use slotted_core::{CounterMaintenance, SlottedCounter};
use slotted_examples::BoxError;

mod churn;
mod live;
mod server;

use server::Server;

/// The counter under test.
#[derive(SlottedCounter)]
#[diesel(table_name = scale_items)]
#[slotted(counter = hits, slots = 16, strategy = random)]
pub struct Item {
    pub id: i32,
}

diesel::table! {
    scale_live (id) {
        id -> Integer,
        hits_count -> BigInt,
    }
}

/// Live traffic under maintenance (`live.rs`): a counter rolled up into a cache column, and one
/// with day buckets that retention trims.
#[derive(SlottedCounter)]
#[diesel(table_name = scale_live)]
#[slotted(counter = hits, slots = 16, cache = hits_count)]
#[slotted(counter = daily, slots = 4, bucket = day)]
pub struct LiveItem {
    pub id: i32,
}

/// The same table shape, folded by hand (the compaction anchor).
#[derive(SlottedCounter)]
#[diesel(table_name = scale_anchor)]
#[slotted(counter = hits, slots = 16, strategy = random)]
pub struct Anchor {
    pub id: i32,
}

const SLOTS: u32 = 16;
const TABLES: [&str; 4] = [
    "scale_items_hits_slots",
    "scale_anchor_hits_slots",
    "scale_plain",
    "scale_source",
];

struct Options {
    backend: String,
    sizes: Vec<u32>,
    out: Option<String>,
    /// `--churn SECONDS`: the steady-churn run at the first size, instead of the size sweep.
    churn: Option<u64>,
    /// `--vacuum`: in the churn run, `VACUUM` the slot table after each compaction pass.
    vacuum: bool,
    /// `--live SECONDS`: live traffic under maintenance at the first size, windows this long.
    live: Option<f64>,
    /// `--rounds N`: the live run's on windows (default 3).
    rounds: usize,
    /// `--writers N`: the live run's writers (default 32).
    writers: usize,
    /// `--maintainer BOUND_MS`: the live run's slotted windows run the maintainer.
    maintainer: Option<u64>,
}

fn options() -> Result<Options, BoxError> {
    let mut backend = None;
    let mut sizes = vec![10_000, 100_000, 1_000_000];
    let mut out = None;
    let mut smoke = false;
    let mut churn = None;
    let mut vacuum = false;
    let mut live = None;
    let mut rounds = 3;
    let mut writers = 32;
    let mut maintainer = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => backend = args.next(),
            "--sizes" => {
                let list = args
                    .next()
                    .ok_or("--sizes needs a list, e.g. 10000,100000")?;
                sizes = list.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--out" => out = args.next(),
            "--smoke" => smoke = true,
            "--vacuum" => vacuum = true,
            "--churn" => {
                churn = Some(args.next().ok_or("--churn needs seconds")?.parse()?);
            }
            "--live" => live = Some(args.next().ok_or("--live needs seconds")?.parse()?),
            "--rounds" => rounds = args.next().ok_or("--rounds needs a number")?.parse()?,
            "--writers" => writers = args.next().ok_or("--writers needs a number")?.parse()?,
            "--maintainer" => {
                maintainer = Some(
                    args.next()
                        .ok_or("--maintainer needs a freshness bound in ms")?
                        .parse()?,
                );
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let backend = backend.ok_or("--backend postgres or --backend mysql")?;
    if smoke {
        sizes = vec![1_000, 5_000];
    }
    let name = match (churn.is_some(), vacuum, live.is_some()) {
        (_, _, true) if maintainer.is_some() => "scale-live-maintainer",
        (_, _, true) => "scale-live",
        (false, _, _) => "scale",
        (true, false, _) => "scale-churn",
        (true, true, _) => "scale-churn-vacuum",
    };
    let out = match (smoke, out) {
        (true, _) => None,
        (false, Some(out)) => Some(out),
        (false, None) => Some(format!("docs/bench/{name}-{backend}.txt")),
    };
    Ok(Options {
        backend,
        sizes,
        out,
        churn,
        vacuum,
        live,
        rounds,
        writers,
        maintainer,
    })
}

/// Per record: its number of writes (1, plus its Zipf share of `3 × records` more).
fn writes_per_record(records: u32) -> Vec<u64> {
    let harmonic: f64 = (1..=records).map(|r| 1.0 / f64::from(r)).sum();
    let extra = 3.0 * f64::from(records);
    (1..=records)
        .map(|rank| 1 + (extra / (f64::from(rank) * harmonic)) as u64)
        .collect()
}

/// Creates the three tables, empty.
fn create<C: Server>(conn: &mut C) -> Result<(), BoxError> {
    for table in TABLES {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    let dialect = <C::Backend as slotted_core::CounterBackend>::DIALECT;
    let items = <scale_items_hits_slots::table as slotted_core::CounterTable>::SPEC;
    let anchor = <scale_anchor_hits_slots::table as slotted_core::CounterTable>::SPEC;
    conn.batch_execute(&slotted_core::migration::up_sql(&items, dialect))?;
    conn.batch_execute(&slotted_core::migration::up_sql(&anchor, dialect))?;
    conn.batch_execute(
        "CREATE TABLE scale_plain (record_id INT PRIMARY KEY, count BIGINT NOT NULL)",
    )?;
    Ok(())
}

/// Writes the slot rows of every record into both slot tables, and the totals into the plain
/// one. Returns the sum of all counts and the number of slot rows.
fn fill<C: Server>(conn: &mut C, writes: &[u64]) -> Result<(i64, i64), BoxError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(26);
    let (mut slot_rows, mut plain_rows, mut sum, mut rows) = (Vec::new(), Vec::new(), 0_i64, 0_i64);
    let flush = |conn: &mut C, slot_rows: &mut Vec<String>, plain_rows: &mut Vec<String>| {
        if slot_rows.is_empty() {
            return Ok::<(), BoxError>(());
        }
        let values = slot_rows.join(",");
        for table in ["scale_items_hits_slots", "scale_anchor_hits_slots"] {
            conn.batch_execute(&format!(
                "INSERT INTO {table} (record_id, slot, count) VALUES {values}"
            ))?;
        }
        conn.batch_execute(&format!(
            "INSERT INTO scale_plain (record_id, count) VALUES {}",
            plain_rows.join(",")
        ))?;
        slot_rows.clear();
        plain_rows.clear();
        Ok(())
    };
    for (index, &n) in writes.iter().enumerate() {
        let id = index + 1;
        let mut per_slot = [0_u64; SLOTS as usize];
        if n >= 64 * u64::from(SLOTS) {
            // Many writes: each slot gets its share (the random draw's mean).
            per_slot.iter_mut().for_each(|c| *c = n / u64::from(SLOTS));
            per_slot[0] += n % u64::from(SLOTS);
        } else {
            for _ in 0..n {
                per_slot[rng.random_range(0..SLOTS as usize)] += 1;
            }
        }
        for (slot, &count) in per_slot.iter().enumerate().filter(|(_, c)| **c > 0) {
            slot_rows.push(format!("({id},{slot},{count})"));
            rows += 1;
        }
        plain_rows.push(format!("({id},{n})"));
        sum += n as i64;
        if slot_rows.len() >= 5_000 {
            flush(conn, &mut slot_rows, &mut plain_rows)?;
        }
    }
    flush(conn, &mut slot_rows, &mut plain_rows)?;
    Ok((sum, rows))
}

struct SizeFigures {
    records: u32,
    rows_before: i64,
    rows_after: i64,
    bytes: [i64; 4], // slots after the writes, after compaction, after reclaim, after rebuild
    plain_bytes: i64,
    reclaim: &'static str,
    rebuild: &'static str,
    /// `compact_all`'s full pass and the hand-written fold's, round by round.
    compact: Vec<Duration>,
    hand: Vec<Duration>,
    /// The hand-written fold with the rows locked first (`Server::fold_by_hand`'s `locked`).
    hand_locked: Vec<Duration>,
    hand_rows_after: i64,
    total_hot: Duration,
    totals_1k: Duration,
    totals_10k: Duration,
    refresh_10k: Duration,
    /// The plain table's reads of the same keys: hottest, 1,000, 10,000; and the hand-written
    /// roll-up of the 10,000.
    plain_reads: [Duration; 4],
}

/// Compaction's rounds at each size: each folds the same written rows, both ways.
const COMPACTION_ROUNDS: usize = 3;

fn timed<T>(runs: u32, mut f: impl FnMut() -> Result<T, BoxError>) -> Result<Duration, BoxError> {
    let started = Instant::now();
    for _ in 0..runs {
        f()?;
    }
    Ok(started.elapsed() / runs)
}

fn one_size<C: Server>(conn: &mut C, records: u32) -> Result<SizeFigures, BoxError> {
    create(conn)?;
    let writes = writes_per_record(records);
    let started = Instant::now();
    let (sum, rows_before) = fill(conn, &writes)?;
    eprintln!(
        "{}: {records} records, {rows_before} slot rows, {sum} writes, filled in {:.1?}",
        C::NAME,
        started.elapsed()
    );
    let int = C::INT;
    let slots = "scale_items_hits_slots";
    // The database's own view after a bulk load: statistics fresh, dead space none.
    let reclaim = conn.reclaim(slots)?;
    conn.reclaim("scale_anchor_hits_slots")?;
    conn.reclaim("scale_plain")?;
    let plain_bytes = conn.bytes("scale_plain")?;
    let bytes_before = conn.bytes(slots)?;

    // Reads before compaction: the hottest record, 1,000 and 10,000 random ones.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let keys = |n: usize, rng: &mut rand::rngs::StdRng| -> Vec<i32> {
        (0..n)
            .map(|_| rng.random_range(1..=records as i32))
            .collect()
    };
    let (k1, k10) = (keys(1_000, &mut rng), keys(10_000, &mut rng));
    let hot_total = Item::hits_of(1).total(conn)?;
    assert_eq!(hot_total, writes[0] as i64, "the hottest record's total");
    let total_hot = timed(200, || Ok(Item::hits_of(1).total(conn)?))?;
    let totals_1k = timed(5, || Ok(Item::hits_totals(&k1, conn)?))?;
    let totals_10k = timed(5, || Ok(Item::hits_totals(&k10, conn)?))?;
    // The same reads of the plain table, keys written into the SQL (the anchor).
    let plain_read = |keys: &[i32]| {
        let list: Vec<String> = keys.iter().map(i32::to_string).collect();
        format!(
            "SELECT CAST(record_id AS {int}) AS k, CAST(count AS {int}) AS n FROM scale_plain \
             WHERE record_id IN ({})",
            list.join(",")
        )
    };
    let (hot_sql, sql_1k, sql_10k) = (plain_read(&[1]), plain_read(&k1), plain_read(&k10));
    let plain_hot = timed(200, || conn.pairs(&hot_sql))?;
    let plain_1k = timed(5, || conn.pairs(&sql_1k))?;
    let plain_10k = timed(5, || conn.pairs(&sql_10k))?;
    // `refresh_cache` of the 10,000 into a cache column (`LiveItem`'s `hits`, a copy of the
    // same rows), against the same roll-up written by hand into a column beside it; in turns.
    let made_claims = live::create(conn, records)?;
    let list: Vec<String> = k10.iter().map(i32::to_string).collect();
    let list = list.join(",");
    let (mut refresh_10k, mut hand_refresh_10k) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..3 {
        refresh_10k += timed(1, || {
            Ok(scale_live_hits_slots::table.refresh_cache(&k10, conn)?)
        })?;
        hand_refresh_10k += timed(1, || conn.roll_up_by_hand(&list))?;
    }
    let rolled = conn.number(&format!(
        "SELECT CAST(COUNT(*) AS {int}) AS n FROM scale_live WHERE id IN ({list}) \
         AND (hits_count <> anchor_count OR hits_count = 0)"
    ))?;
    assert_eq!(rolled, 0, "both roll-ups wrote every total of the 10,000");
    live::drop(conn, made_claims)?;
    let (refresh_10k, hand_refresh_10k) = (refresh_10k / 3, hand_refresh_10k / 3);

    // compact_all, and the same fold by hand on the anchor's copy of the rows, in rounds: each
    // round starts both tables from the same written rows (made reusable as after the fill),
    // and the two take turns going first.
    conn.batch_execute("DROP TABLE IF EXISTS scale_source")?;
    conn.batch_execute(&format!(
        "CREATE TABLE scale_source AS SELECT record_id, slot, count FROM {slots}"
    ))?;
    let (mut compact, mut hand, mut hand_locked) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rows_after, mut hand_rows_after) = (0, 0);
    let reset = |conn: &mut C, table: &str, round: usize| -> Result<(), BoxError> {
        if round > 0 {
            conn.batch_execute(&format!(
                "TRUNCATE TABLE {table}; \
                 INSERT INTO {table} (record_id, slot, count) SELECT record_id, slot, count FROM scale_source"
            ))?;
            conn.reclaim(table)?;
        }
        conn.analyze(table)
    };
    for round in 0..COMPACTION_ROUNDS {
        reset(conn, slots, round)?;
        reset(conn, "scale_anchor_hits_slots", round)?;
        let mut slotted_fold = |conn: &mut C| -> Result<(), BoxError> {
            let started = Instant::now();
            let report = scale_items_hits_slots::table.compact_all(MAINTENANCE_BATCH, conn)?;
            compact.push(started.elapsed());
            rows_after = conn.rows(slots)?;
            assert_eq!(conn.sum(slots)?, sum, "compaction kept the sum");
            assert_eq!(
                Item::hits_of(1).total(conn)?,
                hot_total,
                "and the hottest total"
            );
            assert!(
                report.records > 0 && rows_after <= i64::from(records),
                "at most one row per record after compaction"
            );
            Ok(())
        };
        let mut hand_fold = |conn: &mut C, locked: bool| -> Result<Duration, BoxError> {
            let started = Instant::now();
            let batch = MAINTENANCE_BATCH as i64;
            let mut low = 1;
            while low <= i64::from(records) {
                conn.fold_by_hand(low, low + batch - 1, locked)?;
                low += batch;
            }
            let took = started.elapsed();
            hand_rows_after = conn.rows("scale_anchor_hits_slots")?;
            assert_eq!(
                conn.sum("scale_anchor_hits_slots")?,
                sum,
                "the hand fold kept the sum"
            );
            Ok(took)
        };
        if round % 2 == 0 {
            slotted_fold(conn)?;
            hand.push(hand_fold(conn, false)?);
        } else {
            hand.push(hand_fold(conn, false)?);
            slotted_fold(conn)?;
        }
        // The hand fold again from the written rows, locking them first.
        reset(conn, "scale_anchor_hits_slots", 1)?;
        hand_locked.push(hand_fold(conn, true)?);
    }
    conn.batch_execute("DROP TABLE scale_source")?;

    let bytes_compacted = conn.bytes(slots)?;
    conn.reclaim(slots)?;
    let bytes_reclaimed = conn.bytes(slots)?;
    let rebuild = conn.rebuild(slots)?;
    let bytes_rebuilt = conn.bytes(slots)?;
    Ok(SizeFigures {
        records,
        rows_before,
        rows_after,
        bytes: [
            bytes_before,
            bytes_compacted,
            bytes_reclaimed,
            bytes_rebuilt,
        ],
        plain_bytes,
        reclaim,
        rebuild,
        compact,
        hand,
        hand_locked,
        hand_rows_after,
        total_hot,
        totals_1k,
        totals_10k,
        refresh_10k,
        plain_reads: [plain_hot, plain_1k, plain_10k, hand_refresh_10k],
    })
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Compaction's figures at one size.
struct Compaction {
    /// Rows folded per second: the median round of `compact_all`, and of the hand fold.
    ours: f64,
    anchor: f64,
    /// `compact_all` over the hand fold, round by round: the median, lowest and highest.
    ratio: f64,
    low: f64,
    high: f64,
    /// The hand fold that locks the rows first: its median rows per second, and `compact_all`
    /// over it (the median of the rounds).
    locked: f64,
    locked_ratio: f64,
    /// `compact_all`'s median full pass.
    pass: Duration,
}

/// The median: of an even number of values, the mean of the two in the middle (the upper one
/// alone would flatter or blacken a pair of rounds).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

impl SizeFigures {
    fn compaction(&self) -> Compaction {
        let rate = |folded: i64, d: &Duration| folded as f64 / d.as_secs_f64();
        let ours: Vec<f64> = (self.compact.iter())
            .map(|d| rate(self.rows_before - self.rows_after, d))
            .collect();
        let anchor: Vec<f64> = (self.hand.iter())
            .map(|d| rate(self.rows_before - self.hand_rows_after, d))
            .collect();
        let ratios: Vec<f64> = ours.iter().zip(&anchor).map(|(o, a)| o / a).collect();
        let locked: Vec<f64> = (self.hand_locked.iter())
            .map(|d| rate(self.rows_before - self.hand_rows_after, d))
            .collect();
        let locked_ratios: Vec<f64> = ours.iter().zip(&locked).map(|(o, l)| o / l).collect();
        let mut passes = self.compact.clone();
        passes.sort();
        Compaction {
            ours: median(ours),
            anchor: median(anchor),
            ratio: median(ratios.clone()),
            low: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            high: ratios.iter().copied().fold(0.0, f64::max),
            locked: median(locked),
            locked_ratio: median(locked_ratios),
            pass: passes.get(passes.len() / 2).copied().unwrap_or_default(),
        }
    }
}

/// The sweep's charts against records (log scales): bytes per record, rows folded per second,
/// and µs per read, each with its anchors; saved beside `out` as `<out stem>-<name>.svg`.
fn charts(backend: &str, figures: &[SizeFigures], out: &str) -> Result<(), BoxError> {
    use slotted_examples::chart::{log_chart, Series};
    let series = |name: &str, y: &dyn Fn(&SizeFigures) -> f64| Series {
        name: name.to_owned(),
        points: figures.iter().map(|f| (f.records, y(f))).collect(),
    };
    let per = |bytes: i64, f: &SizeFigures| bytes as f64 / f64::from(f.records);
    let stem = out.strip_suffix(".txt").unwrap_or(out);
    let charts: [(&str, &str, Vec<Series>); 3] = [
        (
            "storage",
            "bytes per record (table + indexes)",
            vec![
                series("slot table, written", &|f| per(f.bytes[0], f)),
                series("compacted, space made reusable", &|f| per(f.bytes[2], f)),
                series("compacted and rebuilt", &|f| per(f.bytes[3], f)),
                series("plain (record_id, count) table (anchor)", &|f| {
                    per(f.plain_bytes, f)
                }),
            ],
        ),
        (
            "compaction",
            "slot rows folded / s",
            vec![
                series("compact_all", &|f| f.compaction().ours),
                series("the fold by hand (anchor)", &|f| f.compaction().anchor),
                series("by hand, rows locked first", &|f| f.compaction().locked),
            ],
        ),
        (
            "reads",
            "µs per call",
            vec![
                series("total (hottest)", &|f| us(f.total_hot)),
                series("plain table, one row (anchor)", &|f| us(f.plain_reads[0])),
                series("totals of 1,000", &|f| us(f.totals_1k)),
                series("plain table, 1,000 (anchor)", &|f| us(f.plain_reads[1])),
                series("totals of 10,000", &|f| us(f.totals_10k)),
                series("plain table, 10,000 (anchor)", &|f| us(f.plain_reads[2])),
                series("refresh_cache of 10,000", &|f| us(f.refresh_10k)),
                series(
                    "roll-up by hand, 10,000 (anchor)",
                    &|f| us(f.plain_reads[3]),
                ),
            ],
        ),
    ];
    for (name, y, series) in charts {
        let path = format!("{stem}-{name}.svg");
        let title = format!("{backend}: {name} against records");
        log_chart(std::path::Path::new(&path), &title, ("records", y), &series)?;
        eprintln!("saved {path}");
    }
    Ok(())
}

fn report(backend: &str, figures: &[SizeFigures]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let per = |bytes: i64, records: u32| bytes as f64 / f64::from(records);
    let _ = writeln!(
        out,
        "# scale, {backend}: {SLOTS} slots, Zipf-like writes (4 per record)\n"
    );
    let (reclaim, rebuild) = figures.first().map_or(("", ""), |f| (f.reclaim, f.rebuild));
    let _ = writeln!(out, "## storage, bytes per record (table + indexes)\n");
    let _ = writeln!(
        out,
        "| records | slot rows | written | compacted | + {reclaim} | + {rebuild} | plain table | compacted+{reclaim} / plain | rebuilt / plain |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in figures {
        let [written, compacted, reclaimed, rebuilt] = f.bytes.map(|b| per(b, f.records));
        let plain = per(f.plain_bytes, f.records);
        let _ = writeln!(
            out,
            "| {} | {} → {} | {written:.1} | {compacted:.1} | {reclaimed:.1} | {rebuilt:.1} | {plain:.1} | {:.2} | {:.2} |",
            f.records,
            f.rows_before,
            f.rows_after,
            reclaimed / plain,
            rebuilt / plain
        );
    }
    let _ = writeln!(out, "\n## compaction: slot rows folded per second\n");
    let _ = writeln!(
        out,
        "{COMPACTION_ROUNDS} rounds, each folding the same written rows both ways, the two taking \
         turns going first: the median round of each, and the ratio of each round's pair (median, \
         lowest and highest). Then, in each round, the hand fold again from the written rows with \
         each batch's rows locked first (`FOR UPDATE SKIP LOCKED`, as `compact_all` locks them so \
         as never to wait behind a writer): what that lock costs.\n"
    );
    let _ = writeln!(
        out,
        "| records | compact_all | by hand (anchor) | ratio | ratio's range | by hand, rows locked first | compact_all / it | compact_all, full pass |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in figures {
        let c = f.compaction();
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.2} | {:.2}–{:.2} | {:.0} | {:.2} | {:.2?} |",
            f.records, c.ours, c.anchor, c.ratio, c.low, c.high, c.locked, c.locked_ratio, c.pass
        );
    }
    let _ = writeln!(out, "\n## reads before compaction, µs per call\n");
    let _ = writeln!(
        out,
        "slotted's call, and in brackets the plain table's read of the same keys (the anchor); \
         `refresh_cache` of the 10,000 into a cache column, and in brackets the same roll-up \
         written by hand (one `UPDATE` from the slot sums).\n"
    );
    let _ = writeln!(
        out,
        "| records | total (hottest) | totals of 1,000 | totals of 10,000 | refresh_cache of 10,000 |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|");
    for f in figures {
        let [p1, p2, p3, p4] = f.plain_reads.map(us);
        let _ = writeln!(
            out,
            "| {} | {:.0} ({p1:.0}) | {:.0} ({p2:.0}) | {:.0} ({p3:.0}) | {:.0} ({p4:.0}) |",
            f.records,
            us(f.total_hot),
            us(f.totals_1k),
            us(f.totals_10k),
            us(f.refresh_10k)
        );
    }
    out
}

/// The churn run: the first size filled and compacted, then `churn::run`.
fn churn_at_size<C: Server + Send>(
    url: &str,
    conn: &mut C,
    records: u32,
    seconds: u64,
    smoke: bool,
    vacuum: bool,
) -> Result<String, BoxError> {
    create(conn)?;
    let writes = writes_per_record(records);
    let (sum, _) = fill(conn, &writes)?;
    scale_items_hits_slots::table.compact_all(MAINTENANCE_BATCH, conn)?;
    let churn = churn::Churn {
        records,
        seconds,
        writers: 8,
        compact_every: Duration::from_secs(if smoke { 1 } else { 30 }),
        vacuum,
        samples: if smoke { 2 } else { 20 },
    };
    churn::run(url, conn, &churn, &writes, sum)
}

fn run<C: Server + Send>(url: &str, options: &Options) -> Result<(), BoxError> {
    let mut conn = C::establish(url)?;
    let text = if let Some(window) = options.live {
        let records = options.sizes.first().copied().unwrap_or(100_000);
        create(&mut conn)?;
        let writes = writes_per_record(records);
        fill(&mut conn, &writes)?;
        let made_claims = live::create(&mut conn, records)?;
        let live = live::Live {
            records,
            writers: options.writers,
            window: Duration::from_secs_f64(window),
            rounds: options.rounds,
            hold: Duration::from_millis(1),
            maintainer: options.maintainer.map(Duration::from_millis),
        };
        let text = live::run(url, &mut conn, &live, &writes);
        live::drop(&mut conn, made_claims)?;
        format!(
            "# scale, {}: live traffic under maintenance\n{}",
            C::NAME,
            text?
        )
    } else if let Some(seconds) = options.churn {
        let records = options.sizes.first().copied().unwrap_or(100_000);
        let smoke = options.out.is_none();
        format!(
            "# scale, {}: steady churn\n{}",
            C::NAME,
            churn_at_size(url, &mut conn, records, seconds, smoke, options.vacuum)?
        )
    } else {
        let mut figures = Vec::new();
        for &records in &options.sizes {
            figures.push(one_size(&mut conn, records)?);
        }
        if let Some(out) = &options.out {
            charts(C::NAME, &figures, out)?;
        }
        report(C::NAME, &figures)
    };
    for table in TABLES {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    print!("{text}");
    if let Some(out) = &options.out {
        let vacuum = if options.vacuum { " --vacuum" } else { "" };
        let churn = options
            .churn
            .map_or(String::new(), |s| format!(" --churn {s}{vacuum}"));
        let churn = match options.live {
            Some(w) => format!(
                "{churn} --live {w} --rounds {} --writers {}{}",
                options.rounds,
                options.writers,
                options
                    .maintainer
                    .map_or(String::new(), |ms| format!(" --maintainer {ms}"))
            ),
            None => churn,
        };
        let command = format!(
            "cargo run --release --example scale --features postgres,mysql -- --backend {} --sizes {}{churn}",
            options.backend,
            options.sizes.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        );
        std::fs::write(out, format!("{text}\n{command}\n"))?;
        eprintln!("saved {out}");
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let options = options()?;
    match options.backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => {
            run::<diesel::PgConnection>(&std::env::var("PG_DATABASE_URL")?, &options)
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            run::<diesel::MysqlConnection>(&std::env::var("MYSQL_DATABASE_URL")?, &options)
        }
        other => Err(format!(
            "unknown or disabled backend `{other}`: postgres (--features postgres), mysql (--features mysql)"
        )
        .into()),
    }
}
