//! Issue 25: moving a live counter column onto slots (`adopt = likes_count`), on every backend.
//!
//! - While old binaries still `UPDATE clips SET likes_count = likes_count + 1` and new ones call
//!   `increment`, a total is the column plus the slots: `total`, `totals`, compaction and `set`
//!   keep both parts exact.
//! - `absorb_all` moves the column into the slots, rerunnable; `release_all` moves the slots back
//!   (an `INTEGER` column refuses a count past `i32`, for that record alone).
//! - A roll-up never overwrites a column's own counts: `cache = …` on a column that holds
//!   counts fails, writing nothing; the adopted column becomes the cache once absorbed.
//! - Deterministic interleavings (PostgreSQL, MariaDB): an old-style `UPDATE` held open in a
//!   transaction while `absorb` and `set` run on the same record, each seen waiting on its lock.
//! - A randomized run: old-style and new writers, absorb started and stopped at random,
//!   compaction and roll-ups looping; every total equals every acknowledged add of both kinds.
// The deterministic interleavings run on PostgreSQL and MySQL only.
#![cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use slotted_core::{CounterMaintenance, Error};
use slotted_tests::adoption::*;
use slotted_tests::locks::{poll_until, session_id, waiting_on_a_lock};
use slotted_tests::{backend_tests, Dice, Stop, TestConnection, TestDb};

backend_tests! {
    all: [
        a_total_is_the_column_plus_the_slots_until_absorbed,
        a_roll_up_never_overwrites_a_columns_own_counts,
        the_adopted_column_becomes_the_cache_once_absorbed,
        release_moves_the_slots_back_into_the_column,
        old_and_new_writers_absorb_compaction_and_roll_ups_count_exactly,
        a_composite_key_adopts_its_column,
        an_absorb_of_many_records_moves_every_column,
    ],
    servers: [absorb_and_set_wait_out_an_old_style_update],
    postgres: [a_column_a_trigger_keeps_moves_onto_slots],
}

fn setup<C: TestConnection>(test: &str, rows: &[(i32, i32, i64, i64)]) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    create_clips(&mut conn, rows);
    Some((db, conn))
}

fn column<C: TestConnection>(conn: &mut C, column: &str, id: i32) -> i64 {
    conn.query_i64(&format!(
        "SELECT CAST({column} AS {}) AS n FROM clips WHERE id = {id}",
        if C::NAME == "mysql" {
            "SIGNED"
        } else {
            "BIGINT"
        }
    ))
}

fn slot_rows<C: TestConnection>(conn: &mut C, table: &str) -> i64 {
    conn.query_i64(&format!("SELECT COUNT(*) AS n FROM {table}"))
}

fn likes<C: TestConnection>(conn: &mut C, ids: &[i32]) -> Vec<i64> {
    let totals = Clip::likes_totals(ids, conn).unwrap();
    ids.iter().map(|id| totals[id]).collect()
}

/// 250 records absorbed in one batch (the column's update goes 100 records to a statement):
/// every column moved to 0, every total as it was, the report's sum the columns' sum.
fn an_absorb_of_many_records_moves_every_column<C: TestConnection>(test: &str) {
    let rows: Vec<(i32, i32, i64, i64)> = (1..=250).map(|id| (id, id * 3, 0, 0)).collect();
    let Some((_db, mut conn)) = setup::<C>(test, &rows) else {
        return;
    };
    Clip::likes_of(7).add(5, &mut conn).unwrap();
    let ids: Vec<i32> = (1..=250).collect();
    let want: Vec<i64> = ids
        .iter()
        .map(|&id| i64::from(id) * 3 + if id == 7 { 5 } else { 0 })
        .collect();
    assert_eq!(likes(&mut conn, &ids), want);
    let report = clips_likes_slots::table
        .absorb_all(1000, &mut conn)
        .unwrap();
    assert_eq!(
        (report.records, report.moved),
        (250, (1..=250).map(|id| i128::from(id) * 3).sum()),
        "{report:?}"
    );
    assert_eq!(
        conn.query_i64("SELECT COUNT(*) AS n FROM clips WHERE likes_count <> 0"),
        0,
        "columns left unmoved"
    );
    assert_eq!(likes(&mut conn, &ids), want);
}

