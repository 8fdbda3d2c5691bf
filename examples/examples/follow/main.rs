//! Counters that follow a child table (issue 40), measured: a forum cut from Lemmy's schema, 32
//! writers each posting a comment on one of 5 hot posts in a transaction that holds 2 ms more,
//! counted four ways in one run, rounds rotated:
//!
//! - `follow`: the library's counters, `#[derive(SlottedCounter)]` with `follow =
//!   comments(post_id)` (the post), `follow = comments(author_id)` (the author), `follow =
//!   comments(post_id), through = posts(community_id)` (the community) and `follow = comments,
//!   record = 1` (the site), 32 slots each, migrated with `CounterMigrations`: the triggers are
//!   the library's own;
//! - `hot-row`: Lemmy's shape, a hand-written row trigger that runs `UPDATE post_aggregates SET
//!   comments = comments + 1 …` and the same on the author's, the community's and the site's
//!   aggregate row;
//! - `private`: a hand-written row trigger upserting rows private to each client (keyed by
//!   `pg_backend_pid()` / `CONNECTION_ID()`): the ceiling of counting in a trigger;
//! - `none`: no trigger (and, on PostgreSQL when `pgbench` is installed, the same `none`
//!   transaction run by pgbench: the raw client's anchor).
//!
//! Every counting mode counts the same four things per comment: its author, its post, its
//! post's community (the three while the comment is neither `deleted` nor `removed`) and the
//! site (while it is `local`), as the measurement did. The library counts the community
//! `through = posts(community_id)`, and so reads the post with a share lock (a post moved
//! meanwhile would otherwise take its comments' count wrong); the anchors read the post's
//! community plainly, as Lemmy's trigger does, and handle no move.
//!
//! Between modes the triggers are dropped and created (each mode's DDL in its own function:
//! `install`, `remove_all`) and the tables emptied. After every run the counts must be exact, or
//! the program fails: `follow`'s totals per post, per author and of the site equal `COUNT(*)` over
//! `comments`; the anchors' own rows sum to the same; every mode's `COUNT(*)` equals the
//! transactions the writers committed.
//!
//! Then a bulk `INSERT … SELECT` of `--bulk-rows` comments (one statement, one session) with
//! `follow`, `hot-row` and `none`: seconds each, checked the same way. Then the follow counters
//! installed on a table of `--install-rows` comments while writers post, with the locked and the
//! online backfill (`install.rs`).
//!
//!     cargo run --release --example follow --features postgres,mysql -- --backend postgres
//!     cargo run --release --example follow --features postgres,mysql -- --backend mysql
//!     cargo run --example follow --features postgres,mysql -- --smoke
//!
//! Options: `--backend postgres|mysql` (default: both), `--seconds 12` (per run), `--rounds 3`,
//! `--writers 32`, `--bulk-rows 100000`, `--bulk-rounds 1`, `--bulk-timeout 300` (seconds; a
//! statement that takes longer is cancelled and reported as such), `--install-rows 1000000`,
//! `--install-writers 8`, `--parts throughput,bulk,install` (which parts to run), `--no-out`
//! (print only), `--smoke` (0.3 s per run, 1 round, 1,000 bulk rows, 2,000 install rows,
//! nothing saved: for CI). Results go to `docs/bench/follow-<backend>.txt` (a run of some parts
//! only: `follow-<parts>-<backend>.txt`). Uses `PG_DATABASE_URL` / `MYSQL_DATABASE_URL`, in a
//! database of its own (`slotted_bench_follow`, or `…_smoke`) that it creates and drops.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_migrations::MigrationHarness;
use rand::RngExt;
use slotted_core::{CounterMigrations, SlottedCounter};
use slotted_examples::{with_database, BoxError};

mod install;

diesel::table! {
    sites (id) {
        id -> Integer,
    }
}

diesel::table! {
    users (id) {
        id -> Integer,
    }
}

diesel::table! {
    posts (id) {
        id -> Integer,
        community_id -> Integer,
    }
}

diesel::table! {
    communities (id) {
        id -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        post_id -> Integer,
        author_id -> Integer,
        deleted -> Bool,
        removed -> Bool,
        local -> Bool,
    }
}

/// A post: its comments that are neither deleted nor removed (Lemmy's `post_aggregates.comments`).
#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = comments, slots = 32, follow = comments(post_id), filter(not(deleted), not(removed)))]
pub struct Post {
    #[allow(dead_code)] // the key the derive reads; this program counts by key alone
    pub id: i32,
}

/// An author: the same comments, by author (`person_aggregates.comment_count`).
#[derive(SlottedCounter)]
#[diesel(table_name = users)]
#[slotted(counter = comments, slots = 32, follow = comments(author_id), filter(not(deleted), not(removed)))]
pub struct User {
    #[allow(dead_code)]
    pub id: i32,
}

/// A community: the comments of its posts (`community_aggregates.comments`), through the post.
#[derive(SlottedCounter)]
#[diesel(table_name = communities)]
#[slotted(counter = comments, slots = 32, follow = comments(post_id), through = posts(community_id), filter(not(deleted), not(removed)))]
pub struct Community {
    #[allow(dead_code)]
    pub id: i32,
}

/// The site: one record, 1, that every local comment counts for (`site_aggregates.comments`).
#[derive(SlottedCounter)]
#[diesel(table_name = sites)]
#[slotted(counter = comments, slots = 32, follow = comments, record = 1, filter(local))]
pub struct Site {
    #[allow(dead_code)]
    pub id: i32,
}

fn migrations() -> CounterMigrations {
    CounterMigrations::of::<Post>()
        .and::<User>()
        .and::<Community>()
        .and::<Site>()
}

