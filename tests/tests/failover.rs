//! On a real PostgreSQL cluster under Patroni (`scripts/patroni start`: etcd and 3 nodes on
//! loopback, `synchronous_mode` and `synchronous_mode_strict` on), through the multi-host URL
//! with `target_session_attrs=read-write` in `SLOTTED_PATRONI_URL` (`scripts/patroni url`). Unset,
//! these tests skip with a message; with `SLOTTED_REQUIRE_ALL_BACKENDS=1` (CI) they fail.
//!
//! ```text
//! scripts/patroni start
//! SLOTTED_PATRONI_URL=$(scripts/patroni url) cargo test -p slotted-tests --features postgres,async --test failover -- --nocapture
//! ```
//!
//! A failover is the whole cluster's business, so the tests here run one at a time (`SERIAL`),
//! and each leaves the cluster healthy again. The scripts' folder and ports come from the same
//! `SLOTTED_PATRONI_DIR` and `SLOTTED_PATRONI_BASE_PORT` that started the cluster.
#![cfg(all(feature = "postgres", feature = "async"))]

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use diesel::PgConnection;
use diesel_async::pooled_connection::{deadpool, AsyncDieselConnectionManager};
use diesel_async::AsyncPgConnection;
use slotted_core::failover::{transaction_with_failover, transaction_with_failover_async};
use slotted_core::retry::RetryPolicy;
use slotted_core::{CounterMaintenance, Failure};
use slotted_tests::lifecycle::{articles_likes_slots, Article};
use slotted_tests::models::{posts_likes_slots, posts_views_slots, Post};
use slotted_tests::{patroni_database, TestConnection};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The script that runs the cluster.
fn patroni(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/patroni");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/patroni {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Records the writers spread over.
const RECORDS: i32 = 4;

/// What the writers saw, per record: increments acknowledged, and calls whose outcome is
/// unknown (each may or may not have counted once).
#[derive(Debug, Default, Clone)]
struct Tally {
    likes: [i64; RECORDS as usize],
    views: [i64; RECORDS as usize],
    /// `Article.likes`, whose roll-up into `articles.likes_count` runs all along.
    articles: [i64; RECORDS as usize],
    likes_unknown: [i64; RECORDS as usize],
    views_unknown: [i64; RECORDS as usize],
    articles_unknown: [i64; RECORDS as usize],
    /// When each acknowledged call returned.
    acked_at: Vec<Instant>,
    /// Errors that are neither retried nor of unknown outcome: a test failure.
    other_errors: Vec<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for r in 0..RECORDS as usize {
            self.likes[r] += other.likes[r];
            self.views[r] += other.views[r];
            self.articles[r] += other.articles[r];
            self.likes_unknown[r] += other.likes_unknown[r];
            self.views_unknown[r] += other.views_unknown[r];
            self.articles_unknown[r] += other.articles_unknown[r];
        }
        self.acked_at.extend(other.acked_at);
        self.other_errors.extend(other.other_errors);
    }

    /// A business transaction (the post's likes and views and the article's likes, of
    /// `record`) that returned `outcome`.
    fn transaction(&mut self, record: i32, outcome: Result<(), slotted_core::Error>) {
        let r = record as usize - 1;
        match outcome {
            Ok(()) => {
                self.likes[r] += 1;
                self.views[r] += 1;
                self.articles[r] += 1;
                self.acked_at.push(Instant::now());
            }
            Err(e) if e.failure() == Failure::OutcomeUnknown => {
                self.likes_unknown[r] += 1;
                self.views_unknown[r] += 1;
                self.articles_unknown[r] += 1;
            }
            Err(e) => self.other_errors.push(e.to_string()),
        }
    }
}

fn record_of(i: usize) -> i32 {
    (i % RECORDS as usize) as i32 + 1
}

/// Every record's totals on the primary, through a fresh connection: within acknowledged ≤
/// total ≤ acknowledged + unknown.
fn assert_within(url: &str, tally: &Tally) {
    let mut conn = PgConnection::open(url);
    // The roll-up, run once more on the new primary, agrees with the slots.
    articles_likes_slots::table
        .refresh_cache_all(100, &mut conn)
        .expect("the roll-up on the new primary");
    for record in 1..=RECORDS {
        assert_eq!(
            conn.query_i64(&format!(
                "SELECT likes_count AS n FROM articles WHERE id = {record}"
            )),
            Article::likes_of(record).total(&mut conn).unwrap(),
            "article {record}'s rolled-up likes_count"
        );
    }
    for record in 1..=RECORDS {
        let r = record as usize - 1;
        for (name, total, acked, unknown) in [
            (
                "likes",
                Post::likes_of(record).total(&mut conn).unwrap(),
                tally.likes[r],
                tally.likes_unknown[r],
            ),
            (
                "views",
                Post::views_of(record).total(&mut conn).unwrap(),
                tally.views[r],
                tally.views_unknown[r],
            ),
            (
                "article likes",
                Article::likes_of(record).total(&mut conn).unwrap(),
                tally.articles[r],
                tally.articles_unknown[r],
            ),
        ] {
            assert!(
                acked <= total && total <= acked + unknown,
                "{name} of {record}: total {total}, acknowledged {acked}, outcome unknown {unknown}"
            );
        }
    }
}