/// The column's part and the slots' part, through every call that reads or rewrites them.
fn a_total_is_the_column_plus_the_slots_until_absorbed<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test, &[(1, 500, 0, 0), (2, 0, 0, 0), (3, 7, 0, 0)])
    else {
        return;
    };
    assert_eq!(Clip::likes_of(1).total(&mut conn).unwrap(), 500);
    Clip::likes_of(1).increment(&mut conn).unwrap();
    conn.batch_execute(&old_style_add("likes_count", 1, 1))
        .unwrap();
    Clip::likes_of(2).add(3, &mut conn).unwrap();
    Clip::likes_of(9).add(4, &mut conn).unwrap();
    // Record 9 has slots and no row in `clips`: its slots are its total.
    assert_eq!(likes(&mut conn, &[1, 2, 3, 4, 9]), [502, 3, 7, 0, 4]);
    assert_eq!(Clip::likes_of(1).total(&mut conn).unwrap(), 502);

    // Compaction folds the slots alone.
    conn.batch_execute(
        "INSERT INTO clips_likes_slots (record_id, slot, count) VALUES (4, 2, 5), (4, 3, -5)",
    )
    .unwrap();
    let report = clips_likes_slots::table.compact_all(10, &mut conn).unwrap();
    assert!(report.rows_before > report.rows_after, "{report:?}");
    assert_eq!(likes(&mut conn, &[1, 2, 3, 4]), [502, 3, 7, 0]);

    // `set` puts the whole value into the slots: the column's part goes.
    Clip::likes_of(3).set(10, &mut conn).unwrap();
    assert_eq!(column(&mut conn, "likes_count", 3), 0);
    assert_eq!(Clip::likes_of(3).total(&mut conn).unwrap(), 10);
    Clip::likes_of(3).reset(&mut conn).unwrap();
    assert_eq!(Clip::likes_of(3).total(&mut conn).unwrap(), 0);

    // Absorb: the column into the slots, every total unchanged, the column 0.
    let report = clips_likes_slots::table.absorb_all(1, &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (1, 501), "{report:?}");
    assert_eq!(likes(&mut conn, &[1, 2, 3, 9]), [502, 3, 0, 4]);
    assert_eq!(column(&mut conn, "likes_count", 1), 0);
    // Again: nothing left to move.
    let again = clips_likes_slots::table.absorb_all(1, &mut conn).unwrap();
    assert_eq!((again.records, again.moved), (0, 0), "{again:?}");
    // A rolled-back deploy put an old binary back: its count is counted, and absorbed again.
    conn.batch_execute(&old_style_add("likes_count", 2, 5))
        .unwrap();
    assert_eq!(likes(&mut conn, &[2]), [8]);
    let report = clips_likes_slots::table.absorb(&[2, 3], &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (1, 5), "{report:?}");
    assert_eq!(likes(&mut conn, &[1, 2, 3, 9]), [502, 8, 0, 4]);

    // In the shared table: the same parts, the same moves.
    conn.batch_execute("UPDATE clips SET shares_count = 30 WHERE id = 1")
        .unwrap();
    Clip::shares_of(1).add(2, &mut conn).unwrap();
    assert_eq!(Clip::shares_of(1).total(&mut conn).unwrap(), 32);
    let report = clips_shares::counter.absorb_all(10, &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (1, 30), "{report:?}");
    let totals = Clip::shares_totals(&[1, 2], &mut conn).unwrap();
    assert_eq!((totals[&1], totals[&2]), (32, 0));
    let report = clips_shares::counter.release_all(10, &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (1, 32), "{report:?}");
    assert_eq!(column(&mut conn, "shares_count", 1), 32);
    assert_eq!(Clip::shares_of(1).total(&mut conn).unwrap(), 32);

    // A roll-up of a counter in the shared table: its pages of the model's keys compare with
    // the shared table's BIGINT keys.
    Clip::plays_of(1).add(3, &mut conn).unwrap();
    Clip::plays_of(2).add(5, &mut conn).unwrap();
    let report = clips_plays::counter
        .refresh_cache_all(1, &mut conn)
        .unwrap();
    // Clip 3's cache holds its total, 0, already: not written.
    assert_eq!(report.updated, 2, "{report:?}");
    assert_eq!(
        (
            column(&mut conn, "plays_total", 1),
            column(&mut conn, "plays_total", 2)
        ),
        (3, 5)
    );
}

/// The trap: a `cache` column with counts of its own is never overwritten by a roll-up.
fn a_roll_up_never_overwrites_a_columns_own_counts<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test, &[(1, 0, 0, 500), (2, 0, 0, 0)]) else {
        return;
    };
    Clip::saves_of(1).increment(&mut conn).unwrap();
    for refresh in [
        clips_saves_slots::table.refresh_cache_all(10, &mut conn),
        Clip::saves_of(1).refresh_cache(&mut conn),
        Clip::saves_of(2).refresh_cache(&mut conn),
    ] {
        let error = refresh.unwrap_err();
        assert!(
            matches!(&error, Error::ColumnHoldsCounts { key, value: 500, .. } if key == "1"),
            "{error}"
        );
        assert!(error.to_string().contains("adopt = saves_count"), "{error}");
    }
    assert_eq!(
        column(&mut conn, "saves_count", 1),
        500,
        "never overwritten"
    );
    // Once the column holds no counts of its own, the first roll-up claims it, and every roll-up
    // after writes totals.
    conn.batch_execute("UPDATE clips SET saves_count = 0")
        .unwrap();
    let report = clips_saves_slots::table
        .refresh_cache_all(10, &mut conn)
        .unwrap();
    // Clip 2's total is 0, which its cache holds: only clip 1's row is written.
    assert_eq!(report.updated, 1, "{report:?}");
    assert_eq!(column(&mut conn, "saves_count", 1), 1);
    Clip::saves_of(2).add(4, &mut conn).unwrap();
    Clip::saves_of(2).refresh_cache(&mut conn).unwrap();
    assert_eq!(column(&mut conn, "saves_count", 2), 4);
}

