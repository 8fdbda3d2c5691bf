//! Key types beyond `i32`, `i64` and `String`, each on the backends whose Diesel maps it: `i16`
//! everywhere, MySQL's `u32`/`u64` (UNSIGNED, with keys past the signed range), PostgreSQL's
//! `uuid::Uuid`. For each: its own table and (the integers) the shared one, concurrent increments
//! with exact totals, batch totals with an absent key, compaction, set and reset, the buffer,
//! the async face, and the migration reverted. A key type run on a backend that lacks its column
//! type fails with an error naming the backend it needs.

use std::time::Duration;

use diesel::r2d2::R2D2Connection;
use slotted_core::buffer::{BufferConfig, CounterBuffer};
use slotted_core::{Counter, CounterMaintenance};
use slotted_tests::keys::*;
use slotted_tests::{backend_tests, pool, TestConnection, TestDb};

backend_tests! {
    all: [
        small_int_keys,
        newtype_keys,
        nested_newtype_keys_roll_up_bucket_and_prefill,
        composite_keys,
        composite_keys_roll_up_bucket_and_prefill,
        composite_keys_in_large_batches,
        unsupported_key_types_name_the_backend_they_need,
    ],
    postgres: [uuid_keys],
    mysql: [unsigned_keys],
}

/// A fresh database with the key models' counter tables and the buffer's flush log.
fn setup<C: TestConnection>(test: &str) -> Option<(TestDb, C)> {
    let db = TestDb::new::<C>(test)?;
    let mut conn = C::open(&db.url);
    conn.run_pending_migrations(migrations())
        .expect("the key models' migrations");
    conn.run_pending_migrations(slotted_core::CounterMigrations::new().with_buffer())
        .expect("the flush log");
    Some((db, conn))
}

const THREADS: usize = 4;
const EACH: usize = 60;

/// Every call on counter `T` with these three keys (and one that has no row), on `C`.
fn exercise<C, T>(db: &TestDb, conn: &mut C, keys: [T::Key; 3], absent: T::Key)
where
    C: TestConnection + R2D2Connection,
    T: CounterMaintenance,
{
    let name = T::SPEC.qualified_name();
    // Concurrent increments, a connection per thread, the keys in turn.
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (keys, name) = (&keys, &name);
            s.spawn(move || {
                let mut conn = C::open(&db.url);
                for i in 0..EACH {
                    Counter::<T>::new(&keys[(t + i) % 3])
                        .increment(&mut conn)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            });
        }
    });
    let each = (THREADS * EACH / 3) as i64;
    for key in &keys {
        assert_eq!(
            Counter::<T>::new(key).total(conn).unwrap(),
            each,
            "{name} {key:?}"
        );
    }
    let mut asked = keys.to_vec();
    asked.push(absent.clone());
    let totals = Counter::<T>::totals(&asked, conn).unwrap();
    assert_eq!(totals.len(), 4, "{name}: every key present");
    assert_eq!(totals[&absent], 0, "{name}: a key without rows");
    for key in &keys {
        assert_eq!(totals[key], each, "{name} {key:?}");
    }

    // Compaction folds each record into one row, in its own table.
    let report = T::default().compact_all(2, conn).unwrap();
    assert_eq!(report.records, 3, "{name}: {report:?}");
    if T::SPEC.table != slotted_core::SHARED_TABLE {
        let rows = conn.query_i64(&format!("SELECT COUNT(*) AS n FROM {}", T::SPEC.table));
        assert_eq!(rows, 3, "{name}: one row per record after compaction");
    }

    // set and reset, one record each.
    Counter::<T>::new(&keys[0]).set(1_000, conn).unwrap();
    Counter::<T>::new(&keys[1]).reset(conn).unwrap();
    let totals = Counter::<T>::totals(&keys, conn).unwrap();
    assert_eq!(
        [totals[&keys[0]], totals[&keys[1]], totals[&keys[2]]],
        [1_000, 0, each],
        "{name}"
    );

    // The write-behind buffer.
    let buffer = CounterBuffer::start(
        pool::<C>(&db.url, 2),
        BufferConfig {
            interval: Duration::from_millis(20),
            ..BufferConfig::default()
        },
    );
    for _ in 0..5 {
        Counter::<T>::new(&keys[2])
            .increment_buffered(&buffer)
            .unwrap();
    }
    buffer.shutdown().expect("a clean shutdown flushes");
    assert_eq!(
        Counter::<T>::new(&keys[2]).total(conn).unwrap(),
        each + 5,
        "{name}: the buffered adds"
    );
}

