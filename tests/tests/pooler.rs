//! Behind a real transaction-mode pooler: PgBouncer (`scripts/pgbouncer start`, 8 server
//! connections, `pool_mode = transaction`) in front of the PostgreSQL server, its URL in
//! `SLOTTED_PGBOUNCER_URL` (`scripts/pgbouncer url`). Unset, these tests skip with a message;
//! with `SLOTTED_REQUIRE_ALL_BACKENDS=1` (CI) they fail instead.
//!
//! ```text
//! scripts/pgbouncer start
//! SLOTTED_PGBOUNCER_URL=$(scripts/pgbouncer url) cargo test -p slotted-tests --features postgres,async --test pooler
//! ```
//!
//! Every test here runs with `slotted_core::pooling::set(Pooling::Transaction)`, a process-wide
//! setting: this file is its own test binary, so no other test shares the process. More writers
//! than server connections, two counters on one model, standalone calls and business
//! transactions, sync and async, and a second process writing at once (the statement names
//! tokio-postgres gives are per process, so two processes collide on them); each count is checked
//! in the slot rows through a direct connection.
#![cfg(all(feature = "postgres", feature = "async"))]

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::connection::{CacheSize, Connection, SimpleConnection};
use diesel::PgConnection;
use diesel_async::pooled_connection::{bb8, deadpool};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use slotted_core::pooling::{self, Pooling};
use slotted_core::retry::{transaction_with_retry, transaction_with_retry_async, RetryPolicy};
use slotted_core::CounterMaintenance;
use slotted_tests::asynch::pooler_manager;
use slotted_tests::models::{posts_likes_slots, posts_views_slots, Post};
use slotted_tests::{through_pooler, TestConnection, TestDb};

/// Writers per test: twice the pooler's 8 server connections.
const WRITERS: usize = 16;
/// Calls per writer.
const CALLS: usize = 120;
/// Records the writers spread over.
const RECORDS: i32 = 4;

/// Acknowledged increments per (counter, record).
type Acked = BTreeMap<(&'static str, i32), i64>;

/// What writer `w`'s call `i` does: which counter, which record, and whether inside a business
/// transaction that also counts the other counter (then both are acknowledged together).
fn plan(w: usize, i: usize) -> (&'static str, i32, bool) {
    let counter = if (w + i).is_multiple_of(2) {
        "likes"
    } else {
        "views"
    };
    let record = ((w * 7 + i) % RECORDS as usize) as i32 + 1;
    (counter, record, i.is_multiple_of(5))
}

fn ack(acked: &mut Acked, counter: &'static str, record: i32, both: bool) {
    *acked.entry((counter, record)).or_default() += 1;
    if both {
        let other = if counter == "likes" { "views" } else { "likes" };
        *acked.entry((other, record)).or_default() += 1;
    }
}

fn merge(into: &mut Acked, from: Acked) {
    for (k, v) in from {
        *into.entry(k).or_default() += v;
    }
}

/// The slot rows' sums, read on a direct connection (not through the pooler), and the totals
/// slotted reports through `via` (a connection through the pooler): both must equal `acked`.
fn assert_exact(direct_url: &str, via: &mut PgConnection, acked: &Acked) {
    let mut direct = PgConnection::open(direct_url);
    for record in 1..=RECORDS {
        for (counter, table) in [
            ("likes", "posts_likes_slots"),
            ("views", "posts_views_slots"),
        ] {
            let want = acked.get(&(counter, record)).copied().unwrap_or(0);
            let rows: i64 = direct
                .slot_rows(table, i64::from(record))
                .iter()
                .map(|r| r.count)
                .sum();
            assert_eq!(rows, want, "{table} of record {record}: the slot rows");
            let total = match counter {
                "likes" => Post::likes_of(record).total(via),
                _ => Post::views_of(record).total(via),
            }
            .unwrap_or_else(|e| panic!("{counter} total of {record} through the pooler: {e}"));
            assert_eq!(
                total, want,
                "{counter} total of record {record} through the pooler"
            );
        }
    }
}

fn set_up(test: &str) -> Option<(TestDb, String)> {
    pooling::set(Pooling::Transaction);
    let (db, _direct) = TestDb::migrated::<PgConnection>(test)?;
    let pooled = through_pooler(&db.url, test)?;
    Some((db, pooled))
}

/// Diesel's statement cache off (what the guide tells users to do for their own queries behind a
/// transaction pooler), or left on.
#[derive(Debug)]
struct Cache(bool);

impl diesel::r2d2::CustomizeConnection<PgConnection, diesel::r2d2::Error> for Cache {
    fn on_acquire(&self, conn: &mut PgConnection) -> Result<(), diesel::r2d2::Error> {
        if !self.0 {
            conn.set_prepared_statement_cache_size(CacheSize::Disabled);
        }
        Ok(())
    }
}

fn sync_writers(url: &str, diesels_cache: bool) -> Acked {
    let manager = diesel::r2d2::ConnectionManager::<PgConnection>::new(url);
    let pool = diesel::r2d2::Pool::builder()
        .max_size(WRITERS as u32)
        // r2d2's check is a statement of Diesel's, named when the cache is on.
        .test_on_check_out(!diesels_cache)
        .connection_customizer(Box::new(Cache(diesels_cache)))
        .connection_timeout(Duration::from_secs(30))
        .build(manager)
        .expect("an r2d2 pool through the pooler");
    let policy = RetryPolicy::default();
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let pool = &pool;
                let policy = &policy;
                s.spawn(move || {
                    let mut acked = Acked::new();
                    for i in 0..CALLS {
                        let (counter, record, both) = plan(w, i);
                        let mut conn = pool.get().expect("a pooled connection");
                        let result = if both {
                            transaction_with_retry(&mut *conn, policy, |c| {
                                Post::likes_of(record).increment(c)?;
                                Post::views_of(record).increment(c)
                            })
                            .map(|_| ())
                        } else if counter == "likes" {
                            Post::likes_of(record).increment(&mut *conn)
                        } else {
                            Post::views_of(record).increment(&mut *conn)
                        };
                        result.unwrap_or_else(|e| {
                            panic!("writer {w}, call {i} ({counter} of {record}): {e}")
                        });
                        ack(&mut acked, counter, record, both);
                    }
                    acked
                })
            })
            .collect();
        let mut acked = Acked::new();
        for writer in writers {
            merge(&mut acked, writer.join().expect("a writer"));
        }
        acked
    })
}