const HOT_POSTS: i32 = 5;
const POSTS: i32 = 1_000;
const USERS: i32 = 1_000;
const COMMUNITIES: i32 = 10;
const HOLD: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Follow,
    HotRow,
    Private,
    None,
    /// `none`, run by pgbench (PostgreSQL only).
    PgbenchNone,
    /// `none`, run by a raw libmariadb client, a thread per connection (MariaDB only).
    RawNone,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Follow => "follow",
            Mode::HotRow => "hot-row",
            Mode::Private => "private",
            Mode::None => "none",
            Mode::PgbenchNone => "none (pgbench)",
            Mode::RawNone => "none (libmariadb)",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The backends.

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Pair {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    k: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Words {
    #[diesel(sql_type = diesel::sql_types::Text)]
    t: String,
}

/// What differs per backend: the schema, the anchors' triggers, the bulk statement.
trait Server:
    slotted_core::CounterConnection
    + MigrationHarness<<Self as Connection>::Backend>
    + SimpleConnection
    + Sized
    + 'static
{
    const NAME: &'static str;
    const TITLE: &'static str;
    /// `SIGNED` on MySQL, `BIGINT` on PostgreSQL.
    const INT: &'static str;
    const URL_VARIABLE: &'static str;
    /// The forum's tables, the anchors' tables and the parents' rows.
    const SCHEMA: &'static str;
    /// Empties the comments and every anchor's rows, and recreates the aggregate rows at 0.
    const RESET: &'static str;
    /// A statement of its own after [`Server::RESET`] (PostgreSQL: `VACUUM ANALYZE`, which no
    /// transaction may hold), or empty.
    const AFTER_RESET: &'static str;
    const HOT_ROW_UP: &'static str;
    const PRIVATE_UP: &'static str;
    /// Drops both anchors' triggers (and functions), if there.
    const ANCHORS_DOWN: &'static str;
    const VERSION: &'static str;

    fn number(&mut self, sql: &str) -> Result<i64, BoxError>;
    fn pairs(&mut self, sql: &str) -> Result<BTreeMap<i64, i64>, BoxError>;
    fn words(&mut self, sql: &str) -> Result<String, BoxError>;
    /// The writers' statement: one comment, through Diesel's query builder (prepared once per
    /// connection).
    fn insert_comment(&mut self, post: i32, author: i32) -> QueryResult<usize>;
    /// `INSERT … SELECT` of `rows` comments on the hot posts, one statement.
    fn bulk_sql(rows: u64) -> String;
    /// An `INSERT … SELECT` of `rows` comments over every post and user, one in 10 not local,
    /// one in 17 deleted: the table a counter is installed on.
    fn spread_sql(rows: u64) -> String;
    /// Cancels this session's statements after `seconds` (0: never).
    fn statement_timeout(&mut self, seconds: u64) -> Result<(), BoxError>;
    /// Whether `e` is the cancellation of [`Server::statement_timeout`].
    fn is_timeout(e: &diesel::result::Error) -> bool;
}

macro_rules! common {
    () => {
        fn number(&mut self, sql: &str) -> Result<i64, BoxError> {
            Ok(diesel::sql_query(sql).get_result::<Number>(self)?.n)
        }

        fn pairs(&mut self, sql: &str) -> Result<BTreeMap<i64, i64>, BoxError> {
            Ok(diesel::sql_query(sql)
                .load::<Pair>(self)?
                .into_iter()
                .map(|p| (p.k, p.n))
                .collect())
        }

        fn words(&mut self, sql: &str) -> Result<String, BoxError> {
            Ok(diesel::sql_query(sql).get_result::<Words>(self)?.t)
        }

        fn insert_comment(&mut self, post: i32, author: i32) -> QueryResult<usize> {
            diesel::insert_into(comments::table)
                .values((
                    comments::post_id.eq(post),
                    comments::author_id.eq(author),
                    comments::local.eq(true),
                ))
                .execute(self)
        }
    };
}

#[cfg(feature = "postgres")]
impl Server for diesel::PgConnection {
    const NAME: &'static str = "postgres";
    const TITLE: &'static str = "PostgreSQL";
    const INT: &'static str = "BIGINT";
    const URL_VARIABLE: &'static str = "PG_DATABASE_URL";
    const VERSION: &'static str = "SELECT version() AS t";
    const SCHEMA: &'static str = "
        CREATE TABLE sites (id INTEGER PRIMARY KEY);
        CREATE TABLE communities (id INTEGER PRIMARY KEY);
        CREATE TABLE users (id INTEGER PRIMARY KEY);
        CREATE TABLE posts (id INTEGER PRIMARY KEY, community_id INTEGER NOT NULL REFERENCES communities);
        CREATE TABLE comments (
            id BIGSERIAL PRIMARY KEY,
            post_id INTEGER NOT NULL REFERENCES posts,
            author_id INTEGER NOT NULL REFERENCES users,
            deleted BOOLEAN NOT NULL DEFAULT false,
            removed BOOLEAN NOT NULL DEFAULT false,
            local BOOLEAN NOT NULL DEFAULT true
        );
        CREATE INDEX comments_post_id ON comments (post_id);
        CREATE INDEX comments_author_id ON comments (author_id);
        CREATE TABLE post_aggregates (post_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);
        CREATE TABLE person_aggregates (person_id INTEGER PRIMARY KEY, comment_count BIGINT NOT NULL DEFAULT 0);
        CREATE TABLE site_aggregates (site_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);
        CREATE TABLE community_aggregates (community_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);
        CREATE TABLE private_post_comments (record_id INTEGER NOT NULL, writer INTEGER NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer));
        CREATE TABLE private_community_comments (record_id INTEGER NOT NULL, writer INTEGER NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer));
        CREATE TABLE private_person_comments (record_id INTEGER NOT NULL, writer INTEGER NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer));
        CREATE TABLE private_site_comments (record_id INTEGER NOT NULL, writer INTEGER NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer));
        INSERT INTO sites VALUES (1);
        INSERT INTO communities SELECT g FROM generate_series(1, 10) g;
        INSERT INTO users SELECT g FROM generate_series(1, 1000) g;
        INSERT INTO posts SELECT g, 1 + g % 10 FROM generate_series(1, 1000) g;
    ";
    const RESET: &'static str = "
        TRUNCATE comments RESTART IDENTITY;
        TRUNCATE post_aggregates, person_aggregates, site_aggregates, community_aggregates,
                 private_post_comments, private_person_comments, private_site_comments,
                 private_community_comments;
        INSERT INTO post_aggregates (post_id) SELECT id FROM posts;
        INSERT INTO community_aggregates (community_id) SELECT id FROM communities;
        INSERT INTO person_aggregates (person_id) SELECT id FROM users;
        INSERT INTO site_aggregates (site_id) VALUES (1);
    ";
    const AFTER_RESET: &'static str =
        "VACUUM ANALYZE comments, post_aggregates, person_aggregates, site_aggregates, community_aggregates";
    // docs/bench/follow-prototype/pg/hotrow-up.sql, with the follow counters' filters.
    const HOT_ROW_UP: &'static str = "
        CREATE FUNCTION hotrow_comment_count() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE d integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; r comments;
        BEGIN
            IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
            IF NOT r.deleted AND NOT r.removed THEN
                UPDATE person_aggregates SET comment_count = comment_count + d WHERE person_id = r.author_id;
                UPDATE post_aggregates SET comments = comments + d WHERE post_id = r.post_id;
                UPDATE community_aggregates SET comments = comments + d
                    WHERE community_id = (SELECT community_id FROM posts WHERE id = r.post_id);
            END IF;
            IF r.local THEN
                UPDATE site_aggregates SET comments = comments + d WHERE site_id = 1;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER hotrow_comment_count AFTER INSERT OR DELETE ON comments
            FOR EACH ROW EXECUTE FUNCTION hotrow_comment_count();
    ";
    const PRIVATE_UP: &'static str = "
        CREATE FUNCTION private_comment_count() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE d integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; r comments;
                w integer := pg_backend_pid();
        BEGIN
            IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
            IF NOT r.deleted AND NOT r.removed THEN
                INSERT INTO private_person_comments VALUES (r.author_id, w, d) ON CONFLICT (record_id, writer)
                    DO UPDATE SET count = private_person_comments.count + excluded.count;
                INSERT INTO private_post_comments VALUES (r.post_id, w, d) ON CONFLICT (record_id, writer)
                    DO UPDATE SET count = private_post_comments.count + excluded.count;
                INSERT INTO private_community_comments
                    SELECT community_id, w, d FROM posts WHERE id = r.post_id ON CONFLICT (record_id, writer)
                    DO UPDATE SET count = private_community_comments.count + excluded.count;
            END IF;
            IF r.local THEN
                INSERT INTO private_site_comments VALUES (1, w, d) ON CONFLICT (record_id, writer)
                    DO UPDATE SET count = private_site_comments.count + excluded.count;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER private_comment_count AFTER INSERT OR DELETE ON comments
            FOR EACH ROW EXECUTE FUNCTION private_comment_count();
    ";
    const ANCHORS_DOWN: &'static str = "
        DROP TRIGGER IF EXISTS hotrow_comment_count ON comments;
        DROP FUNCTION IF EXISTS hotrow_comment_count();
        DROP TRIGGER IF EXISTS private_comment_count ON comments;
        DROP FUNCTION IF EXISTS private_comment_count();
    ";

    common!();

    fn bulk_sql(rows: u64) -> String {
        format!(
            "INSERT INTO comments (post_id, author_id, local) \
             SELECT 1 + g % {HOT_POSTS}, 1 + g % {USERS}, true FROM generate_series(1, {rows}) g"
        )
    }

    fn spread_sql(rows: u64) -> String {
        format!(
            "INSERT INTO comments (post_id, author_id, local, deleted) \
             SELECT 1 + g % {POSTS}, 1 + (g * 7) % {USERS}, g % 10 <> 0, g % 17 = 0 \
             FROM generate_series(1, {rows}) g"
        )
    }

    fn statement_timeout(&mut self, seconds: u64) -> Result<(), BoxError> {
        Ok(self.batch_execute(&format!("SET statement_timeout = '{seconds}s'"))?)
    }

    fn is_timeout(e: &diesel::result::Error) -> bool {
        e.to_string().contains("statement timeout")
    }
}