/// The key models' migrations revert: their tables are gone.
fn reverted<C: TestConnection>(conn: &mut C, tables: &[&str]) {
    // Each of them (the buffer's flush log, applied beside them, stays).
    let source =
        diesel::migration::MigrationSource::<<C as diesel::Connection>::Backend>::migrations(
            &migrations(),
        )
        .expect("the key models' migrations");
    for migration in source.iter().rev() {
        conn.revert_migration(&**migration)
            .unwrap_or_else(|e| panic!("revert {}: {e}", migration.name()));
    }
    for table in tables {
        assert!(!conn.table_exists(table), "{table} reverted");
    }
}

fn small_int_keys<C: TestConnection + R2D2Connection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    exercise::<C, shelves_picks_slots::table>(&db, &mut conn, [-7, 0, i16::MAX], i16::MIN);
    exercise::<C, shelves_views::counter>(&db, &mut conn, [-7, 0, i16::MAX], i16::MIN);
    reverted(&mut conn, &["shelves_picks_slots"]);
}

/// Newtype keys (`#[derive(SlottedKey)]`): diesel-derive-newtype's over an `i32`, in a table of
/// its own and the shared one, and a hand-written one over a `String`. Their columns have the
/// inner key's type, and Diesel queries on the counter table take the newtype.
fn newtype_keys<C: TestConnection + R2D2Connection + NewtypeQueries>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    let ids = [ArticleId(-7), ArticleId(0), ArticleId(i32::MAX)];
    exercise::<C, articles_reads_slots::table>(&db, &mut conn, ids, ArticleId(i32::MIN));
    exercise::<C, articles_shares::counter>(&db, &mut conn, ids, ArticleId(i32::MIN));
    let handle = |name: &str| Handle {
        name: name.to_owned(),
    };
    // Text that MySQL's JSON_TABLE rows (compaction, set, the buffer's flush) must escape.
    let handles = [
        handle("ada"),
        handle("grace \"amazing\" hopper\\\t\u{1f980}"),
        handle(&"x".repeat(64)),
    ];
    exercise::<C, members_mentions_slots::table>(&db, &mut conn, handles, handle("nobody"));

    // The counter table through Diesel: its record ids load as the inner key, and a filter
    // takes the newtype.
    conn.newtype_queries();
    reverted(
        &mut conn,
        &["articles_reads_slots", "members_mentions_slots"],
    );
}

/// A newtype over a newtype (`StoryId { raw: RawStoryId(i64) }`): roll-up into the model's
/// cache column, day buckets and pre-created slots.
fn nested_newtype_keys_roll_up_bucket_and_prefill<C: TestConnection + R2D2Connection>(test: &str) {
    use std::time::{SystemTime, UNIX_EPOCH};

    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    let story = |id: i64| StoryId {
        raw: RawStoryId(id),
    };
    conn.batch_execute(
        "CREATE TABLE stories (id BIGINT PRIMARY KEY, reads_count BIGINT NOT NULL); \
         INSERT INTO stories (id, reads_count) VALUES (1, 0), (2, 0), (3, 0)",
    )
    .unwrap();
    // Claimed by its first roll-up; then a stale value, which the next one corrects.
    Story::reads_of(story(3)).refresh_cache(&mut conn).unwrap();
    conn.batch_execute("UPDATE stories SET reads_count = 99 WHERE id = 3")
        .unwrap();
    Story::reads_of(story(1)).add(7, &mut conn).unwrap();
    Story::reads_of(story(2)).increment(&mut conn).unwrap();
    let report = stories_reads_slots::table
        .refresh_cache_all(2, &mut conn)
        .unwrap();
    assert_eq!((report.updated, report.failed.len()), (3, 0), "{report:?}");
    let cached: Vec<i64> = (1..=3)
        .map(|id| {
            conn.query_i64(&format!(
                "SELECT reads_count AS n FROM stories WHERE id = {id}"
            ))
        })
        .collect();
    assert_eq!(cached, [7, 1, 0], "story 3 had a stale 99 and no slots");

    let day = |n: u64| UNIX_EPOCH + Duration::from_secs(n * 86_400 + 3_600);
    let daily = Story::daily_of(story(1));
    daily.clone().at(day(20_000)).add(3, &mut conn).unwrap();
    daily.clone().at(day(20_001)).increment(&mut conn).unwrap();
    let at: SystemTime = day(20_001);
    assert_eq!(daily.clone().at(at).bucket_total(&mut conn).unwrap(), 1);
    assert_eq!(
        daily
            .total_between(day(20_000)..day(20_001), &mut conn)
            .unwrap(),
        3
    );
    assert_eq!(daily.total(&mut conn).unwrap(), 4);

    let created = stories_picks_slots::table
        .create_slots(&[story(1), story(2)], &mut conn)
        .unwrap();
    assert_eq!(created, 8);
    for _ in 0..10 {
        Story::picks_of(story(2)).increment(&mut conn).unwrap();
    }
    assert_eq!(Story::picks_of(story(2)).total(&mut conn).unwrap(), 10);
    let rows = conn.query_i64("SELECT COUNT(*) AS n FROM stories_picks_slots");
    assert_eq!(
        rows, 8,
        "plain updates of the pre-created rows, no new rows"
    );
}

