//! The async face on diesel-async connections, on every backend: every call, pools passed as
//! they are, `Send` futures, cancellation, and the slot a connection writes to.
#![cfg(feature = "async")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use diesel_async::pooled_connection::{bb8, deadpool};
use slotted_core::{retry::RetryPolicy, CounterMaintenance};
use slotted_tests::asynch::{migrated, AsyncTestConnection};
use slotted_tests::models::{posts_likes_slots, Event, Page, Post};
use slotted_tests::TestConnection;

slotted_tests::async_backend_tests! {
    all: [
        every_call_counts_exactly,
        maintenance_on_an_async_connection,
        pooled_connections_are_passed_as_they_are,
        retried_transactions_rerun_the_async_closure,
        futures_cut_off_at_any_point_never_count_twice,
        a_rollback_undoes_async_increments,
        roll_ups_beside_a_committing_writer,
    ],
    servers: [
        the_connection_strategy_writes_the_slot_of_the_connection,
        an_increment_rolled_back_by_the_database_runs_again_and_counts_once,
    ],
}

/// Compile-time proof that the futures are `Send`: for every connection type a user passes,
/// pooled ones included, as an axum handler or `tokio::spawn` requires.
macro_rules! futures_are_send {
    ($name:ident, $conn:ty) => {
        #[allow(dead_code)]
        fn $name(
            conn: &mut $conn,
            pooled: &mut bb8::PooledConnection<'static, $conn>,
            object: &mut deadpool::Object<$conn>,
        ) {
            fn send<F: std::future::Future + Send>(_: F) {}
            let post = Post {
                id: 1,
                title: String::new(),
            };
            send(post.likes().increment_async(conn));
            send(post.likes().total_async(pooled));
            send(Post::likes_totals_async(&[1, 2], object));
            send(post.likes().set_async(3, conn));
            send(posts_likes_slots::table.compact_all_async(100, conn));
            send(slotted_core::retry::transaction_with_retry_async(
                conn,
                &RetryPolicy::default(),
                async |conn: &mut $conn| Post::likes_of(1).increment_async(conn).await,
            ));
        }
    };
}
#[cfg(feature = "sqlite")]
futures_are_send!(
    sqlite_futures_are_send,
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>
);
#[cfg(feature = "postgres")]
futures_are_send!(postgres_futures_are_send, diesel_async::AsyncPgConnection);
#[cfg(feature = "mysql")]
futures_are_send!(mysql_futures_are_send, diesel_async::AsyncMysqlConnection);

async fn every_call_counts_exactly<A: AsyncTestConnection>(test: &str) {
    let Some((_db, mut conn)) = migrated::<A>(test).await else {
        return;
    };
    let post = Post {
        id: 7,
        title: "async".into(),
    };
    post.likes().increment_async(&mut conn).await.unwrap();
    post.likes().add_async(5, &mut conn).await.unwrap();
    Post::likes_of(7).decrement_async(&mut conn).await.unwrap();
    post.views().add_async(0, &mut conn).await.unwrap();
    assert_eq!(post.likes().total_async(&mut conn).await.unwrap(), 5);
    assert_eq!(post.views().total_async(&mut conn).await.unwrap(), 0);

    Event::hits_of(1_i64 << 40)
        .add_async(3, &mut conn)
        .await
        .unwrap();
    Page::views_of("https://example.com/ü?q='x'")
        .increment_async(&mut conn)
        .await
        .unwrap();
    let pages = Page::views_totals_async(
        &["https://example.com/ü?q='x'".to_owned(), "none".to_owned()],
        &mut conn,
    )
    .await
    .unwrap();
    assert_eq!(pages["https://example.com/ü?q='x'"], 1);
    assert_eq!(pages["none"], 0);
    assert_eq!(
        Event::hits_of(1_i64 << 40)
            .total_async(&mut conn)
            .await
            .unwrap(),
        3
    );

    let totals = Post::likes_totals_async(&[7, 8, 7], &mut conn)
        .await
        .unwrap();
    assert_eq!(totals, HashMap::from([(7, 5), (8, 0)]));

    let overflow = Post::likes_of(9).add_async(i64::MAX, &mut conn).await;
    assert!(overflow.is_ok());
    let refused = Post::likes_of(9).add_async(i64::MAX, &mut conn).await;
    assert!(
        matches!(refused, Err(slotted_core::Error::Overflow { .. })) || {
            // Another slot took it: the total is past i64 and says so.
            matches!(
                Post::likes_of(9).total_async(&mut conn).await,
                Err(slotted_core::Error::TotalOutOfRange { .. })
            )
        },
        "{refused:?}"
    );

    // What the async face wrote, the sync face reads.
    let mut sync = <A::Sync as TestConnection>::open(&_db.url);
    assert_eq!(Post::likes_of(7).total(&mut sync).unwrap(), 5);
}

