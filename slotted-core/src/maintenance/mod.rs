//! Keeping counter tables small and caches fresh: compaction, set and reset, cache roll-ups,
//! bucket retention, pre-created slots. The calls are methods of a record's
//! [`Counter`] and, for a whole table, of [`CounterMaintenance`]; this module
//! also holds what they report.
//!
//! A writer blocked on a locked slot goes on after the commit and adds to the folded row or to
//! a new one; either way its delta counts once.

mod adopt;
mod calls;
mod fold;
mod follow;
mod maintainer;
pub(crate) mod pace;

use std::time::SystemTime;

use crate::count::{check_key, database_error, keys_per_statement};
use crate::error::Result;
use crate::exec::sync::{run_now, SyncExec};
use crate::exec::Exec;
use crate::handle::Counter;
use crate::key::KeyValue;
pub use crate::reports::{
    Committed, CompactionReport, Drift, FollowReport, MoveReport, PassReport, RecordFailure,
    RefreshReport,
};
use crate::retry::RetryPolicy;
use crate::sql::maintenance::{InsertRows, OnConflict, RowCount};
use crate::sql::read::KeyPage;
use crate::sql::{Buckets, SlotValue};
use crate::table::{
    AdoptingCounterTable, BucketedCounterTable, CachedCounterTable, CounterTable,
    FollowingCounterTable, PrefilledCounterTable,
};
use crate::CounterConnection;
#[cfg(feature = "async")]
use crate::{exec::asynch::AsyncExec, AsyncCounterConnection};
pub use calls::CounterMaintenance;
use fold::{for_each_page, Fold, ROWS_PER_STATEMENT};
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub use maintainer::{AsyncMaintainer, OnTask};
pub use maintainer::{
    Face, JobReport, Maintainer, MaintainerBuilder, MaintainerReport, OnThread, Retention,
};
use pace::{paced, stopped, Pace};
#[cfg(feature = "async")]
use std::future::Future;

/// Records per transaction when compacting or refreshing many records.
pub const MAINTENANCE_BATCH: usize = 1000;

/// The most records one page of `compact_all`, `fold_buckets_before` or
/// `delete_buckets_before` takes: its keys are bound in one statement, and this stays under every
/// backend's bind limit (SQLite's 32,766 is the lowest).
pub const MAX_PAGE: usize = crate::count::TOTALS_CHUNK;

/// How `set` reruns a transaction that lost a deadlock (or, on Galera, certification), when
/// it is its own transaction. On InnoDB two maintenance jobs over neighbouring records can still
/// deadlock: a range scan locks the row after the range, even when the range is one row.
const MAINTENANCE_RETRY: RetryPolicy = crate::retry::STANDARD;

/// One attempt: batch jobs pace their own reruns ([`pace`]).
const ONCE: RetryPolicy = RetryPolicy {
    max_retries: 0,
    ..MAINTENANCE_RETRY
};

/// Fails with [`Error::ReadOnlyServer`] on a PostgreSQL hot standby, before a table-level job
/// whose first statements only read would report nothing to do there.
async fn refuse_read_only<E: Exec>(exec: &mut E, spec: &crate::table::CounterSpec) -> Result<()> {
    use crate::sql::maintenance::{ReadOnlyRow, ServerReadOnly};
    if <E::Backend as crate::dialect::CounterBackend>::DIALECT != crate::dialect::Dialect::Postgres
    {
        return Ok(());
    }
    let rows = exec
        .load::<_, ReadOnlyRow>(ServerReadOnly)
        .await
        .map_err(|e| database_error(spec, e))?;
    if rows.first().is_some_and(|r| r.0) {
        return Err(crate::error::Error::ReadOnlyServer {
            counter: spec.qualified_name(),
            table: spec.table,
            source: diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ReadOnlyTransaction,
                Box::new(String::from(
                    "maintenance writes, and this server is a hot standby (pg_is_in_recovery())",
                )),
            ),
        });
    }
    Ok(())
}

async fn compact<T: CounterTable, E: Exec>(
    exec: &mut E,
    keys: &[T::Key],
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    let (mut pace, mut report) = (Pace::new(MAINTENANCE_BATCH), CompactionReport::default());
    let done = paced!(exec, &mut pace, &keys, &mut report, |batch| fold::fold(
        exec,
        spec,
        batch,
        Buckets::All,
        Fold::Compact
    ));
    match done {
        Ok(()) => Ok(report),
        Err(e) => Err(stopped(exec, report, e)),
    }
}