/// Composite keys (`primary_key(a, b[, c])`): keys that share a column are distinct records,
/// on every call; their tables are keyed by every column, and Diesel reads them.
fn composite_keys<C: TestConnection + R2D2Connection + NewtypeQueries>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    // Each key shares a column with another: only the pair tells them apart.
    let votes = [(1, ArticleId(1)), (1, ArticleId(2)), (2, ArticleId(1))];
    exercise::<C, votes_score_slots::table>(&db, &mut conn, votes, (2, ArticleId(2)));
    let release = |package: i64, version: &str| (package, version.to_owned());
    let releases = [
        release(7, "1.0.0"),
        release(7, "1.0.1"),
        release(i64::MIN, &"v".repeat(64)),
    ];
    exercise::<C, releases_downloads_slots::table>(&db, &mut conn, releases, release(8, "1.0.0"));
    let date = |day: u32| chrono::NaiveDate::from_ymd_opt(2026, 11, day).expect("a date");
    let days = [(1, date(25)), (1, date(26)), (2, date(25))];
    exercise::<C, version_downloads_downloads_slots::table>(&db, &mut conn, days, (2, date(26)));
    let tally = |region: i16, code: &str, day: i32| (region, code.to_owned(), day);
    let tallies = [tally(1, "a", 1), tally(1, "a", 2), tally(1, "b", 1)];
    exercise::<C, tallies_hits_slots::table>(&db, &mut conn, tallies, tally(2, "a", 1));

    // The accessors: a record's own counter, and by key.
    let vote = Vote {
        person_id: 2,
        article_id: ArticleId(1),
    };
    assert_eq!(
        vote.score().total(&mut conn).unwrap(),
        Vote::score_of((2, ArticleId(1))).total(&mut conn).unwrap()
    );
    // `exercise` set the first tally to 1,000.
    let row = Tally {
        day: 1,
        region: 1,
        code: "a".into(),
    };
    row.hits().add(5, &mut conn).unwrap();
    assert_eq!(
        Tally::hits_of(tally(1, "a", 1)).total(&mut conn).unwrap(),
        1_005
    );
    // A text column too long for its key is refused for the whole key, and nothing is written.
    let long = release(7, &"v".repeat(65));
    let error = Release::downloads_of(long.clone())
        .increment(&mut conn)
        .unwrap_err();
    assert!(
        matches!(error, slotted_core::Error::InvalidKey { .. })
            && error.to_string().contains("(7, \"vvv"),
        "{error}"
    );
    let rows = |conn: &mut C| {
        conn.query_i64("SELECT COUNT(*) AS n FROM releases_downloads_slots WHERE record_id = 7")
    };
    let before = rows(&mut conn);
    assert!(Release::downloads_of(long.clone())
        .add(3, &mut conn)
        .is_err_and(|e| matches!(e, slotted_core::Error::InvalidKey { .. })));
    assert!(Release::downloads_of(long).total(&mut conn).is_err());
    assert_eq!(rows(&mut conn), before, "nothing written");

    // The table, through Diesel: one column per key column.
    conn.composite_queries();
    reverted(
        &mut conn,
        &[
            "votes_score_slots",
            "releases_downloads_slots",
            "version_downloads_downloads_slots",
            "tallies_hits_slots",
        ],
    );
}

