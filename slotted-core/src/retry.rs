//! Rerunning a whole transaction when the database chose it as a deadlock victim or could not
//! serialize it.
//!
//! What is retried, and how Diesel 2.3 shows it:
//!
//! | backend | error | Diesel |
//! |---|---|---|
//! | PostgreSQL | `40001` serialization failure | `DatabaseErrorKind::SerializationFailure` |
//! | PostgreSQL | `40P01` deadlock detected | `Unknown`, message "deadlock detected" |
//! | PostgreSQL | `55P03` lock timeout (`lock_timeout`) | `Unknown`, message "canceling statement due to lock timeout" |
//! | PostgreSQL behind a transaction pooler | `42P05` / `26000`: a prepared statement's name clashed with another client's, or its prepare ran on another server session (nothing of it ran) | `Unknown`, message "prepared statement … already exists" / "… does not exist" |
//! | MySQL, MariaDB | `1213` deadlock | `DatabaseErrorKind::SerializationFailure` |
//! | MariaDB Galera | `1213` certification conflict (lost to a transaction committed on another node) | a statement: `SerializationFailure`; `COMMIT`: `Unknown`, message "Deadlock found" |
//! | MySQL, MariaDB | `1205` lock wait timeout | `Unknown`, message "Lock wait timeout exceeded" |
//! | SQLite | `SQLITE_BUSY` after the busy timeout | `Unknown`, message "database is locked" |
//!
//! Diesel does not expose PostgreSQL's SQLSTATE nor MySQL's error number for the others, so those
//! are recognised by the servers' fixed English messages. Nothing else is retried: a constraint
//! violation, a lost connection (the commit may or may not have happened) or an application
//! error comes back at once.

use std::time::Duration;

use diesel::result::Error as DieselError;

use crate::error::{Error, Failure};
use crate::exec::Guard;

/// Runs `$body` (an expression giving a future that uses `$exec`, evaluated again for each
/// attempt) in a transaction on `$exec: &mut impl Exec` (a savepoint inside an open one), as
/// Diesel's `Connection::transaction` does: commit on `Ok`, roll back on `Err`. When the
/// transaction fails with an error `$retry_on` accepts, it runs the whole transaction again after
/// a backoff, up to `$policy.max_retries` times; inside an open transaction it runs once, since a
/// deadlock rolled back (or aborted) the outer transaction too. Evaluates to
/// `Result<Retried<T>, E>`.
///
/// A macro, not a function taking a closure: the body borrows the executor afresh on every
/// attempt, which a closure returning a future cannot express without boxing and lifetime
/// contortions.
macro_rules! retried_transaction {
    ($exec:ident, $policy:expr, $retry_on:expr, $body:expr) => {
        $crate::retry::retried_transaction!(
            $crate::exec::Guard::Plain,
            $exec,
            $policy,
            $retry_on,
            $body
        )
    };
    ($guard:expr, $exec:ident, $policy:expr, $retry_on:expr, $body:expr) => {{
        let guard: $crate::exec::Guard = $guard;
        let nested = $crate::exec::Exec::in_transaction(&mut *$exec);
        let mut retries: u32 = 0;
        loop {
            let outcome = match $crate::exec::Exec::begin(&mut *$exec, guard).await {
                Err(e) => Err(e.into()),
                Ok(()) => match $body.await {
                    Ok(value) => match $crate::exec::Exec::commit(&mut *$exec, guard).await {
                        Ok(()) => Ok(value),
                        // Lost with COMMIT in flight: committed or not, nobody knows.
                        Err(source) if !nested && $crate::error::is_connection_lost(&source) => {
                            $crate::exec::Exec::mark_broken(&mut *$exec);
                            Err($crate::error::Error::CommitOutcomeUnknown { source }.into())
                        }
                        Err(e) => Err(e.into()),
                    },
                    Err(error) => match $crate::exec::Exec::rollback(&mut *$exec, guard).await {
                        Ok(()) | Err(diesel::result::Error::BrokenTransactionManager) => Err(error),
                        Err(rollback) => Err(rollback.into()),
                    },
                },
            };
            match outcome {
                Ok(value) => break Ok($crate::retry::Retried { value, retries }),
                Err(e) => {
                    if $crate::retry::Retryable::is_retryable(&e) {
                        // Whether it runs again or not: the connection goes on being used.
                        $crate::exec::Exec::after_failed_read(&mut *$exec);
                    }
                    if nested || retries >= $policy.max_retries || !($retry_on)(&e) {
                        break Err(e);
                    }
                    let backoff = $policy.backoff(retries);
                    #[cfg(feature = "tracing")]
                    $crate::trace::retrying(
                        &$crate::retry::Retryable::describe(&e),
                        retries + 1,
                        backoff,
                    );
                    $crate::exec::Exec::pause(&mut *$exec, backoff).await;
                    retries += 1;
                }
            }
        }
    }};
}
pub(crate) use retried_transaction;

