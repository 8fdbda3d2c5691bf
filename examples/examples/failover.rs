//! PostgreSQL under Patroni (`scripts/patroni`): what a synchronous standby costs the business
//! transaction, how stale a standby's totals are under load, and what a failover and a
//! switchover look like to writers that use `transaction_with_failover`: how long writes stop,
//! and how many acknowledged increments are lost (the target: none).
//!
//! ```text
//! scripts/patroni start
//! cargo run --release --example failover --features postgres,async -- \
//!     --url "$(scripts/patroni url)" --out docs/bench
//! ```
//!
//! pgbench runs the same business transaction on the same cluster in the same run, with and
//! without the synchronous standby, as the ceiling. The standby is switched off and on again with
//! `patronictl edit-config` (Patroni's `synchronous_mode`), never by hand.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_migrations::MigrationHarness;
use slotted_core::failover::transaction_with_failover;
use slotted_core::retry::RetryPolicy;
use slotted_core::{CounterMigrations, Failure};
use slotted_examples::anchors::{pgbench_with, Target};
use slotted_examples::private::Private;
use slotted_examples::{with_database, BoxError};

const DATABASE: &str = "slotted_bench_failover";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/patroni");

struct Args {
    url: String,
    seconds: f64,
    writers: usize,
    hold: Duration,
    rounds: usize,
    /// A short run for CI: throughput for half a second each way and a switchover only.
    smoke: bool,
    out: Option<String>,
}

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        url: std::env::var("SLOTTED_PATRONI_URL").unwrap_or_default(),
        seconds: 5.0,
        writers: 16,
        hold: Duration::from_millis(2),
        rounds: 2,
        smoke: false,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = value()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--writers" => args.writers = value()?.parse()?,
            "--hold-ms" => args.hold = Duration::from_millis(value()?.parse()?),
            "--rounds" => args.rounds = value()?.parse()?,
            "--out" => args.out = Some(value()?),
            "--smoke" => {
                args.seconds = 0.5;
                args.rounds = 1;
                args.smoke = true;
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.url.is_empty() {
        return Err(
            "--url (or SLOTTED_PATRONI_URL): the cluster's multi-host URL, scripts/patroni url"
                .into(),
        );
    }
    Ok(args)
}

fn patroni(args: &[&str]) -> Result<String, BoxError> {
    let out = Command::new("bash").arg(SCRIPT).args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "scripts/patroni {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A fresh database on the cluster, replayed by every node before it is used
/// (`slotted_tests::until_every_node_has`).
fn prepare(url: &str) -> Result<String, BoxError> {
    let mut admin = PgConnection::establish(&with_database(url, "postgres"))?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))?;
    admin.batch_execute(&format!("CREATE DATABASE {DATABASE}"))?;
    slotted_tests::until_every_node_has(url, DATABASE)?;
    let url = with_database(url, DATABASE);
    let mut conn = PgConnection::establish(&url)?;
    conn.run_pending_migrations(CounterMigrations::of::<Private>())?;
    conn.batch_execute(
        "CREATE TABLE bench_events (id BIGSERIAL PRIMARY KEY, writer INTEGER NOT NULL)",
    )?;
    Ok(url)
}

fn pool(
    url: &str,
    size: usize,
) -> Result<diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<PgConnection>>, BoxError> {
    Ok(diesel::r2d2::Pool::builder()
        .max_size(size as u32)
        .connection_timeout(Duration::from_secs(5))
        .build(diesel::r2d2::ConnectionManager::<PgConnection>::new(url))?)
}

/// What the writers saw in one run.
#[derive(Default)]
struct Seen {
    acked: Vec<i64>,
    unknown: Vec<i64>,
    acked_at: Vec<Instant>,
    errors: u64,
}

