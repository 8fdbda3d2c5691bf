//! diesel CLI itself, on every backend: `diesel migration run` applies the folders slotted writes,
//! and `diesel print-schema` prints the tables the derive declares; and the flow README gives a
//! user, one `update_diesel_cli` call in a test of their crate, end to end.
//!
//! Needs the `diesel` binary (`.ci/run` installs it); without it the test says so and passes,
//! unless `SLOTTED_REQUIRE_ALL_BACKENDS=1`, under which it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use slotted_core::migration::DieselCliChange;
use slotted_core::{CounterMigrations, CounterTable, Dialect, Error, KeyKind};
use slotted_tests::keys;
use slotted_tests::models::*;
use slotted_tests::{all_migrations, backend_tests, require_all_backends, TestConnection, TestDb};

backend_tests!(
    diesel_cli_runs_the_folders_and_prints_the_declared_tables,
    one_call_sets_up_the_diesel_cli_flow,
    diesel_cli_applies_and_reverts_the_triggers_of_counters_that_follow_a_table,
);

fn dialect<C: TestConnection>() -> Dialect {
    match C::NAME {
        "sqlite" => Dialect::Sqlite,
        "postgres" => Dialect::Postgres,
        _ => Dialect::Mysql,
    }
}

fn diesel(args: &[&str], dir: &Path) -> Option<String> {
    let output = match Command::new("diesel").args(args).current_dir(dir).output() {
        Ok(output) => output,
        Err(e) if require_all_backends() => {
            panic!("diesel CLI not found ({e}); SLOTTED_REQUIRE_ALL_BACKENDS=1")
        }
        Err(e) => {
            eprintln!(
                "skipped: diesel CLI not found ({e}); `cargo install diesel_cli` to run this test"
            );
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "diesel {args:?} failed: {stderr}");
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The `table!` block print-schema printed for `table`, with Diesel's aliases mapped to the names
/// the derive uses (`Int4` is `Integer`, `Varchar` is `Text`, …) and attributes dropped.
fn printed_table(schema: &str, table: &str) -> String {
    let start = schema
        .find(&format!("    {table} ("))
        .unwrap_or_else(|| panic!("{table} not printed:\n{schema}"));
    let end = start
        + schema[start..]
            .find("\n    }")
            .expect("end of the table block");
    schema[start..end]
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("#[") && !line.is_empty())
        .map(|line| {
            [
                ("Int4", "Integer"),
                ("Int2", "SmallInt"),
                ("Unsigned<Bigint>", "Unsigned<BigInt>"),
                ("Smallint", "SmallInt"),
                ("Int8", "BigInt"),
                ("Bigint", "BigInt"),
                ("Varchar", "Text"),
            ]
            .iter()
            .fold(line.to_owned(), |line, (alias, name)| {
                line.replace(&format!("-> {alias},"), &format!("-> {name},"))
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the derive declares for a counter table, in print-schema's layout.
fn declared<T: CounterTable>() -> String {
    let spec = T::SPEC;
    let columns: Vec<String> = spec
        .key_columns()
        .iter()
        .zip(spec.key)
        .map(|(column, kind)| {
            let sql_type = match kind {
                KeyKind::SmallInt => "SmallInt",
                KeyKind::Integer => "Integer",
                KeyKind::BigInt => "BigInt",
                KeyKind::UnsignedInteger => "Unsigned<Integer>",
                KeyKind::UnsignedBigInt => "Unsigned<BigInt>",
                KeyKind::Text => "Text",
                KeyKind::Uuid => "Uuid",
                KeyKind::Date => "Date",
                other => unreachable!("a key kind this test does not know: {other:?}"),
            };
            format!("{column} -> {sql_type},")
        })
        .collect();
    format!(
        "{} ({}, slot) {{\n{}\nslot -> SmallInt,\ncount -> BigInt,",
        spec.table,
        spec.key_columns().join(", "),
        columns.join("\n")
    )
}

#[cfg(feature = "postgres")]
fn declared_uuid() -> String {
    declared::<keys::notes_claps_slots::table>()
}

#[cfg(not(feature = "postgres"))]
fn declared_uuid() -> String {
    unreachable!("PostgreSQL runs only with the postgres feature")
}

fn diesel_cli_runs_the_folders_and_prints_the_declared_tables<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("slotted-cli-{}-{}", C::NAME, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("migrations")).unwrap();
    all_migrations()
        .write_diesel_cli_folders(dir.join("migrations"), dialect::<C>())
        .unwrap();
    slotted_tests::keys::migrations()
        .write_diesel_cli_folders(dir.join("migrations"), dialect::<C>())
        .unwrap();
    // A model with `cache` and `adopt` counters: its folders add `slotted_columns`.
    let adopting = slotted_core::CounterMigrations::of::<slotted_tests::adoption::Clip>();
    adopting
        .write_diesel_cli_folders(dir.join("migrations"), dialect::<C>())
        .unwrap();

    let run = [
        "migration",
        "run",
        "--migration-dir",
        "migrations",
        "--database-url",
        &db.url,
    ];
    let Some(_) = diesel(&run, &dir) else { return };
    let again = diesel(&run, &dir).unwrap();
    assert!(
        !again.contains("Running migration"),
        "a second run applies nothing: {again}"
    );

    let schema = diesel(&["print-schema", "--database-url", &db.url], &dir).unwrap();
    let mut tables = vec![
        declared::<posts_likes_slots::table>(),
        declared::<posts_views_slots::table>(),
        declared::<events_hits_slots::table>(),
        declared::<pages_views_slots::table>(),
        declared::<keys::shelves_picks_slots::table>(),
        // Newtype keys: their inner key's column type.
        declared::<keys::articles_reads_slots::table>(),
        declared::<keys::members_mentions_slots::table>(),
        // Composite keys: a column each, of two and three.
        declared::<keys::votes_score_slots::table>(),
        declared::<keys::releases_downloads_slots::table>(),
        declared::<keys::tallies_hits_slots::table>(),
        declared::<keys::version_downloads_downloads_slots::table>(),
        // Counters that adopt a column, in their own table and the shared one.
        declared::<slotted_tests::adoption::clips_likes_slots::table>(),
    ];
    // The key types one backend maps: MySQL's unsigned integers, PostgreSQL's UUIDs.
    #[cfg(feature = "mysql")]
    if C::NAME == "mysql" {
        tables.extend([
            declared::<keys::crates_downloads_slots::table>(),
            declared::<keys::blobs_reads_slots::table>(),
        ]);
    }
    if C::NAME == "postgres" {
        tables.push(declared_uuid());
    }
    for expected in tables {
        let table = expected.split(' ').next().unwrap();
        assert_eq!(
            printed_table(&schema, table),
            expected,
            "print-schema output:\n{schema}"
        );
    }

    // A diesel.toml without the filter: the check a user keeps in a test names what is missing
    // and the line to write.
    let toml = dir.join("diesel.toml");
    std::fs::write(&toml, "[print_schema]\nfile = \"src/schema.rs\"\n").unwrap();
    let missing = all_migrations().check_diesel_toml(&toml).unwrap_err();
    let message = missing.to_string();
    assert!(
        matches!(missing, slotted_core::Error::DieselToml { .. })
            && message.contains("posts_likes_slots")
            && message.contains(&all_migrations().print_schema_filter()),
        "{message}"
    );
    // With the filter slotted prints in diesel.toml, print-schema leaves the counter tables
    // out: the derive declares them, and a second `table!` would not compile.
    std::fs::write(
        dir.join("diesel.toml"),
        format!(
            "[print_schema]\n{}\n",
            all_migrations().print_schema_filter()
        ),
    )
    .unwrap();
    all_migrations()
        .check_diesel_toml(&toml)
        .expect("the filter keeps every counter table out");
    let filtered = diesel(&["print-schema", "--database-url", &db.url], &dir).unwrap();
    assert!(
        schema.contains("slotted_columns (table_name, column_name)"),
        "the claims table:\n{schema}"
    );
    assert!(
        adopting
            .print_schema_filter()
            .contains("\"^slotted_columns$\""),
        "{}",
        adopting.print_schema_filter()
    );
    for table in [
        "posts_likes_slots",
        "posts_views_slots",
        "events_hits_slots",
        "pages_views_slots",
    ] {
        assert!(
            schema.contains(table) && !filtered.contains(table),
            "{table} filtered out:\n{filtered}"
        );
    }

    // The tables work: the counter API on what diesel CLI created.
    let mut conn = C::open(&db.url);
    Post::likes_of(1).add(4, &mut conn).unwrap();
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every file and folder under `dir`, with each file's bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
                files.push((path, Vec::new()));
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

/// The tables a `schema.rs` (or print-schema's output) declares.
fn printed_tables(schema: &str) -> Vec<String> {
    schema
        .lines()
        .filter_map(|line| line.strip_prefix("    "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_once(" (").map(|(name, _)| name))
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// The diesel CLI folder of `table`'s migration, as slotted names it.
fn folder(dir: &Path, spec: &slotted_core::CounterSpec) -> PathBuf {
    let version = slotted_core::migration::migration_version(spec);
    dir.join("migrations").join(format!(
        "{}-{}_create_{}",
        &version[..7],
        &version[7..],
        spec.table
    ))
}

/// README's flow: a crate set up by `diesel setup`, with its own migration; one call writes the
/// counters' folders and the print-schema filter, and passes on its first run; `diesel migration
/// run` then writes a `src/schema.rs` with the crate's tables and none of slotted's. A check
/// after a new counter names exactly what is missing and writes nothing.
fn one_call_sets_up_the_diesel_cli_flow<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "slotted-cli-flow-{}-{}",
        C::NAME,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    let Some(_) = diesel(&["setup", "--database-url", &db.url], &dir) else {
        return;
    };
    let setup_toml = std::fs::read_to_string(dir.join("diesel.toml")).unwrap();
    assert!(
        setup_toml.contains("file = \"src/schema.rs\""),
        "{setup_toml}"
    );
    // The crate's own tables: posts, and clips, whose counters adopt and cache its columns.
    let own = dir.join("migrations/2024-01-01-000000_create_posts");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("up.sql"),
        "CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT NOT NULL);\n\
         CREATE TABLE clips (id INTEGER PRIMARY KEY, likes_count INTEGER NOT NULL, \
         views_count BIGINT NOT NULL, saves_count BIGINT NOT NULL, \
         shares_count INTEGER NOT NULL DEFAULT 0, likes_total BIGINT NOT NULL DEFAULT 0, \
         plays_total BIGINT NOT NULL DEFAULT 0);\n",
    )
    .unwrap();
    std::fs::write(
        own.join("down.sql"),
        "DROP TABLE clips;\nDROP TABLE posts;\n",
    )
    .unwrap();

    // The test a user keeps: its first run writes everything and passes.
    let counters = CounterMigrations::of::<Post>()
        .and::<slotted_tests::adoption::Clip>()
        .with_buffer();
    let files = counters
        .write_diesel_cli(&dir, dialect::<C>())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(files.written(), "{files}");
    assert!(
        !files.diesel_toml_created && !files.migrations_dir_created,
        "{files}"
    );
    assert!(files.folders.iter().all(|f| f.written), "{files}");
    let slotted_tables = [
        "posts_likes_slots",
        "posts_views_slots",
        "clips_likes_slots",
        "clips_views_slots",
        "clips_saves_slots",
        "slotted_counters",
        "slotted_columns",
        "slotted_flushes",
    ];
    let mut added = files.print_schema[0].added.clone();
    added.sort();
    let mut expected: Vec<String> = slotted_tables.iter().map(|t| format!("^{t}$")).collect();
    expected.sort();
    assert_eq!(added, expected, "{files}");
    // A second run writes nothing, and a check passes.
    let again = counters.write_diesel_cli(&dir, dialect::<C>()).unwrap();
    assert!(!again.written(), "{again}");
    counters
        .check_diesel_cli(&dir, dialect::<C>())
        .unwrap_or_else(|e| panic!("{e}"));

    // `diesel migration run` applies the crate's migration and the counters', and rewrites
    // src/schema.rs as diesel.toml says: the crate's tables, none of slotted's.
    let run = ["migration", "run", "--database-url", &db.url];
    diesel(&run, &dir).unwrap();
    let schema = std::fs::read_to_string(dir.join("src/schema.rs")).unwrap();
    let mut printed = printed_tables(&schema);
    printed.sort();
    assert_eq!(printed, ["clips", "posts"], "src/schema.rs:\n{schema}");
    let stdout = diesel(&["print-schema", "--database-url", &db.url], &dir).unwrap();
    let mut printed = printed_tables(&stdout);
    printed.sort();
    assert_eq!(printed, ["clips", "posts"], "print-schema:\n{stdout}");
    // The tables are there, and count.
    let mut conn = C::open(&db.url);
    Post::likes_of(1).add(3, &mut conn).unwrap();
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 3);
    for table in slotted_tables {
        let rows = conn.query_i64(&format!("SELECT COUNT(*) AS n FROM {table}"));
        assert!(rows >= 0, "{table}");
    }

    // A new counter, checked (as under CI): the error names its folder and its pattern, and
    // nothing changes on disk.
    let grown = counters.clone().and::<Event>();
    let before = snapshot(&dir);
    let err = grown.check_diesel_cli(&dir, dialect::<C>()).unwrap_err();
    let message = err.to_string();
    let Error::DieselCliOutOfDate { changes, .. } = &err else {
        panic!("{err:?}")
    };
    let events = <events_hits_slots::table as CounterTable>::SPEC;
    // Its table's folder, its index's folder, its print-schema pattern.
    assert_eq!(changes.len(), 3, "{message}");
    assert_eq!(
        changes[0],
        DieselCliChange::MissingFolder(folder(&dir, &events)),
        "{message}"
    );
    assert!(
        matches!(&changes[1], DieselCliChange::MissingFolder(path)
            if path.to_string_lossy().ends_with("_index_events_hits_slots")),
        "{message}"
    );
    assert!(
        matches!(&changes[2], DieselCliChange::MissingPatterns { section, patterns, .. }
            if section == "print_schema" && patterns == &["^events_hits_slots$"]),
        "{message}"
    );
    assert!(
        message.contains(&folder(&dir, &events).display().to_string())
            && message.contains("\"^events_hits_slots$\"")
            && message.contains("nothing was written"),
        "{message}"
    );
    assert_eq!(snapshot(&dir), before, "a check writes nothing");

    // Written, `diesel migration run` applies it, and schema.rs still has only the crate's tables.
    let files = grown.write_diesel_cli(&dir, dialect::<C>()).unwrap();
    assert_eq!(
        files.folders.iter().filter(|f| f.written).count(),
        2,
        "the table's folder and its index's: {files}"
    );
    diesel(&run, &dir).unwrap();
    let schema = std::fs::read_to_string(dir.join("src/schema.rs")).unwrap();
    assert_eq!(printed_tables(&schema).len(), 2, "src/schema.rs:\n{schema}");
    Event::hits_of(7).increment(&mut conn).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Counters that follow a child table through the diesel CLI: the application's own migration
/// creates the forum's tables (with rows already in them), slotted writes its folders beside it,
/// `diesel migration run` applies the counter tables and then the triggers (whose versions sort
/// after every table's), counting the rows already there; a comment inserted afterwards is
/// counted by the triggers; `diesel migration revert` of the last folder drops one counter's
/// triggers and nothing else, and print-schema prints no slotted table.
fn diesel_cli_applies_and_reverts_the_triggers_of_counters_that_follow_a_table<
    C: TestConnection,
>(
    test: &str,
) {
    use slotted_tests::forum::{self, ForumPost, Site};
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "slotted-cli-follow-{}-{}",
        C::NAME,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let own = dir.join("migrations").join("2024-01-01-000000_forum");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("up.sql"),
        format!(
            "{}INSERT INTO comments (post_id, author_id) VALUES (1, 1), (1, 2), (2, 1);\n",
            forum::tables_sql(C::NAME)
        ),
    )
    .unwrap();
    std::fs::write(
        own.join("down.sql"),
        "DROP TABLE post_votes;\nDROP TABLE comments;\nDROP TABLE authors;\nDROP TABLE sites;\nDROP TABLE communities;\nDROP TABLE forum_posts;\n",
    )
    .unwrap();
    let written = forum::migrations()
        .write_diesel_cli_folders(dir.join("migrations"), dialect::<C>())
        .unwrap();
    let follow_folders = written
        .iter()
        .filter(|f| f.path.to_string_lossy().contains("_follow_"))
        .count();
    assert_eq!(
        follow_folders, 2,
        "a follow folder per child table (comments, post_votes): {written:?}"
    );
    let run = [
        "migration",
        "run",
        "--migration-dir",
        "migrations",
        "--database-url",
        &db.url,
    ];
    let Some(_) = diesel(&run, &dir) else { return };
    let mut conn = C::open(&db.url);
    assert_eq!(
        ForumPost::comments_of(1).total(&mut conn).unwrap(),
        2,
        "the backfill"
    );
    assert_eq!(Site::comments_of(1).total(&mut conn).unwrap(), 3);
    conn.batch_execute("INSERT INTO comments (post_id, author_id) VALUES (1, 3)")
        .unwrap();
    assert_eq!(
        ForumPost::comments_of(1).total(&mut conn).unwrap(),
        3,
        "a trigger"
    );
    assert_eq!(Site::comments_of(1).total(&mut conn).unwrap(), 4);
    let schema = diesel(&["print-schema", "--database-url", &db.url], &dir).unwrap();
    assert!(schema.contains("comments (id)"), "{schema}");

    // The last folder (the highest version) is a follow folder: reverting it drops that
    // child table's triggers only.
    let revert = [
        "migration",
        "revert",
        "--migration-dir",
        "migrations",
        "--database-url",
        &db.url,
    ];
    diesel(&revert, &dir).unwrap();
    // comments' folder holds 6 triggers (3 on comments, 3 on forum_posts for the count through
    // it), post_votes' 3: the one folder reverted drops its own and keeps the other's.
    let kept = (
        forum::follow_triggers_named(&mut conn, "slotted_follow_comments"),
        forum::follow_triggers_named(&mut conn, "slotted_follow_post_votes"),
    );
    assert!(
        kept == (6, 0) || kept == (0, 3),
        "one child table's triggers dropped, the other's kept: {kept:?}"
    );
    let comments = conn.query_i64(if C::NAME == "mysql" {
        "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM comments"
    } else {
        "SELECT COUNT(*) AS n FROM comments"
    });
    assert_eq!(comments, 4, "the application's rows are untouched");
    std::fs::remove_dir_all(&dir).unwrap();
}
