//! slotted on SQLite, with no setup: a Diesel model, the derive, the migrations, eight threads
//! liking one post at once, and the exact total.
//!
//!     cargo run --example quickstart

use std::error::Error;
use std::time::Duration;

use diesel::prelude::*;
use diesel_migrations::MigrationHarness;
use slotted_core::prelude::*;
use slotted_core::sqlite::SqliteSetup;

diesel::table! {
    posts (id) {
        id -> Integer,
        title -> Text,
    }
}

/// An existing Diesel model: two attributes give it two counters.
#[derive(Queryable, Selectable, Identifiable, Insertable, SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16)]
#[slotted(counter = views, slots = 64)]
pub struct Post {
    pub id: i32,
    pub title: String,
}

const THREADS: usize = 8;
const LIKES_PER_THREAD: usize = 250;

fn connect(path: &str) -> Result<SqliteConnection, Box<dyn Error + Send + Sync>> {
    let mut conn = SqliteConnection::establish(path)?;
    // SQLite lets one writer in at a time: with a busy timeout (5 s) the others wait instead of
    // failing with `database is locked`, and WAL lets readers go on beside the writer.
    SqliteSetup::default().apply(&mut conn)?;
    Ok(conn)
}

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let dir = std::env::temp_dir().join(format!("slotted-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("blog.db").to_string_lossy().into_owned();
    let mut conn = connect(&path)?;

    // The application's own schema, then the counter tables slotted generates.
    diesel::sql_query("CREATE TABLE posts (id INTEGER PRIMARY KEY NOT NULL, title TEXT NOT NULL)")
        .execute(&mut conn)?;
    conn.run_pending_migrations(CounterMigrations::of::<Post>())?;

    let post = Post {
        id: 1,
        title: "Slotted counters".into(),
    };
    diesel::insert_into(posts::table)
        .values(&post)
        .execute(&mut conn)?;

    let started = std::time::Instant::now();
    std::thread::scope(|scope| -> Result<(), Box<dyn Error + Send + Sync>> {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let path = &path;
                scope.spawn(move || -> Result<(), Box<dyn Error + Send + Sync>> {
                    let mut conn = connect(path)?;
                    for _ in 0..LIKES_PER_THREAD {
                        Post::likes_of(1).increment(&mut conn)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a worker thread panicked")??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();

    // A view, then an undone like inside a transaction that commits.
    conn.transaction(|conn| {
        post.views().increment(conn)?;
        post.likes().decrement(conn)?;
        post.likes().increment(conn)?;
        Ok::<_, slotted_core::Error>(())
    })?;

    let likes = post.likes().total(&mut conn)?;
    let views = post.views().total(&mut conn)?;
    let rows: i64 = likes_slots_in_use(&mut conn)?;
    println!(
        "{THREADS} threads x {LIKES_PER_THREAD} likes in {:.0?}",
        elapsed.max(Duration::from_millis(1))
    );
    println!(
        "post {} \"{}\": {likes} likes (spread over {rows} slot rows), {views} views",
        post.id, post.title
    );
    assert_eq!(
        likes,
        (THREADS * LIKES_PER_THREAD) as i64,
        "every like is counted exactly once"
    );

    let totals = Post::likes_totals(&[1, 2], &mut conn)?;
    println!(
        "likes_totals(&[1, 2]) = {{1: {}, 2: {}}}",
        totals[&1], totals[&2]
    );

    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The counter table is an ordinary Diesel table, declared by the derive.
fn likes_slots_in_use(conn: &mut SqliteConnection) -> QueryResult<i64> {
    posts_likes_slots::table.count().get_result(conn)
}
