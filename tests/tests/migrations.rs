//! The counter tables' migrations on every backend: through `MigrationHarness`, and as diesel CLI
//! folders applied by `FileBasedMigrations`, the loader diesel CLI itself uses.

use std::path::PathBuf;

use diesel_migrations::FileBasedMigrations;
use slotted_core::{CounterMigrations, Dialect, Error, SlottedCounter};
use slotted_tests::models::*;
use slotted_tests::{all_migrations, backend_tests, Column, TestConnection, TestDb};

backend_tests! {
    all: [
        up_down_up_with_expected_schema,
        running_twice_is_a_no_op,
        cli_folders_apply_with_diesel_file_migrations,
        cli_folders_and_harness_share_versions,
        cli_folders_refuse_different_content,
        longest_string_keys_migrate_and_round_trip,
    ],
    postgres: [incompressible_keys_past_the_btree_limit_are_database_errors],
}

/// A `String` key at the longest `max_key_length` each shape of table allows: InnoDB indexes at
/// most 3,072 bytes a key, 4 a `utf8mb4` character, and `slot` (2 bytes) and `bucket` (8) take
/// their share. One character more is a compile error (`tests/ui/max-key-length-too-long*.rs`).
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = urls, primary_key(url))]
#[slotted(counter = hits, slots = 2, max_key_length = 767)]
#[slotted(counter = daily, slots = 2, bucket = day, max_key_length = 765)]
pub struct Url {
    pub url: String,
}

const _: () = assert!(
    slotted_core::MAX_KEY_LENGTH == 767 && slotted_core::MAX_BUCKETED_KEY_LENGTH == 765,
    "the attributes of `Url` are the limits"
);

fn longest_string_keys_migrate_and_round_trip<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(CounterMigrations::of::<Url>())
        .expect("a counter table at the longest key migrates");
    if C::NAME == "mysql" {
        assert_eq!(conn.columns("urls_hits_slots")[0].sql_type, "varchar(767)");
        assert_eq!(conn.columns("urls_daily_slots")[0].sql_type, "varchar(765)");
    }

    // 4-byte characters: the most bytes a key of this length can take.
    let longest = "😀".repeat(767);
    let url = Url {
        url: longest.clone(),
    };
    url.hits().add(3, &mut conn).unwrap();
    Url::hits_of(longest.as_str()).increment(&mut conn).unwrap();
    assert_eq!(url.hits().total(&mut conn).unwrap(), 4);
    let totals = Url::hits_totals(std::slice::from_ref(&longest), &mut conn).unwrap();
    assert_eq!(totals[&longest], 4, "the key comes back whole");

    let longest_bucketed = "😀".repeat(765);
    Url::daily_of(longest_bucketed.as_str())
        .add(2, &mut conn)
        .unwrap();
    assert_eq!(
        Url::daily_of(longest_bucketed.as_str())
            .bucket_total(&mut conn)
            .unwrap(),
        2
    );
    let totals = Url::daily_totals(std::slice::from_ref(&longest_bucketed), &mut conn).unwrap();
    assert_eq!(totals[&longest_bucketed], 2);

    // One character more is refused before anything is sent, on every backend.
    for err in [
        Url::hits_of("😀".repeat(768)).increment(&mut conn),
        Url::daily_of("😀".repeat(766)).increment(&mut conn),
    ] {
        assert!(matches!(err, Err(Error::InvalidKey { .. })), "{err:?}");
    }
}

/// `n` distinct-looking 4-byte characters that pglz cannot compress (`'😀'` repeated can:
/// PostgreSQL stores a compressed index entry, and such a key fits at any length).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn incompressible_key(n: u64) -> String {
    (1..=n)
        .map(|i| {
            let offset = (i * 2_654_435_761 + 97) % 1_048_000;
            char::from_u32(0x1_0000 + offset as u32).expect("a supplementary-plane character")
        })
        .collect()
}