/// Whether an error means the whole transaction was rolled back and may simply run again.
pub trait Retryable {
    /// True for deadlocks, serialization failures, lock (wait) timeouts and SQLite's busy.
    fn is_retryable(&self) -> bool;

    /// The error in words, for the `tracing` event of a retry; empty unless implemented.
    fn describe(&self) -> String {
        String::new()
    }

    /// What the error says about the write ([`Error::failure`]); by default
    /// [`Failure::RolledBack`] when [`is_retryable`](Self::is_retryable), else
    /// [`Failure::Other`]. Forward it to [`Error::failure`] in your own error type so that
    /// [`transaction_with_failover`](crate::failover::transaction_with_failover) reconnects on it.
    fn failure(&self) -> Failure {
        if self.is_retryable() {
            Failure::RolledBack
        } else {
            Failure::Other
        }
    }
}

impl Retryable for DieselError {
    fn is_retryable(&self) -> bool {
        crate::error::is_rolled_back(self)
    }

    fn describe(&self) -> String {
        self.to_string()
    }

    fn failure(&self) -> Failure {
        crate::error::diesel_failure(self)
    }
}

impl Retryable for Error {
    fn is_retryable(&self) -> bool {
        match self {
            Error::Database { source, .. }
            | Error::Diesel(source)
            | Error::TransactionPooler { source, .. } => source.is_retryable(),
            Error::MaintenanceStopped { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    fn failure(&self) -> Failure {
        Error::failure(self)
    }

    fn describe(&self) -> String {
        self.to_string()
    }
}

/// How often and how patiently [`transaction_with_retry`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Reruns after the first attempt, at most.
    pub max_retries: u32,
    /// The first backoff; it doubles with each retry.
    pub base_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
}

/// [`RetryPolicy::default`], for the library's own reruns.
pub(crate) const STANDARD: RetryPolicy = RetryPolicy {
    max_retries: 10,
    base_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(250),
};

impl Default for RetryPolicy {
    /// 10 retries, backing off from 2 ms to at most 250 ms.
    fn default() -> Self {
        STANDARD
    }
}

impl RetryPolicy {
    /// For [`transaction_with_failover`](crate::failover::transaction_with_failover): up to 40
    /// reruns, backing off from 50 ms to at most 1 s, so about 30 s of pauses: a PostgreSQL failover
    /// under Patroni takes 2–4 s after a crash and about its `ttl` (10–30 s) after a lost node.
    pub fn failover() -> Self {
        RetryPolicy {
            max_retries: 40,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
        }
    }

    /// The pause before retry `n` (0-based): exponential, capped, and jittered to between half
    /// and all of it, so that two victims of one deadlock do not collide again in step.
    pub fn backoff(&self, n: u32) -> Duration {
        let full = self
            .base_delay
            .saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
            .min(self.max_delay);
        full.mul_f64(rand::random_range(0.5..=1.0))
    }
}

/// A transaction's result and how many times it was rerun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retried<T> {
    /// What the closure returned on the attempt that committed.
    pub value: T,
    /// Reruns it took: 0 when the first attempt committed.
    pub retries: u32,
}

/// Runs `f` in a transaction on `conn`, and runs the whole transaction again, after a jittered
/// backoff, when it fails with a deadlock, a serialization failure, a lock wait timeout or
/// SQLite's busy ([`Retryable`]), up to `policy.max_retries` times. Every attempt starts a new
/// transaction, so nothing of a failed attempt stays; `f` must therefore be safe to run again
/// (it is, for counter calls: the failed attempt's writes were rolled back).
///
/// Inside a transaction that is already open, a deadlock has rolled back (or, on PostgreSQL,
/// aborted) the outer transaction too, so rerunning the inner part alone would be wrong: there
/// `f` runs once, as a savepoint, and any error comes back unretried. Retry the outermost
/// transaction.
///
/// On MySQL and MariaDB a top-level transaction opens and commits with prepared `BEGIN` and
/// `COMMIT` statements, one round trip each, where Diesel's `conn.transaction` takes three
/// (`MysqlConnection::batch_execute` turns multi-statements on and off around each). They are
/// recorded in Diesel's transaction manager, so `conn.transaction` inside `f` makes a savepoint
/// as usual; a failed `COMMIT` rolls back and returns its error, as Diesel's does. A server that
/// refuses `BEGIN` as a prepared statement (MySQL's `ER_UNSUPPORTED_PS`) switches the process
/// back to Diesel's statements.
///
/// On MySQL and MariaDB, after a retryable error (before the retry, or before returning it) the
/// connection's cached prepared statements are dropped (Diesel's statement cache is reset to its
/// default, `Unbounded`): a read that failed after its result set began, as a deadlocked locking
/// read does, leaves libmariadb's statement unusable, and running it again would wait forever.
///
/// ```
/// # use diesel::prelude::*;
/// # use slotted_core::SlottedCounter;
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # use diesel_migrations::MigrationHarness;
/// # conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?;
/// use slotted_core::{retry::transaction_with_retry, retry::RetryPolicy};
///
/// let done = transaction_with_retry(&mut conn, &RetryPolicy::default(), |conn| {
///     Post::likes_of(1).increment(conn)?;
///     Post::likes_of(2).increment(conn)?;
///     Ok::<_, slotted_core::Error>(())
/// })?;
/// println!("committed after {} retries", done.retries);
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub fn transaction_with_retry<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    f: F,
) -> Result<Retried<T>, E>
where
    C: crate::CounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: FnMut(&mut C) -> Result<T, E>,
{
    with_retry(conn, policy, Guard::Plain, f)
}

