//! The one error type of the runtime.

use std::path::PathBuf;

/// What went wrong in a counter call.
///
/// Every variant that concerns a counter names it (`Post.likes`) and its table, so a log line
/// alone says where to look.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed the statement: table missing (migration not run),
    /// connection lost, deadlock, serialization failure, and so on.
    #[error("counter `{counter}` (table `{table}`): {source}")]
    Database {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// Diesel's error, which keeps the database's own message.
        #[source]
        source: diesel::result::Error,
    },

    /// The delta would push one slot outside `i64`. Nothing was written, and on every backend the
    /// caller's transaction is still usable.
    #[error(
        "counter `{counter}` (table `{table}`): adding {delta} to key {key} would overflow a slot \
         (i64); nothing was written"
    )]
    Overflow {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The record key, formatted with `Debug`.
        key: String,
        /// The delta that was refused.
        delta: i64,
    },

    /// Whether this add was written is unknown, so retrying it may count it twice. Two causes:
    ///
    /// - The database answered the write with a reply that cannot be its own: MySQL and MariaDB
    ///   reported no row affected by an upsert, which they never do for it (an overflow is error
    ///   1690 there, reported as [`Error::Overflow`]). The reply belongs to another statement: the
    ///   connection is out of step with its server, typically because a query on it was cut off
    ///   (a dropped future) before its reply was read.
    /// - Outside a transaction, the connection was lost with the write in flight (a server
    ///   crash, a failover): it may have been committed before the server went.
    ///
    /// The connection is marked broken: a pool (r2d2, bb8, deadpool) discards it instead of
    /// handing it out again.
    #[error(
        "counter `{counter}` (table `{table}`): adding {delta} to key {key} may or may not have \
         been written: {reason}; the connection was marked broken, do not reuse it"
    )]
    OutcomeUnknown {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The record key, formatted with `Debug`.
        key: String,
        /// The delta whose outcome is unknown.
        delta: i64,
        /// What the database replied, and why that says nothing about this write.
        reason: String,
    },

    /// The sum of a record's slots is outside `i64` (each slot is within it, their sum is not).
    #[error(
        "counter `{counter}` (table `{table}`): the total of key {key} is {total}, outside i64"
    )]
    TotalOutOfRange {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The record key, formatted with `Debug`.
        key: String,
        /// The exact total, in decimal.
        total: String,
    },

    /// The key cannot be stored exactly on this backend (too long for the column, a NUL byte on
    /// PostgreSQL, trailing spaces under MySQL's PAD SPACE collation). Nothing was written.
    #[error("counter `{counter}` (table `{table}`): key {key} cannot be stored: {reason}")]
    InvalidKey {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The key, formatted with `Debug` and cut to 80 characters.
        key: String,
        /// Why, and what the limit is.
        reason: String,
    },

    /// A roll-up would overwrite counts that a column of the model's table holds of its own: the
    /// column (`cache = …`) is not yet slotted's. Nothing was written. A column becomes the
    /// roll-up's on its first roll-up when every row holds 0 there; a column with counts is
    /// adopted first (`adopt = likes_count` beside `cache = likes_count`), and its counts moved
    /// into the slots by `absorb_all`.
    #[error(
        "counter `{counter}`: the column `{table}`.`{column}` holds counts of its own (key {key} \
         has {value}), which a roll-up would overwrite; nothing was written. Declare \
         `adopt = {column}` to count them and run `absorb_all`, or set the column to 0 if it is \
         an old copy of these totals"
    )]
    ColumnHoldsCounts {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The model's table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// A record whose column is not 0, formatted with `Debug`.
        key: String,
        /// Its value there.
        value: i64,
    },

    /// A roll-up into a column the counter adopts (`adopt` and `cache` on the same column): the
    /// column holds counts of its own until `absorb_all` moves them into the slots and takes the
    /// column over for the roll-up, which it does only then, as the act that says no old writer
    /// is left. Nothing was written.
    #[error(
        "counter `{counter}`: the column `{table}`.`{column}` is adopted and holds counts of its \
         own: run `absorb_all` once no old binary writes it, which makes it the roll-up's cache; \
         nothing was written"
    )]
    ColumnNotAbsorbed {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The model's table.
        table: &'static str,
        /// The column.
        column: &'static str,
    },

    /// The adopted column is a roll-up cache already (its first roll-up found it absorbed): it
    /// holds copies of the totals, not counts, so moving it into the slots (`absorb`) or the
    /// slots into it (`release`) would count twice. Nothing was written.
    #[error(
        "counter `{counter}`: the column `{table}`.`{column}` is the roll-up's cache, not counts \
         of its own: {call} would count them twice; nothing was written"
    )]
    ColumnIsCache {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The model's table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The call refused.
        call: &'static str,
    },

    /// A Diesel error from outside a counter call: the `BEGIN` or `COMMIT` of a transaction the
    /// counter calls ran in, for instance. This `From` lets `Connection::transaction` closures
    /// return `slotted_core::Error`.
    #[error(transparent)]
    Diesel(#[from] diesel::result::Error),

    /// A maintenance job (compaction, roll-up, retention) stopped on `source` after committing
    /// part of its work: `committed` says what stays done. Running the job again does the rest.
    #[error("{source}; committed before it stopped: {committed}")]
    MaintenanceStopped {
        /// What the job committed before the error.
        committed: Box<crate::reports::Committed>,
        /// The error that stopped it (a [`Error::Database`], naming the counter).
        #[source]
        source: Box<Error>,
    },

    /// A call that must run outside a transaction of the caller's was made inside one, and
    /// refused before it read or wrote anything: `repair_follow_all` on MySQL and MariaDB,
    /// whose reads inside a `REPEATABLE READ` transaction (their default) see its snapshot,
    /// which may predate another repair of the same records: the difference would be added
    /// twice. Call it on a connection outside a transaction.
    #[error(
        "counter `{counter}` (table `{table}`): {call} must run outside a transaction: {reason}"
    )]
    InTransaction {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The call refused.
        call: &'static str,
        /// Why it cannot run inside one.
        reason: &'static str,
    },

    /// Writing diesel CLI migration folders failed. Nothing that was there before was changed.
    #[error("migration folder `{}`: {reason}", path.display())]
    MigrationFolder {
        /// The folder concerned.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// The I/O error, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A `diesel.toml` does not keep the counter tables out of `diesel print-schema`
    /// ([`CounterMigrations::check_diesel_toml`](crate::CounterMigrations::check_diesel_toml)).
    #[error("`{}`: {reason}", path.display())]
    DieselToml {
        /// The file.
        path: PathBuf,
        /// What is missing, and the line that fixes it.
        reason: String,
        /// The I/O error, when the file could not be read.
        #[source]
        source: Option<std::io::Error>,
    },

    /// The diesel CLI files (the counter tables' migration folders, `diesel.toml`'s print-schema
    /// filter) differ from what the counters need, and nothing was written: `CI` is set
    /// ([`CounterMigrations::update_diesel_cli`](crate::CounterMigrations::update_diesel_cli)
    /// only checks there), the call only checks
    /// ([`check_diesel_cli`](crate::CounterMigrations::check_diesel_cli)), or a folder holds
    /// other SQL, which is never overwritten. Each difference is on its own line.
    #[error("{}", diesel_cli_message(changes, *ci))]
    DieselCliOutOfDate {
        /// Every difference, in the order the call found them.
        changes: Vec<DieselCliChange>,
        /// Whether the `CI` environment variable was set (to anything but empty, `false` or `0`).
        ci: bool,
    },

    /// A write-behind buffer is full: [`BufferConfig::max_pending_keys`](crate::buffer::BufferConfig)
    /// entries (or `max_unflushed_adds` adds) are held, typically because the database has been
    /// failing. The add was not taken, and counted in `BufferStats::refusals`.
    #[error(
        "the counter buffer is full ({pending_keys} of {max_pending_keys} keys, {unflushed_adds} \
         adds unflushed, at most {max_unflushed_adds:?}); the add was refused, not taken"
    )]
    BufferFull {
        /// Entries held.
        pending_keys: usize,
        /// The bound on entries.
        max_pending_keys: usize,
        /// Adds not yet flushed.
        unflushed_adds: u64,
        /// The bound on those, if any.
        max_unflushed_adds: Option<u64>,
    },

    /// The buffer is shut down (or shutting down): the add was not taken.
    #[error("the counter buffer is shut down; the add was not taken")]
    BufferClosed,

    /// A buffer's shutdown gave up at its deadline with adds not known to be written: they
    /// are lost with the buffer, and counted here.
    #[error(
        "the counter buffer shut down with {unflushed_adds} adds ({pending_keys} keys) not \
         written ({in_doubt_adds} of them in a COMMIT of unknown outcome: in the database only \
         if their flush id is in `slotted_flushes`); last error: {last_error}"
    )]
    BufferUnflushed {
        /// Adds not known to be written.
        unflushed_adds: u64,
        /// Their entries.
        pending_keys: usize,
        /// Those of `unflushed_adds` whose COMMIT's outcome is unknown.
        in_doubt_adds: u64,
        /// The last flush error.
        last_error: String,
    },

    /// A flush's multi-row upsert wrote fewer rows than it held (PostgreSQL, SQLite): adding
    /// some of the deltas would overflow their slot (i64), and the overflow guard skipped
    /// them. The flush was rolled back; its deltas stay in the buffer.
    #[error(
        "counter `{counter}` (table `{table}`): a flush of {rows} keys wrote {written}: adding \
         the others' buffered deltas would overflow a slot (i64); rolled back, nothing written"
    )]
    FlushOverflow {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The keys (rows) of the flush's chunk.
        rows: usize,
        /// The rows the upsert reported written.
        written: usize,
    },

    /// A buffer's pool gave no connection.
    #[error("connection pool: {0}")]
    Pool(String),

    /// The server cannot write: it is a read-only replica (a hot standby), or a primary that a
    /// failover demoted while this connection stayed open. Nothing was written. Take a new
    /// connection to the primary (libpq and tokio-postgres find it with
    /// `target_session_attrs=read-write` in a multi-host URL).
    #[error(
        "counter `{counter}` (table `{table}`): the server is read-only (a replica, or a primary \
         demoted by a failover), nothing was written; connect to the primary (for example with \
         `target_session_attrs=read-write`): {source}"
    )]
    ReadOnlyServer {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The server's refusal.
        #[source]
        source: diesel::result::Error,
    },

    /// A statement of slotted's found its prepared statement missing, or its name taken, on the
    /// server session: a transaction-mode pooler (PgBouncer's `pool_mode = transaction`) sits in
    /// front of PostgreSQL, and this process does not say so. Set
    /// `slotted_core::pooling::set(Pooling::Transaction)` at start-up (and see
    /// `docs/guide/pgbouncer.md` for your own queries). Nothing of this statement ran; earlier
    /// statements may have run under another statement's name.
    #[error(
        "counter `{counter}` (table `{table}`): {source}: PostgreSQL is behind a transaction-mode \
         pooler (PgBouncer's pool_mode = transaction?); call \
         slotted_core::pooling::set(Pooling::Transaction) at start-up"
    )]
    TransactionPooler {
        /// The counter, as `Model.counter`.
        counter: String,
        /// The counter's table.
        table: &'static str,
        /// The server's error.
        #[source]
        source: diesel::result::Error,
    },

    /// The connection was lost while a transaction's `COMMIT` was in flight: the transaction may
    /// or may not have been committed. Running it again may count it twice. After a failover,
    /// the new primary has it exactly when the old one committed it (with a synchronous standby).
    #[error(
        "the connection was lost while COMMIT was in flight: the transaction may or may not have \
         been committed: {source}"
    )]
    CommitOutcomeUnknown {
        /// The error `COMMIT` got.
        #[source]
        source: diesel::result::Error,
    },
}

