//! The diesel CLI flow: each counter table's migration folder, and the `diesel.toml` filter that
//! keeps slotted's tables out of `diesel print-schema`, written (or checked) in one call. Every
//! file is checked before any is written, so a conflict leaves them all as they were.

use std::fs;
use std::path::Path;

use super::diesel_files::{folder_error, plan_folders, FolderState, Plan, PlannedFolder};
use super::diesel_files::{DieselCliFiles, MigrationFolder};
use super::diesel_toml::{self, DieselToml};
use super::{CounterMigrations, Table};
use crate::dialect::Dialect;
use crate::error::{Error, Result};

impl CounterMigrations {
    /// Brings a crate's diesel CLI files up to date with these counters, and says what it did:
    /// keep it in a test of the crate, and a new or changed counter's first test run writes
    /// everything `diesel migration run` and `diesel print-schema` need, and passes.
    ///
    /// - In the migrations directory (`diesel.toml`'s `[migrations_directory] dir`, relative to
    ///   `crate_dir`; `migrations` when it names none), one folder per table, as
    ///   [`write_diesel_cli_folders`](Self::write_diesel_cli_folders) writes them. The directory
    ///   is created if missing.
    /// - In `crate_dir/diesel.toml`, each print-schema configuration's
    ///   `filter = { except_tables = […] }` gets the anchored pattern of each table it lacks
    ///   (`"^posts_likes_slots$"`, and `"^slotted_columns$"`, `"^slotted_flushes$"` when the
    ///   counters need them), keeping the file's own patterns, formatting and comments; a
    ///   configuration with no filter gets one. The derive declares the counter tables, so
    ///   print-schema must leave them out (a second `table!` of the same name does not
    ///   compile), and slotted's own tables are not the application's to query. A
    ///   configuration that filters with `only_tables` is left alone
    ///   ([`PrintSchemaSection::only_tables`](super::PrintSchemaSection::only_tables)). With no `diesel.toml`, one is written as
    ///   `diesel setup` writes it (`file = "src/schema.rs"`, `dir = "migrations"`), with the
    ///   filter.
    ///
    /// When the `CI` environment variable is set (to anything but empty, `false` or `0`, as
    /// insta and trybuild read it), it writes nothing and only checks, as
    /// [`check_diesel_cli`](Self::check_diesel_cli) does: run the tests once locally and commit
    /// what they wrote. A folder of a table's name that holds other SQL is never overwritten:
    /// [`Error::DieselCliOutOfDate`], and nothing is written.
    ///
    /// ```no_run
    /// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// // In a test of your crate (`#[test]`):
    /// let counters = CounterMigrations::of::<Post>();
    /// match counters.update_diesel_cli(env!("CARGO_MANIFEST_DIR"), Dialect::Postgres) {
    ///     Ok(files) => println!("{files}"),
    ///     Err(e) => panic!("{e}"),
    /// }
    /// ```
    pub fn update_diesel_cli(
        &self,
        crate_dir: impl AsRef<Path>,
        dialect: Dialect,
    ) -> Result<DieselCliFiles> {
        if ci() {
            self.check_diesel_cli(crate_dir, dialect)
        } else {
            self.write_diesel_cli(crate_dir, dialect)
        }
    }

    /// Checks a crate's diesel CLI files as [`update_diesel_cli`](Self::update_diesel_cli)
    /// would write them, and writes nothing: [`Error::DieselCliOutOfDate`] lists every
    /// difference (each folder missing or holding other SQL, the missing migrations directory
    /// or `diesel.toml`, each print-schema configuration's missing patterns and the filter line
    /// to write). `Ok` says every file is as it should be.
    ///
    /// ```no_run
    /// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// if let Err(e) = CounterMigrations::of::<Post>().check_diesel_cli(".", Dialect::Sqlite) {
    ///     eprintln!("{e}"); // each difference on its own line
    /// }
    /// ```
    pub fn check_diesel_cli(
        &self,
        crate_dir: impl AsRef<Path>,
        dialect: Dialect,
    ) -> Result<DieselCliFiles> {
        let plan = Plan::read(self, crate_dir.as_ref(), dialect)?;
        let changes = plan.changes();
        if !changes.is_empty() {
            return Err(Error::DieselCliOutOfDate { changes, ci: ci() });
        }
        Ok(plan.report())
    }