async fn maintenance_on_an_async_connection<A: AsyncTestConnection>(test: &str) {
    use slotted_tests::lifecycle::{downloads_daily_slots, Article, Download, Tag};
    let Some((db, mut sync)) = slotted_tests::asynch::lifecycle_db::<A>(test) else {
        return;
    };
    diesel::connection::SimpleConnection::batch_execute(
        &mut sync,
        "INSERT INTO articles (id, likes_count) VALUES (1, 0), (2, 0)",
    )
    .unwrap();
    let mut conn = A::open(&db.url).await;
    // The column becomes the roll-up's on its first roll-up; a stale value after that is
    // corrected.
    Article::likes_of(2)
        .refresh_cache_async(&mut conn)
        .await
        .unwrap();
    diesel::connection::SimpleConnection::batch_execute(
        &mut sync,
        "UPDATE articles SET likes_count = 99 WHERE id = 2",
    )
    .unwrap();

    for _ in 0..40 {
        Article::likes_of(1)
            .increment_async(&mut conn)
            .await
            .unwrap();
    }
    let report = Article::likes_of(1).compact_async(&mut conn).await.unwrap();
    assert_eq!((report.records, report.rows_after), (1, 1), "{report:?}");
    assert_eq!(
        Article::likes_of(1).total_async(&mut conn).await.unwrap(),
        40
    );

    let refreshed = slotted_tests::lifecycle::articles_likes_slots::table
        .refresh_cache_all_async(1, &mut conn)
        .await
        .unwrap();
    assert_eq!((refreshed.updated, refreshed.failed.len()), (2, 0));
    assert_eq!(
        sync.query_i64("SELECT likes_count AS n FROM articles WHERE id = 1"),
        40
    );
    assert_eq!(
        sync.query_i64("SELECT likes_count AS n FROM articles WHERE id = 2"),
        0
    );

    Article::likes_of(1).set_async(7, &mut conn).await.unwrap();
    assert_eq!(
        Article::likes_of(1).total_async(&mut conn).await.unwrap(),
        7
    );
    Article::likes_of(1).reset_async(&mut conn).await.unwrap();
    assert_eq!(
        Article::likes_of(1).total_async(&mut conn).await.unwrap(),
        0
    );

    let day = 86_400;
    let at = |days: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(days * day);
    for d in 100..103 {
        Download::daily_of(5)
            .at(at(d))
            .add_async(d as i64, &mut conn)
            .await
            .unwrap();
    }
    assert_eq!(
        Download::daily_of(5)
            .at(at(101))
            .bucket_total_async(&mut conn)
            .await
            .unwrap(),
        101
    );
    assert_eq!(
        Download::daily_of(5)
            .total_between_async(at(100)..at(102), &mut conn)
            .await
            .unwrap(),
        201
    );
    let folded = downloads_daily_slots::table
        .fold_buckets_before_async(at(102), 10, &mut conn)
        .await
        .unwrap();
    assert_eq!(folded.records, 1, "{folded:?}");
    assert_eq!(
        Download::daily_of(5).total_async(&mut conn).await.unwrap(),
        303
    );
    let deleted = downloads_daily_slots::table
        .delete_buckets_before_async(at(103), 10, &mut conn)
        .await
        .unwrap();
    assert!(deleted >= 2, "{deleted}");
    assert_eq!(
        Download::daily_of(5).total_async(&mut conn).await.unwrap(),
        0
    );

    let created = Tag::uses_of("rust".to_owned())
        .create_slots_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(created, 4);
    Tag::uses_of("rust".to_owned())
        .increment_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        sync.query_i64("SELECT COUNT(*) AS n FROM tags_uses_slots"),
        4,
        "prefill: the increment updated a pre-created row"
    );
}

async fn pooled_connections_are_passed_as_they_are<A: AsyncTestConnection>(test: &str) {
    let Some((db, _conn)) = migrated::<A>(test).await else {
        return;
    };
    let bb8 = A::bb8(&db.url, 4).await;
    let deadpool = A::deadpool(&db.url, 4);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (bb8, deadpool) = (bb8.clone(), deadpool.clone());
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let mut conn = A::bb8_get(&bb8).await;
                Post::likes_of(1).increment_async(&mut conn).await.unwrap();
            } else {
                let mut conn = A::deadpool_get(&deadpool).await;
                Post::likes_of(1).increment_async(&mut conn).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = A::deadpool_get(&deadpool).await;
    assert_eq!(Post::likes_of(1).total_async(&mut conn).await.unwrap(), 16);
}

