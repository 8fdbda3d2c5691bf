//! The async maintainer (issue 41): a tokio task over a deadpool or bb8 pool of diesel-async
//! connections, on every backend. It keeps caches fresh and counts exact beside async writers;
//! cut off at random points (its runtime dropped mid-pass, ten times over) it loses no count,
//! leaves no session behind and no lease held, and a maintainer started afterwards finishes
//! the work; a sync and an async maintainer of the same counters share one lease.
#![cfg(feature = "async")]

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::r2d2::R2D2Connection;
use slotted_core::maintenance::{AsyncMaintainer, Maintainer, MaintainerReport};
use slotted_tests::asynch::{lifecycle_db, AsyncTestConnection};
use slotted_tests::lifecycle::*;
use slotted_tests::{pool, Dice, TestConnection};

slotted_tests::async_backend_tests! {
    all: [
        an_async_maintainer_keeps_caches_fresh_and_counts_exact_beside_writers,
        an_async_maintainer_cut_off_anywhere_loses_nothing,
    ],
    servers: [a_sync_and_an_async_maintainer_share_one_lease],
}

const BOUND: Duration = Duration::from_millis(200);

/// Waits up to 10 s (without blocking the runtime) for `ok` of the report.
async fn until(
    what: &str,
    report: impl Fn() -> MaintainerReport,
    ok: impl Fn(&MaintainerReport) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if ok(&report()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: {:?}", report());
}

async fn an_async_maintainer_keeps_caches_fresh_and_counts_exact_beside_writers<
    A: AsyncTestConnection,
>(
    test: &str,
) {
    let Some((db, mut check)) = lifecycle_db::<A>(test) else {
        return;
    };
    check
        .batch_execute("INSERT INTO articles (id) VALUES (1), (2), (3), (4)")
        .unwrap();
    let maintainer = AsyncMaintainer::builder(A::deadpool(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    let writers = if <A::Sync as TestConnection>::NAME == "sqlite" {
        1
    } else {
        3
    };
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let url = db.url.clone();
            tokio::spawn(async move {
                let mut conn = A::open(&url).await;
                let mut acked = vec![0i64; 5];
                let end = Instant::now() + Duration::from_millis(1500);
                let mut i = w;
                while Instant::now() < end {
                    let id = i % 4 + 1;
                    Article::likes_of(id)
                        .increment_async(&mut conn)
                        .await
                        .unwrap();
                    acked[id as usize] += 1;
                    i += 1;
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
                acked
            })
        })
        .collect();
    let mut acked = Vec::new();
    for task in tasks {
        acked.push(task.await.unwrap());
    }
    let acked = sum_acked(acked);
    // Within the bound (and a pass), the cached column holds every acknowledged write.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen: Vec<i64> = (1..=4).map(|id| cached_likes(&mut check, id)).collect();
        if seen[..] == acked[1..] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{seen:?} != {acked:?}: {:?}",
            maintainer.report()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = maintainer.stop(Duration::from_secs(10)).await;
    assert!(!report.running && !report.active, "{report:?}");
    assert!(report.passes >= 3, "{report:?}");
    assert_eq!((report.errors, report.alerts), (0, 0), "{report:?}");
    assert!(
        report.jobs.iter().all(|j| j.runs > 0 && j.failures == 0),
        "every job ran: {report:?}"
    );
    for (id, acked) in acked.iter().enumerate().skip(1) {
        assert_eq!(
            Article::likes_of(id as i32).total(&mut check).unwrap(),
            *acked,
            "the totals are every write, exactly"
        );
    }
    let rows = check.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots");
    assert!(rows <= 4, "compacted: {rows} slot rows");
}

/// Sessions of the test's database other than `conn`'s own.
fn other_sessions<C: TestConnection>(conn: &mut C) -> i64 {
    match C::NAME {
        "postgres" => conn.query_i64(
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ),
        "mysql" => conn.query_i64(
            "SELECT COUNT(*) AS n FROM information_schema.processlist \
             WHERE db = DATABASE() AND id <> CONNECTION_ID()",
        ),
        _ => 0,
    }
}

/// A pass over 2,000 records of 4 slot rows each, in batches of 20, is cut off ten times at a
/// random point of its first 65 ms by dropping its runtime (every future of the task dropped at its await point):
/// after each cut the totals are exact and, on the servers, no session of the dropped pool is
/// left (so no lock or open transaction); a maintainer started afterwards takes the lease at
/// once and compacts every record to one row.
async fn an_async_maintainer_cut_off_anywhere_loses_nothing<A: AsyncTestConnection>(test: &str)
where
    A::Sync: R2D2Connection,
{
    let Some((db, mut check)) = lifecycle_db::<A>(test) else {
        return;
    };
    const RECORDS: i64 = 2_000;
    let rows =
        |conn: &mut A::Sync| conn.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots");
    let ids: Vec<i32> = (1..=RECORDS as i32).collect();
    let exact = |conn: &mut A::Sync, step: &str| {
        let totals = Article::likes_totals(&ids, conn).unwrap();
        for id in &ids {
            assert_eq!(totals[id], 10 * i64::from(*id), "record {id}, {step}");
        }
    };
    // Seeded from the clock, printed so that a failure can be replayed.
    let mut dice = Dice::from_clock("cut-off points");
    // Cuts until 5 have fallen mid-pass (where a cut lands depends on how fast this machine runs
    // the pass: a cut before the first pass or after the last proves less), 40 at most.
    let mut cut_mid_pass = 0;
    let mut cuts = 0;
    for cut in 0..40 {
        if cut_mid_pass >= 5 {
            break;
        }
        cuts += 1;
        // All the work ahead of each cut.
        scattered_likes(&mut check, RECORDS);
        let before = rows(&mut check);
        let after_ms = 5 + dice.below(60);
        let url = db.url.clone();
        // A thread of its own: a runtime is dropped outside any other's context.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let maintainer = AsyncMaintainer::builder(A::bb8(&url, 2).await)
                    .counter::<articles_likes_slots::table>()
                    .batch(20)
                    .freshness(Duration::from_millis(1))
                    .start()
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                // Not stopped: the runtime ends with the task mid-way.
                std::mem::forget(maintainer);
            });
            drop(runtime);
        })
        .join()
        .unwrap();
        let left = rows(&mut check);
        eprintln!("cut {cut} after {after_ms} ms: {before} slot rows, then {left}");
        if left < before && left > RECORDS {
            cut_mid_pass += 1;
        }
        exact(
            &mut check,
            &format!("after cut {cut} at {after_ms} ms ({left} rows)"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while other_sessions(&mut check) > 0 {
            assert!(
                Instant::now() < deadline,
                "cut {cut}: the dropped pool's sessions are still open"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(
        cut_mid_pass >= 5,
        "{cut_mid_pass} of {cuts} cuts fell mid-pass"
    );
    // Nothing left held: a maintainer takes the lease at once, and its pass compacts every
    // record (a row still locked would be skipped, and left uncompacted).
    let finisher = Maintainer::builder(pool::<A::Sync>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(
        "a pass after the cuts",
        || finisher.report(),
        |r| r.passes >= 1,
    )
    .await;
    let report = finisher.stop(Duration::from_secs(10));
    assert_eq!((report.errors, report.leases_taken), (0, 1), "{report:?}");
    assert_eq!(rows(&mut check), RECORDS);
    exact(&mut check, "after a full pass");
    assert_eq!(cached_likes(&mut check, 7), 70, "and the roll-up");
}

/// A sync maintainer (r2d2) and an async one (bb8) of the same counters hold one lease: the
/// async one works, the sync one stands by, and takes over when the async one stops.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
async fn a_sync_and_an_async_maintainer_share_one_lease<A: AsyncTestConnection>(test: &str)
where
    A::Sync: R2D2Connection,
{
    let Some((db, mut check)) = lifecycle_db::<A>(test) else {
        return;
    };
    check
        .batch_execute("INSERT INTO articles (id) VALUES (1)")
        .unwrap();
    let first = AsyncMaintainer::builder(A::bb8(&db.url, 2).await)
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    until(
        "the async maintainer holds the lease",
        || first.report(),
        |r| r.active && r.passes > 0,
    )
    .await;
    let second = Maintainer::builder(pool::<A::Sync>(&db.url, 2))
        .counter::<articles_likes_slots::table>()
        .freshness(BOUND)
        .start()
        .unwrap();
    tokio::time::sleep(BOUND * 5).await;
    let standing_by = second.report();
    assert!(
        !standing_by.active && standing_by.passes == 0 && standing_by.errors == 0,
        "{standing_by:?}"
    );
    Article::likes_of(1).add(7, &mut check).unwrap();
    let stopped = first.stop(Duration::from_secs(10)).await;
    assert!(
        !stopped.running && stopped.leases_taken == 1 && stopped.errors == 0,
        "{stopped:?}"
    );
    until(
        "the sync maintainer takes over",
        || second.report(),
        |r| r.active && r.passes > 0,
    )
    .await;
    Article::likes_of(1).add(5, &mut check).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cached_likes(&mut check, 1) != 12 {
        assert!(Instant::now() < deadline, "{:?}", second.report());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = second.stop(Duration::from_secs(10));
    assert_eq!((report.errors, report.leases_taken), (0, 1), "{report:?}");
}
