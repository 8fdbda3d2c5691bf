//! The async write-behind buffer on every backend, over bb8 and deadpool pools: exact totals
//! after shutdown under 32 concurrent tasks, a COMMIT of unknown outcome counted once, waiting
//! for room without blocking the runtime, the graceful-shutdown hook; flushes failing round
//! after round holding one row per key, and a server cut off behind a proxy: reported within
//! an interval, bounded, shut down by the deadline, recovered exactly once.
#![cfg(feature = "async")]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::pooled_connection::{bb8, AsyncDieselConnectionManager};
use slotted_core::{
    buffer::AsyncConnectionPool, buffer::AsyncCounterBuffer, buffer::BufferConfig,
    buffer::WhenFull, Error,
};
use slotted_tests::asynch::{migrated, AsyncTestConnection};
use slotted_tests::models::{Page, Post};
use slotted_tests::TestConnection;

slotted_tests::async_backend_tests! {
    all: [
        exact_totals_after_shutdown_under_32_tasks_on_bb8_and_deadpool,
        a_commit_of_unknown_outcome_counts_once,
        a_full_buffer_waits_without_blocking_the_runtime,
        the_graceful_shutdown_hook_flushes_then_shutdown_writes_the_rest,
        failing_flushes_hold_one_row_per_key,
    ],
    servers: [an_outage_is_reported_bounded_and_written_once_after],
}

#[path = "buffer/outage.rs"]
mod outage;
#[path = "buffer/proxy.rs"]
mod proxy;
use outage::add_each;

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

fn rename<C: diesel::connection::SimpleConnection>(conn: &mut C, from: &str, to: &str) {
    conn.batch_execute(&format!("ALTER TABLE {from} RENAME TO {to}"))
        .unwrap_or_else(|e| panic!("rename {from}: {e}"));
}

/// Flushes fail round after round while adds keep coming to the same keys: the buffer holds
/// one row per key however many rounds failed, and writes each add once after.
async fn failing_flushes_hold_one_row_per_key<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let buffer = AsyncCounterBuffer::start(A::deadpool(&db.url, 2), slow());
    rename(&mut conn, "posts_likes_slots", "posts_likes_gone");
    const KEYS: i32 = 300;
    for round in 1..=8 {
        for key in 0..KEYS {
            Post::likes_of(key).increment_buffered(&buffer).unwrap();
        }
        assert!(buffer.flush().await.is_err(), "the table is gone");
        let stats = buffer.stats();
        assert_eq!(stats.pending_keys, KEYS as usize, "{stats:?}");
        assert!(
            stats.batched_rows <= stats.pending_keys,
            "after {round} failed rounds: {} rows batched for {} keys",
            stats.batched_rows,
            stats.pending_keys
        );
    }
    rename(&mut conn, "posts_likes_gone", "posts_likes_slots");
    buffer.flush().await.unwrap();
    let keys: Vec<i32> = (0..KEYS).collect();
    let totals = Post::likes_totals(&keys, &mut conn).unwrap();
    assert!(keys.iter().all(|k| totals[k] == 8), "{totals:?}");
    buffer.shutdown().await.unwrap();
}