/// `writers` sync writers, business transactions through `transaction_with_failover`, until
/// `stop`; the event (if any) runs after `lead`.
fn writers(
    url: &str,
    args: &Args,
    lead: Duration,
    run: impl FnOnce(&AtomicBool),
) -> Result<Seen, BoxError> {
    let pool = pool(url, args.writers)?;
    let stop = AtomicBool::new(false);
    let policy = RetryPolicy::failover();
    let seen = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.writers)
            .map(|w| {
                let (pool, stop, policy, hold) = (&pool, &stop, &policy, args.hold);
                s.spawn(move || {
                    let id = w as i32 + 1;
                    let (mut acked, mut unknown, mut at, mut errors) = (0, 0, Vec::new(), 0);
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = transaction_with_failover(pool, policy, |c| {
                            c.batch_execute(&format!(
                                "INSERT INTO bench_events (writer) VALUES ({id})"
                            ))?;
                            Private::hits_of(id).increment(c)?;
                            std::thread::sleep(hold);
                            Ok::<_, slotted_core::Error>(())
                        });
                        match outcome {
                            Ok(_) => {
                                acked += 1;
                                at.push(Instant::now());
                            }
                            Err(e) if e.failure() == Failure::OutcomeUnknown => unknown += 1,
                            Err(_) => errors += 1,
                        }
                    }
                    (acked, unknown, at, errors)
                })
            })
            .collect();
        std::thread::sleep(lead);
        run(&stop);
        stop.store(true, Ordering::Relaxed);
        let mut seen = Seen::default();
        for h in handles {
            let (a, u, at, e) = h.join().expect("a writer");
            seen.acked.push(a);
            seen.unknown.push(u);
            seen.acked_at.extend(at);
            seen.errors += e;
        }
        seen
    });
    Ok(seen)
}

/// Increments lost: acknowledged but not in the slot rows of the (new) primary.
fn lost(url: &str, seen: &Seen) -> Result<(i64, i64), BoxError> {
    let mut conn = PgConnection::establish(url)?;
    let (mut lost, mut extra) = (0, 0);
    for (w, (&acked, &unknown)) in seen.acked.iter().zip(&seen.unknown).enumerate() {
        let total = Private::hits_of(w as i32 + 1).total(&mut conn)?;
        lost += (acked - total).max(0);
        extra += (total - acked - unknown).max(0);
    }
    Ok((lost, extra))
}

fn reset(url: &str) -> Result<(), BoxError> {
    PgConnection::establish(url)?
        .batch_execute("TRUNCATE bench_private_hits_slots, bench_events")?;
    Ok(())
}

fn set_synchronous_mode(on: bool) -> Result<(), BoxError> {
    let dir = std::env::var("SLOTTED_PATRONI_DIR")
        .unwrap_or_else(|_| format!("{}/slotted-patroni", std::env::temp_dir().display()));
    let status = Command::new("patronictl")
        .args([
            "-c",
            &format!("{dir}/node1/node1.yml"),
            "edit-config",
            "--force",
            "-s",
        ])
        .arg(format!("synchronous_mode={on}"))
        .output()?;
    if !status.status.success() {
        return Err(format!(
            "patronictl edit-config: {}",
            String::from_utf8_lossy(&status.stderr)
        )
        .into());
    }
    Ok(())
}

