//! The counter life cycle on every backend: compaction (exact under concurrent writers), set and
//! reset (atomic under concurrent writers), cache roll-ups, day and hour buckets with retention,
//! pre-created slots, and the shared table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use diesel::migration::MigrationSource;
use slotted_core::{CounterMaintenance, CounterMigrations, Error};
use slotted_tests::lifecycle::*;
use slotted_tests::{backend_tests, Stop, TestConnection, TestDb};

// PostgreSQL lists a session's cached statements (`pg_prepared_statements`): there the
// statement-cache test can see them.
backend_tests! {
    all: [
        compact_one_record_keeps_its_total,
        compact_all_in_batches,
        compaction_is_exact_under_concurrent_writers,
        set_and_reset,
        set_is_atomic_under_concurrent_writers,
        cache_rolls_up_totals,
        day_and_hour_buckets,
        bucket_retention_deletes_or_folds,
        prefilled_slots_take_plain_updates,
        shared_table_holds_two_models,
        a_stopped_pass_says_what_it_committed,
        a_pass_takes_only_the_records_written_since_the_last,
        a_pass_takes_every_record_however_many_buckets_one_of_them_holds,
    ],
    servers: [
        compaction_does_not_wait_for_a_writers_open_transaction,
        maintenance_converges_beside_business_transactions,
    ],
    postgres: [
        maintenance_keeps_the_statement_cache_small,
        a_compaction_that_began_before_another_settled_the_record_loses_nothing,
        a_batch_turns_jit_off_in_its_own_transaction_only,
    ],
}

fn db<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    migrate(&mut conn);
    Some((db, conn))
}

fn rows<C: TestConnection>(conn: &mut C, table: &str, filter: &str) -> i64 {
    conn.query_i64(&format!("SELECT COUNT(*) AS n FROM {table} WHERE {filter}"))
}

fn compact_one_record_keeps_its_total<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    for _ in 0..200 {
        Article::likes_of(1).increment(&mut conn).unwrap();
    }
    Article::likes_of(2).add(5, &mut conn).unwrap();
    Article::likes_of(2).add(-5, &mut conn).unwrap();
    assert_eq!(
        conn.slot_rows("articles_likes_slots", 1).len(),
        8,
        "200 random draws over 8 slots"
    );

    let report = Article::likes_of(1).compact(&mut conn).unwrap();
    assert_eq!(
        (report.records, report.rows_before, report.rows_after),
        (1, 8, 1)
    );
    let folded = conn.slot_rows("articles_likes_slots", 1);
    assert_eq!((folded.len(), folded[0].count), (1, 200), "{folded:?}");
    assert_eq!(Article::likes_of(1).total(&mut conn).unwrap(), 200);

    let report = Article::likes_of(2).compact(&mut conn).unwrap();
    assert_eq!(report.rows_after, 0, "a zero count leaves no row");
    assert!(conn.slot_rows("articles_likes_slots", 2).is_empty());
    assert_eq!(Article::likes_of(2).total(&mut conn).unwrap(), 0);

    let again = Article::likes_of(1).compact(&mut conn).unwrap();
    assert_eq!((again.rows_before, again.rows_after), (1, 1), "idempotent");
    assert_eq!(Article::likes_of(1).total(&mut conn).unwrap(), 200);
}

fn compact_all_in_batches<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    conn.transaction(|conn| {
        for key in 1..=300 {
            for delta in [1, 2, 3] {
                Article::likes_of(key).add(delta * i64::from(key), conn)?;
            }
            if key % 10 == 0 {
                Article::likes_of(key).add(-6 * i64::from(key), conn)?; // back to zero
            }
        }
        Ok::<_, slotted_core::Error>(())
    })
    .unwrap();
    let before = rows(&mut conn, "articles_likes_slots", "1 = 1");
    let report = articles_likes_slots::table
        .compact_all(64, &mut conn)
        .unwrap();
    println!("{}: compact_all over 300 records: {report:?}", C::NAME);
    // A record whose three adds drew one slot has one row already, and is left alone.
    let untouched = 300 - report.records;
    assert_eq!(report.rows_before + untouched, before as u64, "{report:?}");
    assert_eq!(
        report.rows_after,
        report.records - 30,
        "one row per folded non-zero record"
    );
    assert!(report.batches >= 5, "{report:?}");
    assert_eq!(rows(&mut conn, "articles_likes_slots", "1 = 1"), 270);
    let keys: Vec<i32> = (1..=300).collect();
    let totals = Article::likes_totals(&keys, &mut conn).unwrap();
    for key in keys {
        let expected = if key % 10 == 0 { 0 } else { 6 * i64::from(key) };
        assert_eq!(totals[&key], expected, "key {key}");
    }
    let nothing = articles_likes_slots::table
        .compact_all(64, &mut conn)
        .unwrap();
    assert_eq!(nothing.records, 0, "nothing left to fold: {nothing:?}");
}

