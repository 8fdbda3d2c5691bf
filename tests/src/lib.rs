//! Shared support for the integration tests: the models, a fresh database per test on each
//! backend, and schema introspection.
//!
//! A backend whose URL is unset (`PG_DATABASE_URL`, `MYSQL_DATABASE_URL`) is skipped with a
//! message, unless `SLOTTED_REQUIRE_ALL_BACKENDS=1`, which CI sets: then it fails the test.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_migrations::MigrationHarness;
use slotted_core::{CounterConnection, SlottedCounter};

pub mod adoption;
#[cfg(feature = "async")]
pub mod asynch;
pub mod forum;
pub mod keys;
pub mod locks;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod spread;

/// The server's connection limit, as one BIGINT column `n`: `max_connections` (the benchmarks
/// size their other connections by it, not by a default a server may not have).
pub fn connection_limit_sql(backend: &str) -> &'static str {
    match backend {
        "postgres" => {
            "SELECT CAST(setting AS BIGINT) AS n FROM pg_settings WHERE name = 'max_connections'"
        }
        _ => "SELECT CAST(@@max_connections AS SIGNED) AS n",
    }
}

pub mod models {
    //! The models the tests count on: one per key type, and two counters on one model.
    use super::*;

    diesel::table! {
        posts (id) {
            id -> Integer,
            title -> Text,
        }
    }

    /// `i32` key, two counters: `likes` with the thread strategy, `views` random.
    #[derive(Debug, Clone, Queryable, Identifiable, Insertable, SlottedCounter)]
    #[diesel(table_name = posts)]
    #[slotted(counter = likes, slots = 16, strategy = thread)]
    #[slotted(counter = views, slots = 64, strategy = random)]
    pub struct Post {
        pub id: i32,
        pub title: String,
    }

    /// `i64` key, Diesel's default table name (`events`).
    #[derive(Debug, Clone, SlottedCounter)]
    #[slotted(counter = hits, slots = 8)]
    pub struct Event {
        pub id: i64,
    }

    /// The `connection` strategy: the slot is the server's connection identity modulo 64.
    #[derive(Debug, Clone, SlottedCounter)]
    #[slotted(counter = hearts, slots = 64, strategy = connection)]
    pub struct Reaction {
        pub id: i32,
    }

    /// `String` key named by `primary_key`, a URL counter as in the seed articles.
    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = pages, primary_key(url))]
    #[slotted(counter = views, slots = 4, max_key_length = 512)]
    pub struct Page {
        pub url: String,
    }
}

pub mod lifecycle {
    //! Models for the life-cycle features: random slots to compact, a cache column, buckets,
    //! pre-created slots, shared storage.
    use super::*;

    diesel::table! {
        articles (id) {
            id -> Integer,
            likes_count -> BigInt,
        }
    }