#[cfg(feature = "mysql")]
impl Server for diesel::MysqlConnection {
    const NAME: &'static str = "mysql";
    const TITLE: &'static str = "MariaDB";
    const INT: &'static str = "SIGNED";
    const URL_VARIABLE: &'static str = "MYSQL_DATABASE_URL";
    const VERSION: &'static str = "SELECT VERSION() AS t";
    const SCHEMA: &'static str = "
        CREATE TABLE sites (id INT PRIMARY KEY) ENGINE=InnoDB;
        CREATE TABLE communities (id INT PRIMARY KEY) ENGINE=InnoDB;
        CREATE TABLE users (id INT PRIMARY KEY) ENGINE=InnoDB;
        CREATE TABLE posts (id INT PRIMARY KEY, community_id INT NOT NULL,
            FOREIGN KEY (community_id) REFERENCES communities (id)) ENGINE=InnoDB;
        CREATE TABLE comments (
            id BIGINT AUTO_INCREMENT PRIMARY KEY,
            post_id INT NOT NULL, author_id INT NOT NULL,
            deleted BOOLEAN NOT NULL DEFAULT FALSE, removed BOOLEAN NOT NULL DEFAULT FALSE,
            local BOOLEAN NOT NULL DEFAULT TRUE,
            FOREIGN KEY (post_id) REFERENCES posts (id), FOREIGN KEY (author_id) REFERENCES users (id)
        ) ENGINE=InnoDB;
        CREATE TABLE post_aggregates (post_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
        CREATE TABLE person_aggregates (person_id INT PRIMARY KEY, comment_count BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
        CREATE TABLE site_aggregates (site_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
        CREATE TABLE community_aggregates (community_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
        CREATE TABLE private_community_comments (record_id INT NOT NULL, writer INT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer)) ENGINE=InnoDB;
        CREATE TABLE private_post_comments (record_id INT NOT NULL, writer INT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer)) ENGINE=InnoDB;
        CREATE TABLE private_person_comments (record_id INT NOT NULL, writer INT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer)) ENGINE=InnoDB;
        CREATE TABLE private_site_comments (record_id INT NOT NULL, writer INT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, writer)) ENGINE=InnoDB;
        INSERT INTO sites VALUES (1);
        INSERT INTO communities SELECT seq FROM seq_1_to_10;
        INSERT INTO users SELECT seq FROM seq_1_to_1000;
        INSERT INTO posts SELECT seq, 1 + seq % 10 FROM seq_1_to_1000;
    ";
    const RESET: &'static str = "
        TRUNCATE comments;
        TRUNCATE post_aggregates; TRUNCATE person_aggregates; TRUNCATE site_aggregates;
        TRUNCATE community_aggregates; TRUNCATE private_community_comments;
        TRUNCATE private_post_comments; TRUNCATE private_person_comments; TRUNCATE private_site_comments;
        INSERT INTO post_aggregates (post_id) SELECT id FROM posts;
        INSERT INTO community_aggregates (community_id) SELECT id FROM communities;
        INSERT INTO person_aggregates (person_id) SELECT id FROM users;
        INSERT INTO site_aggregates (site_id) VALUES (1);
    ";
    const AFTER_RESET: &'static str = "";
    // docs/bench/follow-prototype/mariadb/hotrow-up.sql, with the follow counters' filters.
    const HOT_ROW_UP: &'static str = "
        CREATE TRIGGER hotrow_comment_insert AFTER INSERT ON comments FOR EACH ROW
        BEGIN
            IF NOT NEW.deleted AND NOT NEW.removed THEN
                UPDATE person_aggregates SET comment_count = comment_count + 1 WHERE person_id = NEW.author_id;
                UPDATE post_aggregates SET comments = comments + 1 WHERE post_id = NEW.post_id;
                UPDATE community_aggregates SET comments = comments + 1
                    WHERE community_id = (SELECT community_id FROM posts WHERE id = NEW.post_id);
            END IF;
            IF NEW.local THEN
                UPDATE site_aggregates SET comments = comments + 1 WHERE site_id = 1;
            END IF;
        END;
        CREATE TRIGGER hotrow_comment_delete AFTER DELETE ON comments FOR EACH ROW
        BEGIN
            IF NOT OLD.deleted AND NOT OLD.removed THEN
                UPDATE person_aggregates SET comment_count = comment_count - 1 WHERE person_id = OLD.author_id;
                UPDATE post_aggregates SET comments = comments - 1 WHERE post_id = OLD.post_id;
                UPDATE community_aggregates SET comments = comments - 1
                    WHERE community_id = (SELECT community_id FROM posts WHERE id = OLD.post_id);
            END IF;
            IF OLD.local THEN
                UPDATE site_aggregates SET comments = comments - 1 WHERE site_id = 1;
            END IF;
        END;
    ";
    const PRIVATE_UP: &'static str = "
        CREATE TRIGGER private_comment_insert AFTER INSERT ON comments FOR EACH ROW
        BEGIN
            IF NOT NEW.deleted AND NOT NEW.removed THEN
                INSERT INTO private_person_comments VALUES (NEW.author_id, CONNECTION_ID(), 1)
                    ON DUPLICATE KEY UPDATE count = count + 1;
                INSERT INTO private_post_comments VALUES (NEW.post_id, CONNECTION_ID(), 1)
                    ON DUPLICATE KEY UPDATE count = count + 1;
                INSERT INTO private_community_comments
                    SELECT community_id, CONNECTION_ID(), 1 FROM posts WHERE id = NEW.post_id
                    ON DUPLICATE KEY UPDATE private_community_comments.count = private_community_comments.count + 1;
            END IF;
            IF NEW.local THEN
                INSERT INTO private_site_comments VALUES (1, CONNECTION_ID(), 1)
                    ON DUPLICATE KEY UPDATE count = count + 1;
            END IF;
        END;
        CREATE TRIGGER private_comment_delete AFTER DELETE ON comments FOR EACH ROW
        BEGIN
            IF NOT OLD.deleted AND NOT OLD.removed THEN
                INSERT INTO private_person_comments VALUES (OLD.author_id, CONNECTION_ID(), -1)
                    ON DUPLICATE KEY UPDATE count = count - 1;
                INSERT INTO private_post_comments VALUES (OLD.post_id, CONNECTION_ID(), -1)
                    ON DUPLICATE KEY UPDATE count = count - 1;
                INSERT INTO private_community_comments
                    SELECT community_id, CONNECTION_ID(), -1 FROM posts WHERE id = OLD.post_id
                    ON DUPLICATE KEY UPDATE private_community_comments.count = private_community_comments.count - 1;
            END IF;
            IF OLD.local THEN
                INSERT INTO private_site_comments VALUES (1, CONNECTION_ID(), -1)
                    ON DUPLICATE KEY UPDATE count = count - 1;
            END IF;
        END;
    ";
    const ANCHORS_DOWN: &'static str = "
        DROP TRIGGER IF EXISTS hotrow_comment_insert;
        DROP TRIGGER IF EXISTS hotrow_comment_delete;
        DROP TRIGGER IF EXISTS private_comment_insert;
        DROP TRIGGER IF EXISTS private_comment_delete;
    ";

