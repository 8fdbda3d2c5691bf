//! The maintainer: [`Maintainer`] on a thread over an r2d2 pool, and, behind the `async`
//! feature, [`AsyncMaintainer`] as a tokio task over a bb8 or deadpool pool. The builder, the
//! jobs and the loop of passes are written once, here; each face (`thread`, `task`) gives the
//! loop its lease, its connections and its waits.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::exec::BoxFuture;
use crate::table::CounterTable;

mod thread;
pub use thread::{Maintainer, OnThread};

#[cfg(feature = "async")]
mod task;
#[cfg(feature = "async")]
pub use task::{AsyncMaintainer, OnTask};

/// The longest pause after failed passes.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a job found: a short summary of its result, and whether an operator must hear of it
/// (drift).
#[doc(hidden)]
pub struct Outcome {
    summary: String,
    alert: bool,
}

/// Its figures are the underlying report's, recorded by [`Work::run`].
impl crate::trace::Report for Outcome {}

impl Outcome {
    fn done(summary: String) -> Self {
        Outcome {
            summary,
            alert: false,
        }
    }
}

/// One kind of job, for the counter its job was made for.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Compact,
    RollUp,
    Verify { repair: bool },
    Absorb,
    Retention(Retention),
}

impl Work {
    /// The maintenance call it is, as its trace span names it (`full`: in a full pass).
    fn op(self, full: bool) -> &'static str {
        match self {
            Work::Compact if full => "compact_all",
            Work::Compact => "maintain_changed",
            Work::RollUp => "refresh_cache_all",
            Work::Verify { .. } => "verify_follow_all",
            Work::Absorb => "absorb_all",
            Work::Retention(Retention::Delete(_)) => "delete_buckets_before",
            Work::Retention(Retention::Fold(_)) => "fold_buckets_before",
        }
    }

    /// The job's name in reports: `compact Post.likes`.
    fn name(self, spec: &crate::table::CounterSpec) -> String {
        let what = match self {
            Work::Compact => "compact",
            Work::RollUp => "roll up",
            Work::Verify { .. } => "verify",
            Work::Absorb => "absorb",
            Work::Retention(_) => "retention",
        };
        format!("{what} {}", spec.qualified_name())
    }

    /// The job of `T`, on any face, as `args` say, inside the span of its call (whose fields
    /// its report records, as the call's own would).
    async fn run<T: CounterTable, E: Exec>(self, exec: &mut E, args: JobArgs) -> Result<Outcome> {
        use crate::trace::Report as _;
        let JobArgs {
            batch, full, now, ..
        } = args;
        Ok(match self {
            Work::Compact if full => {
                let report = compact_all::<T, _>(exec, batch).await?;
                report.report();
                Outcome::done(format!("{} records compacted", report.records))
            }
            Work::Compact => {
                let report = maintain_changed::<T, _>(exec, batch).await?;
                report.report();
                Outcome::done(format!(
                    "{} records written since the last pass compacted, {} cached rows updated",
                    report.compaction.records, report.refresh.updated
                ))
            }
            Work::RollUp => {
                let report = refresh_all::<T, _>(exec, batch).await?;
                report.report();
                Outcome::done(format!("{} rows updated", report.updated))
            }
            Work::Verify { repair } => {
                let report = follow::verify_all::<T, _>(exec, batch, repair).await?;
                report.report();
                Outcome {
                    summary: format!(
                        "{} records verified: {} drifted, {} repaired; {} of {} triggers enabled, \
                         {} stray, {} foreign keys they rely on gone",
                        report.records,
                        report.drifted,
                        report.repaired,
                        report.triggers_enabled,
                        report.triggers_expected,
                        report.stray_triggers,
                        report.foreign_keys_missing
                    ),
                    alert: !report.is_exact(),
                }
            }
            Work::Absorb => {
                let report = absorb_all::<T, _>(exec, batch).await?;
                report.report();
                Outcome::done(format!("{} records absorbed", report.records))
            }
            Work::Retention(keep) => {
                let cutoff = keep.cutoff(now);
                Outcome::done(match keep {
                    Retention::Delete(_) => {
                        let rows = delete_buckets_before::<T, _>(exec, cutoff, batch).await?;
                        rows.report();
                        format!("{rows} rows deleted")
                    }
                    Retention::Fold(_) => {
                        let report = fold_buckets_before::<T, _>(exec, cutoff, batch).await?;
                        report.report();
                        format!("{} records folded", report.records)
                    }
                })
            }
        })
    }
}