/// Thousands of composite keys in one call: totals and compaction in batches past SQLite's
/// expression depth of 1,000 (the key matches nest as a balanced tree) and its bind limit.
fn composite_keys_in_large_batches<C: TestConnection + R2D2Connection>(test: &str) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    const PEOPLE: i32 = 60;
    const ARTICLES: i32 = 50;
    for person in 1..=PEOPLE {
        let rows: Vec<String> = (1..=ARTICLES)
            .flat_map(|a| {
                [
                    format!("({person}, {a}, 0, 1)"),
                    format!("({person}, {a}, 1, 1)"),
                ]
            })
            .collect();
        conn.batch_execute(&format!(
            "INSERT INTO votes_score_slots (record_id, record_id_2, slot, count) VALUES {}",
            rows.join(", ")
        ))
        .unwrap();
    }
    let mut keys: Vec<(i32, ArticleId)> = (1..=PEOPLE)
        .flat_map(|p| (1..=ARTICLES).map(move |a| (p, ArticleId(a))))
        .collect();
    keys.push((0, ArticleId(0)));
    let totals = Vote::score_totals(&keys, &mut conn).unwrap();
    assert_eq!(totals.len(), keys.len());
    assert!(keys[..keys.len() - 1].iter().all(|k| totals[k] == 2));
    assert_eq!(totals[&(0, ArticleId(0))], 0);
    let report = votes_score_slots::table
        .compact_all(8192, &mut conn)
        .unwrap();
    assert_eq!(report.records, (PEOPLE * ARTICLES) as u64, "{report:?}");
    let rows = conn.query_i64("SELECT COUNT(*) AS n FROM votes_score_slots");
    assert_eq!(rows, i64::from(PEOPLE * ARTICLES));
    let totals = Vote::score_totals(&keys, &mut conn).unwrap();
    assert!(keys[..keys.len() - 1].iter().all(|k| totals[k] == 2));
}

