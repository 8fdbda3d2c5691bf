//! A forum's schema, cut from Lemmy's: posts with comments and votes, and authors. The counts
//! follow the child tables (`follow`), kept by the triggers the counter migrations create.

use diesel::prelude::*;
use slotted_core::SlottedCounter;

use crate::TestConnection;

diesel::table! {
    forum_posts (id) {
        id -> Integer,
        comments_count -> BigInt,
        community_id -> Nullable<Integer>,
    }
}

diesel::table! {
    communities (id) {
        id -> Integer,
    }
}

diesel::table! {
    authors (id) {
        id -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        post_id -> Nullable<Integer>,
        author_id -> Integer,
        deleted -> Bool,
        removed -> Bool,
        local -> Bool,
    }
}

diesel::table! {
    post_votes (post_id, user_id) {
        post_id -> Integer,
        user_id -> Integer,
        score -> SmallInt,
    }
}

/// A post: its comments that are neither deleted nor removed (rolled up into
/// `comments_count`, the column a feed sorts by), and the sum of its votes.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = forum_posts)]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), filter(not(deleted), not(removed)), cache = comments_count)]
#[slotted(counter = score, slots = 16, follow = post_votes(post_id), sum = score)]
pub struct ForumPost {
    pub id: i32,
}

/// An author: every comment written, and the local ones. Diesel's default table name
/// (`authors`), no `table_name`.
#[derive(Debug, Clone, Queryable, SlottedCounter)]
#[slotted(counter = comments, slots = 4, follow = comments(author_id))]
#[slotted(counter = local_comments, slots = 4, follow = comments(author_id), filter(local))]
pub struct Author {
    pub id: i32,
}

diesel::table! {
    sites (id) {
        id -> Integer,
    }
}

/// The site: one record, 1, that every comment counts for (Lemmy's `site_aggregates`), and the
/// local ones.
#[derive(Debug, Clone, Queryable, SlottedCounter)]
#[diesel(table_name = sites)]
#[slotted(counter = comments, slots = 16, follow = comments, record = 1)]
#[slotted(counter = local_comments, slots = 16, follow = comments, record = 1, filter(local, not(deleted)))]
pub struct Site {
    pub id: i32,
}

/// A community: the comments of its posts that are neither deleted nor removed. A comment names
/// its post, and the post its community (Lemmy's `community_aggregates.comments`): the count
/// passes through `forum_posts`, and follows a post that moves to another community.
#[derive(Debug, Clone, Queryable, SlottedCounter)]
#[diesel(table_name = communities)]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), through = forum_posts(community_id), filter(not(deleted), not(removed)))]
pub struct Community {
    pub id: i32,
}

diesel::table! {
    post_aggregates (post_id) {
        post_id -> Integer,
        comments -> BigInt,
    }
}

/// Lemmy's `post_aggregates`: a post's comments in a column that the application's own trigger
/// kept (one hot row per post), taken over by a follow counter that rolls its totals up into
/// the same column. Not in [`migrations`]: its test runs it alone, after the swap.
#[derive(Debug, Clone, Queryable, SlottedCounter)]
#[diesel(table_name = post_aggregates, primary_key(post_id))]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), cache = comments)]
pub struct PostAggregates {
    pub post_id: i32,
}

/// Every counter of the forum.
pub fn migrations() -> slotted_core::CounterMigrations {
    slotted_core::CounterMigrations::of::<ForumPost>()
        .and::<Author>()
        .and::<Site>()
        .and::<Community>()
}

/// `repair_follow_all` of every counter of [`migrations`], in pages of `batch` records: how many
/// records it repaired in all.
pub fn repair_every_counter<C: slotted_core::CounterConnection>(
    batch: usize,
    conn: &mut C,
) -> slotted_core::Result<u64> {
    use slotted_core::CounterMaintenance;
    Ok([
        forum_posts_comments_slots::table.repair_follow_all(batch, conn)?,
        forum_posts_score_slots::table.repair_follow_all(batch, conn)?,
        authors_comments_slots::table.repair_follow_all(batch, conn)?,
        authors_local_comments_slots::table.repair_follow_all(batch, conn)?,
        sites_comments_slots::table.repair_follow_all(batch, conn)?,
        sites_local_comments_slots::table.repair_follow_all(batch, conn)?,
        communities_comments_slots::table.repair_follow_all(batch, conn)?,
    ]
    .iter()
    .map(|report| report.repaired)
    .sum())
}

/// The forum's own tables, as the application's migrations would create them.
pub fn create_tables<C: TestConnection>(conn: &mut C) {
    conn.batch_execute(&tables_sql(C::NAME))
        .expect("the forum's tables");
}

/// A child table's id column on `backend`: a `BIGINT` primary key the database numbers.
pub fn id_column(backend: &str) -> &'static str {
    match backend {
        "postgres" => "BIGSERIAL PRIMARY KEY",
        "mysql" => "BIGINT AUTO_INCREMENT PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    }
}

/// The `CREATE TABLE`s of [`create_tables`] on `backend` (`sqlite`, `postgres`, `mysql`), as an
/// application's own migration (`up.sql`) holds them.
pub fn tables_sql(backend: &str) -> String {
    let id = id_column(backend);
    format!(
        "CREATE TABLE forum_posts (
             id INTEGER PRIMARY KEY,
             comments_count BIGINT NOT NULL DEFAULT 0,
             community_id INTEGER
         );
         CREATE TABLE communities (id INTEGER PRIMARY KEY);
         CREATE TABLE sites (id INTEGER PRIMARY KEY);
         CREATE TABLE authors (id INTEGER PRIMARY KEY);
         CREATE TABLE comments (
             id {id},
             post_id INTEGER,
             author_id INTEGER NOT NULL,
             deleted BOOLEAN NOT NULL DEFAULT FALSE,
             removed BOOLEAN NOT NULL DEFAULT FALSE,
             local BOOLEAN NOT NULL DEFAULT TRUE
         );
         CREATE TABLE post_votes (
             post_id INTEGER NOT NULL,
             user_id INTEGER NOT NULL,
             score SMALLINT NOT NULL,
             PRIMARY KEY (post_id, user_id)
         );
         CREATE INDEX comments_post_id ON comments (post_id);
         CREATE INDEX comments_author_id ON comments (author_id);\n"
    )
}

/// How many of slotted's follow triggers the database holds (`slotted_follow…`, on any table).
pub fn follow_triggers<C: TestConnection>(conn: &mut C) -> i64 {
    follow_triggers_named(conn, "slotted_follow")
}

/// How many triggers whose names start with `prefix` the database holds, on any table.
pub fn follow_triggers_named<C: TestConnection>(conn: &mut C, prefix: &str) -> i64 {
    conn.query_i64(&match C::NAME {
        "postgres" => {
            format!("SELECT COUNT(*) AS n FROM pg_trigger WHERE starts_with(tgname, '{prefix}')")
        }
        "mysql" => format!(
            "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM information_schema.triggers \
             WHERE trigger_schema = DATABASE() AND LEFT(trigger_name, {len}) = '{prefix}'",
            len = prefix.len()
        ),
        _ => format!(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'trigger' \
             AND substr(name, 1, {len}) = '{prefix}'",
            len = prefix.len()
        ),
    })
}