/// Sync writers (r2d2, `transaction_with_failover`), an autocommit writer, async writers
/// (deadpool, `transaction_with_failover_async`) and a compaction loop, all on the cluster until
/// `stop`; `event` (a kill or a switchover) runs after 1.5 s. Returns what the writers saw and
/// the gap in acknowledged writes around the event.
fn under_load(url: &str, event: impl FnOnce()) -> (Tally, Duration, Instant) {
    let stop = Arc::new(AtomicBool::new(false));
    let policy = RetryPolicy::failover();
    let pool = diesel::r2d2::Pool::builder()
        .max_size(8)
        .connection_timeout(Duration::from_secs(5))
        .build(diesel::r2d2::ConnectionManager::<PgConnection>::new(url))
        .expect("an r2d2 pool on the cluster");
    let mut event_at = Instant::now();
    let tally = std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..3 {
            let (pool, stop, policy) = (&pool, &*stop, &policy);
            writers.push(s.spawn(move || {
                let mut tally = Tally::default();
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let record = record_of(i);
                    let outcome = transaction_with_failover(pool, policy, |c| {
                        Post::likes_of(record).increment(c)?;
                        Post::views_of(record).increment(c)?;
                        Article::likes_of(record).increment(c)
                    })
                    .map(|_| ());
                    tally.transaction(record, outcome);
                    i += 1;
                }
                tally
            }));
        }
        // Autocommit increments: a lost connection leaves each one's outcome unknown.
        writers.push(s.spawn(|| {
            let mut tally = Tally::default();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let record = record_of(i);
                let r = record as usize - 1;
                i += 1;
                let Ok(mut conn) = pool.get() else { continue };
                match Post::likes_of(record).increment(&mut *conn) {
                    Ok(()) => {
                        tally.likes[r] += 1;
                        tally.acked_at.push(Instant::now());
                    }
                    Err(e) if e.failure() == Failure::OutcomeUnknown => tally.likes_unknown[r] += 1,
                    Err(e) if e.failure() == Failure::Reconnect => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => tally.other_errors.push(e.to_string()),
                }
            }
            tally
        }));
        // Compaction and the roll-up, all along: they must neither lose nor double a count,
        // whatever they meet.
        let compactor = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut conn) = pool.get() {
                    let _ = posts_likes_slots::table.compact_all(100, &mut *conn);
                    let _ = posts_views_slots::table.compact_all(100, &mut *conn);
                    let _ = articles_likes_slots::table.compact_all(100, &mut *conn);
                    let _ = articles_likes_slots::table.refresh_cache_all(100, &mut *conn);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let async_writers = s.spawn(|| {
            slotted_tests::asynch::block_on(async {
                let pool = deadpool::Pool::builder(
                    AsyncDieselConnectionManager::<AsyncPgConnection>::new(url),
                )
                .max_size(4)
                .build()
                .expect("a deadpool pool on the cluster");
                // Local tasks: the retry helpers' async closures do not prove `Send` for every
                // lifetime (a limit of today's rustc).
                let local = tokio::task::LocalSet::new();
                let mut tasks = tokio::task::JoinSet::new();
                for w in 0..3 {
                    let (pool, stop, policy) = (pool.clone(), stop.clone(), policy);
                    tasks.spawn_local_on(
                        async move {
                            let mut tally = Tally::default();
                            let mut i = w;
                            while !stop.load(Ordering::Relaxed) {
                                let record = record_of(i);
                                let outcome =
                                    transaction_with_failover_async(&pool, &policy, async |c| {
                                        Post::likes_of(record).increment_async(c).await?;
                                        Post::views_of(record).increment_async(c).await?;
                                        Article::likes_of(record).increment_async(c).await
                                    })
                                    .await
                                    .map(|_| ());
                                tally.transaction(record, outcome);
                                i += 1;
                            }
                            tally
                        },
                        &local,
                    );
                }
                let mut tally = Tally::default();
                local
                    .run_until(async {
                        while let Some(task) = tasks.join_next().await {
                            tally.merge(task.expect("an async writer"));
                        }
                    })
                    .await;
                tally
            })
        });
        std::thread::sleep(Duration::from_millis(1500));
        event_at = Instant::now();
        event();
        // Until writes have come back for 3 s, within 60 s.
        let deadline = Instant::now() + Duration::from_secs(60);
        std::thread::sleep(Duration::from_secs(4));
        while Instant::now() < deadline && healthy_writes(url).is_err() {
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for writer in writers {
            tally.merge(writer.join().expect("a writer"));
        }
        tally.merge(async_writers.join().expect("the async writers"));
        compactor.join().expect("the compactor");
        tally
    });
    let gap = slotted_tests::longest_pause(&tally.acked_at, event_at)
        .expect("writes acknowledged after the event");
    (tally, gap, event_at)
}