/// A composite key's roll-up into the model's cache column (the parent joined on both columns),
/// day buckets and pre-created slots.
fn composite_keys_roll_up_bucket_and_prefill<C: TestConnection + R2D2Connection>(test: &str) {
    use std::time::UNIX_EPOCH;

    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    conn.batch_execute(&format!(
        "{VOTES_TABLE}; INSERT INTO votes (person_id, article_id, score_count) \
             VALUES (1, 1, 0), (1, 2, 0), (2, 1, 0), (2, 2, 0)"
    ))
    .unwrap();
    // Claimed by its first roll-up; then stale values, which the next one corrects.
    Vote::score_of((2, ArticleId(2)))
        .refresh_cache(&mut conn)
        .unwrap();
    conn.batch_execute(
        "UPDATE votes SET score_count = 99 WHERE person_id = 2 AND article_id = 1; \
         UPDATE votes SET score_count = 5 WHERE person_id = 2 AND article_id = 2",
    )
    .unwrap();
    Vote::score_of((1, ArticleId(1))).add(7, &mut conn).unwrap();
    Vote::score_of((1, ArticleId(2)))
        .increment(&mut conn)
        .unwrap();
    // A record with slots and no parent row: nothing to roll up into.
    Vote::score_of((3, ArticleId(1))).add(4, &mut conn).unwrap();
    // Small pages: the keyset walks past records sharing their first column.
    let report = votes_score_slots::table
        .refresh_cache_all(1, &mut conn)
        .unwrap();
    assert_eq!((report.updated, report.failed.len()), (4, 0), "{report:?}");
    let cached = |conn: &mut C, person: i32, article: i32| {
        conn.query_i64(&format!(
            "SELECT score_count AS n FROM votes WHERE person_id = {person} AND article_id = {article}"
        ))
    };
    let all: Vec<i64> = [(1, 1), (1, 2), (2, 1), (2, 2)]
        .into_iter()
        .map(|(p, a)| cached(&mut conn, p, a))
        .collect();
    assert_eq!(
        all,
        [7, 1, 0, 0],
        "(2, 1) and (2, 2) had stale counts and no slots"
    );
    Vote::score_of((1, ArticleId(2))).add(2, &mut conn).unwrap();
    Vote::score_of((1, ArticleId(2)))
        .refresh_cache(&mut conn)
        .unwrap();
    assert_eq!(cached(&mut conn, 1, 2), 3);
    assert_eq!(cached(&mut conn, 1, 1), 7, "its neighbour untouched");

    let day = |n: u64| UNIX_EPOCH + Duration::from_secs(n * 86_400 + 3_600);
    let daily = Vote::daily_of((1, ArticleId(1)));
    daily.clone().at(day(20_000)).add(3, &mut conn).unwrap();
    daily.clone().at(day(20_001)).increment(&mut conn).unwrap();
    Vote::daily_of((1, ArticleId(2)))
        .at(day(20_001))
        .add(10, &mut conn)
        .unwrap();
    assert_eq!(
        daily
            .clone()
            .at(day(20_001))
            .bucket_total(&mut conn)
            .unwrap(),
        1
    );
    assert_eq!(
        daily
            .total_between(day(20_000)..day(20_001), &mut conn)
            .unwrap(),
        3
    );
    assert_eq!(daily.total(&mut conn).unwrap(), 4);
    let report = votes_daily_slots::table.compact_all(1, &mut conn).unwrap();
    assert_eq!(daily.total(&mut conn).unwrap(), 4, "{report:?}");
    // Diagnostics count records by the whole key and name them as tuples.
    let options = slotted_core::diagnostics::DiagnoseOptions::default().hottest(5);
    let report = slotted_core::diagnostics::diagnose_with(
        <Vote as slotted_core::SlottedModel>::COUNTERS,
        &options,
        &mut conn,
    )
    .unwrap();
    let daily = &report.tables[1];
    assert_eq!(daily.spec.table, "votes_daily_slots");
    assert_eq!((daily.rows, daily.records, daily.groups), (3, 2, 3));
    let hottest: Vec<_> = daily
        .hottest
        .iter()
        .map(|h| (h.key.as_str(), h.rows, h.buckets))
        .collect();
    assert_eq!(hottest, [("(1, 1)", 2, 2), ("(1, 2)", 1, 1)]);
    // The lock-wait query runs on a composite key's table too (none to see here).
    let none = match C::NAME {
        "sqlite" => slotted_core::diagnostics::LockWaits::NotPossible,
        _ => slotted_core::diagnostics::LockWaits::Seen(Vec::new()),
    };
    assert_eq!(daily.lock_waits, none);

    let versions = [(7_i64, "1.0.0".to_owned()), (7, "1.0.1".to_owned())];
    let created = releases_downloads_slots::table
        .create_slots(&versions, &mut conn)
        .unwrap();
    assert_eq!(created, 8);
    for _ in 0..10 {
        Release::downloads_of(versions[1].clone())
            .increment(&mut conn)
            .unwrap();
    }
    assert_eq!(
        Release::downloads_of(versions[1].clone())
            .total(&mut conn)
            .unwrap(),
        10
    );
    assert_eq!(
        Release::downloads_of(versions[0].clone())
            .total(&mut conn)
            .unwrap(),
        0
    );
    let rows = conn.query_i64("SELECT COUNT(*) AS n FROM releases_downloads_slots");
    assert_eq!(
        rows, 8,
        "plain updates of the pre-created rows, no new rows"
    );
}

/// Diesel queries on a newtype-keyed and a composite-keyed counter table, on each backend's
/// connection type.
trait NewtypeQueries {
    fn newtype_queries(&mut self);
    fn composite_queries(&mut self);
}

macro_rules! newtype_queries {
    ($($feature:literal => $conn:ty;)*) => {$(
        #[cfg(feature = $feature)]
        impl NewtypeQueries for $conn {
            fn newtype_queries(&mut self) {
                use diesel::prelude::*;

                let mut ids: Vec<i32> = articles_reads_slots::table
                    .select(articles_reads_slots::record_id)
                    .distinct()
                    .load(self)
                    .unwrap();
                ids.sort_unstable();
                // `exercise` reset the second record: it has no rows.
                assert_eq!(ids, [-7, i32::MAX]);
                // `exercise` set the first record to 1,000, in one row.
                let first: Vec<i64> = articles_reads_slots::table
                    .filter(articles_reads_slots::record_id.eq(ArticleId(-7)))
                    .select(articles_reads_slots::count)
                    .load(self)
                    .unwrap();
                assert_eq!(first, [1_000]);
            }

            fn composite_queries(&mut self) {
                use diesel::prelude::*;

                let mut pairs: Vec<(i32, i32)> = votes_score_slots::table
                    .select((votes_score_slots::record_id, votes_score_slots::record_id_2))
                    .distinct()
                    .load(self)
                    .unwrap();
                pairs.sort_unstable();
                // `exercise` reset the second record, (1, 2): it has no rows.
                assert_eq!(pairs, [(1, 1), (2, 1)]);
                let set: Vec<i64> = votes_score_slots::table
                    .filter(votes_score_slots::record_id.eq(1))
                    .filter(votes_score_slots::record_id_2.eq(ArticleId(1)))
                    .select(votes_score_slots::count)
                    .load(self)
                    .unwrap();
                assert_eq!(set, [1_000], "`exercise` set the first record");
            }
        }
    )*};
}