/// What one run of a job is given: its kind, its batch (records), whether the pass is a full
/// one (every record; otherwise compaction and roll-up take only the records written since the
/// last pass), and the pass's clock (a retention job's cutoff).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct JobArgs {
    work: Work,
    batch: usize,
    full: bool,
    now: SystemTime,
}

mod sealed {
    pub trait Sealed {}
}

/// How a maintainer runs: [`OnThread`] ([`Maintainer`], over a sync pool) or `OnTask`
/// (`AsyncMaintainer`, over an async pool). Sealed: the builder's second parameter, named only
/// by the faces.
pub trait Face<P>: sealed::Sealed + 'static {
    /// Runs one kind of job of one counter on one of the pool's connections.
    #[doc(hidden)]
    type Run: Copy + Send + 'static;
    /// The [`Run`](Self::Run) of `T`'s jobs.
    #[doc(hidden)]
    fn run_of<T: CounterTable>() -> Self::Run;
}

struct Job<R> {
    name: String,
    work: Work,
    run: R,
    /// The counter's bucket width, for a retention job's cutoff.
    bucket: Option<crate::BucketWidth>,
}

impl<R> Job<R> {
    /// Run at every pass (`false`: at the verify interval, with the full passes). The
    /// roll-up of every record runs with the full passes only: the passes between roll up the
    /// records they compact.
    fn every_pass(&self) -> bool {
        !matches!(self.work, Work::Verify { .. } | Work::RollUp)
    }

    /// The first bucket a retention job keeps, now: its cutoff's bucket start. `None` for
    /// other jobs.
    fn retention_cutoff(&self, now: SystemTime) -> Option<i64> {
        let Work::Retention(keep) = self.work else {
            return None;
        };
        let cutoff = keep.cutoff(now);
        Some(self.bucket.map_or(i64::MIN, |width| width.start_of(cutoff)))
    }
}

/// The counters a maintainer keeps, and how: made by [`Maintainer::builder`] (or
/// `AsyncMaintainer::builder`), started by `start`.
pub struct MaintainerBuilder<P, F: Face<P> = OnThread> {
    pool: P,
    jobs: Vec<Job<F::Run>>,
    config: Config,
}

/// The pace of the passes.
#[derive(Debug, Clone, Copy)]
struct Config {
    freshness: Duration,
    verify_every: Duration,
    batch: usize,
    full_pass_at_start: bool,
}

impl<P, F: Face<P>> MaintainerBuilder<P, F> {
    fn new(pool: P) -> Self {
        MaintainerBuilder {
            pool,
            jobs: Vec::new(),
            config: Config {
                freshness: Duration::from_secs(1),
                verify_every: Duration::from_secs(600),
                batch: MAINTENANCE_BATCH,
                full_pass_at_start: true,
            },
        }
    }

    fn push<T: CounterTable>(&mut self, work: Work) {
        let name = work.name(&T::SPEC);
        // One job of a kind per counter: the last call says how (`repair_follow` after
        // `counter`, a second `retention`).
        self.jobs.retain(|job| job.name != name);
        self.jobs.push(Job {
            name,
            work,
            run: F::run_of::<T>(),
            bucket: T::SPEC.bucket,
        });
    }

    /// Maintains the counter `T` as its declaration calls for: compaction at every pass, the
    /// roll-up into its cached column when it has one (`cache = …`), and, at the verify
    /// interval, the verify job when it follows a child table (`follow = …`; drift is
    /// reported, not repaired: see [`repair_follow`](Self::repair_follow)).
    pub fn counter<T: CounterTable>(mut self) -> Self {
        self.push::<T>(Work::Compact);
        if T::SPEC.cache.is_some() {
            self.push::<T>(Work::RollUp);
        }
        if T::SPEC.follow.is_some() {
            self.push::<T>(Work::Verify { repair: false });
        }
        self
    }

    /// Repairs the drift the verify job of `T` (a counter that follows a child table) finds,
    /// instead of only reporting it.
    pub fn repair_follow<T: crate::FollowingCounterTable>(mut self) -> Self {
        self.push::<T>(Work::Verify { repair: true });
        self
    }

    /// Absorbs the column `T` adopts into its slots at every pass: only once no binary of the
    /// application writes that column any more (see
    /// [`absorb_all`](crate::CounterMaintenance::absorb_all)).
    pub fn absorb<T: crate::AdoptingCounterTable>(mut self) -> Self {
        self.push::<T>(Work::Absorb);
        self
    }