/// `adopt = views_count, cache = views_count`: the column counts until absorbed, then holds the
/// roll-up's totals, and a total never counts it twice.
fn the_adopted_column_becomes_the_cache_once_absorbed<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test, &[(1, 0, 1_000, 0), (2, 0, 20, 0)]) else {
        return;
    };
    Clip::views_of(1).add(5, &mut conn).unwrap();
    assert_eq!(Clip::views_of(1).total(&mut conn).unwrap(), 1_005);
    // Before the absorb, the column holds counts: a roll-up would lose them.
    let error = clips_views_slots::table
        .refresh_cache_all(10, &mut conn)
        .unwrap_err();
    assert!(matches!(error, Error::ColumnNotAbsorbed { .. }), "{error}");
    assert_eq!(column(&mut conn, "views_count", 1), 1_000);
    // Even a column all at 0 is not taken over by a roll-up: old binaries may still write it.
    // Absorbing some records is not the switch's end either.
    clips_views_slots::table.absorb(&[1, 2], &mut conn).unwrap();
    let error = Clip::views_of(1).refresh_cache(&mut conn).unwrap_err();
    assert!(matches!(error, Error::ColumnNotAbsorbed { .. }), "{error}");
    conn.batch_execute(&old_style_add("views_count", 2, 3))
        .unwrap();

    // `absorb_all`, the act that says no old binary is left, takes the column over.
    let report = clips_views_slots::table.absorb_all(10, &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (1, 3), "{report:?}");
    assert!(report.took_over_cache, "{report:?}");
    let report = clips_views_slots::table
        .refresh_cache_all(10, &mut conn)
        .unwrap();
    assert_eq!(report.updated, 2, "{report:?}");
    // The column is the cache now: the totals, read once each.
    assert_eq!(column(&mut conn, "views_count", 1), 1_005);
    assert_eq!(Clip::views_of(1).total(&mut conn).unwrap(), 1_005);
    let totals = Clip::views_totals(&[1, 2], &mut conn).unwrap();
    assert_eq!((totals[&1], totals[&2]), (1_005, 23));
    Clip::views_of(1).set(7, &mut conn).unwrap();
    assert_eq!(Clip::views_of(1).total(&mut conn).unwrap(), 7);
    // A cache holds copies of totals: absorbing again moves nothing, and releasing into it is
    // refused (it would count them twice).
    let again = clips_views_slots::table.absorb_all(10, &mut conn).unwrap();
    assert_eq!(
        (again.records, again.moved, again.took_over_cache),
        (0, 0, true)
    );
    let error = clips_views_slots::table
        .release_all(10, &mut conn)
        .unwrap_err();
    assert!(matches!(error, Error::ColumnIsCache { .. }), "{error}");
    assert_eq!(Clip::views_of(1).total(&mut conn).unwrap(), 7);
}

/// `release_all`: the slots back into the column, totals unchanged; an `INTEGER` column refuses
/// a count past `i32` for that record alone, which keeps its slots.
fn release_moves_the_slots_back_into_the_column<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test, &[(1, 10, 0, 0), (2, 0, 0, 0), (3, 1, 0, 0)])
    else {
        return;
    };
    Clip::likes_of(1).add(5, &mut conn).unwrap();
    Clip::likes_of(2).set(3_000_000_000, &mut conn).unwrap();
    Clip::likes_of(3).add(-1, &mut conn).unwrap();
    Clip::likes_of(8).add(2, &mut conn).unwrap();
    let report = clips_likes_slots::table.release_all(1, &mut conn).unwrap();
    assert_eq!((report.records, report.moved), (2, 4), "{report:?}");
    let failed: Vec<&str> = report.failed.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(failed, ["2", "8"], "{report:?}");
    assert!(report.failed[0].reason.contains("32-bit"), "{report:?}");
    assert_eq!(
        (
            column(&mut conn, "likes_count", 1),
            column(&mut conn, "likes_count", 3)
        ),
        (15, 0)
    );
    assert_eq!(likes(&mut conn, &[1, 2, 3, 8]), [15, 3_000_000_000, 0, 2]);
    // Only the two records that could not move keep slot rows.
    let kept = conn.query_i64("SELECT COUNT(DISTINCT record_id) AS n FROM clips_likes_slots");
    assert_eq!(kept, 2);
}