/// PostgreSQL's `TEXT` key has no declared length, but a btree entry holds at most 2,704 bytes:
/// an incompressible key of more than 2,690 bytes (672 four-byte characters; 2,676 bytes or 669
/// characters beside a `bucket`) fails at the database, within the attribute's
/// `max_key_length`, as a `Database` error, not a panic. The same as `psql` measured.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn incompressible_keys_past_the_btree_limit_are_database_errors<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(CounterMigrations::of::<Url>())
        .unwrap();
    for (fits, too_long, bucketed) in [(672, 673, false), (669, 670, true)] {
        let add = |key: String, conn: &mut C| {
            if bucketed {
                Url::daily_of(key).increment(conn)
            } else {
                Url::hits_of(key).increment(conn)
            }
        };
        add(incompressible_key(fits), &mut conn).expect("an entry within 2,704 bytes");
        let err = add(incompressible_key(too_long), &mut conn).unwrap_err();
        assert!(
            matches!(err, Error::Database { .. })
                && err
                    .to_string()
                    .contains("exceeds btree version 4 maximum 2704"),
            "{err}"
        );
    }
}

fn dialect<C: TestConnection>() -> Dialect {
    match C::NAME {
        "sqlite" => Dialect::Sqlite,
        "postgres" => Dialect::Postgres,
        _ => Dialect::Mysql,
    }
}

fn col(name: &str, sql_type: &str) -> Column {
    Column {
        name: name.into(),
        sql_type: sql_type.into(),
        not_null: 1,
    }
}

/// The columns each backend reports for a counter table keyed by `key_type`.
fn expected<C: TestConnection>(key_type: &str) -> Vec<Column> {
    let (small, big) = match C::NAME {
        "mysql" => ("smallint(6)", "bigint(20)"),
        _ => ("smallint", "bigint"),
    };
    vec![
        col("record_id", key_type),
        col("slot", small),
        col("count", big),
    ]
}

fn assert_schema<C: TestConnection>(conn: &mut C) {
    let (int, text) = match C::NAME {
        "sqlite" => ("integer", "text"),
        "postgres" => ("integer", "text"),
        _ => ("int(11)", "varchar(512)"),
    };
    let bigint = if C::NAME == "mysql" {
        "bigint(20)"
    } else {
        "bigint"
    };
    for (table, key) in [
        ("posts_likes_slots", int),
        ("posts_views_slots", int),
        ("events_hits_slots", bigint),
        ("pages_views_slots", text),
    ] {
        assert_eq!(
            conn.columns(table),
            expected::<C>(key),
            "columns of {table}"
        );
        assert_eq!(
            conn.primary_key(table),
            ["record_id", "slot"],
            "primary key of {table}"
        );
    }
}

fn up_down_up_with_expected_schema<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let applied = conn.run_pending_migrations(all_migrations()).unwrap();
    assert_eq!(
        applied.len(),
        8,
        "one migration per counter table, and one per table's index of unsettled rows"
    );
    assert_schema(&mut conn);
    Post::likes_of(1).add(3, &mut conn).unwrap();

    let reverted = conn.revert_all_migrations(all_migrations()).unwrap();
    assert_eq!(reverted.len(), 8);
    for table in [
        "posts_likes_slots",
        "posts_views_slots",
        "events_hits_slots",
        "pages_views_slots",
    ] {
        assert!(!conn.table_exists(table), "{table} dropped");
    }

    conn.run_pending_migrations(all_migrations()).unwrap();
    assert_schema(&mut conn);
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        0,
        "a new, empty table"
    );
}

fn running_twice_is_a_no_op<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    Post::likes_of(1).increment(&mut conn).unwrap();
    assert!(conn
        .run_pending_migrations(all_migrations())
        .unwrap()
        .is_empty());
    assert!(!conn
        .has_pending_migration(CounterMigrations::of::<Post>())
        .unwrap());
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        1,
        "nothing re-created"
    );
}

