//! How maintenance sizes its transactions beside writers that keep winning.
//!
//! A batch that loses a deadlock or a certification conflict (Galera's 1213, found at a
//! statement or at `COMMIT`) was rolled back whole. It runs again after a jittered pause, at
//! half the size; a batch that commits lets the next one grow back, doubling up to the size
//! the caller asked for. A batch of one record that still loses [`RECORD_ATTEMPTS`] times in a
//! row is left as it is for a later pass and listed in the report (`skipped`): writers of that
//! record win every time, and while they write it its slots come back as fast as they are
//! folded. A pass therefore ends in a bounded time however hot its records are.
//!
//! Inside a transaction of the caller's, a lost batch has rolled back (or aborted) the caller's
//! transaction too: nothing runs again, the error comes back at once.

use std::time::Duration;

use super::{CompactionReport, RecordFailure, RefreshReport};
use crate::error::Error;
use crate::key::KeyValue;
use crate::retry::RetryPolicy;

/// Attempts of a one-record batch before the record is left for a later pass.
pub(crate) const RECORD_ATTEMPTS: u32 = 6;

/// The pauses after lost batches, by how many were lost in a row.
const PAUSES: RetryPolicy = RetryPolicy {
    max_retries: 0,
    base_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(100),
};

/// The size of the next batch, from what the last ones did.
#[derive(Debug)]
pub(crate) struct Pace {
    size: usize,
    max: usize,
    /// Batches lost in a row.
    streak: u32,
    /// Of those, lost as a batch of one record.
    alone: u32,
}

/// What to do after a lost batch: pause, then run it again (at the new size) or leave its one
/// record.
pub(crate) enum Next {
    Retry(Duration),
    Skip(Duration),
}

impl Pace {
    /// Batches of at most `max` records, starting at `max`.
    pub(crate) fn new(max: usize) -> Self {
        let max = max.max(1);
        Pace {
            size: max,
            max,
            streak: 0,
            alone: 0,
        }
    }

    /// Records in the next batch, of `remaining`.
    pub(crate) fn take(&self, remaining: usize) -> usize {
        self.size.min(remaining)
    }

    pub(crate) fn won(&mut self) {
        (self.streak, self.alone) = (0, 0);
        self.size = self.size.saturating_mul(2).min(self.max);
    }

    /// After a batch of `len` records lost.
    pub(crate) fn lost(&mut self, len: usize) -> Next {
        let pause = PAUSES.backoff(self.streak);
        self.streak += 1;
        if len > 1 {
            self.size = len / 2;
            return Next::Retry(pause);
        }
        self.alone += 1;
        if self.alone < RECORD_ATTEMPTS {
            return Next::Retry(pause);
        }
        self.alone = 0;
        Next::Skip(pause)
    }
}

/// What a job that stopped part way says it committed ([`stopped`]).
pub(crate) trait Committing {
    /// Whether nothing was done.
    fn is_empty(&self) -> bool;
    /// As the error of a job that stopped part way reports it.
    fn into_committed(self) -> super::Committed;
}