/// A composite key's column: the parts joined on both key columns, absorb and release paging
/// through keys that share their first column.
fn a_composite_key_adopts_its_column<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.batch_execute(
        "CREATE TABLE clip_days (clip_id INTEGER NOT NULL, day INTEGER NOT NULL, \
         plays INTEGER NOT NULL, PRIMARY KEY (clip_id, day)); \
         INSERT INTO clip_days VALUES (1, 1, 10), (1, 2, 20), (2, 1, 30)",
    )
    .unwrap();
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<ClipDay>())
        .unwrap();
    ClipDay::plays_of((1, 2)).add(5, &mut conn).unwrap();
    ClipDay::plays_of((2, 2)).add(1, &mut conn).unwrap();
    let keys = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 3)];
    let totals = |conn: &mut C| {
        let totals = ClipDay::plays_totals(&keys, conn).unwrap();
        keys.iter().map(|k| totals[k]).collect::<Vec<i64>>()
    };
    assert_eq!(totals(&mut conn), [10, 25, 30, 1, 0]);
    let report = clip_days_plays_slots::table
        .absorb_all(1, &mut conn)
        .unwrap();
    assert_eq!((report.records, report.moved), (3, 60), "{report:?}");
    assert_eq!(totals(&mut conn), [10, 25, 30, 1, 0]);
    let report = clip_days_plays_slots::table
        .release_all(1, &mut conn)
        .unwrap();
    assert_eq!((report.records, report.moved), (3, 65), "{report:?}");
    assert_eq!(report.failed.len(), 1, "(2, 2) has no row: {report:?}");
    assert_eq!(totals(&mut conn), [10, 25, 30, 1, 0]);
    let sum: i64 =
        [(1, 1), (1, 2), (2, 1)]
            .iter()
            .map(|(c, d)| {
                conn.query_i64(&format!(
                "SELECT CAST(plays AS {}) AS n FROM clip_days WHERE clip_id = {c} AND day = {d}",
                if C::NAME == "mysql" { "SIGNED" } else { "BIGINT" }
            ))
            })
            .sum();
    assert_eq!(sum, 65);
}

/// A witness of every old-style and new add acknowledged, against the totals at the end.
fn old_and_new_writers_absorb_compaction_and_roll_ups_count_exactly<C: TestConnection>(test: &str) {
    const RECORDS: i32 = 6;
    let rows: Vec<(i32, i32, i64, i64)> = (1..=RECORDS).map(|id| (id, 100, 1_000, 0)).collect();
    let Some((db, mut conn)) = setup::<C>(test, &rows) else {
        return;
    };
    let url = db.url.as_str();
    let stop = Stop::new();
    let seconds = if C::NAME == "sqlite" { 1.5 } else { 3.0 };
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let counted = std::thread::scope(|s| {
        let stop = &stop;
        let _stop = stop.on_exit();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                s.spawn(move || {
                    let mut conn = C::open(url);
                    let mut dice = Dice(w as u64 * 7 + 1);
                    let mut acked = vec![[0_i64; 2]; RECORDS as usize + 1];
                    while Instant::now() < until {
                        let id = 1 + dice.below(RECORDS as u64) as i32;
                        let delta = 1 + dice.below(3) as i64;
                        // Half old binaries, half new; both counters, each its own column.
                        let old = w % 2 == 0;
                        for (c, name) in ["likes_count", "views_count"].iter().enumerate() {
                            let written = if old {
                                conn.batch_execute(&old_style_add(name, id, delta))
                                    .map_err(|e| e.to_string())
                            } else if c == 0 {
                                Clip::likes_of(id)
                                    .add(delta, &mut conn)
                                    .map_err(|e| e.to_string())
                            } else {
                                Clip::views_of(id)
                                    .add(delta, &mut conn)
                                    .map_err(|e| e.to_string())
                            };
                            match written {
                                Ok(()) => acked[id as usize][c] += delta,
                                Err(e) if e.contains("database is locked") => {}
                                Err(e) => panic!("writer {w}: {e}"),
                            }
                        }
                    }
                    acked
                })
            })
            .collect();
        // Maintenance: absorb started and stopped at random (a batch at a time, now and then),
        // compaction looping.
        let maintenance = s.spawn(move || {
            let mut conn = C::open(url);
            let mut dice = Dice(99);
            let mut runs = 0;
            while !stop.is_set() {
                let id = 1 + dice.below(RECORDS as u64) as i32;
                let job = match dice.below(4) {
                    0 => clips_likes_slots::table
                        .absorb(&[id], &mut conn)
                        .map(|_| ()),
                    // A roll-up of column + slots into `likes_total`, beside both kinds of writer.
                    3 => clips_likes_slots::table
                        .refresh_cache_all(2, &mut conn)
                        .map(|_| ()),
                    1 => clips_views_slots::table
                        .absorb(&[id, id % RECORDS + 1], &mut conn)
                        .map(|_| ()),
                    _ => clips_likes_slots::table
                        .compact_all(3, &mut conn)
                        .map(|_| ()),
                };
                match job {
                    Ok(()) => runs += 1,
                    Err(e) if e.to_string().contains("database is locked") => {}
                    Err(e) => panic!("maintenance: {e}"),
                }
            }
            runs
        });
        let acked: Vec<Vec<[i64; 2]>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.set();
        let runs = maintenance.join().unwrap();
        assert!(runs > 0, "maintenance ran");
        acked
    });
    let mut expected = vec![[100_i64, 1_000_i64]; RECORDS as usize + 1];
    for acked in &counted {
        for id in 1..=RECORDS as usize {
            expected[id][0] += acked[id][0];
            expected[id][1] += acked[id][1];
        }
    }
    let ids: Vec<i32> = (1..=RECORDS).collect();
    let likes_now = likes(&mut conn, &ids);
    let views = Clip::views_totals(&ids, &mut conn).unwrap();
    for id in 1..=RECORDS {
        assert_eq!(
            likes_now[id as usize - 1],
            expected[id as usize][0],
            "likes of {id}"
        );
        assert_eq!(views[&id], expected[id as usize][1], "views of {id}");
    }
    // The end of the switch: absorb everything, then the views column becomes the cache.
    clips_likes_slots::table
        .refresh_cache_all(4, &mut conn)
        .unwrap();
    for id in 1..=RECORDS {
        assert_eq!(
            column(&mut conn, "likes_total", id),
            expected[id as usize][0]
        );
    }
    clips_likes_slots::table.absorb_all(4, &mut conn).unwrap();
    clips_views_slots::table.absorb_all(4, &mut conn).unwrap();
    clips_views_slots::table
        .refresh_cache_all(4, &mut conn)
        .unwrap();
    for id in 1..=RECORDS {
        assert_eq!(column(&mut conn, "likes_count", id), 0);
        assert_eq!(
            column(&mut conn, "views_count", id),
            expected[id as usize][1]
        );
        assert_eq!(
            Clip::likes_of(id).total(&mut conn).unwrap(),
            expected[id as usize][0]
        );
        assert_eq!(
            Clip::views_of(id).total(&mut conn).unwrap(),
            expected[id as usize][1]
        );
    }
}

