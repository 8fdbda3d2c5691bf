//! Verify and repair of a counter that follows a child table: each record's count set against
//! what its child rows add up to, a page of records at a time, each page one statement (one
//! snapshot of both: a trigger writes a child row and its count in one transaction, so a
//! difference is drift, never a writer in flight). Drift comes from changes the triggers did
//! not see: triggers disabled for a bulk load (PostgreSQL's `session_replication_role =
//! replica` does that too), dropped, or rows written before they existed by another path.
//!
//! The repair adds each record's difference to its row of the slot past the writers', in a
//! transaction that locks the record's rows and reads its page again ([`repair_page`]):
//! writers go on meanwhile, and what they change moves the count and the child rows alike; two
//! repairs add a difference once.

use std::marker::PhantomData;

use super::*;
use crate::count::parse_total;
use crate::follow::{trigger_name, trigger_names};
use crate::key::RawKey;
use crate::migration::via_owner;
use crate::reports::{Drift, FollowReport};
use crate::sql::follow::{
    pg_foreign_key, EnabledTriggers, ForeignKeyGone, PageBound, VerifyPage, VerifyRow, Which,
};
use crate::sql::maintenance::{InsertRows, OnConflict, RowCount};
use crate::sql::write::AddToSlot;
use crate::sql::{ByText, SlotValue, Sum};

/// Verifies every record of `T` (a counter that follows a child table), in pages of `batch`
/// records, and with `repair` repairs each page's drifted records ([`repair_page`]).
pub(super) async fn verify_all<T: CounterTable, E: Exec>(
    exec: &mut E,
    batch: usize,
    repair: bool,
) -> Result<FollowReport> {
    let spec = &T::SPEC;
    let Some(follow) = &spec.follow else {
        return Ok(FollowReport::default());
    };
    if repair {
        refuse_read_only(exec, spec).await?;
        refuse_stale_snapshot(exec, spec)?;
    }
    let names = trigger_names(follow.table);
    // Through a table between: its triggers too, which keep the count when its rows move.
    let via = follow.through.map(|through| {
        (
            through.table,
            trigger_names(&via_owner(follow.table, through.table)),
        )
    });
    let mut report = FollowReport {
        triggers_expected: (names.len() + via.as_ref().map_or(0, |(_, v)| v.len())) as u64,
        ..FollowReport::default()
    };
    let dialect = <E::Backend as crate::dialect::CounterBackend>::DIALECT;
    let counter = dialect.quote(spec.table);
    let triggers = |child, which| EnabledTriggers {
        child,
        which,
        counter: counter.clone(),
    };
    report.triggers_enabled =
        count_rows(exec, spec, triggers(follow.table, Which::OnChild(names))).await?;
    let mut expected_elsewhere = Vec::new();
    if let Some((table, names)) = via {
        expected_elsewhere.clone_from(&names);
        report.triggers_enabled +=
            count_rows(exec, spec, triggers(table, Which::OnChild(names))).await?;
    }
    report.stray_triggers = count_rows(
        exec,
        spec,
        triggers(follow.table, Which::Elsewhere(expected_elsewhere)),
    )
    .await?;
    if dialect == crate::dialect::Dialect::Postgres {
        if let Some((marker, exists)) = pg_foreign_key(follow) {
            let function = trigger_name(follow.table, "");
            let gone = ForeignKeyGone {
                function: &function,
                marker: &marker,
                exists: &exists,
            };
            report.foreign_keys_missing = count_rows(exec, spec, gone).await?;
        }
    }
    let limit = i64::try_from(batch.clamp(1, MAX_PAGE)).unwrap_or(1);
    // Each page bounded above, so that it reads a range of child rows (one record: all of
    // them, on one page).
    let bounded = follow.record.is_none();
    let mut after: Option<RawKey> = None;
    // Every page starts past the one before, in the database's order of the keys: a page that
    // would start where one started already goes round in circles ([`no_progress`]).
    let mut starts = std::collections::HashSet::new();
    loop {
        let upper: Option<RawKey> = if bounded {
            let bound = PageBound {
                spec,
                follow,
                after: after.as_ref().map(RawKey::as_value),
                limit,
            };
            crate::exec::load_keyed(exec, bound, spec.key_column_kinds())
                .await
                .map_err(|e| database_error(spec, e))?
                .pop()
        } else {
            None
        };
        let page = VerifyPage {
            spec,
            follow,
            after: after.as_ref().map(RawKey::as_value),
            upper: upper.as_ref().map(RawKey::as_value),
            limit,
        };
        let rows: Vec<VerifyRow> = crate::exec::load_keyed(exec, page, spec.key_column_kinds())
            .await
            .map_err(|e| database_error(spec, e))?;
        let mut drifted = Vec::new();
        for row in &rows {
            report.records += 1;
            let counted = parse_total(spec, &row.key, row.have.0.clone())?;
            let child_rows = parse_total(spec, &row.key, row.want.0.clone())?;
            if counted == child_rows {
                continue;
            }
            report.drifted += 1;
            if report.drift.len() < FollowReport::SAMPLE {
                report.drift.push(Drift {
                    key: format!("{:?}", row.key),
                    counted,
                    child_rows,
                });
            }
            if repair {
                drifted.push(row.key.clone());
            }
        }
        if !drifted.is_empty() {
            report.repaired += repair_page(exec, page, &drifted).await?;
        }
        after = match (rows.len() < limit as usize, upper) {
            // Fewer keys than asked up to the bound: every key up to it is verified.
            (true, Some(upper)) => Some(upper),
            (true, None) => return Ok(report),
            (false, _) => rows.last().map(|row| row.key.clone()),
        };
        if let Some(start) = &after {
            if !starts.insert(start.clone()) {
                return Err(no_progress(spec, start));
            }
        }
    }
}

