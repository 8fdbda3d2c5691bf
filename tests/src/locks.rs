//! Watching a session of the test wait on a row lock, for the tests that write an interleaving
//! down: the server's identity of a session, whether it waits, and a poll paced for InnoDB.

use std::time::{Duration, Instant};

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
