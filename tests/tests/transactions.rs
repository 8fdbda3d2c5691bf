//! The retry helper's transactions are real ones that Diesel knows about: writes inside stay
//! invisible to other sessions until the commit, an error rolls them all back, Diesel's
//! `conn.transaction` inside makes a savepoint, and the helper inside Diesel's transaction makes
//! one too. On MySQL and MariaDB the helper opens and commits with prepared statements, without
//! the round trips Diesel's transaction manager spends switching multi-statements on and off.

use diesel::connection::{Connection, TransactionManager};
use diesel::result::Error as DieselError;
use slotted_core::{
    retry::guarded_transaction_with_retry, retry::transaction_with_retry, retry::RetryPolicy, Error,
};
use slotted_tests::models::Post;
use slotted_tests::{backend_tests, TestConnection, TestDb};

backend_tests! {
    all: [
        the_retry_helper_commits_rolls_back_and_nests_as_diesel_does,
        the_guarded_helper_commits_rolls_back_and_nests_as_diesel_does,
    ],
    mysql: [
        the_retry_helper_spends_no_round_trip_on_multi_statements,
        a_guarded_transaction_the_server_ends_silently_commits_none_of_itself,
    ],
}

/// Once, no reruns: these tests look at one attempt.
const ONCE: RetryPolicy = RetryPolicy {
    max_retries: 0,
    base_delay: std::time::Duration::ZERO,
    max_delay: std::time::Duration::ZERO,
};

/// Diesel's transaction depth on `conn`: 0 outside a transaction.
fn depth<C: TestConnection>(conn: &mut C) -> u32 {
    <C as Connection>::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()
        .expect("the transaction manager is not broken")
        .map_or(0, |d| d.get())
}

fn the_retry_helper_commits_rolls_back_and_nests_as_diesel_does<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let mut other = C::open(&db.url);
    let likes = Post::likes_of(1);

    // A commit: the other session sees nothing before it and everything after it.
    let done = transaction_with_retry(&mut conn, &ONCE, |conn| {
        assert_eq!(depth(conn), 1, "Diesel knows the transaction is open");
        likes.add(5, conn)?;
        assert_eq!(
            likes.total(&mut other)?,
            0,
            "another session does not see an uncommitted write"
        );
        // Diesel's own transaction inside: a savepoint, rolled back alone.
        let inner = conn.transaction(|conn| {
            assert_eq!(depth(conn), 2);
            likes.add(100, conn)?;
            Err::<(), Error>(DieselError::RollbackTransaction.into())
        });
        assert!(inner.is_err());
        assert_eq!(depth(conn), 1);
        likes.increment(conn)?;
        likes.total(conn)
    })
    .unwrap();
    assert_eq!(done.value, 6, "the savepoint's 100 was rolled back alone");
    assert_eq!(depth(&mut conn), 0, "Diesel knows the transaction is over");
    assert_eq!(likes.total(&mut other).unwrap(), 6, "committed");

    // An error: everything of the attempt is rolled back.
    let failed = transaction_with_retry(&mut conn, &ONCE, |conn| {
        likes.add(40, conn)?;
        Err::<(), Error>(Error::Pool("the caller gave up".into()))
    });
    assert!(
        matches!(&failed, Err(Error::Pool(m)) if m == "the caller gave up"),
        "{failed:?}"
    );
    assert_eq!(depth(&mut conn), 0);
    assert_eq!(likes.total(&mut other).unwrap(), 6, "rolled back");

    // Inside Diesel's transaction the helper makes a savepoint: the outer rollback undoes it.
    let outer = conn.transaction(|conn| {
        transaction_with_retry(conn, &ONCE, |conn| likes.add(1000, conn))?;
        assert_eq!(depth(conn), 1);
        assert_eq!(likes.total(conn)?, 1006);
        Err::<(), Error>(DieselError::RollbackTransaction.into())
    });
    assert!(outer.is_err());
    assert_eq!(depth(&mut conn), 0);
    assert_eq!(likes.total(&mut conn).unwrap(), 6);

    // Diesel's own transactions go on working after the helper's.
    conn.transaction(|conn| likes.increment(conn)).unwrap();
    assert_eq!(likes.total(&mut other).unwrap(), 7);
}