/// Sync `PgConnection`s from r2d2, with Diesel's cache off (the documented set-up): every call
/// succeeds and every count lands where it belongs; compaction through the pooler keeps them.
#[test]
fn sync_counts_are_exact_behind_the_pooler() {
    let test = "pooler_sync";
    let Some((db, url)) = set_up(test) else {
        return;
    };
    let acked = sync_writers(&url, false);
    let mut via = PgConnection::establish(&url).expect("a connection through the pooler");
    via.set_prepared_statement_cache_size(CacheSize::Disabled);
    assert_exact(&db.url, &mut via, &acked);
    posts_likes_slots::table
        .compact_all(100, &mut via)
        .expect("compact likes through the pooler");
    posts_views_slots::table
        .compact_all(100, &mut via)
        .expect("compact views through the pooler");
    assert_exact(&db.url, &mut via, &acked);
}

/// Diesel's statement cache left on: the user's own queries would be at risk (see the guide),
/// but slotted's statements are unnamed under `Pooling::Transaction`, so its counts stay exact.
#[test]
fn sync_counts_are_exact_with_diesels_cache_left_on() {
    let test = "pooler_sync_cache_on";
    let Some((db, url)) = set_up(test) else {
        return;
    };
    let acked = sync_writers(&url, true);
    let mut via = PgConnection::establish(&url).expect("a connection through the pooler");
    assert_exact(&db.url, &mut via, &acked);
}

/// One planned call on an async pooled connection (a macro: an async closure over a generic
/// connection type makes the task's future fail to prove `Send`).
macro_rules! one_async_call {
    ($conn:expr, $policy:expr, $step:expr) => {{
        let (conn, (counter, record, both)) = ($conn, $step);
        if both {
            transaction_with_retry_async(conn, $policy, async |c| {
                Post::likes_of(record).increment_async(c).await?;
                Post::views_of(record).increment_async(c).await
            })
            .await
            .map(|_| ())
        } else if counter == "likes" {
            Post::likes_of(record).increment_async(conn).await
        } else {
            Post::views_of(record).increment_async(conn).await
        }
    }};
}