/// One difference between a crate's diesel CLI files and what its counters need
/// ([`Error::DieselCliOutOfDate`]).
///
/// ```no_run
/// # use slotted_core::{CounterMigrations, Dialect, Error, SlottedCounter};
/// # use slotted_core::migration::DieselCliChange;
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// match CounterMigrations::of::<Post>().check_diesel_cli(".", Dialect::Postgres) {
///     Ok(_) => {}
///     Err(Error::DieselCliOutOfDate { changes, .. }) => {
///         for change in &changes {
///             if let DieselCliChange::MissingFolder(path) = change {
///                 println!("to write: {}", path.display());
///             }
///         }
///     }
///     Err(e) => panic!("{e}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DieselCliChange {
    /// The migrations directory does not exist.
    MissingMigrationsDir(PathBuf),
    /// A table's migration folder does not exist.
    MissingFolder(PathBuf),
    /// A folder of a table's migration name holds other SQL than slotted writes (edited, or
    /// another backend's): it is never overwritten.
    FolderDiffers(PathBuf),
    /// There is no `diesel.toml`: one is written as `diesel setup` writes it, with the filter.
    MissingDieselToml {
        /// Where it belongs.
        path: PathBuf,
        /// The filter line its `[print_schema]` gets.
        line: String,
    },
    /// A print-schema configuration of `diesel.toml` lets `diesel print-schema` print some of
    /// slotted's tables.
    MissingPatterns {
        /// The `diesel.toml`.
        path: PathBuf,
        /// `print_schema`, or `print_schema.NAME` for a named configuration (diesel 2.3).
        section: String,
        /// The tables, with what each is: `the counter table posts_likes_slots`.
        tables: Vec<String>,
        /// The anchored patterns its `except_tables` lacks: `^posts_likes_slots$`.
        patterns: Vec<String>,
        /// Its filter with them, as it is to be written.
        line: String,
    },
}

