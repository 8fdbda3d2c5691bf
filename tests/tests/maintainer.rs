//! The maintainer (issue 41), on every backend: one thread over an r2d2 pool that keeps
//! counters compacted, their cached columns within a freshness bound and their old buckets
//! retired, beside writers, exactly; two maintainers of one database, one of which works while
//! the other stands by and takes over when it stops; a follow counter's drift reported; a
//! failing job and a pool that cannot connect reported and retried, never a panic, and a stop
//! within its bound; a maintainer process killed (SIGKILL) in the middle of its compaction
//! pass, which loses no count; two maintainers of different counter sets (two releases during
//! a deploy) and the app rolling up one cache column, which ends equal to the totals.

use std::time::{Duration, Instant};

use diesel::r2d2::R2D2Connection;
use slotted_core::maintenance::{Maintainer, MaintainerReport, Retention};
use slotted_core::CounterMaintenance;
use slotted_tests::forum::{self, ForumPost};
use slotted_tests::lifecycle::*;
use slotted_tests::{backend_tests, pool, Stop, TestConnection, TestDb};

backend_tests! {
    all: [
        a_maintainer_keeps_caches_fresh_and_counts_exact_beside_writers,
        a_failing_job_and_a_pool_that_cannot_connect_are_reported,
        a_follow_counters_drift_is_reported_then_repaired,
        a_maintainer_killed_mid_pass_loses_nothing,
        two_releases_maintainers_and_the_app_roll_up_one_cache_right,
    ],
    servers: [
        two_maintainers_of_one_database_share_the_work,
        a_second_process_takes_over_when_the_first_is_killed,
    ],
}

const BOUND: Duration = Duration::from_millis(200);

