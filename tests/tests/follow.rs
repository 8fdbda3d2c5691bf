//! Counters that follow a child table (`follow = comments(post_id)`), on every backend: the
//! triggers the counter migrations create count every change of a child row (inserts,
//! deletes, moves to another parent, filter flips, summed values changing, multi-row
//! statements, rows already there when the migration ran), concurrent writers beside
//! compaction count exactly, and the removal drops the triggers and nothing else.

use std::collections::HashMap;

use slotted_core::CounterMaintenance;
use slotted_tests::forum::{self, Author, Community, ForumPost, Site};
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests! {
    all: [
    every_change_of_a_child_row_is_counted,
    the_rows_already_there_are_counted_once,
    concurrent_writers_beside_compaction_count_exactly,
    the_removal_drops_the_triggers_and_nothing_else,
    verify_reports_drift_and_missing_triggers_and_repair_fixes_them,
    verify_pages_past_child_rows_that_do_not_count,
    the_backfill_is_exact_while_writers_insert_and_delete,
    an_online_backfill_is_exact_while_writers_insert_delete_move_and_soft_delete,
    counters_of_one_child_table_migrated_apart_are_reported,
    the_triggers_of_a_table_no_longer_followed_are_reported,
    a_post_deleted_with_its_comments_by_a_cascade_leaves_its_community_exact,
    a_sum_past_bigint_fails_the_child_write_and_counts_nothing,
    an_aggregate_column_an_apps_trigger_keeps_is_taken_over_beside_writers,
    a_post_moved_while_a_comment_is_added_to_it_counts_the_comment_once,
    ],
    servers: [
    concurrent_writers_write_distinct_slots,
    concurrent_writers_beside_compaction_count_exactly_under_a_foreign_key,
    a_post_moved_while_a_comment_is_added_to_it_counts_the_comment_once_under_a_foreign_key,
    two_repairs_of_one_drifted_record_add_its_difference_once,
    a_repair_in_a_transaction_whose_snapshot_predates_another_repair_adds_nothing_twice,
    ],
    postgres: [a_foreign_key_the_insert_relies_on_is_reported_once_gone],
}

const POSTS: [i32; 5] = [1, 2, 3, 4, 5];
/// The posts counted: the five, and two that steps of the tests add (6, renumbered 7).
const COUNTED_POSTS: [i32; 7] = [1, 2, 3, 4, 5, 6, 7];
const AUTHORS: [i32; 3] = [1, 2, 3];
const COMMUNITIES: [i32; 3] = [1, 2, 3];

/// Counts per record: each parent of the test, 0 when it has none.
#[derive(Debug, PartialEq, Eq, Default)]
struct Counts {
    post_comments: HashMap<i32, i64>,
    post_score: HashMap<i32, i64>,
    author_comments: HashMap<i32, i64>,
    author_local: HashMap<i32, i64>,
    site: (i64, i64),
    community_comments: HashMap<i32, i64>,
}

/// What the counts must be: the database's own `COUNT`s and `SUM`s over the child tables.
fn expected<C: TestConnection>(conn: &mut C) -> Counts {
    let int = if C::NAME == "mysql" {
        "SIGNED"
    } else {
        "BIGINT"
    };
    let mut per = |keys: &[i32], sql: String| -> HashMap<i32, i64> {
        let mut counts: HashMap<i32, i64> = keys.iter().map(|k| (*k, 0)).collect();
        for (k, n) in conn.query_pairs(&sql) {
            counts.insert(i32::try_from(k).unwrap(), n);
        }
        counts
    };
    Counts {
        post_comments: per(
            &COUNTED_POSTS,
            format!(
                "SELECT CAST(post_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
                 WHERE post_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY post_id"
            ),
        ),
        post_score: per(
            &COUNTED_POSTS,
            format!(
                "SELECT CAST(post_id AS {int}) AS k, CAST(SUM(score) AS {int}) AS n \
                 FROM post_votes GROUP BY post_id"
            ),
        ),
        author_comments: per(
            &AUTHORS,
            format!(
                "SELECT CAST(author_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n \
                 FROM comments GROUP BY author_id"
            ),
        ),
        author_local: per(
            &AUTHORS,
            format!(
                "SELECT CAST(author_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n \
                 FROM comments WHERE local GROUP BY author_id"
            ),
        ),
        community_comments: per(
            &COMMUNITIES,
            format!(
                "SELECT CAST(p.community_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n \
                 FROM comments c JOIN forum_posts p ON p.id = c.post_id \
                 WHERE p.community_id IS NOT NULL AND NOT c.deleted AND NOT c.removed \
                 GROUP BY p.community_id"
            ),
        ),
        site: (
            conn.query_i64(&format!(
                "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments"
            )),
            conn.query_i64(&format!(
                "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments WHERE local AND NOT deleted"
            )),
        ),
    }
}

/// What slotted counts: the counters' totals.
fn counted<C: TestConnection>(conn: &mut C) -> Counts {
    Counts {
        post_comments: ForumPost::comments_totals(&COUNTED_POSTS, conn).unwrap(),
        post_score: ForumPost::score_totals(&COUNTED_POSTS, conn).unwrap(),
        author_comments: Author::comments_totals(&AUTHORS, conn).unwrap(),
        author_local: Author::local_comments_totals(&AUTHORS, conn).unwrap(),
        site: (
            Site::comments_of(1).total(conn).unwrap(),
            Site::local_comments_of(1).total(conn).unwrap(),
        ),
        community_comments: Community::comments_totals(&COMMUNITIES, conn).unwrap(),
    }
}

fn assert_exact<C: TestConnection>(conn: &mut C, step: &str) {
    assert_eq!(counted(conn), expected(conn), "{}: after {step}", C::NAME);
}

/// Runs `sql` (a statement of the test's own, on its own tables).
fn run<C: TestConnection>(conn: &mut C, sql: &str) {
    conn.batch_execute(sql)
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", C::NAME));
}

fn insert_comment<C: TestConnection>(conn: &mut C, post: Option<i32>, author: i32) {
    let post = post.map_or("NULL".to_owned(), |p| p.to_string());
    run(
        conn,
        &format!("INSERT INTO comments (post_id, author_id) VALUES ({post}, {author})"),
    );
}

fn setup<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    forum::create_tables(&mut conn);
    // The posts, in communities (post 5 in none): a comment counts for its post's community.
    run(
        &mut conn,
        "INSERT INTO forum_posts (id, community_id) VALUES (1, 1), (2, 1), (3, 2), (4, 2), (5, NULL)",
    );
    Some((db, conn))
}

/// [`setup`], the counters migrated, and 20 comments on the five posts by the three authors.
fn with_twenty_comments<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let (db, mut conn) = setup::<C>(test)?;
    migrate(&mut conn);
    for i in 0..20 {
        insert_comment(&mut conn, Some(POSTS[i % 5]), AUTHORS[i % 3]);
    }
    Some((db, conn))
}

fn migrate<C: TestConnection>(conn: &mut C) {
    conn.run_pending_migrations(forum::migrations())
        .expect("the counter migrations");
}