/// A fresh, empty folder for one test's migrations.
fn migrations_dir(test: &str, backend: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "slotted-migrations-{backend}-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cli_folders_apply_with_diesel_file_migrations<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let dir = migrations_dir(test, C::NAME);
    let folders = all_migrations()
        .write_diesel_cli_folders(&dir, dialect::<C>())
        .unwrap();
    assert_eq!(folders.len(), 8);
    assert!(folders.iter().all(|f| f.written), "{folders:?}");
    let again = all_migrations()
        .write_diesel_cli_folders(&dir, dialect::<C>())
        .unwrap();
    assert!(again.iter().all(|f| !f.written), "left alone: {again:?}");
    let folders: Vec<_> = folders.into_iter().map(|f| f.path).collect();
    for folder in &folders {
        let up = std::fs::read_to_string(folder.join("up.sql")).unwrap();
        let down = std::fs::read_to_string(folder.join("down.sql")).unwrap();
        let table = up.contains("CREATE TABLE") && down.contains("DROP TABLE");
        let index = up.contains("CREATE INDEX") && down.contains("DROP INDEX");
        assert!(table || index, "{}", folder.display());
    }
    // Writing the same folders again is a no-op.
    assert_eq!(
        all_migrations()
            .write_diesel_cli_folders(&dir, dialect::<C>())
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect::<Vec<_>>(),
        folders
    );

    let mut conn = C::open(&db.url);
    let source = FileBasedMigrations::from_path(&dir).unwrap();
    assert_eq!(conn.run_pending_migrations(source).unwrap().len(), 8);
    assert_schema(&mut conn);
    Page::views_of("https://example.com/")
        .add(2, &mut conn)
        .unwrap();
    assert_eq!(
        Page::views_of("https://example.com/")
            .total(&mut conn)
            .unwrap(),
        2
    );

    let source = FileBasedMigrations::from_path(&dir).unwrap();
    assert_eq!(conn.revert_all_migrations(source).unwrap().len(), 8);
    assert!(!conn.table_exists("pages_views_slots"));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cli_folders_and_harness_share_versions<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let dir = migrations_dir(test, C::NAME);
    all_migrations()
        .write_diesel_cli_folders(&dir, dialect::<C>())
        .unwrap();
    let source = FileBasedMigrations::from_path(&dir).unwrap();
    assert!(
        conn.run_pending_migrations(source).unwrap().is_empty(),
        "tables applied by the harness are not applied again from the CLI folders"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cli_folders_refuse_different_content<C: TestConnection>(test: &str) {
    if TestDb::new::<C>(test).is_none() {
        return;
    }
    let dir = migrations_dir(test, C::NAME);
    let folders = CounterMigrations::of::<Post>()
        .write_diesel_cli_folders(&dir, dialect::<C>())
        .unwrap();
    let up = folders[0].path.join("up.sql");
    std::fs::write(&up, "-- edited by hand\n").unwrap();
    let other = match C::NAME {
        "mysql" => Dialect::Postgres,
        _ => Dialect::Mysql,
    };
    for dialect in [dialect::<C>(), other] {
        let err = all_migrations()
            .write_diesel_cli_folders(&dir, dialect)
            .unwrap_err();
        assert!(
            matches!(&err, Error::MigrationFolder { path, .. } if *path == folders[0].path),
            "{err:?}"
        );
        assert!(err.to_string().contains("different content"), "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(&up).unwrap(),
        "-- edited by hand\n",
        "nothing overwritten"
    );
    let entries = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        entries, 4,
        "Post's two tables and their indexes: no folder of the other models was written either"
    );

    let missing = dir.join("does-not-exist");
    let err = all_migrations()
        .write_diesel_cli_folders(&missing, dialect::<C>())
        .unwrap_err();
    assert!(err.to_string().contains("does-not-exist"), "{err}");
    assert!(!missing.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