/// Waits up to 10 s for `what` of the maintainer's report.
fn until(maintainer: &Maintainer, what: &str, ok: impl Fn(&MaintainerReport) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if ok(&maintainer.report()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: {:?}", maintainer.report());
}

/// Waits up to `seconds` for `read` to return `want`, then fails saying `what`.
fn until_read<T: PartialEq + std::fmt::Debug>(
    seconds: u64,
    what: &dyn Fn() -> String,
    want: T,
    mut read: impl FnMut() -> T,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let got = read();
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{got:?} != {want:?}: {}", what());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A maintainer that stood by takes the lease (`what`) and keeps article 1's cache: `add` more
/// likes reach it, `want` in all; then it stops, having taken the lease once and failed nothing.
fn takes_over_and_keeps_the_cache<C: TestConnection>(
    maintainer: Maintainer,
    what: &str,
    conn: &mut C,
    add: i64,
    want: i64,
) {
    until(&maintainer, what, |r| r.active && r.passes > 0);
    Article::likes_of(1).add(add, conn).unwrap();
    until_read(10, &|| format!("{:?}", maintainer.report()), want, || {
        cached_likes(conn, 1)
    });
    let report = maintainer.stop(Duration::from_secs(10));
    assert_eq!((report.errors, report.leases_taken), (0, 1), "{report:?}");
}

/// A migrated database of the test with articles 1 to 4, and a connection to it.
fn four_articles<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    migrate(&mut conn);
    conn.batch_execute("INSERT INTO articles (id) VALUES (1), (2), (3), (4)")
        .unwrap();
    Some((db, conn))
}

/// Articles 1 to 4's cached likes.
fn four_caches<C: TestConnection>(conn: &mut C) -> Vec<i64> {
    (1..=4).map(|id| cached_likes(conn, id)).collect()
}

fn a_maintainer_keeps_caches_fresh_and_counts_exact_beside_writers<
    C: TestConnection + R2D2Connection,
>(
    test: &str,
) {
    let Some((db, mut conn)) = four_articles::<C>(test) else {
        return;
    };
    // An old day bucket, which retention deletes.
    let old = std::time::SystemTime::now() - Duration::from_secs(40 * 86_400);
    Download::daily_of(1).at(old).add(5, &mut conn).unwrap();
    Download::daily_of(1).add(2, &mut conn).unwrap();

    let maintainer = Maintainer::builder(pool::<C>(&db.url, 4))
        .counter::<articles_likes_slots::table>()
        .counter::<downloads_daily_slots::table>()
        .retention::<downloads_daily_slots::table>(Retention::Delete(Duration::from_secs(
            30 * 86_400,
        )))
        .freshness(BOUND)
        .start()
        .unwrap();
    let writers = if C::NAME == "sqlite" { 1 } else { 3 };
    let stop = Stop::new();
    let acked: Vec<Vec<i64>> = std::thread::scope(|scope| {
        let _stop_on_exit = stop.on_exit();
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (url, stop) = (&db.url, &stop);
                scope.spawn(move || {
                    let mut conn = C::open(url);
                    let mut acked = vec![0i64; 5];
                    let mut i = w;
                    while !stop.is_set() {
                        let id = i % 4 + 1;
                        Article::likes_of(id).increment(&mut conn).unwrap();
                        acked[id as usize] += 1;
                        i += 1;
                        // A request's pace: SQLite's one write lock, taken in a loop that
                        // never pauses, would leave the maintainer's busy timeout to chance.
                        std::thread::sleep(Duration::from_micros(500));
                    }
                    acked
                })
            })
            .collect();
        // Writers and the maintainer side by side for a while.
        std::thread::sleep(Duration::from_millis(1500));
        stop.set();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let acked = sum_acked(acked);
    // Within the bound (and a pass), the cached column holds every acknowledged write.
    until_read(10, &|| "the cache".into(), acked[1..].to_vec(), || {
        four_caches(&mut conn)
    });
    let report = maintainer.stop(Duration::from_secs(10));
    assert!(!report.running && !report.active, "{report:?}");
    assert!(report.passes >= 3, "{report:?}");
    assert_eq!((report.errors, report.alerts), (0, 0), "{report:?}");
    assert!(report.worst_staleness.is_some(), "{report:?}");
    for id in 1..=4 {
        assert_eq!(
            Article::likes_of(id).total(&mut conn).unwrap(),
            acked[id as usize],
            "the totals are every write, exactly"
        );
    }
    // Compaction ran: one row per record once writers stopped and a pass followed.
    let rows = conn.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots");
    assert!(rows <= 4, "compacted: {rows} slot rows");
    // Retention deleted the 40-day-old bucket: the total is today's.
    assert_eq!(Download::daily_of(1).total(&mut conn).unwrap(), 2);
    assert!(report
        .jobs
        .iter()
        .any(|j| j.name == "retention Download.daily" && j.runs > 0));
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn two_maintainers_of_one_database_share_the_work<C: TestConnection + R2D2Connection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    migrate(&mut conn);
    conn.batch_execute("INSERT INTO articles (id) VALUES (1)")
        .unwrap();
    let start = || {
        Maintainer::builder(pool::<C>(&db.url, 2))
            .counter::<articles_likes_slots::table>()
            .freshness(BOUND)
            .start()
            .unwrap()
    };
    let first = start();
    until(&first, "the first maintainer holds the lease", |r| {
        r.active && r.passes > 0
    });
    let second = start();
    // The second stands by for several bounds: it runs no pass.
    std::thread::sleep(BOUND * 5);
    let standing_by = second.report();
    assert!(
        !standing_by.active && standing_by.passes == 0,
        "{standing_by:?}"
    );
    // A maintainer of other counters of the same database has a lease of its own: it works
    // beside the first.
    let other = Maintainer::builder(pool::<C>(&db.url, 1))
        .counter::<articles_shares_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(&other, "a maintainer of other counters works", |r| {
        r.active && r.passes > 0
    });
    assert!(other.stop(Duration::from_secs(10)).errors == 0);
    Article::likes_of(1).add(7, &mut conn).unwrap();
    // The first stops, giving the lease back: the second takes over and keeps the cache.
    let stopped = first.stop(Duration::from_secs(10));
    assert!(!stopped.running && stopped.leases_taken == 1, "{stopped:?}");
    takes_over_and_keeps_the_cache(second, "the second takes over", &mut conn, 5, 12);
}

fn a_failing_job_and_a_pool_that_cannot_connect_are_reported<C: TestConnection + R2D2Connection>(
    test: &str,
) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    // The counter tables, but not the model's `articles` table its roll-up writes into.
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Article>())
        .unwrap();
    Article::likes_of(1).add(3, &mut conn).unwrap();
    let maintainer = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    // The first pass is a full one (compaction, then the roll-up, which fails); the passes
    // after it roll up what they compact, and fail there.
    until(&maintainer, "the roll-up's failure reported", |r| {
        r.errors >= 3
            && r.jobs
                .iter()
                .any(|j| j.name == "compact Article.likes" && j.runs >= 1 && j.failures >= 2)
    });
    let report = maintainer.stop(Duration::from_secs(10));
    let error = report.last_error.clone().unwrap();
    assert!(
        error.starts_with("compact Article.likes: ") && error.contains("articles"),
        "{report:?}"
    );
    assert!(
        report
            .jobs
            .iter()
            .any(|j| j.name == "roll up Article.likes" && j.failures == 1),
        "the full pass's roll-up: {report:?}"
    );
    assert!(!report.running, "{report:?}");
    // Failing passes are spaced further and further apart.
    assert!(report.errors < 20, "backed off: {report:?}");

    // A pool whose database is not there: reported, retried, and stopped within its bound.
    let missing = match C::NAME {
        "sqlite" => "/nonexistent-dir/slotted.db".to_owned(),
        _ => format!("{}_missing", db.url),
    };
    let pool = diesel::r2d2::Pool::builder()
        .max_size(1)
        .connection_timeout(Duration::from_millis(200))
        .build_unchecked(diesel::r2d2::ConnectionManager::<C>::new(missing));
    let maintainer = Maintainer::builder(pool)
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(&maintainer, "the pool's failure reported", |r| {
        r.errors >= 2
    });
    let begun = Instant::now();
    let report = maintainer.stop(Duration::from_secs(5));
    assert!(!report.running && !report.active, "{report:?}");
    assert!(begun.elapsed() < Duration::from_secs(5));
    // The servers' maintainer fails taking the lease; SQLite's, which takes none, its jobs.
    let failed = if C::NAME == "sqlite" {
        "compact Article.likes: "
    } else {
        "lease: "
    };
    let error = report.last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with(failed) || error.starts_with("roll up Article.likes: "),
        "{report:?}"
    );
    assert!(error.contains("connection pool"), "{report:?}");
}

