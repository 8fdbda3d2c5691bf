//! Contention diagnostics: exact counts of rows, records and compactable rows on every backend,
//! and, on PostgreSQL and MariaDB, real lock waits seen while they wait.

use diesel::connection::SimpleConnection;
use slotted_core::{
    diagnostics::diagnose, diagnostics::diagnose_with, diagnostics::Advice,
    diagnostics::DiagnoseOptions, diagnostics::LockWaits, CounterMaintenance, SlottedModel,
};
use slotted_tests::lifecycle::{self, Download, Video};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use slotted_tests::locks::{every_likes_slot, session_id};
use slotted_tests::models::{posts_likes_slots, Post};
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests! {
    all: [counts_rows_records_and_what_compaction_removes, counts_buckets_and_shared_rows_per_counter],
    servers: [sees_writers_waiting_for_a_locked_record, reports_the_writer_indices_held],
}

/// The `connection` strategy's writers: the sessions holding a writer index, and the advice
/// to raise the slots once they outnumber a counter's (`Event::hits`: 8 slots). SQLite has
/// none: `writers` is `None` there (`counts_rows_records_and_what_compaction_removes`).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn reports_the_writer_indices_held<C: TestConnection>(test: &str) {
    use slotted_tests::models::Event;
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let report = diagnose(Event::COUNTERS, &mut conn).expect("diagnose");
    assert_eq!(
        report.writers.map(|w| (w.held, w.highest)),
        Some((0, None)),
        "no writer yet"
    );
    let mut writers: Vec<C> = (0..3).map(|_| C::open(&db.url)).collect();
    for writer in &mut writers {
        Event::hits_of(1).increment(writer).expect("an increment");
    }
    let report = diagnose(Event::COUNTERS, &mut conn).expect("diagnose");
    assert_eq!(
        report.writers.map(|w| (w.held, w.highest)),
        Some((3, Some(2)))
    );
    let more_writers = |advice: &Advice| matches!(advice, Advice::MoreWritersThanSlots { .. });
    assert!(
        !report.tables[0].advice.iter().any(more_writers),
        "3 writers, 8 slots: {report}"
    );
    assert!(
        report.to_string().contains(
            "writer indices held (sessions writing with the connection strategy): 3, the highest 2"
        ),
        "{report}"
    );
    writers.extend((0..6).map(|_| C::open(&db.url)));
    for writer in &mut writers {
        Event::hits_of(2).increment(writer).expect("an increment");
    }
    let report = diagnose(Event::COUNTERS, &mut conn).expect("diagnose");
    assert_eq!(report.writers.map(|w| w.held), Some(9));
    assert_eq!(
        report.tables[0].advice.iter().find(|a| more_writers(a)),
        Some(&Advice::MoreWritersThanSlots {
            writers: 9,
            slots: 8,
            suggested: 16
        }),
        "{report}"
    );
    assert!(
        report
            .to_string()
            .contains("raise the slot count: 9 sessions"),
        "{report}"
    );
}

fn insert(conn: &mut impl SimpleConnection, table: &str, columns: &str, rows: &[&str]) {
    conn.batch_execute(&format!(
        "INSERT INTO {table} ({columns}) VALUES {}",
        rows.join(", ")
    ))
    .unwrap_or_else(|e| panic!("insert into {table}: {e}"));
}

fn no_waits_expected<C: TestConnection>(waits: &LockWaits) {
    match C::NAME {
        "sqlite" => assert_eq!(waits, &LockWaits::NotPossible),
        _ => assert_eq!(waits, &LockWaits::Seen(Vec::new())),
    }
}