    common!();

    fn bulk_sql(rows: u64) -> String {
        format!(
            "INSERT INTO comments (post_id, author_id, local) \
             SELECT 1 + seq % {HOT_POSTS}, 1 + seq % {USERS}, TRUE FROM seq_1_to_{rows}"
        )
    }

    fn spread_sql(rows: u64) -> String {
        format!(
            "INSERT INTO comments (post_id, author_id, local, deleted) \
             SELECT 1 + seq % {POSTS}, 1 + (seq * 7) % {USERS}, seq % 10 <> 0, seq % 17 = 0 \
             FROM seq_1_to_{rows}"
        )
    }

    fn statement_timeout(&mut self, seconds: u64) -> Result<(), BoxError> {
        Ok(self.batch_execute(&format!("SET SESSION max_statement_time = {seconds}"))?)
    }

    fn is_timeout(e: &diesel::result::Error) -> bool {
        e.to_string().contains("max_statement_time")
    }
}

// ---------------------------------------------------------------------------------------------
// Each mode's DDL.

/// Drops every mode's triggers: the library's (by reverting its migrations, which also drops the
/// counter tables) and the anchors'.
fn remove_all<C: Server>(conn: &mut C) -> Result<(), BoxError> {
    conn.revert_all_migrations(migrations())?;
    conn.batch_execute(C::ANCHORS_DOWN)?;
    Ok(())
}

/// Creates `mode`'s triggers, on an empty `comments`.
fn install<C: Server>(conn: &mut C, mode: Mode) -> Result<(), BoxError> {
    match mode {
        Mode::Follow => {
            conn.run_pending_migrations(migrations())?;
        }
        Mode::HotRow => conn.batch_execute(C::HOT_ROW_UP)?,
        Mode::Private => conn.batch_execute(C::PRIVATE_UP)?,
        Mode::None | Mode::PgbenchNone | Mode::RawNone => {}
    }
    Ok(())
}

fn prepare_mode<C: Server>(conn: &mut C, mode: Mode) -> Result<(), BoxError> {
    remove_all(conn)?;
    conn.batch_execute(C::RESET)?;
    if !C::AFTER_RESET.is_empty() {
        conn.batch_execute(C::AFTER_RESET)?;
    }
    install(conn, mode)
}

// ---------------------------------------------------------------------------------------------
// Exactness.