fn a_follow_counters_drift_is_reported_then_repaired<C: TestConnection + R2D2Connection>(
    test: &str,
) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    forum::create_tables(&mut conn);
    conn.run_pending_migrations(forum::migrations()).unwrap();
    conn.batch_execute(
        "INSERT INTO forum_posts (id) VALUES (1), (2); \
         INSERT INTO comments (post_id, author_id) VALUES (1, 1), (1, 2)",
    )
    .unwrap();
    // A count written behind the triggers' back.
    conn.batch_execute(
        "INSERT INTO forum_posts_comments_slots (record_id, slot, count) VALUES (1, 9, 5)",
    )
    .unwrap();
    let reporting = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<forum::forum_posts_comments_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(&reporting, "the drift reported", |r| r.alerts >= 1);
    let report = reporting.stop(Duration::from_secs(10));
    assert!(
        report.last_alert.as_deref().is_some_and(
            |a| a.starts_with("verify ForumPost.comments: ") && a.contains("1 drifted")
        ),
        "{report:?}"
    );
    assert_eq!(ForumPost::comments_of(1).total(&mut conn).unwrap(), 7);

    let repairing = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<forum::forum_posts_comments_slots::table>()
        .repair_follow::<forum::forum_posts_comments_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(&repairing, "the drift repaired", |r| {
        r.jobs
            .iter()
            .any(|j| j.name == "verify ForumPost.comments" && j.runs >= 1)
    });
    // The counter's roll-up (`cache = comments_count`) follows: the column a feed sorts by.
    until_read(10, &|| format!("{:?}", repairing.report()), 2, || {
        conn.query_i64("SELECT comments_count AS n FROM forum_posts WHERE id = 1")
    });
    let report = repairing.stop(Duration::from_secs(10));
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(ForumPost::comments_of(1).total(&mut conn).unwrap(), 2);
    assert_eq!(
        conn.query_i64("SELECT comments_count AS n FROM forum_posts WHERE id = 2"),
        0
    );
}