    /// Retention of the bucketed counter `T` at every pass: its buckets older than `age`
    /// deleted ([`Retention::Delete`]) or folded into its all-time bucket
    /// ([`Retention::Fold`]).
    pub fn retention<T: crate::BucketedCounterTable>(mut self, keep: Retention) -> Self {
        self.push::<T>(Work::Retention(keep));
        self
    }

    /// The freshness bound of the cached columns (1 s unless set): passes follow one another
    /// so that a total is in its cached column within it, or the report says by how much the
    /// last pass missed it.
    pub fn freshness(mut self, bound: Duration) -> Self {
        self.config.freshness = bound.max(Duration::from_millis(1));
        self
    }

    /// How often the verify jobs run (every 10 minutes unless set): each reads every record
    /// and every child row, so it is far costlier than a pass.
    pub fn verify_every(mut self, interval: Duration) -> Self {
        self.config.verify_every = interval;
        self
    }

    /// Whether the first pass is a full one (the default): compaction and roll-up of every
    /// record, and the verify jobs, as at each verify interval. A new cached column gets every
    /// record's total at once. A deployment that restarts its processes often, whose cached
    /// columns are rolled up already, can start with passes over what was written since
    /// (`false`): its first full pass then comes one verify interval after the start.
    pub fn full_pass_at_start(mut self, full: bool) -> Self {
        self.config.full_pass_at_start = full;
        self
    }

    /// Records per batch of every job ([`MAINTENANCE_BATCH`] unless set).
    pub fn batch(mut self, records: usize) -> Self {
        self.config.batch = records.clamp(1, MAX_PAGE);
        self
    }

    /// The report a maintainer starts with, and the state its face shares with its handle.
    fn shared(&self) -> Shared {
        Shared {
            report: Mutex::new(MaintainerReport {
                jobs: self
                    .jobs
                    .iter()
                    .map(|job| JobReport {
                        name: job.name.clone(),
                        ..JobReport::default()
                    })
                    .collect(),
                freshness_bound: self.config.freshness,
                ..MaintainerReport::default()
            }),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            #[cfg(feature = "async")]
            notify: tokio::sync::Notify::new(),
        }
    }
}

/// What the retention of a bucketed counter does with buckets older than its age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Deletes them: their counts leave every total.
    Delete(Duration),
    /// Folds them into the all-time bucket: totals stay, per-bucket detail goes.
    Fold(Duration),
}