/// Waits until the leader has (`true`) or has no (`false`) synchronous standby.
fn until_synchronous(url: &str, on: bool) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = PgConnection::establish(url).ok().and_then(|mut c| {
            #[derive(QueryableByName)]
            struct S {
                #[diesel(sql_type = diesel::sql_types::Text)]
                s: String,
            }
            diesel::sql_query("SELECT current_setting('synchronous_standby_names') AS s")
                .get_result::<S>(&mut c)
                .ok()
                .map(|r| r.s)
        });
        if names.is_some_and(|n| n.is_empty() != on) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("synchronous mode never became {on}").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn main() -> Result<(), BoxError> {
    let args = args()?;
    patroni(&["wait", "90"])?;
    let url = prepare(&args.url)?;
    let mut out = format!(
        "# PostgreSQL 15 under Patroni 3.0.2: 3 nodes and etcd on loopback (scripts/patroni), \
         synchronous_mode_strict\n# {} writers, business transactions holding {} ms, {:.1} s per \
         throughput run\n# cargo run --release --example failover --features postgres,async -- \
         --url URL --seconds {} --rounds {}\n",
        args.writers,
        args.hold.as_millis(),
        args.seconds,
        args.seconds,
        args.rounds
    );

    out += &format!(
        "\n## throughput of the business transaction\n{:<44} {:>10}\n",
        "run", "per s"
    );
    for standby in [true, false] {
        set_synchronous_mode(standby)?;
        until_synchronous(&url, standby)?;
        let label = if standby {
            "with a synchronous standby"
        } else {
            "no synchronous standby"
        };
        let load = pgbench_with(
            "prepared",
            &url,
            Target::PrivateRow,
            Some(args.hold),
            args.writers as u32,
            args.seconds,
        )?;
        let anchor = load.committed as f64 / load.seconds;
        out += &format!("{:<44} {anchor:>10.0}\n", format!("pgbench, {label}"));
        reset(&url)?;
        let started = Instant::now();
        let seen = writers(&url, &args, Duration::from_secs_f64(args.seconds), |_| {})?;
        let rate = seen.acked.iter().sum::<i64>() as f64 / started.elapsed().as_secs_f64();
        let (lost, extra) = lost(&url, &seen)?;
        if lost + extra != 0 || seen.errors != 0 {
            return Err(format!(
                "{label}: {lost} lost, {extra} extra, {} errors",
                seen.errors
            )
            .into());
        }
        out += &format!(
            "{:<44} {rate:>10.0}   {:.2}x its pgbench\n",
            format!("slotted sync, {label}"),
            rate / anchor
        );
    }
    set_synchronous_mode(true)?;
    until_synchronous(&url, true)?;
    patroni(&["wait", "90"])?;

    // Staleness of the synchronous standby's totals under the writers.
    let replica = patroni(&["replica-url"])?;
    let replica = with_database(&replica, DATABASE);
    let mut lags = Vec::new();
    writers(&url, &args, Duration::ZERO, |_| {
        let (Ok(mut primary), Ok(mut standby)) = (
            PgConnection::establish(&url),
            PgConnection::establish(&replica),
        ) else {
            return;
        };
        let probe = Private::hits_of(100_000);
        for i in 1..=200 {
            if probe.increment(&mut primary).is_err() {
                return;
            }
            let committed = Instant::now();
            while probe.total(&mut standby).is_ok_and(|t| t < i) {
                if committed.elapsed() > Duration::from_secs(10) {
                    return;
                }
            }
            lags.push(committed.elapsed());
        }
    })?;
    lags.sort();
    if let (Some(median), Some(max)) = (lags.get(lags.len() / 2), lags.last()) {
        out += &format!(
            "\n## staleness of the synchronous standby (an increment committed, then read there), \
             under the writers\nmedian {median:?}, p99 {:?}, max {max:?} over {} increments\n",
            lags[lags.len() * 99 / 100],
            lags.len()
        );
    }

    out += &format!(
        "\n## failover as the writers see it (transaction_with_failover, RetryPolicy::failover())\n\
         {:<28} {:>12} {:>10} {:>9} {:>6}\n",
        "event", "writes stop", "acked", "unknown", "lost"
    );
    for _ in 0..args.rounds {
        for event in ["crash (SIGKILL postmaster)", "switchover"] {
            if args.smoke && event.starts_with("crash") {
                continue;
            }
            patroni(&["wait", "90"])?;
            reset(&url)?;
            let leader = patroni(&["leader"])?;
            let mut event_at = Instant::now();
            let seen = writers(&url, &args, Duration::from_millis(1500), |_| {
                event_at = Instant::now();
                let _ = if event == "switchover" {
                    patroni(&["switchover"])
                } else {
                    patroni(&["kill-postgres", &leader])
                };
                std::thread::sleep(Duration::from_secs(8));
            })?;
            let gap = slotted_tests::longest_pause(&seen.acked_at, event_at).unwrap_or_default();
            let (lost, extra) = lost(&url, &seen)?;
            if extra != 0 || seen.errors != 0 {
                return Err(format!(
                    "{event}: {extra} counted beyond the unknown, {} errors",
                    seen.errors
                )
                .into());
            }
            out += &format!(
                "{event:<28} {:>10.2} s {:>10} {:>9} {lost:>6}\n",
                gap.as_secs_f64(),
                seen.acked.iter().sum::<i64>(),
                seen.unknown.iter().sum::<i64>()
            );
        }
    }
    patroni(&["wait", "90"])?;
    print!("{out}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        let path = format!("{dir}/failover-postgres.txt");
        std::fs::write(&path, &out)?;
        eprintln!("saved {path}");
    }
    PgConnection::establish(&with_database(&args.url, "postgres"))?
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))?;
    Ok(())
}
