//! The loop of passes on a clock of its own: its pacing and which jobs a pass runs.

use super::*;
use std::cell::Cell;

const HOUR: Duration = Duration::from_secs(3600);

/// A driver on a clock of its own: each job takes `job` of it, each pause exactly what was
/// asked, and no time passes otherwise. It stops the loop after `passes` pauses.
struct Clocked {
    start: Instant,
    elapsed: Cell<Duration>,
    job: Duration,
    pauses: Cell<u32>,
    passes: u32,
    /// The kinds of the jobs run, in order.
    ran: Vec<Work>,
}

impl Clocked {
    fn new(job: Duration, passes: u32) -> Self {
        Clocked {
            start: Instant::now(),
            elapsed: Cell::new(Duration::ZERO),
            job,
            pauses: Cell::new(0),
            passes,
            ran: Vec::new(),
        }
    }

    fn advance(&self, by: Duration) {
        self.elapsed.set(self.elapsed.get() + by);
    }
}

impl Driver for Clocked {
    type Run = ();

    fn hold_lease(&mut self, _key: i32, _wait: Duration) -> BoxFuture<'_, Result<bool>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    fn run(&mut self, _run: (), job: JobArgs, _wait: Duration) -> BoxFuture<'_, Result<Outcome>> {
        self.advance(self.job);
        self.ran.push(job.work);
        Box::pin(std::future::ready(Ok(Outcome::done(String::new()))))
    }

    fn sleep<'a>(&'a self, shared: &'a Shared, pause: Duration) -> BoxFuture<'a, bool> {
        self.advance(pause);
        self.pauses.set(self.pauses.get() + 1);
        if self.pauses.get() >= self.passes {
            shared.signal_stop();
        }
        Box::pin(std::future::ready(shared.stopping()))
    }

    fn release(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn now(&self) -> Instant {
        self.start + self.elapsed.get()
    }
}

fn job(work: Work) -> Job<()> {
    Job {
        name: format!("{work:?}"),
        work,
        run: (),
        bucket: Some(crate::BucketWidth::Day),
    }
}

/// The loop over `jobs`, each taking `job_length`, until `passes` passes, with a bound of
/// 1 s and no full pass at the start unless every pass is one (`verify_every` zero): the
/// report, and the jobs run.
fn passes(
    job_length: Duration,
    passes: u32,
    jobs: &[Job<()>],
    verify_every: Duration,
) -> (MaintainerReport, Vec<Work>) {
    let config = Config {
        freshness: Duration::from_secs(1),
        verify_every,
        batch: MAINTENANCE_BATCH,
        full_pass_at_start: verify_every.is_zero(),
    };
    let shared = Shared {
        report: Mutex::new(MaintainerReport {
            freshness_bound: config.freshness,
            ..MaintainerReport::default()
        }),
        stop: Mutex::new(false),
        wake: Condvar::new(),
        #[cfg(feature = "async")]
        notify: tokio::sync::Notify::new(),
    };
    let mut driver = Clocked::new(job_length, passes);
    crate::exec::sync::run_now(run_passes(&mut driver, jobs, config, &shared));
    (shared.report(), driver.ran)
}

#[test]
fn short_passes_keep_the_bound_from_a_pass_start_to_the_next_pass_end() {
    // Two jobs of 50 ms: passes of 100 ms, a bound of 1 s. A write just after a pass began
    // is in the cache at the next pass's end: that must be within the bound.
    let jobs = [job(Work::Compact), job(Work::Absorb)];
    let (report, _) = passes(Duration::from_millis(50), 20, &jobs, HOUR);
    assert_eq!(report.passes, 20, "{report:?}");
    assert_eq!(report.passes_over_bound, 0, "{report:?}");
    let worst = report.worst_staleness.unwrap();
    assert!(worst <= Duration::from_secs(1), "{report:?}");
    // Not by running passes back to back: the pause is the bound less two passes and a
    // margin, 1 s - 250 ms - 50 ms.
    assert_eq!(worst, Duration::from_millis(100 + 700 + 100), "{report:?}");
}

#[test]
fn passes_over_half_the_bound_follow_one_another_and_are_reported() {
    // Passes of 600 ms: no pause, and each write waits up to two passes, over the bound.
    let jobs = [job(Work::Compact), job(Work::Absorb)];
    let (report, _) = passes(Duration::from_millis(300), 5, &jobs, HOUR);
    assert_eq!(report.worst_staleness, Some(Duration::from_millis(1200)));
    // The first pass has no pass before it: its own length, 600 ms, within the bound.
    assert_eq!(report.passes_over_bound, 4, "{report:?}");
}

#[test]
fn retention_runs_once_a_bucket_until_a_full_pass() {
    // Compaction at every pass; retention (a day's buckets, kept 30 days) at the first,
    // then only when its cutoff enters another day (not within this test's seconds of
    // virtual time, unless it started just before midnight: then twice).
    let keep = Retention::Delete(Duration::from_secs(30 * 86_400));
    let jobs = [job(Work::Compact), job(Work::Retention(keep))];
    let (report, ran) = passes(Duration::from_millis(10), 10, &jobs, HOUR);
    assert_eq!(report.passes, 10, "{report:?}");
    let count = |ran: &[Work], work: Work| ran.iter().filter(|w| **w == work).count();
    assert_eq!(count(&ran, Work::Compact), 10);
    assert!(
        (1..=2).contains(&count(&ran, Work::Retention(keep))),
        "{ran:?}"
    );
    // Every full pass runs it: with no verify interval, each pass is one.
    let (_, ran) = passes(Duration::from_millis(10), 10, &jobs, Duration::ZERO);
    assert_eq!(count(&ran, Work::Retention(keep)), 10);
}
