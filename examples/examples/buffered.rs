//! The write-behind buffer against the transactional counters, in one run, at `--writers`
//! (32) threads on one backend:
//!
//!     cargo run --release --example buffered --features postgres -- --backend postgres
//!     cargo run --release --example buffered --features mysql -- --backend mysql
//!     cargo run --release --example buffered -- --backend sqlite
//!
//! Modes, each for `--seconds` (3), bare increments (no business transaction around them):
//! - `single-row`: every writer increments record 1 of a counter with one slot: one row, the
//!   library's upsert (the contention benchmark's `single-row` is a plain `UPDATE` of one row;
//!   both queue on that row's lock);
//! - `ceiling`: every writer increments a record of its own with one slot (the library's
//!   upsert, no row shared), as the contention benchmark's `ceiling`: the most the database
//!   does one transaction per increment;
//! - `buffered-hot`: every writer `increment_buffered`s record 1 through one `CounterBuffer`
//!   (default configuration: a flush a second);
//! - `buffered-10k-keys`: the same over 10,000 records, so flushes write many rows.
//!
//! After each mode the database total must equal the increments acknowledged (the buffered
//! ones after `shutdown`), or the program fails. Then the memory a pending key takes, counted
//! by a counting allocator. Writes `docs/bench/buffered-{backend}.{txt,json}` (`--out`).
//!
//! `--pending N` (issue 26, the buffer at size) runs instead: N distinct keys added to a buffer
//! that does not flush until `shutdown`: the adds per second, the memory per pending key, and
//! the flush of all N timed, against the same N rows written by hand as multi-row upserts of the
//! buffer's chunk size (4,096 rows), each its own transaction, in the same run (the anchor).
//! Writes `docs/bench/buffered-pending-{backend}.txt`.

use slotted_examples::alloc::{live_bytes, Counting};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel_migrations::MigrationHarness;
use slotted_core::{
    buffer::BufferConfig, buffer::BufferStats, buffer::CounterBuffer, CounterConnection,
    CounterMigrations, SlottedCounter,
};
use slotted_examples::BoxError;

/// Counts the bytes allocated and not freed, for the memory per pending key.
#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The buffered counter, and the ceiling's: a slot per record.
#[derive(SlottedCounter)]
#[diesel(table_name = bench_buf)]
#[slotted(counter = hits, slots = 64, strategy = connection)]
#[slotted(counter = own, slots = 1)]
#[slotted(counter = single, slots = 1)]
#[slotted(counter = anchor, slots = 1)]
struct Bench {
    #[allow(dead_code)] // the key the derive reads; this program counts by key alone
    id: i32,
}

/// A `String`-keyed counter, for the memory of a text key.
#[derive(SlottedCounter)]
#[diesel(table_name = bench_buf_pages, primary_key(url))]
#[slotted(counter = views, slots = 8)]
struct Page {
    #[allow(dead_code)]
    url: String,
}

#[derive(Debug)]
struct Pragmas(bool);

impl<C: SimpleConnection> CustomizeConnection<C, diesel::r2d2::Error> for Pragmas {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        if self.0 {
            conn.batch_execute("PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL;")
                .map_err(diesel::r2d2::Error::QueryError)?;
        }
        Ok(())
    }
}

struct Options {
    backend: String,
    writers: usize,
    seconds: f64,
    out: Option<String>,
    /// `--pending N`: the buffer at size instead of the modes.
    pending: Option<usize>,
}

/// The rows of the pending run's anchor, written by hand (`Bench.anchor`'s table, read back
/// through slotted).
const ANCHOR_TABLE: &str = "bench_buf_anchor_slots";
const ANCHOR_CHUNK: usize = 4096;