impl Retention {
    /// The time before which buckets go, `now`.
    fn cutoff(self, now: SystemTime) -> SystemTime {
        let (Retention::Delete(age) | Retention::Fold(age)) = self;
        now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// What a maintainer's handle and its thread or task share: the report, and the stop signal
/// (a condition variable for the thread, a `Notify` for the task).
struct Shared {
    report: Mutex<MaintainerReport>,
    stop: Mutex<bool>,
    wake: Condvar,
    #[cfg(feature = "async")]
    notify: tokio::sync::Notify,
}

impl Shared {
    fn stopping(&self) -> bool {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn signal_stop(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
        #[cfg(feature = "async")]
        self.notify.notify_waiters();
    }

    fn report(&self) -> MaintainerReport {
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn update(&self, change: impl FnOnce(&mut MaintainerReport)) {
        change(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// A maintainer's handle (`Maintainer`, `AsyncMaintainer`) on what it shares with its thread or
/// task: the report, and the stop signal, given when the handle is dropped (the thread or task
/// ends after its job).
struct Handle(std::sync::Arc<Shared>);

impl Handle {
    fn report(&self) -> MaintainerReport {
        self.0.report()
    }

    fn signal_stop(&self) {
        self.0.signal_stop();
    }

    /// The report after a stop: `running` when the thread or task had not `ended` within the
    /// stop's bound.
    fn stopped(&self, ended: bool) -> MaintainerReport {
        let mut report = self.report();
        report.running = !ended;
        report
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// What a maintainer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintainerReport {
    /// Whether it holds the lease and runs the passes (`false`: another maintainer of the
    /// database does, and this one stands by).
    pub active: bool,
    /// Passes run to their end.
    pub passes: u64,
    /// Times it took the lease (more than once: it lost it, its connection broke, and took it
    /// again).
    pub leases_taken: u64,
    /// The freshness bound it was given.
    pub freshness_bound: Duration,
    /// The last pass's staleness: from the start of the pass before it to its own end, the
    /// longest a total written meanwhile waited for its cached column.
    pub staleness: Option<Duration>,
    /// The largest staleness of any pass.
    pub worst_staleness: Option<Duration>,
    /// Passes whose staleness exceeded the bound.
    pub passes_over_bound: u64,
    /// Jobs that failed, in all.
    pub errors: u64,
    /// The last failure: the job and the error.
    pub last_error: Option<String>,
    /// Runs of a verify job that found a counter drifted from its child rows, or its triggers
    /// missing or disabled.
    pub alerts: u64,
    /// The last of them: the job and what it found.
    pub last_alert: Option<String>,
    /// Each job's runs.
    pub jobs: Vec<JobReport>,
    /// Set by `stop`: the thread or task had not ended within its bound.
    pub running: bool,
}

impl MaintainerReport {
    /// Whether the last pass met the freshness bound.
    pub fn fresh(&self) -> bool {
        self.staleness.is_some_and(|s| s <= self.freshness_bound)
    }
}

/// One job of a maintainer: `compact Post.likes`, `roll up Post.likes`…
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobReport {
    /// What it does, to which counter.
    pub name: String,
    /// Runs that ended well.
    pub runs: u64,
    /// Runs that failed.
    pub failures: u64,
    /// The last run's result, or its error.
    pub last: Option<String>,
}

/// What the loop of passes needs from a face: the lease, a job run on a connection, a wait.
trait Driver {
    type Run: Copy;
    /// Whether this maintainer holds the lease `key`, checked (and taken when free) on its own
    /// connection, which it keeps while it holds it; an error when there is no connection or
    /// the check failed. SQLite has no lease: always held, on no connection.
    fn hold_lease(&mut self, key: i32, wait: Duration) -> BoxFuture<'_, Result<bool>>;
    /// `run` of `work`, on the lease's connection (a session lock is in no job's way, and the
    /// holder needs no second connection), or on one from the pool when there is no lease
    /// (SQLite), waiting `wait` at most for it. A panic in the job is its error.
    fn run(
        &mut self,
        run: Self::Run,
        job: JobArgs,
        wait: Duration,
    ) -> BoxFuture<'_, Result<Outcome>>;
    /// Waits `pause`, or less when stopped. Whether it was stopped.
    fn sleep<'a>(&'a self, shared: &'a Shared, pause: Duration) -> BoxFuture<'a, bool>;
    /// Gives the lease back, and its connection to the pool.
    fn release(&mut self) -> BoxFuture<'_, ()>;
    /// The clock the passes are timed by.
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The loop of passes, until stopped: the lease, then every job of a pass, then a pause so
/// that the next pass ends within the freshness bound.
async fn run_passes<D: Driver>(
    driver: &mut D,
    jobs: &[Job<D::Run>],
    config: Config,
    shared: &Shared,
) {
    let bound = config.freshness;
    let wait = bound.max(Duration::from_millis(100));
    let key = lease_key(jobs);
    let mut last_start: Option<Instant> = None;
    // The last full pass (with the verify jobs): none yet, or, without a full pass at the
    // start, the start.
    let mut last_full: Option<Instant> = (!config.full_pass_at_start).then(|| driver.now());
    let mut failing: u32 = 0;
    let mut failing_lease: u32 = 0;
    // Each retention job's cutoff at its last run that ended well.
    let mut retained: Vec<Option<i64>> = vec![None; jobs.len()];
    while !shared.stopping() {
        // The lease: held, taken, or held by another maintainer.
        let held = match driver.hold_lease(key, wait).await {
            Ok(held) => {
                failing_lease = 0;
                held
            }
            Err(e) => {
                // No connection, or the lease's broke: reported, and tried again later and
                // later while it lasts.
                report_error(shared, "lease", &e);
                failing_lease = failing_lease.saturating_add(1);
                shared.update(|r| r.active = false);
                last_start = None;
                if driver.sleep(shared, backoff(bound, failing_lease)).await {
                    break;
                }
                continue;
            }
        };
        shared.update(|r| {
            if held && !r.active {
                r.leases_taken += 1;
            }
            r.active = held;
        });
        if !held {
            last_start = None;
            if driver.sleep(shared, bound).await {
                break;
            }
            continue;
        }
        let (start, now) = (driver.now(), SystemTime::now());
        let verify = last_full.is_none_or(|at| start - at >= config.verify_every);
        let mut errors = 0;
        for (index, job) in jobs.iter().enumerate() {
            if shared.stopping() {
                break;
            }
            if !job.every_pass() && !verify {
                continue;
            }
            // A retention job runs when its cutoff has moved to another bucket since its last
            // run, and at the full passes: between, no bucket has aged past it (only a write
            // into a past bucket with `at`, which the next full pass takes).
            let cutoff = job.retention_cutoff(now);
            if cutoff.is_some() && !verify && retained[index] == cutoff {
                continue;
            }
            let args = JobArgs {
                work: job.work,
                batch: config.batch,
                full: verify,
                now,
            };
            let outcome = driver.run(job.run, args, wait).await;
            match outcome {
                Ok(_) => retained[index] = cutoff,
                Err(_) => errors += 1,
            }
            report_job(shared, index, &job.name, outcome);
        }
        if shared.stopping() {
            break;
        }
        if verify {
            last_full = Some(start);
        }
        let end = driver.now();
        let staleness = end.duration_since(last_start.unwrap_or(start));
        last_start = Some(start);
        shared.update(|r| {
            r.passes += 1;
            r.staleness = Some(staleness);
            r.worst_staleness = Some(r.worst_staleness.map_or(staleness, |w| w.max(staleness)));
            if staleness > bound {
                r.passes_over_bound += 1;
            }
        });
        #[cfg(feature = "tracing")]
        if staleness > bound {
            tracing::warn!(
                staleness_ms = staleness.as_secs_f64() * 1e3,
                bound_ms = bound.as_secs_f64() * 1e3,
                "slotted: a maintainer pass missed the freshness bound"
            );
        }
        // After a pass with errors, later and later while they last; otherwise so that the
        // next pass ends within the bound of this one's start.
        let pause = if errors > 0 {
            failing = failing.saturating_add(1);
            backoff(bound, failing)
        } else {
            failing = 0;
            pause_after(bound, end - start)
        };
        if driver.sleep(shared, pause).await {
            break;
        }
    }
    // Stopping: the lease is given back, then its connection goes back to the pool.
    driver.release().await;
    shared.update(|r| r.active = false);
}

/// The pause after a pass of length `pass` that ended well. A write just after a pass began
/// may have missed it: the next pass takes it, so it waits from this pass's start to the next
/// one's end, this pass, the pause and the next pass. So the pause is the bound less this pass
/// and the next: none once a pass takes about half the bound, and the passes then follow one
/// another at once (the report says by how much they miss it).
fn pause_after(bound: Duration, pass: Duration) -> Duration {
    // The next pass taken to be up to half as long again as this one, and a twentieth of the
    // bound kept for a late wake-up.
    let passes = pass.saturating_add(pass.saturating_mul(3) / 2);
    bound.saturating_sub(passes.saturating_add(bound / 20))
}

/// A panic's payload as the error of the job it ended.
fn panicked(payload: Box<dyn std::any::Any + Send>) -> crate::Error {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    crate::Error::Pool(format!("the job panicked: {message}"))
}

/// The lease of one set of counters: maintainers given the same counters share one, and
/// maintainers of other counters of the same database have leases of their own. A stable
/// hash (FNV-1a) of the jobs' names, as a 31-bit number.
fn lease_key<R>(jobs: &[Job<R>]) -> i32 {
    let mut names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    names.sort_unstable();
    let hash = crate::table::stable_hash(names.join("\n").as_bytes());
    i32::try_from(hash & 0x7fff_ffff).unwrap_or(0)
}

/// Whether the lease check's rows say it is held.
fn lease_held(rows: &[crate::sql::Sum]) -> bool {
    matches!(rows, [crate::sql::Sum(Some(text))] if text.trim() == "1")
}

/// The pause after `failures` failed passes in a row: the bound, doubled each time, up to
/// [`MAX_BACKOFF`].
fn backoff(bound: Duration, failures: u32) -> Duration {
    bound
        .saturating_mul(1 << failures.min(16))
        .min(MAX_BACKOFF)
        .max(bound)
}

/// A failure outside the jobs (`what`: the lease).
fn report_error(shared: &Shared, what: &str, error: &crate::Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(job = what, error = %error, "slotted: the maintainer failed");
    shared.update(|r| {
        r.errors += 1;
        r.last_error = Some(format!("{what}: {error}"));
    });
}

fn report_job(shared: &Shared, index: usize, name: &str, outcome: Result<Outcome>) {
    shared.update(|r| {
        let Some(job) = r.jobs.get_mut(index) else {
            return;
        };
        match outcome {
            Ok(outcome) => {
                job.runs += 1;
                if outcome.alert {
                    r.alerts += 1;
                    r.last_alert = Some(format!("{name}: {}", outcome.summary));
                }
                job.last = Some(outcome.summary);
            }
            Err(e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(job = name, error = %e, "slotted: a maintainer job failed");
                job.failures += 1;
                job.last = Some(e.to_string());
                r.errors += 1;
                r.last_error = Some(format!("{name}: {e}"));
            }
        }
    });
}

#[cfg(test)]
mod tests;