/// `WRITERS` tasks on a deadpool pool and as many on a bb8 pool, at once.
async fn async_writers(url: &str) -> Acked {
    let deadpool = deadpool::Pool::builder(pooler_manager(url))
        .max_size(WRITERS)
        .build()
        .expect("a deadpool pool");
    let bb8 = bb8::Pool::builder()
        .max_size(WRITERS as u32)
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(30))
        .build(pooler_manager(url))
        .await
        .expect("a bb8 pool");
    let policy = RetryPolicy::default();
    // Local tasks: the retry helper's async closure over a pooled connection does not prove
    // `Send` for every lifetime (a limit of today's rustc), which `tokio::spawn` asks.
    let local = tokio::task::LocalSet::new();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..2 * WRITERS {
        let (deadpool, bb8, policy) = (deadpool.clone(), bb8.clone(), policy);
        tasks.spawn_local_on(
            async move {
                let mut acked = Acked::new();
                for i in 0..CALLS {
                    let step = plan(w, i);
                    let result = if w % 2 == 0 {
                        let mut conn = deadpool.get().await.expect("a deadpool connection");
                        one_async_call!(&mut conn, &policy, step)
                    } else {
                        let mut conn = bb8.get().await.expect("a bb8 connection");
                        one_async_call!(&mut conn, &policy, step)
                    };
                    result.unwrap_or_else(|e| panic!("task {w}, call {i} ({step:?}): {e}"));
                    ack(&mut acked, step.0, step.1, step.2);
                }
                acked
            },
            &local,
        );
    }
    let mut acked = Acked::new();
    local
        .run_until(async {
            while let Some(task) = tasks.join_next().await {
                merge(&mut acked, task.expect("a writer task"));
            }
        })
        .await;
    // Maintenance through the pooler, on both pools' connections.
    let mut conn = deadpool.get().await.expect("a deadpool connection");
    posts_likes_slots::table
        .compact_all_async(100, &mut conn)
        .await
        .expect("compact likes async through the pooler");
    let mut conn = bb8.get().await.expect("a bb8 connection");
    posts_views_slots::table
        .compact_all_async(100, &mut conn)
        .await
        .expect("compact views async through the pooler");
    acked
}

/// Totals and batch totals, read async through the pooler, against `acked`.
async fn async_reads(url: &str, acked: &Acked) {
    let pool = deadpool::Pool::builder(pooler_manager(url))
        .max_size(2)
        .build()
        .expect("a deadpool pool");
    let mut conn = pool.get().await.expect("a deadpool connection");
    for record in 1..=RECORDS {
        let want = acked.get(&("likes", record)).copied().unwrap_or(0);
        assert_eq!(
            Post::likes_of(record).total_async(&mut conn).await.unwrap(),
            want,
            "likes of {record}, read async through the pooler"
        );
    }
    let totals = Post::views_totals_async(&(1..=RECORDS).collect::<Vec<_>>(), &mut conn)
        .await
        .expect("views totals through the pooler");
    for record in 1..=RECORDS {
        let want = acked.get(&("views", record)).copied().unwrap_or(0);
        assert_eq!(totals[&record], want, "views of {record} in the batch");
    }
}

/// The acknowledged counts, as the second process prints them.
fn encode(acked: &Acked) -> String {
    acked
        .iter()
        .map(|((c, r), n)| format!("{c}:{r}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn decode(text: &str) -> Acked {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            let mut parts = item.split(':');
            let counter = match parts.next() {
                Some("likes") => "likes",
                Some("views") => "views",
                other => panic!("not a counter: {other:?}"),
            };
            let record = parts.next().and_then(|r| r.parse().ok()).expect("a record");
            let n = parts.next().and_then(|n| n.parse().ok()).expect("a count");
            ((counter, record), n)
        })
        .collect()
}

/// deadpool and bb8 pools of `AsyncPgConnection`, in this process and in a second one writing
/// at the same time: every call succeeds, every count lands where it belongs, and totals, batch
/// totals and compaction through the pooler agree.
#[test]
fn async_counts_are_exact_behind_the_pooler_from_two_processes() {
    let test = "pooler_async";
    let Some((db, url)) = set_up(test) else {
        return;
    };
    // The second process: this test binary, running `second_process` alone.
    let child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["second_process", "--exact", "--ignored", "--nocapture"])
        .env("SLOTTED_POOLER_SECOND_PROCESS_URL", &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the second process");
    let mut acked = slotted_tests::asynch::block_on(async_writers(&url));
    let output = child.wait_with_output().expect("the second process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the second process failed:\n{stdout}"
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("acked "))
        .unwrap_or_else(|| panic!("the second process printed no counts:\n{stdout}"));
    merge(&mut acked, decode(line));
    slotted_tests::asynch::block_on(async_reads(&url, &acked));
    let mut via = PgConnection::establish(&url).expect("a connection through the pooler");
    via.set_prepared_statement_cache_size(CacheSize::Disabled);
    assert_exact(&db.url, &mut via, &acked);
}

