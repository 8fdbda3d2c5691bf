//! Bad runtime input on every backend: a clear `Err`, nothing written, nothing lost, the caller's
//! transaction still usable.

use std::time::{Duration, SystemTime};

use slotted_core::{
    Counter, CounterMaintenance, CounterMigrations, CounterTable, Dialect, Error, SlottedCounter,
};
use slotted_tests::models::*;
use slotted_tests::{backend_tests, TestConnection, TestDb};

/// One slot, so a test knows which row an add lands in; and two slots to overflow a sum.
#[derive(SlottedCounter)]
#[diesel(table_name = meters)]
#[slotted(counter = reading, slots = 1)]
#[slotted(counter = spread, slots = 2, strategy = random)]
pub struct Meter {
    pub id: i64,
}

/// One slot per counter again, on the other write paths: an `UPDATE` of a pre-created slot, a
/// bucket of its own, and the shared table.
#[derive(SlottedCounter)]
#[diesel(table_name = gauges)]
#[slotted(counter = prefilled, slots = 1, prefill)]
#[slotted(counter = daily, slots = 1, bucket = day)]
#[slotted(counter = pooled, slots = 1, storage = shared)]
pub struct Gauge {
    pub id: i64,
}

/// Raw identifiers everywhere: the tables are named as SQL names them, without `r#`.
#[derive(SlottedCounter)]
#[diesel(table_name = r#match, primary_key(r#type))]
#[slotted(counter = goals, slots = 2)]
#[slotted(counter = fouls, slots = 2, storage = shared)]
pub struct r#Match {
    pub r#type: i32,
}

diesel::table! {
    tallies (id) {
        id -> BigInt,
        hits_count -> Integer,
    }
}

/// A roll-up into a 32-bit column, to meet totals it cannot hold.
#[derive(SlottedCounter)]
#[diesel(table_name = tallies)]
#[slotted(counter = hits, slots = 2, strategy = random, cache = hits_count)]
pub struct Tally {
    pub id: i64,
}

diesel::table! {
    tags (name) {
        name -> Text,
        uses_count -> BigInt,
    }
}

/// A text key rolled up into its parent, whose key column has the database's own collation.
#[derive(SlottedCounter)]
#[diesel(table_name = tags, primary_key(name))]
#[slotted(counter = uses, slots = 2, strategy = random, cache = uses_count, max_key_length = 64)]
pub struct Tag {
    pub name: String,
}

// A lost connection only on the servers: an embedded database has none to lose.
backend_tests! {
    all: [
        raw_identifiers_name_tables_without_r_hash,
        overflowing_add_writes_nothing_and_keeps_the_transaction,
        overflow_is_refused_on_every_write_path,
        totals_beyond_i64_are_an_error,
        a_roll_up_leaves_and_names_the_totals_its_column_cannot_hold,
        a_text_key_rolls_up_into_a_column_of_its_own_collation,
        totals_of_100_000_keys,
        string_keys_round_trip_or_are_refused,
        migration_folders_refuse_bad_directories,
        missing_tables_are_named_by_every_call,
    ],
    servers: [lost_connection_names_the_counter],
}

fn raw_identifiers_name_tables_without_r_hash<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(CounterMigrations::of::<r#Match>())
        .unwrap();
    assert!(conn.table_exists("match_goals_slots"));
    let game = r#Match { r#type: 3 };
    // The fouls first: this session's first write, which on PostgreSQL goes to its connection's
    // slot and takes its writer index; both goals then go to the index's slot, where the second
    // overflows.
    game.fouls().increment(&mut conn).unwrap();
    game.goals().add(2, &mut conn).unwrap();
    assert_eq!(game.goals().total(&mut conn).unwrap(), 2);
    assert_eq!(r#Match::fouls_of(3).total(&mut conn).unwrap(), 1);
    let err = r#Match::goals_of(3).add(i64::MAX, &mut conn).unwrap_err();
    assert!(err.to_string().contains("`Match.goals`"), "{err}");
}

fn meters<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(CounterMigrations::of::<Meter>())
        .unwrap();
    Some((db, conn))
}

