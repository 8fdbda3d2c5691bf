//! The default slot assignment (`strategy = connection`) in a deployment's shape: the writers
//! alive at one time hold distinct slots whenever there are no more of them than slots, whatever
//! other connections were opened in between, after a pool replaced half its connections, and
//! across two processes; with more writers than slots, every slot gets its even share. On
//! PostgreSQL and MariaDB, sync (Diesel) and async (diesel-async: on MariaDB, mysql_async uses
//! up two connection ids per connection, which made `CONNECTION_ID() % slots` reach only half
//! of the slots).
//!
//! The server-side mechanism (a writer index per session) is in `slotted-core/src/sql/slot.rs`.
#![cfg(any(feature = "postgres", feature = "mysql"))]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use slotted_core::CounterMigrations;
use slotted_tests::models::{Event, Reaction};
use slotted_tests::spread::{churn, open_interleaved, ready, slots, warm_up, Face, Sync, WARM_UP};
use slotted_tests::{Dice, TestConnection, TestDb};

/// Live writers in each step: half the 64 slots of `Reaction::hearts`, four times the 8 of
/// `Event::hits`.
const WRITERS: usize = 32;
/// The child process's writers.
const CHILD_WRITERS: usize = 16;
/// Tells the child process which backend and database: `<backend> <url>`.
const CHILD: &str = "SLOTTED_SPREAD_CHILD";

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every live writer writes `record` once (after its first write: see [`WARM_UP`]): then it holds
/// `writers` distinct slots, one write each.
async fn assert_distinct<F: Face>(
    observer: &mut F::Sync,
    writers: &mut [F::Conn],
    record: i32,
    what: &str,
) {
    warm_up::<F>(writers).await;
    for conn in writers.iter_mut() {
        F::heart(conn, record).await;
    }
    let found = slots(observer, "reactions_hearts_slots", record.into());
    assert_eq!(
        found.len(),
        writers.len(),
        "{what}: {} live writers, 64 slots, so as many distinct slots: {found:?}",
        writers.len()
    );
    assert!(found.values().all(|&c| c == 1), "{what}: {found:?}");
}

// The lock only keeps the sync and the async test (each on a runtime of its own, or none) from
// running at once; no other task of the same runtime ever waits for it.
#[allow(clippy::await_holding_lock)]
async fn spread<F: Face>(test: &str, seed: u64) {
    let Some(db) = TestDb::new::<F::Sync>(test) else {
        return;
    };
    let mut observer = F::Sync::open(&db.url);
    for migrations in [
        CounterMigrations::of::<Reaction>(),
        CounterMigrations::of::<Event>(),
    ] {
        diesel_migrations::MigrationHarness::run_pending_migrations(&mut observer, migrations)
            .expect("the counter tables");
    }
    let mut dice = Dice(seed);

    // One at a time: up to 32 + 24 + 16 connections (PostgreSQL's default limit is 100).
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    slotted_tests::spread::wait_for_room(&mut observer, 80);
    // A pool's connections, with up to 24 others opened in between (the benchmark opens up to
    // 74: `cargo run --example spread`).
    let others = dice.below(25) as usize;
    let (mut writers, mut bystanders) =
        open_interleaved::<F>(&db.url, WRITERS, others, &mut dice).await;
    assert_distinct::<F>(&mut observer, &mut writers, 1, &format!("{others} others")).await;

    // The pool replaces every other connection; more others come and go meanwhile.
    bystanders.truncate(bystanders.len() / 2);
    let more = dice.below(15) as usize;
    let mut writers = churn::<F>(
        &db.url,
        &mut observer,
        writers,
        &mut bystanders,
        more,
        &mut dice,
    )
    .await;
    assert_distinct::<F>(&mut observer, &mut writers, 2, "after the churn").await;

    // More writers than slots: 32 writers over `Event::hits`' 8 slots, 4 each.
    for conn in writers.iter_mut() {
        F::hit(conn, 1).await;
    }
    let found = slots(&mut observer, "events_hits_slots", 1);
    assert_eq!(
        found,
        (0..8).map(|slot| (slot, 4)).collect::<BTreeMap<_, _>>(),
        "32 writers over 8 slots: 4 each"
    );

    // A second process's writers, alive at the same time as these 32.
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["spread_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD, format!("{} {}", F::Sync::NAME, db.url))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the second process");
    let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line == "written" => break,
            Some(Ok(_)) => continue,
            other => panic!("the second process ended early: {other:?}"),
        }
    }
    for conn in writers.iter_mut() {
        F::heart(conn, 3).await;
    }
    let found = slots(&mut observer, "reactions_hearts_slots", 3);
    // Let the child close its connections, and wait for it.
    drop(child.stdin.take());
    assert!(child.wait().expect("the second process").success());
    assert_eq!(
        found.len(),
        WRITERS + CHILD_WRITERS,
        "two processes' {} live writers: {found:?}",
        WRITERS + CHILD_WRITERS
    );
    drop(bystanders);
}

