//! The backends: each server's schema, the anchors' triggers and the SQL the benchmark runs.

use std::collections::BTreeMap;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_migrations::MigrationHarness;
use slotted_examples::BoxError;

use super::{comments, HOT_POSTS, POSTS, USERS};

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
pub(super) trait Server:
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
