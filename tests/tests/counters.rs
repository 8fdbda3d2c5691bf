//! The counter API on every backend: increment, decrement, add, total and totals, for `i32`,
//! `i64` and `String` keys, two counters on one model, and transactions.

use slotted_core::{Error, TOTALS_CHUNK};
use slotted_tests::models::*;
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests!(
    i32_key_increment_decrement_add_total,
    i64_key_counts,
    string_key_counts,
    two_counters_on_one_model_are_independent,
    totals_cover_missing_keys_and_several_chunks,
    totals_of_no_keys_is_empty,
    rollback_undoes_counter_writes,
    commit_keeps_counter_writes,
    slots_follow_the_strategy_within_the_declared_slots,
    missing_table_error_names_counter_and_table,
);

fn i32_key_increment_decrement_add_total<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let post = Post {
        id: 42,
        title: "t".into(),
    };
    assert_eq!(post.likes().total(&mut conn).unwrap(), 0, "no rows: 0");
    post.likes().increment(&mut conn).unwrap();
    post.likes().increment(&mut conn).unwrap();
    post.likes().decrement(&mut conn).unwrap();
    post.likes().add(10, &mut conn).unwrap();
    post.likes().add(-3, &mut conn).unwrap();
    post.likes().add(0, &mut conn).unwrap();
    Post::likes_of(42).increment(&mut conn).unwrap();
    assert_eq!(
        post.likes().total(&mut conn).unwrap(),
        1 + 1 - 1 + 10 - 3 + 1
    );
    assert_eq!(Post::likes_of(42).total(&mut conn).unwrap(), 9);
    assert_eq!(
        Post::likes_of(43).total(&mut conn).unwrap(),
        0,
        "another record is untouched"
    );
    // Below zero is a count like any other (an unlike before the like was counted).
    Post::likes_of(44).add(-5, &mut conn).unwrap();
    assert_eq!(Post::likes_of(44).total(&mut conn).unwrap(), -5);
}

fn i64_key_counts<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let big = i64::from(i32::MAX) * 4;
    for _ in 0..5 {
        Event::hits_of(big).increment(&mut conn).unwrap();
    }
    Event::hits_of(-big).add(7, &mut conn).unwrap();
    let event = Event { id: big };
    assert_eq!(event.hits().total(&mut conn).unwrap(), 5);
    let totals = Event::hits_totals(&[big, -big, 0], &mut conn).unwrap();
    assert_eq!(totals.len(), 3);
    assert_eq!((totals[&big], totals[&-big], totals[&0]), (5, 7, 0));
}

fn string_key_counts<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let keys = [
        "https://example.com/a?b=c&d=e",
        "https://example.com/A?b=c&d=e", // differs only in case
        "it's \"quoted\" \\ back\\slashed",
        "'; DROP TABLE pages_views_slots; --",
        "Ünïcödé 漢字 🎉",
        "",
    ];
    for (i, key) in keys.iter().enumerate() {
        Page::views_of(*key).add(i as i64 + 1, &mut conn).unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        let page = Page {
            url: (*key).to_owned(),
        };
        assert_eq!(
            page.views().total(&mut conn).unwrap(),
            i as i64 + 1,
            "key {key:?}"
        );
    }
    let owned: Vec<String> = keys
        .iter()
        .map(|k| (*k).to_owned())
        .chain(["absent".to_owned()])
        .collect();
    let totals = Page::views_totals(&owned, &mut conn).unwrap();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(totals[*key], i as i64 + 1, "totals of {key:?}");
    }
    assert_eq!(totals["absent"], 0);
    assert_eq!(totals.len(), keys.len() + 1);
}

fn two_counters_on_one_model_are_independent<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let post = Post {
        id: 1,
        title: "t".into(),
    };
    post.likes().add(3, &mut conn).unwrap();
    post.views().add(100, &mut conn).unwrap();
    post.views().increment(&mut conn).unwrap();
    assert_eq!(post.likes().total(&mut conn).unwrap(), 3);
    assert_eq!(post.views().total(&mut conn).unwrap(), 101);
    let likes = Post::likes_totals(&[1], &mut conn).unwrap();
    let views = Post::views_totals(&[1], &mut conn).unwrap();
    assert_eq!((likes[&1], views[&1]), (3, 101));
}