fn every_change_of_a_child_row_is_counted<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    migrate(&mut conn);
    assert_exact(&mut conn, "the migration");

    for (post, author) in [(1, 1), (1, 2), (2, 1), (3, 3)] {
        insert_comment(&mut conn, Some(post), author);
    }
    insert_comment(&mut conn, None, 2); // no post: counts for its author only
    assert_exact(&mut conn, "inserts");
    assert_eq!(ForumPost::comments_of(1).total(&mut conn).unwrap(), 2);

    // A move to another post.
    let first = conn.query_i64("SELECT MIN(id) AS n FROM comments");
    let steps = [
        (
            "a move",
            format!("UPDATE comments SET post_id = 2 WHERE id = {first}"),
        ),
        (
            "a soft delete",
            format!("UPDATE comments SET deleted = TRUE WHERE id = {first}"),
        ),
        (
            "a move of a deleted comment",
            format!("UPDATE comments SET removed = TRUE, post_id = 4 WHERE id = {first}"),
        ),
        (
            "a restore",
            format!("UPDATE comments SET deleted = FALSE, removed = FALSE WHERE id = {first}"),
        ),
        (
            "a move to no post",
            format!("UPDATE comments SET post_id = NULL WHERE id = {first}"),
        ),
        (
            "a move back and a change of author",
            format!("UPDATE comments SET post_id = 5, author_id = 3 WHERE id = {first}"),
        ),
        (
            "comments no longer local",
            "UPDATE comments SET local = FALSE WHERE author_id = 1".to_owned(),
        ),
        (
            "a change no count reads",
            "UPDATE comments SET author_id = author_id WHERE post_id = 5".to_owned(),
        ),
        // Multi-row statements: INSERT … SELECT, UPDATE and DELETE of many rows.
        (
            "an INSERT … SELECT",
            "INSERT INTO comments (post_id, author_id, deleted, removed, local) \
             SELECT post_id, author_id, deleted, removed, local FROM comments"
                .to_owned(),
        ),
        (
            "a second INSERT … SELECT",
            "INSERT INTO comments (post_id, author_id, deleted, removed, local) \
             SELECT post_id, author_id, deleted, removed, local FROM comments"
                .to_owned(),
        ),
        (
            "a multi-row move",
            "UPDATE comments SET post_id = 3 WHERE post_id = 1".to_owned(),
        ),
        (
            "a multi-row soft delete",
            "UPDATE comments SET removed = TRUE WHERE author_id = 3".to_owned(),
        ),
        (
            "a multi-row delete",
            "DELETE FROM comments WHERE author_id = 2".to_owned(),
        ),
        // A sum: votes of +1 and -1, changed, moved and withdrawn.
        (
            "votes",
            "INSERT INTO post_votes (post_id, user_id, score) \
             VALUES (1, 1, 1), (1, 2, 1), (1, 3, -1), (1, 4, 1)"
                .to_owned(),
        ),
        (
            "a vote changed",
            "UPDATE post_votes SET score = 1 WHERE post_id = 1 AND user_id = 3".to_owned(),
        ),
        (
            "a vote moved and changed",
            "UPDATE post_votes SET post_id = 2, score = -1 WHERE post_id = 1 AND user_id = 4"
                .to_owned(),
        ),
        (
            "a vote withdrawn",
            "DELETE FROM post_votes WHERE post_id = 1 AND user_id = 1".to_owned(),
        ),
        (
            "every vote changed",
            "UPDATE post_votes SET score = 0 - score".to_owned(),
        ),
        // Through the posts: a comment counts for its post's community, and follows the post.
        (
            "a post moved to another community",
            "UPDATE forum_posts SET community_id = 3 WHERE id = 3".to_owned(),
        ),
        (
            "a post taken out of every community",
            "UPDATE forum_posts SET community_id = NULL WHERE id = 4".to_owned(),
        ),
        (
            "a post put in a community",
            "UPDATE forum_posts SET community_id = 2 WHERE id = 5".to_owned(),
        ),
        (
            "posts of two communities moved in one statement",
            "UPDATE forum_posts SET community_id = CASE community_id WHEN 1 THEN 2 ELSE 1 END \
             WHERE community_id IN (1, 2)"
                .to_owned(),
        ),
        (
            "a column of the post no count reads",
            "UPDATE forum_posts SET comments_count = 7".to_owned(),
        ),
        (
            "comments on a post that does not exist yet",
            "INSERT INTO comments (post_id, author_id) VALUES (6, 1), (6, 2)".to_owned(),
        ),
        (
            "the post inserted, in a community",
            "INSERT INTO forum_posts (id, community_id) VALUES (6, 3)".to_owned(),
        ),
        (
            "a comment moved to a post of another community",
            "UPDATE comments SET post_id = 6 WHERE post_id = 2".to_owned(),
        ),
        (
            "the post's key changed",
            "UPDATE forum_posts SET id = 7 WHERE id = 6".to_owned(),
        ),
        (
            "its comments following it",
            "UPDATE comments SET post_id = 7 WHERE post_id = 6".to_owned(),
        ),
        (
            "a post deleted, its comments kept",
            "DELETE FROM forum_posts WHERE id = 7".to_owned(),
        ),
        (
            "a comment soft-deleted in a community",
            "UPDATE comments SET deleted = TRUE WHERE post_id = 5".to_owned(),
        ),
    ];
    for (step, sql) in steps {
        run(&mut conn, &sql);
        assert_exact(&mut conn, step);
    }
    assert_eq!(ForumPost::score_of(2).total(&mut conn).unwrap(), 1);

    // In a transaction that rolls back: nothing counted.
    let before = counted(&mut conn);
    let _ = conn.transaction::<(), diesel::result::Error, _>(|conn| {
        insert_comment(conn, Some(1), 1);
        conn.batch_execute("DELETE FROM comments")?;
        Err(diesel::result::Error::RollbackTransaction)
    });
    assert_eq!(
        counted(&mut conn),
        before,
        "a rollback undoes the triggers' counts"
    );
    assert_exact(&mut conn, "a rollback");
}

fn the_rows_already_there_are_counted_once<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    for i in 0..40 {
        insert_comment(&mut conn, Some(POSTS[i % 5]), AUTHORS[i % 3]);
    }
    insert_comment(&mut conn, None, 1);
    run(
        &mut conn,
        "UPDATE comments SET deleted = TRUE WHERE id % 7 = 0",
    );
    run(
        &mut conn,
        "INSERT INTO post_votes (post_id, user_id, score) VALUES (1, 1, 1), (1, 2, -1), (3, 1, 1)",
    );
    migrate(&mut conn);
    assert_exact(&mut conn, "the backfill");
    insert_comment(&mut conn, Some(1), 1);
    assert_exact(&mut conn, "an insert after the backfill");
    // Running the migrations again is a no-op: nothing counted twice.
    migrate(&mut conn);
    assert_exact(&mut conn, "the migrations run again");
}

/// Writers insert (one and several rows a statement), delete, move and soft-delete comments
/// and cast, flip (many in one `UPDATE`) and withdraw votes on five hot posts, in transactions
/// of several statements, some rolled back; a maintainer compacts the counter tables meanwhile. At the end every count equals the child rows'.
fn concurrent_writers_beside_compaction_count_exactly<C: TestConnection>(test: &str) {
    concurrent_writers_beside_compaction::<C>(test, false);
}

/// The same under a foreign key from the comments to their posts: PostgreSQL's insert trigger
/// then leaves the lock on the post to the key's check.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn concurrent_writers_beside_compaction_count_exactly_under_a_foreign_key<C: TestConnection>(
    test: &str,
) {
    concurrent_writers_beside_compaction::<C>(test, true);
}

/// A foreign key from the comments to their posts, not deferrable, before the migration: on
/// PostgreSQL the follow function's `INSERT` then takes no lock of its own on the post (the
/// key's check holds it), which the function's source shows: its `FOR KEY SHARE` locks, one
/// per event that takes one, are the update's and the delete's only.
fn add_the_foreign_key<C: TestConnection>(conn: &mut C) {
    run(
        conn,
        "ALTER TABLE comments ADD CONSTRAINT comments_post FOREIGN KEY (post_id) \
         REFERENCES forum_posts (id)",
    );
}

/// How many `FOR KEY SHARE` locks the follow function of `comments` takes (PostgreSQL).
fn locks_in_the_function<C: TestConnection>(conn: &mut C) -> i64 {
    conn.query_i64(
        "SELECT CAST((length(prosrc) - length(replace(prosrc, 'FOR KEY SHARE', ''))) / 13 AS BIGINT) \
         AS n FROM pg_proc WHERE proname = 'slotted_follow_comments'",
    )
}

fn assert_the_insert_locks<C: TestConnection>(conn: &mut C, foreign_key: bool) {
    if C::NAME == "postgres" {
        assert_eq!(
            locks_in_the_function(conn),
            if foreign_key { 2 } else { 3 },
            "the insert's own lock on the post, with a foreign key: {foreign_key}"
        );
    }
}

