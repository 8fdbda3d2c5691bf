//! diesel CLI itself, on every backend: `diesel migration run` applies the folders slotted writes,
//! and `diesel print-schema` prints the tables the derive declares.
//!
//! Needs the `diesel` binary (`.ci/run` installs it); without it the test says so and passes,
//! unless `SLOTTED_REQUIRE_ALL_BACKENDS=1`, under which it fails.

use std::path::Path;
use std::process::Command;

use slotted_core::{CounterTable, Dialect, KeyKind};
use slotted_tests::keys;
use slotted_tests::models::*;
use slotted_tests::{all_migrations, backend_tests, require_all_backends, TestConnection, TestDb};

backend_tests!(diesel_cli_runs_the_folders_and_prints_the_declared_tables);

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