/// Writers increment 20 records while two compactors fold them over and over; every acknowledged
/// increment must be in the final totals, and nothing else. Nobody may fail: the writers'
/// increments each lock one row, and the compactors lock in key order (on PostgreSQL two of them
/// once deadlocked over a writer's new slot row) and run again a batch that lost a deadlock
/// (InnoDB can still deadlock two of them on the row after a range).
fn compaction_is_exact_under_concurrent_writers<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = db::<C>(test) else {
        return;
    };
    const WRITERS: usize = 4;
    const INCREMENTS: usize = 400;
    const KEYS: i32 = 20;
    let done = Stop::new();
    let (acknowledged, compactions) = std::thread::scope(|scope| {
        // A panic below stops the threads that wait for `done` (see `Stop`).
        let _done = done.on_exit();
        let compactors: Vec<_> = [7, 3]
            .map(|batch| {
                let (url, done) = (&db.url, &done);
                scope.spawn(move || {
                    let mut conn = C::open(url);
                    let (mut runs, mut retries, mut errors) = (0, 0, Vec::new());
                    while !done.is_set() {
                        match articles_likes_slots::table.compact_all(batch, &mut conn) {
                            Ok(report) => (runs, retries) = (runs + 1, retries + report.retries),
                            Err(e) => errors.push(e.to_string()),
                        }
                    }
                    (runs, retries, errors)
                })
            })
            .into_iter()
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let url = &db.url;
                scope.spawn(move || {
                    let mut conn = C::open(url);
                    let mut acked = vec![0i64; KEYS as usize + 1];
                    for i in 0..INCREMENTS {
                        let key = ((i * 7 + w * 3) % KEYS as usize) as i32 + 1;
                        // A failed autocommit statement was rolled back: not acknowledged.
                        match Article::likes_of(key).increment(&mut conn) {
                            Ok(()) => acked[key as usize] += 1,
                            Err(e) => println!("{}: an increment failed: {e}", C::NAME),
                        }
                    }
                    acked
                })
            })
            .collect();
        let mut acknowledged = vec![0i64; KEYS as usize + 1];
        for writer in writers {
            for (sum, n) in acknowledged.iter_mut().zip(writer.join().unwrap()) {
                *sum += n;
            }
        }
        done.set();
        let compactions: Vec<(usize, u64, Vec<String>)> =
            compactors.into_iter().map(|c| c.join().unwrap()).collect();
        (acknowledged, compactions)
    });
    let runs: Vec<usize> = compactions.iter().map(|c| c.0).collect();
    let retries: Vec<u64> = compactions.iter().map(|c| c.1).collect();
    println!(
        "{}: two compactors ran {runs:?} passes ({retries:?} batches run again) beside {WRITERS} writers",
        C::NAME
    );
    for (runs, _, errors) in &compactions {
        assert!(*runs > 0, "each compactor ran while the writers wrote");
        assert!(errors.is_empty(), "a compactor failed: {errors:?}");
    }
    let acked: i64 = acknowledged.iter().sum();
    assert_eq!(
        acked,
        (WRITERS * INCREMENTS) as i64,
        "every increment acknowledged"
    );
    articles_likes_slots::table
        .compact_all(100, &mut conn)
        .unwrap();
    for key in 1..=KEYS {
        assert_eq!(
            Article::likes_of(key).total(&mut conn).unwrap(),
            acknowledged[key as usize],
            "key {key}"
        );
    }
    assert_eq!(
        rows(&mut conn, "articles_likes_slots", "1 = 1"),
        i64::from(KEYS),
        "one row per record after a final pass"
    );
}

fn set_and_reset<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let shares = Article::shares_of(1);
    for _ in 0..50 {
        shares.increment(&mut conn).unwrap();
    }
    shares.set(42, &mut conn).unwrap();
    assert_eq!(shares.total(&mut conn).unwrap(), 42);
    assert_eq!(conn.slot_rows("articles_shares_slots", 1).len(), 1);
    shares.increment(&mut conn).unwrap();
    assert_eq!(shares.total(&mut conn).unwrap(), 43);
    shares.set(-7, &mut conn).unwrap();
    assert_eq!(shares.total(&mut conn).unwrap(), -7);
    shares.reset(&mut conn).unwrap();
    assert_eq!(shares.total(&mut conn).unwrap(), 0);
    assert!(
        conn.slot_rows("articles_shares_slots", 1).is_empty(),
        "reset leaves no row"
    );
    Article::shares_of(99).set(5, &mut conn).unwrap();
    assert_eq!(
        Article::shares_of(99).total(&mut conn).unwrap(),
        5,
        "set on a record never counted"
    );
    assert_eq!(
        Article::shares_of(2).total(&mut conn).unwrap(),
        0,
        "other records untouched"
    );
    // Inside a transaction that rolls back, a set is undone like any write.
    let _ = conn.transaction(|conn| {
        Article::shares_of(99).set(1000, conn)?;
        Err::<(), _>(slotted_core::Error::Diesel(
            diesel::result::Error::RollbackTransaction,
        ))
    });
    assert_eq!(Article::shares_of(99).total(&mut conn).unwrap(), 5);
}

/// Writers' transactions increment `shares` and then bump a gate row; the setter's transaction
/// sets `shares` and then reads the gate, locked. The gate orders every writer before or after
/// the set, so the final total must be exactly 1,000 plus the writers ordered after it. Each
/// side takes its counter row before the gate, so nobody may fail: not the setter (on MySQL its
/// shared-then-exclusive locks once made it a deadlock victim) and not a writer.
fn set_is_atomic_under_concurrent_writers<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = db::<C>(test) else {
        return;
    };
    conn.batch_execute(
        "CREATE TABLE slotted_gate (id INTEGER PRIMARY KEY NOT NULL, n BIGINT NOT NULL)",
    )
    .unwrap();
    conn.batch_execute("INSERT INTO slotted_gate (id, n) VALUES (1, 0)")
        .unwrap();
    const WRITERS: usize = 3;
    const TRANSACTIONS: usize = 150;
    let read_gate = if C::NAME == "sqlite" {
        "SELECT n FROM slotted_gate WHERE id = 1"
    } else {
        "SELECT n FROM slotted_gate WHERE id = 1 FOR UPDATE"
    };
    let (committed, before_set) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                scope.spawn(|| {
                    let mut conn = C::open(&db.url);
                    let mut committed = 0;
                    for _ in 0..TRANSACTIONS {
                        let result = conn.transaction(|conn| {
                            Article::shares_of(1).increment(conn)?;
                            conn.batch_execute("UPDATE slotted_gate SET n = n + 1 WHERE id = 1")?;
                            Ok::<_, slotted_core::Error>(())
                        });
                        committed += usize::from(result.is_ok());
                    }
                    committed
                })
            })
            .collect();
        let setter = scope.spawn(|| {
            let mut conn = C::open(&db.url);
            std::thread::sleep(Duration::from_millis(30));
            conn.transaction(|conn| {
                Article::shares_of(1).set(1000, conn)?;
                Ok::<_, slotted_core::Error>(conn.query_i64(read_gate))
            })
            .expect("the set, on its first attempt")
        });
        let committed: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
        (committed, setter.join().unwrap())
    });
    assert_eq!(
        committed,
        WRITERS * TRANSACTIONS,
        "every writer transaction"
    );
    let after_set = committed as i64 - before_set;
    println!(
        "{}: {committed} writer transactions, {before_set} before the set, {after_set} after",
        C::NAME
    );
    assert_eq!(
        conn.query_i64("SELECT n AS n FROM slotted_gate WHERE id = 1"),
        committed as i64
    );
    assert_eq!(
        Article::shares_of(1).total(&mut conn).unwrap(),
        1000 + after_set
    );
}