/// What a paced job adds up.
pub(crate) trait Progress: Committing + Default + std::ops::AddAssign {
    /// A batch that lost and was rolled back.
    fn rerun(&mut self);
    /// Leaves `key` for a later pass, if this job may: false when it must fail instead.
    fn skip(&mut self, key: &KeyValue<'_>, error: &Error) -> bool;
}

fn busy(key: &KeyValue<'_>, error: &Error) -> RecordFailure {
    RecordFailure {
        key: format!("{key:?}"),
        reason: format!(
            "lost to concurrent writers {RECORD_ATTEMPTS} times in a row (last: {error}); left \
             as it is for a later pass"
        ),
    }
}

// The two reports count reruns and skipped records alike; they differ in what "nothing done"
// means and in which `Committed` they become.
impl Progress for CompactionReport {
    fn rerun(&mut self) {
        self.retries += 1;
    }
    fn skip(&mut self, key: &KeyValue<'_>, error: &Error) -> bool {
        self.skipped.push(busy(key, error));
        true
    }
}

impl Committing for CompactionReport {
    fn is_empty(&self) -> bool {
        self.batches == 0 && self.failed.is_empty() && self.skipped.is_empty()
    }
    fn into_committed(self) -> super::Committed {
        super::Committed::Compaction(self)
    }
}

impl Progress for RefreshReport {
    fn rerun(&mut self) {
        self.retries += 1;
    }
    fn skip(&mut self, key: &KeyValue<'_>, error: &Error) -> bool {
        self.skipped.push(busy(key, error));
        true
    }
}

impl Committing for RefreshReport {
    fn is_empty(&self) -> bool {
        self.updated == 0 && self.failed.is_empty() && self.skipped.is_empty()
    }
    fn into_committed(self) -> super::Committed {
        super::Committed::Refresh(self)
    }
}

impl Progress for super::MoveReport {
    fn rerun(&mut self) {
        self.retries += 1;
    }
    fn skip(&mut self, key: &KeyValue<'_>, error: &Error) -> bool {
        self.skipped.push(busy(key, error));
        true
    }
}

impl Committing for super::MoveReport {
    fn is_empty(&self) -> bool {
        self.batches == 0 && self.failed.is_empty() && self.skipped.is_empty()
    }
    fn into_committed(self) -> super::Committed {
        super::Committed::Moved(self)
    }
}

/// Rows deleted by retention, which must delete every old bucket it was asked to: a record it
/// cannot get to fails the job.
impl Progress for u64 {
    fn rerun(&mut self) {}
    fn skip(&mut self, _: &KeyValue<'_>, _: &Error) -> bool {
        false
    }
}

impl Committing for u64 {
    fn is_empty(&self) -> bool {
        *self == 0
    }
    fn into_committed(self) -> super::Committed {
        super::Committed::Deleted(self)
    }
}

/// A pass over what was written since the last: its compaction and its roll-up.
impl Committing for super::PassReport {
    fn is_empty(&self) -> bool {
        self.compaction.is_empty() && self.refresh.is_empty()
    }
    fn into_committed(self) -> super::Committed {
        super::Committed::Pass(self)
    }
}

/// `error`, saying what the job committed before it, if anything. Inside a transaction of the
/// caller's nothing was committed (the batches were savepoints): `error` as it is.
pub(crate) fn stopped<E: crate::exec::Exec, P: Committing>(
    exec: &mut E,
    done: P,
    error: Error,
) -> Error {
    if done.is_empty() || exec.in_transaction() {
        return error;
    }
    Error::MaintenanceStopped {
        committed: Box::new(done.into_committed()),
        source: Box::new(error),
    }
}

/// Runs `$attempt` (a future of `Result<P>` using `$batch: &[KeyValue]`, one transaction) over
/// `$keys` in batches sized by `$pace`, adding what each returns into `$report: &mut P`
/// (a [`Progress`]). Evaluates to `Result<()>`; on `Err`, `$report` holds what committed.
macro_rules! paced {
    ($exec:ident, $pace:expr, $keys:expr, $report:expr, |$batch:ident| $attempt:expr) => {{
        use $crate::maintenance::pace::{Next, Progress};
        let pace: &mut $crate::maintenance::pace::Pace = $pace;
        let report = $report;
        let nested = $crate::exec::Exec::in_transaction(&mut *$exec);
        let mut rest: &[$crate::key::KeyValue<'_>] = $keys;
        let mut outcome = Ok(());
        while !rest.is_empty() {
            let n = pace.take(rest.len());
            let $batch = &rest[..n];
            match $attempt.await {
                Ok(part) => {
                    *report += part;
                    pace.won();
                    rest = &rest[n..];
                }
                Err(e) if !nested && $crate::retry::lost_a_deadlock(&e) => {
                    Progress::rerun(report);
                    let pause = match pace.lost(n) {
                        Next::Retry(pause) => pause,
                        Next::Skip(pause) if Progress::skip(report, &rest[0], &e) => {
                            rest = &rest[1..];
                            pause
                        }
                        Next::Skip(_) => {
                            outcome = Err(e);
                            break;
                        }
                    };
                    $crate::exec::Exec::pause(&mut *$exec, pause).await;
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        outcome
    }};
}
pub(crate) use paced;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_batch_halves_a_won_one_doubles_and_a_lone_loser_is_skipped() {
        let mut pace = Pace::new(1000);
        assert_eq!(pace.take(20), 20);
        assert!(matches!(pace.lost(20), Next::Retry(_)));
        assert_eq!(pace.take(20), 10);
        for len in [10, 5, 2] {
            assert!(matches!(pace.lost(len), Next::Retry(_)));
        }
        assert_eq!(pace.take(20), 1);
        for _ in 1..RECORD_ATTEMPTS {
            assert!(matches!(pace.lost(1), Next::Retry(p) if p <= PAUSES.max_delay));
        }
        assert!(matches!(pace.lost(1), Next::Skip(_)));
        // The next record gets its own attempts.
        assert!(matches!(pace.lost(1), Next::Retry(_)));
        pace.won();
        assert_eq!(pace.take(20), 2);
        for _ in 0..20 {
            pace.won();
        }
        assert_eq!(pace.take(5000), 1000, "never past the batch asked for");
    }
}
