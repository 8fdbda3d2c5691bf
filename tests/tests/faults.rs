//! Faults: a session killed in the middle of a transaction, a database server crashing and
//! restarting under a pool, SQLite under many writer threads. The server tests crash a private
//! instance they start themselves (its own data directory and port), never the shared servers.

use std::sync::mpsc;
use std::time::Duration;

use slotted_core::{CounterMaintenance, Error};
use slotted_tests::models::*;
use slotted_tests::{backend_tests, TestConnection, TestDb};

// Each test where it means something: SQLite has no session to kill and no server to crash,
// and only MySQL's reads wait for row locks; the busy timeout is SQLite's.
backend_tests! {
    all: [
        a_lock_timeout_leaves_the_connection_usable,
        a_retried_transaction_runs_its_own_locking_read_again,
    ],
    servers: [
        killed_session_loses_its_whole_transaction_and_the_pool_goes_on,
        crash_restart_loses_no_acknowledged_increment,
    ],
    sqlite: [
        many_writer_threads_wait_and_count_exactly,
        a_pool_with_sqlite_setup_waits_instead_of_failing,
    ],
    mysql: [a_lock_timeout_in_a_serializable_read_leaves_the_connection_usable],
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn killed_session_loses_its_whole_transaction_and_the_pool_goes_on<
    C: TestConnection + diesel::r2d2::R2D2Connection,
>(
    test: &str,
) {
    let Some((db, _conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let (who_am_i, kill) = match C::NAME {
        "postgres" => (
            "SELECT CAST(pg_backend_pid() AS BIGINT) AS n",
            "SELECT pg_terminate_backend",
        ),
        "mysql" => ("SELECT CAST(CONNECTION_ID() AS SIGNED) AS n", "KILL"),
        other => unreachable!("registered for the servers only, not {other}"),
    };
    let pool = diesel::r2d2::Pool::builder()
        .max_size(2)
        .build(diesel::r2d2::ConnectionManager::<C>::new(&db.url))
        .unwrap();
    let mut victim = pool.get().unwrap();
    let mut killer = pool.get().unwrap();
    let id = victim.query_i64(who_am_i);
    let result = victim.transaction(|conn| {
        Post::likes_of(1).add(3, conn)?;
        Post::views_of(1).add(5, conn)?;
        let sql = if C::NAME == "postgres" {
            format!("{kill}({id})")
        } else {
            format!("{kill} {id}")
        };
        killer.batch_execute(&sql)?;
        Post::likes_of(1).add(7, conn)?; // the session is gone
        Ok::<_, Error>(())
    });
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Database { .. } | Error::Diesel(_)),
        "{err:?}"
    );
    drop(victim);
    assert_eq!(
        Post::likes_of(1).total(&mut *killer).unwrap(),
        0,
        "none of the transaction's increments"
    );
    assert_eq!(Post::views_of(1).total(&mut *killer).unwrap(), 0);
    drop(killer);
    // The pool drops the dead connection and goes on.
    for _ in 0..3 {
        let mut conn = pool.get().unwrap();
        Post::likes_of(1).increment(&mut *conn).unwrap();
    }
    assert_eq!(
        Post::likes_of(1).total(&mut *pool.get().unwrap()).unwrap(),
        3
    );
}

/// Private servers and the crash test, for the backends that have a server.
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod servers {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use slotted_core::CounterMigrations;
    use slotted_tests::models::*;
    use slotted_tests::{require_all_backends, Stop, TestConnection};

    /// A database server of the test's own: started, crashed and restarted at will.
    pub(super) trait PrivateServer: Sized {
        fn start(dir: &Path, port: u16) -> Result<Self, String>;
        /// Crash: no clean shutdown, as a power cut would.
        fn crash(&mut self);
        fn restart(&mut self);
        fn url(&self) -> String;
    }

    fn run(cmd: &mut Command) -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    #[cfg(feature = "postgres")]
    pub(super) struct PrivatePostgres {
        bin: PathBuf,
        data: PathBuf,
        dir: PathBuf,
        port: u16,
    }

    #[cfg(feature = "postgres")]
    impl PrivatePostgres {
        fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1",
                self.port,
                self.dir.display()
            );
            run(Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-o", &options, "-l"])
                .arg(self.dir.join("log"))
                .args(args))
        }
    }

    #[cfg(feature = "postgres")]
    impl PrivateServer for PrivatePostgres {
        fn start(dir: &Path, port: u16) -> Result<Self, String> {
            let bin = std::fs::read_dir("/usr/lib/postgresql")
                .map_err(|e| format!("no PostgreSQL binaries: {e}"))?
                .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .find(|b| b.join("initdb").exists())
                .ok_or("no initdb under /usr/lib/postgresql")?;
            run(Command::new("chown").args(["postgres:postgres"]).arg(dir))?;
            let data = dir.join("data");
            run(Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "-D"])
                .arg(&data))?;
            let server = PrivatePostgres {
                bin,
                data,
                dir: dir.to_owned(),
                port,
            };
            server.pg_ctl(&["-w", "start"])?;
            Ok(server)
        }

        fn crash(&mut self) {
            self.pg_ctl(&["-m", "immediate", "-w", "stop"])
                .expect("crash the private PostgreSQL");
        }

        fn restart(&mut self) {
            self.pg_ctl(&["-w", "start"])
                .expect("restart the private PostgreSQL");
        }

        fn url(&self) -> String {
            format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
        }
    }

    #[cfg(feature = "postgres")]
    impl Drop for PrivatePostgres {
        fn drop(&mut self) {
            let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        }
    }

    #[cfg(feature = "mysql")]
    pub(super) struct PrivateMariadb {
        dir: PathBuf,
        port: u16,
        child: Option<std::process::Child>,
    }

    #[cfg(feature = "mysql")]
    impl PrivateMariadb {
        fn spawn(&mut self) -> Result<(), String> {
            let child = Command::new("mariadbd")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", self.dir.join("data").display()))
                .arg(format!("--socket={}", self.dir.join("sock").display()))
                .arg(format!("--pid-file={}", self.dir.join("pid").display()))
                .arg(format!("--port={}", self.port))
                .args([
                    "--bind-address=127.0.0.1",
                    "--user=mysql",
                    "--skip-grant-tables",
                    "--innodb-flush-log-at-trx-commit=1",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("mariadbd: {e}"))?;
            self.child = Some(child);
            // Up when it answers.
            let deadline = Instant::now() + Duration::from_secs(60);
            let server_url = format!("mysql://root@127.0.0.1:{}/mysql", self.port);
            while Instant::now() < deadline {
                if let Ok(mut conn) =
                    <diesel::MysqlConnection as diesel::Connection>::establish(&server_url)
                {
                    diesel::connection::SimpleConnection::batch_execute(
                        &mut conn,
                        "CREATE DATABASE IF NOT EXISTS test",
                    )
                    .map_err(|e| e.to_string())?;
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err("the private MariaDB did not come up in 60 s".into())
        }
    }

    #[cfg(feature = "mysql")]
    impl PrivateServer for PrivateMariadb {
        fn start(dir: &Path, port: u16) -> Result<Self, String> {
            run(Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", dir.join("data").display()))
                .args([
                    "--user=mysql",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ]))?;
            run(Command::new("chown").args(["-R", "mysql:mysql"]).arg(dir))?;
            let mut server = PrivateMariadb {
                dir: dir.to_owned(),
                port,
                child: None,
            };
            server.spawn()?;
            Ok(server)
        }

        fn crash(&mut self) {
            if let Some(mut child) = self.child.take() {
                let _ = child.kill(); // SIGKILL: InnoDB recovers from its redo log on restart
                let _ = child.wait();
            }
        }

        fn restart(&mut self) {
            self.spawn().expect("restart the private MariaDB");
        }

        fn url(&self) -> String {
            format!("mysql://root@127.0.0.1:{}/test", self.port)
        }
    }

    #[cfg(feature = "mysql")]
    impl Drop for PrivateMariadb {
        fn drop(&mut self) {
            self.crash();
        }
    }

    /// A temporary directory removed on drop, even when the test fails.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(super) fn crash_restart<C: TestConnection, S: PrivateServer>(port: u16) {
        let dir = TempDir(std::env::temp_dir().join(format!(
            "slotted-private-{}-{}",
            C::NAME,
            std::process::id()
        )));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir_all(&dir.0).unwrap();
        let mut server = match S::start(&dir.0, port) {
            Ok(server) => server,
            Err(e) if require_all_backends() => panic!("private {} server: {e}", C::NAME),
            Err(e) => return eprintln!("skipped: cannot start a private {} server: {e}", C::NAME),
        };
        let url = server.url();
        C::open(&url)
            .run_pending_migrations(CounterMigrations::of::<Post>())
            .unwrap();

        let (acknowledged, unknown, after_restart) =
            (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let (stop, restarted) = (Stop::new(), AtomicBool::new(false));
        std::thread::scope(|scope| {
            // A panic below stops the threads that wait for `stop` (see `Stop`).
            let _stop = stop.on_exit();
            scope.spawn(|| {
                let mut conn: Option<C> = None;
                while !stop.is_set() {
                    let Some(c) = conn.as_mut() else {
                        conn = C::establish(&url).ok();
                        if conn.is_none() {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        continue;
                    };
                    match Post::likes_of(1).increment(c) {
                        Ok(()) => {
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                            if restarted.load(Ordering::Acquire) {
                                after_restart.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // The server died under this call: it may or may not have committed.
                        Err(_) => {
                            unknown.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(700));
            server.crash();
            std::thread::sleep(Duration::from_millis(500));
            server.restart();
            restarted.store(true, Ordering::Release);
            let deadline = Instant::now() + Duration::from_secs(30);
            while after_restart.load(Ordering::Relaxed) < 50 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.set();
        });
        let (acknowledged, unknown) = (
            acknowledged.into_inner() as i64,
            unknown.into_inner() as i64,
        );
        let total = Post::likes_of(1).total(&mut C::open(&url)).unwrap();
        println!(
            "{}: {acknowledged} acknowledged ({} after the restart), {unknown} failed during the outage, total {total}",
            C::NAME,
            after_restart.into_inner()
        );
        assert!(unknown > 0, "calls failed while the server was down");
        assert!(acknowledged > 50, "calls succeeded before and after");
        assert!(
            (acknowledged..=acknowledged + unknown).contains(&total),
            "no acknowledged increment lost, none invented"
        );
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn crash_restart_loses_no_acknowledged_increment<C: TestConnection>(test: &str) {
    // The shared server's URL only decides whether this backend runs; the test uses its own.
    if TestDb::new::<C>(test).is_none() {
        return;
    }
    match C::NAME {
        #[cfg(feature = "postgres")]
        "postgres" => servers::crash_restart::<C, servers::PrivatePostgres>(54_329),
        #[cfg(feature = "mysql")]
        "mysql" => servers::crash_restart::<C, servers::PrivateMariadb>(33_069),
        other => unreachable!("registered for the servers only, not {other}"),
    }
}

/// SQLite's busy timeout (the servers' concurrency is tested elsewhere).
#[cfg(feature = "sqlite")]
fn many_writer_threads_wait_and_count_exactly<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    const THREADS: usize = 16;
    const EACH: usize = 100;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let mut conn = C::open(&db.url); // busy_timeout = 10 s, as README advises
                for _ in 0..EACH {
                    conn.transaction(|conn| {
                        Post::likes_of(1).increment(conn)?;
                        Post::views_of(1).add(2, conn)
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        (THREADS * EACH) as i64
    );
    assert_eq!(
        Post::views_of(1).total(&mut conn).unwrap(),
        (2 * THREADS * EACH) as i64
    );
}

/// `SqliteSetup` on an r2d2 pool: every connection the pool opens has the busy timeout and WAL,
/// and 16 threads writing through it in transactions all count (a pool without it leaves the
/// busy timeout at 0: a writer that finds the database locked fails at once).
#[cfg(feature = "sqlite")]
fn a_pool_with_sqlite_setup_waits_instead_of_failing<C: TestConnection>(test: &str) {
    use diesel::r2d2::{ConnectionManager, Pool};
    use diesel::sql_types::{BigInt, Text};
    use diesel::{Connection, RunQueryDsl, SqliteConnection};
    use slotted_core::sqlite::SqliteSetup;

    #[derive(diesel::QueryableByName)]
    struct Timeout {
        #[diesel(sql_type = BigInt)]
        timeout: i64,
    }
    #[derive(diesel::QueryableByName)]
    struct Mode {
        #[diesel(sql_type = Text)]
        journal_mode: String,
    }
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let timeout = |conn: &mut SqliteConnection| {
        diesel::sql_query("PRAGMA busy_timeout")
            .get_result::<Timeout>(conn)
            .unwrap()
            .timeout
    };
    let bare = Pool::builder()
        .max_size(1)
        .build(ConnectionManager::<SqliteConnection>::new(&db.url))
        .unwrap();
    assert_eq!(timeout(&mut bare.get().unwrap()), 0, "SQLite's own default");

    let pool = Pool::builder()
        .max_size(16)
        .connection_customizer(Box::new(SqliteSetup::default()))
        .build(ConnectionManager::<SqliteConnection>::new(&db.url))
        .unwrap();
    let mut pooled = pool.get().unwrap();
    assert_eq!(timeout(&mut pooled), 5_000);
    let mode = diesel::sql_query("PRAGMA journal_mode")
        .get_result::<Mode>(&mut *pooled)
        .unwrap();
    assert_eq!(mode.journal_mode, "wal");
    drop(pooled);
    #[cfg(feature = "async")]
    {
        // The same setup on a bb8 pool of diesel-async's SQLite connections.
        use diesel_async::pooled_connection::{bb8, AsyncDieselConnectionManager};
        let timeout = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let manager = AsyncDieselConnectionManager::new_with_config(
                    &db.url,
                    SqliteSetup::default().manager_config(),
                );
                let pool = bb8::Pool::builder().build(manager).await.unwrap();
                let mut conn = pool.get().await.unwrap();
                diesel_async::RunQueryDsl::get_result::<Timeout>(
                    diesel::sql_query("PRAGMA busy_timeout"),
                    &mut *conn,
                )
                .await
                .unwrap()
                .timeout
            });
        assert_eq!(timeout, 5_000);
    }

    const THREADS: usize = 16;
    const EACH: usize = 50;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let pool = pool.clone();
            scope.spawn(move || {
                let mut conn = pool.get().unwrap();
                for _ in 0..EACH {
                    conn.transaction(|conn| Post::likes_of(1).increment(conn))
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        (THREADS * EACH) as i64
    );
}

/// Runs `calls` on `conn` in a thread of their own, waits for them at most 30 s, and gives the
/// connection back: a call that never returns fails the test instead of hanging it.
fn within_30s<C: TestConnection, T: Send + 'static>(
    mut conn: C,
    calls: impl FnOnce(&mut C) -> T + Send + 'static,
) -> (C, T) {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let out = calls(&mut conn);
        let _ = done.send((conn, out));
    });
    match result.recv_timeout(Duration::from_secs(30)) {
        Ok(done) => done,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{}: a call on the connection never returned", C::NAME)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{}: the calls panicked", C::NAME),
    }
}

/// A session that holds record 2's `likes` row in an open transaction (on SQLite, the database's
/// write lock) until it commits.
fn hold_record_2<C: TestConnection>(url: &str) -> C {
    let mut holder = C::open(url);
    holder
        .batch_execute(if C::NAME == "sqlite" {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        })
        .unwrap();
    Post::likes_of(2).increment(&mut holder).unwrap();
    holder
}

/// Makes `conn` give up waiting for a lock after a second or less.
fn give_up_waiting_soon<C: TestConnection>(conn: &mut C) {
    conn.batch_execute(match C::NAME {
        "postgres" => "SET lock_timeout = '300ms'",
        "mysql" => "SET SESSION innodb_lock_wait_timeout = 1",
        _ => "PRAGMA busy_timeout = 300",
    })
    .unwrap();
}

/// A maintenance call that gives up waiting for a row lock held by another session returns an
/// error, and the connection goes on working: the same calls succeed once the lock is gone. On
/// SQLite the call is a compaction (the holder has the database's write lock); on PostgreSQL and
/// MySQL a compaction no longer waits (it skips the locked row, and folds the rest), so the call
/// that waits is a `set`, which must hold every slot row of its record.
///
/// On MariaDB this once hung for good. A locking read that fails after its result set has
/// begun (a lock wait timeout, a deadlock) leaves libmariadb's prepared statement in a state
/// where executing it again waits for rows the server never sends; Diesel kept the statement
/// in its cache, so the next compaction on that connection never returned. slotted now drops the
/// connection's cached statements after a failed read on MySQL.
fn a_lock_timeout_leaves_the_connection_usable<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    for (key, delta) in [(1, 5), (2, 7), (1, 3)] {
        Post::likes_of(key).add(delta, &mut conn).unwrap();
    }
    give_up_waiting_soon(&mut conn);

    let mut holder = hold_record_2::<C>(&db.url);
    let (conn, errors) = within_30s(conn, |conn| {
        // Twice: the second runs the statement the first one failed in.
        if C::NAME != "sqlite" {
            let report = posts_likes_slots::table.compact(&[1, 2], conn).unwrap();
            // Record 1 folded; record 2's one row is held, so it is left for later.
            assert_eq!(report.records, 1, "no wait beside the held row: {report:?}");
        }
        [(); 2].map(|()| match C::NAME {
            "sqlite" => posts_likes_slots::table.compact(&[1, 2], conn).unwrap_err(),
            _ => Post::likes_of(2).set(50, conn).unwrap_err(),
        })
    });
    for err in errors {
        assert!(
            matches!(&err, Error::Database { counter, .. } if counter == "Post.likes"),
            "{err:?}"
        );
    }
    holder.batch_execute("COMMIT").unwrap();

    let (_, (report, totals)) = within_30s(conn, |conn| {
        let report = posts_likes_slots::table.compact(&[1, 2], conn).unwrap();
        Post::likes_of(2).set(100, conn).unwrap();
        Post::likes_of(1).increment(conn).unwrap();
        (report, Post::likes_totals(&[1, 2], conn).unwrap())
    });
    assert_eq!(report.records, 2, "{report:?}");
    assert_eq!((totals[&1], totals[&2]), (9, 100));
}

/// The read side of the same: a `total` that gives up waiting for a lock (a SERIALIZABLE
/// transaction's reads take shared locks on MySQL/MariaDB) returns an error, and the next
/// `total` on that connection returns.
#[cfg(feature = "mysql")]
fn a_lock_timeout_in_a_serializable_read_leaves_the_connection_usable<C: TestConnection>(
    test: &str,
) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    Post::likes_of(2).add(7, &mut conn).unwrap();
    conn.batch_execute(
        "SET SESSION innodb_lock_wait_timeout = 1; \
         SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    )
    .unwrap();
    let mut holder = hold_record_2::<C>(&db.url);
    let (conn, errors) = within_30s(conn, |conn| {
        // Twice: the second runs the statements the first ones failed in.
        [(); 2].map(|()| {
            let one = conn.transaction(|conn| Post::likes_of(2).total(conn));
            let many = conn.transaction(|conn| Post::likes_totals(&[1, 2], conn));
            (one.unwrap_err(), many.unwrap_err())
        })
    });
    for err in errors.into_iter().flat_map(|(one, many)| [one, many]) {
        assert!(matches!(err, Error::Database { .. }), "{err:?}");
    }
    holder.batch_execute("COMMIT").unwrap();
    let (_, (total, totals)) = within_30s(conn, |conn| {
        conn.transaction(|conn| {
            Ok::<_, Error>((
                Post::likes_of(2).total(conn)?,
                Post::likes_totals(&[1, 2], conn)?,
            ))
        })
        .unwrap()
    });
    assert_eq!((total, totals[&1], totals[&2]), (8, 0, 8));
}

/// The retry helper on a transaction of the user's own: its locking read (Diesel's query
/// builder, cached by Diesel) gives up on a lock held elsewhere, and the retry runs that read
/// again once the lock is gone. On MariaDB the retry would wait forever on the statement the
/// failure left unusable, had the helper not dropped the cached statements first. (SQLite has no
/// row locks: there the transaction increments, and its first attempt finds the database
/// locked.)
fn a_retried_transaction_runs_its_own_locking_read_again<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    Post::likes_of(2).add(7, &mut conn).unwrap();
    give_up_waiting_soon(&mut conn);
    let mut holder = hold_record_2::<C>(&db.url);
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        holder.batch_execute("COMMIT").unwrap();
    });
    let policy = slotted_core::retry::RetryPolicy {
        max_retries: 20,
        ..slotted_core::retry::RetryPolicy::default()
    };
    let (_, done) = within_30s(conn, move |conn| {
        slotted_core::retry::transaction_with_retry(conn, &policy, |conn| {
            if C::NAME == "sqlite" {
                Post::likes_of(2).increment(conn)?;
                return Post::likes_of(2).total(conn);
            }
            Ok(conn.lock_likes(2)?)
        })
        .unwrap()
    });
    release.join().unwrap();
    assert!(done.retries > 0, "the lock made the first attempt fail");
    // 7, the holder's increment, and on SQLite the transaction's own.
    assert_eq!(done.value, if C::NAME == "sqlite" { 9 } else { 8 });
}