impl std::fmt::Display for DieselCliChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DieselCliChange::MissingMigrationsDir(path) => {
                write!(f, "the migrations directory {} is missing", path.display())
            }
            DieselCliChange::MissingFolder(path) => {
                write!(f, "the migration folder {} is missing", path.display())
            }
            DieselCliChange::FolderDiffers(path) => write!(
                f,
                "the migration folder {} holds other SQL than slotted writes (edited, or another \
                 backend's); it is never overwritten",
                path.display()
            ),
            DieselCliChange::MissingDieselToml { path, line } => write!(
                f,
                "{} is missing (`diesel setup` writes one); its [print_schema] needs: {line}",
                path.display()
            ),
            DieselCliChange::MissingPatterns {
                path,
                section,
                tables,
                patterns,
                line,
            } => write!(
                f,
                "{} [{section}]: `diesel print-schema` would print {}; its filter lacks {}; \
                 write: {line}",
                path.display(),
                tables.join(", "),
                patterns
                    .iter()
                    .map(|p| format!("\"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }
    }
}

fn diesel_cli_message(changes: &[DieselCliChange], ci: bool) -> String {
    let mut message = String::from("the diesel CLI files differ from what the counters need:");
    for change in changes {
        message.push_str("\n  - ");
        message.push_str(&change.to_string());
    }
    let differs = changes
        .iter()
        .any(|c| matches!(c, DieselCliChange::FolderDiffers(_)));
    if differs {
        message.push_str(
            "\nnothing was written: remove the folders that hold other SQL (or restore them from \
             version control), then run again",
        );
    }
    if ci {
        message
            .push_str("\nCI is set, so nothing was written: run the tests once locally and commit");
    } else if !differs {
        message.push_str(
            "\nnothing was written (a check): `CounterMigrations::update_diesel_cli` writes them",
        );
    }
    message
}

/// What a failed call says about its write, and what to do next: [`Error::failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The database rolled the whole transaction back (a deadlock victim, a serialization
    /// failure, a lock timeout, a busy SQLite): run it again, on the same connection.
    RolledBack,
    /// The connection is gone, or its server cannot write (a replica, a demoted primary), and
    /// nothing of the transaction was committed: run it again on a new connection.
    Reconnect,
    /// The write may or may not have been committed (the connection was lost with the write or
    /// its `COMMIT` in flight, or answered out of step): running it again may count it twice.
    OutcomeUnknown,
    /// Anything else: running it again would fail the same way.
    Other,
}