/// A write that succeeds on the primary through the multi-host URL.
fn healthy_writes(url: &str) -> Result<(), String> {
    use diesel::Connection;
    let mut conn = PgConnection::establish(url).map_err(|e| e.to_string())?;
    diesel::connection::SimpleConnection::batch_execute(
        &mut conn,
        "CREATE TEMP TABLE probe (x int)",
    )
    .map_err(|e| e.to_string())
}

/// The life-cycle models' tables (`articles` with its `likes_count` roll-up column), and
/// articles 1 to `RECORDS`.
fn with_articles(url: &str) {
    let mut conn = PgConnection::open(url);
    slotted_tests::lifecycle::migrate(&mut conn);
    diesel::connection::SimpleConnection::batch_execute(
        &mut conn,
        "INSERT INTO articles (id) VALUES (1), (2), (3), (4)",
    )
    .expect("the articles");
}

fn report(test: &str, tally: &Tally, gap: Duration) {
    let acked: i64 = tally.likes.iter().sum::<i64>() + tally.views.iter().sum::<i64>();
    let unknown: i64 =
        tally.likes_unknown.iter().sum::<i64>() + tally.views_unknown.iter().sum::<i64>();
    eprintln!(
        "{test}: {acked} increments acknowledged, {unknown} of unknown outcome; writes stopped for \
         {:.2} s as the writers saw it",
        gap.as_secs_f64()
    );
}

/// Runs the load of `under_load` on a fresh database of the cluster, with `event(leader)` after
/// 1.5 s, and checks what every failover test checks: no error but those retried or of unknown
/// outcome, a new leader, and every total within acknowledged ≤ total ≤ acknowledged + unknown
/// (the roll-up agreeing). Returns the old leader's node number.
fn survives(test: &str, event: impl FnOnce(&str)) -> String {
    let Some(url) = patroni_database(test) else {
        return String::new();
    };
    with_articles(&url);
    patroni(&["wait", "60"]);
    let leader = patroni(&["leader"]);
    let (tally, gap, _) = under_load(&url, || event(&leader));
    report(test, &tally, gap);
    assert!(
        tally.other_errors.is_empty(),
        "errors: {:?}",
        tally.other_errors
    );
    assert_ne!(patroni(&["leader"]), leader, "a standby was promoted");
    assert_within(&url, &tally);
    leader
}

/// The primary's PostgreSQL is SIGKILLed under load; Patroni promotes the synchronous standby
/// at once (`primary_start_timeout: 0`). Nothing acknowledged is lost, nothing counts twice,
/// and every writer carries on by itself.
#[test]
fn a_crashed_primary_loses_nothing_acknowledged() {
    let _serial = serial();
    let leader = survives("crash", |leader| {
        patroni(&["kill-postgres", leader]);
    });
    // Skipped (no cluster): nothing to wait for.
    if !leader.is_empty() {
        patroni(&["wait", "90"]);
    }
}

/// A planned switchover under load: the same guarantees.
#[test]
fn a_switchover_loses_nothing_acknowledged() {
    let _serial = serial();
    let leader = survives("switchover", |_| {
        patroni(&["switchover"]);
    });
    if !leader.is_empty() {
        patroni(&["wait", "90"]);
    }
}

/// The primary's whole node is lost under load (its Patroni and its PostgreSQL SIGKILLed):
/// the standby is promoted once the leader key expires (`ttl`, 10 s). The same guarantees; the
/// node then rejoins as a standby.
#[test]
fn a_lost_primary_node_loses_nothing_acknowledged() {
    let _serial = serial();
    let leader = survives("lost_node", |leader| {
        patroni(&["kill", leader]);
    });
    if !leader.is_empty() {
        patroni(&["node", &leader]);
        patroni(&["wait", "120"]);
    }
}

