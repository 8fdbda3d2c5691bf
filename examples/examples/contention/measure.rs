//! Measuring: writer threads, their tallies, CPU per transaction, interleaved rounds and paired ratios.

use super::*;

/// What one writer thread saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) committed: u64,
    pub(crate) errors: u64,
    pub(crate) retries: u64,
    pub(crate) latencies_ms: Vec<f64>,
}

/// One measurement's figures.
pub(crate) struct Run {
    pub(crate) mode: String,
    /// `sync` (threads, r2d2), `async` (tasks, deadpool) or `raw` (an anchor).
    pub(crate) face: &'static str,
    pub(crate) shape: Shape,
    pub(crate) writers: u32,
    pub(crate) committed: u64,
    pub(crate) tps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) errors: u64,
    pub(crate) retries: u64,
    /// CPU time per committed transaction, in µs: the client's (this process, or the anchor's
    /// child process) and the whole machine's (client, server and kernel); NaN where
    /// `/proc` cannot tell.
    pub(crate) client_cpu_us: f64,
    pub(crate) machine_cpu_us: f64,
    /// Throughput in every round, in round order (the median round is the one reported).
    pub(crate) round_tps: Vec<f64>,
}

/// `a`'s throughput over `b`'s, round by round: the median and the range over the rounds.
#[derive(Clone, Copy)]
pub(crate) struct PairedRatio {
    pub(crate) median: f64,
    pub(crate) low: f64,
    pub(crate) high: f64,
}

impl PairedRatio {
    pub(crate) fn of(a: &Run, b: &Run) -> Option<PairedRatio> {
        let mut ratios: Vec<f64> = a
            .round_tps
            .iter()
            .zip(&b.round_tps)
            .map(|(a, b)| a / b)
            .collect();
        ratios.sort_by(f64::total_cmp);
        Some(PairedRatio {
            median: median(ratios.clone()),
            low: *ratios.first()?,
            high: *ratios.last()?,
        })
    }

    pub(crate) fn show(self, digits: usize) -> String {
        if self.low == self.high {
            format!("{:.digits$}", self.median)
        } else {
            format!(
                "{:.digits$} ({:.digits$}–{:.digits$})",
                self.median, self.low, self.high
            )
        }
    }
}

/// CPU time consumed so far, in seconds, from Linux's `/proc`: this process's and its
/// waited-for children's (pgbench), and the whole machine's busy time.
#[derive(Clone, Copy)]
pub(crate) struct CpuTimes {
    pub(crate) client: f64,
    pub(crate) machine: f64,
}

impl CpuTimes {
    pub(crate) fn now() -> Option<CpuTimes> {
        // USER_HZ, in which both files count, is 100 on every Linux architecture Rust targets.
        const TICK: f64 = 0.01;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name: state is the 3rd field; utime, stime, cutime and
        // cstime the 14th to 17th.
        let fields: Vec<f64> = own
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .skip(11)
            .take(4)
            .map(|f| f.parse().unwrap_or(f64::NAN))
            .collect();
        let all = std::fs::read_to_string("/proc/stat").ok()?;
        // `cpu  user nice system idle iowait irq softirq steal …`: busy is user to softirq but
        // idle and iowait (steal is time a hypervisor gave to other machines).
        let machine: Vec<f64> = all
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(7)
            .map(|f| f.parse().unwrap_or(f64::NAN))
            .collect();
        let busy = machine.iter().sum::<f64>() - machine.get(3)? - machine.get(4)?;
        Some(CpuTimes {
            client: fields.iter().sum::<f64>() * TICK,
            machine: busy * TICK,
        })
    }
}

/// Empties the mode's table (and pre-creates its slots where it pre-creates them).
pub(crate) fn reset<C: BenchConnection>(conn: &mut C, mode: &Mode<C>) -> Result<(), BoxError> {
    conn.batch_execute(&format!("DELETE FROM {}", mode.table))?;
    if mode.table == "bench_single" {
        conn.batch_execute("INSERT INTO bench_single (id, count) VALUES (1, 0)")?;
    }
    if let Some(prefill) = mode.prefill {
        prefill(conn)?;
    }
    Ok(())
}

