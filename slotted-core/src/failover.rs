//! Transactions that outlive a failover: each attempt on a connection from a pool, run again on
//! a new connection when the server went away or cannot write, and never run again when the
//! outcome of a `COMMIT` is unknown.
//!
//! [`transaction_with_retry`] reruns a transaction on the
//! connection it was given, which is right for a deadlock and useless when that connection's
//! server is gone. Here each attempt takes a connection from the pool. An error that says
//! nothing was committed and the connection is unusable ([`Failure::Reconnect`]: the connection
//! lost, the server read-only after a demotion, no connection to be had) marks the connection
//! broken, so the pool closes it, and runs the transaction again on another, after a backoff. A
//! lost `COMMIT` ([`Failure::OutcomeUnknown`]) comes back as [`Error::CommitOutcomeUnknown`]:
//! rerunning it could count it twice.
//!
//! With PostgreSQL under Patroni, give the pool a multi-host URL with
//! `target_session_attrs=read-write` (libpq and tokio-postgres then connect to whichever node is
//! the primary) and use [`RetryPolicy::failover`], which waits out a failover of up to about
//! 30 s.

use std::ops::ControlFlow;
use std::time::Duration;

use diesel::result::Error as DieselError;

use crate::buffer::ConnectionPool;
use crate::error::{Error, Failure};
use crate::exec::sync::SyncExec;
use crate::exec::Exec;
use crate::retry::{transaction_with_retry, Retried, RetryPolicy, Retryable};

/// Runs `f` in a transaction on a connection of `pool`, as [`transaction_with_retry`] does
/// (which reruns a rolled-back transaction on that connection up to `policy.max_retries`
/// times), and again on a new connection after an error whose [`Retryable::failure`] is
/// [`Failure::Reconnect`], up to `policy.max_retries` reconnections. `retries` in the result
/// counts the reconnections and the reruns of the attempt that succeeded. The time it can take
/// is the backoff pauses ([`RetryPolicy::failover`]: about 30 s) plus the pool's own wait for
/// a connection on each attempt (r2d2's `connection_timeout`, 30 s by default).
///
/// ```no_run
/// # #[cfg(all(feature = "postgres", feature = "r2d2"))]
/// # fn main() -> Result<(), slotted_core::Error> {
/// # use diesel::r2d2::{ConnectionManager, Pool};
/// # use diesel::PgConnection;
/// use slotted_core::failover::transaction_with_failover;
/// use slotted_core::retry::RetryPolicy;
///
/// let url = "postgres://app@db1:5432,db2:5432,db3:5432/app?target_session_attrs=read-write";
/// let pool = Pool::new(ConnectionManager::<PgConnection>::new(url)).expect("a pool");
/// let done = transaction_with_failover(&pool, &RetryPolicy::failover(), |conn| {
///     // Your writes and counter calls, all or nothing.
///     # let _ = conn;
///     Ok::<_, slotted_core::Error>(())
/// })?;
/// # let _ = done;
/// # Ok(())
/// # }
/// # #[cfg(not(all(feature = "postgres", feature = "r2d2")))]
/// # fn main() {}
/// ```
pub fn transaction_with_failover<P, T, E, F>(
    pool: &P,
    policy: &RetryPolicy,
    mut f: F,
) -> Result<Retried<T>, E>
where
    P: ConnectionPool,
    E: From<DieselError> + From<Error> + Retryable,
    F: FnMut(&mut P::Connection) -> Result<T, E>,
{
    let mut reconnects = 0;
    let mut retries = 0;
    loop {
        let outcome = match pool.connection() {
            Err(e) => Err(E::from(e)),
            Ok(mut conn) => {
                let outcome = transaction_with_retry(&mut *conn, policy, &mut f);
                if let Err(e) = &outcome {
                    if leaves_connection_unusable(e.failure()) {
                        SyncExec(&mut *conn).mark_broken();
                    }
                }
                outcome
            }
        };
        match next(outcome, policy, &mut reconnects, &mut retries) {
            ControlFlow::Break(done) => return done,
            ControlFlow::Continue(pause) => std::thread::sleep(pause),
        }
    }
}

/// The async twin of [`transaction_with_failover`], on a bb8 or deadpool pool.
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub async fn transaction_with_failover_async<P, T, E, F>(
    pool: &P,
    policy: &RetryPolicy,
    mut f: F,
) -> Result<Retried<T>, E>
where
    P: crate::buffer::AsyncConnectionPool,
    E: From<DieselError> + From<Error> + Retryable,
    F: AsyncFnMut(&mut P::Connection) -> Result<T, E>,
{
    use crate::exec::asynch::AsyncExec;
    let mut reconnects = 0;
    let mut retries = 0;
    loop {
        let outcome = match pool.connection().await {
            Err(e) => Err(E::from(e)),
            Ok(mut conn) => {
                let outcome =
                    crate::retry::transaction_with_retry_async(&mut *conn, policy, &mut f).await;
                if let Err(e) = &outcome {
                    if leaves_connection_unusable(e.failure()) {
                        AsyncExec::new(&mut *conn).mark_broken();
                    }
                }
                outcome
            }
        };
        match next(outcome, policy, &mut reconnects, &mut retries) {
            ControlFlow::Break(done) => return done,
            ControlFlow::Continue(pause) => tokio::time::sleep(pause).await,
        }
    }
}

/// After an attempt: its result to return, or the pause before the next attempt (after
/// [`Failure::Reconnect`], while `policy` allows another). `retries` counts every rerun, those
/// of the attempts' own `transaction_with_retry` included.
fn next<T, E: Retryable>(
    outcome: Result<Retried<T>, E>,
    policy: &RetryPolicy,
    reconnects: &mut u32,
    retries: &mut u32,
) -> ControlFlow<Result<Retried<T>, E>, Duration> {
    match outcome {
        Ok(done) => ControlFlow::Break(Ok(Retried {
            value: done.value,
            retries: *retries + done.retries,
        })),
        Err(e) if e.failure() == Failure::Reconnect && *reconnects < policy.max_retries => {
            let pause = policy.backoff(*reconnects);
            *reconnects += 1;
            *retries += 1;
            ControlFlow::Continue(pause)
        }
        Err(e) => ControlFlow::Break(Err(e)),
    }
}

/// A connection whose server went away, turned read-only, or answered a lost `COMMIT` is not
/// handed out again: marked broken, the pool closes it.
fn leaves_connection_unusable(failure: Failure) -> bool {
    matches!(failure, Failure::Reconnect | Failure::OutcomeUnknown)
}