newtype_queries! {
    "sqlite" => diesel::SqliteConnection;
    "postgres" => diesel::PgConnection;
    "mysql" => diesel::MysqlConnection;
}

#[cfg(feature = "mysql")]
fn unsigned_keys<C: TestConnection + R2D2Connection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    // Keys past i32::MAX and i64::MAX: only an UNSIGNED column holds them.
    let big = 3_000_000_000_u32;
    exercise::<C, crates_downloads_slots::table>(&db, &mut conn, [0, big, u32::MAX], 1);
    exercise::<C, crates_stars::counter>(&db, &mut conn, [0, big, u32::MAX], 1);
    let huge = u64::MAX - 1;
    exercise::<C, blobs_reads_slots::table>(&db, &mut conn, [0, 1 << 63, huge], u64::MAX);
    reverted(&mut conn, &["crates_downloads_slots", "blobs_reads_slots"]);
}

#[cfg(feature = "postgres")]
fn uuid_keys<C: TestConnection + R2D2Connection>(test: &str) {
    let Some((db, mut conn)) = setup::<C>(test) else {
        return;
    };
    let keys = [
        uuid::Uuid::nil(),
        uuid::Uuid::from_u128(0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8),
        uuid::Uuid::max(),
    ];
    let absent = uuid::Uuid::from_u128(42);
    exercise::<C, notes_claps_slots::table>(&db, &mut conn, keys, absent);
    // Errors and reports show a UUID as uuid::Uuid shows itself.
    let counter = Counter::<notes_claps_slots::table>::new(&keys[1]);
    // A write first on another record: a PostgreSQL session's first write goes to its
    // connection's slot and takes its writer index, so both adds below go to one slot.
    Counter::<notes_claps_slots::table>::new(&uuid::Uuid::from_u128(7))
        .increment(&mut conn)
        .unwrap();
    counter.add(i64::MAX, &mut conn).unwrap(); // reset above: from 0
    let err = counter.add(1, &mut conn).unwrap_err();
    assert!(
        err.to_string()
            .contains("67e55044-10b1-426f-9247-bb680e5fe0c8"),
        "{err}"
    );
    reverted(&mut conn, &["notes_claps_slots"]);
}

/// A key type whose column type this backend lacks (its `table!` would not map it either):
/// every call fails, nothing is written, and the error names the backend the key type needs.
fn unsupported_key_types_name_the_backend_they_need<C: TestConnection + R2D2Connection>(
    test: &str,
) {
    let Some((_db, mut conn)) = setup::<C>(test) else {
        return;
    };
    // A build with neither feature has no such key type to try (CI builds with every feature).
    let _ = &mut conn;
    #[cfg(feature = "mysql")]
    if C::NAME != "mysql" {
        let err = Crate::downloads_of(7_u32)
            .increment(&mut conn)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs MySQL or MariaDB"), "{err}");
        let rows = conn.query_i64("SELECT COUNT(*) AS n FROM crates_downloads_slots");
        assert_eq!(rows, 0, "nothing written");
    }
    #[cfg(feature = "postgres")]
    if C::NAME != "postgres" {
        let err = Note::claps_of(uuid::Uuid::nil())
            .total(&mut conn)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs PostgreSQL"), "{err}");
    }
}

#[cfg(feature = "async")]
mod asynch {
    use slotted_tests::asynch::AsyncTestConnection;
    use slotted_tests::keys::*;

    slotted_tests::async_backend_tests! {
        all: [small_int_keys_on_the_async_face, composite_keys_on_the_async_face],
    }

