//! A counter workload checker in the spirit of Jepsen's counter workload, on every backend.
//!
//! Threads over an r2d2 pool run transactions that are random mixes of `increment`,
//! `decrement` and `add(n)` on several counters and records, in random order; some roll back on
//! purpose; deadlocks are retried by `transaction_with_retry`; a maintenance thread on a pooled
//! connection compacts the counters and rolls one of them up into its cache column all the
//! while, and at the end the cache column must equal the total. The harness records every delta whose commit was acknowledged, every
//! one rolled back, and every one whose outcome is unknown (an error at COMMIT), and checks, per
//! counter and record: acknowledged + unknown negatives ≤ total ≤ acknowledged + unknown
//! positives, and total == acknowledged where nothing was unknown.
//!
//! Small by default; `SLOTTED_STRESS_SCALE=10` runs ten times the transactions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use diesel::r2d2::R2D2Connection;
use slotted_core::{
    retry::transaction_with_retry, retry::RetryPolicy, CounterMaintenance, CounterMigrations,
    Error, SlottedCounter,
};
use slotted_tests::lifecycle::{articles_likes_slots, Article};
use slotted_tests::models::*;
use slotted_tests::{backend_tests, pool, Dice, Stop, TestConnection, TestDb};

backend_tests!(
    jepsen_style_counter_workload,
    opposite_order_transactions_deadlock_and_retry_exactly
);

/// Which counter an operation touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Target {
    Likes(i32),
    Views(i32),
    Hits(i64),
    /// A counter with a cache column, rolled up while it is written.
    ArticleLikes(i32),
}

impl Target {
    fn add<C: TestConnection>(self, delta: i64, conn: &mut C) -> slotted_core::Result<()> {
        match self {
            Target::Likes(k) if delta == 1 => Post::likes_of(k).increment(conn),
            Target::Likes(k) if delta == -1 => Post::likes_of(k).decrement(conn),
            Target::Likes(k) => Post::likes_of(k).add(delta, conn),
            Target::Views(k) => Post::views_of(k).add(delta, conn),
            Target::Hits(k) => Event::hits_of(k).add(delta, conn),
            Target::ArticleLikes(k) => Article::likes_of(k).add(delta, conn),
        }
    }

    fn total<C: TestConnection>(self, conn: &mut C) -> slotted_core::Result<i64> {
        match self {
            Target::Likes(k) => Post::likes_of(k).total(conn),
            Target::Views(k) => Post::views_of(k).total(conn),
            Target::Hits(k) => Event::hits_of(k).total(conn),
            Target::ArticleLikes(k) => Article::likes_of(k).total(conn),
        }
    }
}

/// Per target: acknowledged sum, and the positive and negative parts of unknown outcomes.
#[derive(Default, Debug, Clone, Copy)]
struct Ledger {
    acknowledged: i64,
    unknown_positive: i64,
    unknown_negative: i64,
}

#[derive(Default)]
struct Figures {
    transactions: AtomicU64,
    deltas: AtomicU64,
    retries: AtomicU64,
    rollbacks: AtomicU64,
    unknown: AtomicU64,
    failed: AtomicU64,
    compactions: AtomicU64,
    compaction_reruns: AtomicU64,
    rollups: AtomicU64,
    maintenance_errors: AtomicU64,
}

