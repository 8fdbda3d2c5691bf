//! The contention report an operator reads: what the counter tables of the example models
//! hold, who waits on them right now, and what to change.
//!
//!     cargo run --example diagnostics                                   # SQLite
//!     cargo run --example diagnostics --features postgres -- postgres   # PG_DATABASE_URL
//!     cargo run --example diagnostics --features mysql -- mysql         # MYSQL_DATABASE_URL
//!
//! It runs a short pooled workload first. On PostgreSQL and MariaDB it then holds video 1's
//! play slots locked (`SELECT … FOR UPDATE` in an open transaction) while four writers try to
//! count a play, so the report shows live lock waits and the advice they lead to. In your own
//! service, call `slotted_core::diagnostics::diagnose` from an admin endpoint or a periodic job.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel::Connection;
use diesel_migrations::MigrationHarness;
use slotted_core::{
    diagnostics::diagnose_with, diagnostics::DiagnoseOptions, CounterConnection, CounterMigrations,
    Dialect, SlottedCounter, SlottedModel,
};
use slotted_examples::{BoxError, Video};

/// The quickstart's model: two counters on a post.
#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16)]
#[slotted(counter = views, slots = 64, strategy = random)]
pub struct Post {
    pub id: i32,
}

const WORKERS: usize = 8;
const WAITING_WRITERS: usize = 4;

fn run<C>(url: &str) -> Result<(), BoxError>
where
    C: CounterConnection + R2D2Connection + MigrationHarness<C::Backend> + Send + 'static,
{
    let pool = Pool::builder()
        .max_size(WORKERS as u32 + WAITING_WRITERS as u32 + 2)
        .connection_customizer(Box::new(SqlitePragmas))
        .build(ConnectionManager::<C>::new(url))?;
    let mut conn = pool.get()?;
    conn.run_pending_migrations(CounterMigrations::of::<Video>().and::<Post>())?;
    let dialect = <C::Backend as slotted_core::CounterBackend>::DIALECT;

    // Video 1 is hot: every worker plays it. Likes spread over 50 posts, views over 200.
    std::thread::scope(|scope| -> Result<(), BoxError> {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let pool = &pool;
                scope.spawn(move || -> Result<(), BoxError> {
                    let mut conn = pool.get()?;
                    for i in 0..100 {
                        Video::plays_of(1).increment(&mut conn)?;
                        Post::likes_of(((w * 100 + i) % 50) as i32).increment(&mut conn)?;
                        Post::views_of(((w * 31 + i) % 200) as i32).increment(&mut conn)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "a worker panicked")?)
    })?;

    let specs: Vec<_> = Video::COUNTERS
        .iter()
        .chain(Post::COUNTERS)
        .copied()
        .collect();
    let options = DiagnoseOptions::default()
        .hottest(3)
        .samples(3, Duration::from_millis(100));

    if dialect == Dialect::Sqlite {
        println!("{}", diagnose_with(&specs, &options, &mut conn)?);
        return Ok(());
    }

    // A transaction that keeps video 1's play slots locked, as a slow request would.
    let timeout = match dialect {
        Dialect::Postgres => "SET lock_timeout = '10s'",
        _ => "SET SESSION innodb_lock_wait_timeout = 10",
    };
    let mut holder = pool.get()?;
    let report = std::thread::scope(|scope| -> Result<_, BoxError> {
        let mut writers = Vec::new();
        let report = holder.transaction(|holder| -> Result<_, BoxError> {
            holder.batch_execute(
                "SELECT count FROM videos_plays_slots WHERE record_id = 1 FOR UPDATE",
            )?;
            for _ in 0..WAITING_WRITERS {
                let pool = &pool;
                writers.push(scope.spawn(move || -> Result<(), BoxError> {
                    let mut conn = pool.get()?;
                    conn.batch_execute(timeout)?;
                    Video::plays_of(1).increment(&mut conn)?;
                    Ok(())
                }));
            }
            std::thread::sleep(Duration::from_millis(300));
            Ok(diagnose_with(&specs, &options, &mut conn)?)
        })?;
        for w in writers {
            w.join().map_err(|_| "a writer panicked")??;
        }
        Ok(report)
    })?;
    println!("{report}");
    Ok(())
}

/// SQLite: wait for the one writer instead of failing (the quickstart's pragmas).
#[derive(Debug)]
struct SqlitePragmas;

impl<C: SimpleConnection> diesel::r2d2::CustomizeConnection<C, diesel::r2d2::Error>
    for SqlitePragmas
{
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        if std::any::type_name::<C>().contains("Sqlite") {
            conn.batch_execute("PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL;")
                .map_err(diesel::r2d2::Error::QueryError)?;
        }
        Ok(())
    }
}

fn main() -> Result<(), BoxError> {
    let backend = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite".to_owned());
    match backend.as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let path = std::env::temp_dir().join(format!("slotted-diagnostics-{}.db", std::process::id()));
            let result = run::<diesel::SqliteConnection>(&path.to_string_lossy());
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            result
        }
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(&std::env::var("PG_DATABASE_URL")?),
        #[cfg(feature = "mysql")]
        "mysql" => run::<diesel::MysqlConnection>(&std::env::var("MYSQL_DATABASE_URL")?),
        other => Err(format!("unknown or disabled backend `{other}`: sqlite, postgres (--features postgres), mysql (--features mysql)").into()),
    }
}