fn concurrent_writers_beside_compaction<C: TestConnection>(test: &str, foreign_key: bool) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    if foreign_key {
        add_the_foreign_key(&mut conn);
    }
    migrate(&mut conn);
    assert_the_insert_locks(&mut conn, foreign_key);
    let writers = if C::NAME == "sqlite" { 3 } else { 8 };
    let rounds = if C::NAME == "sqlite" { 60 } else { 120 };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let compactor = {
        let url = db.url.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conn = C::open(&url);
            let mut passes = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                forum::forum_posts_comments_slots::table
                    .compact_all(16, &mut conn)
                    .expect("compaction beside the writers");
                forum::authors_comments_slots::table
                    .compact_all(16, &mut conn)
                    .expect("compaction beside the writers");
                forum::forum_posts_score_slots::table
                    .compact_all(16, &mut conn)
                    .expect("compaction beside the writers");
                forum::communities_comments_slots::table
                    .compact_all(16, &mut conn)
                    .expect("compaction beside the writers");
                // Beside writers, a page's one snapshot sees a child row and its count
                // together: no drift, ever. Through the posts too: a post's move and the
                // counts it moves commit together.
                let report = forum::forum_posts_comments_slots::table
                    .verify_follow_all(2, &mut conn)
                    .expect("verify beside the writers");
                assert!(report.is_exact() && report.drifted == 0, "{report:?}");
                let report = forum::communities_comments_slots::table
                    .verify_follow_all(2, &mut conn)
                    .expect("verify beside the writers");
                assert!(report.is_exact() && report.drifted == 0, "{report:?}");
                passes += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            passes
        })
    };
    let threads: Vec<_> = (0..writers)
        .map(|w: usize| {
            let url = db.url.clone();
            std::thread::spawn(move || {
                let mut conn = C::open(&url);
                let mut failed = 0;
                for round in 0..rounds {
                    let post = POSTS[(w + round) % POSTS.len()];
                    let other = POSTS[(w * 3 + round + 1) % POSTS.len()];
                    let author = AUTHORS[(w + round) % AUTHORS.len()];
                    let user = i32::try_from(w * 1000 + round % 50).unwrap();
                    let local = if round % 3 == 0 { "FALSE" } else { "TRUE" };
                    let deleted = if round % 2 == 0 { "TRUE" } else { "FALSE" };
                    let score = if round % 4 == 0 { -1 } else { 1 };
                    let mut statements = vec![format!(
                        "INSERT INTO comments (post_id, author_id, local) VALUES ({post}, {author}, {local})"
                    )];
                    statements.push(match round % 5 {
                        0 => format!(
                            "UPDATE comments SET post_id = {other} WHERE author_id = {author} AND post_id = {post}"
                        ),
                        1 => format!("UPDATE comments SET deleted = {deleted} WHERE post_id = {other}"),
                        2 => format!(
                            "DELETE FROM comments WHERE post_id = {other} AND author_id = {author}"
                        ),
                        // A multi-row insert from the table itself (bounded, so that the rows
                        // do not double round after round).
                        3 => format!(
                            "INSERT INTO comments (post_id, author_id, local, deleted) \
                             SELECT post_id, author_id, local, deleted FROM comments \
                             WHERE post_id = {other} ORDER BY id LIMIT 3"
                        ),
                        // Every vote of a post flipped in place: the summed column changes on
                        // many rows in one statement.
                        _ => format!("UPDATE post_votes SET score = -score WHERE post_id = {other}"),
                    });
                    statements.push(format!(
                        "DELETE FROM post_votes WHERE post_id = {post} AND user_id = {user}"
                    ));
                    statements.push(format!(
                        "INSERT INTO post_votes (post_id, user_id, score) VALUES ({post}, {user}, {score})"
                    ));
                    let result = conn.transaction::<_, diesel::result::Error, _>(|conn| {
                        for sql in &statements {
                            conn.batch_execute(sql)?;
                        }
                        if round % 11 == 0 {
                            return Err(diesel::result::Error::RollbackTransaction);
                        }
                        Ok(())
                    });
                    // A post moved to another community while others comment on it (an
                    // administrator's move, a transaction of its own): its comments' count
                    // moves with it, and a comment written meanwhile counts for the
                    // community the post ends in.
                    let moved = (round % 4 == 1).then(|| {
                        let community = COMMUNITIES[(w + round) % COMMUNITIES.len()];
                        conn.transaction::<_, diesel::result::Error, _>(|conn| {
                            conn.batch_execute(&format!(
                                "UPDATE forum_posts SET community_id = {community} WHERE id = {other}"
                            ))
                        })
                    });
                    for result in [result.map(|_| ())].into_iter().chain(moved) {
                        match result {
                            Ok(()) | Err(diesel::result::Error::RollbackTransaction) => {}
                            // Two writers' row locks on the same comments: the database picks a
                            // victim, as it would without the triggers.
                            Err(e) if lost_a_lock_conflict(&e) => failed += 1,
                            Err(e) => panic!("writer {w}, round {round}: {e}"),
                        }
                    }
                }
                failed
            })
        })
        .collect();
    let failed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let passes = compactor.join().unwrap();
    eprintln!(
        "{}: {writers} writers x {rounds} rounds, {failed} transactions lost a lock conflict, {passes} compaction passes",
        C::NAME
    );
    assert_exact(&mut conn, "concurrent writers beside compaction");
}

fn the_removal_drops_the_triggers_and_nothing_else<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    migrate(&mut conn);
    insert_comment(&mut conn, Some(1), 1);
    // Revert the follow migrations only (they come last, one per child table: comments and
    // post_votes): the counter tables stay.
    for _ in 0..2 {
        conn.revert_last_migration(forum::migrations()).unwrap();
    }
    insert_comment(&mut conn, Some(1), 1);
    assert_eq!(
        ForumPost::comments_of(1).total(&mut conn).unwrap(),
        1,
        "counted before the removal, not after"
    );
    let child_rows = conn.query_i64(if C::NAME == "mysql" {
        "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM comments"
    } else {
        "SELECT COUNT(*) AS n FROM comments"
    });
    assert_eq!(child_rows, 2, "the child rows are the user's: untouched");
    let triggers = forum::follow_triggers(&mut conn);
    assert_eq!(triggers, 0, "no trigger left");
    if C::NAME == "postgres" {
        let functions = conn
            .query_i64("SELECT COUNT(*) AS n FROM pg_proc WHERE proname LIKE 'slotted_follow%'");
        assert_eq!(functions, 0, "no trigger function left");
    }
    // Applied again: the counts follow the child rows again, both of them.
    migrate(&mut conn);
    assert_exact(&mut conn, "the follow migrations applied again");
}

/// A deadlock or lock wait the database resolved by rolling a transaction back, SQLite's busy,
/// or MariaDB's 1467 (an `INSERT … SELECT` that met one waiting for the table's AUTO-INC lock):
/// what slotted's retry helpers run again, by slotted's own reading of the error.
fn lost_a_lock_conflict(e: &diesel::result::Error) -> bool {
    slotted_core::retry::Retryable::is_retryable(e)
}

/// The traffic a migration runs in the middle of: writers that each insert a comment on one of
/// the posts, in a transaction that every third time also deletes the oldest comment of the same
/// author (`delete_by = "author_id"`) or post (`"post_id"`), until `stop`.
struct Traffic {
    stop: slotted_tests::Stop,
    /// Transactions committed.
    written: std::sync::atomic::AtomicU64,
}