/// Run by `async_counts_are_exact_behind_the_pooler_from_two_processes` as a second process.
#[test]
#[ignore = "run by async_counts_are_exact_behind_the_pooler_from_two_processes"]
fn second_process() {
    let url = std::env::var("SLOTTED_POOLER_SECOND_PROCESS_URL")
        .expect("started by async_counts_are_exact_behind_the_pooler_from_two_processes");
    pooling::set(Pooling::Transaction);
    let acked = slotted_tests::asynch::block_on(async_writers(&url));
    println!("acked {}", encode(&acked));
}

/// The upstream limit the guide documents, kept as a reproduction: diesel-async 0.9 prepares
/// every statement under a name in one round trip and runs it in the next, so a statement of the
/// user's own run outside a transaction through a transaction pooler fails when the pooler hands
/// the second round trip to another server session. When this test fails, diesel-async (or
/// PgBouncer, with `max_prepared_statements`) has fixed it: then the guide's advice and slotted's
/// own transaction around each async statement can go.
#[test]
fn upstream_diesel_async_statements_outside_a_transaction_fail_behind_the_pooler() {
    let test = "pooler_upstream";
    let Some((_db, url)) = set_up(test) else {
        return;
    };
    let failures = slotted_tests::asynch::block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..WRITERS {
            let url = url.clone();
            tasks.spawn(async move {
                let mut failures = Vec::new();
                let Ok(mut conn) = AsyncPgConnection::establish(&url).await else {
                    return vec!["establish".to_owned()];
                };
                for i in 0..50_i32 {
                    let query = diesel::sql_query("SELECT $1 AS n")
                        .bind::<diesel::sql_types::Integer, _>(i);
                    if let Err(e) = diesel_async::RunQueryDsl::execute(query, &mut conn).await {
                        failures.push(e.to_string());
                    }
                }
                failures
            });
        }
        let mut failures = Vec::new();
        while let Some(task) = tasks.join_next().await {
            failures.extend(task.expect("a task"));
        }
        failures
    });
    assert!(
        failures
            .iter()
            .any(|e| e.contains("prepared statement") || e == "establish"),
        "no statement of diesel-async's failed behind the pooler in {} tries: has upstream fixed \
         it? failures: {failures:?}",
        WRITERS * 50
    );
}