async fn retried_transactions_rerun_the_async_closure<A: AsyncTestConnection>(test: &str) {
    let Some((_db, mut conn)) = migrated::<A>(test).await else {
        return;
    };
    let mut attempts = 0;
    let done = slotted_core::retry::transaction_with_retry_async(
        &mut conn,
        &RetryPolicy::default(),
        async |conn: &mut A| {
            attempts += 1;
            Post::likes_of(1).increment_async(conn).await?;
            Post::likes_of(2).increment_async(conn).await?;
            if attempts == 1 {
                // A retryable error, as a deadlock victim gets: rolled back, run again.
                return Err(slotted_core::Error::Diesel(
                    diesel::result::Error::DatabaseError(
                        diesel::result::DatabaseErrorKind::SerializationFailure,
                        Box::new("could not serialize access".to_owned()),
                    ),
                ));
            }
            Ok::<_, slotted_core::Error>(attempts)
        },
    )
    .await
    .unwrap();
    assert_eq!((done.value, done.retries), (2, 1));
    let totals = Post::likes_totals_async(&[1, 2], &mut conn).await.unwrap();
    assert_eq!(
        totals,
        HashMap::from([(1, 1), (2, 1)]),
        "the first attempt rolled back"
    );
}

async fn a_rollback_undoes_async_increments<A: AsyncTestConnection>(test: &str) {
    let Some((_db, mut conn)) = migrated::<A>(test).await else {
        return;
    };
    let result = diesel_async::AsyncConnection::transaction(&mut conn, async |conn| {
        Post::likes_of(3).add_async(10, conn).await?;
        Err::<(), _>(slotted_core::Error::Diesel(
            diesel::result::Error::RollbackTransaction,
        ))
    })
    .await;
    assert!(result.is_err());
    assert_eq!(Post::likes_of(3).total_async(&mut conn).await.unwrap(), 0);
}