fn overflowing_add_writes_nothing_and_keeps_the_transaction<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = meters::<C>(test) else {
        return;
    };
    let meter = Meter::reading_of(1);
    meter.add(i64::MAX - 5, &mut conn).unwrap();
    let err = meter.add(10, &mut conn).unwrap_err();
    assert!(matches!(err, Error::Overflow { delta: 10, .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("Meter.reading") && message.contains("meters_reading_slots"),
        "{message}"
    );
    assert_eq!(
        meter.total(&mut conn).unwrap(),
        i64::MAX - 5,
        "nothing written"
    );

    // Inside a transaction: the refused add leaves the transaction usable (PostgreSQL would
    // abort it on a raised error; the guard avoids raising one).
    conn.transaction(|conn| {
        assert!(matches!(meter.add(6, conn), Err(Error::Overflow { .. })));
        meter.add(5, conn)?;
        Meter::reading_of(2).add(i64::MIN + 1, conn)?;
        assert!(matches!(
            Meter::reading_of(2).add(-2, conn),
            Err(Error::Overflow { .. })
        ));
        Meter::reading_of(2).decrement(conn)?;
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(meter.total(&mut conn).unwrap(), i64::MAX);
    assert_eq!(Meter::reading_of(2).total(&mut conn).unwrap(), i64::MIN);
}

/// `counter` (one slot) near `i64::MAX` and near `i64::MIN`: each add past the edge is
/// `Error::Overflow`, writes nothing, and leaves the open transaction usable.
fn assert_overflow_refused<T, C>(counter: impl Fn(i64) -> Counter<'static, T>, conn: &mut C)
where
    T: CounterTable<Key = i64>,
    C: TestConnection,
{
    let (high, low) = (counter(1), counter(2));
    let name = T::SPEC.qualified_name();
    high.add(i64::MAX - 5, conn).unwrap();
    low.add(i64::MIN + 5, conn).unwrap();
    conn.transaction(|conn| {
        for (counter, delta) in [(&high, 6), (&high, i64::MAX), (&low, -6), (&low, i64::MIN)] {
            let err = counter.add(delta, conn).unwrap_err();
            assert!(
                matches!(err, Error::Overflow { .. }),
                "{name} {delta}: {err:?}"
            );
        }
        high.add(5, conn)?; // the transaction goes on
        low.add(-5, conn)?;
        Ok::<_, Error>(())
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(high.total(conn).unwrap(), i64::MAX, "{name}");
    assert_eq!(low.total(conn).unwrap(), i64::MIN, "{name}");
    assert!(matches!(high.increment(conn), Err(Error::Overflow { .. })));
    assert!(matches!(low.decrement(conn), Err(Error::Overflow { .. })));
    assert_eq!(
        high.total(conn).unwrap(),
        i64::MAX,
        "{name}: nothing written"
    );
}

fn overflow_is_refused_on_every_write_path<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(CounterMigrations::of::<Gauge>())
        .unwrap();
    // Pre-created slots: the plain `UPDATE` carries the guard too.
    gauges_prefilled_slots::table
        .create_slots(&[1, 2], &mut conn)
        .unwrap();
    assert_overflow_refused(Gauge::prefilled_of, &mut conn);
    // One fixed day, so that no write crosses midnight into an empty bucket.
    let day = SystemTime::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400);
    assert_overflow_refused(|id| Gauge::daily_of(id).at(day), &mut conn);
    assert_eq!(
        Gauge::daily_of(1).at(day).bucket_total(&mut conn).unwrap(),
        i64::MAX
    );
    assert_overflow_refused(Gauge::pooled_of, &mut conn);
}

fn totals_beyond_i64_are_an_error<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = meters::<C>(test) else {
        return;
    };
    conn.batch_execute(&format!(
        "INSERT INTO meters_spread_slots (record_id, slot, count) VALUES (1, 0, {}), (1, 1, 10), (2, 0, 7)",
        i64::MAX
    ))
    .unwrap();
    let err = Meter::spread_of(1).total(&mut conn).unwrap_err();
    let Error::TotalOutOfRange { total, .. } = &err else {
        panic!("{err:?}")
    };
    if C::NAME == "sqlite" {
        assert!(total.contains("outside i64"), "{total}"); // SQLite's SUM fails without the value
    } else {
        assert_eq!(total, "9223372036854775817", "the exact sum");
    }
    assert!(matches!(
        Meter::spread_totals(&[1, 2], &mut conn),
        Err(Error::TotalOutOfRange { .. })
    ));
    assert_eq!(
        Meter::spread_of(2).total(&mut conn).unwrap(),
        7,
        "other records still read"
    );
}

/// Four records rolled up into a 32-bit column: one past `i32`, one past `i64`, one that fits,
/// one with no rows left (its column goes back to 0). The two that cannot be written keep their
/// column and are named in the report, each with its reason; the other two are written, by
/// `refresh_cache` and by `refresh_cache_all` alike.
fn a_roll_up_leaves_and_names_the_totals_its_column_cannot_hold<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.batch_execute(
        "CREATE TABLE tallies (id BIGINT PRIMARY KEY, hits_count INTEGER NOT NULL DEFAULT 0)",
    )
    .unwrap();
    conn.run_pending_migrations(CounterMigrations::of::<Tally>())
        .unwrap();
    let columns = |conn: &mut C| {
        let bigint = if C::NAME == "mysql" {
            "SIGNED"
        } else {
            "BIGINT"
        };
        conn.query_pairs(&format!(
            "SELECT id AS k, CAST(hits_count AS {bigint}) AS n FROM tallies ORDER BY id"
        ))
    };
    // The column claimed by a first roll-up, while it holds nothing of its own.
    conn.batch_execute("INSERT INTO tallies (id) VALUES (1), (2), (3), (4)")
        .unwrap();
    tallies_hits_slots::table
        .refresh_cache_all(100, &mut conn)
        .unwrap();
    for all in [false, true] {
        conn.batch_execute(&format!(
            "DELETE FROM tallies_hits_slots; \
             UPDATE tallies SET hits_count = CASE WHEN id = 4 THEN 9 ELSE 7 END; \
             INSERT INTO tallies_hits_slots (record_id, slot, count) \
             VALUES (1, 0, {}), (1, 1, 1), (2, 0, {}), (2, 1, 10), (3, 0, 2), (3, 1, 3)",
            i32::MAX,
            i64::MAX
        ))
        .unwrap();
        let report = if all {
            tallies_hits_slots::table.refresh_cache_all(100, &mut conn)
        } else {
            tallies_hits_slots::table.refresh_cache(&[1, 2, 3, 4], &mut conn)
        }
        .unwrap();
        assert_eq!(report.updated, 2, "records 3 and 4: {report:?}");
        assert_eq!(columns(&mut conn), [(1, 7), (2, 7), (3, 5), (4, 0)]);
        let failed: Vec<(&str, &str)> = report
            .failed
            .iter()
            .map(|f| (f.key.as_str(), f.reason.as_str()))
            .collect();
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert!(failed[0].0.contains('1'), "{failed:?}");
        assert!(
            failed[0].1.contains("2147483648") && failed[0].1.contains("32-bit column"),
            "{failed:?}"
        );
        assert!(failed[1].0.contains('2'), "{failed:?}");
        let beyond = failed[1].1;
        assert!(
            beyond.contains("9223372036854775817") || beyond.contains("outside i64"),
            "{failed:?}"
        );
    }
}

/// Text keys, their parent's key column in the database's default collation (on MySQL a
/// case-insensitive one; the counter table's is binary): the roll-up writes each total into its
/// own row, by `refresh_cache` and `refresh_cache_all`.
fn a_text_key_rolls_up_into_a_column_of_its_own_collation<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.batch_execute(
        "CREATE TABLE tags (name VARCHAR(64) PRIMARY KEY, uses_count BIGINT NOT NULL DEFAULT 0); \
         INSERT INTO tags (name) VALUES ('diesel'), ('rust'), ('sql'), ('Ünïcode \"q\"')",
    )
    .unwrap();
    conn.run_pending_migrations(CounterMigrations::of::<Tag>())
        .unwrap();
    let names = ["diesel", "rust", "sql", "Ünïcode \"q\""];
    for (i, name) in names.iter().enumerate() {
        Tag::uses_of(name.to_string())
            .add(i as i64 + 1, &mut conn)
            .unwrap();
    }
    let columns = |conn: &mut C| {
        names
            .iter()
            .map(|name| {
                conn.query_i64(&format!(
                    "SELECT uses_count AS n FROM tags WHERE name = '{}'",
                    name.replace('\'', "''")
                ))
            })
            .collect::<Vec<_>>()
    };
    let report = tags_uses_slots::table
        .refresh_cache_all(3, &mut conn)
        .unwrap();
    assert_eq!((report.updated, report.failed.len()), (4, 0), "{report:?}");
    assert_eq!(columns(&mut conn), [1, 2, 3, 4]);
    Tag::uses_of("sql".to_string()).add(10, &mut conn).unwrap();
    let keys: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let report = tags_uses_slots::table
        .refresh_cache(&keys, &mut conn)
        .unwrap();
    assert_eq!(report.updated, 1, "only the changed row: {report:?}");
    assert_eq!(columns(&mut conn), [1, 2, 13, 4]);
}

fn totals_of_100_000_keys<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    conn.transaction(|conn| {
        for key in (0..100_000).step_by(997) {
            Event::hits_of(key).add(key + 1, conn)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let keys: Vec<i64> = (0..100_000).collect();
    let totals = Event::hits_totals(&keys, &mut conn).unwrap();
    assert_eq!(totals.len(), 100_000);
    for key in keys {
        let expected = if key % 997 == 0 { key + 1 } else { 0 };
        assert_eq!(totals[&key], expected, "key {key}");
    }
}

fn string_keys_round_trip_or_are_refused<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let dialect = match C::NAME {
        "sqlite" => Dialect::Sqlite,
        "postgres" => Dialect::Postgres,
        _ => Dialect::Mysql,
    };
    let longest = "é".repeat(512); // 512 characters, 1,024 bytes: exactly the column's limit
    let mut keys = vec![
        "quote ' double \" back \\ slash".to_owned(),
        "'); DELETE FROM pages_views_slots; --".to_owned(),
        "ünïcödé 漢字 🎉 \u{200b} zero-width".to_owned(),
        String::new(),
        " leading space".to_owned(),
        "tab\tnewline\n".to_owned(),
        longest.clone(),
    ];
    // NUL: PostgreSQL text cannot hold it; the others store it exactly.
    if dialect != Dialect::Postgres {
        keys.push("nul\0inside".to_owned());
    }
    // Sentinels: rows no hostile key may touch.
    Page::views_of("sentinel").add(1000, &mut conn).unwrap();
    Post::likes_of(1).add(77, &mut conn).unwrap();
    for (i, key) in keys.iter().enumerate() {
        Page::views_of(key.as_str())
            .add(i as i64 + 1, &mut conn)
            .unwrap();
    }
    let totals = Page::views_totals(&keys, &mut conn).unwrap();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            Page::views_of(key.as_str()).total(&mut conn).unwrap(),
            i as i64 + 1,
            "{key:?}"
        );
        assert_eq!(totals[key], i as i64 + 1, "totals of {key:?}");
    }
    let rows_before = conn.query_i64("SELECT COUNT(*) AS n FROM pages_views_slots");

    let mut refused = vec![format!("{longest}x")]; // 513 characters
    match dialect {
        Dialect::Postgres => refused.push("nul\0inside".to_owned()),
        Dialect::Mysql => refused.push("trailing space ".to_owned()),
        _ => {}
    }
    for key in &refused {
        let err = Page::views_of(key.as_str())
            .increment(&mut conn)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{key:?}: {err:?}");
        assert!(err.to_string().contains("Page.views"), "{err}");
        assert!(matches!(
            Page::views_of(key.as_str()).total(&mut conn),
            Err(Error::InvalidKey { .. })
        ));
    }
    assert!(matches!(
        Page::views_totals(&refused, &mut conn),
        Err(Error::InvalidKey { .. })
    ));
    assert_eq!(
        conn.query_i64("SELECT COUNT(*) AS n FROM pages_views_slots"),
        rows_before,
        "nothing written"
    );
    assert_eq!(
        Page::views_of("sentinel").total(&mut conn).unwrap(),
        1000,
        "no other row touched"
    );
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        77,
        "no other table touched"
    );
}

