//! What the slot-assignment tests (`tests/spread.rs`) and benchmark (`examples/spread.rs`)
//! share: a face that opens connections and writes through them, connections opened with
//! others in between, and the server's view of the sessions and slots.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::models::{Event, Reaction};
use crate::{Dice, TestConnection};

/// How a face opens a connection and writes through it. The sync face's futures never wait.
#[allow(async_fn_in_trait)]
pub trait Face {
    /// The sync connection of the same backend, which observes.
    type Sync: TestConnection;
    type Conn;
    async fn open(url: &str) -> Self::Conn;
    /// One increment of `Reaction::hearts` (64 slots, `strategy = connection`).
    async fn heart(conn: &mut Self::Conn, record: i32);
    /// One increment of `Event::hits` (8 slots, the default strategy).
    async fn hit(conn: &mut Self::Conn, record: i64);
    /// The server's identity of the session: PostgreSQL's backend PID, MySQL's
    /// `CONNECTION_ID()` (what the `connection` strategy used before writer indices).
    async fn identity(conn: &mut Self::Conn) -> i64;
}

/// The record every writer writes once before the writes a test looks at: a PostgreSQL
/// session's first write goes to its connection's slot (`pg_backend_pid()`, as before writer
/// indices) and takes the session's writer index for the writes after it (slotted-core's
/// `sql::slot`). A MySQL session's first write already goes to its index's slot.
pub const WARM_UP: i32 = 0;

/// Every writer writes [`WARM_UP`] once.
pub async fn warm_up<F: Face>(writers: &mut [F::Conn]) {
    for conn in writers.iter_mut() {
        F::heart(conn, WARM_UP).await;
    }
}

/// Diesel's sync connections.
pub struct Sync<C>(std::marker::PhantomData<C>);

impl<C: TestConnection> Face for Sync<C> {
    type Sync = C;
    type Conn = C;
    async fn open(url: &str) -> C {
        C::open(url)
    }
    async fn heart(conn: &mut C, record: i32) {
        Reaction::hearts_of(record)
            .increment(conn)
            .expect("an increment");
    }
    async fn hit(conn: &mut C, record: i64) {
        Event::hits_of(record)
            .increment(conn)
            .expect("an increment");
    }
    async fn identity(conn: &mut C) -> i64 {
        conn.query_i64(identity_query(C::NAME))
    }
}

fn identity_query(backend: &str) -> &'static str {
    match backend {
        "postgres" => "SELECT CAST(pg_backend_pid() AS BIGINT) AS n",
        _ => "SELECT CAST(CONNECTION_ID() AS SIGNED) AS n",
    }
}

/// diesel-async's connections.
#[cfg(feature = "async")]
pub struct Async<A>(std::marker::PhantomData<A>);

#[cfg(feature = "async")]
impl<A: crate::asynch::AsyncTestConnection> Face for Async<A> {
    type Sync = A::Sync;
    type Conn = A;
    async fn open(url: &str) -> A {
        A::open(url).await
    }
    async fn heart(conn: &mut A, record: i32) {
        Reaction::hearts_of(record)
            .increment_async(conn)
            .await
            .expect("an increment");
    }
    async fn hit(conn: &mut A, record: i64) {
        Event::hits_of(record)
            .increment_async(conn)
            .await
            .expect("an increment");
    }
    async fn identity(conn: &mut A) -> i64 {
        conn.identity().await
    }
}

/// Runs a future that never waits (the sync face's) to its end, with no runtime.
pub fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a sync face's future waited"),
    }
}

/// The server sessions on this database, the observer's own included.
pub fn sessions<C: TestConnection>(observer: &mut C) -> i64 {
    observer.query_i64(match C::NAME {
        "postgres" => {
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        }
        _ => {
            "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM information_schema.processlist \
             WHERE db = DATABASE()"
        }
    })
}

/// Waits until the server has ended every session of the database but `live` (a closed
/// connection's session ends a moment after the client closed it, and frees its writer index
/// then).
pub fn wait_for_sessions<C: TestConnection>(observer: &mut C, live: i64) {
    let until = Instant::now() + Duration::from_secs(30);
    while sessions(observer) > live {
        assert!(Instant::now() < until, "sessions still open on the server");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the server can take `needed` more connections (PostgreSQL's default limit is
/// 100, and a pooler may still hold idle server connections of earlier tests for a while).
pub fn wait_for_room<C: TestConnection>(observer: &mut C, needed: i64) {
    let limit = observer.query_i64(crate::connection_limit_sql(C::NAME));
    let everyone = match C::NAME {
        "postgres" => {
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE backend_type = 'client backend'"
        }
        _ => "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM information_schema.processlist",
    };
    let until = Instant::now() + Duration::from_secs(60);
    while limit - observer.query_i64(everyone) < needed {
        assert!(
            Instant::now() < until,
            "the server has no room for {needed} more connections (of {limit})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Slot -> count of an integer-keyed record.
pub fn slots<C: TestConnection>(observer: &mut C, table: &str, record: i64) -> BTreeMap<i16, i64> {
    observer
        .slot_rows(table, record)
        .into_iter()
        .map(|r| (r.slot, r.count))
        .collect()
}

/// Opens `n` connections, with `others` connections that never write (other services, health
/// checks, migrations) opened in between at random places; returns both.
pub async fn open_interleaved<F: Face>(
    url: &str,
    n: usize,
    others: usize,
    dice: &mut Dice,
) -> (Vec<F::Conn>, Vec<F::Conn>) {
    let mut writers = Vec::with_capacity(n);
    let mut bystanders = Vec::with_capacity(others);
    while writers.len() < n || bystanders.len() < others {
        let left = (n - writers.len() + others - bystanders.len()) as u64;
        if dice.below(left) < (others - bystanders.len()) as u64 {
            bystanders.push(F::open(url).await);
        } else {
            writers.push(F::open(url).await);
        }
    }
    (writers, bystanders)
}

/// A pool that replaced every other connection: drops them, waits until the server ended their
/// sessions (`live` others stay open), and opens as many again with `others` more bystanders
/// in between.
pub async fn churn<F: Face>(
    url: &str,
    observer: &mut F::Sync,
    writers: Vec<F::Conn>,
    bystanders: &mut Vec<F::Conn>,
    others: usize,
    dice: &mut Dice,
) -> Vec<F::Conn> {
    let n = writers.len();
    let mut kept: Vec<F::Conn> = writers.into_iter().step_by(2).collect();
    wait_for_sessions(observer, 1 + (kept.len() + bystanders.len()) as i64);
    let (fresh, extra) = open_interleaved::<F>(url, n - kept.len(), others, dice).await;
    kept.extend(fresh);
    bystanders.extend(extra);
    kept
}