/// `--pending N`: N distinct keys pending in one buffer, their memory, and their flush against
/// the same rows written by hand.
fn pending<C>(
    pool: &Pool<ConnectionManager<C>>,
    opts: &Options,
    keys: usize,
) -> Result<(), BoxError>
where
    C: CounterConnection + R2D2Connection + 'static,
{
    let mut conn = pool.get()?;
    conn.batch_execute("DELETE FROM bench_buf_hits_slots")?;
    conn.batch_execute(&format!("DELETE FROM {ANCHOR_TABLE}"))?;
    let config = BufferConfig {
        interval: Duration::from_secs(3600),
        flush_at_keys: usize::MAX,
        max_pending_keys: 2 * keys,
        shutdown_timeout: Duration::from_secs(3600),
        ..BufferConfig::default()
    };
    let buffer = CounterBuffer::start(pool.clone(), config);
    let before = live_bytes();
    let started = Instant::now();
    for key in 0..keys {
        Bench::hits_of(key as i32).increment_buffered(&buffer)?;
    }
    let adding = started.elapsed();
    let bytes = (live_bytes() - before) as f64 / keys as f64;
    let started = Instant::now();
    buffer.shutdown()?;
    let flushing = started.elapsed();
    let stats = buffer.stats();
    let all: Vec<i32> = (0..keys as i32).collect();
    let sum: i64 = Bench::hits_totals(&all, &mut *conn)?.values().sum();
    if sum != keys as i64 {
        return Err(format!("{keys} adds, {sum} counted after shutdown").into());
    }
    // The anchor: the same rows, upserted by hand in chunks of the buffer's size.
    let upsert = |values: &str| {
        match opts.backend.as_str() {
        "mysql" => format!(
            "INSERT INTO {ANCHOR_TABLE} (record_id, slot, count) VALUES {values} \
             ON DUPLICATE KEY UPDATE count = count + VALUES(count)"
        ),
        _ => format!(
            "INSERT INTO {ANCHOR_TABLE} (record_id, slot, count) VALUES {values} \
             ON CONFLICT (record_id, slot) DO UPDATE SET count = {ANCHOR_TABLE}.count + excluded.count"
        ),
    }
    };
    let started = Instant::now();
    for low in (0..keys).step_by(ANCHOR_CHUNK) {
        let values: Vec<String> = (low..(low + ANCHOR_CHUNK).min(keys))
            .map(|k| format!("({k}, 0, 1)"))
            .collect();
        conn.batch_execute("BEGIN")?;
        conn.batch_execute(&upsert(&values.join(",")))?;
        conn.batch_execute("COMMIT")?;
    }
    let anchor = started.elapsed();
    let anchor_sum: i64 = Bench::anchor_totals(&all, &mut *conn)?.values().sum();
    conn.batch_execute(&format!("DELETE FROM {ANCHOR_TABLE}"))?;
    conn.batch_execute("DELETE FROM bench_buf_hits_slots")?;
    if anchor_sum != keys as i64 {
        return Err(format!("anchor: {keys} rows, {anchor_sum} counted").into());
    }
    let rate = |d: Duration| keys as f64 / d.as_secs_f64();
    let mut text = String::new();
    writeln!(
        text,
        "# buffered, the buffer at size: {}, {keys} distinct keys pending (one `i32` counter)\n",
        opts.backend
    )?;
    writeln!(text, "| | seconds | keys per second |\n|---|---:|---:|")?;
    writeln!(
        text,
        "| adding them (`increment_buffered`, one thread) | {:.2} | {:.0} |",
        adding.as_secs_f64(),
        rate(adding)
    )?;
    writeln!(
        text,
        "| flushing them (`shutdown`) | {:.2} | {:.0} |",
        flushing.as_secs_f64(),
        rate(flushing)
    )?;
    writeln!(
        text,
        "| the same rows upserted by hand, {ANCHOR_CHUNK} a transaction (anchor) | {:.2} | {:.0} |",
        anchor.as_secs_f64(),
        rate(anchor)
    )?;
    writeln!(
        text,
        "\nflush × anchor: {:.3}; {} flushes of {:.0} rows on average, the longest {:.0} ms\n\
         memory per pending key: {bytes:.0} bytes, {:.0} MB for all of them\n\
         every add counted: {sum} after shutdown",
        anchor.as_secs_f64() / flushing.as_secs_f64(),
        stats.flushes,
        stats.flushed_rows as f64 / stats.flushes.max(1) as f64,
        stats.max_flush_latency.as_secs_f64() * 1e3,
        bytes * keys as f64 / 1e6,
    )?;
    print!("{text}");
    if let Some(dir) = &opts.out {
        let command = format!(
            "cargo run --release --example buffered --features {} -- --backend {} --pending {keys}",
            opts.backend, opts.backend
        );
        std::fs::write(
            format!("{dir}/buffered-pending-{}.txt", opts.backend),
            format!("{text}\n{command}\n"),
        )?;
    }
    Ok(())
}

struct Measured {
    mode: &'static str,
    increments: u64,
    per_second: f64,
    stats: Option<BufferStats>,
}

type Step<'a, C> = &'a (dyn Fn(&mut C, usize, u64) -> Result<(), BoxError> + Sync);

