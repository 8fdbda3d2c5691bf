//! What slotted says when a write's reply is not what the statement returns: on MySQL and
//! MariaDB "0 rows affected" never means an overflow (that is error 1690), so it must not be
//! reported as `Error::Overflow` ("nothing was written"), which a caller would retry and so count
//! twice.
//!
//! The reply goes astray on a diesel-async MySQL connection after a row-returning query on it is
//! cut off (a dropped future; see docs/guide/async-and-cancellation.md): the next statement may
//! read the cut-off query's leftovers. Here plain Diesel reads are cut off at random points beside
//! increments on pools of 4, as a web service under client timeouts does, and on bb8 and
//! deadpool, with the pools as they come (no guard against such connections).
#![cfg(feature = "async")]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diesel_async::pooled_connection::{bb8, deadpool};
use slotted_core::Error;
use slotted_tests::asynch::{manager, AsyncTestConnection};
use slotted_tests::models::{posts_likes_slots, Post};
use slotted_tests::TestConnection;

/// Per server: the storm on a bb8 pool and on a deadpool pool of 4, each on its own database.
macro_rules! storm_tests {
    ($(#[$cfg:meta] $backend:ident: $conn:ty),*) => {$(
        #[$cfg]
        mod $backend {
            use super::*;

            fn run(test: &str, pool: fn(&str) -> Arc<Tally>) {
                let Some(db) = slotted_tests::TestDb::new::<<$conn as AsyncTestConnection>::Sync>(test)
                else {
                    return;
                };
                let mut sync = <<$conn as AsyncTestConnection>::Sync as TestConnection>::open(&db.url);
                diesel_migrations::MigrationHarness::run_pending_migrations(
                    &mut sync,
                    slotted_tests::all_migrations(),
                )
                .expect("migrations");
                let tally = pool(&db.url);
                check::<$conn>(&db.url, &tally);
            }

            #[test]
            fn cut_off_reads_beside_increments_never_give_a_false_overflow_bb8() {
                run("rows_affected_bb8", |url| {
                    slotted_tests::asynch::block_on(async {
                        let pool = bb8::Pool::builder()
                            .max_size(4)
                            .build(manager::<$conn>(url))
                            .await
                            .expect("a bb8 pool");
                        storm(move || {
                            let pool = pool.clone();
                            async move { pool.get_owned().await.expect("a bb8 connection") }
                        })
                        .await
                    })
                });
            }

            #[test]
            fn cut_off_reads_beside_increments_never_give_a_false_overflow_deadpool() {
                run("rows_affected_deadpool", |url| {
                    slotted_tests::asynch::block_on(async {
                        let pool = deadpool::Pool::builder(manager::<$conn>(url))
                            .max_size(4)
                            .build()
                            .expect("a deadpool pool");
                        storm(move || {
                            let pool = pool.clone();
                            async move { pool.get().await.expect("a deadpool connection") }
                        })
                        .await
                    })
                });
            }
        }
    )*};
}
storm_tests!(
    #[cfg(feature = "postgres")] postgres: diesel_async::AsyncPgConnection,
    #[cfg(feature = "mysql")] mysql: diesel_async::AsyncMysqlConnection
);

/// What the tasks saw.
#[derive(Default)]
struct Tally {
    /// Increments that returned `Ok`.
    acknowledged: AtomicI64,
    /// Increments that returned `OutcomeUnknown`, failed otherwise, or were cut off.
    in_doubt: AtomicI64,
    /// `Error::Overflow`: false on every backend here (the slots are nowhere near i64).
    overflows: AtomicI64,
    /// `OutcomeUnknown` among `in_doubt`.
    unknown: AtomicI64,
}

/// A plain Diesel query that returns rows: the slot rows of every post.
trait ReadSlots: slotted_core::AsyncCounterConnection + Send {
    fn read_slots(
        &mut self,
    ) -> impl std::future::Future<Output = diesel::QueryResult<Vec<(i16, i64)>>> + Send;
}

macro_rules! read_slots {
    ($(#[$cfg:meta] $conn:ty),*) => {$(
        #[$cfg]
        impl ReadSlots for $conn {
            async fn read_slots(&mut self) -> diesel::QueryResult<Vec<(i16, i64)>> {
                use diesel::QueryDsl;
                use diesel_async::RunQueryDsl;
                posts_likes_slots::table
                    .select((posts_likes_slots::slot, posts_likes_slots::count))
                    .load(self)
                    .await
            }
        }
    )*};
}
read_slots!(
    #[cfg(feature = "postgres")]
    diesel_async::AsyncPgConnection,
    #[cfg(feature = "mysql")]
    diesel_async::AsyncMysqlConnection
);

/// 32 tasks × 40 rounds; in each round a task takes a pooled connection and, one time in four,
/// reads the slot rows with a plain Diesel query cut off after 0–3 ms, else increments post 1.
async fn storm<F, Fut, C>(get: F) -> Arc<Tally>
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = C> + Send,
    C: std::ops::DerefMut + Send + 'static,
    C::Target: ReadSlots,
{
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for t in 0..32_u64 {
        let (get, tally) = (get.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..40_u64 {
                let mut conn = get().await;
                let n = t * 40 + round;
                if n % 4 == 0 {
                    let limit = Duration::from_micros((n * 389) % 3_000);
                    let _ = tokio::time::timeout(limit, conn.read_slots()).await;
                    continue;
                }
                let limit = Duration::from_micros(500 + (n * 977) % 20_000);
                match tokio::time::timeout(limit, Post::likes_of(1).increment_async(&mut *conn))
                    .await
                {
                    Ok(Ok(())) => {
                        tally.acknowledged.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => {
                        tally.in_doubt.fetch_add(1, Ordering::SeqCst);
                        match e {
                            Error::Overflow { .. } => {
                                eprintln!("false overflow: {e}");
                                tally.overflows.fetch_add(1, Ordering::SeqCst);
                            }
                            Error::OutcomeUnknown { .. } => {
                                tally.unknown.fetch_add(1, Ordering::SeqCst);
                            }
                            _ => {}
                        }
                    }
                    Err(_) => {
                        tally.in_doubt.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a storm task");
    }
    tally
}

/// No false overflow, and the table holds every acknowledged increment and at most the ones in
/// doubt besides.
#[allow(dead_code)] // without a server feature
fn check<A: AsyncTestConnection>(url: &str, tally: &Tally) {
    let acknowledged = tally.acknowledged.load(Ordering::SeqCst);
    let in_doubt = tally.in_doubt.load(Ordering::SeqCst);
    eprintln!(
        "{} acknowledged, {in_doubt} in doubt ({} outcome unknown)",
        acknowledged,
        tally.unknown.load(Ordering::SeqCst)
    );
    assert_eq!(
        tally.overflows.load(Ordering::SeqCst),
        0,
        "Error::Overflow says nothing was written, and nothing here can overflow"
    );
    assert!(acknowledged > 0, "no increment got through");
    // A cut-off statement may still be running on the server: read until the total settles.
    let mut sync = <A::Sync as TestConnection>::open(url);
    let mut total = Post::likes_of(1).total(&mut sync).unwrap();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let again = Post::likes_of(1).total(&mut sync).unwrap();
        if again == total {
            break;
        }
        total = again;
    }
    assert!(
        (acknowledged..=acknowledged + in_doubt).contains(&total),
        "total {total}: acknowledged {acknowledged}, in doubt {in_doubt}"
    );
}