fn counts_rows_records_and_what_compaction_removes<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    // Record 1: five rows; 2: three rows summing to 0; 3: one row; 4: one row of 0.
    insert(
        &mut conn,
        "posts_likes_slots",
        "record_id, slot, count",
        &[
            "(1, 0, 1)",
            "(1, 1, 1)",
            "(1, 2, 1)",
            "(1, 3, 1)",
            "(1, 4, 1)",
            "(2, 0, 2)",
            "(2, 5, -1)",
            "(2, 9, -1)",
            "(3, 7, 7)",
            "(4, 0, 0)",
        ],
    );

    let options = DiagnoseOptions::default().hottest(3);
    let report = diagnose_with(Post::COUNTERS, &options, &mut conn).expect("diagnose");
    // Writer indices: none on SQLite, none held yet on the servers.
    match C::NAME {
        "sqlite" => assert_eq!(report.writers, None),
        _ => assert_eq!(report.writers.map(|w| w.held), Some(0)),
    }
    let likes = &report.tables[0];
    assert_eq!(likes.spec.table, "posts_likes_slots");
    assert_eq!(
        (
            likes.rows,
            likes.records,
            likes.groups,
            likes.max_rows_per_group
        ),
        (10, 4, 4, 5)
    );
    // Everything but one row each of records 1 and 3.
    assert_eq!(likes.compactable_rows, 8);
    let hottest: Vec<_> = likes
        .hottest
        .iter()
        .map(|h| (h.key.as_str(), h.rows, h.slots_in_use, h.buckets))
        .collect();
    assert_eq!(hottest, [("1", 5, 5, 1), ("2", 3, 3, 1), ("3", 1, 1, 1)]);
    no_waits_expected::<C>(&likes.lock_waits);
    assert_eq!(
        likes.advice,
        [Advice::Compact {
            rows_removed: 8,
            rows: 10
        }]
    );
    let views = &report.tables[1];
    assert_eq!(
        (views.rows, views.records, views.compactable_rows),
        (0, 0, 0)
    );
    assert!(views.hottest.is_empty() && views.advice.is_empty());

    let text = report.to_string();
    assert!(text.contains("Post.likes in posts_likes_slots"), "{text}");
    assert!(text.contains("a compaction would remove 8 rows"), "{text}");
    assert!(
        text.contains("compact: 8 of its 10 rows would go"),
        "{text}"
    );

    // What the report promised is what compaction does.
    let done = posts_likes_slots::table
        .compact_all(1000, &mut conn)
        .expect("compact");
    assert_eq!(done.rows_before - done.rows_after, 8);
    let after = diagnose(&Post::COUNTERS[..1], &mut conn).expect("diagnose after");
    let likes = &after.tables[0];
    assert_eq!(
        (likes.rows, likes.records, likes.compactable_rows),
        (2, 2, 0)
    );
    assert!(likes.advice.is_empty(), "{after}");
}