    /// Many random slots (rows to compact), a cached roll-up, and a second, plain counter.
    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = articles)]
    #[slotted(counter = likes, slots = 8, strategy = random, cache = likes_count)]
    #[slotted(counter = shares, slots = 4, strategy = random)]
    pub struct Article {
        pub id: i32,
    }

    /// Per-day and per-hour buckets.
    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = downloads)]
    #[slotted(counter = daily, slots = 4, strategy = random, bucket = day)]
    #[slotted(counter = hourly, slots = 2, bucket = hour)]
    pub struct Download {
        pub id: i64,
    }

    /// Pre-created slots, a String key.
    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = tags, primary_key(name))]
    #[slotted(counter = uses, slots = 4, strategy = random, prefill)]
    pub struct Tag {
        pub name: String,
    }

    /// Two models in the one shared table.
    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = videos)]
    #[slotted(counter = plays, slots = 8, strategy = random, storage = shared)]
    #[slotted(counter = likes, slots = 2, storage = shared)]
    pub struct Video {
        pub id: i64,
    }

    #[derive(Debug, Clone, SlottedCounter)]
    #[diesel(table_name = photos)]
    #[slotted(counter = views, slots = 4, strategy = random, storage = shared)]
    pub struct Photo {
        pub id: i32,
    }

    /// Their migrations, and the `articles` table with its cache column.
    /// A writer in business transactions until `until`: each increments `Article.likes` of two
    /// neighbouring records of `1..=keys` (record `a` and `a % keys + 1`, `a` walking from
    /// `seed`), holds the transaction 1 ms, and commits through the retry helper. Returns the
    /// increments acknowledged per record (index = key; 0 unused).
    pub fn business_writer<C: TestConnection>(
        conn: &mut C,
        keys: i32,
        seed: usize,
        until: std::time::Instant,
    ) -> Vec<i64> {
        let policy = slotted_core::retry::RetryPolicy {
            max_retries: 1000,
            ..slotted_core::retry::RetryPolicy::default()
        };
        let mut acked = vec![0i64; keys as usize + 1];
        let mut i = 0;
        while std::time::Instant::now() < until {
            let a = ((i * 5 + seed) % keys as usize) as i32 + 1;
            let b = a % keys + 1;
            slotted_core::retry::transaction_with_retry(conn, &policy, |c| {
                Article::likes_of(a).increment(c)?;
                Article::likes_of(b).increment(c)?;
                std::thread::sleep(std::time::Duration::from_millis(1));
                Ok::<_, slotted_core::Error>(())
            })
            .expect("a writer's retried transaction commits");
            acked[a as usize] += 1;
            acked[b as usize] += 1;
            i += 1;
        }
        acked
    }

    /// Articles 1 to `records`, each with 4 slot rows of likes (a pass of compaction has all
    /// of them to fold), record k's total 10 k. Run again, it puts the 4 rows back.
    pub fn scattered_likes<C: TestConnection>(conn: &mut C, records: i64) {
        conn.batch_execute("DELETE FROM articles_likes_slots")
            .unwrap();
        for first in (1..=records).step_by(500) {
            let last = (first + 499).min(records);
            let ids: Vec<String> = (first..=last).map(|k| format!("({k})")).collect();
            let slots: Vec<String> = (first..=last)
                .flat_map(|k| (0..4).map(move |slot| format!("({k}, {slot}, {})", k * (slot + 1))))
                .collect();
            if conn.query_i64(&format!(
                "SELECT COUNT(*) AS n FROM articles WHERE id = {first}"
            )) == 0
            {
                conn.batch_execute(&format!(
                    "INSERT INTO articles (id) VALUES {}",
                    ids.join(", ")
                ))
                .unwrap();
            }
            conn.batch_execute(&format!(
                "INSERT INTO articles_likes_slots (record_id, slot, count) VALUES {}",
                slots.join(", ")
            ))
            .unwrap();
        }
    }

    /// Article `id`'s cached likes (`articles.likes_count`).
    pub fn cached_likes<C: TestConnection>(conn: &mut C, id: i64) -> i64 {
        conn.query_i64(&format!(
            "SELECT CAST(likes_count AS {}) AS n FROM articles WHERE id = {id}",
            if C::NAME == "mysql" {
                "SIGNED"
            } else {
                "BIGINT"
            }
        ))
    }

    /// The writers' acknowledged increments, added up per record.
    pub fn sum_acked(writers: impl IntoIterator<Item = Vec<i64>>) -> Vec<i64> {
        let mut sum: Vec<i64> = Vec::new();
        for acked in writers {
            sum.resize(sum.len().max(acked.len()), 0);
            for (total, n) in sum.iter_mut().zip(acked) {
                *total += n;
            }
        }
        sum
    }

    pub fn migrate<C: TestConnection>(conn: &mut C) {
        conn.batch_execute("CREATE TABLE articles (id INTEGER PRIMARY KEY NOT NULL, likes_count BIGINT NOT NULL DEFAULT 0)")
            .expect("create articles");
        let migrations = slotted_core::CounterMigrations::of::<Article>()
            .and::<Download>()
            .and::<Tag>()
            .and::<Video>()
            .and::<Photo>();
        conn.run_pending_migrations(migrations)
            .expect("run the life-cycle migrations");
    }
}

/// Calls cut off at random points counted once or not at all: `total` lies between the calls
/// acknowledged and those plus the calls cut off. Prints the three, under `what`.
pub fn assert_counted_once(what: &str, acknowledged: i64, cut_off: i64, total: i64) {
    eprintln!("{what}: acknowledged {acknowledged}, cut off {cut_off}, total {total}");
    assert!(
        acknowledged <= total && total <= acknowledged + cut_off,
        "{what}: acknowledged {acknowledged} <= total {total} <= acknowledged + cut off {cut_off}"
    );
}