fn scale() -> u64 {
    std::env::var("SLOTTED_STRESS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn jepsen_style_counter_workload<C: TestConnection + R2D2Connection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    slotted_tests::lifecycle::migrate(&mut conn);
    conn.batch_execute("INSERT INTO articles (id, likes_count) VALUES (1, 0), (2, 0), (3, 0)")
        .unwrap();
    const THREADS: u64 = 6;
    let per_thread = 120 * scale();
    let pool = pool::<C>(&db.url, THREADS as u32 + 1);
    let targets: Vec<Target> = (1..=3)
        .flat_map(|k| {
            [
                Target::Likes(k),
                Target::Views(k),
                Target::Hits(i64::from(k) << 33),
                Target::ArticleLikes(k),
            ]
        })
        .collect();
    let ledger: Mutex<HashMap<Target, Ledger>> = Mutex::new(HashMap::new());
    let figures = Figures::default();
    let done = Stop::new();
    let policy = RetryPolicy {
        max_retries: 50,
        ..RetryPolicy::default()
    };

    std::thread::scope(|scope| {
        // A panic below stops the threads that wait for `done` (see `Stop`).
        let _done = done.on_exit();
        // Maintenance beside the writers, on a pooled connection kept through its errors:
        // compaction folds rows and the roll-up copies totals while they are written.
        scope.spawn(|| {
            let mut conn = pool.get().unwrap();
            while !done.is_set() {
                let passes = [
                    posts_likes_slots::table.compact_all(2, &mut *conn),
                    posts_views_slots::table.compact_all(2, &mut *conn),
                    events_hits_slots::table.compact_all(2, &mut *conn),
                    articles_likes_slots::table.compact_all(2, &mut *conn),
                ];
                // A compaction that lost a deadlock rolled back whole: nothing to account for.
                let ok = passes.iter().filter(|p| p.is_ok()).count();
                figures.compactions.fetch_add(ok as u64, Ordering::Relaxed);
                let reruns: u64 = passes.iter().flatten().map(|p| p.retries).sum();
                figures
                    .compaction_reruns
                    .fetch_add(reruns, Ordering::Relaxed);
                let rollup = articles_likes_slots::table.refresh_cache_all(2, &mut *conn);
                figures
                    .rollups
                    .fetch_add(u64::from(rollup.is_ok()), Ordering::Relaxed);
                let errors = passes.len() - ok + usize::from(rollup.is_err());
                figures
                    .maintenance_errors
                    .fetch_add(errors as u64, Ordering::Relaxed);
            }
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, targets, ledger, figures, policy) =
                    (&pool, &targets, &ledger, &figures, &policy);
                scope.spawn(move || {
                    let mut dice = Dice(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                    let mut conn = pool.get().unwrap();
                    for _ in 0..per_thread {
                        let ops: Vec<(Target, i64)> = (0..1 + dice.below(4))
                            .map(|_| {
                                let target = targets[dice.below(targets.len() as u64) as usize];
                                let delta = match dice.below(3) {
                                    0 => 1,
                                    1 => -1,
                                    _ => dice.below(11) as i64 - 5,
                                };
                                (target, delta)
                            })
                            .collect();
                        let roll_back = dice.below(10) == 0;
                        let mut body_ok = false;
                        let result = transaction_with_retry(&mut *conn, policy, |conn| {
                            body_ok = false;
                            for &(target, delta) in &ops {
                                target.add(delta, conn)?;
                            }
                            if roll_back {
                                return Err(Error::Diesel(
                                    diesel::result::Error::RollbackTransaction,
                                ));
                            }
                            body_ok = true;
                            Ok(())
                        });
                        figures.transactions.fetch_add(1, Ordering::Relaxed);
                        figures
                            .deltas
                            .fetch_add(ops.len() as u64, Ordering::Relaxed);
                        let mut ledger = ledger.lock().unwrap();
                        match result {
                            Ok(done) => {
                                figures
                                    .retries
                                    .fetch_add(u64::from(done.retries), Ordering::Relaxed);
                                for &(target, delta) in &ops {
                                    ledger.entry(target).or_default().acknowledged += delta;
                                }
                            }
                            // The body finished, COMMIT failed: the outcome is unknown.
                            Err(_) if body_ok => {
                                figures.unknown.fetch_add(1, Ordering::Relaxed);
                                for &(target, delta) in &ops {
                                    let entry = ledger.entry(target).or_default();
                                    if delta > 0 {
                                        entry.unknown_positive += delta;
                                    } else {
                                        entry.unknown_negative += delta;
                                    }
                                }
                            }
                            Err(_) if roll_back => {
                                figures.rollbacks.fetch_add(1, Ordering::Relaxed);
                            }
                            // Failed before COMMIT (retries exhausted): rolled back, nothing applied.
                            Err(_) => {
                                figures.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        done.set();
    });

    let mut conn = pool.get().unwrap();
    let ledger = ledger.into_inner().unwrap();
    let load = |f: &AtomicU64| f.load(Ordering::Relaxed);
    println!(
        "{}: {} transactions, {} deltas, {} retries, {} rollbacks on purpose, {} unknown outcomes, {} failed, {} compaction passes ({} batches rerun after a deadlock), {} roll-ups, {} maintenance passes failed",
        C::NAME,
        load(&figures.transactions),
        load(&figures.deltas),
        load(&figures.retries),
        load(&figures.rollbacks),
        load(&figures.unknown),
        load(&figures.failed),
        load(&figures.compactions),
        load(&figures.compaction_reruns),
        load(&figures.rollups),
        load(&figures.maintenance_errors),
    );
    assert!(
        load(&figures.compactions) > 0 && load(&figures.rollups) > 0,
        "maintenance ran beside the writers"
    );
    for target in &targets {
        let entry = ledger.get(target).copied().unwrap_or_default();
        let total = target.total(&mut *conn).unwrap();
        let (low, high) = (
            entry.acknowledged + entry.unknown_negative,
            entry.acknowledged + entry.unknown_positive,
        );
        assert!(
            (low..=high).contains(&total),
            "{target:?}: total {total} outside {low}..={high}"
        );
        if entry.unknown_positive == 0 && entry.unknown_negative == 0 {
            assert_eq!(total, entry.acknowledged, "{target:?}");
        }
    }
    // With the writers done, one more roll-up makes every cache column equal its total.
    articles_likes_slots::table
        .refresh_cache_all(2, &mut *conn)
        .unwrap();
    for k in 1..=3 {
        let cached = conn.query_i64(&format!(
            "SELECT likes_count AS n FROM articles WHERE id = {k}"
        ));
        let total = Target::ArticleLikes(k).total(&mut *conn).unwrap();
        assert_eq!(cached, total, "article {k}: cache column against total");
    }
}

/// One slot: every writer of an account takes that one row's lock.
#[derive(SlottedCounter)]
#[diesel(table_name = accounts)]
#[slotted(counter = balance, slots = 1)]
pub struct Account {
    pub id: i32,
}

/// Half the threads add to account 1 then 2, the other half 2 then 1, each holding its first row
/// lock while it takes the second: on the servers this deadlocks, and the retry helper must still
/// bring both totals out exact.
fn opposite_order_transactions_deadlock_and_retry_exactly<C: TestConnection + R2D2Connection>(
    test: &str,
) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    conn.run_pending_migrations(CounterMigrations::of::<Account>())
        .unwrap();
    const THREADS: usize = 4;
    let per_thread = 10 * scale() as usize;
    let pool = pool::<C>(&db.url, THREADS as u32);
    let retries = AtomicU64::new(0);
    let policy = RetryPolicy {
        max_retries: 100,
        ..RetryPolicy::default()
    };
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (pool, retries, policy) = (&pool, &retries, &policy);
            scope.spawn(move || {
                let mut conn = pool.get().unwrap();
                let (first, second) = if t % 2 == 0 { (1, 2) } else { (2, 1) };
                for _ in 0..per_thread {
                    let done = transaction_with_retry(&mut *conn, policy, |conn| {
                        if C::NAME == "postgres" {
                            // Look for the deadlock after 20 ms, not the default second.
                            conn.batch_execute("SET LOCAL deadlock_timeout = '20ms'")?;
                        }
                        Account::balance_of(first).increment(conn)?;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        Account::balance_of(second).add(10, conn)?;
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                    retries.fetch_add(u64::from(done.retries), Ordering::Relaxed);
                }
            });
        }
    });
    let retries = retries.load(Ordering::Relaxed);
    println!(
        "{}: {} opposite-order transactions, {retries} deadlock retries",
        C::NAME,
        THREADS * per_thread
    );
    let half = (THREADS / 2 * per_thread) as i64;
    for key in [1, 2] {
        assert_eq!(
            Account::balance_of(key).total(&mut conn).unwrap(),
            half + 10 * half,
            "account {key}"
        );
    }
    if C::NAME != "sqlite" {
        assert!(
            retries > 0,
            "the workload deadlocked nowhere: it tests nothing"
        );
    }
}