    /// The async face with `i16` keys, and MySQL's unsigned and PostgreSQL's UUID keys where
    /// they run.
    async fn small_int_keys_on_the_async_face<A: AsyncTestConnection>(test: &str) {
        let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut conn = A::open(&db.url).await.migrate(migrations());
        for _ in 0..3 {
            Shelf::picks_of(-3_i16)
                .increment_async(&mut conn)
                .await
                .unwrap();
            Shelf::views_of(9_i16)
                .add_async(2, &mut conn)
                .await
                .unwrap();
        }
        // A newtype key, on its own table and the shared one.
        for _ in 0..2 {
            Article::reads_of(ArticleId(5))
                .increment_async(&mut conn)
                .await
                .unwrap();
            Article::shares_of(ArticleId(5))
                .add_async(3, &mut conn)
                .await
                .unwrap();
        }
        let handle = Handle {
            name: "ada".to_owned(),
        };
        Member::mentions_of(handle.clone())
            .add_async(4, &mut conn)
            .await
            .unwrap();
        let reads = Article::reads_totals_async(&[ArticleId(5), ArticleId(6)], &mut conn)
            .await
            .unwrap();
        assert_eq!((reads[&ArticleId(5)], reads[&ArticleId(6)]), (2, 0));
        let shares = Article::shares_of(ArticleId(5))
            .total_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(shares, 6);
        let mentions = Member::mentions_of(handle).total_async(&mut conn).await;
        assert_eq!(mentions.unwrap(), 4);
        let totals = Shelf::picks_totals_async(&[-3, 4], &mut conn)
            .await
            .unwrap();
        assert_eq!((totals[&-3], totals[&4]), (3, 0));
        assert_eq!(
            Shelf::views_of(9_i16).total_async(&mut conn).await.unwrap(),
            6
        );
        #[cfg(feature = "mysql")]
        if <A::Sync as slotted_tests::TestConnection>::NAME == "mysql" {
            Crate::downloads_of(u32::MAX)
                .add_async(4, &mut conn)
                .await
                .unwrap();
            let total = Crate::downloads_of(u32::MAX)
                .total_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(total, 4);
        }
        #[cfg(feature = "postgres")]
        if <A::Sync as slotted_tests::TestConnection>::NAME == "postgres" {
            let id = uuid::Uuid::from_u128(7);
            Note::claps_of(id).add_async(5, &mut conn).await.unwrap();
            let totals = Note::claps_totals_async(&[id, uuid::Uuid::nil()], &mut conn)
                .await
                .unwrap();
            assert_eq!((totals[&id], totals[&uuid::Uuid::nil()]), (5, 0));
        }
    }