/// `SLOTTED_REQUIRE_ALL_BACKENDS=1`: a backend without a URL fails instead of skipping.
pub fn require_all_backends() -> bool {
    std::env::var("SLOTTED_REQUIRE_ALL_BACKENDS").is_ok_and(|v| v == "1")
}

/// A backend's server URL from `var`, or `None` (skip) with a message; with
/// `SLOTTED_REQUIRE_ALL_BACKENDS=1` a missing URL panics, failing the test.
pub fn server_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if require_all_backends() => {
            panic!("{test}: {var} is not set, and SLOTTED_REQUIRE_ALL_BACKENDS=1 forbids skipping this backend")
        }
        _ => {
            eprintln!("{test}: skipped, {var} is not set");
            None
        }
    }
}

/// Drops and creates the test's database on the server at `$var`, and returns its URL.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn recreate_server_database<C: Connection + SimpleConnection>(
    var: &str,
    test: &str,
    force: &str,
) -> Option<String> {
    let url = server_url(var, test)?;
    let name = database_name(test);
    let mut admin = C::establish(&url).unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    // Two statements: PostgreSQL runs a multi-statement batch as one transaction, which
    // DROP DATABASE refuses.
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}{force}"))
        .and_then(|()| admin.batch_execute(&format!("CREATE DATABASE {name}")))
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    Some(with_database(&url, &name))
}

