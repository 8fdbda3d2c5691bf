//! Counts inside the user's own Diesel queries (`Model::counter_total(key)`, issue 41), on every
//! backend: a page sorted and filtered by a total, in one statement, equal to the totals read
//! by the counter API; an adopted column counted with its slots (and the shared table's
//! counters); a composite key as a tuple of columns; a key from another table's column; a key
//! as a value; and a total past `i64`, which fails the statement instead of coming back wrong.

use diesel::prelude::*;
use diesel::QueryResult;
use slotted_core::CounterMaintenance;
use slotted_tests::adoption::{self, clips, Clip};
use slotted_tests::forum::{self, comments, ForumPost};
use slotted_tests::keys::{votes, ArticleId, Vote, VOTES_TABLE};
use slotted_tests::lifecycle::{self, articles, Article};
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests! {
    all: [
        a_page_is_sorted_and_filtered_by_its_exact_totals,
        an_adopted_column_counts_with_its_slots,
        a_composite_key_is_a_tuple_of_columns,
        a_key_from_another_tables_column_and_a_key_as_a_value,
        a_total_past_i64_fails_the_statement,
    ],
}

/// The queries, one set per connection type: each is the user's code, written once in
/// `queries!`.
trait Queries {
    /// The `n` most liked articles with at least one like, most liked first, then by id.
    fn top_articles(&mut self, n: i64) -> QueryResult<Vec<(i32, i64)>>;
    /// Every clip with its likes (adopted column and slots) and shares (adopted, shared table).
    fn clips(&mut self) -> QueryResult<Vec<(i32, i64, i64)>>;
    /// Every clip with its views (adopted and, once absorbed, the roll-up's cache).
    fn clip_views(&mut self) -> QueryResult<Vec<(i32, i64)>>;
    /// Every vote with its score, by the composite key.
    fn votes(&mut self) -> QueryResult<Vec<(i32, i32, i64)>>;
    /// Every comment's id with the comment count of its post.
    fn comments_with_their_posts_count(&mut self) -> QueryResult<Vec<(i64, i64)>>;
    /// The likes of article `id`, with no table in the query.
    fn likes_of(&mut self, id: i32) -> QueryResult<i64>;
}

macro_rules! queries {
    ($conn:ty) => {
        impl Queries for $conn {
            fn top_articles(&mut self, n: i64) -> QueryResult<Vec<(i32, i64)>> {
                articles::table
                    .select((articles::id, Article::likes_total(articles::id)))
                    .filter(Article::likes_total(articles::id).gt(0))
                    .order_by((
                        Article::likes_total(articles::id).desc(),
                        articles::id.asc(),
                    ))
                    .limit(n)
                    .load(self)
            }

            fn clips(&mut self) -> QueryResult<Vec<(i32, i64, i64)>> {
                clips::table
                    .select((
                        clips::id,
                        Clip::likes_total(clips::id),
                        Clip::shares_total(clips::id),
                    ))
                    .order_by(clips::id)
                    .load(self)
            }

            fn clip_views(&mut self) -> QueryResult<Vec<(i32, i64)>> {
                clips::table
                    .select((clips::id, Clip::views_total(clips::id)))
                    .order_by(clips::id)
                    .load(self)
            }

            fn votes(&mut self) -> QueryResult<Vec<(i32, i32, i64)>> {
                votes::table
                    .select((
                        votes::person_id,
                        votes::article_id,
                        Vote::score_total((votes::person_id, votes::article_id)),
                    ))
                    .order_by((votes::person_id, votes::article_id))
                    .load(self)
            }

            fn comments_with_their_posts_count(&mut self) -> QueryResult<Vec<(i64, i64)>> {
                comments::table
                    .select((
                        comments::id,
                        ForumPost::comments_total(comments::post_id.assume_not_null()),
                    ))
                    .filter(comments::post_id.is_not_null())
                    .order_by(comments::id)
                    .load(self)
            }

            fn likes_of(&mut self, id: i32) -> QueryResult<i64> {
                diesel::select(Article::likes_total(id)).get_result(self)
            }
        }
    };
}

#[cfg(feature = "sqlite")]
queries!(diesel::SqliteConnection);
#[cfg(feature = "postgres")]
queries!(diesel::PgConnection);
#[cfg(feature = "mysql")]
queries!(diesel::MysqlConnection);

fn a_page_is_sorted_and_filtered_by_its_exact_totals<C: TestConnection + Queries>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    lifecycle::migrate(&mut conn);
    conn.batch_execute(
        "INSERT INTO articles (id) VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10)",
    )
    .unwrap();
    // Article k gets (k * 7) % 11 likes, spread over its slots; article 10's are taken back.
    for id in 1..=10 {
        for _ in 0..(id * 7) % 11 {
            Article::likes_of(id).increment(&mut conn).unwrap();
        }
    }
    for _ in 0..(10 * 7) % 11 {
        Article::likes_of(10).decrement(&mut conn).unwrap();
    }
    let ids: Vec<i32> = (1..=10).collect();
    let totals = Article::likes_totals(&ids, &mut conn).unwrap();
    let mut expected: Vec<(i32, i64)> = totals
        .iter()
        .map(|(id, n)| (*id, *n))
        .filter(|(_, n)| *n > 0)
        .collect();
    expected.sort_by_key(|(id, n)| (-n, *id));
    expected.truncate(5);
    let page = conn.top_articles(5).unwrap();
    assert_eq!(page, expected, "{}", C::NAME);
    assert_eq!(
        page,
        [(3, 10), (6, 9), (9, 8), (1, 7), (4, 6)],
        "{}",
        C::NAME
    );
}

