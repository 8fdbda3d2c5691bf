//! A counter that follows a child table by a composite key (`follow = reactions(post_id,
//! kind)`: a post's reactions of each kind), on every backend: the triggers count inserts,
//! deletes, multi-row statements and updates that move a row to another key by either column;
//! the verify job pages through keys that share their first column, at every page size, each key
//! once; it finds drift on either side (a key with slot rows and no child rows, and the
//! reverse), and the repair fixes exactly that.

use std::collections::BTreeMap;

use slotted_core::{CounterMaintenance, SlottedCounter};
use slotted_tests::{backend_tests, forum, TestConnection, TestDb};

backend_tests! {
    all: [
    a_composite_key_counts_every_change_and_its_verify_pages_through_every_key_once,
    ],
}

diesel::table! {
    post_kinds (post_id, kind) {
        post_id -> Integer,
        kind -> Integer,
    }
}

diesel::table! {
    reactions (id) {
        id -> BigInt,
        post_id -> Integer,
        kind -> Integer,
    }
}

/// A post's reactions of one kind.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = post_kinds, primary_key(post_id, kind))]
#[slotted(counter = reactions, slots = 4, follow = reactions(post_id, kind))]
pub struct PostKind {
    pub post_id: i32,
    pub kind: i32,
}

fn run<C: TestConnection>(conn: &mut C, sql: &str) {
    conn.batch_execute(sql)
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", C::NAME));
}

/// What the counts must be: `COUNT(*)` over the child rows, per key.
fn expected<C: TestConnection>(conn: &mut C) -> BTreeMap<(i32, i32), i64> {
    let mut counts = BTreeMap::new();
    for post in 1..=POSTS {
        for kind in 1..=KINDS {
            let n = conn.query_i64(&format!(
                "SELECT COUNT(*) AS n FROM reactions WHERE post_id = {post} AND kind = {kind}"
            ));
            if n != 0 {
                counts.insert((post, kind), n);
            }
        }
    }
    counts
}

/// What the counter says, for every key of the test (a key with no rows left out).
fn counted<C: TestConnection>(conn: &mut C) -> BTreeMap<(i32, i32), i64> {
    let keys: Vec<(i32, i32)> = (1..=POSTS)
        .flat_map(|post| (1..=KINDS).map(move |kind| (post, kind)))
        .collect();
    let totals = PostKind::reactions_totals(&keys, conn).unwrap();
    totals.into_iter().filter(|&(_, n)| n != 0).collect()
}

const POSTS: i32 = 6;
const KINDS: i32 = 5;

fn a_composite_key_counts_every_change_and_its_verify_pages_through_every_key_once<
    C: TestConnection,