fn counts_buckets_and_shared_rows_per_counter<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    lifecycle::migrate(&mut conn);

    let daily = Download::COUNTERS[0];
    // Record 1: two rows in the first day, one in the next; record 2: one row of 0.
    insert(
        &mut conn,
        daily.table,
        "record_id, bucket, slot, count",
        &[
            "(1, 0, 0, 1)",
            "(1, 0, 1, 1)",
            "(1, 86400, 0, 2)",
            "(2, 0, 0, 0)",
        ],
    );
    let report = diagnose(&[daily], &mut conn).expect("diagnose buckets");
    let t = &report.tables[0];
    assert_eq!(
        (t.rows, t.records, t.groups, t.max_rows_per_group),
        (4, 2, 3, 2)
    );
    assert_eq!(t.compactable_rows, 2);
    let hottest: Vec<_> = t
        .hottest
        .iter()
        .map(|h| (h.key.as_str(), h.rows, h.slots_in_use, h.buckets))
        .collect();
    assert_eq!(hottest, [("1", 3, 2, 2), ("2", 1, 1, 1)]);

    // Three counters in the one shared table: each counts its own rows only.
    insert(
        &mut conn,
        "slotted_counters",
        "record_type, record_id, slot, count",
        &[
            "('videos.plays', 1, 0, 1)",
            "('videos.plays', 1, 1, 1)",
            "('videos.plays', 1, 2, 1)",
            "('videos.likes', 1, 0, 1)",
            "('videos.likes', 2, 0, 1)",
            "('photos.views', 1, 0, 1)",
            "('photos.views', 1, 1, 1)",
            "('photos.views', 1, 2, 1)",
            "('photos.views', 1, 3, 1)",
        ],
    );
    let report = diagnose(Video::COUNTERS, &mut conn).expect("diagnose shared");
    let counts: Vec<_> = report
        .tables
        .iter()
        .map(|t| (t.spec.counter, t.rows, t.records, t.compactable_rows))
        .collect();
    assert_eq!(counts, [("plays", 3, 1, 2), ("likes", 2, 2, 0)]);
    no_waits_expected::<C>(&report.tables[0].lock_waits);
    let text = report.to_string();
    assert!(text.contains("(`videos.plays` rows)"), "{text}");
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Holds every slot row of record 1 with `SELECT … FOR UPDATE` in an open transaction while
/// three writers increment it, looks while they wait, then lets them go.
fn sees_writers_waiting_for_a_locked_record<C: TestConnection>(test: &str) {
    let Some((db, mut holder)) = TestDb::migrated::<C>(test) else {
        return;
    };
    every_likes_slot(&mut holder, 1);
    let timeout_sql = match C::NAME {
        "postgres" => "SET lock_timeout = '30s'",
        _ => "SET SESSION innodb_lock_wait_timeout = 30",
    };
    let holder_id = session_id(&mut holder);
    let mut observer = C::open(&db.url);
    const WRITERS: usize = 3;

    let (report, results) = std::thread::scope(|scope| {
        let mut writers = Vec::new();
        let report = holder
            .transaction(|holder| {
                holder.lock_likes(1)?;
                for _ in 0..WRITERS {
                    writers.push(scope.spawn(|| {
                        let mut conn = C::open(&db.url);
                        conn.batch_execute(timeout_sql)?;
                        Post::likes_of(1).increment(&mut conn)
                    }));
                }
                Ok::<_, diesel::result::Error>(wait_for_waits(&mut observer, WRITERS))
            })
            .expect("hold record 1's rows");
        let results: Vec<_> = writers
            .into_iter()
            .map(|w| w.join().expect("a writer panicked"))
            .collect();
        (report, results)
    });
    eprintln!("{report}");

    for result in results {
        result.expect("every writer goes on once the rows are released");
    }
    assert_eq!(
        Post::likes_of(1).total(&mut holder).expect("total"),
        16 + WRITERS as i64
    );

    let likes = &report.tables[0];
    let waits = likes.lock_waits.waits();
    assert_eq!(waits.len(), WRITERS, "{report}");
    let mut waiters: Vec<i64> = waits.iter().map(|w| w.waiter).collect();
    waiters.dedup();
    assert_eq!(waiters.len(), WRITERS, "{report}");
    for wait in waits {
        assert_eq!(wait.record.as_deref(), Some("1"), "{report}");
        assert!(wait.slot.is_some_and(|s| (0..16).contains(&s)), "{report}");
        assert!(wait.waiter != holder_id, "{report}");
        assert!(wait.query.contains("posts_likes_slots"), "{report}");
        if C::NAME == "postgres" {
            // MariaDB names the transaction ahead in the queue, which may be another waiter.
            assert!(wait.blockers.contains(&holder_id), "{report}");
        } else {
            assert!(!wait.blockers.is_empty(), "{report}");
        }
    }
    assert!(
        likes.advice.contains(&Advice::RaiseSlots {
            record: Some("1".into()),
            waiting: WRITERS,
            slots: 16,
            suggested: 32,
        }),
        "{report}"
    );
    assert_eq!(
        report.tables[1].lock_waits,
        LockWaits::Seen(Vec::new()),
        "{report}"
    );
    let text = report.to_string();
    assert!(text.contains("lock waits: 3"), "{text}");
    assert!(
        text.contains("raise the slot count: 3 writers of record 1"),
        "{text}"
    );
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Diagnoses until `n` writers wait on `Post.likes`, or 20 s have passed.
fn wait_for_waits<C: TestConnection>(
    observer: &mut C,
    n: usize,
) -> slotted_core::diagnostics::ContentionReport {
    use std::time::{Duration, Instant};

    let started = Instant::now();
    loop {
        let report = diagnose(Post::COUNTERS, observer).expect("diagnose");
        if report.tables[0].lock_waits.waits().len() >= n
            || started.elapsed() > Duration::from_secs(20)
        {
            return report;
        }
        // MariaDB refreshes its lock tables only after 100 ms without a read.
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The async face: the same report as the sync face, and on the servers the same lock waits,
/// seen through a diesel-async connection.
#[cfg(feature = "async")]
mod asynch {
    use super::*;
    use slotted_tests::asynch::{migrated, AsyncTestConnection};

    slotted_tests::async_backend_tests! {
        all: [an_async_report_is_the_sync_report],
    }

    async fn an_async_report_is_the_sync_report<A: AsyncTestConnection>(test: &str) {
        let Some((db, mut conn)) = migrated::<A>(test).await else {
            return;
        };
        let mut sync = <A::Sync as TestConnection>::open(&db.url);
        // Record 1 in every slot (a writer then waits for a row, not a gap), 2 and 3 in fewer.
        let rows: Vec<String> = (0..16)
            .map(|slot| format!("(1, {slot}, 1)"))
            .chain(["(2, 0, 1)".into(), "(3, 0, 1)".into(), "(3, 1, 1)".into()])
            .collect();
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        insert(
            &mut sync,
            "posts_likes_slots",
            "record_id, slot, count",
            &rows,
        );
        let options = DiagnoseOptions::default().hottest(2);
        let expected = diagnose_with(Post::COUNTERS, &options, &mut sync).unwrap();
        let report =
            slotted_core::diagnostics::diagnose_with_async(Post::COUNTERS, &options, &mut conn)
                .await
                .unwrap();
        assert_eq!(report, expected);
        assert_eq!(report.tables[0].hottest.len(), 2, "{report}");
        if <A::Sync as TestConnection>::NAME == "sqlite" {
            return;
        }
        // A writer waits for record 1's rows, held by a transaction of the sync face; the async
        // report sees it.
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let url = db.url.clone();
        let holder = std::thread::spawn(move || {
            let mut holder = <A::Sync as TestConnection>::open(&url);
            diesel::Connection::transaction(&mut holder, |holder| {
                holder.lock_likes(1)?;
                hold.send(()).unwrap();
                released.recv().unwrap();
                Ok::<_, diesel::result::Error>(())
            })
            .unwrap();
        });
        held.recv().unwrap();
        let url = db.url.clone();
        let writer = std::thread::spawn(move || {
            let mut conn = <A::Sync as TestConnection>::open(&url);
            Post::likes_of(1).increment(&mut conn)
        });
        let started = std::time::Instant::now();
        let seen = loop {
            let report = slotted_core::diagnostics::diagnose_async(Post::COUNTERS, &mut conn)
                .await
                .unwrap();
            let waits = report.tables[0].lock_waits.waits().to_vec();
            if !waits.is_empty() || started.elapsed() > std::time::Duration::from_secs(20) {
                break waits;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        };
        release.send(()).unwrap();
        holder.join().unwrap();
        writer
            .join()
            .unwrap()
            .expect("the writer goes on once the rows are released");
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].record.as_deref(), Some("1"), "{seen:?}");
        assert_eq!(Post::likes_of(1).total(&mut sync).unwrap(), 17);
    }
}