fn cache_rolls_up_totals<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    conn.batch_execute(
        "INSERT INTO articles (id, likes_count) VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)",
    )
    .unwrap();
    Article::likes_of(1).add(7, &mut conn).unwrap();
    Article::likes_of(2).add(3, &mut conn).unwrap();
    Article::likes_of(3).increment(&mut conn).unwrap();
    Article::likes_of(3).increment(&mut conn).unwrap();
    Article::likes_of(6).increment(&mut conn).unwrap(); // no article row: nothing to cache into
    let cached = |conn: &mut C, id: i32| {
        conn.query_i64(&format!(
            "SELECT likes_count AS n FROM articles WHERE id = {id}"
        ))
    };

    assert_eq!(
        Article { id: 1 }.likes().refresh_cache(&mut conn).unwrap(),
        slotted_core::maintenance::RefreshReport {
            updated: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        (cached(&mut conn, 1), cached(&mut conn, 2)),
        (7, 0),
        "only record 1 refreshed"
    );
    // The column is the roll-up's now (its first roll-up found every row at 0): a stale value
    // in it is a copy of a total, which the next roll-up corrects.
    conn.batch_execute("UPDATE articles SET likes_count = 99 WHERE id = 5")
        .unwrap();

    let updated = articles_likes_slots::table
        .refresh_cache_all(2, &mut conn)
        .unwrap();
    assert_eq!(
        (updated.updated, updated.failed.len()),
        (3, 0),
        "in pages of 2, the rows whose cache differed: 2, 3 and 5 (1 held 7, 4 held 0)"
    );
    let all: Vec<i64> = (1..=5).map(|id| cached(&mut conn, id)).collect();
    assert_eq!(all, [7, 3, 2, 0, 0], "record 5 had a stale 99 and no slots");
    // Nothing changed since: a roll-up writes no row. On PostgreSQL no row has a new version
    // (its xmin, the transaction that wrote it, stays).
    let versions = row_versions(&mut conn);
    let again = articles_likes_slots::table
        .refresh_cache_all(2, &mut conn)
        .unwrap();
    assert_eq!(again.updated, 0, "{again:?}");
    assert_eq!(row_versions(&mut conn), versions, "no article row written");

    Article::likes_of(1).reset(&mut conn).unwrap();
    Article::likes_of(2).add(10, &mut conn).unwrap();
    assert_eq!(
        articles_likes_slots::table
            .refresh_cache(&[2, 1, 2], &mut conn)
            .unwrap()
            .updated,
        2
    );
    assert_eq!((cached(&mut conn, 1), cached(&mut conn, 2)), (0, 13));
}

/// PostgreSQL: the sum of the articles rows' `xmin`s, which a write of any row changes. 0
/// elsewhere.
fn row_versions<C: TestConnection>(conn: &mut C) -> i64 {
    if C::NAME != "postgres" {
        return 0;
    }
    conn.query_i64(
        "SELECT CAST(SUM(CAST(CAST(xmin AS TEXT) AS BIGINT)) AS BIGINT) AS n FROM articles",
    )
}

fn day(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(n * 86_400 + 5 * 3_600) // 05:00 UTC of day n
}

fn day_and_hour_buckets<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let daily = Download::daily_of(1);
    daily.clone().at(day(20_000)).add(3, &mut conn).unwrap();
    for _ in 0..5 {
        daily.clone().at(day(20_001)).increment(&mut conn).unwrap();
    }
    daily.clone().at(day(20_002)).increment(&mut conn).unwrap();
    assert_eq!(daily.total(&mut conn).unwrap(), 9, "all time");
    assert_eq!(
        daily
            .clone()
            .at(day(20_001))
            .bucket_total(&mut conn)
            .unwrap(),
        5
    );
    assert_eq!(
        daily
            .clone()
            .at(day(19_999))
            .bucket_total(&mut conn)
            .unwrap(),
        0
    );
    assert_eq!(
        daily
            .total_between(day(20_000)..day(20_002), &mut conn)
            .unwrap(),
        8,
        "two days"
    );
    assert_eq!(
        daily
            .total_between(day(20_002)..day(20_010), &mut conn)
            .unwrap(),
        1
    );
    let totals = Download::daily_totals(&[1, 2], &mut conn).unwrap();
    assert_eq!((totals[&1], totals[&2]), (9, 0));
    let buckets = conn.query_i64(
        "SELECT COUNT(DISTINCT bucket) AS n FROM downloads_daily_slots WHERE record_id = 1",
    );
    assert_eq!(buckets, 3);
    assert_eq!(
        conn.query_i64("SELECT MIN(bucket) AS n FROM downloads_daily_slots"),
        20_000 * 86_400,
        "a bucket is the Unix time it starts at"
    );

    // Compaction folds per bucket: one row per (record, bucket), every bucket total unchanged.
    let report = daily.compact(&mut conn).unwrap();
    assert_eq!(report.rows_after, 3, "{report:?}");
    assert_eq!(
        daily
            .clone()
            .at(day(20_001))
            .bucket_total(&mut conn)
            .unwrap(),
        5
    );
    assert_eq!(daily.total(&mut conn).unwrap(), 9);

    let hourly = Download::hourly_of(1);
    let hour = |h: u64, m: u64| day(20_000) + Duration::from_secs(h * 3_600 + m * 60);
    hourly.clone().at(hour(0, 10)).increment(&mut conn).unwrap();
    hourly.clone().at(hour(0, 50)).increment(&mut conn).unwrap();
    hourly.clone().at(hour(1, 5)).increment(&mut conn).unwrap();
    assert_eq!(
        hourly
            .clone()
            .at(hour(0, 30))
            .bucket_total(&mut conn)
            .unwrap(),
        2
    );
    assert_eq!(
        hourly
            .clone()
            .at(hour(1, 59))
            .bucket_total(&mut conn)
            .unwrap(),
        1
    );
    assert_eq!(hourly.total(&mut conn).unwrap(), 3);
}

