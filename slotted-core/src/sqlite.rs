//! SQLite set up for many writers: a busy timeout and WAL on every connection.
//!
//! SQLite lets one writer in at a time. Without a busy timeout, a writer that finds the database
//! locked fails at once with `database is locked`; with one, it waits its turn. WAL lets readers
//! go on while a writer writes. [`SqliteSetup`] sets both, on a connection you open yourself
//! ([`SqliteSetup::apply`]), on every connection an r2d2 pool opens (it is a
//! `CustomizeConnection`, feature `r2d2`), and on every connection of a bb8 or deadpool pool of
//! diesel-async's `SyncConnectionWrapper<SqliteConnection>` ([`SqliteSetup::manager_config`],
//! features `bb8` or `deadpool`).
//!
//! ```
//! use diesel::r2d2::{ConnectionManager, Pool};
//! use diesel::SqliteConnection;
//! use slotted_core::sqlite::SqliteSetup;
//!
//! let pool = Pool::builder()
//!     .max_size(4)
//!     .connection_customizer(Box::new(SqliteSetup::default()))
//!     .build(ConnectionManager::<SqliteConnection>::new(":memory:"))?;
//! # Ok::<(), diesel::r2d2::PoolError>(())
//! ```

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::{QueryResult, SqliteConnection};

/// A busy timeout and, unless turned off, WAL, set on each connection (see the [module](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteSetup {
    /// How long a writer waits for the database's lock before `database is locked`.
    pub busy_timeout: Duration,
    /// `PRAGMA journal_mode = WAL` (a no-op on `:memory:` databases, which keep their own).
    pub wal: bool,
}

impl Default for SqliteSetup {
    /// A 5 s busy timeout, and WAL.
    fn default() -> Self {
        SqliteSetup {
            busy_timeout: Duration::from_secs(5),
            wal: true,
        }
    }
}

impl SqliteSetup {
    /// Sets the busy timeout and the journal mode on `conn`.
    pub fn apply(&self, conn: &mut SqliteConnection) -> QueryResult<()> {
        // PRAGMA takes no bound parameters; the value is an integer this code formats.
        let millis = u32::try_from(self.busy_timeout.as_millis()).unwrap_or(u32::MAX);
        let mut sql = format!("PRAGMA busy_timeout = {millis};");
        if self.wal {
            sql.push_str(" PRAGMA journal_mode = WAL;");
        }
        conn.batch_execute(&sql)
    }
}

#[cfg(feature = "r2d2")]
impl diesel::r2d2::CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqliteSetup {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

#[cfg(any(feature = "bb8", feature = "deadpool"))]
type AsyncSqlite = diesel_async::sync_connection_wrapper::SyncConnectionWrapper<SqliteConnection>;

#[cfg(any(feature = "bb8", feature = "deadpool"))]
impl SqliteSetup {
    /// A diesel-async pool manager's configuration whose connections get this setup: pass it to
    /// `AsyncDieselConnectionManager::new_with_config` for a bb8 or deadpool pool.
    ///
    /// ```
    /// use diesel_async::pooled_connection::AsyncDieselConnectionManager;
    /// use slotted_core::sqlite::SqliteSetup;
    ///
    /// let manager = AsyncDieselConnectionManager::new_with_config(
    ///     "/tmp/app.db",
    ///     SqliteSetup::default().manager_config(),
    /// );
    /// # let _: &AsyncDieselConnectionManager<_> = &manager;
    /// ```
    pub fn manager_config(self) -> diesel_async::pooled_connection::ManagerConfig<AsyncSqlite> {
        let mut config = diesel_async::pooled_connection::ManagerConfig::default();
        config.custom_setup = Box::new(move |url| {
            let url = url.to_owned();
            Box::pin(async move {
                use diesel::Connection;
                let mut conn = SqliteConnection::establish(&url)?;
                self.apply(&mut conn)
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(AsyncSqlite::new(conn))
            })
        });
        config
    }
}