/// The second process: opens `CHILD_WRITERS` connections, writes record 3 once from each (after
/// [`WARM_UP`]), says
/// `written`, and keeps them open until its stdin closes. Runs only when a test starts it.
#[test]
#[ignore = "started by the spread tests as their second process"]
fn spread_child() {
    let Ok(args) = std::env::var(CHILD) else {
        return;
    };
    let (backend, url) = args.split_once(' ').expect("<backend> <url>");
    fn run<C: TestConnection>(url: &str) {
        let mut conns: Vec<C> = (0..CHILD_WRITERS).map(|_| C::open(url)).collect();
        for record in [WARM_UP, 3] {
            for conn in &mut conns {
                Reaction::hearts_of(record)
                    .increment(conn)
                    .expect("an increment");
            }
        }
        println!("written");
        std::io::stdout().flush().expect("stdout");
        let mut rest = String::new();
        let _ = std::io::stdin().read_line(&mut rest);
    }
    match backend {
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(url),
        #[cfg(feature = "mysql")]
        "mysql" => run::<diesel::MysqlConnection>(url),
        other => panic!("no backend {other}"),
    }
}

fn sync_writers_hold_distinct_slots<C: TestConnection>(test: &str) {
    ready(spread::<Sync<C>>(test, 0x5eed_0001));
}

/// A database of the test's own with the `Reaction::hearts` counter table, and an observer.
fn reactions<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let (db, mut observer) = TestDb::migrated::<C>(test)?;
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut observer,
        CounterMigrations::of::<Reaction>(),
    )
    .expect("the reactions counter table");
    Some((db, observer))
}

/// A new session whose first write, to `record`, is in a transaction that rolls back.
fn open_after_a_rolled_back_write<C: TestConnection>(url: &str, record: i32) -> C {
    let mut conn = C::open(url);
    let rolled_back = conn.transaction(|conn| {
        Reaction::hearts_of(record).increment(conn)?;
        Err::<(), _>(slotted_core::Error::from(
            diesel::result::Error::RollbackTransaction,
        ))
    });
    assert!(rolled_back.is_err());
    conn
}

