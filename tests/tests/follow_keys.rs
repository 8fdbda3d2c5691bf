//! Counters that follow a child table by keys other than one integer column, on every backend.
//! A composite key (`follow = reactions(post_id, kind)`: a post's reactions of each kind): the
//! triggers count inserts, deletes, multi-row statements and updates that move a row to another
//! key by either column; the verify job pages through keys that share their first column, at
//! every page size, each key once; it finds drift on either side (a key with slot rows and no
//! child rows, and the reverse), and the repair fixes exactly that. A text key (`follow =
//! post_tags(tag)`): keys that differ only in case or accents are records of their own, as the
//! column compares them; on MySQL and MariaDB the column must compare them byte for byte, and a
//! migration over a case-insensitive one is refused before it changes anything.

use std::collections::BTreeMap;

use slotted_core::{CounterMaintenance, SlottedCounter};
use slotted_tests::{backend_tests, forum, TestConnection, TestDb};

backend_tests! {
    all: [
    a_composite_key_counts_every_change_and_its_verify_pages_through_every_key_once,
    a_text_key_counts_each_spelling_as_the_column_compares_it,
    a_text_key_column_that_ignores_case_is_refused_before_anything_changes,
    ],
    sqlite: [
        a_verify_over_a_column_that_ignores_case_ends_with_an_error,
        a_text_key_column_under_an_apps_collation_that_ignores_accents_is_refused,
    ],
    mysql: [a_text_key_column_longer_than_the_counters_keys_is_refused_before_anything_changes],
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

diesel::table! {
    tags (name) {
        name -> Text,
    }
}

diesel::table! {
    post_tags (id) {
        id -> BigInt,
        post_id -> Integer,
        tag -> Text,
    }
}

/// A tag: the posts tagged with it.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = tags, primary_key(name))]
#[slotted(counter = posts, slots = 4, follow = post_tags(tag))]
pub struct Tag {
    pub name: String,
}

/// Spellings that differ only in case, accents or a character past ASCII.
const TAGS: [&str; 8] = ["Rust", "rust", "RUST", "apple", "Zed", "zed", "zoë", "zoe"];

/// `tags` and `post_tags`, the tag column of the given type.
fn tag_tables<C: TestConnection>(conn: &mut C, tag_type: &str) {
    run(
        conn,
        &format!(
            "CREATE TABLE tags (name {tag_type} PRIMARY KEY); \
             CREATE TABLE post_tags (id {}, post_id INTEGER NOT NULL, tag {tag_type} NOT NULL); \
             CREATE INDEX post_tags_tag ON post_tags (tag)",
            forum::id_column(C::NAME)
        ),
    );
}

fn a_text_key_counts_each_spelling_as_the_column_compares_it<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let binary = match C::NAME {
        "mysql" => "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        _ => "VARCHAR(64)",
    };
    tag_tables(&mut conn, binary);
    run(
        &mut conn,
        "INSERT INTO post_tags (post_id, tag) VALUES (1, 'Rust'), (2, 'rust')",
    );
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Tag>())
        .unwrap();
    for (i, tag) in TAGS.iter().enumerate() {
        for post in 0..=i as i32 {
            run(
                &mut conn,
                &format!("INSERT INTO post_tags (post_id, tag) VALUES ({post}, '{tag}')"),
            );
        }
    }
    run(
        &mut conn,
        "UPDATE post_tags SET tag = 'zoë' WHERE tag = 'Zed' AND post_id < 2",
    );
    run(
        &mut conn,
        "DELETE FROM post_tags WHERE tag = 'RUST' AND post_id > 0",
    );
    let tags: Vec<String> = TAGS.iter().map(|t| (*t).to_owned()).collect();
    let exact = |conn: &mut C| {
        let totals = Tag::posts_totals(&tags, conn).unwrap();
        for tag in &tags {
            let want = conn.query_i64(&format!(
                "SELECT COUNT(*) AS n FROM post_tags WHERE tag = '{tag}'"
            ));
            assert_eq!(totals[tag], want, "{}: {tag}", C::NAME);
            assert_eq!(
                Tag::posts_of(tag.clone()).total(conn).unwrap(),
                want,
                "{}: {tag}",
                C::NAME
            );
        }
    };
    exact(&mut conn);
    let slots = tags_posts_slots::table;
    for batch in [1, 2, 3, 100] {
        let report = slots.verify_follow_all(batch, &mut conn).unwrap();
        assert_eq!(
            (report.records, report.drifted),
            (TAGS.len() as u64, 0),
            "{}: verify in pages of {batch}: {report:?}",
            C::NAME
        );
    }
    // 'rust' drifts by 2, behind the triggers' back.
    run(
        &mut conn,
        "UPDATE tags_posts_slots SET count = count + 2 WHERE record_id = 'rust' \
         AND slot = (SELECT MIN(slot) FROM (SELECT slot FROM tags_posts_slots \
         WHERE record_id = 'rust') AS s)",
    );
    let report = slots.repair_follow_all(3, &mut conn).unwrap();
    assert_eq!(
        (report.drifted, report.repaired),
        (1, 1),
        "{}: {report:?}",
        C::NAME
    );
    assert_eq!(report.drift[0].key, "\"rust\"", "{}: {report:?}", C::NAME);
    exact(&mut conn);
}