fn bucket_retention_deletes_or_folds<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    for (d, n) in [(20_000, 3), (20_001, 5), (20_002, 1)] {
        for record in [1, 2] {
            Download::daily_of(record)
                .at(day(d))
                .add(n, &mut conn)
                .unwrap();
            Download::daily_of(record)
                .at(day(d))
                .add(n, &mut conn)
                .unwrap();
        }
    }
    let deleted = downloads_daily_slots::table
        .delete_buckets_before(day(20_001), 2, &mut conn)
        .unwrap();
    assert!(deleted >= 2, "day 20,000's rows of both records: {deleted}");
    assert_eq!(
        Download::daily_of(1).total(&mut conn).unwrap(),
        12,
        "day 20,000 is gone"
    );

    let report = downloads_daily_slots::table
        .fold_buckets_before(day(20_002), 1, &mut conn)
        .unwrap();
    assert_eq!((report.records, report.rows_after), (2, 2), "{report:?}");
    for record in [1, 2] {
        let counter = Download::daily_of(record);
        assert_eq!(
            counter.total(&mut conn).unwrap(),
            12,
            "all-time totals unchanged by a fold"
        );
        assert_eq!(
            counter
                .clone()
                .at(day(20_001))
                .bucket_total(&mut conn)
                .unwrap(),
            0,
            "folded away"
        );
        assert_eq!(
            counter
                .clone()
                .at(UNIX_EPOCH)
                .bucket_total(&mut conn)
                .unwrap(),
            10,
            "into 1970-01-01"
        );
        assert_eq!(
            counter
                .clone()
                .at(day(20_002))
                .bucket_total(&mut conn)
                .unwrap(),
            2,
            "after the cutoff: kept"
        );
    }
    let again = downloads_daily_slots::table
        .fold_buckets_before(day(20_002), 10, &mut conn)
        .unwrap();
    assert_eq!(again.records, 0, "bucket 0 is not folded again: {again:?}");
}

fn prefilled_slots_take_plain_updates<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let tag = Tag {
        name: "rust".into(),
    };
    assert_eq!(tag.uses().create_slots(&mut conn).unwrap(), 4);
    assert_eq!(
        tag.uses().create_slots(&mut conn).unwrap(),
        0,
        "created once"
    );
    let rust_rows = "record_id = 'rust'";
    assert_eq!(rows(&mut conn, "tags_uses_slots", rust_rows), 4);
    assert_eq!(
        rows(
            &mut conn,
            "tags_uses_slots",
            "record_id = 'rust' AND count = 0"
        ),
        4
    );
    for _ in 0..100 {
        tag.uses().increment(&mut conn).unwrap();
    }
    assert_eq!(tag.uses().total(&mut conn).unwrap(), 100);
    assert_eq!(
        rows(&mut conn, "tags_uses_slots", rust_rows),
        4,
        "updates, no new rows"
    );

    // Without pre-created rows, increments fall back to the upsert.
    Tag::uses_of("go").add(3, &mut conn).unwrap();
    assert_eq!(Tag::uses_of("go").total(&mut conn).unwrap(), 3);
    let created = tags_uses_slots::table
        .create_slots(&["go".to_owned(), "zig".to_owned()], &mut conn)
        .unwrap();
    assert_eq!(created, 4 + 4 - 1, "go had one slot already");
    assert_eq!(Tag::uses_of("go").total(&mut conn).unwrap(), 3);
}

fn shared_table_holds_two_models<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let migrations = CounterMigrations::of::<Video>().and::<Photo>();
    assert_eq!(migrations.specs().len(), 3);
    assert_eq!(
        MigrationSource::<<C as diesel::Connection>::Backend>::migrations(&migrations)
            .unwrap()
            .len(),
        2,
        "one table, and its index of unsettled rows"
    );

    for _ in 0..200 {
        Video::plays_of(1).increment(&mut conn).unwrap();
    }
    Video::likes_of(1).add(2, &mut conn).unwrap();
    Photo::views_of(1).add(9, &mut conn).unwrap();
    Photo::views_of(2).increment(&mut conn).unwrap();
    assert_eq!(Video::plays_of(1).total(&mut conn).unwrap(), 200);
    assert_eq!(Video::likes_of(1).total(&mut conn).unwrap(), 2);
    assert_eq!(
        Photo::views_of(1).total(&mut conn).unwrap(),
        9,
        "same id, another record type"
    );
    let totals = Photo::views_totals(&[1, 2, 3], &mut conn).unwrap();
    assert_eq!((totals[&1], totals[&2], totals[&3]), (9, 1, 0));
    assert_eq!(
        rows(
            &mut conn,
            "slotted_counters",
            "record_type = 'videos.plays'"
        ),
        8
    );

    let report = Video::plays_of(1).compact(&mut conn).unwrap();
    assert_eq!((report.rows_before, report.rows_after), (8, 1));
    Photo::views_of(1).set(3, &mut conn).unwrap();
    assert_eq!(Photo::views_of(1).total(&mut conn).unwrap(), 3);
    assert_eq!(
        Video::plays_of(1).total(&mut conn).unwrap(),
        200,
        "other counters untouched"
    );
    assert_eq!(Video::likes_of(1).total(&mut conn).unwrap(), 2);
    let all = videos_plays::counter.compact_all(10, &mut conn).unwrap();
    assert_eq!(all.records, 0, "{all:?}");
}