/// `writers` threads run `step(conn, writer, i)` for `seconds`; each on a pooled connection.
fn run_writers<C: R2D2Connection + 'static>(
    pool: &Pool<ConnectionManager<C>>,
    opts: &Options,
    step: Step<'_, C>,
) -> Result<u64, BoxError> {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(opts.writers + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..opts.writers)
            .map(|w| {
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || -> Result<u64, BoxError> {
                    let mut conn = pool.get()?;
                    barrier.wait();
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        step(&mut conn, w, done)?;
                        done += 1;
                    }
                    Ok(done)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(opts.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a writer panicked")?)
            .sum()
    })
}

fn buffered<C>(
    pool: &Pool<ConnectionManager<C>>,
    opts: &Options,
    mode: &'static str,
    keys: u64,
) -> Result<Measured, BoxError>
where
    C: CounterConnection + R2D2Connection + 'static,
{
    let mut conn = pool.get()?;
    conn.batch_execute("DELETE FROM bench_buf_hits_slots")?;
    let buffer = CounterBuffer::start(pool.clone(), BufferConfig::default());
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(opts.writers + 1);
    let started = Instant::now();
    let adds: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..opts.writers)
            .map(|w| {
                let (stop, barrier, buffer) = (&stop, &barrier, &buffer);
                s.spawn(move || -> Result<u64, BoxError> {
                    barrier.wait();
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = ((w as u64 * 7919 + done) % keys) as i32;
                        Bench::hits_of(key).increment_buffered(buffer)?;
                        done += 1;
                    }
                    Ok(done)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(opts.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a writer panicked")?)
            .sum::<Result<u64, BoxError>>()
    })?;
    let adding = started.elapsed().min(Duration::from_secs_f64(opts.seconds));
    buffer.shutdown()?;
    let stats = buffer.stats();
    let keys: Vec<i32> = (0..keys as i32).collect();
    let total: i64 = Bench::hits_totals(&keys, &mut conn)?.values().sum();
    if total != adds as i64 {
        return Err(format!("{mode}: {adds} adds acknowledged, {total} in the database").into());
    }
    Ok(Measured {
        mode,
        increments: adds,
        per_second: adds as f64 / adding.as_secs_f64(),
        stats: Some(stats),
    })
}

/// Bytes one pending key takes: `n` distinct keys added to a buffer that does not flush.
fn bytes_per_key<C>(pool: &Pool<ConnectionManager<C>>, text: bool) -> Result<f64, BoxError>
where
    C: CounterConnection + R2D2Connection + 'static,
{
    const KEYS: usize = 100_000;
    let config = BufferConfig {
        interval: Duration::from_secs(3600),
        flush_at_keys: usize::MAX,
        max_pending_keys: 2 * KEYS,
        ..BufferConfig::default()
    };
    let buffer = CounterBuffer::start(pool.clone(), config);
    let urls: Vec<String> = (0..KEYS)
        .map(|i| format!("https://example.com/{i:08}"))
        .collect();
    let before = live_bytes();
    for (i, url) in urls.iter().enumerate() {
        if text {
            Page::views_of(url.as_str()).increment_buffered(&buffer)?;
        } else {
            Bench::hits_of(i as i32).increment_buffered(&buffer)?;
        }
    }
    let bytes = (live_bytes() - before) as f64 / KEYS as f64;
    buffer.shutdown()?;
    Ok(bytes)
}

fn run<C>(url: &str, opts: &Options, sqlite: bool) -> Result<(), BoxError>
where
    C: CounterConnection + R2D2Connection + MigrationHarness<C::Backend> + 'static,
{
    let pool = Pool::builder()
        .max_size(opts.writers as u32 + 2)
        .connection_customizer(Box::new(Pragmas(sqlite)))
        .build(ConnectionManager::<C>::new(url))?;
    let mut conn = pool.get()?;
    conn.run_pending_migrations(CounterMigrations::of::<Bench>().and::<Page>().with_buffer())?;
    conn.batch_execute("DELETE FROM bench_buf_own_slots")?;
    conn.batch_execute("DELETE FROM bench_buf_single_slots")?;
    if let Some(keys) = opts.pending {
        drop(conn);
        return pending(&pool, opts, keys);
    }

    let single = run_writers(&pool, opts, &|conn: &mut C, _, _| {
        Bench::single_of(1).increment(conn)?;
        Ok(())
    })?;
    let single_total = Bench::single_of(1).total(&mut conn)?;
    assert_eq!(
        single_total, single as i64,
        "single-row: every increment counted"
    );
    let ceiling = run_writers(&pool, opts, &|conn: &mut C, w, _| {
        Bench::own_of(w as i32).increment(conn)?;
        Ok(())
    })?;
    let own: i64 = Bench::own_totals(&(0..opts.writers as i32).collect::<Vec<_>>(), &mut conn)?
        .values()
        .sum();
    assert_eq!(own, ceiling as i64, "ceiling: every increment counted");
    drop(conn);
    let mut results = vec![
        Measured {
            mode: "single-row",
            increments: single,
            per_second: single as f64 / opts.seconds,
            stats: None,
        },
        Measured {
            mode: "ceiling",
            increments: ceiling,
            per_second: ceiling as f64 / opts.seconds,
            stats: None,
        },
    ];
    results.push(buffered(&pool, opts, "buffered-hot", 1)?);
    results.push(buffered(&pool, opts, "buffered-10k-keys", 10_000)?);
    let int_key = bytes_per_key(&pool, false)?;
    let text_key = bytes_per_key(&pool, true)?;

    let (single_rate, ceiling_rate) = (results[0].per_second, results[1].per_second);
    let mut text = String::new();
    writeln!(
        text,
        "# buffered — {}, {} writers, {} s per mode, bare increments\n",
        opts.backend, opts.writers, opts.seconds
    )?;
    writeln!(text, "| mode | increments | per second | x single-row | x ceiling | flushes | rows/flush | mean flush | max flush |")?;
    writeln!(text, "|---|---|---|---|---|---|---|---|---|")?;
    let mut json = format!(
        "{{\n  \"backend\": \"{}\",\n  \"writers\": {},\n  \"seconds\": {},\n  \"modes\": [\n",
        opts.backend, opts.writers, opts.seconds
    );
    for (i, m) in results.iter().enumerate() {
        let (flushes, rows, mean, max) = match &m.stats {
            Some(s) => (
                s.flushes,
                s.flushed_rows as f64 / s.flushes.max(1) as f64,
                s.total_flush_time.as_secs_f64() * 1e3 / s.flushes.max(1) as f64,
                s.max_flush_latency.as_secs_f64() * 1e3,
            ),
            None => (0, 0.0, 0.0, 0.0),
        };
        writeln!(
            text,
            "| {} | {} | {:.0} | {:.1} | {:.2} | {} | {:.0} | {:.2} ms | {:.2} ms |",
            m.mode,
            m.increments,
            m.per_second,
            m.per_second / single_rate,
            m.per_second / ceiling_rate,
            flushes,
            rows,
            mean,
            max
        )?;
        writeln!(
            json,
            "    {{\"mode\": \"{}\", \"increments\": {}, \"per_second\": {:.1}, \"x_single_row\": {:.2}, \"x_ceiling\": {:.3}, \"flushes\": {flushes}, \"rows_per_flush\": {rows:.1}, \"mean_flush_ms\": {mean:.3}, \"max_flush_ms\": {max:.3}}}{}",
            m.mode, m.increments, m.per_second, m.per_second / single_rate, m.per_second / ceiling_rate,
            if i + 1 < results.len() { "," } else { "" }
        )?;
    }
    writeln!(text, "\nmemory per pending key: {int_key:.0} bytes (i32 key), {text_key:.0} bytes (28-character String key)")?;
    write!(json, "  ],\n  \"bytes_per_pending_key\": {{\"i32\": {int_key:.1}, \"string_28\": {text_key:.1}}}\n}}\n")?;
    print!("{text}");
    if let Some(dir) = &opts.out {
        std::fs::write(format!("{dir}/buffered-{}.txt", opts.backend), &text)?;
        std::fs::write(format!("{dir}/buffered-{}.json", opts.backend), &json)?;
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut opts = Options {
        backend: "sqlite".into(),
        writers: 32,
        seconds: 3.0,
        out: Some("docs/bench".into()),
        pending: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--backend" => opts.backend = value()?,
            "--writers" => opts.writers = value()?.parse()?,
            "--seconds" => opts.seconds = value()?.parse()?,
            "--out" => opts.out = Some(value()?),
            "--no-out" => opts.out = None,
            "--pending" => opts.pending = Some(value()?.parse()?),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    match opts.backend.as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let path = std::env::temp_dir().join("slotted-buffered.db");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            run::<diesel::SqliteConnection>(&path.to_string_lossy(), &opts, true)
        }
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(&std::env::var("PG_DATABASE_URL")?, &opts, false),
        #[cfg(feature = "mysql")]
        "mysql" => {
            run::<diesel::MysqlConnection>(&std::env::var("MYSQL_DATABASE_URL")?, &opts, false)
        }
        other => Err(format!("backend `{other}` unknown or not enabled").into()),
    }
}