/// [`transaction_with_retry`], with the guard slotted puts around its own transactions on MySQL
/// and MariaDB: `autocommit` off while `f` runs, and a savepoint released before `COMMIT`
/// (three more round trips). A MariaDB Galera node sometimes ends a transaction for a
/// replicated write with no statement after that told of it; then the writes after the end
/// would each commit on their own. Guarded, such a transaction commits nothing and runs again
/// (its error is a serialization failure, which [`Retryable`] accepts). Use it on a Galera
/// cluster for every transaction that must not commit in part. Elsewhere it is
/// [`transaction_with_retry`]: PostgreSQL and SQLite tell of a transaction they end.
///
/// ```
/// # use diesel::prelude::*;
/// # use slotted_core::SlottedCounter;
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # use diesel_migrations::MigrationHarness;
/// # conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?;
/// use slotted_core::{retry::guarded_transaction_with_retry, retry::RetryPolicy};
///
/// guarded_transaction_with_retry(&mut conn, &RetryPolicy::default(), |conn| {
///     Post::likes_of(1).increment(conn)?;
///     Post::likes_of(2).decrement(conn)?;
///     Ok::<_, slotted_core::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub fn guarded_transaction_with_retry<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    f: F,
) -> Result<Retried<T>, E>
where
    C: crate::CounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: FnMut(&mut C) -> Result<T, E>,
{
    with_retry(conn, policy, Guard::Marked, f)
}

fn with_retry<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    guard: Guard,
    mut f: F,
) -> Result<Retried<T>, E>
where
    C: crate::CounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: FnMut(&mut C) -> Result<T, E>,
{
    use crate::exec::sync::{run_now, SyncExec};
    let exec = &mut SyncExec(conn);
    run_now(async {
        crate::retry::retried_transaction!(
            guard,
            exec,
            policy,
            E::is_retryable,
            std::future::ready(f(exec.0))
        )
    })
}

/// [`transaction_with_retry`] on an async connection: runs the async closure `f` in a
/// transaction, and runs the whole transaction again after a jittered backoff (a
/// `tokio::time::sleep`) when it fails with a [`Retryable`] error.
///
/// ```no_run
/// # async fn f<C: slotted_core::AsyncCounterConnection>(conn: &mut C) -> Result<(), slotted_core::Error> {
/// # use slotted_core::SlottedCounter;
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// use slotted_core::{retry::transaction_with_retry_async, retry::RetryPolicy};
///
/// let done = transaction_with_retry_async(conn, &RetryPolicy::default(), async |conn: &mut C| {
///     Post::likes_of(1).increment_async(conn).await?;
///     Post::likes_of(2).increment_async(conn).await?;
///     Ok::<_, slotted_core::Error>(())
/// })
/// .await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub async fn transaction_with_retry_async<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    f: F,
) -> Result<Retried<T>, E>
where
    C: crate::AsyncCounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: AsyncFnMut(&mut C) -> Result<T, E>,
{
    with_retry_async(conn, policy, Guard::Plain, f).await
}