/// `Com_set_option` counts the client's `mysql_set_server_option` calls: Diesel's
/// `conn.transaction` makes four per transaction (multi-statements on and off around `BEGIN`,
/// and again around `COMMIT`); the retry helper none.
#[cfg(feature = "mysql")]
fn the_retry_helper_spends_no_round_trip_on_multi_statements<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let set_options = |conn: &mut C| {
        conn.query_i64(
            "SELECT CAST(VARIABLE_VALUE AS SIGNED) AS n FROM information_schema.SESSION_STATUS \
             WHERE VARIABLE_NAME = 'COM_SET_OPTION'",
        )
    };
    let likes = Post::likes_of(1);
    let before = set_options(&mut conn);
    for _ in 0..5 {
        transaction_with_retry(&mut conn, &ONCE, |conn| likes.increment(conn)).unwrap();
    }
    let helper = set_options(&mut conn) - before;
    for _ in 0..5 {
        conn.transaction(|conn| likes.increment(conn)).unwrap();
    }
    let diesel = set_options(&mut conn) - before - helper;
    assert_eq!(likes.total(&mut conn).unwrap(), 10);
    assert_eq!(
        helper, 0,
        "the helper's BEGIN and COMMIT are prepared statements"
    );
    assert_eq!(diesel, 20, "Diesel's: four per transaction");
}

/// The guarded helper behaves as the plain one wherever no server ends its transaction behind
/// its back: a commit, a rollback on an error, and inside Diesel's transaction a savepoint.
fn the_guarded_helper_commits_rolls_back_and_nests_as_diesel_does<C: TestConnection>(test: &str) {
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let mut other = C::open(&db.url);
    let likes = Post::likes_of(1);
    guarded_transaction_with_retry(&mut conn, &ONCE, |c| likes.add(2, c)).unwrap();
    assert_eq!((likes.total(&mut other).unwrap(), depth(&mut conn)), (2, 0));
    let failed = guarded_transaction_with_retry(&mut conn, &ONCE, |c| {
        likes.add(5, c)?;
        Err::<(), Error>(Error::Diesel(DieselError::RollbackTransaction))
    });
    assert!(failed.is_err());
    assert_eq!((likes.total(&mut other).unwrap(), depth(&mut conn)), (2, 0));
    conn.transaction(|c| {
        guarded_transaction_with_retry(c, &ONCE, |c| likes.add(1, c))?;
        assert_eq!(
            depth(c),
            1,
            "a savepoint inside Diesel's transaction, released"
        );
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(likes.total(&mut other).unwrap(), 3);
    // The session commits its own statements afterwards, as before (`autocommit` back on).
    likes.increment(&mut conn).unwrap();
    assert_eq!(likes.total(&mut other).unwrap(), 4);
}

/// A transaction of yours that the server ends between its two increments and no statement says
/// so (a MariaDB Galera node does, now and then: `docs/bench/galera-absorb-overcount/`): a test
/// hook sends the session a `ROLLBACK` slotted is not told of before the second increment.
/// - `transaction_with_retry`: the second increment then commits on its own, the first is gone,
///   and the helper reports success. This is the hazard, written down.
/// - `guarded_transaction_with_retry`: nothing of that attempt commits; it runs again and both
///   increments count once.
#[cfg(feature = "mysql")]
fn a_guarded_transaction_the_server_ends_silently_commits_none_of_itself<C: TestConnection>(
    test: &str,
) {
    use slotted_core::test_hooks;
    let Some((db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let mut other = C::open(&db.url);
    // The session's writer index first, so that each increment below is one statement.
    Post::likes_of(9).increment(&mut conn).unwrap();
    let both = |c: &mut C| {
        Post::likes_of(1).increment(c)?;
        Post::likes_of(2).increment(c)
    };
    let totals = |other: &mut C| {
        (
            Post::likes_of(1).total(other).unwrap(),
            Post::likes_of(2).total(other).unwrap(),
        )
    };
    test_hooks::end_transaction_silently_before(1, || {});
    let plain = transaction_with_retry(&mut conn, &RetryPolicy::default(), both).unwrap();
    assert!(!test_hooks::armed(), "the hook ended the transaction");
    assert_eq!(plain.retries, 0);
    assert_eq!(
        totals(&mut other),
        (0, 1),
        "unguarded: half of it committed"
    );

    test_hooks::end_transaction_silently_before(1, || {});
    let guarded = guarded_transaction_with_retry(&mut conn, &RetryPolicy::default(), both).unwrap();
    assert!(!test_hooks::armed(), "the hook ended the transaction");
    assert_eq!(guarded.retries, 1, "the ended attempt ran again");
    assert_eq!(totals(&mut other), (1, 2), "guarded: each increment once");
    assert_eq!(
        conn.query_i64("SELECT CAST(@@autocommit AS SIGNED) AS n"),
        1
    );
    assert_eq!(depth(&mut conn), 0);
}
