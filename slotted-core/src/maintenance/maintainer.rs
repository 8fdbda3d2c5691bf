//! The maintainer (see [`Maintainer`]).

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::buffer::sync::ConnectionPool;
use crate::dialect::{CounterBackend, Dialect};
use crate::sql::lease::{HoldLease, ReleaseLease};
use crate::sql::Sum;
use crate::table::CounterTable;

/// The longest pause after failed passes.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a job does on a connection: a short summary of its result, and whether it found
/// something an operator must hear of (drift).
type JobFn<C> = Box<dyn FnMut(&mut C) -> Result<Outcome> + Send>;

struct Outcome {
    summary: String,
    alert: bool,
}

impl Outcome {
    fn done(summary: String) -> Self {
        Outcome {
            summary,
            alert: false,
        }
    }
}

struct Job<C> {
    name: String,
    /// Run at every pass (`false`: at the verify interval).
    every_pass: bool,
    run: JobFn<C>,
}

/// The counters a [`Maintainer`] keeps, and how: made by [`Maintainer::builder`], started by
/// [`start`](Self::start).
pub struct MaintainerBuilder<P: ConnectionPool> {
    pool: P,
    jobs: Vec<Job<P::Connection>>,
    freshness: Duration,
    verify_every: Duration,
    batch: usize,
}

impl<P: ConnectionPool> MaintainerBuilder<P> {
    /// Maintains the counter `T` as its declaration calls for: compaction at every pass, the
    /// roll-up into its cached column when it has one (`cache = …`), and, at the verify
    /// interval, the verify job when it follows a child table (`follow = …`; drift is
    /// reported, not repaired: see [`repair_follow`](Self::repair_follow)).
    pub fn counter<T: CounterTable>(mut self) -> Self {
        let spec = &T::SPEC;
        let batch = self.batch;
        self.jobs.push(Job {
            name: format!("compact {}", spec.qualified_name()),
            every_pass: true,
            run: Box::new(move |conn| {
                let report = calls::table_call::<T, _, _>("compact_all", conn, |exec| {
                    run_now(compact_all::<T, _>(exec, batch))
                })?;
                Ok(Outcome::done(format!(
                    "{} records compacted",
                    report.records
                )))
            }),
        });
        if spec.cache.is_some() {
            self.jobs.push(Job {
                name: format!("roll up {}", spec.qualified_name()),
                every_pass: true,
                run: Box::new(move |conn| {
                    let report = calls::table_call::<T, _, _>("refresh_cache_all", conn, |exec| {
                        run_now(refresh_all::<T, _>(exec, batch))
                    })?;
                    Ok(Outcome::done(format!("{} rows updated", report.updated)))
                }),
            });
        }
        if spec.follow.is_some() {
            self.push_verify::<T>(false);
        }
        self
    }

    /// Repairs the drift the verify job of `T` (a counter that follows a child table) finds,
    /// instead of only reporting it.
    pub fn repair_follow<T: crate::FollowingCounterTable>(mut self) -> Self {
        let name = format!("verify {}", T::SPEC.qualified_name());
        self.jobs.retain(|job| job.name != name);
        self.push_verify::<T>(true);
        self
    }

    fn push_verify<T: CounterTable>(&mut self, repair: bool) {
        let batch = self.batch;
        self.jobs.push(Job {
            name: format!("verify {}", T::SPEC.qualified_name()),
            every_pass: false,
            run: Box::new(move |conn| {
                let report = calls::table_call::<T, _, _>("verify_follow_all", conn, |exec| {
                    run_now(follow::verify_all::<T, _>(exec, batch, repair))
                })?;
                Ok(Outcome {
                    summary: format!(
                        "{} records verified: {} drifted, {} repaired; {} of {} triggers enabled, \
                         {} stray",
                        report.records,
                        report.drifted,
                        report.repaired,
                        report.triggers_enabled,
                        report.triggers_expected,
                        report.stray_triggers
                    ),
                    alert: !report.is_exact(),
                })
            }),
        });
    }

    /// Absorbs the column `T` adopts into its slots at every pass: only once no binary of the
    /// application writes that column any more (see
    /// [`absorb_all`](crate::CounterMaintenance::absorb_all)).
    pub fn absorb<T: crate::AdoptingCounterTable>(mut self) -> Self {
        let batch = self.batch;
        self.jobs.push(Job {
            name: format!("absorb {}", T::SPEC.qualified_name()),
            every_pass: true,
            run: Box::new(move |conn| {
                let report = T::default().absorb_all(batch, conn)?;
                Ok(Outcome::done(format!(
                    "{} records absorbed",
                    report.records
                )))
            }),
        });
        self
    }

