//! Live traffic under maintenance (issue 26): writers in business transactions on the
//! Zipf-filled table while `compact_all`, `refresh_cache_all` and bucket retention loop, against
//! the same writers with no maintenance running, and against the same maintenance written by
//! hand in plain SQL (the anchor: `Server::maintain_by_hand`). One run alternates windows of
//! equal length, off, slotted, off, by hand, …, off, and reports each window's committed
//! transactions per second and p99 latency, and each maintenance window against the off windows
//! around it. The writers never stop between windows.
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
    /// `--maintainer BOUND_MS`: slotted's windows run the maintainer (a `Maintainer` over an
    /// r2d2 pool, freshness bound this long: passes over what was written since the last one,
    /// and retention) instead of `compact_all`, `refresh_cache_all` and retention in a loop.
    pub maintainer: Option<Duration>,
}

/// The tables `LiveItem` counts in, filled: the model's rows (cache column at 0, and
/// `anchor_count` for the hand-written roll-up of the size sweep), `hits` with
/// the slot rows of the scale fill; `daily` starts empty, so retention runs as it does day to
/// day once the old days are gone: it finds nothing before the cutoff.
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
        "CREATE TABLE scale_live (id INT PRIMARY KEY, hits_count BIGINT NOT NULL DEFAULT 0, \
         anchor_count BIGINT NOT NULL DEFAULT 0)",
    )?;
    for spec in <LiveItem as slotted_core::SlottedModel>::COUNTERS {
        conn.batch_execute(&slotted_core::migration::up_sql(spec, dialect))?;
        conn.batch_execute(&slotted_core::migration::unsettled_up_sql(spec, dialect))?;
    }
    conn.batch_execute(
        "INSERT INTO scale_live_hits_slots (record_id, slot, count) \
         SELECT record_id, slot, count FROM scale_items_hits_slots",
    )?;
    let mut parents = Vec::new();
    for id in 1..=records {
        parents.push(format!("({id})"));
        if parents.len() >= 5_000 || id == records {
            conn.batch_execute(&format!(
                "INSERT INTO scale_live (id) VALUES {}",
                parents.join(",")
            ))?;
            parents.clear();
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
    for table in ["scale_live", "scale_live_hits_slots"] {
        conn.analyze(table)?;
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

/// What runs in a window.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Off,
    /// The maintainer's first window (`--maintainer`): it runs, working off what the writers
    /// wrote while it did not; not compared.
    Warm,
    Slotted,
    ByHand,
}

impl Kind {
    /// Window `w` of off, slotted, off, by hand, …, off; with the maintainer, of off, warm-up,
    /// slotted, off, by hand, …, off (the maintainer runs through its warm-up and slotted
    /// windows, so that the slotted ones measure it in its steady state).
    fn of(w: usize, maintainer: bool) -> Kind {
        if maintainer {
            return match w % 5 {
                1 => Kind::Warm,
                2 => Kind::Slotted,
                4 => Kind::ByHand,
                _ => Kind::Off,
            };
        }
        match w % 4 {
            1 => Kind::Slotted,
            3 => Kind::ByHand,
            _ => Kind::Off,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Off => "off",
            Kind::Warm => "warm-up",
            Kind::Slotted => "slotted",
            Kind::ByHand => "by hand",
        }
    }
}

/// One window: its kind and what the writers did in it.
struct Window {
    kind: Kind,
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
    if live.maintainer.is_some() {
        // A maintainer's steady state: every record settled and rolled up (what its first
        // full pass does), before the windows.
        scale_live_hits_slots::table.compact_all(MAINTENANCE_BATCH, conn)?;
        scale_live_hits_slots::table.refresh_cache_all(MAINTENANCE_BATCH, conn)?;
    }
    let hits_before = conn.sum("scale_live_hits_slots")?;
    let daily_before = conn.sum("scale_live_daily_slots")?;
    let with_maintainer = live.maintainer.is_some();
    let kind_of = |w: usize| Kind::of(w, with_maintainer);
    let windows = if with_maintainer { 5 } else { 4 } * live.rounds + 1;
    let warmup = live.window / 2;
    let started = Instant::now() + warmup;
    let end = started + live.window * windows as u32;
    // Window `w`'s kind: `Kind::of(w)`.
    let window_of = |at: Instant| -> Option<usize> {
        let since = at.checked_duration_since(started)?;
        let w = (since.as_nanos() / live.window.as_nanos()) as usize;
        (w < windows).then_some(w)
    };
    let latencies: Vec<Mutex<Vec<Duration>>> =
        (0..windows).map(|_| Mutex::new(Vec::new())).collect();
    let (acked, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let passes = [AtomicU64::new(0), AtomicU64::new(0)];
    let (maintainer_worst, maintainer_over) = (Mutex::new(Duration::ZERO), Mutex::new(0u64));
    let maintainer_steady: Mutex<Option<Duration>> = Mutex::new(None);
    let maintainer_last: Mutex<Vec<String>> = Mutex::new(Vec::new());
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
        let (passes, stop) = (&passes, &stop);
        let (maintainer_worst, maintainer_over) = (&maintainer_worst, &maintainer_over);
        let (maintainer_steady, maintainer_last) = (&maintainer_steady, &maintainer_last);
        threads.push(s.spawn(move || -> Result<(), BoxError> {
            let mut conn = C::establish(url)?;
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                let kind = window_of(Instant::now()).map_or(Kind::Off, kind_of);
                if kind == Kind::Off {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let cutoff = SystemTime::now() - Duration::from_secs(30 * 86_400);
                if let (Kind::Warm | Kind::Slotted, Some(bound)) = (kind, live.maintainer) {
                    // The maintainer for the whole window, then stopped.
                    let pool = diesel::r2d2::Pool::builder()
                        .max_size(2)
                        .build(diesel::r2d2::ConnectionManager::<C>::new(url))?;
                    let maintainer = slotted_core::maintenance::Maintainer::builder(pool)
                        .counter::<scale_live_hits_slots::table>()
                        .counter::<scale_live_daily_slots::table>()
                        .retention::<scale_live_daily_slots::table>(
                            slotted_core::maintenance::Retention::Delete(Duration::from_secs(
                                30 * 86_400,
                            )),
                        )
                        .freshness(bound)
                        // A window is a stretch of a maintainer's life, not its start: the
                        // caches were rolled up when the table was filled.
                        .full_pass_at_start(false)
                        .start()?;
                    // In the slotted window only: its passes, those over the bound, and the
                    // largest staleness of a pass that ended in it.
                    let mut at_slotted: Option<slotted_core::maintenance::MaintainerReport> = None;
                    let (mut worst_in_window, mut worst_steady) = (Duration::ZERO, None);
                    loop {
                        match window_of(Instant::now()).map(kind_of) {
                            Some(Kind::Warm) => {}
                            Some(Kind::Slotted) => {
                                let now = maintainer.report();
                                match &at_slotted {
                                    None => at_slotted = Some(now),
                                    Some(start) if now.passes > start.passes => {
                                        let staleness = now.staleness.unwrap_or_default();
                                        worst_in_window = worst_in_window.max(staleness);
                                        // From the third pass that ended in the window on,
                                        // the pass before began in it: no backlog of the
                                        // window before the warm-up is left in them.
                                        if now.passes >= start.passes + 3 {
                                            worst_steady = Some(
                                                staleness.max(worst_steady.unwrap_or_default()),
                                            );
                                        }
                                    }
                                    Some(_) => {}
                                }
                            }
                            _ => break,
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let report = maintainer.stop(Duration::from_secs(30));
                    if let Some(error) = &report.last_error {
                        return Err(format!("the maintainer: {error}").into());
                    }
                    let start = at_slotted.unwrap_or_default();
                    passes[0].fetch_add(report.passes - start.passes, Ordering::Relaxed);
                    // What its last pass did, job by job: how much a pass of this load holds.
                    let last: Vec<String> = report
                        .jobs
                        .iter()
                        .map(|j| format!("{}: {}", j.name, j.last.as_deref().unwrap_or("no run")))
                        .collect();
                    maintainer_last.lock().expect("one thread").push(format!(
                        "{} passes; the last: {}",
                        report.passes,
                        last.join("; ")
                    ));
                    let mut worst = maintainer_worst.lock().expect("one thread");
                    *worst = (*worst).max(worst_in_window);
                    if let Some(steady) = worst_steady {
                        let mut worst = maintainer_steady.lock().expect("one thread");
                        *worst = Some(steady.max(worst.unwrap_or_default()));
                    }
                    *maintainer_over.lock().expect("one thread") +=
                        report.passes_over_bound - start.passes_over_bound;
                    continue;
                }
                if kind == Kind::ByHand {
                    let cutoff = slotted_core::BucketWidth::Day.start_of(cutoff);
                    let batch = MAINTENANCE_BATCH as i64;
                    let mut low = 1;
                    while low <= i64::from(live.records)
                        && window_of(Instant::now()).map(kind_of) == Some(Kind::ByHand)
                    {
                        conn.maintain_by_hand(low, low + batch - 1, cutoff)?;
                        low += batch;
                    }
                    passes[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // A batch that lost to writers on every attempt comes back as an error that
                // says it was rolled back: the next pass does it.
                let retryable =
                    |e: &slotted_core::Error| e.failure() == slotted_core::Failure::RolledBack;
                let jobs = [
                    scale_live_hits_slots::table
                        .compact_all(MAINTENANCE_BATCH, &mut conn)
                        .map(|_| ()),
                    scale_live_hits_slots::table
                        .refresh_cache_all(MAINTENANCE_BATCH, &mut conn)
                        .map(|_| ()),
                    scale_live_daily_slots::table
                        .delete_buckets_before(cutoff, MAINTENANCE_BATCH, &mut conn)
                        .map(|_| ()),
                ];
                for done in jobs {
                    match done {
                        Ok(()) => {}
                        Err(e) if retryable(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                passes[0].fetch_add(1, Ordering::Relaxed);
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
    let daily = conn.sum("scale_live_daily_slots")? - daily_before;
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
                kind: kind_of(w),
                committed: l.len() as u64,
                p99: quantile(&l, 0.99),
                p50: quantile(&l, 0.5),
            }
        })
        .collect();
    let secs = live.window.as_secs_f64();
    let slotted_runs = match live.maintainer {
        Some(bound) => format!(
            "the maintainer (freshness bound {bound:?}: each pass compacts and rolls up the \
             records written since the last; retention 30 days; started at each warm-up window \
             with full_pass_at_start(false), stopped after the slotted window that follows); \
             in the slotted windows: {} passes, worst staleness {:?}, {} passes over the bound; \
             from the third pass that ended in a slotted window on (the first two carry the \
             backlog of the window before the warm-up): worst staleness {}; each maintainer's \
             life (a warm-up and a slotted window): {}",
            passes[0].load(Ordering::Relaxed),
            maintainer_worst.into_inner().expect("the threads are done"),
            maintainer_over.into_inner().expect("the threads are done"),
            maintainer_steady
                .into_inner()
                .expect("the threads are done")
                .map_or(
                    "none (fewer than 3 passes ended in a window)".to_owned(),
                    |w| { format!("{w:?}") }
                ),
            maintainer_last
                .into_inner()
                .expect("the threads are done")
                .join(" | "),
        ),
        None => format!(
            "looping: compact_all, refresh_cache_all (batches of {MAINTENANCE_BATCH}), \
             delete_buckets_before (30 days), {} passes",
            passes[0].load(Ordering::Relaxed)
        ),
    };
    let mut out = format!(
        "{} records, {} writers, business transaction: `hits` and `daily` of one Zipf-chosen record, \
         {:?} held open, through the retry helper; windows of {:?}: off, {}slotted, off, by hand, …, off\n\
         slotted's maintenance, {slotted_runs}; by hand, looping over batches of \
         {MAINTENANCE_BATCH}: the plain-SQL fold, roll-up and retention DELETE \
         (Server::maintain_by_hand), {} passes\n\
         exact: {acked} transactions acknowledged, {hits} hits and {daily} daily counted\n\n\
         | window | maintenance | tx/s | p50 ms | p99 ms |\n|---|---|---|---|---|\n",
        live.records,
        live.writers,
        live.hold,
        live.window,
        if with_maintainer { "warm-up, " } else { "" },
        passes[1].load(Ordering::Relaxed),
    );
    for (w, f) in figures.iter().enumerate() {
        out += &format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
            w + 1,
            f.kind.name(),
            f.committed as f64 / secs,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3
        );
    }
    // Each maintenance window against the mean of the off windows on either side.
    let mut ratios: Vec<(Kind, f64, f64)> = Vec::new();
    out += "\n| window | maintenance | tx/s × off | p99 × off |\n|---|---|---|---|\n";
    for w in (1..windows).filter(|&w| matches!(figures[w].kind, Kind::Slotted | Kind::ByHand)) {
        // The nearest off windows on either side.
        let off = |mut i: usize, step: isize| loop {
            i = i.checked_add_signed(step)?;
            match figures.get(i) {
                Some(f) if f.kind == Kind::Off => break Some(f),
                Some(_) => {}
                None => break None,
            }
        };
        let (Some(before), Some(after)) = (off(w, -1), off(w, 1)) else {
            continue;
        };
        let on = &figures[w];
        let off_tx = (before.committed + after.committed) as f64 / 2.0;
        let off_p99 = (before.p99.as_secs_f64() + after.p99.as_secs_f64()) / 2.0;
        let tx = on.committed as f64 / off_tx.max(1.0);
        let p99 = on.p99.as_secs_f64() / off_p99.max(1e-9);
        ratios.push((on.kind, tx, p99));
        out += &format!("| {} | {} | {tx:.3} | {p99:.3} |\n", w + 1, on.kind.name());
    }
    let median = |kind: Kind, pick: fn(&(Kind, f64, f64)) -> f64| {
        super::median(ratios.iter().filter(|r| r.0 == kind).map(pick).collect())
    };
    for kind in [Kind::Slotted, Kind::ByHand] {
        out += &format!(
            "\nmedian, {}: throughput {:.3}× off (target ≥ 0.95), p99 {:.3}× off (target ≤ 1.5; \
             issue 41's targets for the maintainer beside the writers)",
            kind.name(),
            median(kind, |r| r.1),
            median(kind, |r| r.2),
        );
    }
    out += "\n";
    Ok(out)
}