    /// Writes what [`update_diesel_cli`](Self::update_diesel_cli) writes, whether `CI` is set
    /// or not (a tool that sets up a crate, or a test of this flow that runs under CI).
    ///
    /// ```no_run
    /// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// let files = CounterMigrations::of::<Post>().write_diesel_cli("my-app", Dialect::Mysql)?;
    /// assert!(files.migrations_dir.ends_with("migrations"));
    /// # Ok::<(), slotted_core::Error>(())
    /// ```
    pub fn write_diesel_cli(
        &self,
        crate_dir: impl AsRef<Path>,
        dialect: Dialect,
    ) -> Result<DieselCliFiles> {
        let plan = Plan::read(self, crate_dir.as_ref(), dialect)?;
        if plan.conflicts() {
            return Err(Error::DieselCliOutOfDate {
                changes: plan.changes(),
                ci: false,
            });
        }
        plan.write()
    }

    /// Writes one diesel CLI migration folder per counter table into `dir` (which must exist,
    /// typically `migrations/`), so that `diesel migration run` applies them, and returns the
    /// folders. The folder names carry the same versions as this `MigrationSource`, so a table
    /// applied one way is not applied again the other way.
    /// [`update_diesel_cli`](Self::update_diesel_cli) writes them and `diesel.toml`'s filter in
    /// one call.
    ///
    /// A folder that already holds exactly this SQL is left as it is
    /// ([`MigrationFolder::written`] is `false`). A folder of the same name with other content is
    /// an error, as is a missing or unwritable `dir`; in either case nothing is written.
    ///
    /// ```no_run
    /// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// // The dialect of the database diesel CLI will run them on: Postgres, Mysql or Sqlite.
    /// for folder in CounterMigrations::of::<Post>().write_diesel_cli_folders("migrations", Dialect::Mysql)? {
    ///     let what = if folder.written { "written" } else { "already there" };
    ///     println!("{}: {what}", folder.path.display());
    /// }
    /// # Ok::<(), slotted_core::Error>(())
    /// ```
    pub fn write_diesel_cli_folders(
        &self,
        dir: impl AsRef<Path>,
        dialect: Dialect,
    ) -> Result<Vec<MigrationFolder>> {
        let dir = dir.as_ref();
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(folder_error(dir, "is not a directory", None)),
            Err(e) => {
                return Err(folder_error(
                    dir,
                    "cannot be read; create it first (`diesel setup` makes `migrations/`)",
                    Some(e),
                ))
            }
        }
        // Check every folder before writing any, so a conflict leaves the directory untouched.
        let folders = plan_folders(&self.tables(), dir, dialect);
        if let Some(folder) = folders.iter().find(|f| f.state == FolderState::Differs) {
            return Err(folder_error(
                &folder.path,
                &format!(
                    "already exists with different content (another backend's SQL, or edited); \
                     nothing was written. Remove it, or write {} elsewhere",
                    dialect.name()
                ),
                None,
            ));
        }
        folders.into_iter().map(PlannedFolder::write).collect()
    }

    /// The `[print_schema]` filter for `diesel.toml` that keeps these tables out of
    /// `diesel print-schema`'s output: the derive declares the counter tables already, and a
    /// second `table!` of the same name would not compile (E0428); slotted's own tables
    /// (`slotted_columns`, `slotted_flushes`) are not the application's to query. Each table as
    /// an anchored regex. [`update_diesel_cli`](Self::update_diesel_cli) writes it into
    /// `diesel.toml`:
    ///
    /// ```
    /// # use slotted_core::SlottedCounter;
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// let filter = slotted_core::CounterMigrations::of::<Post>().print_schema_filter();
    /// assert_eq!(filter, r#"filter = { except_tables = ["^posts_likes_slots$"] }"#);
    /// // diesel.toml:
    /// // [print_schema]
    /// // file = "src/schema.rs"
    /// // filter = { except_tables = ["^posts_likes_slots$"] }
    /// ```
    pub fn print_schema_filter(&self) -> String {
        diesel_toml::filter_line(&self.patterns())
    }

    /// Checks that the `diesel.toml` at `path` keeps every one of these tables out of
    /// `diesel print-schema` (each print-schema configuration's `except_tables` holds each
    /// table's anchored pattern, `"^posts_likes_slots$"`), so that a counter added later cannot
    /// break the build with a second `table!`. Fails with [`Error::DieselToml`], naming the
    /// missing tables and the line to write. [`update_diesel_cli`](Self::update_diesel_cli)
    /// checks this and the migration folders, and writes what is missing, in one call.
    ///
    /// ```no_run
    /// # use slotted_core::SlottedCounter;
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// slotted_core::CounterMigrations::of::<Post>().check_diesel_toml("diesel.toml")?;
    /// # Ok::<(), slotted_core::Error>(())
    /// ```
    pub fn check_diesel_toml(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let toml_error = |reason: String, source| Error::DieselToml {
            path: path.to_owned(),
            reason,
            source,
        };
        let text = fs::read_to_string(path).map_err(|e| {
            toml_error("cannot be read (`diesel setup` writes one)".into(), Some(e))
        })?;
        let tables = self.tables();
        let mut toml = DieselToml::parse(&text).map_err(|r| toml_error(r, None))?;
        let missing: Vec<String> = toml
            .add_patterns(&self.patterns())
            .map_err(|r| toml_error(r, None))?
            .into_iter()
            .filter(|section| !section.added.is_empty())
            .map(|section| {
                format!(
                    "`diesel print-schema` would print {}, which slotted declares or owns; \
                     under [{}], write: {}",
                    join_and(&describe(&tables, &section.added)),
                    section.name,
                    section.line
                )
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(toml_error(missing.join("; "), None))
    }

    pub(super) fn patterns(&self) -> Vec<String> {
        self.tables().iter().filter_map(Table::pattern).collect()
    }
}

/// What the `CI` environment variable says, as insta reads it: set, and not empty, `false` or `0`.
fn ci() -> bool {
    is_ci(std::env::var_os("CI").as_deref())
}

fn is_ci(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The descriptions of the tables whose patterns are `patterns`.
fn describe(tables: &[Table], patterns: &[String]) -> Vec<String> {
    tables
        .iter()
        .filter(|table| table.pattern().is_some_and(|p| patterns.contains(&p)))
        .map(Table::describe)
        .collect()
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::error::DieselCliChange;
    use crate::table::TEST_SPEC;

    /// A fresh directory of its own under the system's temporary directory.
    fn crate_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("slotted-diesel-cli-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Every file under `dir`, with its content.
    fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    files.push((path.clone(), Vec::new()));
                    stack.push(path);
                } else {
                    let content = fs::read(&path).unwrap();
                    files.push((path, content));
                }
            }
        }
        files.sort();
        files
    }

    #[test]
    fn ci_is_read_as_insta_reads_it() {
        let ci = |v: Option<&str>| is_ci(v.map(std::ffi::OsStr::new));
        assert!(ci(Some("true")) && ci(Some("1")) && ci(Some("yes")));
        assert!(!ci(None) && !ci(Some("")) && !ci(Some("false")) && !ci(Some("0")));
    }

    #[test]
    fn one_call_writes_everything_and_a_second_writes_nothing() {
        let dir = crate_dir("once");
        let counters = CounterMigrations::new().with_spec(TEST_SPEC).with_buffer();
        let files = counters.write_diesel_cli(&dir, Dialect::Sqlite).unwrap();
        assert!(files.written());
        assert!(files.migrations_dir_created && files.diesel_toml_created);
        assert_eq!(files.migrations_dir, dir.join("migrations"));
        // The counter table, its index of unsettled rows, the flush log.
        assert_eq!(files.folders.len(), 3);
        assert!(files.folders.iter().all(|f| f.written && f.path.is_dir()));
        let toml = fs::read_to_string(dir.join("diesel.toml")).unwrap();
        assert!(
            toml.contains(
                "filter = { except_tables = [\n    \"^posts_likes_slots$\",\n    \"^slotted_flushes$\",\n] }\n"
            ),
            "{toml}"
        );
        assert!(
            files
                .to_string()
                .contains("written as `diesel setup` writes it"),
            "{files}"
        );

        let again = counters.write_diesel_cli(&dir, Dialect::Sqlite).unwrap();
        assert!(!again.written(), "{again}");
        assert!(
            again
                .to_string()
                .contains("leaves slotted's tables out already"),
            "{again}"
        );
        let checked = counters.check_diesel_cli(&dir, Dialect::Sqlite).unwrap();
        assert_eq!(checked, again);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_check_names_each_difference_and_writes_nothing() {
        let dir = crate_dir("check");
        let counters = CounterMigrations::new().with_spec(TEST_SPEC);
        fs::create_dir(dir.join("m")).unwrap();
        let toml = "# mine\n[print_schema]\nfile = \"src/schema.rs\"\nfilter = { except_tables = [\"^x$\"] }\n\n[migrations_directory]\ndir = \"m\"\n";
        fs::write(dir.join("diesel.toml"), toml).unwrap();
        let before = snapshot(&dir);
        let err = counters
            .check_diesel_cli(&dir, Dialect::Postgres)
            .unwrap_err();
        let Error::DieselCliOutOfDate { changes, .. } = &err else {
            panic!("{err:?}")
        };
        let folder = dir.join("m").join(Table::Counter(TEST_SPEC).folder());
        let index = dir.join("m").join(Table::Unsettled(TEST_SPEC).folder());
        assert_eq!(
            changes,
            &[
                DieselCliChange::MissingFolder(folder.clone()),
                DieselCliChange::MissingFolder(index),
                DieselCliChange::MissingPatterns {
                    path: dir.join("diesel.toml"),
                    section: "print_schema".into(),
                    tables: vec!["the counter table posts_likes_slots".into()],
                    patterns: vec!["^posts_likes_slots$".into()],
                    line: r#"filter = { except_tables = ["^x$", "^posts_likes_slots$"] }"#.into(),
                },
            ]
        );
        let message = err.to_string();
        assert_eq!(message.lines().count(), 5, "one line each:\n{message}");
        assert!(message.contains(&folder.display().to_string()), "{message}");
        assert_eq!(snapshot(&dir), before, "nothing written");

        // Written, the edit keeps the file's own lines.
        let files = counters.write_diesel_cli(&dir, Dialect::Postgres).unwrap();
        assert_eq!(files.print_schema[0].added, ["^posts_likes_slots$"]);
        assert!(!files.migrations_dir_created && !files.diesel_toml_created);
        let edited = fs::read_to_string(dir.join("diesel.toml")).unwrap();
        assert!(
            edited.starts_with("# mine\n") && edited.contains("dir = \"m\""),
            "{edited}"
        );
        counters.check_diesel_cli(&dir, Dialect::Postgres).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_with_other_sql_stops_every_write() {
        let dir = crate_dir("differs");
        let counters = CounterMigrations::new().with_spec(TEST_SPEC).with_buffer();
        counters.write_diesel_cli(&dir, Dialect::Postgres).unwrap();
        fs::remove_file(dir.join("diesel.toml")).unwrap();
        let before = snapshot(&dir);
        // Another backend's SQL in the same folders.
        let err = counters.write_diesel_cli(&dir, Dialect::Mysql).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(&err, Error::DieselCliOutOfDate { changes, ci: false } if changes.len() == 4),
            "{message}"
        );
        assert!(
            message.contains("never overwritten") && message.contains("diesel.toml is missing"),
            "{message}"
        );
        assert_eq!(
            snapshot(&dir),
            before,
            "nothing written, diesel.toml included"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn check_diesel_toml_names_what_each_table_is() {
        let dir = crate_dir("toml");
        let path = dir.join("diesel.toml");
        fs::write(&path, "[print_schema]\nfile = \"src/schema.rs\"\n").unwrap();
        let mut adopting = TEST_SPEC;
        adopting.adopt = Some(crate::table::CacheSpec {
            table: "posts",
            column: "likes_count",
            key_columns: &["id"],
            bits: 64,
        });
        let counters = CounterMigrations::new().with_spec(adopting).with_buffer();
        let message = counters.check_diesel_toml(&path).unwrap_err().to_string();
        assert!(
            message.contains(
                "would print the counter table posts_likes_slots, slotted's column-claims table \
                 slotted_columns and the buffer's log table slotted_flushes"
            ) && message.contains(&counters.print_schema_filter()),
            "{message}"
        );
        fs::write(
            &path,
            format!("[print_schema]\n{}\n", counters.print_schema_filter()),
        )
        .unwrap();
        counters.check_diesel_toml(&path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