impl Traffic {
    fn new() -> Self {
        Traffic {
            stop: slotted_tests::Stop::new(),
            written: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn spawn<'scope, 'env, C: TestConnection>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        url: &'env str,
        writers: usize,
        delete_by: &'static str,
    ) {
        for w in 0..writers {
            scope.spawn(move || {
                let mut conn = C::open(url);
                let mut i = 0_usize;
                while !self.stop.is_set() {
                    let post = POSTS[(w + i) % 5];
                    let author = AUTHORS[(w + i) % 3];
                    let same = if delete_by == "post_id" { post } else { author };
                    let result = conn.transaction::<_, diesel::result::Error, _>(|conn| {
                        conn.batch_execute(&format!(
                            "INSERT INTO comments (post_id, author_id) VALUES ({post}, {author})"
                        ))?;
                        if i.is_multiple_of(3) {
                            conn.batch_execute(&format!(
                                "DELETE FROM comments WHERE id = (SELECT m FROM (SELECT MIN(id) AS m FROM comments WHERE {delete_by} = {same}) AS s)"
                            ))?;
                        }
                        Ok(())
                    });
                    match result {
                        Ok(()) => {
                            self.written
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(e) if lost_a_lock_conflict(&e) => {}
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                    i += 1;
                    // SQLite lets one writer in at a time: room for the migration's turn.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        }
    }

    /// Waits until the writers have committed `more` transactions from now; fails with
    /// `stopped` after 60 s.
    fn wait_for_more(&self, more: u64, stopped: &str) {
        let target = self.written.load(std::sync::atomic::Ordering::SeqCst) + more;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.written.load(std::sync::atomic::Ordering::SeqCst) < target {
            assert!(std::time::Instant::now() < deadline, "{stopped}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

fn verify_reports_drift_and_missing_triggers_and_repair_fixes_them<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = with_twenty_comments::<C>(test) else {
        return;
    };
    let posts = forum::forum_posts_comments_slots::table;
    let report = posts.verify_follow_all(2, &mut conn).unwrap();
    assert_eq!(
        (
            report.records,
            report.drifted,
            report.triggers_enabled,
            report.triggers_expected
        ),
        (5, 0, 3, 3),
        "{report:?}"
    );
    assert!(report.is_exact(), "{report:?}");

    // Counts written behind the triggers' back: post 2 gains 5, post 4 loses 3, and post 6,
    // which has no comment, gets a count.
    run(&mut conn, "UPDATE forum_posts_comments_slots SET count = count + 5 WHERE record_id = 2 AND slot = (SELECT MIN(slot) FROM (SELECT slot FROM forum_posts_comments_slots WHERE record_id = 2) AS s)");
    run(&mut conn, "UPDATE forum_posts_comments_slots SET count = count - 3 WHERE record_id = 4 AND slot = (SELECT MIN(slot) FROM (SELECT slot FROM forum_posts_comments_slots WHERE record_id = 4) AS s)");
    run(
        &mut conn,
        "INSERT INTO forum_posts_comments_slots (record_id, slot, count) VALUES (6, 3, 7)",
    );
    let report = posts.verify_follow_all(2, &mut conn).unwrap();
    assert_eq!(
        (report.records, report.drifted, report.repaired),
        (6, 3, 0),
        "{report:?}"
    );
    let drift: Vec<(String, i64, i64)> = report
        .drift
        .iter()
        .map(|d| (d.key.clone(), d.counted, d.child_rows))
        .collect();
    assert_eq!(
        drift,
        [
            ("2".to_owned(), 9, 4),
            ("4".to_owned(), 1, 4),
            ("6".to_owned(), 7, 0)
        ],
        "{report:?}"
    );
    assert!(!report.is_exact());
    let repaired = posts.repair_follow_all(2, &mut conn).unwrap();
    assert_eq!(
        (repaired.drifted, repaired.repaired),
        (3, 3),
        "{repaired:?}"
    );
    assert!(repaired.is_exact(), "{repaired:?}");
    assert_exact(&mut conn, "the repair");
    assert_eq!(posts.verify_follow_all(100, &mut conn).unwrap().drifted, 0);

    // A trigger gone (MySQL and SQLite can only drop one) or disabled (PostgreSQL) for a bulk
    // load: the report says so, and the counts drift (of every counter that follows comments:
    // one trigger keeps them all).
    match C::NAME {
        "postgres" => run(
            &mut conn,
            "ALTER TABLE comments DISABLE TRIGGER slotted_follow_comments_insert",
        ),
        _ => run(&mut conn, "DROP TRIGGER slotted_follow_comments_insert"),
    }
    for _ in 0..3 {
        insert_comment(&mut conn, Some(1), 1);
    }
    let report = posts.verify_follow_all(100, &mut conn).unwrap();
    assert_eq!(
        report.triggers_enabled + 1,
        report.triggers_expected,
        "{report:?}"
    );
    assert_eq!(
        report.drifted, 1,
        "post 1 drifted by the 3 comments: {report:?}"
    );
    assert_eq!(
        (report.drift[0].counted + 3, report.drift[0].child_rows),
        (report.drift[0].child_rows, report.drift[0].child_rows)
    );
    assert!(!report.is_exact());
    if C::NAME == "postgres" {
        // The trigger back on, the bulk load's counts repaired: exact again, and counting.
        run(
            &mut conn,
            "ALTER TABLE comments ENABLE TRIGGER slotted_follow_comments_insert",
        );
        let repaired = posts.repair_follow_all(100, &mut conn).unwrap();
        assert!(
            repaired.is_exact() && repaired.repaired == 1,
            "{repaired:?}"
        );
        // The other counters that follow comments missed the 3 comments too (author 1's, the
        // site's); the one that follows post_votes did not.
        for repaired in [
            forum::authors_comments_slots::table.repair_follow_all(100, &mut conn),
            forum::authors_local_comments_slots::table.repair_follow_all(100, &mut conn),
            forum::sites_comments_slots::table.repair_follow_all(1, &mut conn),
            forum::sites_local_comments_slots::table.repair_follow_all(1, &mut conn),
            forum::communities_comments_slots::table.repair_follow_all(100, &mut conn),
        ] {
            let repaired = repaired.unwrap();
            assert!(
                repaired.is_exact() && repaired.repaired == 1,
                "{repaired:?}"
            );
        }
        let votes = forum::forum_posts_score_slots::table
            .verify_follow_all(100, &mut conn)
            .unwrap();
        assert!(votes.is_exact() && votes.drifted == 0, "{votes:?}");
        insert_comment(&mut conn, Some(1), 1);
        assert_exact(&mut conn, "triggers back on and the drift repaired");
    }
}

/// Verify reads a page of records up to a bound (the page size's key of the counter table or of
/// the child table, whichever comes first), so that a page reads a range of child rows, not
/// every row after it. Posts 1 to 4 have only comments that do not count (deleted) and no slot
/// rows, so pages of one record come back empty up to their bound; the one drifted record,
/// post 5, lies past them, and a page size of 1 must walk to it.
fn verify_pages_past_child_rows_that_do_not_count<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    migrate(&mut conn);
    for post in 1..=4 {
        run(
            &mut conn,
            &format!(
                "INSERT INTO comments (post_id, author_id, deleted) VALUES ({post}, 1, TRUE), ({post}, 2, TRUE)"
            ),
        );
    }
    insert_comment(&mut conn, Some(5), 1);
    // The count of post 5 lost behind the triggers' back.
    run(
        &mut conn,
        "DELETE FROM forum_posts_comments_slots WHERE record_id = 5",
    );
    for batch in [1, 2, 3, 100] {
        let report = forum::forum_posts_comments_slots::table
            .verify_follow_all(batch, &mut conn)
            .unwrap();
        assert_eq!(
            (report.records, report.drifted),
            (1, 1),
            "{}: pages of {batch}: {report:?}",
            C::NAME
        );
        assert_eq!(report.drift[0].key, "5", "{}: {report:?}", C::NAME);
    }
    let repaired = forum::forum_posts_comments_slots::table
        .repair_follow_all(1, &mut conn)
        .unwrap();
    assert_eq!(repaired.repaired, 1, "{}: {repaired:?}", C::NAME);
    assert_exact(&mut conn, "a repair in pages of one record");
}

/// One set of triggers keeps every counter that follows a child table, so those counters belong
/// in one `CounterMigrations`. Migrated apart, the second set's triggers replace the first's:
/// the verify job of a counter the triggers no longer keep reports its triggers missing, and
/// the counters' migrations run together put every counter back, counted exactly.
fn counters_of_one_child_table_migrated_apart_are_reported<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Author>())
        .expect("the authors' counters");
    insert_comment(&mut conn, Some(1), 1);
    assert_eq!(Author::comments_of(1).total(&mut conn).unwrap(), 1);
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<ForumPost>())
        .expect("the posts' counters, apart");
    insert_comment(&mut conn, Some(1), 1);
    assert_eq!(ForumPost::comments_of(1).total(&mut conn).unwrap(), 2);
    assert_eq!(
        Author::comments_of(1).total(&mut conn).unwrap(),
        1,
        "the posts' triggers replaced the authors'"
    );
    let report = forum::authors_comments_slots::table
        .verify_follow_all(100, &mut conn)
        .unwrap();
    assert_eq!(
        (
            report.triggers_enabled,
            report.triggers_expected,
            report.drifted
        ),
        (0, 3, 1),
        "{report:?}"
    );
    assert!(!report.is_exact(), "{report:?}");
    let posts = forum::forum_posts_comments_slots::table
        .verify_follow_all(100, &mut conn)
        .unwrap();
    assert!(posts.is_exact(), "{posts:?}");
    // Together: one set of triggers for all of them, each counter counted afresh.
    migrate(&mut conn);
    insert_comment(&mut conn, Some(2), 1);
    assert_exact(&mut conn, "the counters migrated together");
    let report = forum::authors_comments_slots::table
        .verify_follow_all(100, &mut conn)
        .unwrap();
    assert!(
        report.is_exact() && report.triggers_enabled == 3,
        "{report:?}"
    );
}

/// A counter that followed another table before (`replies`), whose follow migration was never
/// reverted: that table's triggers still write into the counter's table. The verify job reports
/// them (`stray_triggers`) beside the drift they cause.
fn the_triggers_of_a_table_no_longer_followed_are_reported<C: TestConnection>(test: &str) {
    use slotted_core::follow::FollowSpec;
    use slotted_core::CounterTable;
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    run(&mut conn, "CREATE TABLE replies (post_id INTEGER NOT NULL)");
    let mut before = <forum::forum_posts_comments_slots::table as CounterTable>::SPEC;
    before.follow = Some(FollowSpec {
        table: "replies",
        key_columns: &["post_id"],
        record: None,
        sum: None,
        filter: &[],
        through: None,
    });
    conn.run_pending_migrations(slotted_core::CounterMigrations::new().with_spec(before))
        .expect("the counter, following replies");
    migrate(&mut conn);
    let posts = forum::forum_posts_comments_slots::table;
    let report = posts.verify_follow_all(100, &mut conn).unwrap();
    assert_eq!(report.stray_triggers, 3, "{report:?}");
    assert!(!report.is_exact(), "{report:?}");
    insert_comment(&mut conn, Some(1), 1);
    run(&mut conn, "INSERT INTO replies (post_id) VALUES (1)");
    let report = posts.verify_follow_all(100, &mut conn).unwrap();
    assert_eq!(
        (report.drifted, report.stray_triggers),
        (1, 3),
        "the reply counted as a comment: {report:?}"
    );
    // The old table's triggers dropped (what reverting its migration does): exact once
    // repaired.
    run(
        &mut conn,
        &slotted_core::migration::follow_down_sql(
            "replies",
            <<C as diesel::Connection>::Backend as slotted_core::CounterBackend>::DIALECT,
        ),
    );
    let repaired = posts.repair_follow_all(100, &mut conn).unwrap();
    assert!(
        repaired.is_exact() && repaired.repaired == 1,
        "{repaired:?}"
    );
    assert_exact(
        &mut conn,
        "the stray triggers dropped and the drift repaired",
    );
}

/// The slot a trigger writes is the writing session's writer slot: 16 sessions that insert a
/// comment on the same post at once (each in a transaction, all open together) write 16
/// distinct slot rows of the post's 16, one each, and so never wait for one another. The
/// sessions only insert comments: the triggers take their writer indices.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn concurrent_writers_write_distinct_slots<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    migrate(&mut conn);
    const SESSIONS: usize = 16;
    let barrier = std::sync::Barrier::new(SESSIONS);
    std::thread::scope(|scope| {
        for author in 0..SESSIONS {
            let (url, barrier) = (&db.url, &barrier);
            scope.spawn(move || {
                let mut conn = C::open(url);
                // Each session reaches both barriers whatever happens to it, so that a failure
                // is reported instead of leaving the others waiting.
                let written = conn.transaction::<_, diesel::result::Error, _>(|conn| {
                    let written = conn.batch_execute(&format!(
                        "INSERT INTO comments (post_id, author_id) VALUES (1, {author})"
                    ));
                    // Every session inside its transaction, its slot row written, at once.
                    barrier.wait();
                    written
                });
                // Every session still connected (holding its index) until all have written.
                barrier.wait();
                written.unwrap();
            });
        }
    });
    let rows = conn.slot_rows("forum_posts_comments_slots", 1);
    println!("{}: the post's slot rows: {rows:?}", C::NAME);
    assert_eq!(rows.len(), SESSIONS, "a slot each: {rows:?}");
    assert!(rows.iter().all(|row| row.count == 1), "{rows:?}");
    let site = conn.slot_rows("sites_comments_slots", 1);
    assert_eq!(site.len(), SESSIONS, "the site's one record too: {site:?}");
}

/// Installing on a table that already has rows, while writers insert and delete: the follow
/// migrations run in the middle of 4 writers' traffic (each inserting comments and deleting
/// some, in transactions). The migration holds the child table's writers off while it replaces
/// the triggers and counts the rows already there, so each row is counted once: by the backfill
/// if it was committed before, by the triggers after. At the end every count is exact.
fn the_backfill_is_exact_while_writers_insert_and_delete<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    for i in 0..30 {
        insert_comment(&mut conn, Some(POSTS[i % 5]), AUTHORS[i % 3]);
    }
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        // A panic below stops the writers, which the scope waits for.
        let _stop = traffic.stop.on_exit();
        traffic.spawn::<C>(scope, &db.url, 4, "author_id");
        traffic.wait_for_more(20, "the writers never wrote");
        migrate(&mut conn);
        traffic.wait_for_more(20, "the writers stopped after the migration");
    });
    assert_exact(&mut conn, "the migration in the middle of the writers");
}

/// Installing without holding the writers off (`Backfill::Online`), on tables that already
/// have rows, while writers insert, delete, move and soft-delete comments: the migration makes
/// the triggers and counts nothing; the repair, run in the middle of the writers, adds each
/// record's difference (at its snapshot, the rows written before the triggers), an add that
/// commutes with the writers'. At the end every count is exact, and the repair did count what
/// the migration left (the locked migration would have left it nothing to repair).
fn an_online_backfill_is_exact_while_writers_insert_delete_move_and_soft_delete<
    C: TestConnection,
>(
    test: &str,
) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    for i in 0..30 {
        insert_comment(&mut conn, Some(POSTS[i % 5]), AUTHORS[i % 3]);
    }
    run(
        &mut conn,
        "INSERT INTO post_votes (post_id, user_id, score) VALUES \
         (1, 1, 1), (1, 2, 1), (1, 3, -1), (2, 1, 1), (3, 1, -1), (3, 2, -1), (4, 4, 1)",
    );
    let traffic = Traffic::new();
    let mut repaired = 0;
    std::thread::scope(|scope| {
        let _stop = traffic.stop.on_exit();
        traffic.spawn::<C>(scope, &db.url, 3, "post_id");
        // One more writer moves comments to other posts and flips their `deleted`.
        scope.spawn(|| {
            let mut conn = C::open(&db.url);
            let mut i = 0_usize;
            while !traffic.stop.is_set() {
                let (post, author) = (POSTS[i % 5], AUTHORS[i % 3]);
                let change = if i.is_multiple_of(2) {
                    format!("post_id = {post}")
                } else {
                    "deleted = NOT deleted".to_owned()
                };
                let pick = if i.is_multiple_of(4) { "MIN" } else { "MAX" };
                let sql = format!(
                    "UPDATE comments SET {change} WHERE id = (SELECT m FROM \
                     (SELECT {pick}(id) AS m FROM comments WHERE author_id = {author}) AS s)"
                );
                match conn.batch_execute(&sql) {
                    Ok(()) => {}
                    Err(e) if lost_a_lock_conflict(&e) => {}
                    Err(e) => panic!("the mover: {sql}: {e}"),
                }
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        traffic.wait_for_more(20, "the writers never wrote");
        conn.run_pending_migrations(forum::migrations().backfill(slotted_core::Backfill::Online))
            .expect("the counter migrations, online");
        traffic.wait_for_more(20, "the writers stopped after the migration");
        // Small pages: many snapshots, each in the middle of the writers.
        repaired += forum::repair_every_counter(2, &mut conn).unwrap();
        traffic.wait_for_more(20, "the writers stopped after the repair");
    });
    // Every post's score, every author's and community's comments, the site's two counts: each
    // had rows from before the triggers.
    assert!(
        repaired >= 10,
        "{}: the repair found only {repaired} records to count",
        C::NAME
    );
    assert_exact(&mut conn, "an online backfill in the middle of the writers");
}

/// A foreign key that deletes a post's comments with it (`ON DELETE CASCADE`): the post's
/// trigger takes its counted comments from its community before the row goes, and the
/// cascade's deletes of the comments then find no post, so nothing is taken twice. On
/// PostgreSQL and SQLite the cascade fires the comments' triggers, and every count is exact;
/// MySQL and MariaDB fire none for a cascade (the guide's Failure modes), so there the
/// community, kept by the post's own trigger, is exact, and the post's and the site's counts
/// keep the deleted comments until a repair.
fn a_post_deleted_with_its_comments_by_a_cascade_leaves_its_community_exact<C: TestConnection>(
    test: &str,
) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    if C::NAME == "sqlite" {
        run(&mut conn, "PRAGMA foreign_keys = ON");
    }
    run(&mut conn, "DROP TABLE comments");
    let id = forum::id_column(C::NAME);
    run(
        &mut conn,
        &format!(
            "CREATE TABLE comments (
                 id {id},
                 post_id INTEGER REFERENCES forum_posts (id) ON DELETE CASCADE,
                 author_id INTEGER NOT NULL,
                 deleted BOOLEAN NOT NULL DEFAULT FALSE,
                 removed BOOLEAN NOT NULL DEFAULT FALSE,
                 local BOOLEAN NOT NULL DEFAULT TRUE
             )"
        ),
    );
    for (post, author) in [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)] {
        insert_comment(&mut conn, Some(post), author);
    }
    migrate(&mut conn);
    assert_exact(&mut conn, "the migration");
    run(&mut conn, "DELETE FROM forum_posts WHERE id = 1");
    let left = conn.query_i64(if C::NAME == "mysql" {
        "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM comments"
    } else {
        "SELECT COUNT(*) AS n FROM comments"
    });
    assert_eq!(
        left,
        2,
        "{}: the cascade deleted the post's comments",
        C::NAME
    );
    let community = Community::comments_totals(&COMMUNITIES, &mut conn).unwrap();
    assert_eq!(
        community,
        expected(&mut conn).community_comments,
        "{}",
        C::NAME
    );
    assert_eq!(community[&1], 1, "{}: post 2's one comment", C::NAME);
    if C::NAME == "mysql" {
        let report = forum::forum_posts_comments_slots::table
            .repair_follow_all(100, &mut conn)
            .unwrap();
        assert_eq!(
            report.repaired, 1,
            "post 1's 3 comments, gone unseen: {report:?}"
        );
        for repaired in [
            forum::authors_comments_slots::table.repair_follow_all(100, &mut conn),
            forum::authors_local_comments_slots::table.repair_follow_all(100, &mut conn),
            forum::sites_comments_slots::table.repair_follow_all(1, &mut conn),
            forum::sites_local_comments_slots::table.repair_follow_all(1, &mut conn),
        ] {
            assert!(repaired.unwrap().is_exact());
        }
    }
    assert_exact(&mut conn, "a post deleted with its comments");
}

/// A summed column whose values carry a record's count past BIGINT: the child row's statement
/// fails on every backend (PostgreSQL and MySQL by their own range checks, SQLite by the
/// trigger's: its arithmetic would turn the slot into a floating-point value), and nothing of
/// it is written, neither the row nor its count. The counter stays exact, and rows that keep it
/// in range go on counting.
fn a_sum_past_bigint_fails_the_child_write_and_counts_nothing<C: TestConnection>(test: &str) {
    use slotted_core::follow::FollowSpec;
    use slotted_core::CounterTable;
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    run(
        &mut conn,
        "CREATE TABLE big_votes (post_id INTEGER NOT NULL, score BIGINT NOT NULL)",
    );
    let mut big = <forum::forum_posts_score_slots::table as CounterTable>::SPEC;
    big.follow = Some(FollowSpec {
        table: "big_votes",
        key_columns: &["post_id"],
        record: None,
        sum: Some("score"),
        filter: &[],
        through: None,
    });
    conn.run_pending_migrations(slotted_core::CounterMigrations::new().with_spec(big))
        .expect("a counter that sums big_votes");
    const NEAR_MAX: i64 = i64::MAX - 100;
    run(
        &mut conn,
        &format!("INSERT INTO big_votes (post_id, score) VALUES (1, {NEAR_MAX})"),
    );
    let rows = |conn: &mut C| {
        conn.query_i64(if C::NAME == "mysql" {
            "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM big_votes"
        } else {
            "SELECT COUNT(*) AS n FROM big_votes"
        })
    };
    for sql in [
        // One row past the maximum, then a multi-row statement that crosses it.
        "INSERT INTO big_votes (post_id, score) VALUES (1, 101)".to_owned(),
        "INSERT INTO big_votes (post_id, score) VALUES (1, 50), (1, 60)".to_owned(),
        // Below the minimum, from the other side.
        format!(
            "INSERT INTO big_votes (post_id, score) VALUES (2, {}), (2, -102)",
            -NEAR_MAX
        ),
    ] {
        let failed = conn.batch_execute(&sql);
        assert!(
            failed.is_err(),
            "{}: {sql} would carry a count past BIGINT, and succeeded",
            C::NAME
        );
        assert_eq!(rows(&mut conn), 1, "{}: {sql} wrote no row", C::NAME);
        assert_eq!(
            ForumPost::score_of(1).total(&mut conn).unwrap(),
            NEAR_MAX,
            "{}: after {sql}: {failed:?}",
            C::NAME
        );
        assert_eq!(ForumPost::score_of(2).total(&mut conn).unwrap(), 0);
    }
    run(
        &mut conn,
        "INSERT INTO big_votes (post_id, score) VALUES (1, 100), (3, -5)",
    );
    assert_eq!(ForumPost::score_of(1).total(&mut conn).unwrap(), i64::MAX);
    assert_eq!(ForumPost::score_of(3).total(&mut conn).unwrap(), -5);
}

/// The application's own trigger, Lemmy's shape: each comment inserted or deleted updates its
/// post's one `post_aggregates` row.
fn app_trigger_sql(backend: &str) -> &'static str {
    match backend {
        "postgres" => {
            "CREATE FUNCTION app_post_comments() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF TG_OP = 'INSERT' THEN
                     UPDATE post_aggregates SET comments = comments + 1 WHERE post_id = NEW.post_id;
                 ELSE
                     UPDATE post_aggregates SET comments = comments - 1 WHERE post_id = OLD.post_id;
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER app_post_comments AFTER INSERT OR DELETE ON comments
                 FOR EACH ROW EXECUTE FUNCTION app_post_comments();"
        }
        "mysql" => {
            "CREATE TRIGGER app_post_comments_insert AFTER INSERT ON comments FOR EACH ROW
                 UPDATE post_aggregates SET comments = comments + 1 WHERE post_id = NEW.post_id;
             CREATE TRIGGER app_post_comments_delete AFTER DELETE ON comments FOR EACH ROW
                 UPDATE post_aggregates SET comments = comments - 1 WHERE post_id = OLD.post_id;"
        }
        _ => {
            "CREATE TRIGGER app_post_comments_insert AFTER INSERT ON comments BEGIN
                 UPDATE post_aggregates SET comments = comments + 1 WHERE post_id = NEW.post_id;
             END;
             CREATE TRIGGER app_post_comments_delete AFTER DELETE ON comments BEGIN
                 UPDATE post_aggregates SET comments = comments - 1 WHERE post_id = OLD.post_id;
             END;"
        }
    }
}