/// What each counter must hold: `COUNT(*)`s over `comments`, zeros left out.
struct Expected {
    rows: i64,
    posts: BTreeMap<i64, i64>,
    authors: BTreeMap<i64, i64>,
    communities: BTreeMap<i64, i64>,
    site: i64,
}

fn expected<C: Server>(conn: &mut C) -> Result<Expected, BoxError> {
    let int = C::INT;
    let counted = "NOT deleted AND NOT removed";
    Ok(Expected {
        rows: conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments"
        ))?,
        posts: conn.pairs(&format!(
            "SELECT CAST(post_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
             WHERE {counted} GROUP BY post_id"
        ))?,
        authors: conn.pairs(&format!(
            "SELECT CAST(author_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
             WHERE {counted} GROUP BY author_id"
        ))?,
        communities: conn.pairs(&format!(
            "SELECT CAST(p.community_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n \
             FROM comments c JOIN posts p ON p.id = c.post_id \
             WHERE NOT c.deleted AND NOT c.removed GROUP BY p.community_id"
        ))?,
        site: conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments WHERE local"
        ))?,
    })
}

fn nonzero<K: Into<i64>>(map: impl IntoIterator<Item = (K, i64)>) -> BTreeMap<i64, i64> {
    map.into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(k, n)| (k.into(), n))
        .collect()
}

/// Checks `mode`'s counts against `comments` and its `COUNT(*)` against `committed` (when
/// known). Returns a line for the report; an error when anything is off.
fn check<C: Server>(
    conn: &mut C,
    mode: Mode,
    committed: Option<(u64, u64)>,
) -> Result<String, BoxError> {
    let want = expected(conn)?;
    if let Some((low, high)) = committed {
        let rows = want.rows as u64;
        if rows < low || rows > high {
            return Err(format!(
                "{}, {}: {} comments in the table, but the writers committed {low}{}",
                C::NAME,
                mode.name(),
                rows,
                if high > low {
                    format!(" to {high}")
                } else {
                    String::new()
                }
            )
            .into());
        }
    }
    let int = C::INT;
    let (posts, authors, communities, site) = match mode {
        Mode::None | Mode::PgbenchNone | Mode::RawNone => return Ok(format!("{} rows", want.rows)),
        Mode::Follow => {
            let post_ids: Vec<i32> = (1..=POSTS).collect();
            let user_ids: Vec<i32> = (1..=USERS).collect();
            let community_ids: Vec<i32> = (1..=COMMUNITIES).collect();
            (
                nonzero(Post::comments_totals(&post_ids, conn)?),
                nonzero(User::comments_totals(&user_ids, conn)?),
                nonzero(Community::comments_totals(&community_ids, conn)?),
                Site::comments_of(1).total(conn)?,
            )
        }
        Mode::HotRow => (
            conn.pairs(&format!(
                "SELECT CAST(post_id AS {int}) AS k, CAST(comments AS {int}) AS n \
                 FROM post_aggregates WHERE comments <> 0"
            ))?,
            conn.pairs(&format!(
                "SELECT CAST(person_id AS {int}) AS k, CAST(comment_count AS {int}) AS n \
                 FROM person_aggregates WHERE comment_count <> 0"
            ))?,
            conn.pairs(&format!(
                "SELECT CAST(community_id AS {int}) AS k, CAST(comments AS {int}) AS n \
                 FROM community_aggregates WHERE comments <> 0"
            ))?,
            conn.number(&format!(
                "SELECT CAST(comments AS {int}) AS n FROM site_aggregates WHERE site_id = 1"
            ))?,
        ),
        Mode::Private => {
            let sums = |table: &str| {
                format!(
                    "SELECT CAST(record_id AS {int}) AS k, CAST(SUM(count) AS {int}) AS n \
                     FROM {table} GROUP BY record_id HAVING SUM(count) <> 0"
                )
            };
            (
                conn.pairs(&sums("private_post_comments"))?,
                conn.pairs(&sums("private_person_comments"))?,
                conn.pairs(&sums("private_community_comments"))?,
                conn.number(&format!(
                    "SELECT CAST(COALESCE(SUM(count), 0) AS {int}) AS n FROM private_site_comments"
                ))?,
            )
        }
    };
    if posts != want.posts
        || authors != want.authors
        || communities != want.communities
        || site != want.site
    {
        return Err(format!(
            "{}, {}: counts not exact: posts {posts:?} (want {:?}), communities {communities:?} \
             (want {:?}), site {site} (want {}), authors {} (want {})",
            C::NAME,
            mode.name(),
            want.posts,
            want.communities,
            want.site,
            authors.values().sum::<i64>(),
            want.authors.values().sum::<i64>(),
        )
        .into());
    }
    let mut line = format!("{} rows, exact", want.rows);
    if mode == Mode::Follow {
        let slots = conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM sites_comments_slots"
        ))?;
        write!(line, "; the site's slot rows written: {slots} of 32")?;
    }
    Ok(line)
}

// ---------------------------------------------------------------------------------------------
// The load.

struct Run {
    committed: u64,
    errors: u64,
    seconds: f64,
    first_error: Option<String>,
    /// The longest transaction a writer saw, begin to commit.
    longest: Duration,
}

impl Run {
    fn rate(&self) -> f64 {
        self.committed as f64 / self.seconds
    }
}

/// `writers` threads, a connection each, for `duration`: `BEGIN; INSERT` one comment on one of
/// the hot posts by a random author`; ` hold 2 ms`; COMMIT`.
fn writers<C: Server>(url: &str, writers: usize, duration: Duration) -> Result<Run, BoxError> {
    writers_until::<C>(url, writers, duration, None)
}