impl Error {
    /// What this error says about the write: whether it may be run again, on which
    /// connection, and whether its outcome is unknown. [`transaction_with_retry`] reruns
    /// [`Failure::RolledBack`], [`failover::transaction_with_failover`] also
    /// [`Failure::Reconnect`] on a new connection; neither reruns anything else.
    ///
    /// [`transaction_with_retry`]: crate::retry::transaction_with_retry
    /// [`failover::transaction_with_failover`]: crate::failover::transaction_with_failover
    pub fn failure(&self) -> Failure {
        match self {
            Error::OutcomeUnknown { .. } | Error::CommitOutcomeUnknown { .. } => {
                Failure::OutcomeUnknown
            }
            Error::ReadOnlyServer { .. } => Failure::Reconnect,
            Error::TransactionPooler { source, .. } => diesel_failure(source),
            Error::Database { source, .. } | Error::Diesel(source) => diesel_failure(source),
            Error::MaintenanceStopped { source, .. } => source.failure(),
            Error::Pool(_) => Failure::Reconnect,
            _ => Failure::Other,
        }
    }
}

/// [`Error::failure`] of a Diesel error met inside a transaction (or before any write).
pub(crate) fn diesel_failure(e: &diesel::result::Error) -> Failure {
    if is_rolled_back(e) {
        Failure::RolledBack
    } else if is_connection_lost(e) || is_read_only(e) {
        Failure::Reconnect
    } else {
        Failure::Other
    }
}