/// A session's first write rolled back: on PostgreSQL the setting that keeps the index rolls
/// back with it while the advisory lock stays; the next taking finds that lock and keeps its
/// index, not a second one. On MySQL the user variable and the named lock both
/// outlive the transaction. Either way the next session gets the next index. (Record 1 takes
/// the writes that take an index, record 2 the ones that show it: see [`WARM_UP`].)
fn a_rolled_back_first_write_keeps_its_index<C: TestConnection>(test: &str) {
    let Some((db, mut observer)) = reactions::<C>(test) else {
        return;
    };
    let mut first = open_after_a_rolled_back_write::<C>(&db.url, 1);
    assert!(slots(&mut observer, "reactions_hearts_slots", 1).is_empty());
    let mut second = C::open(&db.url);
    for record in [1, 2] {
        for conn in [&mut first, &mut second] {
            Reaction::hearts_of(record)
                .increment(conn)
                .expect("an increment");
        }
    }
    assert_eq!(
        slots(&mut observer, "reactions_hearts_slots", 2),
        BTreeMap::from([(0, 1), (1, 1)]),
        "the first session kept index 0, the second took 1"
    );
    if C::NAME == "postgres" {
        let held = observer.query_i64(
            "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' \
             AND classid = 1936486260 AND objsubid = 2 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        );
        assert_eq!(held, 2, "one index per session");
    }
}

/// The interleaving that gave a PostgreSQL session two indices: it took index 1 in a
/// transaction that rolled back (the setting goes, the advisory lock stays), then index 0 was
/// freed, then it wrote again. The next taking now finds the lock the session holds and keeps
/// index 1; a new session takes 0. On MySQL the user variable outlives the transaction: the
/// same outcome.
fn a_rolled_back_index_is_kept_when_a_smaller_one_frees<C: TestConnection>(test: &str) {
    let Some((db, mut observer)) = reactions::<C>(test) else {
        return;
    };
    let mut holder = C::open(&db.url);
    for _ in 0..2 {
        Reaction::hearts_of(1)
            .increment(&mut holder)
            .expect("an increment");
    }
    let mut first = open_after_a_rolled_back_write::<C>(&db.url, 2);
    drop(holder);
    slotted_tests::spread::wait_for_sessions(&mut observer, 2);
    for _ in 0..2 {
        Reaction::hearts_of(3)
            .increment(&mut first)
            .expect("an increment");
    }
    let identity = ready(Sync::<C>::identity(&mut first));
    let holders: Vec<i64> = (0..2)
        .map(|index| {
            observer.query_i64(&match C::NAME {
                "postgres" => format!(
                    "SELECT CAST(COALESCE(MIN(pid), -1) AS BIGINT) AS n FROM pg_locks \
                     WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2 \
                     AND objid = {index} AND database = \
                     (SELECT oid FROM pg_database WHERE datname = current_database())"
                ),
                _ => format!(
                    "SELECT CAST(COALESCE(IS_USED_LOCK(LEFT(CONCAT('slotted.', {index}, '.', \
                     DATABASE()), 64)), -1) AS SIGNED) AS n"
                ),
            })
        })
        .collect();
    assert_eq!(
        holders,
        [-1, identity],
        "index 0 free, index 1 still the first session's (and no second index)"
    );
    // Its second write at least went to index 1's slot (on MySQL the first did too).
    let written = slots(&mut observer, "reactions_hearts_slots", 3);
    assert!(written.get(&1).is_some_and(|&n| n >= 1), "{written:?}");
    let mut next = C::open(&db.url);
    for record in [WARM_UP, 4] {
        Reaction::hearts_of(record)
            .increment(&mut next)
            .expect("an increment");
    }
    assert_eq!(
        slots(&mut observer, "reactions_hearts_slots", 4),
        BTreeMap::from([(0, 1)]),
        "a new session takes the freed index 0"
    );
}

/// Where a session's first two writes go (`sql::slot`). On PostgreSQL the first goes to its
/// connection's slot, `(1024 + pg_backend_pid() % 1024) % 64` (the session holds no index yet,
/// and the write says so), and the index is taken after it: the second goes to the index's slot.
/// On MySQL both go to the index's slot (the first write's NULL slot is refused, the index
/// taken, the write run again). Two sessions, a record each: indices 0 and 1.
fn where_a_sessions_first_writes_go<C: TestConnection>(test: &str) {
    let Some((db, mut observer)) = reactions::<C>(test) else {
        return;
    };
    // The first session stays open while the second writes: it holds index 0 meanwhile.
    let mut open = Vec::new();
    for (index, record) in [(0_i16, 1), (1, 2)] {
        let mut conn = C::open(&db.url);
        let identity = ready(Sync::<C>::identity(&mut conn));
        for _ in 0..2 {
            Reaction::hearts_of(record)
                .increment(&mut conn)
                .expect("an increment");
        }
        let first = match C::NAME {
            "postgres" => ((1024 + identity % 1024) % 64) as i16,
            _ => index,
        };
        let mut expected = BTreeMap::new();
        for slot in [first, index] {
            *expected.entry(slot).or_insert(0) += 1;
        }
        assert_eq!(
            slots(&mut observer, "reactions_hearts_slots", record.into()),
            expected,
            "session {index} (server identity {identity}): its first write, then its index's slot"
        );
        open.push(conn);
    }
    drop(open);
}

/// A session's first write into a slot row that cannot take it: on PostgreSQL the write that
/// runs only with a writer index writes nothing (no index yet), and the write to the
/// connection's slot is stopped by the overflow guard, so the two say `Overflow`, not "no
/// index"; on MySQL the write runs again after taking index 0, into slot 0, and the server
/// refuses the sum (error 1690). Nothing is written either way, and the session's next write
/// to another record counts once.
fn a_first_write_into_a_full_slot_is_an_overflow<C: TestConnection>(test: &str) {
    let Some((db, mut observer)) = reactions::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let identity = ready(Sync::<C>::identity(&mut conn));
    let full = match C::NAME {
        "postgres" => (1024 + identity % 1024) % 64,
        _ => 0,
    };
    observer
        .batch_execute(&format!(
            "INSERT INTO reactions_hearts_slots (record_id, slot, count) VALUES (3, {full}, {})",
            i64::MAX
        ))
        .expect("a full slot row");
    let err = Reaction::hearts_of(3)
        .increment(&mut conn)
        .expect_err("the slot row is full");
    assert!(
        matches!(err, slotted_core::Error::Overflow { .. }),
        "an overflow, not {err:?}"
    );
    assert_eq!(
        slots(&mut observer, "reactions_hearts_slots", 3),
        BTreeMap::from([(full as i16, i64::MAX)]),
        "nothing written"
    );
    Reaction::hearts_of(4)
        .increment(&mut conn)
        .expect("an increment");
    assert_eq!(Reaction::hearts_of(4).total(&mut conn).unwrap(), 1);
}

slotted_tests::backend_tests! {
    servers: [
        sync_writers_hold_distinct_slots,
        a_rolled_back_first_write_keeps_its_index,
        a_rolled_back_index_is_kept_when_a_smaller_one_frees,
        where_a_sessions_first_writes_go,
        a_first_write_into_a_full_slot_is_an_overflow,
    ],
}

#[cfg(feature = "async")]
async fn async_writers_hold_distinct_slots<A: slotted_tests::asynch::AsyncTestConnection>(
    test: &str,
) {
    spread::<slotted_tests::spread::Async<A>>(test, 0x5eed_0002).await;
}

/// A session's first write cut off at any point: on MySQL the write refused for its NULL slot,
/// `TakeWriterIndex`, the write again; on PostgreSQL the write to the connection's slot, then
/// `TakeWriterIndex`. Each on a session of its own, dropped after it: every write counts once or
/// not at all, and every index goes with its session (the next writer takes index 0).
#[cfg(feature = "async")]
async fn async_first_writes_cut_off_count_once<A: slotted_tests::asynch::AsyncTestConnection>(
    test: &str,
) {
    let Some(db) = TestDb::new::<A::Sync>(&format!("async_{test}")) else {
        return;
    };
    let mut observer = A::Sync::open(&db.url);
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut observer,
        CounterMigrations::of::<Reaction>(),
    )
    .expect("the reactions counter table");
    // How long a first write takes on this machine now (a loaded one takes longer): the limits
    // below run from nothing to 1.5 times it, so that some are cut off and some are not.
    let full = {
        let mut conn = A::open(&db.url).await;
        let started = std::time::Instant::now();
        Reaction::hearts_of(99)
            .increment_async(&mut conn)
            .await
            .expect("an increment");
        started.elapsed()
    };
    let (mut acknowledged, mut cut_off) = (0_i64, 0_i64);
    for i in 0..120_u32 {
        let mut conn = A::open(&db.url).await;
        let limit = full.mul_f64(f64::from((i * 37) % 120) / 80.0);
        let hearts = Reaction::hearts_of(1);
        match tokio::time::timeout(limit, hearts.increment_async(&mut conn)).await {
            Ok(Ok(())) => acknowledged += 1,
            Ok(Err(e)) => panic!("a first write that ran to its end failed: {e}"),
            Err(_) => cut_off += 1,
        }
    }
    assert!(
        acknowledged > 0 && cut_off > 0,
        "some cut off, not all: {acknowledged} acknowledged, {cut_off} cut off"
    );
    slotted_tests::spread::wait_for_sessions(&mut observer, 1);
    let total: i64 = slots(&mut observer, "reactions_hearts_slots", 1)
        .values()
        .sum();
    slotted_tests::assert_counted_once(
        &format!("{}, first writes", <A::Sync as TestConnection>::NAME),
        acknowledged,
        cut_off,
        total,
    );
    let mut next = A::open(&db.url).await;
    for record in [WARM_UP, 2] {
        Reaction::hearts_of(record)
            .increment_async(&mut next)
            .await
            .expect("an increment");
    }
    assert_eq!(
        slots(&mut observer, "reactions_hearts_slots", 2),
        BTreeMap::from([(0, 1)]),
        "no index outlived its session"
    );
}

#[cfg(feature = "async")]
mod asynchronous {
    use super::{async_first_writes_cut_off_count_once, async_writers_hold_distinct_slots};
    slotted_tests::async_backend_tests! {
        all: [],
        servers: [async_writers_hold_distinct_slots, async_first_writes_cut_off_count_once],
    }
}