/// 1. record 1 has 500 in `likes_count` and 2 in its slots;
/// 2. session A runs an old-style `UPDATE … likes_count = likes_count + 1` in a transaction and
///    holds it open;
/// 3. `absorb(1)` is seen waiting on A's row lock; A commits; the absorb moves 501;
/// 4. A runs another old-style `+ 1` and holds it; `set(1, 40)` is seen waiting; A commits, the
///    set zeroes the column and puts 40 in the slots; A's `+ 1` is ordered before the set.
/// 5. An old-style `+ 3` after the set counts: the total is 43, the column 3.
fn absorb_and_set_wait_out_an_old_style_update<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test, &[(1, 500, 0, 0)]) else {
        return;
    };
    Clip::likes_of(1).add(2, &mut conn).unwrap();
    let url = db.url.as_str();
    for step in ["absorb", "set"] {
        std::thread::scope(|s| {
            let (held_tx, held) = mpsc::channel::<()>();
            let (commit_tx, commit) = mpsc::channel::<()>();
            let old = s.spawn(move || {
                let mut conn = C::open(url);
                conn.transaction(|conn| {
                    conn.batch_execute(&old_style_add("likes_count", 1, 1))?;
                    held_tx.send(()).unwrap();
                    commit.recv().unwrap();
                    Ok::<_, diesel::result::Error>(())
                })
                .unwrap();
            });
            held.recv().unwrap();
            let (id_tx, id) = mpsc::channel::<i64>();
            let mover = s.spawn(move || {
                let mut conn = C::open(url);
                id_tx.send(session_id(&mut conn)).unwrap();
                match step {
                    "absorb" => clips_likes_slots::table
                        .absorb(&[1], &mut conn)
                        .map(|r| r.moved as i64),
                    _ => Clip::likes_of(1).set(40, &mut conn).map(|()| 40),
                }
                .unwrap()
            });
            let mover_id = id.recv().unwrap();
            assert!(
                poll_until(Duration::from_secs(10), || {
                    waiting_on_a_lock(&mut conn, &[mover_id]) == 1
                }),
                "{step} never seen waiting on the old-style UPDATE's lock"
            );
            commit_tx.send(()).unwrap();
            old.join().unwrap();
            let moved = mover.join().unwrap();
            match step {
                "absorb" => {
                    assert_eq!(moved, 501, "the held +1 committed first, then was absorbed");
                    assert_eq!(column(&mut conn, "likes_count", 1), 0);
                    assert_eq!(Clip::likes_of(1).total(&mut conn).unwrap(), 503);
                }
                _ => {
                    assert_eq!(
                        column(&mut conn, "likes_count", 1),
                        0,
                        "ordered before the set"
                    );
                    assert_eq!(Clip::likes_of(1).total(&mut conn).unwrap(), 40);
                }
            }
        });
    }
    conn.batch_execute(&old_style_add("likes_count", 1, 3))
        .unwrap();
    assert_eq!(Clip::likes_of(1).total(&mut conn).unwrap(), 43);
    assert_eq!(slot_rows(&mut conn, "clips_likes_slots"), 1);
}

