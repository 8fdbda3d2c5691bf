//! The counter tables' migrations: as a Diesel `MigrationSource`, and as diesel CLI folders
//! (`diesel_cli.rs` the calls, `diesel_files.rs` what they find and write, `diesel_toml.rs` the
//! `diesel.toml` they edit).

use std::borrow::Cow;
use std::fmt;

use diesel::backend::Backend;
use diesel::connection::BoxableConnection;
use diesel::migration::{
    self, Migration, MigrationMetadata, MigrationName, MigrationSource, MigrationVersion,
};

use crate::dialect::{CounterBackend, Dialect};
use crate::key::KeyKind;
use crate::sql::adopt::COLUMNS_TABLE;
use crate::sql::flush::FLUSHES_TABLE;
use crate::table::{CounterSpec, SlottedModel, Storage};

mod diesel_cli;
mod diesel_files;
mod diesel_toml;
mod follow;

pub use crate::error::DieselCliChange;
pub use diesel_files::{DieselCliFiles, MigrationFolder, PrintSchemaSection};
pub(crate) use follow::via_owner;
pub use follow::{follow_down_sql, follow_up_sql, follow_up_sql_with, Backfill};

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
    backfill: Backfill,
}

/// One table a migration creates.
// A few per migration set, made when the migrations are listed: their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Table {
    Counter(CounterSpec),
    /// The index of a counter table's unsettled rows (those outside the settled slot, written
    /// since the record's last compaction), by which a maintainer's pass finds the records
    /// written since the last one: after every counter table (its version sorts after theirs).
    Unsettled(CounterSpec),
    /// The write-behind buffer's flush log, `slotted_flushes`.
    FlushLog,
    /// The claims of roll-ups on their cache columns, `slotted_columns`: created with any
    /// counter that has a `cache` or adopts a column.
    Columns,
    /// The triggers on a child table that keep every counter following it (no table of its
    /// own): after every counter table, so that the counter tables exist when it runs.
    Follow {
        child: &'static str,
        /// The counters that follow `child`.
        specs: Vec<CounterSpec>,
        backfill: Backfill,
    },
}

impl Table {
    fn version(&self) -> String {
        match self {
            Table::Counter(spec) => migration_version(spec),
            Table::Unsettled(spec) => unsettled_version(spec),
            Table::FlushLog => hashed_version(FLUSHES_TABLE, ""),
            Table::Columns => hashed_version(COLUMNS_TABLE, ""),
            Table::Follow { child, specs, .. } => follow_version(child, specs),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Table::Counter(spec) | Table::Unsettled(spec) => spec.table,
            Table::Follow { child, .. } => child,
            Table::FlushLog => FLUSHES_TABLE,
            Table::Columns => COLUMNS_TABLE,
        }
    }

    /// What the table is, for messages: `the counter table posts_likes_slots`.
    fn describe(&self) -> String {
        match self {
            Table::Counter(spec) if matches!(spec.storage, Storage::Shared { .. }) => {
                format!("the shared counter table {}", spec.table)
            }
            Table::Counter(spec) => format!("the counter table {}", spec.table),
            Table::Unsettled(spec) => format!("the index of unsettled rows of {}", spec.table),
            Table::FlushLog => format!("the buffer's log table {FLUSHES_TABLE}"),
            Table::Columns => format!("slotted's column-claims table {COLUMNS_TABLE}"),
            Table::Follow { child, specs, .. } => {
                let tables: Vec<&str> = specs.iter().map(|spec| spec.table).collect();
                format!("the triggers on {child} that keep {}", tables.join(", "))
            }
        }
    }

    /// Its print-schema filter pattern, anchored: `^posts_likes_slots$`. `None` for triggers,
    /// which print-schema does not print.
    fn pattern(&self) -> Option<String> {
        match self {
            Table::Follow { .. } | Table::Unsettled(_) => None,
            _ => Some(format!("^{}$", self.name())),
        }
    }

    fn folder(&self) -> String {
        let version = self.version();
        let action = match self {
            Table::Follow { .. } => "follow",
            Table::Unsettled(_) => "index",
            _ => "create",
        };
        format!(
            "{}-{}_{action}_{}",
            &version[..7],
            &version[7..],
            self.name()
        )
    }

    fn up(&self, dialect: Dialect) -> String {
        match self {
            Table::Counter(spec) => up_sql(spec, dialect),
            Table::Unsettled(spec) => unsettled_up_sql(spec, dialect),
            Table::FlushLog => crate::sql::flush::up_sql(dialect),
            Table::Columns => crate::sql::adopt::up_sql(dialect),
            Table::Follow {
                child,
                specs,
                backfill,
            } => follow_up_sql_with(child, specs, dialect, *backfill),
        }
    }

