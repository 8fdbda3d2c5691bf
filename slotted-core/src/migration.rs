//! The counter tables' migrations: as a Diesel `MigrationSource`, and as diesel CLI folders.

use std::borrow::Cow;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use diesel::backend::Backend;
use diesel::connection::BoxableConnection;
use diesel::migration::{
    self, Migration, MigrationMetadata, MigrationName, MigrationSource, MigrationVersion,
};

use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::key::KeyKind;
use crate::sql::adopt::COLUMNS_TABLE;
use crate::sql::flush::FLUSHES_TABLE;
use crate::table::{CounterSpec, SlottedModel, Storage};

/// The migrations of a set of counter tables, one migration per table.
///
/// ```
/// # use diesel::prelude::*;
/// # use slotted_core::SlottedCounter;
/// # diesel::table! { posts { id -> Integer, } }
/// #[derive(Queryable, SlottedCounter)]
/// #[slotted(counter = likes, slots = 16)]
/// struct Post { id: i32 }
///
/// use diesel_migrations::MigrationHarness;
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?;
/// conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?; // a no-op
/// Post::likes_of(1).increment(&mut conn)?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterMigrations {
    specs: Vec<CounterSpec>,
    flush_log: bool,
}

/// One table a migration creates.
#[derive(Debug, Clone, Copy)]
enum Table {
    Counter(CounterSpec),
    /// The write-behind buffer's flush log, `slotted_flushes`.
    FlushLog,
    /// The claims of roll-ups on their cache columns, `slotted_columns`: created with any
    /// counter that has a `cache` or adopts a column.
    Columns,
}

impl Table {
    fn version(&self) -> String {
        match self {
            Table::Counter(spec) => migration_version(spec),
            Table::FlushLog => hashed_version(FLUSHES_TABLE, ""),
            Table::Columns => hashed_version(COLUMNS_TABLE, ""),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Table::Counter(spec) => spec.table,
            Table::FlushLog => FLUSHES_TABLE,
            Table::Columns => COLUMNS_TABLE,
        }
    }

    fn folder(&self) -> String {
        let version = self.version();
        format!("{}-{}_create_{}", &version[..7], &version[7..], self.name())
    }

    fn up(&self, dialect: Dialect) -> String {
        match self {
            Table::Counter(spec) => up_sql(spec, dialect),
            Table::FlushLog => crate::sql::flush::up_sql(dialect),
            Table::Columns => crate::sql::adopt::up_sql(dialect),
        }
    }

    fn down(&self, dialect: Dialect) -> String {
        match self {
            Table::Counter(spec) => down_sql(spec, dialect),
            Table::FlushLog => crate::sql::flush::down_sql(dialect),
            Table::Columns => crate::sql::adopt::down_sql(dialect),
        }
    }
}

impl CounterMigrations {
    /// No migrations yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The migrations of every counter of model `M`.
    pub fn of<M: SlottedModel>() -> Self {
        Self::new().and::<M>()
    }

    /// Adds the migrations of every counter of model `M`.
    pub fn and<M: SlottedModel>(mut self) -> Self {
        self.specs.extend_from_slice(M::COUNTERS);
        self
    }

    /// Adds one counter table.
    pub fn with_spec(mut self, spec: CounterSpec) -> Self {
        self.specs.push(spec);
        self
    }

    /// Adds the table the write-behind buffer ([`CounterBuffer`](crate::buffer::CounterBuffer)) logs its
    /// flushes in, `slotted_flushes (id, flushed_at)`: a buffer needs it, once per database,
    /// whatever counters it flushes.
    pub fn with_buffer(mut self) -> Self {
        self.flush_log = true;
        self
    }

    /// The counters, in order.
    pub fn specs(&self) -> &[CounterSpec] {
        &self.specs
    }

    /// One entry per table: shared counters of several models share one migration.
    fn tables(&self) -> Vec<Table> {
        let mut seen = std::collections::HashSet::new();
        let mut tables: Vec<Table> = self
            .specs
            .iter()
            .filter(|spec| seen.insert(migration_version(spec)))
            .map(|spec| Table::Counter(*spec))
            .collect();
        if self
            .specs
            .iter()
            .any(|spec| spec.cache.is_some() || spec.adopt.is_some())
        {
            tables.push(Table::Columns);
        }
        if self.flush_log {
            tables.push(Table::FlushLog);
        }
        tables
    }

