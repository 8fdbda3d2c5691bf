//! Live traffic under maintenance (issue 26): writers in business transactions on the
//! Zipf-filled table while `compact_all`, `refresh_cache_all` and bucket retention loop, against
//! the same writers with no maintenance running. One run alternates windows of equal length, off
//! and on, and reports each window's committed transactions per second and p99 latency, and each
//! on window against the off windows around it. The writers never stop between windows.
//!
//! A business transaction: `hits` and `daily` of one record (Zipf-chosen), then `hold` with the
//! transaction open (work the application does), then `COMMIT`, through the retry helper. At the
//! end the totals are checked against every acknowledged transaction.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use rand::{RngExt, SeedableRng};
use slotted_core::maintenance::MAINTENANCE_BATCH;
use slotted_core::retry::{transaction_with_retry, RetryPolicy};
use slotted_core::CounterMaintenance;
use slotted_examples::BoxError;

use crate::server::Server;
use crate::{scale_live_daily_slots, scale_live_hits_slots, LiveItem};

pub struct Live {
    pub records: u32,
    pub writers: usize,
    pub window: Duration,
    pub rounds: usize,
    pub hold: Duration,
}

/// The tables `LiveItem` counts in, filled: the model's rows (cache column at 0), `hits` with
/// the slot rows of the scale fill, and 10 old days of `daily` for 1 in 10 records, which
/// retention deletes.
pub fn create<C: Server>(conn: &mut C, records: u32) -> Result<bool, BoxError> {
    let dialect = <C::Backend as slotted_core::CounterBackend>::DIALECT;
    for table in [
        "scale_live",
        "scale_live_hits_slots",
        "scale_live_daily_slots",
    ] {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.batch_execute(
        "CREATE TABLE scale_live (id INT PRIMARY KEY, hits_count BIGINT NOT NULL DEFAULT 0)",
    )?;
    for spec in <LiveItem as slotted_core::SlottedModel>::COUNTERS {
        conn.batch_execute(&slotted_core::migration::up_sql(spec, dialect))?;
    }
    conn.batch_execute(
        "INSERT INTO scale_live_hits_slots (record_id, slot, count) \
         SELECT record_id, slot, count FROM scale_items_hits_slots",
    )?;
    let today = slotted_core::BucketWidth::Day.start_of(SystemTime::now());
    let mut rows = Vec::new();
    let mut parents = Vec::new();
    for id in 1..=records {
        parents.push(format!("({id})"));
        if id % 10 == 0 {
            for day in 31..=40_i64 {
                rows.push(format!("({id}, {}, 0, 1)", today - day * 86_400));
            }
        }
        if parents.len() >= 5_000 || id == records {
            conn.batch_execute(&format!(
                "INSERT INTO scale_live (id) VALUES {}",
                parents.join(",")
            ))?;
            parents.clear();
            if !rows.is_empty() {
                conn.batch_execute(&format!(
                    "INSERT INTO scale_live_daily_slots (record_id, bucket, slot, count) VALUES {}",
                    rows.join(",")
                ))?;
                rows.clear();
            }
        }
    }
    // The column becomes the roll-up's on its first roll-up (every row holds 0); the claims
    // table, if this database has none, is this run's (`drop`).
    let claims = conn.number(&format!(
        "SELECT CAST(COUNT(*) AS {}) AS n FROM information_schema.tables \
         WHERE table_name = 'slotted_columns' AND table_schema = {}",
        C::INT,
        if C::NAME == "postgres" {
            "current_schema()"
        } else {
            "DATABASE()"
        }
    ))?;
    if claims == 0 {
        conn.batch_execute(&slotted_core::migration::columns_up_sql(dialect))?;
    }
    scale_live_hits_slots::table.refresh_cache(&[1], conn)?;
    Ok(claims == 0)
}

/// Drops the live run's tables, its claim, and the claims table if the run made it.
pub fn drop<C: Server>(conn: &mut C, made_claims: bool) -> Result<(), BoxError> {
    for table in [
        "scale_live",
        "scale_live_hits_slots",
        "scale_live_daily_slots",
    ] {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.batch_execute(if made_claims {
        "DROP TABLE slotted_columns"
    } else {
        "DELETE FROM slotted_columns WHERE table_name = 'scale_live'"
    })?;
    Ok(())
}

/// One window: its kind and what the writers did in it.
struct Window {
    maintenance: bool,
    committed: u64,
    p99: Duration,
    p50: Duration,
}

/// The `q` quantile of `sorted`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn run<C: Server + Send>(
    url: &str,
    conn: &mut C,
    live: &Live,
    writes: &[u64],
) -> Result<String, BoxError> {
    let cumulative: Vec<u64> = writes
        .iter()
        .scan(0, |acc, &w| {
            *acc += w;
            Some(*acc)
        })
        .collect();
    let weight = *cumulative.last().ok_or("no records")?;
    let hits_before = conn.sum("scale_live_hits_slots")?;
    let daily_before = conn.sum("scale_live_daily_slots")?;
    let windows = 2 * live.rounds + 1;
    let warmup = live.window / 2;
    let started = Instant::now() + warmup;
    let end = started + live.window * windows as u32;
    // Window `w` is off for even `w`: off, on, off, …, off.
    let window_of = |at: Instant| -> Option<usize> {
        let since = at.checked_duration_since(started)?;
        let w = (since.as_nanos() / live.window.as_nanos()) as usize;
        (w < windows).then_some(w)
    };
    let latencies: Vec<Mutex<Vec<Duration>>> =
        (0..windows).map(|_| Mutex::new(Vec::new())).collect();
    let (acked, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let passes = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    let retention_rows = AtomicU64::new(0);
    let result: Result<(), BoxError> = std::thread::scope(|s| {
        let mut threads = Vec::new();
        for writer in 0..live.writers {
            let (cumulative, latencies, acked, stop) = (&cumulative, &latencies, &acked, &stop);
            threads.push(s.spawn(move || -> Result<(), BoxError> {
                let mut conn = C::establish(url)?;
                let mut rng = rand::rngs::StdRng::seed_from_u64(2600 + writer as u64);
                let policy = RetryPolicy {
                    max_retries: 1000,
                    ..RetryPolicy::default()
                };
                while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                    let pick = rng.random_range(0..weight);
                    let id = cumulative.partition_point(|&c| c <= pick) as i32 + 1;
                    let begun = Instant::now();
                    transaction_with_retry(&mut conn, &policy, |c| {
                        LiveItem::hits_of(id).increment(c)?;
                        LiveItem::daily_of(id).increment(c)?;
                        std::thread::sleep(live.hold);
                        Ok::<_, slotted_core::Error>(())
                    })?;
                    let done = Instant::now();
                    acked.fetch_add(1, Ordering::Relaxed);
                    if let Some(w) = window_of(done) {
                        latencies[w]
                            .lock()
                            .expect("no writer panics holding it")
                            .push(done - begun);
                    }
                }
                Ok(())
            }));
        }
        let (passes, retention_rows, stop) = (&passes, &retention_rows, &stop);
        threads.push(s.spawn(move || -> Result<(), BoxError> {
            let mut conn = C::establish(url)?;
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                let on = window_of(Instant::now()).is_some_and(|w| w % 2 == 1);
                if !on {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let retryable =
                    |e: &slotted_core::Error| e.failure() == slotted_core::Failure::RolledBack;
                match scale_live_hits_slots::table.compact_all(MAINTENANCE_BATCH, &mut conn) {
                    Ok(_) => passes[0].fetch_add(1, Ordering::Relaxed),
                    Err(e) if retryable(&e) => 0,
                    Err(e) => return Err(e.into()),
                };
                match scale_live_hits_slots::table.refresh_cache_all(MAINTENANCE_BATCH, &mut conn) {
                    Ok(_) => passes[1].fetch_add(1, Ordering::Relaxed),
                    Err(e) if retryable(&e) => 0,
                    Err(e) => return Err(e.into()),
                };
                let cutoff = SystemTime::now() - Duration::from_secs(30 * 86_400);
                match scale_live_daily_slots::table.delete_buckets_before(
                    cutoff,
                    MAINTENANCE_BATCH,
                    &mut conn,
                ) {
                    Ok(rows) => {
                        retention_rows.fetch_add(rows, Ordering::Relaxed);
                        passes[2].fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) if retryable(&e) => 0,
                    Err(e) => return Err(e.into()),
                };
            }
            Ok(())
        }));
        let mut first = Ok(());
        for t in threads {
            let r = t.join().map_err(|_| "a thread panicked")?;
            if let (Err(e), Ok(())) = (r, &first) {
                stop.store(true, Ordering::Relaxed);
                first = Err(e);
            }
        }
        first
    });
    result?;
    let acked = acked.into_inner();
    let hits = conn.sum("scale_live_hits_slots")? - hits_before;
    let daily = conn.sum("scale_live_daily_slots")? - daily_before
        + retention_rows.load(Ordering::Relaxed) as i64;
    if hits != acked as i64 || daily != acked as i64 {
        return Err(format!(
            "{acked} transactions acknowledged, {hits} hits and {daily} daily counted"
        )
        .into());
    }
    let figures: Vec<Window> = latencies
        .into_iter()
        .enumerate()
        .map(|(w, l)| {
            let mut l = l.into_inner().expect("the writers are done");
            l.sort_unstable();
            Window {
                maintenance: w % 2 == 1,
                committed: l.len() as u64,
                p99: quantile(&l, 0.99),
                p50: quantile(&l, 0.5),
            }
        })
        .collect();
    let secs = live.window.as_secs_f64();
    let mut out = format!(
        "{} records, {} writers, business transaction: `hits` and `daily` of one Zipf-chosen record, \
         {:?} held open, through the retry helper; windows of {:?}, off and on alternating\n\
         maintenance in on windows, looping: compact_all, refresh_cache_all (batches of {MAINTENANCE_BATCH}), \
         delete_buckets_before (30 days); passes: {} / {} / {}, {} old bucket rows deleted\n\
         exact: {acked} transactions acknowledged, {hits} hits and {daily} daily counted\n\n\
         | window | maintenance | tx/s | p50 ms | p99 ms |\n|---|---|---|---|---|\n",
        live.records,
        live.writers,
        live.hold,
        live.window,
        passes[0].load(Ordering::Relaxed),
        passes[1].load(Ordering::Relaxed),
        passes[2].load(Ordering::Relaxed),
        retention_rows.load(Ordering::Relaxed),
    );
    for (w, f) in figures.iter().enumerate() {
        out += &format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
            w + 1,
            if f.maintenance { "on" } else { "off" },
            f.committed as f64 / secs,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3
        );
    }
    // Each on window against the mean of the off windows on either side.
    let mut ratios = Vec::new();
    out += "\n| on window | tx/s × off | p99 × off |\n|---|---|---|\n";
    for w in (1..windows).step_by(2) {
        let (before, after, on) = (&figures[w - 1], &figures[w + 1], &figures[w]);
        let off_tx = (before.committed + after.committed) as f64 / 2.0;
        let off_p99 = (before.p99.as_secs_f64() + after.p99.as_secs_f64()) / 2.0;
        let tx = on.committed as f64 / off_tx.max(1.0);
        let p99 = on.p99.as_secs_f64() / off_p99.max(1e-9);
        ratios.push((tx, p99));
        out += &format!("| {} | {tx:.3} | {p99:.3} |\n", w + 1);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    out += &format!(
        "\nmedian: throughput {:.3}× (target ≥ 0.9), p99 {:.3}× (target ≤ 2)\n",
        median(ratios.iter().map(|r| r.0).collect()),
        median(ratios.iter().map(|r| r.1).collect()),
    );
    Ok(out)
}