/// `url` (the cluster's multi-host URL of a test database) on the synchronous standby.
fn on_replica(url: &str) -> String {
    let replica = patroni(&["replica-url"]);
    let database = url.split('?').next().unwrap().rsplit('/').next().unwrap();
    format!("{}/{database}", replica.rsplit_once('/').unwrap().0)
}

/// Totals, batch totals and their async twins on a hot standby; how far behind the primary they
/// are under a write load; and writes and maintenance there refused with `ReadOnlyServer`.
#[test]
fn reads_on_a_hot_standby_and_writes_refused_there() {
    let _serial = serial();
    let test = "replica";
    let Some(url) = patroni_database(test) else {
        return;
    };
    patroni(&["wait", "60"]);
    let replica_url = on_replica(&url);
    let mut primary = PgConnection::open(&url);
    let mut replica = PgConnection::open(&replica_url);
    // Staleness: an increment committed on the primary, then read on the standby until it
    // shows, while 4 writers keep the primary busy.
    let stop = AtomicBool::new(false);
    let mut lags = std::thread::scope(|s| {
        for w in 0..4 {
            let (url, stop) = (&url, &stop);
            s.spawn(move || {
                let mut conn = PgConnection::open(url);
                while !stop.load(Ordering::Relaxed) {
                    Post::views_of(w + 1).increment(&mut conn).unwrap();
                }
            });
        }
        let mut lags = Vec::new();
        for i in 1..=100_i64 {
            Post::likes_of(1).increment(&mut primary).unwrap();
            let committed = Instant::now();
            while Post::likes_of(1).total(&mut replica).unwrap() < i {
                assert!(
                    committed.elapsed() < Duration::from_secs(10),
                    "the standby lags 10 s"
                );
                std::hint::spin_loop();
            }
            lags.push(committed.elapsed());
        }
        stop.store(true, Ordering::Relaxed);
        lags
    });
    lags.sort();
    eprintln!(
        "{test}: an increment showed on the synchronous standby after {:?} (median), {:?} (p99), \
         {:?} (max), under 4 writers",
        lags[lags.len() / 2],
        lags[lags.len() * 99 / 100],
        lags[lags.len() - 1]
    );
    // Reads, sync and async, agree with the primary once it has caught up.
    let want = Post::likes_of(1).total(&mut primary).unwrap();
    assert_eq!(Post::likes_of(1).total(&mut replica).unwrap(), want);
    let views = Post::views_totals(&[1, 2, 3, 4], &mut primary).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Post::views_totals(&[1, 2, 3, 4], &mut replica).unwrap() != views {
        assert!(Instant::now() < deadline, "the standby never caught up");
        std::thread::sleep(Duration::from_millis(10));
    }
    slotted_tests::asynch::block_on(async {
        use diesel_async::AsyncConnection;
        let mut conn = AsyncPgConnection::establish(&replica_url).await.unwrap();
        assert_eq!(
            Post::likes_of(1).total_async(&mut conn).await.unwrap(),
            want
        );
        assert_eq!(
            Post::views_totals_async(&[1, 2, 3, 4], &mut conn)
                .await
                .unwrap(),
            views
        );
        let refused = Post::likes_of(1)
            .increment_async(&mut conn)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, slotted_core::Error::ReadOnlyServer { .. }),
            "{refused}"
        );
    });
    // Writes and maintenance: a clear refusal, nothing written.
    let refused = Post::likes_of(1).increment(&mut replica).unwrap_err();
    assert!(
        matches!(refused, slotted_core::Error::ReadOnlyServer { .. }),
        "{refused}"
    );
    assert_eq!(refused.failure(), Failure::Reconnect);
    let refused = posts_likes_slots::table
        .compact_all(100, &mut replica)
        .unwrap_err();
    assert_eq!(refused.failure(), Failure::Reconnect, "{refused}");
    assert!(
        refused.to_string().contains("the server is read-only"),
        "compaction on a standby says why: {refused}"
    );
    assert_eq!(Post::likes_of(1).total(&mut primary).unwrap(), want);
}

