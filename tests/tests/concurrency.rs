//! Exactness under concurrency: 8 threads x 500 increments on one record give exactly 4,000,
//! spread over several slots, on every backend; an increment the database rolls back to break a
//! deadlock (or a serialization conflict) runs again and counts once, on the servers.
// The interleavings run on PostgreSQL and MySQL only.
#![cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]

use std::time::Duration;

use slotted_tests::locks::{every_likes_slot, poll_until, session_id, waiting_on_a_lock};
use slotted_tests::models::*;
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests! {
    all: [eight_threads_increment_one_record_exactly],
    servers: [an_increment_rolled_back_by_the_database_runs_again_and_counts_once],
}

// `Post.likes` uses the default thread strategy, `Post.views` the random one; both must come
// out exact.

const THREADS: usize = 8;
const INCREMENTS: usize = 500;

fn eight_threads_increment_one_record_exactly<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let mut conn = C::open(&db.url);
                for _ in 0..INCREMENTS {
                    Post::likes_of(7).increment(&mut conn).unwrap();
                    Post::views_of(7).increment(&mut conn).unwrap();
                }
            });
        }
    });
    for (table, total) in [
        (
            "posts_likes_slots",
            Post::likes_of(7).total(&mut conn).unwrap(),
        ),
        (
            "posts_views_slots",
            Post::views_of(7).total(&mut conn).unwrap(),
        ),
    ] {
        assert_eq!(total, (THREADS * INCREMENTS) as i64, "{table}");
        let rows = conn.slot_rows(table, 7);
        assert!(
            rows.len() > 1,
            "{table}: 4,000 increments in {} slot row(s)",
            rows.len()
        );
        assert_eq!(rows.iter().map(|r| r.count).sum::<i64>(), 4000, "{table}");
    }
    // The thread strategy: each thread keeps to one slot, so every row holds whole threads'
    // worth of increments. (Other tests' threads share the process's thread indices, so two of
    // these eight may meet on one slot: counts of 1,000 are possible, 750 never.)
    let likes = conn.slot_rows("posts_likes_slots", 7);
    assert!(
        likes.iter().all(|r| r.count % INCREMENTS as i64 == 0),
        "{likes:?}"
    );
}

/// An increment outside a transaction is a transaction of its own; when the database rolls it
/// back to break a deadlock or a serialization conflict, nothing of it was written, and it runs
/// again: the caller gets `Ok` and the record counts it once. (Before, the caller got the
/// error, and a compaction's locks on InnoDB made it about once in 1,600 increments.) Written
/// down as one interleaving per server, with a session of the test in the compaction's place:
/// - MariaDB/MySQL: the session reads record 1's slot rows with a shared lock; the increment
///   waits for its row's exclusive lock; the session then updates the rows, which must wait
///   behind the increment's request: a deadlock. InnoDB rolls back the transaction that changed
///   fewer rows, the increment (the session changed one of record 2 first).
/// - PostgreSQL, with the writer's sessions in `REPEATABLE READ` (as an app's
///   `default_transaction_isolation` may put them): the session updates record 1's rows; the
///   increment waits for its row; the session commits, and the increment's snapshot is too old
///   to update the row: `40001`, could not serialize access due to concurrent update.
fn an_increment_rolled_back_by_the_database_runs_again_and_counts_once<C: TestConnection>(
    test: &str,
) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    // The increment's row exists, and is held.
    every_likes_slot(&mut conn, 1);
    Post::likes_of(2).increment(&mut conn).unwrap();
    let mut writer = C::open(&db.url);
    let mut session = C::open(&db.url);
    if C::NAME == "postgres" {
        writer
            .batch_execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            )
            .unwrap();
    }
    let writer_id = session_id(&mut writer);
    session.batch_execute("BEGIN").unwrap();
    session
        .batch_execute("UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 2")
        .unwrap();
    let closes_the_cycle = match C::NAME {
        "postgres" => {
            session
                .batch_execute("UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 1")
                .unwrap();
            "COMMIT"
        }
        _ => {
            session
                .batch_execute(
                    "SELECT count FROM posts_likes_slots WHERE record_id = 1 LOCK IN SHARE MODE",
                )
                .unwrap();
            "UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 1"
        }
    };
    std::thread::scope(|scope| {
        let increment = scope.spawn(|| Post::likes_of(1).increment(&mut writer));
        assert!(
            poll_until(Duration::from_secs(30), || {
                waiting_on_a_lock(&mut conn, &[writer_id]) == 1
            }),
            "{}: the increment never waited for its row",
            C::NAME
        );
        session
            .batch_execute(closes_the_cycle)
            .expect("the database rolls back the increment, not the session");
        if C::NAME != "postgres" {
            session.batch_execute("COMMIT").unwrap();
        }
        increment
            .join()
            .unwrap()
            .expect("the increment runs again after the database rolled it back");
    });
    // The session's +1 on each of record 1's 16 rows (and on record 2's), and the increment
    // once.
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 16 + 16 + 1);
    assert_eq!(Post::likes_of(2).total(&mut conn).unwrap(), 2);
}