/// The interleaving a cut-off can leave: an async call outside a transaction, in the transaction
/// slotted opens for it under `Pooling::Transaction`, is cut off after `BEGIN` while its upsert
/// waits on a lock. The server then runs the upsert inside that transaction, which stays open.
/// A later call on the same (unpooled) connection must fail, not count inside the stale
/// transaction and report success for a write that is never committed.
#[test]
fn a_cut_off_own_transaction_leaves_the_connection_refusing_calls() {
    let test = "pooler_cut_own_transaction";
    let Some((db, _url)) = set_up(test) else {
        return;
    };
    let mut blocker = PgConnection::open(&db.url);
    slotted_tests::asynch::block_on(async {
        let mut raw = AsyncPgConnection::establish(&db.url)
            .await
            .expect("a direct async connection");
        blocker
            .batch_execute("BEGIN; LOCK TABLE posts_likes_slots IN EXCLUSIVE MODE")
            .expect("lock the slot table");
        let cut = tokio::time::timeout(
            Duration::from_millis(300),
            Post::likes_of(1).increment_async(&mut raw),
        )
        .await;
        assert!(cut.is_err(), "the increment waits on the lock: {cut:?}");
        blocker.batch_execute("COMMIT").expect("release the lock");
        // The server now runs the cut-off upsert inside the transaction left open.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = Post::likes_of(1).increment_async(&mut raw).await;
        let error = after.expect_err("a call on a connection whose own transaction was cut off");
        assert!(
            error.to_string().contains("transaction manager"),
            "the error says why: {error}"
        );
        assert_eq!(
            Post::likes_of(1).total(&mut blocker).unwrap(),
            0,
            "nothing committed while the connection is open"
        );
        drop(raw);
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while blocker.query_i64(
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid()",
    ) > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the session never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        Post::likes_of(1).total(&mut blocker).unwrap(),
        0,
        "the cut-off increment was rolled back with its session"
    );
}

/// Calls through the pooler cut off at random points (0–20 ms), on deadpool connections run
/// through `CancelGuard`, 8 tasks at once: every total lies within acknowledged ≤ total ≤
/// acknowledged + cut off, no session is left inside a transaction, and the pool then counts
/// exactly.
#[test]
fn cut_offs_through_the_pooler_leave_nothing_half_done() {
    let test = "pooler_cut_offs";
    let Some((db, url)) = set_up(test) else {
        return;
    };
    let mut observer = PgConnection::open(&db.url);
    let (acked, cut, errors) = slotted_tests::asynch::block_on(async {
        let pool = deadpool::Pool::builder(pooler_manager(&url))
            .max_size(8)
            .build()
            .expect("a deadpool pool");
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8_u64 {
            let pool = pool.clone();
            tasks.spawn(async move {
                let mut dice = slotted_tests::Dice(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                let (mut acked, mut cut, mut errors) = (0_i64, 0_i64, Vec::new());
                for _ in 0..60 {
                    let limit = Duration::from_micros(dice.below(20_000));
                    let mut conn =
                        slotted_core::CancelGuard::new(pool.get().await.expect("a connection"));
                    let likes = Post::likes_of(1);
                    match tokio::time::timeout(limit, conn.run(|c| likes.increment_async(c))).await
                    {
                        Ok(Ok(())) => acked += 1,
                        Ok(Err(e)) => errors.push(e.to_string()),
                        Err(_) => cut += 1,
                    }
                }
                (acked, cut, errors)
            });
        }
        let (mut acked, mut cut, mut errors) = (0, 0, Vec::new());
        while let Some(task) = tasks.join_next().await {
            let (a, c, e) = task.expect("a task");
            (acked, cut) = (acked + a, cut + c);
            errors.extend(e);
        }
        // The pool afterwards: 100 calls, none cut off, every one counted. They count another
        // record: a cut-off call whose statement had reached the server may still commit on
        // record 1 after the storm (a whole write, late; its session ends after it), which
        // the bounds below allow for, and which must not be taken for a call counted twice.
        for _ in 0..100 {
            let mut conn = slotted_core::CancelGuard::new(pool.get().await.expect("a connection"));
            let likes = Post::likes_of(2);
            conn.run(|c| likes.increment_async(c))
                .await
                .expect("an increment after the storm");
        }
        assert_eq!(
            Post::likes_of(2).total(&mut observer).unwrap(),
            100,
            "the pool counts exactly after the storm"
        );
        (acked, cut, errors)
    });
    eprintln!("{test}: {acked} acknowledged, {cut} cut off, errors: {errors:?}");
    assert!(cut > 0, "no call was cut off: the storm tested nothing");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open = observer.query_i64(
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database() \
             AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
        );
        if open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{open} sessions still inside a transaction 10 s after the storm"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let total = Post::likes_of(1).total(&mut observer).unwrap();
    let unknown = cut + errors.len() as i64;
    assert!(
        acked <= total && total <= acked + unknown,
        "total {total} outside [{acked}, {}]",
        acked + unknown
    );
}

/// Behind the pooler, the writers that contend are its server sessions, not the clients: the
/// `connection` strategy's writer index belongs to the server session (an advisory lock and a
/// session setting of its own), so 16 client connections over 8 server sessions write to the
/// slots of the indices those sessions hold, one each, all distinct.
#[test]
fn the_connection_strategy_spreads_over_the_poolers_server_sessions() {
    use slotted_tests::models::Reaction;
    let test = "pooler_connection_slots";
    let Some((db, url)) = set_up(test) else {
        return;
    };
    let mut observer = PgConnection::open(&db.url);
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut observer,
        slotted_core::CounterMigrations::of::<Reaction>(),
    )
    .expect("the reactions counter table");
    let manager = diesel::r2d2::ConnectionManager::<PgConnection>::new(&url);
    let pool = diesel::r2d2::Pool::builder()
        .max_size(WRITERS as u32)
        .connection_customizer(Box::new(Cache(false)))
        .build(manager)
        .expect("an r2d2 pool through the pooler");
    // Record 2 first: a server session's first write goes to its connection's slot and takes
    // its index for the writes after it (the taking statement may run on another server
    // session, which then holds one; the first finds out again on its next write).
    for record in [2, 1] {
        std::thread::scope(|s| {
            for _ in 0..WRITERS {
                s.spawn(|| {
                    for _ in 0..50 {
                        let mut conn = pool.get().expect("a pooled connection");
                        Reaction::hearts_of(record)
                            .increment(&mut *conn)
                            .expect("an increment through the pooler");
                    }
                });
            }
        });
    }
    #[derive(diesel::QueryableByName)]
    struct Held {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        pid: i32,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        idx: i64,
    }
    // The writer indices the server sessions hold (slotted_core's INDEX_LOCK_CLASS, 'slot').
    let held: Vec<Held> = diesel::RunQueryDsl::load(
        diesel::sql_query(
            "SELECT pid, CAST(objid AS BIGINT) AS idx FROM pg_locks WHERE locktype = 'advisory' \
             AND classid = 1936486260 AND objsubid = 2 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ),
        &mut observer,
    )
    .expect("the writer indices held");
    let pids: std::collections::BTreeSet<i32> = held.iter().map(|h| h.pid).collect();
    let held_slots: std::collections::BTreeSet<i16> =
        held.iter().map(|h| (h.idx % 64) as i16).collect();
    let rows = observer.slot_rows("reactions_hearts_slots", 1);
    let written: std::collections::BTreeSet<i16> = rows.iter().map(|r| r.slot).collect();
    assert_eq!(
        rows.iter().map(|r| r.count).sum::<i64>(),
        WRITERS as i64 * 50
    );
    assert!(
        (1..=8).contains(&held.len()) && pids.len() == held.len(),
        "one index per server session, at most the pooler's 8: {} indices, {} sessions",
        held.len(),
        pids.len()
    );
    assert_eq!(
        written, held_slots,
        "the slots written are those of the indices the server sessions hold"
    );
    assert_eq!(
        written,
        (0..held.len() as i16).collect(),
        "the smallest indices, one per server session"
    );
}

/// Without `Pooling::Transaction` behind the pooler, the failures name the setting to change:
/// run in a second process (the setting is process-wide), sync writers with Diesel's cache on
/// (named statements), as a user who did not read the guide would.
#[test]
fn without_the_setting_the_errors_name_it() {
    let test = "pooler_unset";
    let Some((_db, url)) = set_up(test) else {
        return;
    };
    let child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "session_mode_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("SLOTTED_POOLER_SECOND_PROCESS_URL", &url)
        .output()
        .expect("run the second process");
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "the second process failed:\n{stdout}"
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("errors "))
        .unwrap_or_else(|| panic!("the second process printed no errors line:\n{stdout}"));
    let (named, others) = line.split_once(' ').expect("two counts");
    assert!(
        named.parse::<u64>().unwrap() > 0,
        "no error named the setting: {stdout}"
    );
    assert_eq!(
        others, "0",
        "every such failure names the setting: {stdout}"
    );
}

/// Run by `without_the_setting_the_errors_name_it`.
#[test]
#[ignore = "run by without_the_setting_the_errors_name_it"]
fn session_mode_process() {
    let url = std::env::var("SLOTTED_POOLER_SECOND_PROCESS_URL")
        .expect("started by without_the_setting_the_errors_name_it");
    pooling::set(Pooling::Session);
    let pool = diesel::r2d2::Pool::builder()
        .max_size(WRITERS as u32)
        .test_on_check_out(false)
        .build(diesel::r2d2::ConnectionManager::<PgConnection>::new(&url))
        .expect("an r2d2 pool through the pooler");
    let (named, others) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let pool = &pool;
                s.spawn(move || {
                    let (mut named, mut others) = (0_u64, 0_u64);
                    for i in 0..CALLS {
                        let (counter, record, _) = plan(w, i);
                        let mut conn = pool.get().expect("a pooled connection");
                        let result = if counter == "likes" {
                            Post::likes_of(record).increment(&mut *conn)
                        } else {
                            Post::views_of(record).increment(&mut *conn)
                        };
                        match result {
                            Ok(()) => {}
                            Err(slotted_core::Error::TransactionPooler { .. }) => named += 1,
                            Err(e) if e.to_string().contains("prepared statement") => others += 1,
                            Err(_) => {}
                        }
                    }
                    (named, others)
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|w| w.join().expect("a writer"))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    });
    println!("errors {named} {others}");
}