/// Many tasks, each cut off by a tiny timeout somewhere in its increment (or its whole
/// transaction): no write is counted twice, none acknowledged is lost.
async fn futures_cut_off_at_any_point_never_count_twice<A: AsyncTestConnection>(test: &str) {
    let Some((db, _conn)) = migrated::<A>(test).await else {
        return;
    };
    // bb8, not deadpool: bb8 drops a connection whose transaction was cut off when it comes
    // back to the pool (`has_broken`), so its row locks go with it. deadpool checks a connection
    // only when it is next taken out, and until then the cut-off transaction keeps its locks:
    // here, on the slot rows the next writers wait for.
    let pool = A::bb8(&db.url, 8).await;
    // Open the pool's connections first, so the timeouts cut off counter calls, not connects.
    let mut warm = Vec::new();
    for _ in 0..8 {
        warm.push(A::bb8_get(&pool).await);
    }
    drop(warm);
    let acknowledged = Arc::new(AtomicI64::new(0));
    let cut_off = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..200_u64 {
        let (pool, acknowledged, cut_off) = (pool.clone(), acknowledged.clone(), cut_off.clone());
        tasks.push(tokio::spawn(async move {
            // From well under a round trip to several of them.
            let limit = Duration::from_micros(20 + (i * 97) % 6_000);
            // The pool's wait is not what is cut off: the counter call is, at any point of it.
            let mut conn = A::bb8_get(&pool).await;
            let work = async {
                if i % 3 == 0 {
                    use diesel_async::AsyncConnection;
                    conn.transaction(async |conn| {
                        Post::likes_of(1).add_async(2, conn).await?;
                        Ok::<_, slotted_core::Error>(())
                    })
                    .await
                    .map(|()| 2)
                } else {
                    Post::likes_of(1)
                        .increment_async(&mut conn)
                        .await
                        .map(|()| 1)
                }
            };
            match tokio::time::timeout(limit, work).await {
                Ok(Ok(delta)) => {
                    acknowledged.fetch_add(delta, Ordering::SeqCst);
                }
                Ok(Err(e)) => panic!("a call that ran to its end failed: {e}"),
                Err(_) => {
                    cut_off.fetch_add(if i % 3 == 0 { 2 } else { 1 }, Ordering::SeqCst);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // A cut-off statement may still be running (on the server, or in SQLite's blocking
    // thread): read until the total stops moving.
    let (acknowledged, cut_off) = (
        acknowledged.load(Ordering::SeqCst),
        cut_off.load(Ordering::SeqCst),
    );
    let mut sync = <A::Sync as TestConnection>::open(&db.url);
    let mut total = Post::likes_of(1).total(&mut sync).unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = Post::likes_of(1).total(&mut sync).unwrap();
        if again == total {
            break;
        }
        total = again;
    }
    slotted_tests::assert_counted_once(
        <A::Sync as TestConnection>::NAME,
        acknowledged,
        cut_off,
        total,
    );
    assert!(
        cut_off > 0 && acknowledged > 0,
        "the timeouts cut some calls off, not all"
    );
    // The pool still works: no connection was left inside a half-done transaction. Not on
    // SQLite: diesel-async's SyncConnectionWrapper runs each call on a blocking thread that a
    // cut-off future does not stop, so a cut-off transaction can open after the pool took its
    // connection back, and keep SQLite's write lock until the connection closes. The totals
    // above hold there as well.
    if <A::Sync as TestConnection>::NAME != "sqlite" {
        let mut conn = A::bb8_get(&pool).await;
        Post::likes_of(1).increment_async(&mut conn).await.unwrap();
        assert_eq!(Post::likes_of(1).total(&mut sync).unwrap(), total + 1);
    }
}

/// `strategy = connection`: each live connection holds the smallest writer index free on the
/// database (`0, 1, …`) from its first write on (on PostgreSQL that write goes to its
/// connection's slot: record 2 takes it), whatever task or thread it runs on.
async fn the_connection_strategy_writes_the_slot_of_the_connection<A: AsyncTestConnection>(
    test: &str,
) {
    use slotted_tests::models::Reaction;
    let Some((db, _conn)) = migrated::<A>(test).await else {
        return;
    };
    let mut sync = <A::Sync as TestConnection>::open(&db.url);
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut sync,
        slotted_core::CounterMigrations::of::<Reaction>(),
    )
    .unwrap();
    let mut conns = Vec::new();
    for _ in 0..6 {
        conns.push(A::open(&db.url).await);
    }
    for record in [2, 1, 1, 1] {
        for conn in &mut conns {
            Reaction::hearts_of(record)
                .increment_async(conn)
                .await
                .unwrap();
        }
    }
    let rows = sync.slot_rows("reactions_hearts_slots", 1);
    let found: HashMap<i16, i64> = rows.iter().map(|r| (r.slot, r.count)).collect();
    let expected: HashMap<i16, i64> = (0..6).map(|slot| (slot, 3)).collect();
    assert_eq!(found, expected, "6 live writers: writer indices 0..6");
}

/// Roll-ups read their totals, then write them, each batch in a transaction of its own, while
/// another connection commits increments all the time. On SQLite the transaction takes the
/// write lock first (`BEGIN IMMEDIATE`), as on the sync face: a deferred one failed with
/// `database is locked` whenever the writer committed between the read and the write.
async fn roll_ups_beside_a_committing_writer<A: AsyncTestConnection>(test: &str) {
    use slotted_tests::lifecycle::{articles_likes_slots, Article};
    let Some((db, mut sync)) = slotted_tests::asynch::lifecycle_db::<A>(test) else {
        return;
    };
    diesel::connection::SimpleConnection::batch_execute(
        &mut sync,
        "INSERT INTO articles (id, likes_count) VALUES (1, 0), (2, 0), (3, 0)",
    )
    .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = Arc::new(AtomicI64::new(0));
    let writer = {
        let (url, stop, written) = (db.url.clone(), Arc::clone(&stop), Arc::clone(&written));
        tokio::spawn(async move {
            let mut conn = A::open(&url).await;
            while !stop.load(Ordering::SeqCst) {
                let id = written.load(Ordering::SeqCst) % 3 + 1;
                Article::likes_of(id as i32)
                    .increment_async(&mut conn)
                    .await
                    .unwrap();
                written.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    let mut conn = A::open(&db.url).await;
    for _ in 0..30 {
        articles_likes_slots::table
            .refresh_cache_all_async(1, &mut conn)
            .await
            .expect("a roll-up beside the writer");
    }
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    articles_likes_slots::table
        .refresh_cache_all_async(10, &mut conn)
        .await
        .unwrap();
    let int = if <A::Sync as TestConnection>::NAME == "mysql" {
        "SIGNED"
    } else {
        "BIGINT"
    };
    let cached = <A::Sync as TestConnection>::query_i64(
        &mut sync,
        &format!("SELECT CAST(SUM(likes_count) AS {int}) AS n FROM articles"),
    );
    assert_eq!(
        cached,
        written.load(Ordering::SeqCst),
        "{}",
        <A::Sync as TestConnection>::NAME
    );
}

/// The sync face's interleaving (`slotted_tests::locks::an_increment_meets_a_rollback`), the
/// increment by `increment_async`: its rerun pauses on tokio's timer.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
async fn an_increment_rolled_back_by_the_database_runs_again_and_counts_once<
    A: AsyncTestConnection,
>(
    test: &str,
) {
    let Some((db, mut writer)) = migrated::<A>(test).await else {
        return;
    };
    let runtime = tokio::runtime::Handle::current();
    // The interleaving's threads block: off the runtime's workers.
    tokio::task::block_in_place(|| {
        slotted_tests::locks::an_increment_meets_a_rollback::<A::Sync>(&db.url, |setup| {
            runtime.block_on(async {
                writer
                    .batch_execute(setup)
                    .await
                    .expect("set up the writer");
                Post::likes_of(1).increment_async(&mut writer).await
            })
        })
    });
}