/// One measurement's figures from its writers' tallies; fails unless the total moved by
/// exactly the increments committed.
pub(crate) fn summarize(
    mode: &str,
    face: &'static str,
    shape: Shape,
    writers: u32,
    seconds: f64,
    results: Vec<Tally>,
    moved: i64,
) -> Result<Run, BoxError> {
    let committed: u64 = results.iter().map(|r| r.committed).sum();
    if moved != committed as i64 {
        return Err(format!(
            "{mode} {} x{writers}: the total moved by {moved}, but {committed} increments committed",
            shape.name(),
        )
        .into());
    }
    let mut latencies: Vec<f64> = results
        .iter()
        .flat_map(|r| r.latencies_ms.iter().copied())
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok(Run {
        mode: mode.to_owned(),
        face,
        shape,
        writers,
        committed,
        tps: committed as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        errors: results.iter().map(|r| r.errors).sum(),
        retries: results.iter().map(|r| r.retries).sum(),
        client_cpu_us: f64::NAN,
        machine_cpu_us: f64::NAN,
        round_tps: Vec::new(),
    })
}

/// Deadlocks, serialization failures and SQLite's busy: the transaction rolled back whole and
/// is simply run again (a retry); anything else is an error.
pub(crate) fn retryable(e: &slotted_core::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as D};
    let source = match e {
        slotted_core::Error::Database { source, .. } | slotted_core::Error::Diesel(source) => {
            source
        }
        _ => return false,
    };
    match source {
        D::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        D::DatabaseError(_, info) => {
            let m = info.message();
            m.contains("deadlock")
                || m.contains("Deadlock")
                || m.contains("database is locked")
                || m.contains("Lock wait timeout")
        }
        _ => false,
    }
}

pub(crate) fn measure<C: BenchConnection>(
    pool: &Pool<ConnectionManager<C>>,
    writers_pool: Pool<ConnectionManager<C>>,
    mode: &Mode<C>,
    writers: u32,
    shape: Shape,
    opts: &Options,
) -> Result<Run, BoxError> {
    reset(&mut *pool.get()?, mode)?;
    let before = (mode.total)(&mut *pool.get()?)?;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(writers as usize + 1));
    let hold = opts.hold;
    let results = std::thread::scope(|scope| -> Result<Vec<Tally>, BoxError> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, barrier) = (stop.clone(), barrier.clone());
                let mut conn = writers_pool.get();
                scope.spawn(move || -> Result<Tally, BoxError> {
                    let conn = conn.as_mut().map_err(|e| e.to_string())?;
                    let mut tally = Tally::default();
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let result = match shape {
                            Shape::Bare => (mode.increment)(conn, w as i32),
                            Shape::Business if mode.diesel_tx => conn.transaction(|conn| {
                                conn.event(w as i32)?;
                                (mode.increment)(conn, w as i32)?;
                                std::thread::sleep(hold);
                                Ok(())
                            }),
                            // What README advises: the retry helper, here with no reruns
                            // (the benchmark counts and reruns them itself).
                            Shape::Business => transaction_with_retry(conn, &ONCE, |conn| {
                                conn.event(w as i32)?;
                                (mode.increment)(conn, w as i32)?;
                                std::thread::sleep(hold);
                                Ok(())
                            })
                            .map(|done| done.value),
                        };
                        match result {
                            Ok(()) => {
                                tally.committed += 1;
                                tally
                                    .latencies_ms
                                    .push(started.elapsed().as_secs_f64() * 1e3);
                            }
                            Err(e) if retryable(&e) => tally.retries += 1,
                            Err(_) => tally.errors += 1,
                        }
                    }
                    Ok(tally)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(opts.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a writer panicked")?)
            .collect()
    });
    // Writers stop within one transaction of the deadline.
    let results = results?;
    let after = (mode.total)(&mut *pool.get()?)?;
    summarize(
        &mode.name,
        "sync",
        shape,
        writers,
        opts.seconds,
        results,
        after - before,
    )
}

/// A raw anchor's run as a [`Run`]: `reset` empties its table, `total` reads the counter's
/// total before and after.
pub(crate) fn anchor_run<C: BenchConnection>(
    pool: &Pool<ConnectionManager<C>>,
    name: &str,
    mode: &Mode<C>,
    shape: Shape,
    writers: u32,
    load: impl FnOnce() -> Result<anchors::Load, BoxError>,
) -> Result<Run, BoxError> {
    reset(&mut *pool.get()?, mode)?;
    let before = (mode.total)(&mut *pool.get()?)?;
    let load = load()?;
    let after = (mode.total)(&mut *pool.get()?)?;
    let average = load.average_ms;
    let tally = Tally {
        committed: load.committed,
        errors: load.errors,
        retries: 0,
        latencies_ms: load.latencies_ms,
    };
    let mut run = summarize(
        name,
        "raw",
        shape,
        writers,
        load.seconds,
        vec![tally],
        after - before,
    )?;
    if let Some(average) = average {
        run.p50_ms = average; // pgbench reports the average only
    }
    Ok(run)
}

/// One measurement, run once per round.
pub(crate) type Entry<'a> = Box<dyn Fn() -> Result<Run, BoxError> + 'a>;