/// [`writers`], stopping early when `stop` is set.
fn writers_until<C: Server>(
    url: &str,
    writers: usize,
    duration: Duration,
    stop: Option<&std::sync::atomic::AtomicBool>,
) -> Result<Run, BoxError> {
    let mut conns = Vec::with_capacity(writers);
    for _ in 0..writers {
        conns.push(C::establish(url)?);
    }
    let barrier = Barrier::new(writers + 1);
    let (results, seconds) = std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut rng = rand::rng();
                    let (mut committed, mut errors, mut first_error) = (0_u64, 0_u64, None);
                    let mut longest = Duration::ZERO;
                    barrier.wait();
                    let end = Instant::now() + duration;
                    let stopped =
                        || stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst));
                    while Instant::now() < end && !stopped() {
                        let begun = Instant::now();
                        let post = rng.random_range(1..=HOT_POSTS);
                        let author = rng.random_range(1..=USERS);
                        let done = conn.transaction::<_, diesel::result::Error, _>(|conn| {
                            conn.insert_comment(post, author)?;
                            std::thread::sleep(HOLD);
                            Ok(())
                        });
                        longest = longest.max(begun.elapsed());
                        match done {
                            Ok(()) => committed += 1,
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    (committed, errors, first_error, longest)
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a writer panicked"))
            .collect();
        (results, started.elapsed().as_secs_f64())
    });
    let mut run = Run {
        committed: 0,
        errors: 0,
        seconds,
        first_error: None,
        longest: Duration::ZERO,
    };
    for (committed, errors, first_error, longest) in results {
        run.committed += committed;
        run.errors += errors;
        run.longest = run.longest.max(longest);
        if run.first_error.is_none() {
            run.first_error = first_error;
        }
    }
    Ok(run)
}

const PGBENCH_SCRIPT: &str = "\\set p random(1, 5)
\\set a random(1, 1000)
BEGIN;
INSERT INTO comments (post_id, author_id, local) VALUES (:p, :a, true);
\\sleep 2000 us
COMMIT;
";

/// The `none` transaction (a comment on one of the hot posts, by one of the users), the
/// `writer`'s `n`-th, for the raw MariaDB client: pgbench's script, its random numbers drawn
/// here.
fn raw_insert(_writer: u32, _n: u64) -> String {
    let mut rng = rand::rng();
    format!(
        "INSERT INTO comments (post_id, author_id, local) VALUES ({}, {}, TRUE)",
        rng.random_range(1..=HOT_POSTS),
        rng.random_range(1..=USERS)
    )
}

/// The `none` transaction run by libmariadb's C API, a thread per connection.
#[cfg(feature = "mysql")]
fn raw_mariadb(url: &str, writers: usize, duration: Duration) -> Result<Run, BoxError> {
    let load = slotted_examples::anchors::libmariadb_scripted(
        url,
        raw_insert,
        Some(HOLD),
        writers as u32,
        duration.as_secs_f64(),
    )?;
    Ok(Run {
        committed: load.committed,
        errors: load.errors,
        seconds: load.seconds,
        first_error: None,
        longest: Duration::ZERO,
    })
}

#[cfg(not(feature = "mysql"))]
fn raw_mariadb(_: &str, _: usize, _: Duration) -> Result<Run, BoxError> {
    Err("the raw MariaDB anchor needs the `mysql` feature".into())
}

/// The `none` transaction run by `pgbench -n -M prepared -c writers -j 2`; `None` when pgbench
/// is not installed.
fn pgbench(url: &str, writers: usize, duration: Duration) -> Result<Option<Run>, BoxError> {
    let script =
        std::env::temp_dir().join(format!("slotted-follow-{}.pgbench", std::process::id()));
    std::fs::write(&script, PGBENCH_SCRIPT)?;
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &writers.to_string(),
            "-j",
            "2",
        ])
        .args([
            "-T",
            &(duration.as_secs_f64().ceil().max(1.0) as u64).to_string(),
        ])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output();
    let _ = std::fs::remove_file(&script);
    let output = match output {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("pgbench: {e}").into()),
    };
    let run = slotted_examples::anchors::pgbench_run(&output)?;
    Ok(Some(Run {
        committed: run.committed,
        errors: run.failed,
        seconds: run.seconds,
        first_error: None,
        longest: Duration::ZERO,
    }))
}

// ---------------------------------------------------------------------------------------------
// Options, the run, the report.

struct Options {
    backends: Vec<String>,
    seconds: f64,
    rounds: usize,
    writers: usize,
    bulk_rows: u64,
    bulk_rounds: usize,
    bulk_timeout: u64,
    install_rows: u64,
    install_writers: usize,
    /// The parts to run: `throughput`, `bulk`, `install`.
    parts: Vec<String>,
    smoke: bool,
    save: bool,
    command: String,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        backends: vec!["postgres".into(), "mysql".into()],
        seconds: 12.0,
        rounds: 3,
        writers: 32,
        bulk_rows: 100_000,
        bulk_rounds: 1,
        bulk_timeout: 300,
        install_rows: 1_000_000,
        install_writers: 8,
        parts: PARTS.iter().map(|p| (*p).to_owned()).collect(),
        smoke: false,
        save: true,
        command: String::new(),
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut args = given.iter();
    let (mut seconds, mut rounds, mut bulk_rows, mut install_rows) = (None, None, None, None);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--backend" => o.backends = vec![value()?],
            "--seconds" => seconds = Some(value()?.parse()?),
            "--rounds" => rounds = Some(value()?.parse()?),
            "--writers" => o.writers = value()?.parse()?,
            "--bulk-rows" => bulk_rows = Some(value()?.parse()?),
            "--bulk-rounds" => o.bulk_rounds = value()?.parse()?,
            "--bulk-timeout" => o.bulk_timeout = value()?.parse()?,
            "--install-rows" => install_rows = Some(value()?.parse()?),
            "--install-writers" => o.install_writers = value()?.parse()?,
            "--parts" => o.parts = value()?.split(',').map(str::to_owned).collect(),
            "--smoke" => o.smoke = true,
            "--no-out" => o.save = false,
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    if o.smoke {
        (o.seconds, o.rounds, o.bulk_rows, o.save) = (0.3, 1, 1_000, false);
        o.install_rows = 2_000;
    }
    o.seconds = seconds.unwrap_or(o.seconds);
    o.rounds = rounds.unwrap_or(o.rounds);
    o.bulk_rows = bulk_rows.unwrap_or(o.bulk_rows);
    o.install_rows = install_rows.unwrap_or(o.install_rows);
    for part in &o.parts {
        if !PARTS.contains(&part.as_str()) {
            return Err(format!("--parts takes {}, not `{part}`", PARTS.join(",")).into());
        }
    }
    for backend in &o.backends {
        if backend != "postgres" && backend != "mysql" {
            return Err(format!("--backend postgres or --backend mysql, not `{backend}`").into());
        }
    }
    o.command = format!(
        "cargo run{} --example follow --features postgres,mysql -- {}",
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        given.join(" ")
    );
    Ok(o)
}

