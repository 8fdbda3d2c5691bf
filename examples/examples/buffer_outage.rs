//! The write-behind buffer through a database outage, on one server, sync face (r2d2 with its
//! defaults: a 30 s checkout wait):
//!
//!     cargo run --release --example buffer_outage --features postgres -- --backend postgres
//!     cargo run --release --example buffer_outage --features mysql -- --backend mysql
//!
//! 50,000 keys (`--keys`) are pending while 2 threads keep adding to them, through a TCP proxy
//! on loopback that this program starts in front of the server (`*_DATABASE_URL`). Two
//! outages of `--seconds` (10) each, printing every second the process's RSS, the heap it
//! holds (a counting allocator), and the buffer's own accounting:
//! 1. flushes fail after checkout (the counter table renamed away: every flush statement fails,
//!    as on a read-only failover): retries must not copy the pending deltas into more rows;
//! 2. the server unreachable (the proxy closes every connection and refuses new ones): the
//!    failure must show in `stats()` within about an interval; then `shutdown` with
//!    `--shutdown-timeout` (5 s) while it lasts, timed against its timeout.
//!
//! Then the proxy forwards again, and the database total must equal the adds acknowledged minus
//! those `shutdown` reported unwritten. `--out FILE` writes the report there too.

#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use slotted_examples::alloc::{live_bytes, Counting};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_migrations::MigrationHarness;
use slotted_core::{
    buffer::BufferConfig, buffer::CounterBuffer, CounterConnection, CounterMigrations, Error,
    SlottedCounter,
};
use slotted_examples::BoxError;

#[path = "../../tests/tests/buffer/proxy.rs"]
mod proxy;

/// Counts the bytes allocated and not freed, for the memory per pending key.
#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(SlottedCounter)]
#[diesel(table_name = bench_outage)]
#[slotted(counter = hits, slots = 16)]
struct Bench {
    #[allow(dead_code)] // the key the derive reads
    id: i32,
}

const TABLE: &str = "bench_outage_hits_slots";

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// A stats field by name, read from its `Debug` text (the same program runs on a version
/// whose stats lack a field: `-`).
fn field(stats: &str, name: &str) -> String {
    stats
        .split(&format!("{name}: "))
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '}']).next())
        .unwrap_or("-")
        .to_owned()
}

struct Report {
    text: String,
    started: Instant,
}

impl Report {
    fn line(&mut self, line: String) {
        println!("{line}");
        self.text.push_str(&line);
        self.text.push('\n');
    }

    fn sample(&mut self, phase: &str, buffer: &CounterBuffer) {
        let stats = buffer.stats();
        let debug = format!("{stats:?}");
        let error: String = stats
            .last_error
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        self.line(format!(
            "| {phase} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} |",
            self.started.elapsed().as_secs_f64(),
            rss_mb(),
            live_bytes() as f64 / 1e6,
            stats.pending_keys,
            field(&debug, "batched_rows"),
            stats.unflushed_adds,
            stats.failed_flushes,
            error.replace(['\n', '|'], " ")
        ));
    }
}