async fn compact_all<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let mut pace = Pace::new(batch.min(keys_per_statement(spec)));
    for_each_page!(exec, spec, batch, Buckets::All, |page, report| paced!(
        exec,
        &mut pace,
        &page,
        report,
        |keys| fold::fold(exec, spec, keys, Buckets::All, Fold::Compact)
    ))
}

async fn refresh<T: CounterTable, E: Exec>(exec: &mut E, keys: &[T::Key]) -> Result<RefreshReport> {
    let spec = &T::SPEC;
    let Some(cache) = &spec.cache else {
        return Ok(RefreshReport::default());
    };
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    adopt::claim(exec, spec, cache).await?;
    let (mut pace, mut report) = (Pace::new(MAINTENANCE_BATCH), RefreshReport::default());
    let done = paced!(exec, &mut pace, &keys, &mut report, |batch| {
        fold::refresh(exec, spec, cache, batch)
    });
    match done {
        Ok(()) => Ok(report),
        Err(e) => Err(stopped(exec, report, e)),
    }
}

/// The records written since the last pass (those with rows outside the settled slot), found
/// through the index of unsettled rows, page by page in key order: each page compacted (which
/// settles it), then rolled up into the cached column. A pass costs what was written since the
/// last one, not what the table holds. A record written after its page was compacted is
/// unsettled again, so the next pass takes it; one whose rows writers held (skipped by the
/// compaction) is rolled up all the same, and taken again by the next pass.
async fn maintain_changed<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
) -> Result<PassReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    if let Some(cache) = &spec.cache {
        adopt::claim(exec, spec, cache).await?;
    }
    let mut compact_pace = Pace::new(batch.min(keys_per_statement(spec)));
    let mut refresh_pace = Pace::new(batch.min(MAINTENANCE_BATCH));
    for_each_page!(exec, spec, batch, unsettled, |page, report| {
        let report: &mut PassReport = report;
        let compaction = &mut report.compaction;
        let compacted = paced!(exec, &mut compact_pace, &page, compaction, |keys| {
            fold::fold(exec, spec, keys, Buckets::All, Fold::Compact)
        });
        // The page rolled up once it is compacted (settled).
        match (compacted, &spec.cache) {
            (Ok(()), Some(cache)) => {
                let refresh = &mut report.refresh;
                paced!(exec, &mut refresh_pace, &page, refresh, |keys| {
                    fold::refresh(exec, spec, cache, keys)
                })
            }
            (done, _) => done,
        }
    })
}

async fn absorb<T: CounterTable, E: Exec>(exec: &mut E, keys: &[T::Key]) -> Result<MoveReport> {
    let spec = &T::SPEC;
    let Some(column) = &spec.adopt else {
        return Ok(MoveReport::default());
    };
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    // A column the roll-up took over holds copies of totals: nothing left to absorb.
    if adopt::claimed(exec, spec, column).await? {
        return Ok(MoveReport {
            took_over_cache: true,
            ..MoveReport::default()
        });
    }
    let (mut pace, mut report) = (Pace::new(MAINTENANCE_BATCH), MoveReport::default());
    let done = paced!(exec, &mut pace, &keys, &mut report, |batch| {
        adopt::absorb(exec, spec, column, batch)
    });
    match done {
        Ok(()) => Ok(report),
        Err(e) => Err(stopped(exec, report, e)),
    }
}

/// Pages of the model's keys (`parent`, the table of a cached or adopted column) or of the keys
/// with slot rows, `batch` at a time in key order, each handed to `job` in paced batches, until
/// none is left. Evaluates to `Result<R>`, `R` the report `job`'s results add up in.
macro_rules! for_each_key_page {
    ($exec:ident, $spec:expr, $batch:expr, $parent:expr, |$b:ident| $job:expr) => {{
        let spec: &$crate::table::CounterSpec = $spec;
        let limit = i64::try_from($batch.clamp(1, MAX_PAGE)).unwrap_or(1);
        let (mut after, mut report) = (None::<crate::key::RawKey>, Default::default());
        let mut pace = Pace::new($batch.clamp(1, MAINTENANCE_BATCH));
        loop {
            let after_key = after.as_ref().map(crate::key::RawKey::as_value);
            let page = match $parent {
                Some(column) => KeyPage::Parent {
                    spec,
                    cache: column,
                    after: after_key,
                    limit,
                },
                None => KeyPage::Compactable {
                    scope: crate::sql::Scope::new(spec, &[]),
                    after: after_key,
                    limit,
                    all: true,
                    unsettled: false,
                },
            };
            let keys = match fold::key_page($exec, page).await {
                Ok(keys) => keys,
                Err(e) => break Err(stopped($exec, report, e)),
            };
            let Some(last) = keys.last().cloned() else {
                break Ok(report);
            };
            // A page shorter than its limit is the last: no query for an empty one.
            let last_page = (keys.len() as i64) < limit;
            let keys: Vec<KeyValue<'_>> = keys.iter().map(crate::key::RawKey::as_value).collect();
            let done = paced!($exec, &mut pace, &keys, &mut report, |$b| $job);
            if let Err(e) = done {
                break Err(stopped($exec, report, e));
            }
            if last_page {
                break Ok(report);
            }
            after = Some(last);
        }
    }};
}