    /// Writes one diesel CLI migration folder per counter table into `dir` (which must exist,
    /// typically `migrations/`), so that `diesel migration run` applies them, and returns the
    /// folders. The folder names carry the same versions as this `MigrationSource`, so a table
    /// applied one way is not applied again the other way.
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
        let folder_error =
            |path: &Path, reason: String, source: Option<io::Error>| Error::MigrationFolder {
                path: path.to_owned(),
                reason,
                source,
            };
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(folder_error(dir, "is not a directory".into(), None)),
            Err(e) => {
                return Err(folder_error(
                    dir,
                    "cannot be read; create it first (`diesel setup` makes `migrations/`)".into(),
                    Some(e),
                ))
            }
        }
        // Check every folder before writing any, so a conflict leaves the directory untouched.
        let tables = self.tables();
        let mut plan = Vec::with_capacity(tables.len());
        for table in tables {
            let path = dir.join(table.folder());
            let (up, down) = (table.up(dialect), table.down(dialect));
            let existing = (
                fs::read_to_string(path.join("up.sql")),
                fs::read_to_string(path.join("down.sql")),
            );
            let write = match existing {
                (Ok(u), Ok(d)) if u == up && d == down => false,
                _ if path.exists() => {
                    return Err(folder_error(
                        &path,
                        format!(
                            "already exists with different content (another backend's SQL, or edited); \
                             nothing was written. Remove it, or write {} elsewhere",
                            dialect.name()
                        ),
                        None,
                    ))
                }
                _ => true,
            };
            plan.push((path, up, down, write));
        }
        let mut written = Vec::with_capacity(plan.len());
        for (path, up, down, write) in plan {
            if write {
                write_folder(&path, &up, &down)
                    .map_err(|e| folder_error(&path, "cannot be written".into(), Some(e)))?;
            }
            written.push(MigrationFolder {
                path,
                written: write,
            });
        }
        Ok(written)
    }
}

impl CounterMigrations {
    /// The `[print_schema]` filter for `diesel.toml` that keeps these counter tables out of
    /// `diesel print-schema`'s output: the derive declares them already, and a second `table!`
    /// of the same name would not compile (E0428). Each table as an anchored regex:
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
        let tables: Vec<String> = self
            .tables()
            .iter()
            .map(|table| format!("\"^{}$\"", table.name()))
            .collect();
        format!("filter = {{ except_tables = [{}] }}", tables.join(", "))
    }

    /// Checks that the `diesel.toml` at `path` keeps every one of these counter tables out of
    /// `diesel print-schema` (each table's anchored pattern, `"^posts_likes_slots$"`, is in it),
    /// so that a counter added later cannot break the build with a second `table!`. Fails with
    /// [`Error::DieselToml`], naming the missing tables and the line to write
    /// ([`print_schema_filter`](Self::print_schema_filter)). Keep it in a test beside
    /// [`write_diesel_cli_folders`](Self::write_diesel_cli_folders):
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
        let text = fs::read_to_string(path).map_err(|e| Error::DieselToml {
            path: path.to_owned(),
            reason: "cannot be read (`diesel setup` writes one)".into(),
            source: Some(e),
        })?;
        let missing: Vec<&str> = self
            .tables()
            .iter()
            .map(|table| table.name())
            .filter(|name| !text.contains(&format!("\"^{name}$\"")))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::DieselToml {
            path: path.to_owned(),
            reason: format!(
                "`diesel print-schema` would print the counter table{} {}, which the derive \
                 declares already; under `[print_schema]`, write: {}",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", "),
                self.print_schema_filter()
            ),
            source: None,
        })
    }
}

/// A diesel CLI migration folder, as [`CounterMigrations::write_diesel_cli_folders`] left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationFolder {
    /// `migrations/{version}_create_{table}`.
    pub path: PathBuf,
    /// `true` when this call wrote it; `false` when it held exactly this SQL already and was left
    /// alone.
    pub written: bool,
}