/// The write-behind buffers through a crash of the primary: a sync `CounterBuffer` on r2d2
/// (likes) and an `AsyncCounterBuffer` on bb8 (views), both adding while the primary dies. Every
/// add either buffer took is in the new primary exactly once after `shutdown()` returns `Ok`; a
/// flush whose COMMIT is reported lost (one per buffer, by the test hook, as the primary dies)
/// is resolved through the flush log.
#[test]
fn the_buffers_count_exactly_once_across_a_failover() {
    use slotted_core::buffer::{AsyncCounterBuffer, BufferConfig, CounterBuffer};
    let _serial = serial();
    let test = "buffer";
    let Some(url) = patroni_database(test) else {
        return;
    };
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut PgConnection::open(&url),
        slotted_core::CounterMigrations::new().with_buffer(),
    )
    .expect("the flush log on the cluster");
    patroni(&["wait", "60"]);
    let leader = patroni(&["leader"]);
    let config = || BufferConfig {
        interval: Duration::from_millis(20),
        retry_delay: Duration::from_millis(50),
        max_retry_delay: Duration::from_millis(500),
        shutdown_timeout: Duration::from_secs(60),
        ..BufferConfig::default()
    };
    let pool = diesel::r2d2::Pool::builder()
        .max_size(2)
        .connection_timeout(Duration::from_secs(5))
        .build(diesel::r2d2::ConnectionManager::<PgConnection>::new(&url))
        .expect("an r2d2 pool on the cluster");
    let buffer = CounterBuffer::start(pool, config());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let async_buffer = runtime.block_on(async {
        let pool = diesel_async::pooled_connection::bb8::Pool::builder()
            .max_size(2)
            .connection_timeout(Duration::from_secs(5))
            .build(AsyncDieselConnectionManager::<AsyncPgConnection>::new(&url))
            .await
            .expect("a bb8 pool on the cluster");
        Arc::new(AsyncCounterBuffer::start(pool, config()))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let async_adders: Vec<_> = (0..4)
        .map(|w| {
            let (buffer, stop) = (Arc::clone(&async_buffer), Arc::clone(&stop));
            runtime.spawn(async move {
                let mut taken = [0_i64; RECORDS as usize];
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let record = record_of(i);
                    Post::views_of(record).increment_buffered(&*buffer).unwrap();
                    taken[record as usize - 1] += 1;
                    i += 1;
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                taken
            })
        })
        .collect();
    let taken = std::thread::scope(|s| {
        let adders: Vec<_> = (0..4)
            .map(|w| {
                let (buffer, stop) = (&buffer, &stop);
                s.spawn(move || {
                    let mut taken = [0_i64; RECORDS as usize];
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        let record = record_of(i);
                        Post::likes_of(record).increment_buffered(buffer).unwrap();
                        taken[record as usize - 1] += 1;
                        i += 1;
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    taken
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        // The next flush of each buffer is told its COMMIT was lost (the test hook), so that
        // one flush in doubt is looked up in the flush log across the failover, whatever the
        // timing of the kill does.
        buffer.__lose_commit_outcomes(1);
        async_buffer.__lose_commit_outcomes(1);
        patroni(&["kill-postgres", &leader]);
        std::thread::sleep(Duration::from_secs(6));
        stop.store(true, Ordering::Relaxed);
        sum_taken(adders.into_iter().map(|a| a.join().unwrap()))
    });
    let views_taken = runtime.block_on(async {
        let mut all = Vec::new();
        for adder in async_adders {
            all.push(adder.await.expect("an async adder"));
        }
        async_buffer
            .shutdown()
            .await
            .expect("every async add written by shutdown");
        sum_taken(all)
    });
    buffer.shutdown().expect("every add written by shutdown");
    eprintln!(
        "{test}: {} adds taken by the sync buffer ({:?}), {} by the async one ({:?})",
        taken.iter().sum::<i64>(),
        buffer.stats(),
        views_taken.iter().sum::<i64>(),
        async_buffer.stats()
    );
    assert!(buffer.stats().commits_in_doubt >= 1, "a flush was in doubt");
    assert!(
        async_buffer.stats().commits_in_doubt >= 1,
        "an async flush was in doubt"
    );
    let mut conn = PgConnection::open(&url);
    for record in 1..=RECORDS {
        let r = record as usize - 1;
        assert_eq!(
            Post::likes_of(record).total(&mut conn).unwrap(),
            taken[r],
            "likes of {record} (the sync buffer) on the new primary"
        );
        assert_eq!(
            Post::views_of(record).total(&mut conn).unwrap(),
            views_taken[r],
            "views of {record} (the async buffer) on the new primary"
        );
    }
    patroni(&["wait", "90"]);
}

fn sum_taken(adders: impl IntoIterator<Item = [i64; RECORDS as usize]>) -> [i64; RECORDS as usize] {
    let mut taken = [0_i64; RECORDS as usize];
    for adder in adders {
        for (t, n) in taken.iter_mut().zip(adder) {
            *t += n;
        }
    }
    taken
}
