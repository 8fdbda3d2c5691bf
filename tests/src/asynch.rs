//! Support for the async tests: a diesel-async connection per backend, beside the sync one that
//! creates the test's database and checks what is in it.

use diesel_async::pooled_connection::{bb8, deadpool, AsyncDieselConnectionManager};
use diesel_async::SimpleAsyncConnection;
use slotted_core::AsyncCounterConnection;

use crate::TestConnection;

/// A diesel-async connection type the tests run on, with the sync connection of its backend.
pub trait AsyncTestConnection: AsyncCounterConnection + SimpleAsyncConnection + 'static {
    /// The sync connection of the same backend: creates databases, checks rows.
    type Sync: TestConnection;

    /// Opens a connection to `url` (what `Self::Sync::fresh_database` returned); on SQLite with
    /// a busy timeout and WAL, as README advises for concurrent writers.
    fn open(url: &str) -> impl std::future::Future<Output = Self> + Send {
        async move {
            let mut conn = <Self as diesel_async::AsyncConnection>::establish(url)
                .await
                .unwrap_or_else(|e| panic!("open {url}: {e}"));
            if <Self::Sync as TestConnection>::NAME == "sqlite" {
                conn.batch_execute("PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL;")
                    .await
                    .expect("pragmas");
            }
            conn
        }
    }

    /// Runs `migrations` on this connection through diesel-async's `AsyncMigrationHarness`.
    fn migrate(self, migrations: slotted_core::CounterMigrations) -> Self;

    /// A bb8 pool of `size` connections to `url`, set up as `open` does.
    type Bb8: Clone + Send + Sync + 'static + slotted_core::buffer::AsyncConnectionPool;
    /// One of its connections.
    type Bb8Conn<'a>: AsyncCounterConnection + 'a;
    /// A deadpool pool of `size` connections to `url`, set up as `open` does.
    type Deadpool: Clone + Send + Sync + 'static + slotted_core::buffer::AsyncConnectionPool;
    /// One of its connections.
    type DeadpoolConn: AsyncCounterConnection + 'static;

    fn bb8(url: &str, size: u32) -> impl std::future::Future<Output = Self::Bb8> + Send;
    /// `bb8`, without bb8's test query when a connection is checked out
    /// (`test_on_check_out(false)`): a test query cut off inside `get` leaves a MySQL
    /// connection out of step, and bb8 puts it back (docs/guide/async-and-cancellation.md).
    fn bb8_without_check_out_test(
        url: &str,
        size: u32,
    ) -> impl std::future::Future<Output = Self::Bb8> + Send;
    fn bb8_get(pool: &Self::Bb8) -> impl std::future::Future<Output = Self::Bb8Conn<'_>> + Send;
    fn deadpool(url: &str, size: usize) -> Self::Deadpool;
    fn deadpool_get(
        pool: &Self::Deadpool,
    ) -> impl std::future::Future<Output = Self::DeadpoolConn> + Send;

    /// The server's identity of this connection: PostgreSQL's backend PID, MySQL's
    /// `CONNECTION_ID()`; 0 on SQLite, which has none.
    fn identity(&mut self) -> impl std::future::Future<Output = i64> + Send;
}

#[derive(diesel::QueryableByName)]
struct Number {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// A bb8 or deadpool manager for `url`, whose connections get the same setup as `open`.
pub fn manager<A: AsyncTestConnection>(url: &str) -> AsyncDieselConnectionManager<A> {
    let mut config = diesel_async::pooled_connection::ManagerConfig::default();
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move { Ok(A::open(&url).await) })
    });
    AsyncDieselConnectionManager::new_with_config(url, config)
}

/// `migrate`, through the harness, for a concrete connection type.
macro_rules! harness {
    ($conn:ty, $identity:literal) => {
        async fn identity(&mut self) -> i64 {
            diesel_async::RunQueryDsl::get_result::<Number>(diesel::sql_query($identity), self)
                .await
                .expect("the connection's identity")
                .n
        }

        type Bb8 = bb8::Pool<$conn>;
        type Bb8Conn<'a> = bb8::PooledConnection<'a, $conn>;
        type Deadpool = deadpool::Pool<$conn>;
        type DeadpoolConn = deadpool::Object<$conn>;

        async fn bb8(url: &str, size: u32) -> Self::Bb8 {
            bb8::Pool::builder()
                .max_size(size)
                .build(manager(url))
                .await
                .expect("a bb8 pool")
        }

        async fn bb8_without_check_out_test(url: &str, size: u32) -> Self::Bb8 {
            bb8::Pool::builder()
                .max_size(size)
                .test_on_check_out(false)
                .build(manager(url))
                .await
                .expect("a bb8 pool")
        }

        async fn bb8_get(pool: &Self::Bb8) -> Self::Bb8Conn<'_> {
            pool.get().await.expect("a bb8 connection")
        }

        fn deadpool(url: &str, size: usize) -> Self::Deadpool {
            deadpool::Pool::builder(manager(url))
                .max_size(size)
                .build()
                .expect("a deadpool pool")
        }

        async fn deadpool_get(pool: &Self::Deadpool) -> Self::DeadpoolConn {
            pool.get().await.expect("a deadpool connection")
        }

        fn migrate(self, migrations: slotted_core::CounterMigrations) -> Self {
            let mut harness = diesel_async::AsyncMigrationHarness::new(self);
            diesel_migrations::MigrationHarness::run_pending_migrations(&mut harness, migrations)
                .expect("run the counter migrations through AsyncMigrationHarness");
            harness.into_inner()
        }
    };
}