/// Whether `e` is a deadlock or a serialization failure: the database chose this transaction as
/// the victim and rolled it back whole (PostgreSQL's `40P01`/`40001`, MySQL's and MariaDB's
/// 1213, Galera's certification conflict, which Diesel reports as `Unknown` when `COMMIT` meets
/// it).
pub(crate) fn is_deadlock(e: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as DieselError};
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        DieselError::DatabaseError(_, info) => {
            let message = info.message();
            message.contains("deadlock detected") || message.contains("Deadlock found")
        }
        _ => false,
    }
}

/// Whether `e` rolled the whole transaction back, so that it may simply run again on the same
/// connection ([`Failure::RolledBack`]): a deadlock or serialization failure, a lock (wait)
/// timeout (MariaDB's 1467 included, its report of one met waiting for a table's AUTO-INC
/// lock), SQLite's busy, or a prepared statement's name missing or taken behind a transaction
/// pooler. The servers' messages are matched in English: Diesel exposes neither
/// PostgreSQL's SQLSTATE nor MySQL's error number for them.
pub(crate) fn is_rolled_back(e: &diesel::result::Error) -> bool {
    let timed_out = matches!(e, diesel::result::Error::DatabaseError(_, info)
        if [
            "canceling statement due to lock timeout",
            "Lock wait timeout exceeded",
            "database is locked",
            // MariaDB/MySQL 1467: a deadlock or lock wait met while an `INSERT … SELECT`
            // waited for the table's AUTO-INC lock; the statement wrote nothing.
            "Failed to read auto-increment value from storage engine",
        ]
        .iter()
        .any(|m| info.message().contains(m)));
    is_deadlock(e) || timed_out || is_statement_name_error(e)
}