/// The parts of a run, in their order.
const PARTS: [&str; 3] = ["throughput", "bulk", "install"];

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// Creates (afresh) the benchmark's own database beside the one `url` names; its URL.
fn create_database<C: Server>(url: &str, name: &str) -> Result<String, BoxError> {
    let mut admin = C::establish(url)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
    admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
    Ok(with_database(url, name))
}

fn drop_database<C: Server>(url: &str, name: &str) -> Result<(), BoxError> {
    let mut admin = C::establish(url)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
    Ok(())
}

fn bench<C: Server>(o: &Options) -> Result<(), BoxError> {
    let base = std::env::var(C::URL_VARIABLE).map_err(|_| {
        format!(
            "{} is not set: the {} part needs it",
            C::URL_VARIABLE,
            C::NAME
        )
    })?;
    let name = if o.smoke {
        "slotted_bench_follow_smoke"
    } else {
        "slotted_bench_follow"
    };
    let url = create_database::<C>(&base, name)?;
    let result = measure::<C>(o, &url);
    // The database goes whatever happened; the connections to it are closed by now.
    let dropped = drop_database::<C>(&base, name);
    result?;
    dropped
}

fn measure<C: Server>(o: &Options, url: &str) -> Result<(), BoxError> {
    let mut conn = C::establish(url)?;
    conn.batch_execute(C::SCHEMA)?;
    let version = conn.words(C::VERSION)?;
    let started = slotted_examples::now_utc();
    let duration = Duration::from_secs_f64(o.seconds);

    let mut modes = vec![Mode::Follow, Mode::HotRow, Mode::Private, Mode::None];
    let mut pgbench_note = String::new();
    if C::NAME == "postgres" {
        // Is pgbench there? One probe run of the anchor itself would cost a run; ask for its version.
        match Command::new("pgbench").arg("--version").output() {
            Ok(out) if out.status.success() => {
                modes.push(Mode::PgbenchNone);
                pgbench_note = format!(
                    "`none (pgbench)`: the `none` transaction run by {} (-n -M prepared -c {} -j 2, \\sleep 2000 us): the raw client's anchor\n",
                    String::from_utf8_lossy(&out.stdout).trim(),
                    o.writers
                );
            }
            _ => pgbench_note = "pgbench not installed: no raw-client anchor\n".into(),
        }
    }
    if C::NAME == "mysql" {
        modes.push(Mode::RawNone);
        pgbench_note = format!(
            "`none (libmariadb)`: the `none` transaction run by libmariadb's C API (the client \
             under Diesel's MysqlConnection), a thread per connection, {} connections, text \
             protocol, the hold a thread sleep: the raw client's anchor\n",
            o.writers
        );
    }

    let mut out = String::new();
    writeln!(
        out,
        "# follow counters (issue 40), {}: {} writers, a comment on one of {HOT_POSTS} hot posts per \
         transaction held {} ms more; {} rounds x {} s, modes rotated",
        C::TITLE,
        o.writers,
        HOLD.as_millis(),
        o.rounds,
        o.seconds
    )?;
    writeln!(out, "# {version}")?;
    writeln!(out, "# {started}; 2 cores, a shared machine")?;
    writeln!(out, "# {}", o.command)?;
    writeln!(out)?;
    writeln!(
        out,
        "Counted per comment in follow, hot-row and private: its author, its post and its post's \
         community (while neither deleted nor removed) and the site (while local): 4 counts; none \
         counts nothing. follow reads the post's community with a share lock (through = \
         posts(community_id) keeps the count right when a post moves); the anchors read it plainly \
         and handle no move.\n\
         follow: the library's counters (follow = comments(post_id), comments(author_id), \
         comments(post_id) through posts(community_id), comments + record = 1; 32 slots each; \
         CounterMigrations' triggers); hot-row: a hand-written row trigger updating the post's, \
         author's, community's and site's aggregate rows (Lemmy's shape); private: \
         a hand-written row trigger upserting rows private to each connection (pg_backend_pid() / \
         CONNECTION_ID()), the ceiling; none: no trigger. Writers: sync Diesel connections, one \
         thread each, conn.transaction."
    )?;
    out.push_str(&pgbench_note);
    writeln!(out)?;
    print!("{out}");

    let part = |name: &str| o.parts.iter().any(|p| p == name);
    if part("throughput") {
        // Throughput.
        let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut per_round: Vec<BTreeMap<&str, f64>> = Vec::new();
        let mut notes = String::new();
        let pg_url = url;
        for round in 0..o.rounds {
            let mut this = BTreeMap::new();
            for i in 0..modes.len() {
                let mode = modes[(i + round) % modes.len()];
                prepare_mode(&mut conn, mode)?;
                let run = match mode {
                    Mode::PgbenchNone => match pgbench(pg_url, o.writers, duration)? {
                        Some(run) => run,
                        None => continue,
                    },
                    Mode::RawNone => raw_mariadb(url, o.writers, duration)?,
                    _ => writers::<C>(url, o.writers, duration)?,
                };
                let committed = if mode == Mode::PgbenchNone {
                    // pgbench's count leaves out the transactions in flight when its time ran out.
                    (run.committed, run.committed + o.writers as u64)
                } else {
                    (run.committed, run.committed)
                };
                let line = check(&mut conn, mode, Some(committed))?;
                let errors = match (&run.first_error, run.errors) {
                    (_, 0) => String::new(),
                    (Some(e), n) => format!("; {n} failed transactions, the first: {e}"),
                    (None, n) => format!("; {n} failed transactions"),
                };
                let note = format!(
                    "round {} {:<17} {:>8.0} tx/s  {line}{errors}\n",
                    round + 1,
                    mode.name(),
                    run.rate()
                );
                print!("{note}");
                notes += &note;
                rates.entry(mode.name()).or_default().push(run.rate());
                this.insert(mode.name(), run.rate());
            }
            per_round.push(this);
        }

        let names: Vec<&str> = modes.iter().map(|m| m.name()).collect();
        let mut table = String::from("| round |");
        for name in &names {
            write!(table, " {name} |")?;
        }
        table += " follow/private | follow/hot-row |\n|---|";
        table += &"---|".repeat(names.len() + 2);
        table += "\n";
        let ratio = |row: &BTreeMap<&str, f64>, a: &str, b: &str| -> f64 {
            row.get(a).copied().unwrap_or(f64::NAN) / row.get(b).copied().unwrap_or(f64::NAN)
        };
        for (round, row) in per_round.iter().enumerate() {
            write!(table, "| {} |", round + 1)?;
            for name in &names {
                write!(
                    table,
                    " {:.0} |",
                    row.get(name).copied().unwrap_or(f64::NAN)
                )?;
            }
            writeln!(
                table,
                " {:.3} | {:.1}x |",
                ratio(row, "follow", "private"),
                ratio(row, "follow", "hot-row")
            )?;
        }
        let medians: BTreeMap<&str, f64> = names
            .iter()
            .map(|n| (*n, median(rates.get(n).cloned().unwrap_or_default())))
            .collect();
        write!(table, "| median |")?;
        for name in &names {
            write!(table, " {:.0} |", medians[name])?;
        }
        let to_private = ratio(&medians, "follow", "private");
        let to_hot = ratio(&medians, "follow", "hot-row");
        writeln!(table, " {to_private:.3} | {to_hot:.1}x |")?;

        let mut section = format!(
            "## Throughput, tx/s (committed transactions per second of the run)\n\n{table}\n\
         Medians: follow / private = {to_private:.3} (target >= 0.95: {}); follow / hot-row = \
         {to_hot:.1}x (target >= 10x: {}).\n",
            verdict(to_private >= 0.95),
            verdict(to_hot >= 10.0)
        );
        if let (Some(f), Some(p)) = (medians.get("none"), medians.get("none (pgbench)")) {
            writeln!(
                section,
                "none through Diesel / none by pgbench = {:.3}; follow / none = {:.3}.",
                f / p,
                medians["follow"] / f
            )?;
        } else if let Some(f) = medians.get("none") {
            writeln!(section, "follow / none = {:.3}.", medians["follow"] / f)?;
        }
        writeln!(
        section,
        "\nEvery run, after it (the counts checked against COUNT(*) over comments, every mode's \
         rows against the transactions committed):\n\n{notes}"
    )?;
        print!("\n{section}");
        out += &section;
    }
    if part("bulk") {
        // Bulk.
        let bulk_modes = [Mode::None, Mode::Follow, Mode::HotRow];
        let mut bulk: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
        let mut bulk_notes = String::new();
        for round in 0..o.bulk_rounds {
            for i in 0..bulk_modes.len() {
                let mode = bulk_modes[(i + round) % bulk_modes.len()];
                prepare_mode(&mut conn, mode)?;
                conn.statement_timeout(o.bulk_timeout)?;
                let sql = C::bulk_sql(o.bulk_rows);
                let t0 = Instant::now();
                let done = conn.batch_execute(&sql);
                let seconds = t0.elapsed().as_secs_f64();
                conn.statement_timeout(0)?;
                let (time, line) = match done {
                    Ok(()) => (
                        Some(seconds),
                        check(&mut conn, mode, Some((o.bulk_rows, o.bulk_rows)))?,
                    ),
                    Err(e) if C::is_timeout(&e) => (
                        None,
                        format!("cancelled after {} s (--bulk-timeout)", o.bulk_timeout),
                    ),
                    Err(e) => return Err(format!("{}, bulk {}: {e}", C::NAME, mode.name()).into()),
                };
                let note = format!(
                    "bulk round {} {:<8} {}  {line}\n",
                    round + 1,
                    mode.name(),
                    time.map_or(format!("> {} s", o.bulk_timeout), |t| format!("{t:.2} s"))
                );
                print!("{note}");
                bulk_notes += &note;
                bulk.entry(mode.name()).or_default().push(time);
            }
        }
        remove_all(&mut conn)?;
        let shown =
            |t: &Option<f64>| t.map_or(format!("> {}", o.bulk_timeout), |t| format!("{t:.2}"));
        let mut section = format!(
        "\n## Bulk: one INSERT … SELECT of {} comments on the {HOT_POSTS} hot posts (one session), seconds\n\n\
         | round | none | follow | hot-row | follow/hot-row |\n|---|---|---|---|---|\n",
        o.bulk_rows
    );
        let rows = bulk["none"]
            .iter()
            .zip(&bulk["follow"])
            .zip(&bulk["hot-row"]);
        for (round, ((none, follow), hot)) in rows.enumerate() {
            let r = match (follow, hot) {
                (Some(f), Some(h)) => format!("{:.3}x", f / h),
                (Some(f), None) => format!("< {:.3}x", f / o.bulk_timeout as f64),
                _ => "-".into(),
            };
            writeln!(
                section,
                "| {} | {} | {} | {} | {r} |",
                round + 1,
                shown(none),
                shown(follow),
                shown(hot)
            )?;
        }
        let med = |name: &str| -> Option<f64> {
            let v: Vec<f64> = bulk[name].iter().flatten().copied().collect();
            (v.len() == bulk[name].len()).then(|| median(v))
        };
        let bulk_line = match (med("follow"), med("hot-row")) {
            (Some(f), Some(h)) => format!(
                "Median follow / hot-row = {:.3}x (target <= 1.5x: {}).",
                f / h,
                verdict(f / h <= 1.5)
            ),
            (Some(f), None) => format!(
                "hot-row was cancelled at {} s: follow / hot-row < {:.3}x (target <= 1.5x: met).",
                o.bulk_timeout,
                f / o.bulk_timeout as f64
            ),
            _ => "follow was cancelled: target <= 1.5x not shown.".into(),
        };
        writeln!(section, "\n{bulk_line}\n\n{bulk_notes}")?;
        print!("{section}");
        out += &section;
    }
    if part("install") {
        out += &install::measure::<C>(o, &mut conn, url)?;
    }

    if o.save {
        // A run of some parts only goes to a file of its own: `follow-install-postgres.txt`.
        let path = if o.parts.len() == PARTS.len() {
            format!("docs/bench/follow-{}.txt", C::NAME)
        } else {
            format!("docs/bench/follow-{}-{}.txt", o.parts.join("-"), C::NAME)
        };
        std::fs::write(&path, &out)?;
        println!("saved {path}");
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let o = options()?;
    for backend in o.backends.clone() {
        match backend.as_str() {
            #[cfg(feature = "postgres")]
            "postgres" => bench::<diesel::PgConnection>(&o)?,
            #[cfg(feature = "mysql")]
            "mysql" => bench::<diesel::MysqlConnection>(&o)?,
            other => return Err(format!("{other}: this build lacks its feature").into()),
        }
    }
    Ok(())
}