/// Maintenance over batches of every size leaves a handful of prepared statements on the
/// connection, not one per size: its statements whose text varies with the batch are prepared
/// for the call and closed. (Kept, they piled up for the connection's life; on MySQL toward the
/// server-wide `max_prepared_stmt_count`.)
#[cfg(feature = "postgres")]
fn maintenance_keeps_the_statement_cache_small<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    conn.batch_execute(
        "INSERT INTO articles (id, likes_count) SELECT g, 0 FROM generate_series(1, 60) g",
    )
    .unwrap();
    let keys: Vec<i32> = (1..=60).collect();
    for batch in 1..=40 {
        for key in 1..=(batch as i32 + 5) {
            Article::likes_of(key).add(2, &mut conn).unwrap();
            Article::likes_of(key).add(3, &mut conn).unwrap();
        }
        let report = articles_likes_slots::table
            .compact_all(batch, &mut conn)
            .unwrap();
        assert!(report.records > 0, "batch {batch} had work: {report:?}");
        articles_likes_slots::table
            .refresh_cache(&keys[..batch], &mut conn)
            .unwrap();
        Article::likes_of(batch as i32).set(7, &mut conn).unwrap();
    }
    let prepared = conn.query_i64("SELECT COUNT(*) AS n FROM pg_prepared_statements");
    assert!(
        prepared < 15,
        "{prepared} prepared statements after maintenance in 40 batch sizes"
    );
    // Round `b` adds 5 to keys 1..=b+5 and then sets key `b` to 7.
    let totals = Article::likes_totals(&keys, &mut conn).unwrap();
    for key in 1..=60 {
        let expected = match key {
            1..=40 => 7 + 5 * (40 - key),
            41..=45 => 5 * (46 - key),
            _ => 0,
        };
        assert_eq!(totals[&key], i64::from(expected), "key {key}");
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// A writer's transaction holds a slot row of record 1 and stays open. Compaction with its
/// defaults neither waits for it nor fails: it folds every row no one holds (`SKIP LOCKED`),
/// leaves the held one, and the writer's increment still counts once when it commits. Before,
/// compaction waited on the row until the lock wait timeout (2 s here) and failed the pass.
fn compaction_does_not_wait_for_a_writers_open_transaction<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = db::<C>(test) else {
        return;
    };
    for key in 1..=4 {
        for _ in 0..100 {
            Article::likes_of(key).increment(&mut conn).unwrap();
        }
    }
    let before = rows(&mut conn, "articles_likes_slots", "record_id = 1");
    assert!(before > 2, "100 draws over 8 slots: {before} rows");
    let mut writer = C::open(&db.url);
    writer.batch_execute("BEGIN").unwrap();
    Article::likes_of(1).increment(&mut writer).unwrap();
    conn.batch_execute(match C::NAME {
        "postgres" => "SET lock_timeout = '2s'",
        _ => "SET SESSION innodb_lock_wait_timeout = 2",
    })
    .unwrap();
    let started = std::time::Instant::now();
    let report = articles_likes_slots::table
        .compact_all(slotted_core::maintenance::MAINTENANCE_BATCH, &mut conn)
        .unwrap_or_else(|e| panic!("compaction beside an open writer: {e}"));
    println!("{}: {report:?} in {:?}", C::NAME, started.elapsed());
    assert_eq!(report.records, 4, "{report:?}");
    for key in 2..=4 {
        assert_eq!(
            rows(
                &mut conn,
                "articles_likes_slots",
                &format!("record_id = {key}")
            ),
            1
        );
    }
    assert_eq!(
        rows(&mut conn, "articles_likes_slots", "record_id = 1"),
        2,
        "the folded row and the row the writer holds"
    );
    writer.batch_execute("COMMIT").unwrap();
    assert_eq!(Article::likes_of(1).total(&mut conn).unwrap(), 101);
    articles_likes_slots::table
        .compact_all(slotted_core::maintenance::MAINTENANCE_BATCH, &mut conn)
        .unwrap();
    assert_eq!(rows(&mut conn, "articles_likes_slots", "record_id = 1"), 1);
    assert_eq!(Article::likes_of(1).total(&mut conn).unwrap(), 101);
}

/// A trigger refuses any change to record 4's slot rows: at the statement on SQLite and MySQL,
/// at `COMMIT` on PostgreSQL (a deferred constraint trigger). Compaction in pages of 2 commits
/// records 1 and 2, then fails on the batch of 3 and 4: the error names the counter and its
/// table, the `COMMIT`'s included, and says what the pass committed before it.
fn a_stopped_pass_says_what_it_committed<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    freeze_record_4(&mut conn);

    // One record, nothing committed: the plain error, with the counter named.
    let err = Article::likes_of(4).compact(&mut conn).unwrap_err();
    println!("{}: {err}", C::NAME);
    assert!(matches!(err, Error::Database { .. }), "{err:?}");
    assert!(err.to_string().starts_with(CONTEXT), "{err}");
    assert!(err.to_string().contains("record 4 is frozen"), "{err}");

    // Inside a transaction of the caller's nothing is committed: the plain error (on
    // PostgreSQL the deferred trigger fires at the caller's own COMMIT instead).
    if C::NAME != "postgres" {
        let err = conn
            .transaction(|c| articles_likes_slots::table.compact_all(2, c))
            .unwrap_err();
        assert!(matches!(err, Error::Database { .. }), "{err:?}");
        let record_1 = rows(&mut conn, "articles_likes_slots", "record_id = 1");
        assert!(
            record_1 > 1,
            "rolled back with the caller's transaction: {record_1} rows"
        );
    }

    let err = articles_likes_slots::table
        .compact_all(2, &mut conn)
        .unwrap_err();
    assert_stopped_after_records_1_and_2(&mut conn, &err);
}

const CONTEXT: &str = "counter `Article.likes` (table `articles_likes_slots`)";