fn an_adopted_column_counts_with_its_slots<C: TestConnection + Queries>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    adoption::create_clips(&mut conn, &[(1, 5, 0, 0), (2, 0, 0, 0), (3, 40, 0, 0)]);
    conn.batch_execute(&adoption::old_style_add("shares_count", 3, 4))
        .unwrap();
    Clip::likes_of(1).add(2, &mut conn).unwrap();
    Clip::likes_of(2).increment(&mut conn).unwrap();
    Clip::shares_of(3).add(6, &mut conn).unwrap();
    Clip::shares_of(1).increment(&mut conn).unwrap();
    let expected = [(1, 7, 1), (2, 1, 0), (3, 40, 10)];
    assert_eq!(conn.clips().unwrap(), expected, "{}", C::NAME);
    // Absorbed into the slots: the same totals.
    clips_likes_absorbed(&mut conn);
    assert_eq!(conn.clips().unwrap(), expected, "after absorb, {}", C::NAME);

    // A column adopted and then taken over as the cache (`adopt = views_count, cache =
    // views_count`): once absorbed and rolled up, it holds the total, which the expression
    // must not add a second time.
    conn.batch_execute(&adoption::old_style_add("views_count", 2, 3))
        .unwrap();
    Clip::views_of(2).add(4, &mut conn).unwrap();
    assert_eq!(conn.clip_views().unwrap(), [(1, 0), (2, 7), (3, 0)]);
    // Past `i64`, the column and the slots together: an error, on SQLite too (whose `+` would
    // turn it into a REAL).
    conn.batch_execute(&format!(
        "UPDATE clips SET views_count = {} WHERE id = 3",
        i64::MAX - 50
    ))
    .unwrap();
    Clip::views_of(3).add(100, &mut conn).unwrap();
    let past = conn.clip_views();
    assert!(past.is_err(), "{}: {past:?}", C::NAME);
    // On MySQL and MariaDB the error came after the first rows were sent: libmariadb leaves
    // that prepared statement, which Diesel caches, unable to run again (it would wait forever
    // for rows; docs/guide/queries.md). A new connection, as a pool would give.
    let mut conn = C::open(&db.url);
    conn.batch_execute("UPDATE clips SET views_count = 0 WHERE id = 3")
        .unwrap();
    Clip::views_of(3).add(-100, &mut conn).unwrap();
    let absorbed = adoption::clips_views_slots::table
        .absorb_all(100, &mut conn)
        .unwrap();
    assert!(absorbed.took_over_cache, "{absorbed:?}");
    let refreshed = adoption::clips_views_slots::table
        .refresh_cache_all(100, &mut conn)
        .unwrap();
    assert_eq!(
        refreshed.updated, 1,
        "clip 2's column now holds its total, 7"
    );
    assert_eq!(
        conn.clip_views().unwrap(),
        [(1, 0), (2, 7), (3, 0)],
        "the cache is not added to the slots, {}",
        C::NAME
    );
}

fn clips_likes_absorbed<C: TestConnection>(conn: &mut C) {
    let report = adoption::clips_likes_slots::table
        .absorb_all(100, conn)
        .unwrap();
    assert_eq!((report.records, report.moved), (2, 45), "{report:?}");
}

fn a_composite_key_is_a_tuple_of_columns<C: TestConnection + Queries>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    conn.batch_execute(&format!(
        "{VOTES_TABLE}; INSERT INTO votes (person_id, article_id, score_count) \
             VALUES (1, 1, 0), (1, 2, 0), (2, 1, 0), (2, 2, 0)"
    ))
    .unwrap();
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Vote>())
        .unwrap();
    Vote::score_of((1, ArticleId(2))).add(3, &mut conn).unwrap();
    Vote::score_of((2, ArticleId(1)))
        .add(-2, &mut conn)
        .unwrap();
    Vote::score_of((2, ArticleId(1)))
        .increment(&mut conn)
        .unwrap();
    assert_eq!(
        conn.votes().unwrap(),
        [(1, 1, 0), (1, 2, 3), (2, 1, -1), (2, 2, 0)],
        "{}",
        C::NAME
    );
}

fn a_key_from_another_tables_column_and_a_key_as_a_value<C: TestConnection + Queries>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    forum::create_tables(&mut conn);
    conn.run_pending_migrations(forum::migrations()).unwrap();
    conn.batch_execute(
        "INSERT INTO comments (post_id, author_id) VALUES (1, 1), (2, 1), (1, 2), (NULL, 3), (1, 3)",
    )
    .unwrap();
    // The follow counter counts post 1's three comments and post 2's one.
    assert_eq!(
        conn.comments_with_their_posts_count().unwrap(),
        [(1, 3), (2, 1), (3, 3), (5, 3)],
        "{}",
        C::NAME
    );

    lifecycle::migrate(&mut conn);
    Article::likes_of(7).add(12, &mut conn).unwrap();
    assert_eq!(conn.likes_of(7).unwrap(), 12);
    assert_eq!(conn.likes_of(8).unwrap(), 0, "a record without slots: 0");
}

fn a_total_past_i64_fails_the_statement<C: TestConnection + Queries>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    lifecycle::migrate(&mut conn);
    conn.batch_execute(&format!(
        "INSERT INTO articles (id) VALUES (1), (2); \
         INSERT INTO articles_likes_slots (record_id, slot, count) VALUES (1, 0, {max}), (1, 1, 1), (2, 0, {max})",
        max = i64::MAX
    ))
    .unwrap();
    assert_eq!(conn.likes_of(2).unwrap(), i64::MAX, "the largest total");
    let past = conn.likes_of(1);
    assert!(past.is_err(), "{}: {past:?}", C::NAME);
    let page = conn.top_articles(10);
    assert!(page.is_err(), "{}: {page:?}", C::NAME);
    // The counter API says the same, by how much.
    assert!(Article::likes_of(1).total(&mut conn).is_err());
}