fn run<C>(
    url: &str,
    keys: i32,
    seconds: u64,
    shutdown_timeout: Duration,
) -> Result<String, BoxError>
where
    C: CounterConnection + R2D2Connection + MigrationHarness<C::Backend> + 'static,
{
    let mut admin = C::establish(url)?;
    admin.run_pending_migrations(CounterMigrations::of::<Bench>().with_buffer())?;
    admin.batch_execute(&format!("DELETE FROM {TABLE}"))?;
    let proxy = proxy::Proxy::start(url);
    let config = BufferConfig {
        shutdown_timeout,
        ..BufferConfig::default()
    };
    let pool = Pool::builder()
        .max_size(4)
        .build(ConnectionManager::<C>::new(proxy.url(url)))?;
    let buffer = CounterBuffer::start(pool, config.clone());
    let mut report = Report {
        text: String::new(),
        started: Instant::now(),
    };
    report.line(format!(
        "{keys} keys, 2 adding threads, interval {:?}, max_pending_keys {}, shutdown_timeout {:?}; r2d2 defaults (connection_timeout 30 s)\n",
        config.interval, config.max_pending_keys, shutdown_timeout
    ));
    report.line("| phase | t (s) | RSS (MB) | heap held (MB) | pending_keys | batched_rows | unflushed_adds | failed_flushes | last_error |".into());
    report.line("|---|---|---|---|---|---|---|---|---|".into());
    let acked = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| -> Result<_, BoxError> {
        for t in 0..2 {
            let (buffer, acked, stop) = (&buffer, &acked, &stop);
            s.spawn(move || {
                let mut key = t;
                while !stop.load(Ordering::Relaxed) {
                    if Bench::hits_of(key).increment_buffered(buffer).is_ok() {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    key = (key + 2) % keys;
                    if key < 2 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            });
        }
        let every_second = |report: &mut Report, phase: &str| {
            for _ in 0..seconds {
                std::thread::sleep(Duration::from_secs(1));
                report.sample(phase, &buffer);
            }
        };
        every_second(&mut report, "up");
        admin.batch_execute(&format!("ALTER TABLE {TABLE} RENAME TO {TABLE}_away"))?;
        every_second(&mut report, "statements fail");
        admin.batch_execute(&format!("ALTER TABLE {TABLE}_away RENAME TO {TABLE}"))?;
        every_second(&mut report, "up");
        let before = buffer.stats().failed_flushes;
        proxy.cut();
        let cut = Instant::now();
        let (mut shown, mut next) = (None, cut + Duration::from_secs(1));
        while cut.elapsed() < Duration::from_secs(seconds) {
            std::thread::sleep(Duration::from_millis(10));
            let stats = buffer.stats();
            if shown.is_none() && stats.failed_flushes > before && stats.last_error.is_some() {
                shown = Some(cut.elapsed());
            }
            if Instant::now() >= next {
                report.sample("unreachable", &buffer);
                next += Duration::from_secs(1);
            }
        }
        stop.store(true, Ordering::Relaxed);
        Ok(shown)
    })?;
    report.line(String::new());
    report.line(match outcome {
        Some(at) => format!("the unreachable server showed in stats() after {:.2} s (failed_flushes up, last_error set)", at.as_secs_f64()),
        None => format!("the unreachable server did not show in stats() within {seconds} s"),
    });
    let started = Instant::now();
    let shut = buffer.shutdown();
    let took = started.elapsed();
    report.line(format!(
        "shutdown during the outage returned after {:.2} s, its timeout {:.2} s ({:.2}x): {}",
        took.as_secs_f64(),
        shutdown_timeout.as_secs_f64(),
        took.as_secs_f64() / shutdown_timeout.as_secs_f64(),
        match &shut {
            Ok(()) => "Ok".to_owned(),
            Err(e) => e.to_string().replace('\n', " "),
        }
    ));
    proxy.restore();
    let unwritten = match shut {
        Err(Error::BufferUnflushed { unflushed_adds, .. }) => unflushed_adds,
        _ => 0,
    };
    let all: Vec<i32> = (0..keys).collect();
    let total: i64 = all
        .chunks(10_000)
        .map(|c| Ok(Bench::hits_totals(c, &mut admin)?.values().sum::<i64>()))
        .sum::<Result<i64, BoxError>>()?;
    let acked = acked.load(Ordering::Relaxed);
    report.line(format!(
        "acknowledged {acked}, reported unwritten {unwritten}, in the database {total}: {}",
        if total == (acked - unwritten) as i64 {
            "exact".to_owned()
        } else {
            format!("OFF BY {}", total - (acked - unwritten) as i64)
        }
    ));
    Ok(report.text)
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
fn main() {
    eprintln!("buffer_outage needs a server: --features postgres or --features mysql");
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (mut backend, mut keys, mut seconds, mut timeout, mut out) =
        (String::from("postgres"), 50_000, 10, 5.0, None);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--backend" => backend = value()?,
            "--keys" => keys = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--shutdown-timeout" => timeout = value()?.parse()?,
            "--out" => out = Some(value()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let timeout = Duration::from_secs_f64(timeout);
    let var = |name: &str| std::env::var(name).map_err(|_| format!("set {name}"));
    let text = match backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => {
            run::<diesel::PgConnection>(&var("PG_DATABASE_URL")?, keys, seconds, timeout)?
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            run::<diesel::MysqlConnection>(&var("MYSQL_DATABASE_URL")?, keys, seconds, timeout)?
        }
        other => {
            return Err(format!("backend {other}: postgres or mysql, with its feature").into())
        }
    };
    if let Some(path) = out {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let command = format!(
            "cargo run --release --example buffer_outage --features {backend} -- {}",
            args.join(" ")
        );
        let header = format!("# buffer outage — {backend}\n\n`{command}`\n\n");
        std::fs::write(path, header + &text)?;
    }
    Ok(())
}