/// Adopting an aggregate column that the application's own trigger keeps (Lemmy's
/// `post_aggregates.comments`): with writers inserting and deleting comments throughout, the
/// application's migration drops its trigger and slotted's follow migration counts the
/// comments there are; the counter rolls its totals up into the same column (`cache =
/// comments`). Nothing is lost or counted twice: the counts come from the child rows, never
/// from the column, so the order of the two migrations does not matter. At the end the totals
/// and, after a roll-up, the column equal the comments of each post.
fn an_aggregate_column_an_apps_trigger_keeps_is_taken_over_beside_writers<C: TestConnection>(
    test: &str,
) {
    use forum::PostAggregates;
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    run(
        &mut conn,
        "CREATE TABLE post_aggregates (post_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);
         INSERT INTO post_aggregates (post_id) VALUES (1), (2), (3), (4), (5);",
    );
    run(&mut conn, app_trigger_sql(C::NAME));
    let int = if C::NAME == "mysql" {
        "SIGNED"
    } else {
        "BIGINT"
    };
    let comments_per_post = |conn: &mut C| -> HashMap<i32, i64> {
        let mut counts: HashMap<i32, i64> = POSTS.iter().map(|p| (*p, 0)).collect();
        for (k, n) in conn.query_pairs(&format!(
            "SELECT CAST(post_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
             WHERE post_id IS NOT NULL GROUP BY post_id"
        )) {
            counts.insert(i32::try_from(k).unwrap(), n);
        }
        counts
    };
    let column = |conn: &mut C| -> HashMap<i32, i64> {
        conn.query_pairs(&format!(
            "SELECT CAST(post_id AS {int}) AS k, CAST(comments AS {int}) AS n FROM post_aggregates"
        ))
        .into_iter()
        .map(|(k, n)| (i32::try_from(k).unwrap(), n))
        .collect()
    };
    for i in 0..20 {
        insert_comment(&mut conn, Some(POSTS[i % 5]), AUTHORS[i % 3]);
    }
    assert_eq!(
        column(&mut conn),
        comments_per_post(&mut conn),
        "{}: the application's trigger keeps the column",
        C::NAME
    );
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        let _stop = traffic.stop.on_exit();
        traffic.spawn::<C>(scope, &db.url, 3, "post_id");
        traffic.wait_for_more(20, "the writers never wrote");
        // The swap, as a deploy runs it: the application's migration drops its trigger, and
        // slotted's migrations count the comments there are.
        run(
            &mut conn,
            match C::NAME {
                "postgres" => {
                    "DROP TRIGGER app_post_comments ON comments; DROP FUNCTION app_post_comments();"
                }
                _ => {
                    "DROP TRIGGER app_post_comments_insert; DROP TRIGGER app_post_comments_delete;"
                }
            },
        );
        traffic.wait_for_more(10, "the writers stopped after the drop");
        conn.run_pending_migrations(slotted_core::CounterMigrations::of::<PostAggregates>())
            .expect("the counter that takes the column over");
        traffic.wait_for_more(20, "the writers stopped after the migration");
    });
    let expected = comments_per_post(&mut conn);
    assert_eq!(
        PostAggregates::comments_totals(&POSTS, &mut conn).unwrap(),
        expected,
        "{}: the totals are the comments there are",
        C::NAME
    );
    forum::post_aggregates_comments_slots::table
        .refresh_cache_all(100, &mut conn)
        .expect("the roll-up into post_aggregates.comments");
    assert_eq!(
        column(&mut conn),
        expected,
        "{}: the roll-up wrote the column the application reads",
        C::NAME
    );
    let report = forum::post_aggregates_comments_slots::table
        .verify_follow_all(100, &mut conn)
        .unwrap();
    assert!(report.is_exact() && report.drifted == 0, "{report:?}");
}

