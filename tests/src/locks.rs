//! Watching a session of the test wait on a row lock, for the tests that write an interleaving
//! down: the server's identity of a session, whether it waits, and a poll paced for InnoDB.

use std::time::{Duration, Instant};

use crate::models::Post;
use crate::TestConnection;

/// Every slot row of `Post.likes`' record `key` (16), each holding 1: a write to any slot then
/// meets a row that exists, and waits for a session that holds them.
pub fn every_likes_slot<C: TestConnection>(conn: &mut C, key: i32) {
    let rows: Vec<String> = (0..16).map(|slot| format!("({key}, {slot}, 1)")).collect();
    conn.batch_execute(&format!(
        "INSERT INTO posts_likes_slots (record_id, slot, count) VALUES {}",
        rows.join(", ")
    ))
    .expect("insert the slot rows");
}

/// The server's identity of this session: PostgreSQL's backend pid, MySQL's connection id.
pub fn session_id<C: TestConnection>(conn: &mut C) -> i64 {
    conn.query_i64(match C::NAME {
        "postgres" => "SELECT CAST(pg_backend_pid() AS BIGINT) AS n",
        _ => "SELECT CAST(CONNECTION_ID() AS SIGNED) AS n",
    })
}

/// How many of these sessions wait on a lock right now.
pub fn waiting_on_a_lock<C: TestConnection>(conn: &mut C, sessions: &[i64]) -> i64 {
    let list = sessions
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    conn.query_i64(&match C::NAME {
        "postgres" => format!(
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND pid IN ({list})"
        ),
        _ => format!(
            "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX \
             WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id IN ({list})"
        ),
    })
}

/// Polls `done` until it holds or `limit` has passed; whether it held. Every 150 ms: InnoDB
/// refreshes `INNODB_TRX` only when nobody has read it for 100 ms, so a faster poll reads the
/// same stale rows for ever.
pub fn poll_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Whether a session of this database waits on a row lock (on MySQL, one seen in `INNODB_TRX`:
/// poll it every 150 ms at most often, [`poll_until`]).
pub fn a_session_waits<C: TestConnection>(conn: &mut C) -> bool {
    sessions_waiting(conn) > 0
}

/// How many sessions of this database wait on a lock (as [`a_session_waits`]).
pub fn sessions_waiting<C: TestConnection>(conn: &mut C) -> i64 {
    conn.query_i64(match C::NAME {
        "postgres" => {
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'"
        }
        _ => {
            "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t \
             JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
             WHERE p.DB = DATABASE() AND t.trx_state = 'LOCK WAIT'"
        }
    })
}

/// An increment outside a transaction is a transaction of its own; when the database rolls it
/// back to break a deadlock or a serialization conflict, nothing of it was written, and it must
/// run again: the caller gets `Ok` and the record counts it once. (Before it did, the caller got
/// the error, and a compaction's locks on InnoDB made it about once in 1,600 increments.)
/// Written down as one interleaving per server, with a session of the test in the compaction's
/// place, on the migrated database at `url`:
/// - MariaDB/MySQL: the session reads record 1's slot rows with a shared lock; the increment
///   waits for its row's exclusive lock; the session then updates the rows, which must wait
///   behind the increment's request: a deadlock. InnoDB rolls back the transaction that changed
///   fewer rows, the increment (the session changed one of record 2 first).
/// - PostgreSQL, with the writer's session in `REPEATABLE READ` (as an app's
///   `default_transaction_isolation` may put it): the session updates record 1's rows; the
///   increment waits for its row; the session commits, and the increment's snapshot is too old
///   to update the row: `40001`, could not serialize access due to concurrent update.
///
/// `increment` runs, on a thread of its own and a connection of its own, the SQL it is given
/// (the writer's session setting) and then the increment of `Post.likes` of record 1.
pub fn an_increment_meets_a_rollback<C: TestConnection>(
    url: &str,
    increment: impl FnOnce(&str) -> slotted_core::Result<()> + Send,
) {
    let mut conn = C::open(url);
    // The increment's row exists, and is held.
    every_likes_slot(&mut conn, 1);
    Post::likes_of(2).increment(&mut conn).unwrap();
    let mut session = C::open(url);
    session.batch_execute("BEGIN").unwrap();
    session
        .batch_execute("UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 2")
        .unwrap();
    let (setup, closes_the_cycle) = match C::NAME {
        "postgres" => {
            session
                .batch_execute("UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 1")
                .unwrap();
            (
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "COMMIT",
            )
        }
        _ => {
            session
                .batch_execute(
                    "SELECT count FROM posts_likes_slots WHERE record_id = 1 LOCK IN SHARE MODE",
                )
                .unwrap();
            (
                "DO 0",
                "UPDATE posts_likes_slots SET count = count + 1 WHERE record_id = 1",
            )
        }
    };
    std::thread::scope(|scope| {
        let increment = scope.spawn(|| increment(setup));
        assert!(
            poll_until(Duration::from_secs(30), || a_session_waits(&mut conn)),
            "{}: the increment never waited for its row",
            C::NAME
        );
        session
            .batch_execute(closes_the_cycle)
            .expect("the database rolls back the increment, not the session");
        if C::NAME != "postgres" {
            session.batch_execute("COMMIT").unwrap();
        }
        increment
            .join()
            .unwrap()
            .expect("the increment runs again after the database rolled it back");
    });
    // The session's +1 on each of record 1's 16 rows (and on record 2's), and the increment
    // once.
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 16 + 16 + 1);
    assert_eq!(Post::likes_of(2).total(&mut conn).unwrap(), 2);
}