/// [`guarded_transaction_with_retry`] on an async connection: [`transaction_with_retry_async`]
/// with the guard on MySQL and MariaDB. Cut off inside its transaction, it leaves the connection
/// marked broken: pools close it, and slotted's next call on it fails with
/// [`Failure::Reconnect`].
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub async fn guarded_transaction_with_retry_async<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    f: F,
) -> Result<Retried<T>, E>
where
    C: crate::AsyncCounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: AsyncFnMut(&mut C) -> Result<T, E>,
{
    with_retry_async(conn, policy, Guard::Marked, f).await
}

#[cfg(feature = "async")]
async fn with_retry_async<C, T, E, F>(
    conn: &mut C,
    policy: &RetryPolicy,
    guard: Guard,
    mut f: F,
) -> Result<Retried<T>, E>
where
    C: crate::AsyncCounterConnection,
    E: From<DieselError> + From<Error> + Retryable,
    F: AsyncFnMut(&mut C) -> Result<T, E>,
{
    let exec = &mut crate::exec::asynch::AsyncExec::new(conn);
    crate::retry::retried_transaction!(guard, exec, policy, E::is_retryable, f(exec.0))
}

/// Whether the database rolled the transaction back to break a deadlock or a serialization
/// conflict: PostgreSQL `40P01`/`40001`, MySQL `1213`. Not a lock wait timeout, which means a
/// lock is held for long and a rerun would wait as long again.
pub(crate) fn lost_a_deadlock(e: &Error) -> bool {
    match e {
        Error::Database { source, .. } | Error::Diesel(source) => crate::error::is_deadlock(source),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::DatabaseErrorKind;

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        let policy = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        };
        for (n, full) in [(0, 10), (1, 20), (2, 40), (3, 50), (40, 50)] {
            let pause = policy.backoff(n);
            assert!(
                pause >= Duration::from_millis(full) / 2 && pause <= Duration::from_millis(full),
                "{n}: {pause:?}"
            );
        }
    }

    #[test]
    fn maintenance_reruns_deadlock_victims_only() {
        let error = |kind, message: &str| {
            Error::Diesel(DieselError::DatabaseError(
                kind,
                Box::new(message.to_owned()),
            ))
        };
        let unknown = DatabaseErrorKind::Unknown;
        for (e, deadlock) in [
            (error(unknown, "deadlock detected"), true),
            (
                error(unknown, "Deadlock found when trying to get lock"),
                true,
            ),
            (
                error(
                    DatabaseErrorKind::SerializationFailure,
                    "could not serialize",
                ),
                true,
            ),
            (
                error(
                    unknown,
                    "Lock wait timeout exceeded; try restarting transaction",
                ),
                false,
            ),
            (
                error(unknown, "canceling statement due to lock timeout"),
                false,
            ),
            (error(unknown, "database is locked"), false),
            (
                error(
                    unknown,
                    "Failed to read auto-increment value from storage engine",
                ),
                false,
            ),
        ] {
            assert!(e.is_retryable(), "the retry helper reruns {e}");
            assert_eq!(lost_a_deadlock(&e), deadlock, "{e}");
        }
    }

    #[test]
    fn only_rollback_errors_are_retryable() {
        assert!(!DieselError::NotFound.is_retryable());
        assert!(!DieselError::RollbackTransaction.is_retryable());
        let overflow = Error::Overflow {
            counter: "P.c".into(),
            table: "t",
            key: "1".into(),
            delta: 1,
        };
        assert!(!overflow.is_retryable());
        // It may have been written: a rerun could count it twice.
        let unknown = Error::OutcomeUnknown {
            counter: "P.c".into(),
            table: "t",
            key: "1".into(),
            delta: 1,
            reason: "0 rows affected".into(),
        };
        assert!(!unknown.is_retryable());
    }
}