fn totals_cover_missing_keys_and_several_chunks<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    // More keys than one chunk holds, with counts on every 997th key and duplicates in the input.
    let keys: Vec<i32> = (0..(TOTALS_CHUNK as i32 * 2 + 123))
        .chain([5, 5, 997])
        .collect();
    let counted: Vec<i32> = (0..(TOTALS_CHUNK as i32 * 2 + 123))
        .filter(|k| k % 997 == 0)
        .collect();
    conn.transaction(|conn| {
        for &k in &counted {
            Post::likes_of(k).add(i64::from(k) + 1, conn)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let totals = Post::likes_totals(&keys, &mut conn).unwrap();
    assert_eq!(
        totals.len(),
        TOTALS_CHUNK * 2 + 123,
        "one entry per distinct key"
    );
    for k in 0..(TOTALS_CHUNK as i32 * 2 + 123) {
        let expected = if k % 997 == 0 { i64::from(k) + 1 } else { 0 };
        assert_eq!(totals[&k], expected, "key {k}");
    }
}

fn totals_of_no_keys_is_empty<C: TestConnection>(test: &str) {
    // No migration: an empty key list must not even reach the (missing) table.
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    assert!(Post::likes_totals(&[], &mut conn).unwrap().is_empty());
}

fn rollback_undoes_counter_writes<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    Post::likes_of(1).add(5, &mut conn).unwrap();
    let result = conn.transaction(|conn| {
        Post::likes_of(1).add(100, conn)?;
        Post::views_of(1).increment(conn)?;
        assert_eq!(
            Post::likes_of(1).total(conn)?,
            105,
            "visible inside the transaction"
        );
        Err::<(), _>(Error::Diesel(diesel::result::Error::RollbackTransaction))
    });
    assert!(result.is_err());
    assert_eq!(
        Post::likes_of(1).total(&mut conn).unwrap(),
        5,
        "the rolled-back +100 is gone"
    );
    assert_eq!(Post::views_of(1).total(&mut conn).unwrap(), 0);
}

fn commit_keeps_counter_writes<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    conn.transaction(|conn| {
        Post::likes_of(1).add(100, conn)?;
        Post::likes_of(1).decrement(conn)?;
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(Post::likes_of(1).total(&mut conn).unwrap(), 99);
}

fn slots_follow_the_strategy_within_the_declared_slots<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    // `strategy = random`: 2,000 draws over 64 slots use every slot (a miss is below 1e-12).
    for _ in 0..2000 {
        Post::views_of(9).increment(&mut conn).unwrap();
    }
    let rows = conn.slot_rows("posts_views_slots", 9);
    assert!(
        rows.iter().all(|r| (0..64).contains(&r.slot)),
        "slots within 0..64: {rows:?}"
    );
    assert_eq!(rows.iter().map(|r| r.count).sum::<i64>(), 2000);
    assert_eq!(rows.len(), 64, "{rows:?}");

    // The default thread strategy: one thread keeps to one slot row.
    for _ in 0..100 {
        Post::likes_of(9).increment(&mut conn).unwrap();
    }
    let rows = conn.slot_rows("posts_likes_slots", 9);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].count, 100);
}

fn missing_table_error_names_counter_and_table<C: TestConnection>(test: &str) {
    let Some(db) = TestDb::new::<C>(test) else {
        return;
    };
    let mut conn = C::open(&db.url);
    let err = Post::likes_of(1).increment(&mut conn).unwrap_err();
    assert!(matches!(err, Error::Database { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("Post.likes") && message.contains("posts_likes_slots"),
        "{message}"
    );
    let err = Post::likes_of(1).total(&mut conn).unwrap_err().to_string();
    assert!(
        err.contains("Post.likes") && err.contains("posts_likes_slots"),
        "{err}"
    );
}