/// Waits (polling observed state, up to `limit`) until `done` holds; false if it never did.
async fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while !done() {
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// A bb8 pool of 2 with bb8's defaults (a 30 s checkout wait) and diesel-async's own
/// manager: the test pools' setup panics on a connection it cannot open.
trait PlainBb8 {
    type Pool: AsyncConnectionPool;
    fn plain_bb8(url: &str) -> impl std::future::Future<Output = Self::Pool> + Send;
}

macro_rules! plain_bb8 {
    ($($feature:literal => $conn:ty, $params:literal),*) => {$(
        #[cfg(feature = $feature)]
        impl PlainBb8 for $conn {
            type Pool = bb8::Pool<$conn>;
            async fn plain_bb8(url: &str) -> Self::Pool {
                let manager = AsyncDieselConnectionManager::<$conn>::new(format!("{url}{}", $params));
                bb8::Pool::builder().max_size(2).build(manager).await.unwrap()
            }
        }
    )*};
}

// mysql_async moves a connection to a local server onto its Unix socket (`prefer_socket`),
// around the proxy: kept on TCP.
plain_bb8!(
    "postgres" => diesel_async::AsyncPgConnection, "",
    "mysql" => diesel_async::AsyncMysqlConnection, "?prefer_socket=false"
);

/// `buffer.rs`'s outage test on the async face, over bb8 with its default 30 s checkout wait:
/// reported within about an interval, one entry per key, the cap, a COMMIT in doubt resolved
/// once, everything written once after; a second outage through `shutdown`, which returns by
/// its deadline and reports what it could not write.
async fn an_outage_is_reported_bounded_and_written_once_after<A>(test: &str)
where
    A: AsyncTestConnection,
    A::Bb8: AsyncConnectionPool,
    A::Deadpool: AsyncConnectionPool,
    A: PlainBb8,
{
    let Some((db, mut conn)) = setup::<A>(test).await else {
        return;
    };
    let proxy = proxy::Proxy::start(&db.url);
    let interval = Duration::from_millis(100);
    let shutdown_timeout = Duration::from_millis(500);
    let config = BufferConfig {
        interval,
        max_pending_keys: 500,
        shutdown_timeout,
        ..quick()
    };
    // bb8 with its defaults (a 30 s checkout wait), without the test pools' setup, which
    // panics on a connection it cannot open.
    let buffer = AsyncCounterBuffer::start(A::plain_bb8(&proxy.url(&db.url)).await, config);
    let mut acked = HashMap::new();
    add_each(&buffer, 0..200, &mut acked);
    let flushed = eventually(Duration::from_secs(10), || {
        buffer.stats().unflushed_adds == 0
    });
    assert!(
        flushed.await,
        "flushed before the outage: {:?}",
        buffer.stats()
    );
    buffer.__lose_commit_outcomes(1);
    add_each(&buffer, 0..200, &mut acked);
    let doubt = eventually(Duration::from_secs(10), || {
        buffer.stats().commits_in_doubt == 1
    });
    assert!(doubt.await);
    proxy.cut();
    let cut_at = Instant::now();
    let before = buffer.stats().failed_flushes;
    let reported = eventually(Duration::from_secs(40), || {
        add_each(&buffer, 0..200, &mut acked);
        let stats = buffer.stats();
        stats.failed_flushes > before && stats.last_error.is_some()
    })
    .await;
    let seen = cut_at.elapsed();
    assert!(reported, "no failure in stats 40 s into the outage");
    assert!(
        seen < Duration::from_secs(3),
        "the outage showed in stats after {seen:?}, interval {interval:?}: {:?}",
        buffer.stats()
    );
    // The cap: new keys up to 500 entries, then refused; held keys always taken.
    outage::fill_to_the_cap(&buffer, &mut acked, || format!("{:?}", buffer.stats()));
    let failed = buffer.stats().failed_flushes;
    let retried = eventually(Duration::from_secs(40), || {
        add_each(&buffer, 0..500, &mut acked);
        let stats = buffer.stats();
        assert_eq!(stats.pending_keys, 500, "{stats:?}");
        assert!(stats.batched_rows <= 500 + 4096, "{stats:?}");
        stats.failed_flushes >= failed + 5
    });
    assert!(retried.await);
    assert!(buffer.stats().refusals >= 1);

    proxy.restore();
    let recovered = eventually(Duration::from_secs(60), || {
        buffer.stats().unflushed_adds == 0
    });
    assert!(
        recovered.await,
        "written after the outage: {:?}",
        buffer.stats()
    );
    let keys: Vec<i32> = (0..500).collect();
    let written = Post::likes_totals(&keys, &mut conn).unwrap();
    for key in &keys {
        assert_eq!(written[key], acked[key], "key {key}: exactly once");
    }

    proxy.cut();
    add_each(&buffer, 0..50, &mut HashMap::new());
    let started = Instant::now();
    let shut = buffer.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < shutdown_timeout + Duration::from_secs(1),
        "shutdown took {took:?}, its timeout {shutdown_timeout:?}"
    );
    match shut {
        Err(Error::BufferUnflushed {
            unflushed_adds: 50,
            pending_keys: 50,
            ref last_error,
            ..
        }) if !last_error.is_empty() => {}
        other => panic!("{other:?}"),
    }
    let after = Post::likes_totals(&keys, &mut conn).unwrap();
    assert_eq!(after, written, "the 50 reported unwritten were not written");
}