    fn down(&self, dialect: Dialect) -> String {
        match self {
            Table::Counter(spec) => down_sql(spec, dialect),
            Table::Unsettled(spec) => unsettled_down_sql(spec, dialect),
            Table::FlushLog => crate::sql::flush::down_sql(dialect),
            Table::Columns => crate::sql::adopt::down_sql(dialect),
            Table::Follow { child, specs, .. } => follow::down(child, specs, dialect),
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

    /// How the follow migrations (of the counters that follow a child table, `follow = …`)
    /// count the child rows already there: [`Backfill::Locked`] unless set. The migrations'
    /// versions do not depend on it: a database migrated one way is not migrated again when
    /// this changes.
    ///
    /// ```
    /// # use diesel::prelude::*;
    /// # use slotted_core::{Backfill, CounterMaintenance, CounterMigrations, SlottedCounter};
    /// # diesel::table! { posts { id -> Integer, } }
    /// # diesel::table! { comments { id -> Integer, post_id -> Integer, } }
    /// # diesel::allow_tables_to_appear_in_same_query!(posts, comments);
    /// #[derive(Queryable, SlottedCounter)]
    /// #[diesel(table_name = posts)]
    /// #[slotted(counter = comments, slots = 16, follow = comments(post_id))]
    /// struct Post { id: i32 }
    ///
    /// use diesel_migrations::MigrationHarness;
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel::sql_query("CREATE TABLE posts (id INTEGER PRIMARY KEY)").execute(&mut conn)?;
    /// diesel::sql_query("CREATE TABLE comments (id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL)")
    ///     .execute(&mut conn)?;
    /// diesel::sql_query("INSERT INTO comments (post_id) VALUES (1), (1), (2)").execute(&mut conn)?;
    /// // The triggers only: the three comments already there are not counted yet...
    /// conn.run_pending_migrations(CounterMigrations::of::<Post>().backfill(Backfill::Online))?;
    /// assert_eq!(Post::comments_of(1).total(&mut conn)?, 0);
    /// // ...until the repair counts them, beside any writers.
    /// let report = posts_comments_slots::table.repair_follow_all(1_000, &mut conn)?;
    /// assert_eq!(report.repaired, 2);
    /// assert_eq!(Post::comments_of(1).total(&mut conn)?, 2);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn backfill(mut self, backfill: Backfill) -> Self {
        self.backfill = backfill;
        self
    }

    /// The counters, in order.
    pub fn specs(&self) -> &[CounterSpec] {
        &self.specs
    }

    /// One entry per table: shared counters of several models share one migration.
    fn tables(&self) -> Vec<Table> {
        let mut seen = std::collections::HashSet::new();
        let counters: Vec<CounterSpec> = self
            .specs
            .iter()
            .filter(|spec| seen.insert(migration_version(spec)))
            .copied()
            .collect();
        let mut tables: Vec<Table> = counters.iter().map(|spec| Table::Counter(*spec)).collect();
        tables.extend(counters.into_iter().map(Table::Unsettled));
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
        // One migration per child table, for every counter that follows it.
        let mut children: Vec<&'static str> = Vec::new();
        for follow in self.specs.iter().filter_map(|spec| spec.follow) {
            if !children.contains(&follow.table) {
                children.push(follow.table);
            }
        }
        tables.extend(children.into_iter().map(|child| {
            Table::Follow {
                child,
                specs: self
                    .specs
                    .iter()
                    .filter(|spec| spec.follow.is_some_and(|f| f.table == child))
                    .copied()
                    .collect(),
                backfill: self.backfill,
            }
        }));
        tables
    }
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

/// The migration version of a counter table's index of unsettled rows: `slottedy` and the
/// hash of its table's version, after every counter table's (`y` sorts after every hex digit)
/// and before the triggers' (`slottedz`).
fn unsettled_version(spec: &CounterSpec) -> String {
    let hash =
        crate::table::stable_hash(format!("{}/unsettled", migration_version(spec)).as_bytes());
    format!("slottedy{hash:016x}")
}

/// The index of a counter table's unsettled rows, by which a pass finds the records written
/// since the last one (see `sql::SETTLED_SLOT`). PostgreSQL and SQLite: a partial index of the
/// rows outside the settled slot, by key; a write that updates a row's count leaves it as it
/// is (on PostgreSQL still a HOT update). MySQL, which has no partial index: by slot, then key,
/// so the rows outside the settled slot are one range of it.
pub fn unsettled_up_sql(spec: &CounterSpec, dialect: Dialect) -> String {
    let q = |ident: &str| quote(dialect, ident);
    let mut key = Vec::new();
    if matches!(spec.storage, Storage::Shared { .. }) {
        key.push(q("record_type"));
    }
    key.extend(spec.key_columns().iter().map(|column| q(column)));
    if spec.bucket.is_some() {
        key.push(q("bucket"));
    }
    let (table, index) = (q(spec.table), q(&crate::sql::unsettled_index(spec.table)));
    let slot = q("slot");
    let how = match dialect {
        Dialect::Mysql => format!("({slot}, {})", key.join(", ")),
        Dialect::Postgres | Dialect::Sqlite => format!("({}) WHERE {slot} >= 0", key.join(", ")),
    };
    format!(
        "-- slotted: the rows written since their record's last compaction, for the passes that \
         follow the changes.\nCREATE INDEX {index} ON {table} {how};\n"
    )
}

/// The `DROP INDEX` of [`unsettled_up_sql`].
pub fn unsettled_down_sql(spec: &CounterSpec, dialect: Dialect) -> String {
    let index = quote(dialect, &crate::sql::unsettled_index(spec.table));
    match dialect {
        Dialect::Mysql => format!("DROP INDEX {index} ON {};\n", quote(dialect, spec.table)),
        Dialect::Postgres | Dialect::Sqlite => format!("DROP INDEX {index};\n"),
    }
}

fn hashed_version(table: &str, layout: &str) -> String {
    let hash = crate::table::stable_hash(format!("{table}{layout}").as_bytes());
    format!("slotted{hash:016x}")
}

/// The migration version of the triggers on a child table: `slottedz` and a hash of what they
/// carry (each following counter's table, the child's columns, the filter, the record and the
/// slot count). After every counter table's version (`z` sorts after every hex digit), so the
/// counter tables exist when the triggers are made; a changed definition, or a counter more or
/// less following the table, is a new migration, which replaces the triggers and counts the
/// child rows again.
fn follow_version(child: &'static str, specs: &[CounterSpec]) -> String {
    let definition = follow::Followers::of(child, specs).definition();
    format!(
        "slottedz{:016x}",
        crate::table::stable_hash(definition.as_bytes())
    )
}

fn quote(dialect: Dialect, ident: &str) -> String {
    dialect.quote(ident)
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