>(
    test: &str,
) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let id = forum::id_column(C::NAME);
    run(
        &mut conn,
        &format!(
            "CREATE TABLE post_kinds (post_id INTEGER NOT NULL, kind INTEGER NOT NULL, \
             PRIMARY KEY (post_id, kind)); \
             CREATE TABLE reactions (id {id}, post_id INTEGER NOT NULL, kind INTEGER NOT NULL); \
             CREATE INDEX reactions_post_kind ON reactions (post_id, kind)"
        ),
    );
    // Rows there before the migration: its backfill counts them.
    run(
        &mut conn,
        "INSERT INTO reactions (post_id, kind) VALUES (1, 1), (1, 1), (1, 2), (3, 5)",
    );
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<PostKind>())
        .unwrap();
    assert_eq!(
        counted(&mut conn),
        expected(&mut conn),
        "{}: backfill",
        C::NAME
    );
    // One row at a time, then a multi-row statement: post p gets reactions of kinds 1..=p.
    for post in 1..=POSTS {
        for kind in 1..=post.min(KINDS) {
            run(
                &mut conn,
                &format!("INSERT INTO reactions (post_id, kind) VALUES ({post}, {kind})"),
            );
        }
    }
    run(
        &mut conn,
        "INSERT INTO reactions (post_id, kind) SELECT post_id, kind FROM reactions WHERE kind <= 2",
    );
    assert_eq!(
        counted(&mut conn),
        expected(&mut conn),
        "{}: inserts",
        C::NAME
    );
    // Moves by the second column, by the first, by both; a delete of many.
    run(
        &mut conn,
        "UPDATE reactions SET kind = 4 WHERE post_id = 2 AND kind = 1",
    );
    run(
        &mut conn,
        "UPDATE reactions SET post_id = 5 WHERE post_id = 4 AND kind = 3",
    );
    run(
        &mut conn,
        "UPDATE reactions SET post_id = 1, kind = 5 WHERE post_id = 6 AND kind = 2",
    );
    run(
        &mut conn,
        "DELETE FROM reactions WHERE post_id = 3 AND kind >= 2",
    );
    let want = expected(&mut conn);
    assert_eq!(counted(&mut conn), want, "{}: moves and deletes", C::NAME);
    let slots = post_kinds_reactions_slots::table;
    // The records a verify checks: every key with slot rows (some at 0 after the moves and
    // deletes) or with child rows.
    let records = |conn: &mut C| {
        conn.query_i64(
            "SELECT COUNT(*) AS n FROM (SELECT record_id, record_id_2 FROM \
             post_kinds_reactions_slots UNION SELECT post_id, kind FROM reactions) AS k",
        ) as u64
    };
    let checked = records(&mut conn);
    assert!(checked > want.len() as u64, "{}: keys at 0 too", C::NAME);
    // Every page size pages through every key once: keys that share their first column (post
    // 6 has five) split across pages at every point.
    for batch in [1, 2, 3, 4, 5, 7, 1000] {
        let report = slots.verify_follow_all(batch, &mut conn).unwrap();
        assert_eq!(
            (report.records, report.drifted),
            (checked, 0),
            "{}: verify in pages of {batch}: {report:?}",
            C::NAME
        );
    }
    // Drift on either side, behind the triggers' back: a key with slot rows and no child rows
    // (7, 1), a key with child rows and no slot rows (2, 2), and a key whose slots hold one
    // more than its child rows (6, 3).
    run(
        &mut conn,
        "INSERT INTO post_kinds_reactions_slots (record_id, record_id_2, slot, count) \
         VALUES (7, 1, 0, 3)",
    );
    run(
        &mut conn,
        "DELETE FROM post_kinds_reactions_slots WHERE record_id = 2 AND record_id_2 = 2",
    );
    let (six_three_rows, six_three) = (
        conn.query_i64(
            "SELECT COUNT(*) AS n FROM post_kinds_reactions_slots \
             WHERE record_id = 6 AND record_id_2 = 3",
        ),
        want[&(6, 3)],
    );
    assert_eq!(six_three_rows, 1, "{}: (6, 3) has one slot row", C::NAME);
    run(
        &mut conn,
        "UPDATE post_kinds_reactions_slots SET count = count + 1 \
         WHERE record_id = 6 AND record_id_2 = 3",
    );
    for batch in [1, 2, 3, 1000] {
        let report = slots.verify_follow_all(batch, &mut conn).unwrap();
        let mut drift: Vec<(String, i64, i64)> = report
            .drift
            .iter()
            .map(|d| (d.key.clone(), d.counted, d.child_rows))
            .collect();
        drift.sort();
        assert_eq!(
            (report.records, report.drifted),
            (records(&mut conn), 3),
            "{}: verify in pages of {batch}: {report:?}",
            C::NAME
        );
        assert_eq!(
            drift,
            [
                ("(2, 2)".to_owned(), 0, want[&(2, 2)]),
                ("(6, 3)".to_owned(), six_three + 1, six_three),
                ("(7, 1)".to_owned(), 3, 0),
            ],
            "{}: the drift, in pages of {batch}",
            C::NAME
        );
    }
    let report = slots.repair_follow_all(2, &mut conn).unwrap();
    assert_eq!(report.repaired, 3, "{}: {report:?}", C::NAME);
    let report = slots.verify_follow_all(3, &mut conn).unwrap();
    assert_eq!(
        report.drifted,
        0,
        "{}: after the repair: {report:?}",
        C::NAME
    );
    assert_eq!(counted(&mut conn), want, "{}: after the repair", C::NAME);
    assert_eq!(
        PostKind::reactions_of((7, 1)).total(&mut conn).unwrap(),
        0,
        "{}: (7, 1) has no child row",
        C::NAME
    );
    // Compaction keeps every total.
    slots.compact_all(2, &mut conn).unwrap();
    assert_eq!(counted(&mut conn), want, "{}: after compaction", C::NAME);
}