/// Whether `e` says the connection to the server is gone (or the server is going away).
/// Diesel reports a lost libpq connection as `ClosedConnection` and diesel-async a
/// tokio-postgres or mysql_async I/O error as `UnableToSendCommand`; the servers' own messages
/// for a shutdown are matched in English, as the retry module does (Diesel does not expose
/// SQLSTATEs).
pub(crate) fn is_connection_lost(e: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as DieselError};
    match e {
        // A failed COMMIT that Diesel then tried to roll back (sync MySQL): the COMMIT's error
        // says what happened.
        DieselError::RollbackErrorOnCommit { commit_error, .. } => is_connection_lost(commit_error),
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        ) => true,
        DieselError::DatabaseError(_, info) => {
            let message = info.message();
            [
                // PostgreSQL: 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03.
                "terminating connection",
                "server closed the connection",
                "the database system is shutting down",
                "the database system is starting up",
                "the database system is in recovery mode",
                "connection to server",
                // MySQL and MariaDB: 2006, 2013, 1053; mysql_async's I/O and driver errors as
                // diesel-async reports them.
                "server has gone away",
                "Lost connection to",
                "Server shutdown in progress",
                "Input/output error",
                "Connection to the server is closed",
            ]
            .iter()
            .any(|m| message.contains(m))
        }
        _ => false,
    }
}

/// Whether `e` is the server refusing to write: PostgreSQL's `25006` on a hot standby or a
/// demoted primary (`cannot execute … in a read-only transaction`), MySQL's 1290/1836
/// (`--read-only`, `super_read_only`).
pub(crate) fn is_read_only(e: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as DieselError};
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::ReadOnlyTransaction, _) => true,
        DieselError::DatabaseError(_, info) => {
            let message = info.message();
            message.contains("in a read-only transaction")
                || message.contains("--read-only option")
                || message.contains("read-only mode")
        }
        _ => false,
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `e` is a prepared statement missing (`26000`) or its name taken (`42P05`) on the
/// server session: what a transaction-mode pooler does to named statements.
pub(crate) fn is_statement_name_error(e: &diesel::result::Error) -> bool {
    matches!(e, diesel::result::Error::DatabaseError(_, info)
        if info.message().starts_with("prepared statement")
            && (info.message().ends_with("does not exist") || info.message().ends_with("already exists")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::{DatabaseErrorKind, Error as DieselError};

    #[test]
    fn failures_say_what_to_do_next() {
        let db =
            |kind, message: &str| DieselError::DatabaseError(kind, Box::new(message.to_owned()));
        let unknown = DatabaseErrorKind::Unknown;
        for (e, want) in [
            (db(unknown, "deadlock detected"), Failure::RolledBack),
            (
                db(
                    DatabaseErrorKind::SerializationFailure,
                    "could not serialize",
                ),
                Failure::RolledBack,
            ),
            (
                db(
                    DatabaseErrorKind::ClosedConnection,
                    "server closed the connection unexpectedly",
                ),
                Failure::Reconnect,
            ),
            (
                db(DatabaseErrorKind::UnableToSendCommand, "connection closed"),
                Failure::Reconnect,
            ),
            (
                db(
                    unknown,
                    "terminating connection due to administrator command",
                ),
                Failure::Reconnect,
            ),
            (
                db(
                    DatabaseErrorKind::ReadOnlyTransaction,
                    "cannot execute INSERT in a read-only transaction",
                ),
                Failure::Reconnect,
            ),
            (
                db(unknown, "Lost connection to server during query"),
                Failure::Reconnect,
            ),
            (
                db(unknown, "Input/output error: broken pipe"),
                Failure::Reconnect,
            ),
            (
                DieselError::RollbackErrorOnCommit {
                    rollback_error: Box::new(db(unknown, "Lost connection to server during query")),
                    commit_error: Box::new(db(unknown, "MySQL server has gone away")),
                },
                Failure::Reconnect,
            ),
            (
                db(DatabaseErrorKind::UniqueViolation, "duplicate key"),
                Failure::Other,
            ),
        ] {
            assert_eq!(Error::Diesel(e).failure(), want);
        }
        let lost = db(
            DatabaseErrorKind::ClosedConnection,
            "server closed the connection",
        );
        assert_eq!(
            Error::CommitOutcomeUnknown { source: lost }.failure(),
            Failure::OutcomeUnknown
        );
        let stopped = Error::MaintenanceStopped {
            committed: Box::new(crate::reports::Committed::Deleted(0)),
            source: Box::new(Error::Diesel(db(
                unknown,
                "the database system is shutting down",
            ))),
        };
        assert_eq!(stopped.failure(), Failure::Reconnect);
    }
}