#[cfg(feature = "sqlite")]
impl AsyncTestConnection
    for diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>
{
    type Sync = diesel::SqliteConnection;
    harness!(
        diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>,
        "SELECT CAST(0 AS BIGINT) AS n"
    );
}

#[cfg(feature = "postgres")]
impl AsyncTestConnection for diesel_async::AsyncPgConnection {
    type Sync = diesel::PgConnection;
    harness!(
        diesel_async::AsyncPgConnection,
        "SELECT CAST(pg_backend_pid() AS BIGINT) AS n"
    );
}

#[cfg(feature = "mysql")]
impl AsyncTestConnection for diesel_async::AsyncMysqlConnection {
    type Sync = diesel::MysqlConnection;
    harness!(
        diesel_async::AsyncMysqlConnection,
        "SELECT CAST(CONNECTION_ID() AS SIGNED) AS n"
    );
}

#[cfg(feature = "postgres")]
/// An `diesel_async::AsyncPgConnection` through a transaction pooler, as the guide shows: diesel-async's own
/// set-up (`SET TIME ZONE`, `SET CLIENT_ENCODING`) prepares named statements outside a
/// transaction (diesel-async 0.9), which the pooler may split across server sessions; run inside
/// a transaction opened on the tokio-postgres client first, they reach one session.
///
/// A prepare can still clash with a statement another client left on that session (`prepared
/// statement "s12" already exists`): nothing ran, and the next try names its statements afresh.
pub async fn establish_through_pooler(
    url: &str,
) -> diesel::ConnectionResult<diesel_async::AsyncPgConnection> {
    let mut tries = 0;
    loop {
        match establish_through_pooler_once(url).await {
            Err(e) if tries < 3 && e.to_string().contains("already exists") => tries += 1,
            done => return done,
        }
    }
}

#[cfg(feature = "postgres")]
async fn establish_through_pooler_once(
    url: &str,
) -> diesel::ConnectionResult<diesel_async::AsyncPgConnection> {
    use diesel::ConnectionError;
    use diesel_async::SimpleAsyncConnection;
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    tokio::spawn(connection);
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    let mut conn = diesel_async::AsyncPgConnection::try_from(client).await?;
    conn.batch_execute("COMMIT")
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    Ok(conn)
}

#[cfg(feature = "postgres")]
/// A bb8 or deadpool manager whose connections are set up by `establish_through_pooler`. Neither pool's check of
/// a connection (a named statement outside a transaction) is safe behind a transaction pooler:
/// deadpool's is skipped here (`RecyclingMethod::Fast`), bb8's on its builder.
pub fn pooler_manager(url: &str) -> AsyncDieselConnectionManager<diesel_async::AsyncPgConnection> {
    let mut config = diesel_async::pooled_connection::ManagerConfig::default();
    config.recycling_method = diesel_async::pooled_connection::RecyclingMethod::Fast;
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move { establish_through_pooler(&url).await })
    });
    AsyncDieselConnectionManager::new_with_config(url, config)
}

/// A fresh database for `test` on `A`'s backend with every test model's counter tables, and its
/// URL, or `None` when the backend is skipped. The migrations run through diesel-async's own
/// harness.
pub async fn migrated<A: AsyncTestConnection>(test: &str) -> Option<(crate::TestDb, A)> {
    let db = crate::TestDb::new::<A::Sync>(&format!("async_{test}"))?;
    let conn = A::open(&db.url).await.migrate(crate::all_migrations());
    Some((db, conn))
}

/// A fresh database for the async test `test` with the lifecycle models' tables
/// (`crate::lifecycle::migrate`), and a sync connection to it that set them up and checks them.
pub fn lifecycle_db<A: AsyncTestConnection>(test: &str) -> Option<(crate::TestDb, A::Sync)> {
    let db = crate::TestDb::new::<A::Sync>(&format!("async_{test}"))?;
    let mut sync = <A::Sync as TestConnection>::open(&db.url);
    crate::lifecycle::migrate(&mut sync);
    Some((db, sync))
}

/// Runs `test` to its end on a fresh 2-worker tokio runtime: every async test's runtime.
pub fn block_on<F: std::future::Future>(test: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(test)
}

/// Runs each named test `async fn name<A: AsyncTestConnection>(test: &str)` once per enabled
/// backend on a 2-worker tokio runtime, as `sqlite::name`, `postgres::name`, `mysql::name`;
/// `servers:` lists tests for PostgreSQL and MySQL only.
#[macro_export]
macro_rules! async_backend_tests {
    (all: [$($a:ident),* $(,)?], $(servers: [$($sv:ident),* $(,)?],)?) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $crate::async_backend_tests!(@on ::diesel_async::sync_connection_wrapper::SyncConnectionWrapper<::diesel::SqliteConnection>; $($a)*);
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $crate::async_backend_tests!(@on ::diesel_async::AsyncPgConnection; $($a)* $($($sv)*)?);
        }
        #[cfg(feature = "mysql")]
        mod mysql {
            $crate::async_backend_tests!(@on ::diesel_async::AsyncMysqlConnection; $($a)* $($($sv)*)?);
        }
    };
    (@on $conn:ty; $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $crate::asynch::block_on(super::$name::<$conn>(stringify!($name)))
            }
        )*
    };
}