#[cfg(feature = "async")]
mod asynch {
    use slotted_core::CounterMaintenance;
    use slotted_tests::adoption::*;
    use slotted_tests::asynch::AsyncTestConnection;
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    use slotted_tests::TestConnection;

    slotted_tests::async_backend_tests! {
        all: [adoption_on_the_async_face],
        servers: [absorb_and_set_async_wait_out_an_old_style_update],
    }

    /// Sessions of this test's database waiting on a lock right now.
    fn waiting_here<C: TestConnection>(conn: &mut C) -> i64 {
        conn.query_i64(match C::NAME {
            "postgres" => {
                "SELECT COUNT(*) AS n FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND datname = current_database()"
            }
            _ => {
                "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t \
                 JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
                 WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
            }
        })
    }

    /// The sync interleaving's steps on the async face: an old-style `UPDATE` held open on a
    /// row; `absorb_async`, then `set_async`, seen waiting on its lock; each ordered after it.
    async fn absorb_and_set_async_wait_out_an_old_style_update<A: AsyncTestConnection>(test: &str) {
        use std::time::{Duration, Instant};
        let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut sync = <A::Sync as TestConnection>::open(&db.url);
        create_clips(&mut sync, &[(1, 500, 0, 0)]);
        for step in ["absorb", "set"] {
            let (held_tx, held) = std::sync::mpsc::channel::<()>();
            let (commit_tx, commit) = std::sync::mpsc::channel::<()>();
            let url = db.url.clone();
            let old = std::thread::spawn(move || {
                let mut conn = <A::Sync as TestConnection>::open(&url);
                diesel::Connection::transaction(&mut conn, |conn| {
                    diesel::connection::SimpleConnection::batch_execute(
                        conn,
                        &old_style_add("likes_count", 1, 1),
                    )?;
                    held_tx.send(()).unwrap();
                    commit.recv().unwrap();
                    Ok::<_, diesel::result::Error>(())
                })
                .unwrap();
            });
            held.recv().unwrap();
            let url = db.url.clone();
            let mover = tokio::spawn(async move {
                let mut conn = A::open(&url).await;
                match step {
                    "absorb" => clips_likes_slots::table
                        .absorb_async(&[1], &mut conn)
                        .await
                        .map(|r| r.moved as i64),
                    _ => Clip::likes_of(1)
                        .set_async(40, &mut conn)
                        .await
                        .map(|()| 40),
                }
                .unwrap()
            });
            let deadline = Instant::now() + Duration::from_secs(10);
            while waiting_here(&mut sync) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "{step} never seen waiting on the lock"
                );
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            commit_tx.send(()).unwrap();
            old.join().unwrap();
            let moved = mover.await.unwrap();
            match step {
                "absorb" => assert_eq!(moved, 501, "the held +1 committed first, then absorbed"),
                _ => assert_eq!(
                    Clip::likes_of(1).total(&mut sync).unwrap(),
                    40,
                    "the held +1 ordered before the set"
                ),
            }
        }
    }

    /// The column's part through the async calls: totals, `set`, absorb, the roll-up's claim,
    /// release.
    async fn adoption_on_the_async_face<A: AsyncTestConnection>(test: &str) {
        let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut sync = <A::Sync as TestConnection>::open(&db.url);
        create_clips(&mut sync, &[(1, 500, 40, 0), (2, 9, 0, 0)]);
        let mut conn = A::open(&db.url).await;
        Clip::likes_of(1).add_async(2, &mut conn).await.unwrap();
        Clip::views_of(1).add_async(2, &mut conn).await.unwrap();
        let totals = Clip::likes_totals_async(&[1, 2, 3], &mut conn)
            .await
            .unwrap();
        assert_eq!((totals[&1], totals[&2], totals[&3]), (502, 9, 0));
        Clip::likes_of(2).set_async(4, &mut conn).await.unwrap();
        assert_eq!(Clip::likes_of(2).total_async(&mut conn).await.unwrap(), 4);

        let report = clips_likes_slots::table
            .absorb_all_async(1, &mut conn)
            .await
            .unwrap();
        assert_eq!((report.records, report.moved), (1, 500), "{report:?}");
        let report = clips_views_slots::table
            .absorb_all_async(10, &mut conn)
            .await
            .unwrap();
        assert_eq!((report.records, report.moved), (1, 40), "{report:?}");
        assert!(report.took_over_cache, "{report:?}");
        let error = clips_saves_slots::table
            .refresh_cache_all_async(10, &mut conn)
            .await;
        assert!(error.is_ok(), "every saves_count is 0: claimed");
        clips_views_slots::table
            .refresh_cache_all_async(10, &mut conn)
            .await
            .unwrap();
        assert_eq!(Clip::views_of(1).total_async(&mut conn).await.unwrap(), 42);
        assert_eq!(
            sync.query_i64("SELECT views_count AS n FROM clips WHERE id = 1"),
            42
        );
        let report = clips_likes_slots::table
            .release_all_async(10, &mut conn)
            .await
            .unwrap();
        assert_eq!((report.records, report.moved), (2, 506), "{report:?}");
        let totals = Clip::likes_totals_async(&[1, 2], &mut conn).await.unwrap();
        assert_eq!((totals[&1], totals[&2]), (502, 4));
        assert_eq!(
            sync.query_i64("SELECT COUNT(*) AS n FROM clips_likes_slots"),
            0
        );
    }
}