/// Records 1 to 6 with 50 likes each, over several rows, and a trigger that refuses any change
/// to record 4's rows.
fn freeze_record_4<C: TestConnection>(conn: &mut C) {
    for key in 1..=6 {
        for _ in 0..50 {
            Article::likes_of(key).increment(conn).unwrap();
        }
    }
    conn.batch_execute(match C::NAME {
        "sqlite" => {
            "CREATE TRIGGER frozen BEFORE DELETE ON articles_likes_slots WHEN OLD.record_id = 4 \
             BEGIN SELECT RAISE(ABORT, 'record 4 is frozen'); END;"
        }
        "postgres" => {
            "CREATE FUNCTION frozen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF OLD.record_id = 4 THEN RAISE EXCEPTION 'record 4 is frozen'; END IF; \
             RETURN NULL; END $$; \
             CREATE CONSTRAINT TRIGGER frozen AFTER UPDATE OR DELETE ON articles_likes_slots \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION frozen();"
        }
        _ => {
            "CREATE TRIGGER frozen BEFORE DELETE ON articles_likes_slots FOR EACH ROW BEGIN \
             IF OLD.record_id = 4 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = \
             'record 4 is frozen'; END IF; END"
        }
    })
    .unwrap();
}

/// `err` is compaction in pages of 2 stopped at record 4, after committing records 1 and 2.
fn assert_stopped_after_records_1_and_2<C: TestConnection>(conn: &mut C, err: &Error) {
    println!("{}: {err}", C::NAME);
    let message = err.to_string();
    assert!(message.starts_with(CONTEXT), "{message}");
    assert!(message.contains("record 4 is frozen"), "{message}");
    assert!(
        message.contains("committed before it stopped: 1 batches, 2 records folded"),
        "{message}"
    );
    let Error::MaintenanceStopped { committed, source } = err else {
        panic!("{err:?}");
    };
    assert!(matches!(**source, Error::Database { .. }), "{source:?}");
    let slotted_core::maintenance::Committed::Compaction(done) = &**committed else {
        panic!("{committed:?}");
    };
    assert_eq!((done.records, done.batches), (2, 1), "{done:?}");
    assert_eq!(done.rows_after, 2);
    for key in 1..=6 {
        let n = rows(conn, "articles_likes_slots", &format!("record_id = {key}"));
        assert_eq!(n == 1, key <= 2, "record {key}: {n} rows");
        assert_eq!(Article::likes_of(key).total(conn).unwrap(), 50);
    }
}

/// The async face of the same.
#[cfg(feature = "async")]
mod asynch {
    use slotted_core::CounterMaintenance;
    use slotted_tests::asynch::AsyncTestConnection;
    use slotted_tests::lifecycle::articles_likes_slots;
    use slotted_tests::{TestConnection, TestDb};

    slotted_tests::async_backend_tests! {
        all: [a_stopped_async_pass_says_what_it_committed],
    }