/// The nodes of a multi-primary cluster (MariaDB Galera), from `SLOTTED_GALERA_URLS`
/// (comma-separated, as `scripts/galera urls` prints them), each with the database of `test`
/// dropped and created afresh, or `None` (skip) with a message; with
/// `SLOTTED_REQUIRE_ALL_BACKENDS=1` a missing variable fails the test.
///
/// The database is created through the first node (DDL replicates in total order); each other
/// node is waited for (`wsrep_sync_wait`) until it has it.
#[cfg(feature = "mysql")]
pub fn cluster_databases(test: &str) -> Option<Vec<String>> {
    let list = server_url("SLOTTED_GALERA_URLS", test)?;
    let urls: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    assert!(
        urls.len() >= 2,
        "SLOTTED_GALERA_URLS names {} node(s); a cluster test needs at least 2",
        urls.len()
    );
    let name = database_name(&format!("galera_{test}"));
    for (i, url) in urls.iter().enumerate() {
        let mut admin = diesel::MysqlConnection::establish(url)
            .unwrap_or_else(|e| panic!("connect to cluster node {url}: {e}"));
        if i == 0 {
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
                .and_then(|()| admin.batch_execute(&format!("CREATE DATABASE {name}")))
                .unwrap_or_else(|e| panic!("create database {name} on {url}: {e}"));
            continue;
        }
        admin
            .batch_execute("SET SESSION wsrep_sync_wait = 1")
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while admin.query_i64(&format!(
            "SELECT COUNT(*) AS n FROM information_schema.schemata WHERE schema_name = '{name}'"
        )) == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{url} has no database {name} after 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Some(urls.iter().map(|url| with_database(url, &name)).collect())
}

/// Waits, 30 s at most per node, until every host of the multi-host PostgreSQL `url` has
/// replayed the creation of `database`. Needed before the URL names a database just created:
/// libpq tries the hosts in order, and a standby that does not have the database yet refuses the
/// connection (FATAL), which ends libpq's search instead of moving it to the next host. The
/// database is known by the OID the primary gave it: a standby may still show an earlier
/// database of the same name, whose drop it has not replayed yet.
#[cfg(feature = "postgres")]
pub fn until_every_node_has(url: &str, database: &str) -> Result<(), String> {
    let (prefix, rest) = url.split_once('@').ok_or("user@hosts in the URL")?;
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let oid_of = |node: &str| -> Option<i64> {
        let mut conn = diesel::PgConnection::establish(node).ok()?;
        diesel::sql_query(format!(
            "SELECT CAST(oid AS BIGINT) AS n FROM pg_database WHERE datname = '{database}' \
             AND datconnlimit <> -2"
        ))
        .get_result::<Number>(&mut conn)
        .ok()
        .map(|r| r.n)
    };
    let primary = format!("{prefix}@{hosts}/postgres?{query}");
    let oid = oid_of(&primary).ok_or_else(|| format!("the primary has no database {database}"))?;
    for host in hosts.split(',') {
        let node = format!("{prefix}@{host}/postgres?connect_timeout=2");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while oid_of(&node) != Some(oid) {
            if std::time::Instant::now() > deadline {
                return Err(format!("node {host} has no database {database} after 30 s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(())
}

/// A fresh database for `test` on the PostgreSQL cluster run by `scripts/patroni`, whose
/// multi-host read-write URL is in `SLOTTED_PATRONI_URL` (`scripts/patroni url`), with every
/// test model's counter tables, and its URL (still multi-host and read-write); `None` (skip)
/// with a message when the variable is unset, a failure with `SLOTTED_REQUIRE_ALL_BACKENDS=1`.
#[cfg(feature = "postgres")]
pub fn patroni_database(test: &str) -> Option<String> {
    let url = recreate_server_database::<diesel::PgConnection>(
        "SLOTTED_PATRONI_URL",
        &format!("patroni_{test}"),
        " WITH (FORCE)",
    )?;
    let (_, database) = url
        .split('?')
        .next()
        .and_then(|base| base.rsplit_once('/'))
        .expect("a database in the URL");
    until_every_node_has(&url, database).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = <diesel::PgConnection as TestConnection>::open(&url);
    conn.run_pending_migrations(all_migrations())
        .expect("run the counter migrations on the cluster");
    Some(url)
}

/// `direct`'s database through the transaction-mode pooler at `SLOTTED_PGBOUNCER_URL`
/// (`scripts/pgbouncer url`), or `None` (skip) with a message; with
/// `SLOTTED_REQUIRE_ALL_BACKENDS=1` a missing variable fails the test.
#[cfg(feature = "postgres")]
pub fn through_pooler(direct: &str, test: &str) -> Option<String> {
    let pooler = server_url("SLOTTED_PGBOUNCER_URL", test)?;
    let path = direct.split_once('?').map_or(direct, |(p, _)| p);
    let database = &path[path.rfind('/').expect("a database URL") + 1..];
    Some(with_database(&pooler, database))
}

/// `url` with its database name replaced.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rfind('/') {
        Some(i) if i > base.find("://").map_or(0, |j| j + 2) => &base[..i],
        _ => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

/// A database name from a test name: `slotted_`, the name's first letters, digits and `_`, and
/// a hash of the whole name and of this checkout's path (two checkouts testing at once must not
/// share a database), within PostgreSQL's 63 bytes.
fn database_name(test: &str) -> String {
    let name: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let hash = format!("{}{name}", env!("CARGO_MANIFEST_DIR"))
        .bytes()
        .fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
    format!("slotted_{}_{hash:08x}", &name[..name.len().min(44)])
}

/// A column as the database describes it.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Column {
    #[diesel(sql_type = Text)]
    pub name: String,
    /// Lowercase SQL type, e.g. `integer`, `bigint`, `varchar(512)`.
    #[diesel(sql_type = Text)]
    pub sql_type: String,
    #[diesel(sql_type = BigInt)]
    pub not_null: i64,
}

/// One slot row of a counter table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct SlotRow {
    #[diesel(sql_type = diesel::sql_types::SmallInt)]
    pub slot: i16,
    #[diesel(sql_type = BigInt)]
    pub count: i64,
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The shared part of every backend's `TestConnection` impl.
macro_rules! slot_rows {
    () => {
        fn query_i64(&mut self, sql: &str) -> i64 {
            self.try_query_i64(sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }

        fn try_query_i64(&mut self, sql: &str) -> QueryResult<i64> {
            diesel::sql_query(sql)
                .get_result::<Number>(self)
                .map(|r| r.n)
        }

        fn query_text(&mut self, sql: &str) -> QueryResult<String> {
            diesel::sql_query(sql)
                .get_result::<Name>(self)
                .map(|r| r.name)
        }

        fn query_pairs(&mut self, sql: &str) -> Vec<(i64, i64)> {
            diesel::sql_query(sql)
                .load::<Pair>(self)
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .into_iter()
                .map(|p| (p.k, p.n))
                .collect()
        }

        fn slot_rows(&mut self, table: &str, key: i64) -> Vec<SlotRow> {
            // Test constants and an integer: nothing to bind.
            diesel::sql_query(format!(
                "SELECT slot, count FROM {table} WHERE record_id = {key} ORDER BY slot"
            ))
            .load(self)
            .expect("read the slot rows")
        }
    };
}

/// A row of `TestConnection::query_pairs`.
#[derive(QueryableByName)]
struct Pair {
    #[diesel(sql_type = BigInt)]
    k: i64,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

/// `TestConnection::lock_likes` for the server backends.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! lock_likes {
    () => {
        fn lock_likes(&mut self, key: i32) -> QueryResult<i64> {
            use models::posts_likes_slots::dsl::*;
            let counts: Vec<i64> = posts_likes_slots
                .filter(record_id.eq(key))
                .select(count)
                .for_update()
                .load(self)?;
            Ok(counts.iter().sum())
        }
    };
}

/// A connection type the tests run on: one per backend.
pub trait TestConnection:
    CounterConnection
    + MigrationHarness<<Self as Connection>::Backend>
    + SimpleConnection
    + Send
    + Sized
    + 'static
{
    /// `sqlite`, `postgres` or `mysql`.
    const NAME: &'static str;

    /// Creates an empty database for `test` and returns its URL, or `None` to skip.
    fn fresh_database(test: &str) -> Option<String>;

    /// Opens a connection; on SQLite with a busy timeout, as README advises.
    fn open(url: &str) -> Self {
        let mut conn = Self::establish(url).unwrap_or_else(|e| panic!("open {url}: {e}"));
        conn.set_up().expect("set up the connection");
        conn
    }

    /// What every connection of the tests gets: on SQLite a 10 s busy timeout and WAL; nothing
    /// on the servers.
    fn set_up(&mut self) -> QueryResult<()> {
        Ok(())
    }

    /// The table's columns, in order.
    fn columns(&mut self, table: &str) -> Vec<Column>;

    /// The table's primary key columns, in order.
    fn primary_key(&mut self, table: &str) -> Vec<String>;

    /// The one BIGINT column `n` of the one row `sql` returns.
    fn query_i64(&mut self, sql: &str) -> i64;

    /// `query_i64`, with the database's error returned, not panicking (inside transactions
    /// that may lose a deadlock).
    fn try_query_i64(&mut self, sql: &str) -> QueryResult<i64>;

    /// The one text column `name` of the one row `sql` returns (a failure's description).
    fn query_text(&mut self, sql: &str) -> QueryResult<String>;

    /// The rows of `sql`, two BIGINT columns `k` and `n` each (a key and its count).
    fn query_pairs(&mut self, sql: &str) -> Vec<(i64, i64)>;

    /// The slot rows of an integer-keyed record.
    fn slot_rows(&mut self, table: &str, key: i64) -> Vec<SlotRow>;

    /// The sum of `posts_likes_slots`' counts of `key`, read with `FOR UPDATE` through Diesel's
    /// query builder (so Diesel caches the statement). Not on SQLite, which has no `FOR UPDATE`.
    fn lock_likes(&mut self, key: i32) -> QueryResult<i64>;

    /// Whether the table exists.
    fn table_exists(&mut self, table: &str) -> bool {
        !self.columns(table).is_empty()
    }
}

#[cfg(feature = "sqlite")]
impl TestConnection for diesel::SqliteConnection {
    const NAME: &'static str = "sqlite";

    slot_rows!();

    fn fresh_database(test: &str) -> Option<String> {
        let dir = std::env::temp_dir().join("slotted-tests");
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        let path = dir.join(format!("{}-{}.db", database_name(test), std::process::id()));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        Some(path.to_string_lossy().into_owned())
    }

    fn lock_likes(&mut self, _key: i32) -> QueryResult<i64> {
        unimplemented!("SQLite has no FOR UPDATE")
    }

    fn set_up(&mut self) -> QueryResult<()> {
        self.batch_execute("PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL;")
    }

    fn columns(&mut self, table: &str) -> Vec<Column> {
        diesel::sql_query("SELECT name, lower(type) AS sql_type, \"notnull\" AS not_null FROM pragma_table_info(?) ORDER BY cid")
            .bind::<Text, _>(table)
            .load(self)
            .expect("pragma_table_info")
    }

    fn primary_key(&mut self, table: &str) -> Vec<String> {
        diesel::sql_query("SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk")
            .bind::<Text, _>(table)
            .load::<Name>(self)
            .expect("pragma_table_info")
            .into_iter()
            .map(|n| n.name)
            .collect()
    }
}

#[cfg(feature = "postgres")]
impl TestConnection for diesel::PgConnection {
    const NAME: &'static str = "postgres";

    slot_rows!();
    lock_likes!();

    fn fresh_database(test: &str) -> Option<String> {
        // PostgreSQL refuses to drop a database others are connected to, unless forced.
        recreate_server_database::<Self>("PG_DATABASE_URL", test, " WITH (FORCE)")
    }

    fn columns(&mut self, table: &str) -> Vec<Column> {
        diesel::sql_query(
            "SELECT column_name::text AS name, data_type::text AS sql_type, \
             CAST(CASE WHEN is_nullable = 'NO' THEN 1 ELSE 0 END AS BIGINT) AS not_null \
             FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position",
        )
        .bind::<Text, _>(table)
        .load(self)
        .expect("information_schema.columns")
    }

    fn primary_key(&mut self, table: &str) -> Vec<String> {
        diesel::sql_query(
            "SELECT k.column_name::text AS name FROM information_schema.table_constraints c \
             JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name) \
             WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = current_schema() AND c.table_name = $1 \
             ORDER BY k.ordinal_position",
        )
        .bind::<Text, _>(table)
        .load::<Name>(self)
        .expect("key_column_usage")
        .into_iter()
        .map(|n| n.name)
        .collect()
    }
}

#[cfg(feature = "mysql")]
impl TestConnection for diesel::MysqlConnection {
    const NAME: &'static str = "mysql";

    slot_rows!();
    lock_likes!();

    fn fresh_database(test: &str) -> Option<String> {
        recreate_server_database::<Self>("MYSQL_DATABASE_URL", test, "")
    }

    fn columns(&mut self, table: &str) -> Vec<Column> {
        diesel::sql_query(
            "SELECT CAST(column_name AS CHAR) AS name, CAST(column_type AS CHAR) AS sql_type, \
             CAST(is_nullable = 'NO' AS SIGNED) AS not_null \
             FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? \
             ORDER BY ordinal_position",
        )
        .bind::<Text, _>(table)
        .load(self)
        .expect("information_schema.columns")
    }

    fn primary_key(&mut self, table: &str) -> Vec<String> {
        diesel::sql_query(
            "SELECT CAST(column_name AS CHAR) AS name FROM information_schema.key_column_usage \
             WHERE table_schema = DATABASE() AND table_name = ? AND constraint_name = 'PRIMARY' \
             ORDER BY ordinal_position",
        )
        .bind::<Text, _>(table)
        .load::<Name>(self)
        .expect("key_column_usage")
        .into_iter()
        .map(|n| n.name)
        .collect()
    }
}

/// One test's database on one backend.
pub struct TestDb {
    pub url: String,
}

impl TestDb {
    /// A fresh database for `test` on `C`'s backend, or `None` when the backend is skipped.
    pub fn new<C: TestConnection>(test: &str) -> Option<Self> {
        C::fresh_database(&format!("{}_{}", C::NAME, test)).map(|url| TestDb { url })
    }

    /// A fresh database with every test model's counter tables migrated in.
    pub fn migrated<C: TestConnection>(test: &str) -> Option<(Self, C)> {
        let db = Self::new::<C>(test)?;
        let mut conn = C::open(&db.url);
        conn.run_pending_migrations(all_migrations())
            .expect("run the counter migrations");
        Some((db, conn))
    }
}

/// The migrations of every test model.
pub fn all_migrations() -> slotted_core::CounterMigrations {
    use models::*;
    slotted_core::CounterMigrations::of::<Post>()
        .and::<Event>()
        .and::<Page>()
}

/// Runs each named generic test `fn name<C: TestConnection>(test: &str)` once per enabled
/// backend, as `sqlite::name`, `postgres::name` and `mysql::name`.
///
/// Tests that mean something on some backends only go into groups instead, so that none passes
/// without testing anything: `all`, `servers` (PostgreSQL and MySQL), `sqlite`, `postgres`,
/// `mysql`, each optional, in this order, each followed by a comma:
///
/// ```text
/// backend_tests! {
///     all: [shared_test],
///     servers: [killed_session_test],
///     sqlite: [busy_timeout_test],
/// }
/// ```
#[macro_export]
macro_rules! backend_tests {
    (
        $(all: [$($a:ident),* $(,)?],)?
        $(servers: [$($sv:ident),* $(,)?],)?
        $(sqlite: [$($s:ident),* $(,)?],)?
        $(postgres: [$($p:ident),* $(,)?],)?
        $(mysql: [$($m:ident),* $(,)?],)?
    ) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $crate::backend_tests!(@on ::diesel::SqliteConnection; $($($a)*)? $($($s)*)?);
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $crate::backend_tests!(@on ::diesel::PgConnection; $($($a)*)? $($($sv)*)? $($($p)*)?);
        }
        #[cfg(feature = "mysql")]
        mod mysql {
            $crate::backend_tests!(@on ::diesel::MysqlConnection; $($($a)*)? $($($sv)*)? $($($m)*)?);
        }
    };
    (@on $conn:ty; $($name:ident)*) => {
        $(#[test] fn $name() { super::$name::<$conn>(stringify!($name)) })*
    };
    ($($name:ident),* $(,)?) => {
        $crate::backend_tests! { all: [$($name),*], }
    };
}

/// An r2d2 pool of `size` connections to `url`, each set up as [`TestConnection::open`] does.
pub fn pool<C: TestConnection + diesel::r2d2::R2D2Connection>(
    url: &str,
    size: u32,
) -> diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<C>> {
    #[derive(Debug)]
    struct SetUp;
    impl<C: TestConnection> diesel::r2d2::CustomizeConnection<C, diesel::r2d2::Error> for SetUp {
        fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
            conn.set_up().map_err(diesel::r2d2::Error::QueryError)
        }
    }
    diesel::r2d2::Pool::builder()
        .max_size(size)
        .connection_customizer(Box::new(SetUp))
        .build(diesel::r2d2::ConnectionManager::new(url))
        .expect("a pool")
}

/// The longest stretch without an acknowledged write that ends after `event`: how long writes
/// stopped around a failover, as the writers saw it (`acked_at`: when each write returned, in
/// any order). The last writes on the old primary may be acknowledged just after the event, so
/// the stretch is looked for, not taken from the event on. `None` without a write after it.
pub fn longest_pause(
    acked_at: &[std::time::Instant],
    event: std::time::Instant,
) -> Option<std::time::Duration> {
    let mut times = acked_at.to_vec();
    times.sort();
    times
        .windows(2)
        .filter(|w| w[1] > event)
        .map(|w| w[1] - w[0])
        .max()
}

/// A tiny deterministic generator per thread (xorshift): reproducible workloads.
pub struct Dice(pub u64);

impl Dice {
    /// Dice seeded from the clock, the seed printed (`what` it seeds) so that a failure can be
    /// replayed with `Dice(seed)`.
    pub fn from_clock(what: &str) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("{what} seeded with {seed}");
        Dice(seed)
    }

    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The flag that tells a test's background threads to stop.
///
/// Set it with [`Stop::set`], or hold [`Stop::on_exit`] in the body of a `std::thread::scope`:
/// its guard sets the flag when the body ends, *also when it panics*. `std::thread::scope` joins
/// every thread before it lets a panic go on, so a loop that waits for a flag the panicking body
/// never set would hang the test for good instead of failing it with its message.
#[derive(Default)]
pub struct Stop(std::sync::atomic::AtomicBool);

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the threads should stop.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// A guard that sets the flag when it is dropped, by a return or by a panic.
    #[must_use = "the flag is set when the guard is dropped"]
    pub fn on_exit(&self) -> StopOnExit<'_> {
        StopOnExit(self)
    }
}

/// See [`Stop::on_exit`].
pub struct StopOnExit<'a>(&'a Stop);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.set();
    }
}