/// Writes into a hidden sibling, then renames: a folder is either whole or absent.
fn write_folder(path: &Path, up: &str, down: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("migration");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir(&tmp)?;
    let result = fs::write(tmp.join("up.sql"), up)
        .and_then(|()| fs::write(tmp.join("down.sql"), down))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// The migration version of a counter table: `slotted` and a hash of the table name, stable
/// across releases and backends, and free of `_`, which diesel CLI reads as the version's end.
pub fn migration_version(spec: &CounterSpec) -> String {
    // The layout is part of the identity: a counter that gains buckets is a new table, not a
    // table marked as applied. FNV-1a, 64 bit: fixed forever, unlike `std`'s hasher.
    // A composite key's column count too; a one-column key adds nothing, so the versions of
    // earlier releases stand.
    let mut layout = String::new();
    if spec.bucket.is_some() {
        layout.push_str("/bucket");
    }
    if spec.key.len() > 1 {
        layout.push_str(&format!("/key{}", spec.key.len()));
    }
    hashed_version(spec.table, &layout)
}

fn hashed_version(table: &str, layout: &str) -> String {
    let hash = table
        .bytes()
        .chain(layout.bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("slotted{hash:016x}")
}

fn quote(dialect: Dialect, ident: &str) -> String {
    match dialect {
        Dialect::Mysql => format!("`{}`", ident.replace('`', "``")),
        Dialect::Sqlite | Dialect::Postgres => format!("\"{}\"", ident.replace('"', "\"\"")),
    }
}

/// The `CREATE TABLE` of a counter table on one backend.
pub fn up_sql(spec: &CounterSpec, dialect: Dialect) -> String {
    let key_type = |kind: KeyKind| -> Cow<'static, str> {
        match (kind, dialect) {
            (KeyKind::SmallInt, _) => "SMALLINT".into(),
            (KeyKind::Integer, Dialect::Mysql) => "INT".into(),
            (KeyKind::Integer, _) => "INTEGER".into(),
            (KeyKind::BigInt, _) => "BIGINT".into(),
            (KeyKind::UnsignedInteger, Dialect::Mysql) => "INT UNSIGNED".into(),
            (KeyKind::UnsignedBigInt, Dialect::Mysql) => "BIGINT UNSIGNED".into(),
            (KeyKind::Uuid, Dialect::Postgres) => "UUID".into(),
            // Column types Diesel maps on one backend only (`Unsigned<…>` on MySQL, `Uuid` on
            // PostgreSQL): elsewhere a column that holds every such key, though the counter's calls
            // there fail, naming the backend the key type needs.
            (KeyKind::UnsignedInteger, _) => "BIGINT".into(),
            (KeyKind::UnsignedBigInt, _) => "NUMERIC(20)".into(),
            (KeyKind::Uuid, Dialect::Mysql) => "BINARY(16)".into(),
            (KeyKind::Uuid, _) => "BLOB".into(),
            // A binary collation: keys compare byte for byte, as in Rust.
            (KeyKind::Text, Dialect::Mysql) => format!(
                "VARCHAR({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                spec.max_key_length
            )
            .into(),
            (KeyKind::Text, _) => "TEXT".into(),
            (KeyKind::Date, _) => "DATE".into(),
        }
    };
    let q = |ident| quote(dialect, ident);
    let mut columns = Vec::new();
    let mut key = Vec::new();
    if matches!(spec.storage, Storage::Shared { .. }) {
        let text = if dialect == Dialect::Mysql {
            "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        } else {
            "TEXT"
        };
        columns.push(format!("{} {text} NOT NULL", q("record_type")));
        key.push(q("record_type"));
    }
    for (column, kind) in spec.key_columns().iter().zip(spec.key_column_kinds()) {
        columns.push(format!("{} {} NOT NULL", q(column), key_type(*kind)));
        key.push(q(column));
    }
    if spec.bucket.is_some() {
        columns.push(format!("{} BIGINT NOT NULL", q("bucket")));
        key.push(q("bucket"));
    }
    columns.push(format!("{} SMALLINT NOT NULL", q("slot")));
    key.push(q("slot"));
    columns.push(format!("{} BIGINT NOT NULL", q("count")));
    let suffix = match dialect {
        // The primary key is the table: no hidden rowid beside it.
        Dialect::Sqlite => " WITHOUT ROWID",
        Dialect::Mysql => " ENGINE=InnoDB",
        Dialect::Postgres => "",
    };
    format!(
        "-- slotted: counter slots; a record's count is the SUM of its rows.\n\
         CREATE TABLE {table} (\n    {columns},\n    PRIMARY KEY ({key})\n){suffix};\n",
        table = q(spec.table),
        columns = columns.join(",\n    "),
        key = key.join(", "),
    )
}

/// The `CREATE TABLE` of `slotted_columns` on one backend: the columns of models' tables that
/// roll-ups own (created by [`CounterMigrations`] with any counter that has `cache` or `adopt`).
pub fn columns_up_sql(dialect: Dialect) -> String {
    crate::sql::adopt::up_sql(dialect)
}

/// The `DROP TABLE` of a counter table on one backend.
pub fn down_sql(spec: &CounterSpec, dialect: Dialect) -> String {
    format!("DROP TABLE {};\n", quote(dialect, spec.table))
}

struct CounterMigration {
    table: Table,
    name: CounterMigrationName,
}

struct CounterMigrationName {
    version: String,
    folder: String,
}

impl fmt::Display for CounterMigrationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.folder)
    }
}

impl MigrationName for CounterMigrationName {
    fn version(&self) -> MigrationVersion<'_> {
        MigrationVersion::from(self.version.as_str())
    }
}

impl MigrationMetadata for CounterMigration {}

impl<DB: CounterBackend> Migration<DB> for CounterMigration {
    fn run(&self, conn: &mut dyn BoxableConnection<DB>) -> migration::Result<()> {
        Ok(conn.batch_execute(&self.table.up(DB::DIALECT))?)
    }

    fn revert(&self, conn: &mut dyn BoxableConnection<DB>) -> migration::Result<()> {
        Ok(conn.batch_execute(&self.table.down(DB::DIALECT))?)
    }

    fn metadata(&self) -> &dyn MigrationMetadata {
        self
    }

    fn name(&self) -> &dyn MigrationName {
        &self.name
    }
}

impl<DB: CounterBackend + Backend> MigrationSource<DB> for CounterMigrations {
    fn migrations(&self) -> migration::Result<Vec<Box<dyn Migration<DB>>>> {
        Ok(self
            .tables()
            .into_iter()
            .map(|table| {
                let name = CounterMigrationName {
                    version: table.version(),
                    folder: table.folder(),
                };
                let migration = CounterMigration { table, name };
                Box::new(migration) as Box<dyn Migration<DB>>
            })
            .collect())
    }
}