    /// Retention of the bucketed counter `T` at every pass: its buckets older than `age`
    /// deleted ([`Retention::Delete`]) or folded into its all-time bucket
    /// ([`Retention::Fold`]).
    pub fn retention<T: crate::BucketedCounterTable>(mut self, keep: Retention) -> Self {
        let batch = self.batch;
        self.jobs.push(Job {
            name: format!("retention {}", T::SPEC.qualified_name()),
            every_pass: true,
            run: Box::new(move |conn| {
                let age = match keep {
                    Retention::Delete(age) | Retention::Fold(age) => age,
                };
                let cutoff = SystemTime::now()
                    .checked_sub(age)
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                Ok(Outcome::done(match keep {
                    Retention::Delete(_) => {
                        let rows = T::default().delete_buckets_before(cutoff, batch, conn)?;
                        format!("{rows} rows deleted")
                    }
                    Retention::Fold(_) => {
                        let report = T::default().fold_buckets_before(cutoff, batch, conn)?;
                        format!("{} records folded", report.records)
                    }
                }))
            }),
        });
        self
    }

    /// The freshness bound of the cached columns (1 s unless set): passes follow one another
    /// so that a total is in its cached column within it, or the report says by how much the
    /// last pass missed it.
    pub fn freshness(mut self, bound: Duration) -> Self {
        self.freshness = bound.max(Duration::from_millis(1));
        self
    }

    /// How often the verify jobs run (every 10 minutes unless set): each reads every record
    /// and every child row, so it is far costlier than a pass.
    pub fn verify_every(mut self, interval: Duration) -> Self {
        self.verify_every = interval;
        self
    }

    /// Records per batch of every job ([`MAINTENANCE_BATCH`] unless set).
    pub fn batch(mut self, records: usize) -> Self {
        self.batch = records.clamp(1, MAX_PAGE);
        self
    }