/// The guide's trigger example (docs/guide/adopting.md), on PostgreSQL: `post_aggregates.likes`
/// is bumped by an `AFTER INSERT` trigger on `post_likes`.
/// 1. The counter adopts the column: every like the trigger counted is in the total.
/// 2. The trigger's function is replaced (`CREATE OR REPLACE FUNCTION`, one statement) by one
///    that adds to a slot instead: the aggregates row is no longer a hot row. Likes inserted
///    by writers throughout, before, during and after the swap, are each counted once.
/// 3. `absorb_all` moves the column into the slots; the first roll-up then makes the column the
///    cache, and totals still equal the likes rows.
#[cfg(feature = "postgres")]
fn a_column_a_trigger_keeps_moves_onto_slots<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.batch_execute(
        "CREATE TABLE post_aggregates (post_id INTEGER PRIMARY KEY, likes BIGINT NOT NULL DEFAULT 0);
         CREATE TABLE post_likes (id BIGSERIAL PRIMARY KEY, post_id INTEGER NOT NULL);
         INSERT INTO post_aggregates (post_id) SELECT g FROM generate_series(1, 4) g;
         CREATE FUNCTION post_likes_count() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             UPDATE post_aggregates SET likes = likes + 1 WHERE post_id = NEW.post_id;
             RETURN NULL;
         END $$;
         CREATE TRIGGER post_likes_count AFTER INSERT ON post_likes
             FOR EACH ROW EXECUTE FUNCTION post_likes_count();
         INSERT INTO post_likes (post_id) SELECT 1 + g % 4 FROM generate_series(1, 100) g;",
    )
    .unwrap();
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<PostAggregate>())
        .unwrap();
    let likes_rows = |conn: &mut C, post: i32| {
        conn.query_i64(&format!(
            "SELECT COUNT(*) AS n FROM post_likes WHERE post_id = {post}"
        ))
    };
    assert_eq!(PostAggregate::likes_of(1).total(&mut conn).unwrap(), 25);

    let url = db.url.as_str();
    let swapped = std::thread::scope(|s| {
        let writers: Vec<_> = (0..4)
            .map(|w| {
                s.spawn(move || {
                    let mut conn = C::open(url);
                    for i in 0..150 {
                        conn.batch_execute(&format!(
                            "INSERT INTO post_likes (post_id) VALUES ({})",
                            1 + (i + w) % 4
                        ))
                        .unwrap();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        // The swap: the trigger now adds to a slot of the record (random, as `strategy = random`
        // writes), never to the aggregates row.
        C::open(url)
            .batch_execute(
                "CREATE OR REPLACE FUNCTION post_likes_count() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     INSERT INTO post_aggregates_likes_slots (record_id, slot, count)
                     VALUES (NEW.post_id, floor(random() * 8)::smallint, 1)
                     ON CONFLICT (record_id, slot)
                     DO UPDATE SET count = post_aggregates_likes_slots.count + 1;
                     RETURN NULL;
                 END $$",
            )
            .unwrap();
        let mut absorber = C::open(url);
        let moved = post_aggregates_likes_slots::table
            .absorb_all(2, &mut absorber)
            .unwrap();
        for writer in writers {
            writer.join().unwrap();
        }
        moved
    });
    assert!(swapped.moved > 0, "{swapped:?}");
    for post in 1..=4 {
        assert_eq!(
            PostAggregate::likes_of(post).total(&mut conn).unwrap(),
            likes_rows(&mut conn, post),
            "post {post}"
        );
    }
    // After the swap nothing writes the column: a last absorb empties it, and the first roll-up
    // makes it the cache.
    post_aggregates_likes_slots::table
        .absorb_all(10, &mut conn)
        .unwrap();
    post_aggregates_likes_slots::table
        .refresh_cache_all(10, &mut conn)
        .unwrap();
    for post in 1..=4 {
        let cached = conn.query_i64(&format!(
            "SELECT likes AS n FROM post_aggregates WHERE post_id = {post}"
        ));
        assert_eq!(cached, likes_rows(&mut conn, post), "post {post}'s cache");
        assert_eq!(
            PostAggregate::likes_of(post).total(&mut conn).unwrap(),
            cached
        );
    }
}

#[cfg(feature = "async")]
mod cut_offs {
    use slotted_core::CounterMaintenance;
    use slotted_tests::adoption::*;
    use slotted_tests::asynch::AsyncTestConnection;
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    use slotted_tests::TestConnection;

    slotted_tests::async_backend_tests! {
        all: [absorbs_cut_off_at_any_point_lose_and_double_nothing],
    }

    /// Tasks cut off by a tiny timeout somewhere in their call: absorbs (which move the column
    /// into the slots), old-style `UPDATE`s of the column and increments of the slots, on bb8
    /// connections. An absorb cut off anywhere moves a record's count whole or not at all: the
    /// total is the start plus every acknowledged add, give or take the adds cut off.
    async fn absorbs_cut_off_at_any_point_lose_and_double_nothing<A>(test: &str)
    where
        A: AsyncTestConnection,
        for<'a> A::Bb8Conn<'a>:
            slotted_core::PooledAsyncConnection + diesel_async::SimpleAsyncConnection,
    {
        use std::sync::atomic::{AtomicI64, Ordering};
        use std::sync::Arc;
        use std::time::Duration;
        let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut sync = <A::Sync as TestConnection>::open(&db.url);
        create_clips(&mut sync, &[(1, 1_000, 0, 0)]);
        let pool = A::bb8(&db.url, 6).await;
        let mut warm = Vec::new();
        for _ in 0..6 {
            warm.push(A::bb8_get(&pool).await);
        }
        drop(warm);
        let (acknowledged, cut_off, absorbs) = (
            Arc::new(AtomicI64::new(0)),
            Arc::new(AtomicI64::new(0)),
            Arc::new(AtomicI64::new(0)),
        );
        let mut tasks = Vec::new();
        for i in 0..150_u64 {
            let (pool, acknowledged, cut_off, absorbs) = (
                pool.clone(),
                acknowledged.clone(),
                cut_off.clone(),
                absorbs.clone(),
            );
            tasks.push(tokio::spawn(async move {
                // From well under a round trip to many of them; one absorb in five is not cut off
                // at all (an absorb takes several round trips), so some run to their end on a
                // loaded machine too.
                let limit = if i % 15 == 0 {
                    Duration::from_secs(30)
                } else {
                    Duration::from_micros(20 + (i * 97) % 20_000)
                };
                // A plain query cut off mid-flight leaves a MySQL connection out of step:
                // `CancelGuard` closes a connection whose call was cut off.
                let mut conn = slotted_core::CancelGuard::new(A::bb8_get(&pool).await);
                let likes = Clip::likes_of(1);
                let old_style = old_style_add("likes_count", 1, 1);
                let work = async {
                    match i % 3 {
                        0 => conn
                            .run(|c| clips_likes_slots::table.absorb_async(&[1], c))
                            .await
                            .map(|_| 0),
                        1 => conn
                            .run(|c| {
                                diesel_async::SimpleAsyncConnection::batch_execute(c, &old_style)
                            })
                            .await
                            .map(|()| 1)
                            .map_err(slotted_core::Error::from),
                        _ => conn.run(|c| likes.increment_async(c)).await.map(|()| 1),
                    }
                };
                match tokio::time::timeout(limit, work).await {
                    Ok(Ok(0)) => {
                        absorbs.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Ok(delta)) => {
                        acknowledged.fetch_add(delta, Ordering::SeqCst);
                    }
                    Ok(Err(e)) if e.to_string().contains("database is locked") => {}
                    Ok(Err(e)) => panic!("a call that ran to its end failed: {e}"),
                    Err(_) if i % 3 == 0 => {}
                    Err(_) => {
                        cut_off.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // A cut-off statement may still be running: read until the total stops moving.
        let mut total = Clip::likes_of(1).total(&mut sync).unwrap();
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let again = Clip::likes_of(1).total(&mut sync).unwrap();
            if again == total {
                break;
            }
            total = again;
        }
        slotted_tests::assert_counted_once(
            <A::Sync as TestConnection>::NAME,
            1_000 + acknowledged.load(Ordering::SeqCst),
            cut_off.load(Ordering::SeqCst),
            total,
        );
        assert!(
            absorbs.load(Ordering::SeqCst) > 0,
            "some absorbs ran to their end"
        );
        // Nothing is left half moved: a last absorb and the column is 0, the total unchanged.
        clips_likes_slots::table.absorb_all(10, &mut sync).unwrap();
        assert_eq!(Clip::likes_of(1).total(&mut sync).unwrap(), total);
    }
}