/// The environment variable that makes this test binary a maintainer's process: the database
/// URL it maintains.
const CHILD: &str = "SLOTTED_MAINTAINER_CHILD";

/// In the child process (see [`CHILD`]): runs a maintainer of `articles` with compaction in
/// batches of 20 records, pass after pass, until killed (or 60 s, should its parent be gone),
/// and returns true. In the test's own process: false.
fn child_maintainer<C: TestConnection + R2D2Connection>() -> bool {
    let Ok(url) = std::env::var(CHILD) else {
        return false;
    };
    let _maintainer = Maintainer::builder(pool::<C>(&url, 2))
        .counter::<articles_likes_slots::table>()
        .batch(20)
        .freshness(Duration::from_millis(1))
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_secs(60));
    true
}

/// This test binary, run again as a maintainer's process of `url` (its test `test` only).
fn spawn_child<C: TestConnection>(test: &str, url: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{}::{test}", C::NAME),
            "--exact",
            "--test-threads=1",
            "--quiet",
        ])
        .env(CHILD, url)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn a_second_process_takes_over_when_the_first_is_killed<C: TestConnection + R2D2Connection>(
    test: &str,
) {
    if child_maintainer::<C>() {
        return;
    }
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    migrate(&mut conn);
    conn.batch_execute("INSERT INTO articles (id) VALUES (1)")
        .unwrap();
    let mut child = spawn_child::<C>(test, &db.url);
    // The child's maintainer holds the lease, and rolls up.
    Article::likes_of(1).add(4, &mut conn).unwrap();
    until_read(30, &|| "the child's maintainer rolls up".into(), 4, || {
        cached_likes(&mut conn, 1)
    });
    let here = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    std::thread::sleep(BOUND * 5);
    let standing_by = here.report();
    assert!(
        !standing_by.active && standing_by.passes == 0 && standing_by.errors == 0,
        "{standing_by:?}"
    );
    // SIGKILL: its session ends with its connection, and the lease with it.
    child.kill().unwrap();
    child.wait().unwrap();
    takes_over_and_keeps_the_cache(here, "this process takes over", &mut conn, 3, 7);
}