/// The race a count through a table between must not lose, written down in both orders: one
/// transaction adds a comment to post 1 while another moves post 1 to another community.
///
/// - The comment first, not yet committed, then the move: the move waits for the comment's
///   transaction (PostgreSQL: the comment's trigger holds the post `FOR KEY SHARE`, the move's
///   takes it `FOR UPDATE`; MySQL: a share lock against the update's; SQLite: one writer), and
///   then moves the comment's count with the others. Without the wait, the move would count
///   the post's comments without it, and the comment would stay counted for the old community.
/// - The move first, not yet committed, then the comment: the comment's trigger waits for the
///   move, and counts the comment for the new community. Without the wait, it would read the old
///   one.
fn a_post_moved_while_a_comment_is_added_to_it_counts_the_comment_once<C: TestConnection>(
    test: &str,
) {
    a_post_moved_while_a_comment_is_added::<C>(test, false);
}

/// The same race under a foreign key from the comments to their posts: on PostgreSQL the
/// comment's lock on the post is then the key check's (`FOR KEY SHARE`, at the end of the
/// statement, before the follow trigger reads the post).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn a_post_moved_while_a_comment_is_added_to_it_counts_the_comment_once_under_a_foreign_key<
    C: TestConnection,
>(
    test: &str,
) {
    a_post_moved_while_a_comment_is_added::<C>(test, true);
}