async fn refresh_all<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
) -> Result<RefreshReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let Some(cache) = &spec.cache else {
        return Ok(RefreshReport::default());
    };
    adopt::claim(exec, spec, cache).await?;
    for_each_key_page!(exec, spec, batch, Some(cache), |keys| fold::refresh(
        exec, spec, cache, keys
    ))
}

async fn absorb_all<T: CounterTable, E: Exec>(exec: &mut E, batch: usize) -> Result<MoveReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let Some(column) = &spec.adopt else {
        return Ok(MoveReport::default());
    };
    // A column the roll-up took over holds copies of totals: nothing left to absorb.
    if adopt::claimed(exec, spec, column).await? {
        return Ok(MoveReport {
            took_over_cache: true,
            ..MoveReport::default()
        });
    }
    let mut report: MoveReport =
        for_each_key_page!(exec, spec, batch, Some(column), |keys| adopt::absorb(
            exec, spec, column, keys
        ))?;
    // The pass is the act that says no old writer is left: a cache on the same column is the
    // roll-up's from now on, if every row holds 0.
    report.took_over_cache = adopt::take_over_after_absorb(exec, spec)
        .await
        .map_err(|e| stopped(exec, report.clone(), e))?;
    Ok(report)
}

async fn release_all<T: CounterTable, E: Exec>(exec: &mut E, batch: usize) -> Result<MoveReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let Some(column) = &spec.adopt else {
        return Ok(MoveReport::default());
    };
    adopt::refuse_cache(exec, spec, column, "release").await?;
    for_each_key_page!(exec, spec, batch, None, |keys| adopt::release(
        exec, spec, column, keys
    ))
}

async fn delete_buckets_before<T: CounterTable, E: Exec>(
    exec: &mut E,
    cutoff: SystemTime,
    batch: usize,
) -> Result<u64> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
    let old = Buckets::Before(before);
    let mut pace = Pace::new(batch.min(keys_per_statement(spec)));
    for_each_page!(exec, spec, batch, old, |page, deleted| paced!(
        exec,
        &mut pace,
        &page,
        deleted,
        |keys| fold::delete(exec, spec, keys, old)
    ))
}

async fn fold_buckets_before<T: CounterTable, E: Exec>(
    exec: &mut E,
    cutoff: SystemTime,
    batch: usize,
) -> Result<CompactionReport> {
    let spec = &T::SPEC;
    refuse_read_only(exec, spec).await?;
    let before = spec.bucket.map_or(i64::MIN, |width| width.start_of(cutoff));
    let old = Buckets::Range(1, before);
    let mut pace = Pace::new(batch.min(keys_per_statement(spec)));
    for_each_page!(exec, spec, batch, old, |page, report| paced!(
        exec,
        &mut pace,
        &page,
        report,
        |keys| fold::fold(
            exec,
            spec,
            keys,
            Buckets::Before(before),
            Fold::IntoBucket(0)
        )
    ))
}

async fn create_slots<T: CounterTable, E: Exec>(exec: &mut E, keys: &[T::Key]) -> Result<u64> {
    let spec = &T::SPEC;
    let keys = fold::sorted_keys::<E::Backend, _>(spec, keys)?;
    let rows: Vec<RowCount<'_>> = keys
        .iter()
        .flat_map(|&k| (0..spec.slots as i16).map(move |slot| (k, 0, SlotValue::Bound(slot), 0)))
        .collect();
    let mut created = 0;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let insert = InsertRows {
            spec,
            rows: chunk,
            on_conflict: OnConflict::Skip,
        };
        // Autocommit statements: what was created stays created, and a rerun skips it.
        created += exec
            .execute(insert)
            .await
            .map_err(|e| database_error(spec, e))? as u64;
    }
    Ok(created)
}