/// Measures `entries` side by side: `opts.rounds` rounds, each running every entry once in
/// turn, so that a slow moment of a shared machine hits all of them alike; each round starts one
/// entry further on, so that no entry always follows the same one (what an entry leaves behind,
/// dead rows or a warm cache, falls on each of the others in turn). Per entry, the round of
/// median throughput, with the errors and retries of every round.
pub(crate) fn interleaved(entries: &[Entry<'_>], opts: &Options) -> Result<Vec<Run>, BoxError> {
    let mut rounds: Vec<Vec<Run>> = entries.iter().map(|_| Vec::new()).collect();
    for round in 0..opts.rounds.max(1) as usize {
        let start = round % entries.len().max(1);
        for i in (start..entries.len()).chain(0..start) {
            let (entry, runs) = (&entries[i], &mut rounds[i]);
            let before = CpuTimes::now();
            let mut run = entry()?;
            if let (Some(before), Some(after)) = (before, CpuTimes::now()) {
                // Includes the mode's reset and total reads around the measurement: a few ms.
                let per_tx = |from: f64, to: f64| (to - from) * 1e6 / run.committed.max(1) as f64;
                run.client_cpu_us = per_tx(before.client, after.client);
                run.machine_cpu_us = per_tx(before.machine, after.machine);
            }
            runs.push(run);
        }
    }
    Ok(rounds
        .into_iter()
        .map(|mut runs| {
            let (errors, retries) = runs
                .iter()
                .fold((0, 0), |(e, r), run| (e + run.errors, r + run.retries));
            let round_tps = runs.iter().map(|run| run.tps).collect();
            runs.sort_by(|a, b| a.tps.total_cmp(&b.tps));
            let mut median = runs.swap_remove(runs.len() / 2);
            median.errors = errors;
            median.retries = retries;
            median.round_tps = round_tps;
            median
        })
        .collect())
}

/// One timed operation on a sync connection, given the call's index.
pub(crate) type SyncOp<'a, C> = &'a mut dyn FnMut(&mut C, i32) -> Result<(), BoxError>;

/// Calls `ops` in turn, `n` times each (call `i` of each gets `i`), timing every call alone:
/// per op, its calls' times in microseconds.
pub(crate) fn interleaved_samples<C>(
    conn: &mut C,
    n: i32,
    ops: &mut [SyncOp<'_, C>],
) -> Result<Vec<Vec<f64>>, BoxError> {
    let mut samples = vec![Vec::with_capacity(n.max(0) as usize); ops.len()];
    for i in 0..n {
        for (op, samples) in ops.iter_mut().zip(&mut samples) {
            let started = Instant::now();
            op(conn, i)?;
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(samples)
}

/// [`interleaved_samples`] over `warm + n` calls; per op, the median of the last `n`.
pub(crate) fn interleaved_us<C>(
    conn: &mut C,
    warm: i32,
    n: i32,
    ops: &mut [SyncOp<'_, C>],
) -> Result<Vec<f64>, BoxError> {
    let samples = interleaved_samples(conn, warm + n, ops)?;
    Ok(samples
        .into_iter()
        .map(|s| median(s[warm as usize..].to_vec()))
        .collect())
}

/// The median of some timings.
pub(crate) fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

pub(crate) fn setup<C: BenchConnection>(conn: &mut C) -> Result<(), BoxError> {
    for table in ["bench_single", "bench_events"] {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    conn.batch_execute(
        "CREATE TABLE bench_single (id INTEGER PRIMARY KEY NOT NULL, count BIGINT NOT NULL)",
    )?;
    conn.batch_execute(C::EVENTS_DDL)?;
    let specs: Vec<_> = [
        Private::COUNTERS,
        T1::COUNTERS,
        T2::COUNTERS,
        T4::COUNTERS,
        T8::COUNTERS,
        T16::COUNTERS,
        T32::COUNTERS,
        T64::COUNTERS,
        T128::COUNTERS,
        R1::COUNTERS,
        R2::COUNTERS,
        R4::COUNTERS,
        R8::COUNTERS,
        R16::COUNTERS,
        R32::COUNTERS,
        R64::COUNTERS,
        R128::COUNTERS,
        C1::COUNTERS,
        C2::COUNTERS,
        C4::COUNTERS,
        C8::COUNTERS,
        C16::COUNTERS,
        C32::COUNTERS,
        C64::COUNTERS,
        C128::COUNTERS,
        P64::COUNTERS,
        K64::COUNTERS,
    ]
    .concat();
    for spec in &specs {
        // The migration's SQL, without the migration log: the benchmark's tables are throwaway.
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {}", spec.table))?;
        conn.batch_execute(&slotted_core::migration::up_sql(
            spec,
            <C::Backend as slotted_core::CounterBackend>::DIALECT,
        ))?;
    }
    Ok(())
}
use slotted_core::SlottedModel;

/// `--deployed`: the pool as a long-running service's is when a measurement starts. Other
/// connections (other services, health checks, migrations: `others`, 0–74 at random, fewer where
/// the server's `max_connections` leaves no room) were opened between the pool's connections, and the
/// pool replaced half of its connections: the first half was opened with the other half's first
/// generation in between, which wrote and went away before the second half was opened. Every
/// connection of the pool and of the first generation writes once (a `connection` strategy's
/// writer index, or connection id, is taken then). `get` takes a connection from the pool and
/// keeps it open (the pool then holds them all, idle, for the measurement); `write` writes
/// through one; the others and the first generation are sync connections. Returns the others,
/// to keep open through the measurement.
pub(crate) fn deploy<C: BenchConnection, P>(
    url: &str,
    writers: u32,
    mut get: impl FnMut() -> Result<P, BoxError>,
    mut write: impl FnMut(&mut P) -> Result<(), BoxError>,
    write_raw: impl Fn(&mut C) -> Result<(), BoxError>,
) -> Result<(usize, Vec<C>), BoxError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Pool,
        Gone,
        Other,
    }
    let identity = match C::NAME {
        "postgres" => "SELECT CAST(pg_backend_pid() AS BIGINT) AS n",
        "mysql" => "SELECT CAST(CONNECTION_ID() AS SIGNED) AS n",
        other => return Err(format!("--deployed needs a server, not {other}").into()),
    };
    let mut observer = C::establish(url)?;
    let writers = writers as usize;
    let (half, gone) = (writers / 2, writers - writers / 2);
    // The server's limit (`max_connections`, read from it), less the pool, the first
    // generation, the sync pool (3) and a margin.
    let limit = observer.number(slotted_tests::connection_limit_sql(C::NAME))?;
    let room = usize::try_from(limit)
        .unwrap_or(0)
        .saturating_sub(writers + gone + 3 + 7);
    // xorshift, seeded by the writer count: the same deployment for every mode of a run.
    let mut seed = 0x5eed_0000_u64 + writers as u64;
    let mut below = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as usize
    };
    let others = below(room.min(74) + 1);
    let shuffled = |kinds: Vec<Open>, below: &mut dyn FnMut(usize) -> usize| {
        let mut kinds = kinds;
        for i in (1..kinds.len()).rev() {
            kinds.swap(i, below(i + 1));
        }
        kinds
    };
    let first: Vec<Open> = std::iter::repeat_n(Open::Pool, half)
        .chain(std::iter::repeat_n(Open::Gone, gone))
        .chain(std::iter::repeat_n(Open::Other, others / 2))
        .collect();
    let second: Vec<Open> = std::iter::repeat_n(Open::Pool, gone)
        .chain(std::iter::repeat_n(Open::Other, others - others / 2))
        .collect();
    let (mut held, mut gone_conns, mut bystanders) = (Vec::new(), Vec::new(), Vec::new());
    for (step, kinds) in [first, second].into_iter().enumerate() {
        for kind in shuffled(kinds, &mut below) {
            match kind {
                Open::Pool => {
                    let mut conn = get()?;
                    write(&mut conn)?;
                    held.push(conn);
                }
                Open::Gone => {
                    let mut conn = C::establish(url)?;
                    write_raw(&mut conn)?;
                    gone_conns.push(conn);
                }
                Open::Other => bystanders.push(C::establish(url)?),
            }
        }
        if step == 0 {
            // The first generation goes; the server ends its sessions a moment later.
            let mut ids = Vec::new();
            for conn in &mut gone_conns {
                ids.push(conn.number(identity)?);
            }
            drop(std::mem::take(&mut gone_conns));
            let list = ids
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let alive = match C::NAME {
                "postgres" => format!("SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid IN ({list})"),
                _ => format!("SELECT CAST(COUNT(*) AS SIGNED) AS n FROM information_schema.processlist WHERE id IN ({list})"),
            };
            let until = Instant::now() + Duration::from_secs(30);
            while !ids.is_empty() && observer.number(&alive)? > 0 {
                if Instant::now() > until {
                    return Err("the replaced connections' sessions did not end".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    drop(held);
    Ok((others, bystanders))
}

/// A row of `BenchConnection::number`.
#[derive(QueryableByName)]
pub(crate) struct Number {
    #[diesel(sql_type = BigInt)]
    pub(crate) n: i64,
}