    async fn a_stopped_async_pass_says_what_it_committed<A: AsyncTestConnection>(test: &str) {
        let Some(db) = TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut check = <A::Sync as TestConnection>::open(&db.url);
        slotted_tests::lifecycle::migrate(&mut check);
        super::freeze_record_4(&mut check);
        let mut conn = A::open(&db.url).await;
        let err = articles_likes_slots::table
            .compact_all_async(2, &mut conn)
            .await
            .unwrap_err();
        super::assert_stopped_after_records_1_and_2(&mut check, &err);
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Writers in business transactions (two records, held open 1 ms) while compaction and the
/// roll-up run with their default batches: every pass completes and every total is exact.
fn maintenance_converges_beside_business_transactions<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = db::<C>(test) else {
        return;
    };
    const WRITERS: usize = 8;
    const KEYS: i32 = 6;
    const RUN: Duration = Duration::from_secs(2);
    let parents: Vec<String> = (1..=KEYS).map(|k| format!("({k}, 0)")).collect();
    conn.batch_execute(&format!(
        "INSERT INTO articles (id, likes_count) VALUES {}",
        parents.join(", ")
    ))
    .unwrap();
    let batch = slotted_core::maintenance::MAINTENANCE_BATCH;
    let done = Stop::new();
    let started = std::time::Instant::now();
    let (acked, (compactions, rollups)) = std::thread::scope(|scope| {
        // A panic below stops the threads that wait for `done` (see `Stop`).
        let _done = done.on_exit();
        let maintenance = scope.spawn(|| {
            let mut conn = C::open(&db.url);
            let (mut compactions, mut rollups) = (Vec::new(), Vec::new());
            while !done.is_set() {
                compactions.push(
                    articles_likes_slots::table
                        .compact_all(batch, &mut conn)
                        .map_err(|e| e.to_string()),
                );
                rollups.push(
                    articles_likes_slots::table
                        .refresh_cache_all(batch, &mut conn)
                        .map_err(|e| e.to_string()),
                );
            }
            (compactions, rollups)
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let url = &db.url;
                scope.spawn(move || {
                    let mut conn = C::open(url);
                    business_writer(&mut conn, KEYS, w * 3, started + RUN)
                })
            })
            .collect();
        let acked = sum_acked(writers.into_iter().map(|w| w.join().unwrap()));
        done.set();
        (acked, maintenance.join().unwrap())
    });
    let mut total = slotted_core::maintenance::CompactionReport::default();
    for pass in compactions.iter().flatten() {
        total += pass.clone();
    }
    println!(
        "{}: {WRITERS} writers, {} transactions; {} compaction passes: {} rows into {}, {} \
         batches, {} rerun, {} records skipped; {} roll-ups",
        C::NAME,
        acked.iter().sum::<i64>() / 2,
        compactions.len(),
        total.rows_before,
        total.rows_after,
        total.batches,
        total.retries,
        total.skipped.len(),
        rollups.len()
    );
    let failed: Vec<&String> = compactions
        .iter()
        .filter_map(|p| p.as_ref().err())
        .chain(rollups.iter().filter_map(|p| p.as_ref().err()))
        .collect();
    assert!(failed.is_empty(), "maintenance failed: {failed:?}");
    assert!(total.batches > 0, "compaction folded beside the writers");
    for key in 1..=KEYS {
        assert_eq!(
            Article::likes_of(key).total(&mut conn).unwrap(),
            acked[key as usize],
            "key {key}"
        );
    }
    articles_likes_slots::table
        .refresh_cache_all(batch, &mut conn)
        .unwrap();
    for key in 1..=KEYS {
        assert_eq!(
            conn.query_i64(&format!(
                "SELECT likes_count AS n FROM articles WHERE id = {key}"
            )),
            acked[key as usize]
        );
    }
}

/// `maintain_changed`: the counter migrations create the index of unsettled rows; a pass
/// compacts and rolls up exactly the records written since the last one (all 2,000 the first
/// time, none the second, the 3 written and the 1 set the third), into the settled slot, and
/// every total stays exact.
fn a_pass_takes_only_the_records_written_since_the_last<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let indexes = conn.query_i64(match C::NAME {
        "postgres" => "SELECT COUNT(*) AS n FROM pg_indexes WHERE indexname = 'articles_likes_slots_unsettled'",
        "mysql" => "SELECT COUNT(DISTINCT index_name) AS n FROM information_schema.statistics \
                    WHERE table_schema = DATABASE() AND index_name = 'articles_likes_slots_unsettled'",
        _ => "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'index' AND name = 'articles_likes_slots_unsettled'",
    });
    assert_eq!(indexes, 1, "the index of unsettled rows");
    const RECORDS: i64 = 2_000;
    scattered_likes(&mut conn, RECORDS);
    let first = articles_likes_slots::table
        .maintain_changed(500, &mut conn)
        .unwrap();
    assert_eq!(
        (first.compaction.records, first.refresh.updated),
        (2_000, 2_000),
        "{first:?}"
    );
    let settled = |conn: &mut C| {
        conn.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots WHERE slot = -1")
    };
    assert_eq!(settled(&mut conn), RECORDS, "one settled row per record");
    // Every cached column holds its total (MySQL wrote them 100 to a statement, 5 statements a
    // batch), and a full roll-up then writes none of them.
    assert_eq!(
        conn.query_i64(
            "SELECT COUNT(*) AS n FROM articles WHERE likes_count <> \
             (SELECT COALESCE(SUM(count), 0) FROM articles_likes_slots WHERE record_id = articles.id)"
        ),
        0,
        "cached columns that differ from their totals"
    );
    assert_eq!(
        articles_likes_slots::table
            .refresh_cache_all(500, &mut conn)
            .unwrap()
            .updated,
        0,
        "a roll-up of totals the columns hold already"
    );
    let second = articles_likes_slots::table
        .maintain_changed(500, &mut conn)
        .unwrap();
    assert_eq!(
        (second.compaction.records, second.refresh.updated),
        (0, 0),
        "nothing written since: {second:?}"
    );
    for id in [7, 700, 1999] {
        Article::likes_of(id).add(5, &mut conn).unwrap();
    }
    Article::likes_of(8).set(100, &mut conn).unwrap();
    let third = articles_likes_slots::table
        .maintain_changed(500, &mut conn)
        .unwrap();
    assert_eq!(
        (third.compaction.records, third.refresh.updated),
        (4, 4),
        "the records written since: {third:?}"
    );
    assert_eq!(settled(&mut conn), RECORDS);
    assert_eq!(
        conn.query_i64("SELECT COUNT(*) AS n FROM articles_likes_slots"),
        RECORDS
    );
    assert_eq!(
        [7, 8, 700, 1999].map(|id| cached_likes(&mut conn, id)),
        [75, 100, 7_005, 19_995]
    );
    let ids: Vec<i32> = (1..=RECORDS as i32).collect();
    let totals = Article::likes_totals(&ids, &mut conn).unwrap();
    for id in ids {
        let want = match id {
            8 => 100,
            7 | 700 | 1999 => 10 * i64::from(id) + 5,
            _ => 10 * i64::from(id),
        };
        assert_eq!(totals[&id], want, "record {id}");
    }
}

/// Pages of unsettled records, where one record holds many rows of one slot (30 buckets) and
/// the others one row each, in another slot for the last two: a pass in pages of 2 takes every
/// record. (MySQL reads each slot's keys apart and merges them: a slot's page counts keys, not
/// rows, else record 1's buckets would fill it and the merged page would jump from record 1 to
/// records 5 and 6, past 2, 3 and 4.)
fn a_pass_takes_every_record_however_many_buckets_one_of_them_holds<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let mut values: Vec<String> = (0..30).map(|day| format!("(1, {day}, 1, 1)")).collect();
    values.extend((2..=4).map(|id| format!("({id}, 0, 1, 1)")));
    values.extend((5..=6).map(|id| format!("({id}, 0, 0, 1)")));
    conn.batch_execute(&format!(
        "INSERT INTO downloads_daily_slots (record_id, bucket, slot, count) VALUES {}",
        values.join(", ")
    ))
    .unwrap();
    let pass = downloads_daily_slots::table
        .maintain_changed(2, &mut conn)
        .unwrap();
    assert_eq!(pass.compaction.records, 6, "{}: {pass:?}", C::NAME);
    assert_eq!(
        rows(&mut conn, "downloads_daily_slots", "slot = -1"),
        35,
        "{}: every row settled, one per record and bucket",
        C::NAME
    );
    let again = downloads_daily_slots::table
        .maintain_changed(2, &mut conn)
        .unwrap();
    assert_eq!(again.compaction.records, 0, "{}: {again:?}", C::NAME);
}

