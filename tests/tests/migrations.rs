//! The counter tables' migrations on every backend: through `MigrationHarness`, and as diesel CLI
//! folders applied by `FileBasedMigrations`, the loader diesel CLI itself uses.

use std::path::PathBuf;

use diesel_migrations::FileBasedMigrations;
use slotted_core::{CounterMigrations, Dialect, Error};
use slotted_tests::models::*;
use slotted_tests::{all_migrations, backend_tests, Column, TestConnection, TestDb};

backend_tests!(
    up_down_up_with_expected_schema,
    running_twice_is_a_no_op,
    cli_folders_apply_with_diesel_file_migrations,
    cli_folders_and_harness_share_versions,
    cli_folders_refuse_different_content,
);

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
    assert_eq!(applied.len(), 4, "one migration per counter table");
    assert_schema(&mut conn);
    Post::likes_of(1).add(3, &mut conn).unwrap();

    let reverted = conn.revert_all_migrations(all_migrations()).unwrap();
    assert_eq!(reverted.len(), 4);
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
    assert_eq!(folders.len(), 4);
    for folder in &folders {
        let up = std::fs::read_to_string(folder.join("up.sql")).unwrap();
        let down = std::fs::read_to_string(folder.join("down.sql")).unwrap();
        assert!(
            up.contains("CREATE TABLE") && down.contains("DROP TABLE"),
            "{}",
            folder.display()
        );
    }
    // Writing the same folders again is a no-op.
    assert_eq!(
        all_migrations()
            .write_diesel_cli_folders(&dir, dialect::<C>())
            .unwrap(),
        folders
    );

    let mut conn = C::open(&db.url);
    let source = FileBasedMigrations::from_path(&dir).unwrap();
    assert_eq!(conn.run_pending_migrations(source).unwrap().len(), 4);
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
    assert_eq!(conn.revert_all_migrations(source).unwrap().len(), 4);
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
    let up = folders[0].join("up.sql");
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
            matches!(&err, Error::MigrationFolder { path, .. } if *path == folders[0]),
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
        entries, 2,
        "no folder of the other models was written either"
    );

    let missing = dir.join("does-not-exist");
    let err = all_migrations()
        .write_diesel_cli_folders(&missing, dialect::<C>())
        .unwrap_err();
    assert!(err.to_string().contains("does-not-exist"), "{err}");
    assert!(!missing.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
