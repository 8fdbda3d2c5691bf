//! Exactness under concurrency: 8 threads x 500 increments on one record give exactly 4,000,
//! spread over several slots, on every backend; an increment the database rolls back to break a
//! deadlock (or a serialization conflict) runs again and counts once, on the servers.
// The interleavings run on PostgreSQL and MySQL only.
#![cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]

use slotted_tests::locks::an_increment_meets_a_rollback;
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

/// An increment outside a transaction that the database rolls back runs again and counts once
/// ([`an_increment_meets_a_rollback`] says how, on each server); the async face's twin is in
/// async_counters.rs.
fn an_increment_rolled_back_by_the_database_runs_again_and_counts_once<C: TestConnection>(
    test: &str,
) {
    let Some((db, _conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let mut writer = C::open(&db.url);
    an_increment_meets_a_rollback::<C>(&db.url, |setup| {
        writer.batch_execute(setup).expect("set up the writer");
        Post::likes_of(1).increment(&mut writer)
    });
}
