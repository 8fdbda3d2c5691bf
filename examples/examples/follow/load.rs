//! The load: the writers through Diesel, and the raw clients' anchors (pgbench, libmariadb).

use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::RngExt;
use slotted_examples::BoxError;

use super::{Server, HOLD, HOT_POSTS, USERS};

pub(super) struct Run {
    pub(super) committed: u64,
    pub(super) errors: u64,
    pub(super) seconds: f64,
    pub(super) first_error: Option<String>,
    /// The longest transaction a writer saw, begin to commit.
    pub(super) longest: Duration,
}

impl Run {
    pub(super) fn rate(&self) -> f64 {
        self.committed as f64 / self.seconds
    }
}

/// `writers` threads, a connection each, for `duration`: `BEGIN; INSERT` one comment on one of
/// the hot posts by a random author`; ` hold 2 ms`; COMMIT`.
pub(super) fn writers<C: Server>(
    url: &str,
    writers: usize,
    duration: Duration,
) -> Result<Run, BoxError> {
    writers_until::<C>(url, writers, duration, None)
}

/// [`writers`], stopping early when `stop` is set.
pub(super) fn writers_until<C: Server>(
    url: &str,
    writers: usize,
    duration: Duration,
    stop: Option<&std::sync::atomic::AtomicBool>,
) -> Result<Run, BoxError> {
    let mut conns = Vec::with_capacity(writers);
    for _ in 0..writers {
        conns.push(C::establish(url)?);
    }
    let barrier = Barrier::new(writers + 1);
    let (results, seconds) = std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut rng = rand::rng();
                    let (mut committed, mut errors, mut first_error) = (0_u64, 0_u64, None);
                    let mut longest = Duration::ZERO;
                    barrier.wait();
                    let end = Instant::now() + duration;
                    let stopped =
                        || stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst));
                    while Instant::now() < end && !stopped() {
                        let begun = Instant::now();
                        let post = rng.random_range(1..=HOT_POSTS);
                        let author = rng.random_range(1..=USERS);
                        let done = conn.transaction::<_, diesel::result::Error, _>(|conn| {
                            conn.insert_comment(post, author)?;
                            std::thread::sleep(HOLD);
                            Ok(())
                        });
                        longest = longest.max(begun.elapsed());
                        match done {
                            Ok(()) => committed += 1,
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    (committed, errors, first_error, longest)
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a writer panicked"))
            .collect();
        (results, started.elapsed().as_secs_f64())
    });
    let mut run = Run {
        committed: 0,
        errors: 0,
        seconds,
        first_error: None,
        longest: Duration::ZERO,
    };
    for (committed, errors, first_error, longest) in results {
        run.committed += committed;
        run.errors += errors;
        run.longest = run.longest.max(longest);
        if run.first_error.is_none() {
            run.first_error = first_error;
        }
    }
    Ok(run)
}

const PGBENCH_SCRIPT: &str = "\\set p random(1, 5)
\\set a random(1, 1000)
BEGIN;
INSERT INTO comments (post_id, author_id, local) VALUES (:p, :a, true);
\\sleep 2000 us
COMMIT;
";

/// The `none` transaction (a comment on one of the hot posts, by one of the users), the
/// `writer`'s `n`-th, for the raw MariaDB client: pgbench's script, its random numbers drawn
/// here.
fn raw_insert(_writer: u32, _n: u64) -> String {
    let mut rng = rand::rng();
    format!(
        "INSERT INTO comments (post_id, author_id, local) VALUES ({}, {}, TRUE)",
        rng.random_range(1..=HOT_POSTS),
        rng.random_range(1..=USERS)
    )
}

/// The `none` transaction run by libmariadb's C API, a thread per connection.
#[cfg(feature = "mysql")]
pub(super) fn raw_mariadb(url: &str, writers: usize, duration: Duration) -> Result<Run, BoxError> {
    let load = slotted_examples::anchors::libmariadb_scripted(
        url,
        raw_insert,
        Some(HOLD),
        writers as u32,
        duration.as_secs_f64(),
    )?;
    Ok(Run {
        committed: load.committed,
        errors: load.errors,
        seconds: load.seconds,
        first_error: None,
        longest: Duration::ZERO,
    })
}

#[cfg(not(feature = "mysql"))]
pub(super) fn raw_mariadb(_: &str, _: usize, _: Duration) -> Result<Run, BoxError> {
    Err("the raw MariaDB anchor needs the `mysql` feature".into())
}

/// The `none` transaction run by `pgbench -n -M prepared -c writers -j 2`; `None` when pgbench
/// is not installed.
pub(super) fn pgbench(
    url: &str,
    writers: usize,
    duration: Duration,
) -> Result<Option<Run>, BoxError> {
    let script =
        std::env::temp_dir().join(format!("slotted-follow-{}.pgbench", std::process::id()));
    std::fs::write(&script, PGBENCH_SCRIPT)?;
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &writers.to_string(),
            "-j",
            "2",
        ])
        .args([
            "-T",
            &(duration.as_secs_f64().ceil().max(1.0) as u64).to_string(),
        ])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output();
    let _ = std::fs::remove_file(&script);
    let output = match output {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("pgbench: {e}").into()),
    };
    let run = slotted_examples::anchors::pgbench_run(&output)?;
    Ok(Some(Run {
        committed: run.committed,
        errors: run.failed,
        seconds: run.seconds,
        first_error: None,
        longest: Duration::ZERO,
    }))
}