/// PostgreSQL: a maintenance batch in a transaction of its own runs with `SET LOCAL jit = off`
/// (a backlog's statements would each pay a JIT compilation), which ends with it: the session's
/// `jit` is as it was after a pass. Inside the caller's transaction a batch is a savepoint, and
/// a `SET LOCAL` there would last to the caller's commit: it leaves `jit` alone.
#[cfg(feature = "postgres")]
fn a_batch_turns_jit_off_in_its_own_transaction_only<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = db::<C>(test) else {
        return;
    };
    let jit = |conn: &mut C| {
        conn.query_i64(
            "SELECT CAST(CASE current_setting('jit') WHEN 'on' THEN 1 ELSE 0 END AS BIGINT) AS n",
        )
    };
    conn.batch_execute("SET jit = on").unwrap();
    scattered_likes(&mut conn, 300);
    let pass = articles_likes_slots::table
        .maintain_changed(100, &mut conn)
        .unwrap();
    assert_eq!(pass.compaction.records, 300, "{pass:?}");
    assert_eq!(jit(&mut conn), 1, "the session's jit after a pass");
    scattered_likes(&mut conn, 300);
    conn.transaction::<_, diesel::result::Error, _>(|conn| {
        let pass = articles_likes_slots::table
            .maintain_changed(100, conn)
            .unwrap();
        assert_eq!(pass.compaction.records, 300, "{pass:?}");
        assert_eq!(
            jit(conn),
            1,
            "jit inside the caller's transaction, after a pass in it"
        );
        Ok(())
    })
    .unwrap();
}

/// PostgreSQL compacts a batch in one statement: its locking read takes each row at its latest
/// version, while the statement's `DELETE` and `UPDATE` find rows through the snapshot it began
/// with. The interleaving that lost a count in CI (79 of 80 beside two compactors):
/// 1. record K has rows in slots 5 and 7; a writer's open transaction holds slot 7;
/// 2. compaction A begins a batch whose last record is K, and locks the rows before K's;
/// 3. meanwhile compaction B settles K: it takes slot 5 (7 is held) and commits;
/// 4. the writer commits (slot 7 holds 2);
/// 5. A reaches K: it takes the settled row and slot 7, at their latest values, 1 + 2.
///
/// When settling moved slot 5's row into the settled slot, A's snapshot held no settled row:
/// A's `UPDATE` found no row to write 3 into, its `DELETE` removed slot 7's, and K kept 1 of 3.
/// Now B inserts the settled row and deletes slot 5's, so A takes slot 7's row alone (its
/// snapshot does not hold B's new row), finds the settled row made, and leaves 2 in slot 7.
/// The window is A's lock of the rows of the 8191 records before K; the test checks that B ran
/// after A began locking (A's transaction had an id) and before A reached K (B took slot 5),
/// and that the writer committed while A still ran, and runs again with more rows per record
/// when it did not.
#[cfg(feature = "postgres")]
fn a_compaction_that_began_before_another_settled_the_record_loses_nothing<C: TestConnection>(
    test: &str,
) {
    let Some((db, mut conn)) = db::<C>(test) else {
        return;
    };
    const K: i64 = 8192;
    // A's compaction statement runs and has locked a row (its transaction has an id): it is
    // past its snapshot, which this statement takes when it executes, after its parse and bind
    // (which `state = 'active'` alone would also show).
    let running = |conn: &mut C, pid: i64| {
        conn.query_i64(&format!(
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = {pid} \
             AND state = 'active' AND backend_xid IS NOT NULL AND query LIKE '%slotted_taken%'"
        )) == 1
    };
    conn.batch_execute(&format!(
        "INSERT INTO articles (id) SELECT g FROM generate_series(1, {K}) g"
    ))
    .unwrap();
    for slots in [8, 32, 128] {
        conn.batch_execute(&format!(
            "DELETE FROM articles_likes_slots; \
             INSERT INTO articles_likes_slots (record_id, slot, count) \
             SELECT g, s, 1 FROM generate_series(1, {}) g, generate_series(0, {}) s; \
             INSERT INTO articles_likes_slots (record_id, slot, count) VALUES ({K}, 5, 1), ({K}, 7, 1)",
            K - 1,
            slots - 1
        ))
        .unwrap();
        let mut writer = C::open(&db.url);
        writer
            .batch_execute(&format!(
                "BEGIN; UPDATE articles_likes_slots SET count = count + 1 \
                 WHERE record_id = {K} AND slot = 7"
            ))
            .unwrap();
        let mut a = C::open(&db.url);
        let pid = a.query_i64("SELECT CAST(pg_backend_pid() AS BIGINT) AS n");
        let (b, in_order, a_report) = std::thread::scope(|scope| {
            let a = scope.spawn(move || {
                let started = std::time::Instant::now();
                let report = articles_likes_slots::table
                    .compact_all(K as usize, &mut a)
                    .unwrap();
                (report, started.elapsed())
            });
            while !running(&mut conn, pid) && !a.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let b_after_a_began = running(&mut conn, pid);
            let b = Article::likes_of(K as i32).compact(&mut conn).unwrap();
            writer.batch_execute("COMMIT").unwrap();
            let in_order = b_after_a_began && running(&mut conn, pid);
            (b, in_order, a.join().unwrap())
        });
        println!(
            "{slots} rows a record: B {b:?}, A {a_report:?}, B and the writer's commit while A \
             ran: {in_order}"
        );
        let total = Article::likes_of(K as i32).total(&mut conn).unwrap();
        if (b.records, b.rows_before) == (1, 1) && in_order {
            let rows = |conn: &mut C| {
                conn.slot_rows("articles_likes_slots", K)
                    .iter()
                    .map(|r| (r.slot, r.count))
                    .collect::<Vec<_>>()
            };
            assert_eq!(total, 3, "{:?}", rows(&mut conn));
            assert_eq!(
                rows(&mut conn),
                [(-1, 1), (7, 2)],
                "A left its sum in slot 7"
            );
            Article::likes_of(K as i32).compact(&mut conn).unwrap();
            assert_eq!(rows(&mut conn), [(-1, 3)], "the next compaction settles it");
            return;
        }
        assert_eq!(total, 3, "whatever the order");
    }
    panic!("A locked record {K}'s rows before B ran, with 128 rows a record");
}
