//! What slotted reports to `tracing`, behind the `tracing` feature; without it every item here
//! is empty and compiles away.
//!
//! - A span per counter call and maintenance job, named `slotted`, with `op` (the method:
//!   `increment`, `compact_all`, …), `counter` (`Post.likes`), `table`, and, where the job
//!   knows them, `key`, `slot` (the slot written, or `"server"` when the connection strategy
//!   lets the server pick it) and `rows` (rows written or folded). Counter calls are at DEBUG,
//!   maintenance jobs at INFO.
//! - An event (WARN) for each transaction rolled back and run again: `attempt`, `backoff_ms`,
//!   `cause` (`deadlock`, `serialization failure`, `lock wait timeout`, `busy`, …) and `error`.
//! - An event (INFO) with each maintenance job's report: records, rows before and after,
//!   batches, retries, and the records it could not do.
//! - An event (DEBUG) for each failed call, with the error.

/// Records a field of the current span (declared empty by [`span!`]).
macro_rules! record {
    ($field:literal, $value:expr) => {{
        #[cfg(feature = "tracing")]
        {
            ::tracing::Span::current().record($field, $value);
        }
    }};
}
pub(crate) use record;

/// The span of one call: `span!(debug|info, "op", &SPEC)`. Without the feature, `()`.
macro_rules! span {
    ($level:ident, $op:expr, $spec:expr) => {{
        #[cfg(feature = "tracing")]
        let span = {
            let spec: &$crate::table::CounterSpec = $spec;
            ::tracing::$level!(
                "slotted",
                op = $op,
                counter = %spec.qualified_name(),
                table = spec.table,
                key = ::tracing::field::Empty,
                slot = ::tracing::field::Empty,
                rows = ::tracing::field::Empty,
            )
        };
        #[cfg(not(feature = "tracing"))]
        let span = {
            let _ = ($op, $spec);
            $crate::trace::NoSpan
        };
        span
    }};
}
pub(crate) use span;

/// The span, without the `tracing` feature.
#[cfg(not(feature = "tracing"))]
pub(crate) struct NoSpan;

/// Runs the sync job `$job` inside `$span`, then reports its outcome.
macro_rules! in_span {
    ($span:expr, $job:expr) => {{
        #[cfg(feature = "tracing")]
        let _entered = $span.enter();
        #[cfg(not(feature = "tracing"))]
        let _ = $span;
        let outcome = $job;
        $crate::trace::Outcome::report(&outcome);
        outcome
    }};
}
pub(crate) use in_span;

/// Awaits the async job `$job` inside `$span` (instrumented, so the span is entered on every
/// poll, on whichever thread), then reports its outcome.
#[cfg(feature = "async")]
macro_rules! in_span_async {
    ($span:expr, $job:expr) => {{
        #[cfg(feature = "tracing")]
        let outcome = ::tracing::Instrument::instrument($job, $span.clone()).await;
        #[cfg(not(feature = "tracing"))]
        let outcome = {
            let _ = $span;
            $job.await
        };
        #[cfg(feature = "tracing")]
        let _entered = $span.enter();
        $crate::trace::Outcome::report(&outcome);
        outcome
    }};
}
#[cfg(feature = "async")]
pub(crate) use in_span_async;

/// A call's result, as reported when the call ends.
pub(crate) trait Outcome {
    fn report(&self) {}
}

impl<T: Report> Outcome for crate::Result<T> {
    fn report(&self) {
        #[cfg(feature = "tracing")]
        match self {
            Ok(value) => value.report(),
            Err(error) => tracing::debug!(%error, "slotted: the call failed"),
        }
    }
}

/// A successful result worth an event: maintenance reports.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) trait Report {
    fn report(&self) {}
}

impl Report for () {}
impl Report for i64 {}
impl<K, V> Report for std::collections::HashMap<K, V> {}

impl Report for u64 {
    fn report(&self) {
        record!("rows", *self);
    }
}

impl Report for crate::reports::CompactionReport {
    fn report(&self) {
        record!("rows", self.rows_before);
        #[cfg(feature = "tracing")]
        tracing::info!(
            records = self.records,
            rows_before = self.rows_before,
            rows_after = self.rows_after,
            batches = self.batches,
            retries = self.retries,
            failed = self.failed.len(),
            failed_keys = ?self.failed.iter().map(|f| &f.key).collect::<Vec<_>>(),
            "slotted: maintenance report"
        );
    }
}

impl Report for crate::reports::PassReport {
    fn report(&self) {
        self.compaction.report();
        self.refresh.report();
    }
}

impl Report for crate::reports::MoveReport {
    fn report(&self) {
        record!("rows", self.records);
        #[cfg(feature = "tracing")]
        tracing::info!(
            records = self.records,
            moved = %self.moved,
            batches = self.batches,
            retries = self.retries,
            failed = self.failed.len(),
            failed_keys = ?self.failed.iter().map(|f| &f.key).collect::<Vec<_>>(),
            "slotted: absorb or release report"
        );
    }
}

impl Report for crate::reports::RefreshReport {
    fn report(&self) {
        record!("rows", self.updated);
        #[cfg(feature = "tracing")]
        tracing::info!(
            updated = self.updated,
            failed = self.failed.len(),
            failed_keys = ?self.failed.iter().map(|f| &f.key).collect::<Vec<_>>(),
            "slotted: roll-up report"
        );
    }
}

impl Report for crate::reports::FollowReport {
    fn report(&self) {
        record!("rows", self.records);
        #[cfg(feature = "tracing")]
        if self.is_exact() {
            tracing::info!(
                records = self.records,
                drifted = self.drifted,
                repaired = self.repaired,
                "slotted: follow verify report"
            );
        } else {
            tracing::warn!(
                records = self.records,
                drifted = self.drifted,
                repaired = self.repaired,
                triggers_enabled = self.triggers_enabled,
                triggers_expected = self.triggers_expected,
                stray_triggers = self.stray_triggers,
                foreign_keys_missing = self.foreign_keys_missing,
                drift = ?self.drift.iter().take(10).collect::<Vec<_>>(),
                "slotted: a counter that follows a child table drifted from it"
            );
        }
    }
}

/// Reports a transaction rolled back and about to run again.
#[cfg(feature = "tracing")]
pub(crate) fn retrying<E: std::fmt::Display>(
    error: &E,
    attempt: u32,
    backoff: std::time::Duration,
) {
    {
        let message = error.to_string();
        let cause = [
            ("deadlock detected", "deadlock"),
            (
                "Deadlock found",
                "deadlock (or a Galera certification conflict)",
            ),
            ("serializ", "serialization failure"),
            ("lock timeout", "lock timeout"),
            ("Lock wait timeout", "lock wait timeout"),
            ("database is locked", "busy"),
        ]
        .iter()
        .find(|(text, _)| message.contains(text))
        .map_or("retryable error", |(_, cause)| cause);
        tracing::warn!(
            attempt,
            backoff_ms = backoff.as_secs_f64() * 1e3,
            cause,
            error = %message,
            "slotted: transaction rolled back, running it again"
        );
    }
}