    /// Starts the maintainer's thread.
    pub fn start(self) -> std::io::Result<Maintainer> {
        let shared = Arc::new(Shared {
            report: Mutex::new(MaintainerReport {
                jobs: self
                    .jobs
                    .iter()
                    .map(|job| JobReport {
                        name: job.name.clone(),
                        ..JobReport::default()
                    })
                    .collect(),
                freshness_bound: self.freshness,
                ..MaintainerReport::default()
            }),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let (done_tx, done_rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("slotted-maintainer".to_owned())
            .spawn(move || {
                run(self, &thread_shared);
                let _ = done_tx.send(());
            })?;
        Ok(Maintainer {
            shared,
            handle: Some(handle),
            done: done_rx,
        })
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

/// The maintainer: one call at start-up keeps counters maintained in the background, on a
/// thread of its own over a connection pool (r2d2's, or any [`ConnectionPool`]).
///
/// Each pass runs, for every counter given, the jobs its declaration calls for: compaction,
/// the roll-up into its cached column (`cache = …`), the absorb of an adopted column (only
/// when asked: it says that no old binary writes the column any more), bucket retention (when
/// asked, with its age), and, at a longer interval, the verify job of a counter that follows a
/// child table (reporting drift, or repairing it when asked). Passes follow one another so
/// that a cached column is never staler than the freshness bound: each starts when the bound,
/// less the last pass's length, has run out.
///
/// Every process of a deployment may run one. Maintainers given the same counters share the
/// work through a lease, a session lock of the database (PostgreSQL an advisory lock; MySQL
/// and MariaDB `GET_LOCK`) keyed by the counters and their jobs, held on one connection of the
/// pool, on which the holder also runs its jobs: the maintainer that holds it runs the passes,
/// the others stand by and check the lease every bound. One of them takes it within a bound
/// once the holder stops, its process ends, or the server ends its session (a connection that
/// is merely cut off holds the lock until the server notices: TCP keepalives, PostgreSQL's
/// `idle_session_timeout`, MySQL's `wait_timeout`). A maintainer of other counters has a lease
/// of its own. Nothing depends on there being one: every job is exact beside writers and
/// beside itself, so two maintainers that both run (on a Galera cluster, whose `GET_LOCK` is
/// per node, or over SQLite, which has no lease) do the work twice and count nothing twice.
///
/// A failed job is reported ([`MaintainerReport`], and a `tracing` event with the `tracing`
/// feature), never swallowed, and the pass goes on with the next job; a pass with errors is
/// followed by a pause that doubles up to 30 s while the failures last (a database that is
/// down). A maintainer killed mid-batch loses nothing: each batch is a transaction, which the
/// database rolls back.
///
/// Stopped by [`stop`](Self::stop), or when dropped (without waiting).
pub struct Maintainer {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

struct Shared {
    report: Mutex<MaintainerReport>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn stopping(&self) -> bool {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits `pause`, or less when stopped. Whether it was stopped.
    fn sleep(&self, pause: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (stop, _) = self
            .wake
            .wait_timeout_while(stop, pause, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        *stop
    }

    fn update(&self, change: impl FnOnce(&mut MaintainerReport)) {
        change(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

impl Maintainer {
    /// A maintainer of the counters to be given, over `pool`.
    ///
    /// ```no_run
    /// # use diesel::prelude::*;
    /// # use diesel::r2d2::{ConnectionManager, Pool};
    /// # use slotted_core::SlottedCounter;
    /// # diesel::table! { posts { id -> Integer, likes_count -> BigInt, } }
    /// # #[derive(SlottedCounter)]
    /// # #[diesel(table_name = posts)]
    /// # #[slotted(counter = likes, slots = 16, cache = likes_count)]
    /// # struct Post { id: i32 }
    /// use slotted_core::maintenance::Maintainer;
    /// use std::time::Duration;
    ///
    /// let pool = Pool::new(ConnectionManager::<PgConnection>::new("postgres://…"))?;
    /// let maintainer = Maintainer::builder(pool)
    ///     .counter::<posts_likes_slots::table>()
    ///     .freshness(Duration::from_secs(1))
    ///     .start()?;
    /// // … the application runs …
    /// let report = maintainer.stop(Duration::from_secs(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder<P: ConnectionPool>(pool: P) -> MaintainerBuilder<P> {
        MaintainerBuilder {
            pool,
            jobs: Vec::new(),
            freshness: Duration::from_secs(1),
            verify_every: Duration::from_secs(600),
            batch: MAINTENANCE_BATCH,
        }
    }

    /// What it did so far.
    pub fn report(&self) -> MaintainerReport {
        self.shared
            .report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops it: the job in flight finishes its pass (each of its batches commits or rolls
    /// back), and no other starts. Waits `within` at most for that, then returns the report;
    /// `running` is true when the thread had not ended by then (it ends after its job).
    pub fn stop(mut self, within: Duration) -> MaintainerReport {
        self.signal_stop();
        let ended = self.done.recv_timeout(within).is_ok();
        if ended {
            if let Some(handle) = self.handle.take() {
                let _ = handle.join();
            }
        }
        let mut report = self.report();
        report.running = !ended;
        report
    }

    fn signal_stop(&self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
    }
}

impl Drop for Maintainer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

impl std::fmt::Debug for Maintainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintainer")
            .field("report", &self.report())
            .finish()
    }
}

/// What a [`Maintainer`] did.
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
    /// Set by [`Maintainer::stop`]: the thread had not ended within its bound.
    pub running: bool,
}

impl MaintainerReport {
    /// Whether the last pass met the freshness bound.
    pub fn fresh(&self) -> bool {
        self.staleness.is_some_and(|s| s <= self.freshness_bound)
    }
}

/// One job of a [`Maintainer`]: `compact Post.likes`, `roll up Post.likes`…
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

/// The maintainer's thread.
fn run<P: ConnectionPool>(mut builder: MaintainerBuilder<P>, shared: &Shared) {
    let bound = builder.freshness;
    let key = lease_key(&builder.jobs);
    let mut lease: Lease<P::Guard, P::Connection> = Lease::default();
    let mut last_start: Option<Instant> = None;
    let mut last_verify: Option<Instant> = None;
    let mut failing: u32 = 0;
    let mut failing_lease: u32 = 0;
    while !shared.stopping() {
        // The lease: held, taken, or held by another maintainer.
        let held = match hold_lease(&builder.pool, &mut lease, key, bound) {
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
                if shared.sleep(backoff(bound, failing_lease)) {
                    break;
                }
                continue;
            }
        };
        let was_active = shared.report.lock().map(|r| r.active).unwrap_or(false);
        shared.update(|r| {
            r.active = held;
            if held && !was_active {
                r.leases_taken += 1;
            }
        });
        if !held {
            last_start = None;
            if shared.sleep(bound) {
                break;
            }
            continue;
        }
        let start = Instant::now();
        let verify = last_verify.is_none_or(|at| at.elapsed() >= builder.verify_every);
        let mut errors = 0;
        for (index, job) in builder.jobs.iter_mut().enumerate() {
            if shared.stopping() {
                break;
            }
            if !job.every_pass && !verify {
                continue;
            }
            // On the lease's connection (a session lock is in no job's way), so that the
            // lease's holder needs no second connection to work; SQLite, which holds none,
            // takes one from the pool.
            let outcome = match lease.conn.as_deref_mut() {
                Some(conn) => run_job(job, conn),
                None => builder
                    .pool
                    .connection_within(bound.max(Duration::from_millis(100)))
                    .and_then(|mut conn| run_job(job, &mut conn)),
            };
            if outcome.is_err() {
                errors += 1;
            }
            report_job(shared, index, &job.name, outcome);
        }
        if shared.stopping() {
            break;
        }
        if verify {
            last_verify = Some(start);
        }
        let end = Instant::now();
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
        // The next pass starts when the bound, less this pass's length, has run out; after a
        // pass with errors, later and later while they last.
        let pause = if errors > 0 {
            failing = failing.saturating_add(1);
            backoff(bound, failing)
        } else {
            failing = 0;
            bound.saturating_sub(end - start)
        };
        if shared.sleep(pause) {
            break;
        }
    }
    // Stopping: the lease is given back, then its connection goes back to the pool.
    drop(lease);
    shared.update(|r| r.active = false);
}

/// A job's run, a panic in it reported as its error: the thread, and with it the lease, lives
/// on (the lease's guard gives the lock back if the thread ever unwinds anyway).
fn run_job<C>(job: &mut Job<C>, conn: &mut C) -> Result<Outcome> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.run)(conn))).unwrap_or_else(
        |panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(crate::Error::Pool(format!("the job panicked: {message}")))
        },
    )
}

/// The lease of one set of counters: maintainers given the same counters share one, and
/// maintainers of other counters of the same database have leases of their own. A stable
/// hash (FNV-1a) of the jobs' names, as a 31-bit number.
fn lease_key<C>(jobs: &[Job<C>]) -> i32 {
    let mut names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    names.sort_unstable();
    let hash = crate::table::stable_hash(names.join("\n").as_bytes());
    i32::try_from(hash & 0x7fff_ffff).unwrap_or(0)
}

/// The connection that holds the lease, if any: given back released when dropped (the
/// maintainer stops, or its thread unwinds). When the release fails the connection is marked
/// broken, so that its pool closes it (and the server ends the session and its lock) instead
/// of lending it on with the lock held.
struct Lease<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> {
    conn: Option<G>,
    key: i32,
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Default for Lease<G, C> {
    fn default() -> Self {
        Lease { conn: None, key: 0 }
    }
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Lease<G, C> {
    /// Gives the lease back, and its connection to the pool.
    fn release(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            let released =
                run_now(SyncExec(&mut *conn).load::<_, Sum>(ReleaseLease::new(self.key)));
            if released.is_err() {
                SyncExec(&mut *conn).mark_broken();
            }
        }
    }
}

impl<G: std::ops::DerefMut<Target = C>, C: crate::CounterConnection> Drop for Lease<G, C> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The pause after `failures` failed passes in a row: the bound, doubled each time, up to
/// [`MAX_BACKOFF`].
fn backoff(bound: Duration, failures: u32) -> Duration {
    bound
        .saturating_mul(1 << failures.min(16))
        .min(MAX_BACKOFF)
        .max(bound)
}

/// Whether this maintainer holds the lease `key`, checked (and taken when free) on its own
/// connection, which it keeps while it holds it; an error when there is no connection or the
/// check failed. SQLite has no lease (and its pools are often of one connection): always
/// held, on no connection.
fn hold_lease<P: ConnectionPool>(
    pool: &P,
    lease: &mut Lease<P::Guard, P::Connection>,
    key: i32,
    wait: Duration,
) -> Result<bool> {
    if <<P::Connection as diesel::Connection>::Backend as CounterBackend>::DIALECT
        == Dialect::Sqlite
    {
        return Ok(true);
    }
    lease.key = key;
    let conn = match &mut lease.conn {
        Some(conn) => conn,
        None => lease
            .conn
            .insert(pool.connection_within(wait.max(Duration::from_millis(100)))?),
    };
    let held = run_now(SyncExec(&mut **conn).load::<_, Sum>(HoldLease::new(key)));
    match held {
        Ok(rows) if matches!(rows.as_slice(), [Sum(Some(text))] if text.trim() == "1") => Ok(true),
        // Another maintainer holds it: the connection, which holds nothing, goes back to the
        // pool.
        Ok(_) => {
            lease.conn = None;
            Ok(false)
        }
        // The connection broke (and its session's lock with it), or it is out of step: given
        // back released, or marked broken.
        Err(e) => {
            lease.release();
            Err(crate::Error::Diesel(e))
        }
    }
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