/// The error of a verify whose pages go round in circles: the child's key column orders its
/// keys otherwise than the counter table's, which compares them byte for byte (a
/// case-insensitive collation: SQLite's `COLLATE NOCASE`, MySQL's `utf8mb4_general_ci`, which
/// the migration refuses; a nondeterministic ICU collation on PostgreSQL). Such a column also
/// counts one parent spelled two ways as two records: an error, never a pass that does not end.
fn no_progress(spec: &crate::table::CounterSpec, start: &RawKey) -> crate::Error {
    let reason = format!(
        "verify came back to the page after key {start:?}: the child table's key column compares \
         keys otherwise than the counter table, byte for byte (a case-insensitive collation?); \
         give it a binary collation"
    );
    database_error(
        spec,
        diesel::result::Error::QueryBuilderError(reason.into()),
    )
}

/// MySQL and MariaDB: a repair inside a transaction of the caller's is refused. Their plain
/// reads there see the transaction's snapshot (`REPEATABLE READ`, their default), taken at its
/// first read, which may predate another repair of the same records: the repair would read the
/// drift that repair already fixed and add the difference again
/// (`a_repair_in_a_transaction_whose_snapshot_predates_another_repair_adds_nothing_twice`).
/// In a transaction of its own the page is read again once its rows are locked, and so sees
/// every repair before it. PostgreSQL reads each statement afresh (`READ COMMITTED`), or,
/// under a caller's `REPEATABLE READ`, fails the lock on a row changed since its snapshot (a
/// serialization failure); SQLite lets one writer in, and a stale reader cannot write.
fn refuse_stale_snapshot<E: Exec>(exec: &mut E, spec: &crate::table::CounterSpec) -> Result<()> {
    let dialect = <E::Backend as crate::dialect::CounterBackend>::DIALECT;
    if dialect != crate::dialect::Dialect::Mysql || !exec.in_transaction() {
        return Ok(());
    }
    Err(crate::Error::InTransaction {
        counter: spec.qualified_name(),
        table: spec.table,
        call: "repair_follow_all",
        reason: "on MySQL and MariaDB its reads would see the transaction's snapshot, which may \
                 predate another repair of the same records, and add their difference again",
    })
}

/// The slot a repair adds into: the first past the writers' (`slots`), which no writer writes,
/// outside the settled slot, so that the next pass compacts the record and rolls it up.
fn repair_slot(spec: &crate::table::CounterSpec) -> i16 {
    i16::try_from(spec.slots).unwrap_or(i16::MAX)
}

