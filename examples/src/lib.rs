//! What the server examples share: a model with counters, and a pooled workload that any
//! backend runs. Each example in `examples/` is a short `main` around it.

pub mod alloc;
pub mod anchors;
pub mod chart;
#[cfg(feature = "async")]
pub mod hold;
pub mod private;
#[cfg(feature = "async")]
pub mod web;

use std::error::Error;
use std::time::Instant;

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_migrations::MigrationHarness;
use slotted_core::{CounterConnection, CounterMigrations, SlottedCounter};

diesel::table! {
    videos (id) {
        id -> BigInt,
        title -> Text,
    }
}

/// A model with an `i64` key and two counters.
#[derive(Debug, diesel::Queryable, diesel::Identifiable, SlottedCounter)]
#[diesel(table_name = videos)]
#[slotted(counter = plays, slots = 32)]
#[slotted(counter = likes, slots = 16)]
pub struct Video {
    /// The primary key.
    pub id: i64,
    /// The title.
    pub title: String,
}

/// `url` with its database replaced by `db` (the URL may list several hosts, and have a query).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = &base[..base
        .rfind('/')
        .filter(|&i| i > base.find("://").map_or(0, |j| j + 2))
        .unwrap_or(base.len())];
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// The boxed error the examples return.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Migrates, then lets `threads` pooled workers each play video 1 `plays_each` times inside
/// transactions that also like it every tenth play, and prints the exact totals.
pub fn pooled_workload<C>(url: &str, threads: usize, plays_each: usize) -> Result<(), BoxError>
where
    C: CounterConnection + R2D2Connection + MigrationHarness<C::Backend> + Send + 'static,
{
    let pool = Pool::builder()
        .max_size(threads as u32)
        .build(ConnectionManager::<C>::new(url))?;
    pool.get()?
        .run_pending_migrations(CounterMigrations::of::<Video>())?;

    let video = Video {
        id: 1,
        title: "Slotted counters explained".into(),
    };
    let before = (
        video.plays().total(&mut pool.get()?)?,
        video.likes().total(&mut pool.get()?)?,
    );

    let started = Instant::now();
    std::thread::scope(|scope| -> Result<(), BoxError> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(), BoxError> {
                    let mut conn = pool.get()?;
                    for play in 0..plays_each {
                        conn.transaction(|conn| {
                            Video::plays_of(1).increment(conn)?;
                            if play % 10 == 0 {
                                Video::likes_of(1).increment(conn)?;
                            }
                            Ok::<_, slotted_core::Error>(())
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "a worker panicked")?)
    })?;
    let elapsed = started.elapsed();

    let mut conn = pool.get()?;
    let plays = video.plays().total(&mut conn)? - before.0;
    let likes = video.likes().total(&mut conn)? - before.1;
    let transactions = threads * plays_each;
    println!(
        "{threads} pooled workers, {transactions} transactions in {elapsed:.2?} ({:.0} tx/s)",
        transactions as f64 / elapsed.as_secs_f64()
    );
    println!("video {}: +{plays} plays, +{likes} likes", video.id);
    assert_eq!(
        plays, transactions as i64,
        "every committed play counted once"
    );
    assert_eq!(likes, (threads * plays_each.div_ceil(10)) as i64);
    let totals = Video::plays_totals(&[1, 2, 3], &mut conn)?;
    println!("plays_totals(&[1, 2, 3]) = {totals:?}");
    Ok(())
}

/// The time now, `2026-11-27 12:03 UTC`, for a benchmark's header (`date -u`).
pub fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "(date unknown)".into())
}