fn a_post_moved_while_a_comment_is_added<C: TestConnection>(test: &str, foreign_key: bool) {
    const MOVE: &str = "UPDATE forum_posts SET community_id = 2 WHERE id = 1";
    const COMMENT: &str = "INSERT INTO comments (post_id, author_id) VALUES (1, 1)";
    for move_first in [false, true] {
        let Some((db, mut conn)) = setup::<C>(test) else {
            return;
        };
        if foreign_key {
            add_the_foreign_key(&mut conn);
        }
        migrate(&mut conn);
        assert_the_insert_locks(&mut conn, foreign_key);
        insert_comment(&mut conn, Some(1), 2);
        insert_comment(&mut conn, Some(1), 3);
        let (first_sql, second_sql) = if move_first {
            (MOVE, COMMENT)
        } else {
            (COMMENT, MOVE)
        };
        let mut first = C::open(&db.url);
        let mut second = C::open(&db.url);
        let done = std::sync::atomic::AtomicBool::new(false);
        let waited = std::thread::scope(|scope| {
            run(&mut first, "BEGIN");
            run(&mut first, first_sql);
            let done = &done;
            let second = scope.spawn(move || {
                let result = second.batch_execute(second_sql);
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                result
            });
            // Time for the second statement to reach the first's lock (the assertion is the
            // counts', below: a statement that did not wait has counted wrong by then).
            std::thread::sleep(std::time::Duration::from_millis(500));
            let waited = !done.load(std::sync::atomic::Ordering::SeqCst);
            run(&mut first, "COMMIT");
            second
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {second_sql}: {e}", C::NAME));
            waited
        });
        println!(
            "{}: {} first; the second statement waited for the first's commit: {waited}",
            C::NAME,
            if move_first {
                "the move"
            } else {
                "the comment"
            }
        );
        let communities = Community::comments_totals(&COMMUNITIES, &mut conn).unwrap();
        assert_eq!(
            (communities[&1], communities[&2]),
            (0, 3),
            "{}: post 1's three comments, the racing one among them, all moved to community 2 \
             ({} first)",
            C::NAME,
            if move_first {
                "the move"
            } else {
                "the comment"
            }
        );
        assert_exact(&mut conn, "a move and a comment on the moved post at once");
    }
}

/// PostgreSQL: the follow function of `comments` made under a foreign key to the posts leaves an
/// insert's lock on the post to the key's check; the key dropped, or made deferrable, afterwards
/// is reported by the verify job (the count would otherwise go wrong, silently, only when a
/// post moves while a comment is added to it), and the migration run again takes the lock
/// itself.
#[cfg(feature = "postgres")]
fn a_foreign_key_the_insert_relies_on_is_reported_once_gone<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    add_the_foreign_key(&mut conn);
    migrate(&mut conn);
    insert_comment(&mut conn, Some(1), 1);
    let verify = |conn: &mut C| {
        forum::communities_comments_slots::table
            .verify_follow_all(100, conn)
            .unwrap()
    };
    let report = verify(&mut conn);
    assert!(
        report.is_exact() && report.foreign_keys_missing == 0,
        "{report:?}"
    );
    // The key's check of an insert, a trigger on the comments, disabled (a superuser's
    // `DISABLE TRIGGER`, or
    // `DISABLE TRIGGER ALL`, which would disable slotted's too): no lock for the inserts.
    let check = conn.query_text(
        "SELECT CAST(tgname AS TEXT) AS name FROM pg_trigger WHERE tgrelid = 'comments'::regclass \
         AND tgfoid = 'pg_catalog.\"RI_FKey_check_ins\"'::regproc \
         AND tgconstraint = (SELECT oid FROM pg_constraint WHERE conname = 'comments_post')",
    )
    .expect("the key's check trigger on the comments");
    run(
        &mut conn,
        &format!("ALTER TABLE comments DISABLE TRIGGER \"{check}\""),
    );
    let report = verify(&mut conn);
    assert!(
        !report.is_exact() && report.foreign_keys_missing == 1,
        "the key's check disabled: {report:?}"
    );
    // A replica's trigger ('R') fires in no ordinary session either.
    run(
        &mut conn,
        &format!("ALTER TABLE comments ENABLE REPLICA TRIGGER \"{check}\""),
    );
    let report = verify(&mut conn);
    assert!(
        !report.is_exact() && report.foreign_keys_missing == 1,
        "the key's check a replica's: {report:?}"
    );
    run(
        &mut conn,
        &format!("ALTER TABLE comments ENABLE TRIGGER \"{check}\""),
    );
    let report = verify(&mut conn);
    assert!(
        report.is_exact(),
        "the key's check enabled again: {report:?}"
    );
    run(
        &mut conn,
        "ALTER TABLE comments ALTER CONSTRAINT comments_post DEFERRABLE INITIALLY IMMEDIATE",
    );
    let report = verify(&mut conn);
    assert!(
        !report.is_exact() && report.foreign_keys_missing == 1 && report.drifted == 0,
        "a deferrable key: {report:?}"
    );
    run(
        &mut conn,
        "ALTER TABLE comments DROP CONSTRAINT comments_post",
    );
    let report = verify(&mut conn);
    assert!(
        !report.is_exact() && report.foreign_keys_missing == 1,
        "a dropped key: {report:?}"
    );
    // A counter that does not pass through the posts relies on no key.
    let report = forum::forum_posts_comments_slots::table
        .verify_follow_all(100, &mut conn)
        .unwrap();
    assert!(
        report.is_exact() && report.foreign_keys_missing == 0,
        "{report:?}"
    );
    // The follow migrations again (comments' and post_votes'): the insert locks the post
    // itself, and the report is clean.
    for _ in 0..2 {
        conn.revert_last_migration(forum::migrations()).unwrap();
    }
    migrate(&mut conn);
    assert_the_insert_locks(&mut conn, false);
    let report = verify(&mut conn);
    assert!(
        report.is_exact() && report.foreign_keys_missing == 0,
        "{report:?}"
    );
    assert_exact(&mut conn, "the migration run again without the key");
}

/// Post 2 drifted behind the triggers' back, 5 more than its comments: its rows of slots
/// `0..slots` made where missing, and slot 0's raised by 5.
fn drift_post_two<C: TestConnection>(conn: &mut C, slots: i16) {
    let rows: Vec<String> = (0..slots).map(|slot| format!("(2, {slot}, 0)")).collect();
    let (ignore, on_conflict) = match C::NAME {
        "mysql" => (" IGNORE", ""),
        _ => ("", " ON CONFLICT DO NOTHING"),
    };
    run(
        conn,
        &format!(
            "INSERT{ignore} INTO forum_posts_comments_slots (record_id, slot, count) \
             VALUES {}{on_conflict}",
            rows.join(", ")
        ),
    );
    run(
        conn,
        "UPDATE forum_posts_comments_slots SET count = count + 5 WHERE record_id = 2 AND slot = 0",
    );
}

/// Two repairs of one record that drifted by +5, each reading the drift before either wrote:
/// the record must end exact, not 5 under. Written down as it happened in a storm of cut-off
/// repairs (`cut_offs`): a repair read a page, then added each difference in a statement of its
/// own, so two repairs both added -5. Here a session of the test holds every slot row of the
/// record; both repairs are let go once both wait on it.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn two_repairs_of_one_drifted_record_add_its_difference_once<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = with_twenty_comments::<C>(test) else {
        return;
    };
    let posts = forum::forum_posts_comments_slots::table;
    // Every slot row of post 2, so that a repair's add into its own slot meets the hold.
    drift_post_two(&mut conn, 16);
    let mut holder = C::open(&db.url);
    run(&mut holder, "BEGIN");
    run(
        &mut holder,
        "SELECT count FROM forum_posts_comments_slots WHERE record_id = 2 FOR UPDATE",
    );
    // Sessions of this database waiting for a row lock.
    let waiting = match C::NAME {
        "postgres" => "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = \
                       current_database() AND wait_event_type = 'Lock'"
            .to_owned(),
        // A statement running half a second: the hold is all that is in its way.
        _ => "SELECT CAST(COUNT(*) AS SIGNED) AS n FROM information_schema.PROCESSLIST \
              WHERE DB = DATABASE() AND COMMAND IN ('Query', 'Execute') \
              AND ID <> CONNECTION_ID() AND TIME_MS > 500"
            .to_owned(),
    };
    std::thread::scope(|scope| {
        let repairs: Vec<_> = (0..2)
            .map(|_| {
                let url = &db.url;
                scope.spawn(move || {
                    let mut conn = C::open(url);
                    posts.repair_follow_all(10, &mut conn).unwrap()
                })
            })
            .collect();
        let started = std::time::Instant::now();
        while conn.query_i64(&waiting) < 2 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "{}: the two repairs never both waited on the held rows",
                C::NAME
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        run(&mut holder, "COMMIT");
        let repaired: u64 = repairs
            .into_iter()
            .map(|r| r.join().unwrap().repaired)
            .sum();
        assert_eq!(repaired, 1, "{}: one repair adds the difference", C::NAME);
    });
    assert_exact(&mut conn, "two repairs of post 2");
}

