//! The async write-behind buffer on every backend, over bb8 and deadpool pools: exact totals
//! after shutdown under 32 concurrent tasks, a COMMIT of unknown outcome counted once, waiting
//! for room without blocking the runtime, and the graceful-shutdown hook.
#![cfg(feature = "async")]

use std::sync::Arc;
use std::time::Duration;

use slotted_core::{AsyncConnectionPool, AsyncCounterBuffer, BufferConfig, Error, WhenFull};
use slotted_tests::asynch::{migrated, AsyncTestConnection};
use slotted_tests::models::{Page, Post};
use slotted_tests::TestConnection;

slotted_tests::async_backend_tests! {
    all: [
        exact_totals_after_shutdown_under_32_tasks_on_bb8_and_deadpool,
        a_commit_of_unknown_outcome_counts_once,
        a_full_buffer_waits_without_blocking_the_runtime,
        the_graceful_shutdown_hook_flushes_then_shutdown_writes_the_rest,
    ],
}

fn quick() -> BufferConfig {
    BufferConfig {
        interval: Duration::from_millis(20),
        flush_at_keys: 64,
        retry_delay: Duration::from_millis(5),
        max_retry_delay: Duration::from_millis(50),
        ..BufferConfig::default()
    }
}

fn slow() -> BufferConfig {
    BufferConfig {
        interval: Duration::from_secs(3600),
        ..quick()
    }
}

/// The test's database, with the flush log, and a sync connection to check it.
async fn setup<A: AsyncTestConnection>(test: &str) -> Option<(slotted_tests::TestDb, A::Sync)> {
    let (db, _conn) = migrated::<A>(test).await?;
    let mut sync = <A::Sync as TestConnection>::open(&db.url);
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut sync,
        slotted_core::CounterMigrations::new().with_buffer(),
    )
    .expect("the flush log migration");
    Some((db, sync))
}

async fn count_with_32_tasks(buffer: Arc<AsyncCounterBuffer>) {
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let buffer = Arc::clone(&buffer);
            tokio::spawn(async move {
                for i in 0..300 {
                    let key = (t * 300 + i) % 30;
                    Post::likes_of(key).increment_buffered(&*buffer).unwrap();
                    Page::views_of(format!("/{key}"))
                        .add_buffered_async(2, &buffer)
                        .await
                        .unwrap();
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    buffer.shutdown().await.expect("a clean shutdown");
}

async fn exact_totals_after_shutdown_under_32_tasks_on_bb8_and_deadpool<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let bb8 = Arc::new(AsyncCounterBuffer::start(A::bb8(&db.url, 3).await, quick()));
    let deadpool = Arc::new(AsyncCounterBuffer::start(A::deadpool(&db.url, 3), quick()));
    tokio::join!(
        count_with_32_tasks(Arc::clone(&bb8)),
        count_with_32_tasks(Arc::clone(&deadpool))
    );
    for buffer in [&bb8, &deadpool] {
        let stats = buffer.stats();
        assert_eq!(stats.adds, 2 * 32 * 300, "{stats:?}");
        assert_eq!(stats.flushed_adds, stats.adds, "{stats:?}");
        assert_eq!(stats.pending_keys, 0, "{stats:?}");
    }
    let keys: Vec<i32> = (0..30).collect();
    let likes = Post::likes_totals(&keys, &mut conn).unwrap();
    for key in keys {
        assert_eq!(likes[&key], 2 * 32 * 300 / 30, "likes of {key}");
        let views = Page::views_of(format!("/{key}")).total(&mut conn).unwrap();
        assert_eq!(views, 2 * 2 * 32 * 300 / 30, "views of {key}");
    }
}

async fn a_commit_of_unknown_outcome_counts_once<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let buffer = AsyncCounterBuffer::start(A::deadpool(&db.url, 2), slow());
    Post::likes_of(1).add_buffered(5, &buffer).unwrap();
    buffer.__lose_commit_outcomes(1);
    assert!(buffer.flush().await.is_err());
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        5,
        "it did commit"
    );
    assert_eq!(
        Post::likes_of(1).pending(&buffer),
        5,
        "in doubt, still held"
    );
    buffer
        .flush()
        .await
        .expect("resolved through the flush log");
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 5, "once");
    assert_eq!(Post::likes_of(1).pending(&buffer), 0);
    assert_eq!(buffer.stats().commits_in_doubt, 1);
    buffer.shutdown().await.unwrap();
}

async fn a_full_buffer_waits_without_blocking_the_runtime<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let config = BufferConfig {
        max_pending_keys: 4,
        when_full: WhenFull::Block(Duration::from_secs(10)),
        ..slow()
    };
    // The database fails every flush until the table is back.
    let rename = |conn: &mut A::Sync, from: &str, to: &str| {
        diesel::connection::SimpleConnection::batch_execute(
            conn,
            &format!("ALTER TABLE {from} RENAME TO {to}"),
        )
        .unwrap()
    };
    rename(&mut conn, "posts_likes_slots", "posts_likes_gone");
    let buffer = Arc::new(AsyncCounterBuffer::start(A::bb8(&db.url, 2).await, config));
    for key in 0..4 {
        Post::likes_of(key).increment_buffered(&*buffer).unwrap();
    }
    let refused = Post::likes_of(4).increment_buffered(&*buffer);
    assert!(
        matches!(refused, Err(Error::BufferFull { .. })),
        "{refused:?}"
    );
    let waiter = {
        let buffer = Arc::clone(&buffer);
        tokio::spawn(async move { Post::likes_of(4).add_buffered_async(1, &buffer).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "waits for room");
    assert!(
        buffer.stats().failed_flushes > 0,
        "the full buffer asked for flushes"
    );
    rename(&mut conn, "posts_likes_gone", "posts_likes_slots");
    waiter
        .await
        .unwrap()
        .expect("taken once the flusher's retry made room");
    buffer.shutdown().await.unwrap();
    assert_eq!(buffer.stats().refusals, 1);
    let total: i64 = Post::likes_totals(&[0, 1, 2, 3, 4], &mut conn)
        .unwrap()
        .values()
        .sum();
    assert_eq!(total, 5);
}

async fn the_graceful_shutdown_hook_flushes_then_shutdown_writes_the_rest<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let buffer = Arc::new(AsyncCounterBuffer::start(A::bb8(&db.url, 2).await, slow()));
    Post::likes_of(1).add_buffered(2, &*buffer).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // As `axum::serve(…).with_graceful_shutdown(hook)` would drive it.
    let hook = tokio::spawn(Arc::clone(&buffer).flush_after(async move {
        let _ = rx.await;
    }));
    tx.send(()).unwrap();
    hook.await.unwrap();
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 2);
    Post::likes_of(1).add_buffered(3, &*buffer).unwrap(); // a request still draining
    buffer.shutdown().await.unwrap();
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 5);
    assert!(matches!(
        Post::likes_of(1).increment_buffered(&*buffer),
        Err(Error::BufferClosed)
    ));
}