    /// Composite keys on the async face: concurrent increments with exact totals, batch totals
    /// with an absent key, compaction, set/reset, the roll-up, buckets and the buffer.
    async fn composite_keys_on_the_async_face<A>(test: &str)
    where
        A: AsyncTestConnection,
        A::Bb8: slotted_core::buffer::AsyncConnectionPool,
    {
        use slotted_core::{CounterMaintenance, CounterTable};
        use std::time::{Duration, UNIX_EPOCH};

        let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&format!("async_{test}")) else {
            return;
        };
        let mut conn = A::open(&db.url).await.migrate(migrations());
        let keys = [(1, ArticleId(1)), (1, ArticleId(2)), (2, ArticleId(1))];
        // Four connections, each adding to the three keys in turn, on tasks of their own.
        let tasks: Vec<_> = (0..4)
            .map(|t| {
                let url = db.url.clone();
                tokio::spawn(async move {
                    let mut conn = A::open(&url).await;
                    for i in 0..30 {
                        Vote::score_of(keys[(t + i) % 3])
                            .increment_async(&mut conn)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let mut asked = keys.to_vec();
        asked.push((2, ArticleId(2)));
        let totals = Vote::score_totals_async(&asked, &mut conn).await.unwrap();
        assert_eq!(totals.len(), 4);
        for key in keys {
            assert_eq!(totals[&key], 40, "{key:?}");
        }
        assert_eq!(totals[&(2, ArticleId(2))], 0);

        let report = votes_score_slots::table
            .compact_all_async(2, &mut conn)
            .await
            .unwrap();
        assert_eq!(report.records, 3, "{report:?}");
        Vote::score_of(keys[0])
            .set_async(1_000, &mut conn)
            .await
            .unwrap();
        Vote::score_of(keys[1])
            .reset_async(&mut conn)
            .await
            .unwrap();
        let totals = Vote::score_totals_async(&keys, &mut conn).await.unwrap();
        assert_eq!(
            [totals[&keys[0]], totals[&keys[1]], totals[&keys[2]]],
            [1_000, 0, 40]
        );

        conn.batch_execute(&format!(
            "{VOTES_TABLE}; INSERT INTO votes (person_id, article_id, score_count) \
                 VALUES (1, 1, 0), (1, 2, 0), (2, 1, 0)"
        ))
        .await
        .unwrap();
        // Claimed by its first roll-up; then a stale value, which the next one corrects.
        Vote::score_of(keys[1])
            .refresh_cache_async(&mut conn)
            .await
            .unwrap();
        conn.batch_execute(
            "UPDATE votes SET score_count = 7 WHERE person_id = 1 AND article_id = 2",
        )
        .await
        .unwrap();
        let report = votes_score_slots::table
            .refresh_cache_all_async(2, &mut conn)
            .await
            .unwrap();
        assert_eq!((report.updated, report.failed.len()), (3, 0), "{report:?}");
        Vote::score_of(keys[2])
            .add_async(2, &mut conn)
            .await
            .unwrap();
        Vote::score_of(keys[2])
            .refresh_cache_async(&mut conn)
            .await
            .unwrap();
        let mut sync = <A::Sync as slotted_tests::TestConnection>::open(&db.url);
        let cached: Vec<i64> = [(1, 1), (1, 2), (2, 1)]
            .into_iter()
            .map(|(p, a)| {
                slotted_tests::TestConnection::query_i64(
                    &mut sync,
                    &format!(
                        "SELECT score_count AS n FROM votes WHERE person_id = {p} AND article_id = {a}"
                    ),
                )
            })
            .collect();
        assert_eq!(cached, [1_000, 0, 42]);

        let day = |n: u64| UNIX_EPOCH + Duration::from_secs(n * 86_400 + 3_600);
        let daily = Vote::daily_of(keys[0]);
        daily
            .clone()
            .at(day(20_000))
            .add_async(3, &mut conn)
            .await
            .unwrap();
        daily
            .clone()
            .at(day(20_001))
            .increment_async(&mut conn)
            .await
            .unwrap();
        let bucket = daily
            .clone()
            .at(day(20_001))
            .bucket_total_async(&mut conn)
            .await;
        assert_eq!(bucket.unwrap(), 1);
        let between = daily
            .total_between_async(day(20_000)..day(20_001), &mut conn)
            .await;
        assert_eq!(between.unwrap(), 3);

        // The write-behind buffer, on a bb8 pool.
        slotted_tests::asynch::AsyncTestConnection::migrate(
            A::open(&db.url).await,
            slotted_core::CounterMigrations::new().with_buffer(),
        );
        let buffer = slotted_core::buffer::AsyncCounterBuffer::start(
            A::bb8(&db.url, 2).await,
            slotted_core::buffer::BufferConfig {
                interval: Duration::from_millis(20),
                ..slotted_core::buffer::BufferConfig::default()
            },
        );
        let release = (7_i64, "1.0.0".to_owned());
        for _ in 0..5 {
            Release::downloads_of(release.clone())
                .add_buffered_async(2, &buffer)
                .await
                .unwrap();
        }
        buffer.shutdown().await.expect("a clean shutdown flushes");
        let total = Release::downloads_of(release).total_async(&mut conn).await;
        assert_eq!(total.unwrap(), 10);
        assert_eq!(
            <votes_score_slots::table as CounterTable>::SPEC.key.len(),
            2
        );

        // A composite key with a `Date` column, read back through the async drivers.
        let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 26).expect("a date");
        VersionDownload::downloads_of((3, day))
            .add_async(4, &mut conn)
            .await
            .unwrap();
        let other = (3, day.pred_opt().expect("a day before"));
        let totals = VersionDownload::downloads_totals_async(&[(3, day), other], &mut conn)
            .await
            .unwrap();
        assert_eq!((totals[&(3, day)], totals[&other]), (4, 0));
        VersionDownload::downloads_of(other)
            .set_async(9, &mut conn)
            .await
            .unwrap();
        let totals = VersionDownload::downloads_totals_async(&[(3, day), other], &mut conn)
            .await
            .unwrap();
        assert_eq!((totals[&(3, day)], totals[&other]), (4, 9));
    }
}