/// A repair inside a transaction of the caller's whose snapshot was taken before another
/// repair fixed the same record: it must not read the drift as its snapshot saw it and add the
/// difference a second time. PostgreSQL (`REPEATABLE READ`, as the caller chose it) refuses
/// with a serialization failure; MySQL and MariaDB (whose default is `REPEATABLE READ`) refuse
/// a repair inside a transaction of the caller's. Either way nothing is added twice.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn a_repair_in_a_transaction_whose_snapshot_predates_another_repair_adds_nothing_twice<
    C: TestConnection,
>(
    test: &str,
) {
    let Some((db, mut conn)) = with_twenty_comments::<C>(test) else {
        return;
    };
    let posts = forum::forum_posts_comments_slots::table;
    drift_post_two(&mut conn, 1);
    let mut caller = C::open(&db.url);
    if C::NAME == "postgres" {
        // The caller's own choice of isolation for the transaction below.
        run(
            &mut caller,
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        );
    }
    let outcome = caller.transaction(|caller| {
        // The caller's snapshot: the drift of post 2 as it is now.
        let before = caller
            .query_i64("SELECT COUNT(*) AS n FROM forum_posts_comments_slots WHERE record_id = 2");
        assert!(before > 0, "{}: post 2 has slot rows", C::NAME);
        // Another repair fixes post 2 and commits.
        let mut other = C::open(&db.url);
        assert_eq!(
            posts.repair_follow_all(10, &mut other).unwrap().repaired,
            1,
            "{}: the other repair fixes post 2",
            C::NAME
        );
        assert_exact(&mut other, "the other repair");
        posts.repair_follow_all(10, caller)
    });
    match (C::NAME, outcome) {
        (_, Ok(report)) => panic!(
            "{}: a repair in a transaction whose snapshot predates another repair ran: {report:?}",
            C::NAME
        ),
        ("postgres", Err(e)) => assert_eq!(
            e.failure(),
            slotted_core::Failure::RolledBack,
            "{}: a serialization failure: {e}",
            C::NAME
        ),
        (_, Err(e)) => assert!(
            e.to_string().contains("outside a transaction"),
            "{}: the refusal says what to do: {e}",
            C::NAME
        ),
    }
    assert_exact(&mut conn, "a repair in a stale transaction");
}

#[cfg(feature = "async")]
mod cut_offs {
    use slotted_core::CounterMaintenance;
    use slotted_tests::asynch::AsyncTestConnection;
    use slotted_tests::forum::forum_posts_comments_slots;
    use slotted_tests::TestConnection;

    use super::{counted, expected, run, with_twenty_comments, POSTS};

    slotted_tests::async_backend_tests! {
        all: [repairs_cut_off_at_any_point_fix_a_record_whole_or_not_at_all],
    }

    /// Tasks cut off by a timeout somewhere in their call, on bb8 connections: repairs of a
    /// drift of +5 on every post (in pages of 2 records, so that a repair is several
    /// transactions), beside comments inserted, soft-deleted and restored. First none of the
    /// repairs is given long enough to end, so that none can hide what another left half done:
    /// every post ends exact or still 5 over, never anything else. Then some are given long
    /// enough: the posts end exact, with no last repair.
    async fn repairs_cut_off_at_any_point_fix_a_record_whole_or_not_at_all<A>(test: &str)
    where
        A: AsyncTestConnection,
        for<'a> A::Bb8Conn<'a>:
            slotted_core::PooledAsyncConnection + diesel_async::SimpleAsyncConnection,
    {
        use std::time::Duration;
        let test = format!("async_{test}");
        let Some((db, mut sync)) = with_twenty_comments::<A::Sync>(&test) else {
            return;
        };
        // Counts written behind the triggers' back: every post 5 over.
        for post in POSTS {
            run(
                &mut sync,
                &format!(
                    "UPDATE forum_posts_comments_slots SET count = count + 5 WHERE record_id = \
                     {post} AND slot = (SELECT MIN(slot) FROM (SELECT slot FROM \
                     forum_posts_comments_slots WHERE record_id = {post}) AS s)"
                ),
            );
        }
        let pool = A::bb8(&db.url, 6).await;
        let mut warm = Vec::new();
        for _ in 0..6 {
            warm.push(A::bb8_get(&pool).await);
        }
        drop(warm);
        let name = <A::Sync as TestConnection>::NAME;
        // From well under a round trip to many of them, under a repair's length.
        let (ended, cut_off) = storm::<A>(&pool, 150, |i| {
            Duration::from_micros(20 + (i * 97) % 10_000)
        })
        .await;
        let (counts, child_rows) = (settled(&mut sync).await, expected(&mut sync));
        let over: Vec<i64> = POSTS
            .iter()
            .map(|post| counts.post_comments[post] - child_rows.post_comments[post])
            .collect();
        assert!(
            over.iter().all(|&o| o == 0 || o == 5),
            "{name}: posts over their comments by {over:?} after {ended} repairs that ended \
             and {cut_off} cut off"
        );
        // The other counters of the comments were never repaired, and the triggers kept them.
        assert_eq!(
            (
                &counts.author_comments,
                counts.site,
                &counts.community_comments
            ),
            (
                &child_rows.author_comments,
                child_rows.site,
                &child_rows.community_comments
            )
        );
        assert!(
            cut_off > 0,
            "{name}: {ended} repairs ended, {cut_off} cut off"
        );
        // Then one repair in five is given 30 s, the others up to 200 ms.
        let (ended, cut_off) = storm::<A>(&pool, 150, |i| {
            if i % 15 == 0 {
                Duration::from_secs(30)
            } else {
                Duration::from_micros(20 + (i * 1_297) % 200_000)
            }
        })
        .await;
        assert!(
            ended > 0,
            "{name}: {ended} repairs ended, {cut_off} cut off"
        );
        assert_eq!(settled(&mut sync).await, expected(&mut sync), "{name}");
    }

    /// `tasks` tasks on `pool`, task `i` cut off after `limit(i)`: one in three repairs the
    /// posts' comments, the others insert a comment or flip one's `deleted`. How many repairs
    /// ended, and how many were cut off.
    async fn storm<A>(
        pool: &A::Bb8,
        tasks: u64,
        limit: impl Fn(u64) -> std::time::Duration,
    ) -> (u64, u64)
    where
        A: AsyncTestConnection,
        for<'a> A::Bb8Conn<'a>:
            slotted_core::PooledAsyncConnection + diesel_async::SimpleAsyncConnection,
    {
        let mut handles = Vec::new();
        for i in 0..tasks {
            let (pool, limit) = (pool.clone(), limit(i));
            handles.push(tokio::spawn(async move {
                // A query cut off mid-flight leaves a MySQL connection out of step:
                // `CancelGuard` closes a connection whose call was cut off.
                let mut conn = slotted_core::CancelGuard::new(A::bb8_get(&pool).await);
                let post = i % 5 + 1;
                let write = match i % 3 {
                    1 => format!("INSERT INTO comments (post_id, author_id) VALUES ({post}, 1)"),
                    _ => format!(
                        "UPDATE comments SET deleted = NOT deleted WHERE id = {}",
                        i % 20 + 1
                    ),
                };
                let work = async {
                    if i % 3 == 0 {
                        conn.run(|c| {
                            forum_posts_comments_slots::table.repair_follow_all_async(2, c)
                        })
                        .await
                        .map(|_| ())
                    } else {
                        conn.run(|c| diesel_async::SimpleAsyncConnection::batch_execute(c, &write))
                            .await
                            .map_err(slotted_core::Error::from)
                    }
                };
                match tokio::time::timeout(limit, work).await {
                    Ok(Ok(())) => (i % 3 == 0, false),
                    Ok(Err(e)) if e.to_string().contains("database is locked") => (false, false),
                    Ok(Err(e)) => panic!("a call that ran to its end failed: {e}"),
                    Err(_) => (false, i % 3 == 0),
                }
            }));
        }
        let (mut ended, mut cut_off) = (0, 0);
        for handle in handles {
            let (e, c) = handle.await.unwrap();
            ended += u64::from(e);
            cut_off += u64::from(c);
        }
        (ended, cut_off)
    }

    /// The counts once they stop moving: a cut-off statement may still be running.
    async fn settled<C: TestConnection>(conn: &mut C) -> super::Counts {
        let mut counts = counted(conn);
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let again = counted(conn);
            if again == counts {
                return counts;
            }
            counts = again;
        }
    }
}