fn a_maintainer_killed_mid_pass_loses_nothing<C: TestConnection + R2D2Connection>(test: &str) {
    if child_maintainer::<C>() {
        return;
    }
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    migrate(&mut conn);
    // 3,000 records, 4 slot rows each: record k's total is 10 k.
    const RECORDS: i64 = 3_000;
    scattered_likes(&mut conn, RECORDS);
    let rows = |conn: &mut C| conn.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots");
    assert_eq!(rows(&mut conn), 4 * RECORDS);
    let mut child = spawn_child::<C>(test, &db.url);
    // Killed once its pass has compacted some records and before it has compacted them all.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = rows(&mut conn);
        if left < 4 * RECORDS - 200 && left > RECORDS + 1_000 {
            break;
        }
        assert!(
            Instant::now() < deadline && left > RECORDS,
            "the child's pass: {left} slot rows"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = rows(&mut conn);
    assert!(
        left > RECORDS && left < 4 * RECORDS,
        "killed mid-pass: {left} rows"
    );
    let ids: Vec<i32> = (1..=RECORDS as i32).collect();
    let check = |conn: &mut C, step: &str| {
        let totals = Article::likes_totals(&ids, conn).unwrap();
        for id in &ids {
            assert_eq!(totals[id], 10 * i64::from(*id), "record {id}, {step}");
        }
    };
    check(&mut conn, "after the kill");
    // A maintainer started afresh finishes the work: one row per record, the same totals.
    let maintainer = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(&maintainer, "a pass after the kill", |r| r.passes >= 1);
    let report = maintainer.stop(Duration::from_secs(10));
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(rows(&mut conn), RECORDS);
    check(&mut conn, "after a fresh pass");
    assert_eq!(cached_likes(&mut conn, 7), 70, "and the roll-up");
}

/// Two releases of an app during a deploy: the old one's maintainer keeps `Article.likes`, the
/// new one's `Article.likes` and `Article.shares`, so their leases differ and both roll up the
/// likes' cache. Beside them the app rolls up a page itself, edits articles (holding their rows
/// for a moment, which a roll-up waits for), and writers add and take back likes, so a record's
/// total often returns to a value its cache held. Once the writers stop, every cache must come
/// to its record's total and stay there: a roll-up that wrote an older total over a newer one
/// would leave it settled and wrong. This run meets that interleaving only by chance (five runs
/// without the roll-ups' lock all passed): `hardening.rs`,
/// `a_roll_up_never_writes_a_total_older_than_one_written_before_it`, writes it down. This one
/// checks that two maintainers with different leases and the app's own roll-ups, side by side,
/// end with every cache right and no error.
fn two_releases_maintainers_and_the_app_roll_up_one_cache_right<
    C: TestConnection + R2D2Connection,
>(
    test: &str,
) {
    let Some((db, mut conn)) = four_articles::<C>(test) else {
        return;
    };
    let old = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    let new = Maintainer::builder(pool::<C>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .counter::<articles_shares_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    let writers = if C::NAME == "sqlite" { 1 } else { 3 };
    let stop = Stop::new();
    std::thread::scope(|scope| {
        let _stop_on_exit = stop.on_exit();
        let url = &db.url;
        for w in 0..writers {
            let stop = &stop;
            scope.spawn(move || {
                let mut conn = C::open(url);
                let mut i: i32 = w;
                while !stop.is_set() {
                    let likes = Article::likes_of(i % 4 + 1);
                    // Up, and mostly back down: totals come back to where they were.
                    likes.increment(&mut conn).unwrap();
                    if i % 3 != 0 {
                        likes.decrement(&mut conn).unwrap();
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_micros(300));
                }
            });
        }
        let stop = &stop;
        // The app's own roll-up of the page, and its edits of the articles.
        scope.spawn(move || {
            let mut conn = C::open(url);
            while !stop.is_set() {
                articles_likes_slots::table
                    .refresh_cache(&[1, 2, 3, 4], &mut conn)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        scope.spawn(move || {
            let mut conn = C::open(url);
            let mut id = 0;
            while !stop.is_set() {
                id = id % 4 + 1;
                conn.transaction(|conn| {
                    conn.batch_execute(&format!("UPDATE articles SET id = id WHERE id = {id}"))?;
                    std::thread::sleep(Duration::from_millis(2));
                    Ok::<_, diesel::result::Error>(())
                })
                .unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::sleep(Duration::from_millis(2000));
        stop.set();
    });
    let totals: Vec<i64> = (1..=4)
        .map(|id| Article::likes_of(id).total(&mut conn).unwrap())
        .collect();
    let report = || format!("old {:?}\nnew {:?}", old.report(), new.report());
    until_read(10, &report, totals.clone(), || four_caches(&mut conn));
    // And it stays: a later pass of either changes nothing.
    let passes = (old.report().passes, new.report().passes);
    until(&old, "the old release passes again", |r| {
        r.passes >= passes.0 + 2
    });
    until(&new, "the new release passes again", |r| {
        r.passes >= passes.1 + 2
    });
    assert_eq!(four_caches(&mut conn), totals);
    for maintainer in [old, new] {
        let report = maintainer.stop(Duration::from_secs(10));
        assert_eq!((report.errors, report.alerts), (0, 0), "{report:?}");
        assert!(report.passes > 2, "{report:?}");
    }
}
