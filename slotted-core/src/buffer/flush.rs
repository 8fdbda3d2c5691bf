//! The flush, written once over [`Exec`] and run by both faces: a round writes every chunk as
//! its own transaction (the chunk's rows as one multi-row upsert, and its id in the flush log),
//! and the flusher loop runs rounds every interval, early on a full buffer, with backoff after
//! a failure, and to the end on shutdown.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diesel::result::{DatabaseErrorKind, Error as DieselError};

use super::pending::{Chunk, Core};
use crate::count::database_error;
use crate::dialect::{CounterBackend, Dialect};
use crate::error::{Error, Result};
use crate::exec::{BoxFuture, Exec, Guard};
use crate::retry::RetryPolicy;
use crate::sql::flush::{FindFlush, FlushId, LogFlush, PruneFlushes};
use crate::sql::write::{AddRows, DeltaRow};

fn unix_seconds(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// One round: cuts the pending deltas into chunks and writes every chunk waiting, oldest first.
/// Stops at the first chunk that fails, which stays in memory (in doubt if its COMMIT failed)
/// and is written first by the next round.
pub(crate) async fn flush_round<E: Exec>(core: &Core, exec: &mut E) -> Result<()> {
    core.cut();
    while let Some(chunk) = core.take_chunk() {
        match write_chunk(core, exec, &chunk).await {
            Ok(()) => core.committed(&chunk),
            Err((error, in_doubt)) => {
                core.put_back(chunk, in_doubt);
                return Err(error);
            }
        }
    }
    if core.prune_due() {
        let retention = core.config.flush_log_retention;
        let cutoff = unix_seconds(SystemTime::now()).saturating_sub(retention.as_secs() as i64);
        if let Err(e) = exec.execute(PruneFlushes(&cutoff)).await {
            // The log only grows until the next prune; the counts are unaffected.
            core.note_error(&Error::Diesel(e));
        }
    }
    Ok(())
}

/// Writes one chunk in one transaction; `Err((error, in_doubt))`, `in_doubt` when the COMMIT
/// itself failed, so the chunk may be in the database.
///
/// Exactly once: the transaction inserts the chunk's id into the flush log first. A retry of a
/// chunk in doubt first looks the id up (found: it committed, done). And should the first
/// COMMIT land after the look-up (a server still finishing a lost connection's COMMIT), the
/// retry's insert of the same id waits for it and fails with a unique violation, which also
/// means committed: the retry rolls back.
async fn write_chunk<E: Exec>(
    core: &Core,
    exec: &mut E,
    chunk: &Chunk,
) -> Result<(), (Error, bool)> {
    let spec = &chunk.spec;
    let fail = |e| (database_error(spec, e), false);
    if chunk.in_doubt && !core.faults.skip_lookup.load(Ordering::Relaxed) {
        let found = exec.load::<_, FlushId>(FindFlush(&chunk.id)).await;
        if !found.map_err(fail)?.is_empty() {
            return Ok(());
        }
    }
    let rows: Vec<DeltaRow<'_>> = chunk
        .rows
        .iter()
        .map(|row| (row.key.as_value(), row.bucket, row.delta))
        .collect();
    let slot = crate::count::rows_writer_slot(exec, spec.slots, core.sqlite_slot)
        .await
        .map_err(fail)?;
    let at = unix_seconds(SystemTime::now());
    exec.begin(Guard::Marked).await.map_err(fail)?;
    let written = match exec
        .execute(LogFlush {
            id: &chunk.id,
            at: &at,
        })
        .await
    {
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
            // Committed before (see above).
            let _ = exec.rollback(Guard::Marked).await;
            return Ok(());
        }
        Err(e) => Err(fail(e)),
        Ok(_) => match exec.execute(AddRows::new(spec, slot, &rows)).await {
            // PostgreSQL and SQLite count a row per key inserted or updated, none for a row
            // the overflow guard skipped. MySQL's count (1 per insert, 2 per update) says
            // nothing of overflow, which is its error 1690 (a `Database` error) instead.
            Ok(n) if E::Backend::DIALECT != Dialect::Mysql && n != rows.len() => Err((
                Error::FlushOverflow {
                    counter: spec.qualified_name(),
                    table: spec.table,
                    rows: rows.len(),
                    written: n,
                },
                false,
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(fail(e)),
        },
    };
    if let Err(failure) = written {
        let _ = exec.rollback(Guard::Marked).await;
        return Err(failure);
    }
    match exec.commit(Guard::Marked).await {
        Err(e) => Err((database_error(spec, e), true)),
        Ok(()) => {
            let lose =
                core.faults
                    .lose_commits
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            match lose {
                Ok(_) => Err((
                    database_error(
                        spec,
                        DieselError::DatabaseError(
                            DatabaseErrorKind::ClosedConnection,
                            Box::new("connection lost at COMMIT (injected by a test)".to_owned()),
                        ),
                    ),
                    true,
                )),
                Err(_) => Ok(()),
            }
        }
    }
}

/// What the flusher loop needs from a face: a round under the face's flush lock, on a pooled
/// connection, and a wait.
pub(crate) trait Face: Send + Sync {
    /// One round (see [`flush_round`]), with its figures recorded.
    fn flush(&self) -> BoxFuture<'_, Result<()>>;
    /// Until `deadline`, a stop, or with `early` an early-flush signal.
    fn wait(&self, deadline: Instant, early: bool) -> BoxFuture<'_, ()>;
    /// A plain pause.
    fn sleep(&self, pause: Duration) -> BoxFuture<'_, ()>;
}

/// The flusher: a round every interval (early when the buffer fills), after a failure again
/// with exponential backoff; once stopped, rounds until everything is written or the shutdown
/// time limit passes, then says what is left.
pub(crate) async fn run_flusher<F: Face>(core: &Core, face: &F) -> Result<()> {
    let config = &core.config;
    let backoff = RetryPolicy {
        max_retries: u32::MAX,
        base_delay: config.retry_delay,
        max_delay: config.max_retry_delay,
    };
    let mut failures = 0u32;
    while !core.wake.stopping() {
        let wait = match failures {
            0 => config.interval,
            n => backoff.backoff(n - 1),
        };
        face.wait(Instant::now() + wait, failures == 0).await;
        if core.wake.stopping() {
            break;
        }
        if core.is_empty() {
            continue;
        }
        match face.flush().await {
            Ok(()) => failures = 0,
            Err(_) => failures = failures.saturating_add(1),
        }
    }
    // From the shutdown call, not from when a round in progress then ended.
    let deadline = core
        .shutdown_deadline()
        .unwrap_or_else(|| Instant::now() + config.shutdown_timeout);
    let mut failures = 0u32;
    loop {
        let outcome = face.flush().await;
        if outcome.is_ok() && core.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            let stats = core.stats();
            return Err(Error::BufferUnflushed {
                unflushed_adds: stats.unflushed_adds,
                pending_keys: stats.pending_keys,
                in_doubt_adds: core.in_doubt_adds(),
                last_error: stats.last_error.unwrap_or_default(),
            });
        }
        let pause: Duration = backoff.backoff(failures).min(deadline - now);
        failures = failures.saturating_add(1);
        face.sleep(pause).await;
    }
}