fn migration_folders_refuse_bad_directories<C: TestConnection>(test: &str) {
    if TestDb::new::<C>(test).is_none() {
        return;
    }
    let migrations = CounterMigrations::of::<Meter>();
    let file = std::env::temp_dir().join(format!(
        "slotted-not-a-dir-{}-{}",
        C::NAME,
        std::process::id()
    ));
    std::fs::write(&file, "a file").unwrap();
    for (dir, says) in [
        (file.clone(), "not a directory"),
        (file.join("below-a-file"), "cannot be read"),
        (file.with_extension("missing"), "cannot be read"),
        // A directory nobody may write to, even root: writes there fail, and nothing is left.
        (std::path::PathBuf::from("/proc"), "cannot be written"),
    ] {
        let err = migrations
            .write_diesel_cli_folders(&dir, Dialect::Sqlite)
            .unwrap_err();
        assert!(matches!(&err, Error::MigrationFolder { .. }), "{err:?}");
        assert!(err.to_string().contains(says), "{}: {err}", dir.display());
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "a file",
        "untouched"
    );
    std::fs::remove_file(&file).unwrap();
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn lost_connection_names_the_counter<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    Post::likes_of(1).increment(&mut conn).unwrap();
    let kill = match C::NAME {
        "postgres" => "SELECT pg_terminate_backend(pg_backend_pid())",
        "mysql" => "KILL CONNECTION_ID()",
        other => unreachable!("registered for the servers only, not {other}"),
    };
    let _ = conn.batch_execute(kill); // fails: the session is gone
    for err in [
        Post::likes_of(1).increment(&mut conn).unwrap_err(),
        Post::likes_of(1).total(&mut conn).unwrap_err(),
    ] {
        assert!(matches!(err, Error::Database { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("Post.likes") && message.contains("posts_likes_slots"),
            "{message}"
        );
    }
}

/// No migration run: every kind of call fails with `Error::Database`, naming counter and table.
fn missing_tables_are_named_by_every_call<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let conn = &mut conn;
    let day = SystemTime::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400);
    let calls: Vec<(&str, &str, slotted_core::Result<()>)> = vec![
        (
            "Gauge.prefilled",
            "gauges_prefilled_slots",
            Gauge::prefilled_of(1).increment(conn),
        ),
        (
            "Gauge.prefilled",
            "gauges_prefilled_slots",
            Gauge::prefilled_of(1).create_slots(conn).map(drop),
        ),
        (
            "Gauge.prefilled",
            "gauges_prefilled_slots",
            Gauge::prefilled_totals(&[1, 2], conn).map(drop),
        ),
        (
            "Gauge.daily",
            "gauges_daily_slots",
            Gauge::daily_of(1).at(day).bucket_total(conn).map(drop),
        ),
        (
            "Gauge.daily",
            "gauges_daily_slots",
            Gauge::daily_of(1).total(conn).map(drop),
        ),
        (
            "Gauge.pooled",
            slotted_core::SHARED_TABLE,
            Gauge::pooled_of(1).add(3, conn),
        ),
        (
            "Gauge.pooled",
            slotted_core::SHARED_TABLE,
            Gauge::pooled_of(1).total(conn).map(drop),
        ),
    ];
    for (counter, table, result) in calls {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Database { .. }), "{counter}: {err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("`{counter}`")) && message.contains(&format!("`{table}`")),
            "{message}"
        );
    }
}