/// A column that takes `Rust` and `rust` for one value: MariaDB's default collation,
/// `utf8mb4_general_ci`; a nondeterministic ICU collation on PostgreSQL, and its `citext` type;
/// SQLite's `NOCASE`, and its `RTRIM`, which takes `a` and `a ` for one.
fn a_text_key_column_that_ignores_case_is_refused_before_anything_changes<C: TestConnection>(
    test: &str,
) {
    let says = "post_tags.tag keys a follow counter: give it";
    match C::NAME {
        "mysql" => refused::<C>(
            test,
            "",
            "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
            &format!("{says} a binary collation"),
            "Rust",
        ),
        "postgres" => {
            refused::<C>(
                test,
                "CREATE COLLATION slotted_ci \
                 (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
                "VARCHAR(64) COLLATE slotted_ci",
                &format!("{says} a deterministic collation"),
                "Rust",
            );
            refused::<C>(
                test,
                "CREATE EXTENSION IF NOT EXISTS citext",
                "citext",
                "post_tags.tag keys a follow counter: make it text (citext ignores case)",
                "Rust",
            );
        }
        _ => {
            for collation in ["NOCASE", "RTRIM"] {
                refused::<C>(
                    test,
                    "",
                    &format!("TEXT COLLATE {collation}"),
                    &format!("{says} the BINARY collation"),
                    "Rust",
                );
            }
        }
    }
}

/// A child column of 300 characters, and the counter's keys of 255 (`max_key_length`'s
/// default): a child row with a longer tag would fail its `INSERT` in the trigger, which
/// succeeds without slotted.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn a_text_key_column_longer_than_the_counters_keys_is_refused_before_anything_changes<
    C: TestConnection,
>(
    test: &str,
) {
    refused::<C>(
        test,
        "",
        "VARCHAR(300) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "post_tags.tag holds keys longer than the counter's max_key_length, 255: raise it or \
         shorten the column",
        &"t".repeat(300),
    );
}

/// After `setup` (SQL, or nothing), the migration over a tag column of `column_type` fails,
/// saying `says`, and creates nothing (no trigger): the child table then takes `tag` as it did
/// before.
fn refused<C: TestConnection>(test: &str, setup: &str, column_type: &str, says: &str, tag: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    if !setup.is_empty() {
        run(&mut conn, setup);
    }
    refused_on(&mut conn, column_type, says, tag);
}

/// [`refused`]'s check, on a connection of the test's database.
fn refused_on<C: TestConnection>(conn: &mut C, column_type: &str, says: &str, tag: &str) {
    tag_tables(conn, column_type);
    let error = conn
        .run_pending_migrations(slotted_core::CounterMigrations::of::<Tag>())
        .unwrap_err()
        .to_string();
    assert!(error.contains(says), "{}: {error}", C::NAME);
    assert_eq!(forum::follow_triggers(conn), 0, "{}: no trigger", C::NAME);
    run(
        conn,
        &format!("INSERT INTO post_tags (post_id, tag) VALUES (1, '{tag}')"),
    );
}

/// SQLite: a collation of the app's own (`register_collation`) that takes `é` (either Unicode
/// form) for `e`, as an accent-blind search collation does. The counter would count `café` and
/// `cafe`, one tag to the app, as two records: the migration refuses the column, as it refuses
/// `NOCASE`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn a_text_key_column_under_an_apps_collation_that_ignores_accents_is_refused<
    C: TestConnection + 'static,
>(
    test: &str,
) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let sqlite = (&mut conn as &mut dyn std::any::Any)
        .downcast_mut::<diesel::SqliteConnection>()
        .expect("a SQLite connection");
    // Each `é`, composed or not, read as `e`.
    let blind = |text: &str| -> String {
        text.chars()
            .filter(|&c| c != '\u{301}')
            .map(|c| if c == '\u{e9}' { 'e' } else { c })
            .collect()
    };
    sqlite
        .register_collation("slotted_no_accent", move |a, b| blind(a).cmp(&blind(b)))
        .expect("register the collation");
    refused_on(
        &mut conn,
        "TEXT COLLATE slotted_no_accent",
        "post_tags.tag keys a follow counter: give it the BINARY collation",
        "caf\u{e9}",
    );
    // It compares as the app wants: one tag.
    assert_eq!(
        conn.query_i64(
            "SELECT COUNT(DISTINCT tag) AS n FROM (SELECT tag FROM post_tags \
                        UNION ALL SELECT 'cafe')"
        ),
        1
    );
}

/// SQLite's `COLLATE NOCASE`, given to the column after the migration (which refuses it) by
/// rewriting the table's definition (`PRAGMA writable_schema`, as SQLite's `ALTER TABLE` page
/// describes for a change that leaves the stored rows as they are): the verify job's pages,
/// ordered one way on each side, came back to where they had been, and the job never ended
/// (a maintainer's verify hung). It ends, and says why.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn a_verify_over_a_column_that_ignores_case_ends_with_an_error<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    tag_tables(&mut conn, "TEXT");
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Tag>())
        .unwrap();
    run(
        &mut conn,
        "DROP INDEX post_tags_tag; \
         PRAGMA writable_schema = ON; \
         UPDATE sqlite_schema SET sql = replace(sql, 'tag TEXT NOT NULL', \
         'tag TEXT COLLATE NOCASE NOT NULL') WHERE type = 'table' AND name = 'post_tags'; \
         PRAGMA writable_schema = OFF",
    );
    // A new connection reads the definition anew.
    let mut conn = C::open(&db.url);
    for (post, tag) in TAGS.iter().enumerate() {
        run(
            &mut conn,
            &format!("INSERT INTO post_tags (post_id, tag) VALUES ({post}, '{tag}')"),
        );
    }
    assert_eq!(
        conn.query_i64("SELECT COUNT(*) AS n FROM post_tags WHERE tag = 'rust'"),
        3,
        "the column ignores case now"
    );
    let error = tags_posts_slots::table
        .verify_follow_all(1, &mut conn)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("verify came back to the page after key")
            && error.contains("give it a binary collation"),
        "{error}"
    );
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