/// Repairs the records of `keys`, found drifted by a read of `page`, in a transaction of its own
/// (a savepoint inside the caller's): their rows of the [`repair_slot`] made where missing and
/// every row of them locked, in key order, then the page read again, and each of them whose
/// count still differs from its child rows given the difference, in that row. How many it
/// repaired.
///
/// A second repair of the same records (another maintainer, a call beside it) waits for the
/// locks, then reads this one's add: each difference is added once. Without them two repairs
/// that both read a difference before either wrote added it twice
/// (`two_repairs_of_one_drifted_record_add_its_difference_once`). Writers go on meanwhile: a
/// trigger that meets a locked row waits for the commit, and the page, one statement, reads
/// each child row and its count together. SQLite's transaction holds the write lock, which is
/// the lock. The repair slot is no writer's: on Galera a repair meets no writer in
/// certification, and two nodes that repair one record write the same row, so that one of
/// them commits and the other runs again.
async fn repair_page<E: Exec>(exec: &mut E, page: VerifyPage<'_>, keys: &[RawKey]) -> Result<u64> {
    let spec = page.spec;
    let dialect = <E::Backend as crate::dialect::CounterBackend>::DIALECT;
    let slot = repair_slot(spec);
    // After a bulk load with the triggers off, every record of a page may have drifted.
    let locked: std::collections::HashSet<&RawKey> = keys.iter().collect();
    let done = crate::retry::retried_transaction!(
        crate::exec::Guard::Marked,
        exec,
        MAINTENANCE_RETRY,
        crate::retry::lost_a_deadlock,
        async {
            let values: Vec<KeyValue<'_>> = keys.iter().map(RawKey::as_value).collect();
            if dialect != crate::dialect::Dialect::Sqlite {
                for chunk in values.chunks(MAINTENANCE_BATCH) {
                    let repair_rows: Vec<RowCount<'_>> = chunk
                        .iter()
                        .map(|&key| (key, 0, SlotValue::Bound(slot), 0))
                        .collect();
                    let insert = InsertRows {
                        spec,
                        rows: &repair_rows,
                        on_conflict: OnConflict::Skip,
                    };
                    exec.execute(insert)
                        .await
                        .map_err(|e| database_error(spec, e))?;
                    fold::take_rows(exec, crate::sql::Scope::new(spec, chunk), false).await?;
                }
            }
            let rows: Vec<VerifyRow> = crate::exec::load_keyed(exec, page, spec.key_column_kinds())
                .await
                .map_err(|e| database_error(spec, e))?;
            let mut repaired = 0;
            for row in rows.iter().filter(|row| locked.contains(&row.key)) {
                let counted = parse_total(spec, &row.key, row.have.0.clone())?;
                let child_rows = parse_total(spec, &row.key, row.want.0.clone())?;
                // Repaired meanwhile, or a difference past i64 (left drifted, and reported).
                let Some(delta) = child_rows.checked_sub(counted).filter(|&d| d != 0) else {
                    continue;
                };
                let add = AddToSlot {
                    spec,
                    key: row.key.as_value(),
                    bucket: 0,
                    slot: SlotValue::Bound(slot),
                    delta,
                    cache: PhantomData::<ByText>,
                };
                let written = crate::count::upsert(exec, add)
                    .await
                    .map_err(|e| database_error(spec, e))?;
                // 0 rows: the upsert's overflow guard (PostgreSQL, SQLite) kept a row that the
                // difference would carry past BIGINT. The record stays drifted, and reported.
                if written > 0 {
                    repaired += 1;
                }
            }
            Ok::<u64, crate::Error>(repaired)
        }
    );
    done.map(|done| done.value)
        .map_err(|e| fold::in_context(spec, e))
}

/// The most records a verify page reads.
const MAX_PAGE: usize = 10_000;

/// The count a statement of one `slotted_total` reads ([`EnabledTriggers`],
/// [`ForeignKeyGone`]).
async fn count_rows<E: Exec, S: crate::exec::Statement<E::Backend>>(
    exec: &mut E,
    spec: &crate::table::CounterSpec,
    statement: S,
) -> Result<u64> {
    let rows = exec
        .load::<_, Sum>(statement)
        .await
        .map_err(|e| database_error(spec, e))?;
    Ok(rows
        .first()
        .and_then(|sum| sum.0.as_deref())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}
