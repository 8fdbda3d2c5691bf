//! The app counts on PostgreSQL: its own table and the counter's migrations, eight threads of
//! likes, the exact total, and the post read back through `HasQuery`.

use chrono::{DurationRound, TimeDelta, Utc};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_migrations::MigrationHarness;
use slotted_core::CounterMigrations;
use slotted_pg_app::{schema::posts, Post, CREATE_POSTS};

/// This test's own database on the server at `PG_DATABASE_URL`, made afresh, or `None` (skip)
/// when the variable is unset, unless `SLOTTED_REQUIRE_ALL_BACKENDS=1`.
fn fresh_database() -> Option<String> {
    let Ok(url) = std::env::var("PG_DATABASE_URL") else {
        assert!(
            std::env::var("SLOTTED_REQUIRE_ALL_BACKENDS").as_deref() != Ok("1"),
            "PG_DATABASE_URL is unset and SLOTTED_REQUIRE_ALL_BACKENDS=1"
        );
        eprintln!("skipped: PG_DATABASE_URL is unset");
        return None;
    };
    let name = "slotted_pg_app_counts";
    let mut admin = PgConnection::establish(&url).expect("connect to PG_DATABASE_URL");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .and_then(|()| admin.batch_execute(&format!("CREATE DATABASE {name}")))
        .expect("a fresh database");
    let (base, query) = url
        .split_once('?')
        .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
    let base = &base[..base.rfind('/').expect("a database in the URL")];
    Some(match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    })
}

#[test]
fn a_postgres_app_with_timestamptz_models_counts_exactly() {
    let Some(url) = fresh_database() else { return };
    let pool = Pool::builder()
        .max_size(8)
        .build(ConnectionManager::<PgConnection>::new(&url))
        .expect("a pool");
    let mut conn = pool.get().expect("a connection");
    conn.batch_execute(CREATE_POSTS).expect("the app's table");
    conn.run_pending_migrations(CounterMigrations::of::<Post>())
        .expect("the counter's migrations");
    let published = Utc::now()
        .duration_trunc(TimeDelta::microseconds(1))
        .expect("a timestamp");
    let post = Post {
        id: 1,
        title: "hello".into(),
        published,
        updated: None,
    };
    diesel::insert_into(posts::table)
        .values(post.clone())
        .execute(&mut conn)
        .expect("the post");

    std::thread::scope(|s| {
        for _ in 0..8 {
            let (pool, post) = (pool.clone(), post.clone());
            s.spawn(move || {
                let mut conn = pool.get().expect("a connection");
                for _ in 0..50 {
                    post.likes().increment(&mut conn).expect("an increment");
                }
            });
        }
    });
    assert_eq!(post.likes().total(&mut conn).expect("the total"), 400);
    let loaded = Post::query().find(1).first(&mut conn).expect("the post");
    assert_eq!(loaded.published, published);
    assert_eq!(loaded.likes().total(&mut conn).expect("the total"), 400);
}
