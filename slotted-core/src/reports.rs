//! What maintenance jobs report: what a compaction, a roll-up or a retention pass did, the
//! records it left, and what it had committed when an error stopped it. Plain data, below the
//! jobs and the error type that carry it.

/// A record maintenance could not do, and why; the job went on with the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFailure {
    /// The record key, formatted with `Debug`.
    pub key: String,
    /// What stopped it, e.g. slots whose sum is outside `i64`.
    pub reason: String,
}

/// What a compaction or fold did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Records (keys) whose rows were folded: a key with no rows, or whose rows writers all held
    /// (locked) at the time, is not counted.
    pub records: u64,
    /// Slot rows of those records before.
    pub rows_before: u64,
    /// Slot rows of those records after: one per record and bucket, none where the count is 0.
    pub rows_after: u64,
    /// Transactions committed.
    pub batches: u64,
    /// Batches rolled back after losing a deadlock or a certification conflict (Galera) to
    /// concurrent writers, and run again smaller: nothing of a lost batch was counted. Only a
    /// batch that is its own transaction is run again; a lock wait timeout is not (a rerun would
    /// wait as long again), it comes back as an error.
    pub retries: u64,
    /// Records left as they were, with the reason (their slots add up past `i64`): every other
    /// record was folded. A database error, by contrast, stops the job and comes back as `Err`
    /// ([`Error::MaintenanceStopped`](crate::Error::MaintenanceStopped) when part of it was
    /// committed).
    pub failed: Vec<RecordFailure>,
    /// Records left for a later pass because concurrent writers won over them every time
    /// (a batch of that record alone lost several times in a row): their totals are exact,
    /// their rows not folded yet.
    pub skipped: Vec<RecordFailure>,
}

impl std::ops::AddAssign for CompactionReport {
    fn add_assign(&mut self, other: Self) {
        self.records += other.records;
        self.rows_before += other.rows_before;
        self.rows_after += other.rows_after;
        self.batches += other.batches;
        self.retries += other.retries;
        self.failed.extend(other.failed);
        self.skipped.extend(other.skipped);
    }
}

/// What a cache roll-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Rows of the model's table whose cache the roll-up changed to their total. A row whose
    /// cache held its total already is not written (no dead tuple, no row lock on
    /// PostgreSQL, no binary log event) and not counted, and neither is a key with no row in
    /// the model's table.
    pub updated: u64,
    /// Records whose cache was left as it was, with the reason (a total outside `i64`): every
    /// other record was refreshed.
    pub failed: Vec<RecordFailure>,
    /// Batches rolled back after losing a deadlock or a certification conflict, and run again.
    pub retries: u64,
    /// Records whose cache was left for a later roll-up because concurrent writers of their
    /// model rows won over every attempt.
    pub skipped: Vec<RecordFailure>,
}

impl std::ops::AddAssign for RefreshReport {
    fn add_assign(&mut self, other: Self) {
        self.updated += other.updated;
        self.failed.extend(other.failed);
        self.retries += other.retries;
        self.skipped.extend(other.skipped);
    }
}

/// What a pass over the records written since the last one did
/// ([`maintain_changed`](crate::CounterMaintenance::maintain_changed)): their compaction, and
/// the roll-up of the same records into the cached column (for a counter with `cache`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// The compaction of the records with rows outside the settled slot.
    pub compaction: CompactionReport,
    /// The roll-up of the same records (nothing without `cache`).
    pub refresh: RefreshReport,
}

/// What moving an adopted column's counts did: into the slots (`absorb`), or back from the
/// slots into the column (`release`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Records whose counts were moved.
    pub records: u64,
    /// The counts moved, in all.
    pub moved: i128,
    /// Transactions committed.
    pub batches: u64,
    /// Batches rolled back after losing a deadlock or a certification conflict, and run again.
    pub retries: u64,
    /// Records left as they were, with the reason (a total the column cannot hold, no row in
    /// the model's table): every other record was moved.
    pub failed: Vec<RecordFailure>,
    /// Records left for a later pass because concurrent writers won over them every time.
    pub skipped: Vec<RecordFailure>,
    /// `absorb_all` of a counter that adopts its cache column: every row was found at 0 after
    /// the pass, and the roll-up owns the column from now on. `false` while a row still holds a
    /// count (a writer of the column is still running): run it again.
    pub took_over_cache: bool,
}

impl std::ops::AddAssign for MoveReport {
    fn add_assign(&mut self, other: Self) {
        self.took_over_cache |= other.took_over_cache;
        self.records += other.records;
        self.moved += other.moved;
        self.batches += other.batches;
        self.retries += other.retries;
        self.failed.extend(other.failed);
        self.skipped.extend(other.skipped);
    }
}

/// What a maintenance job committed before an error stopped it
/// ([`Error::MaintenanceStopped`](crate::Error::MaintenanceStopped)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Committed {
    /// Compaction or bucket folding.
    Compaction(CompactionReport),
    /// A cache roll-up.
    Refresh(RefreshReport),
    /// Retention: slot rows deleted.
    Deleted(u64),
    /// Absorb or release of an adopted column.
    Moved(MoveReport),
    /// A pass over what was written since the last one: its compaction and roll-up.
    Pass(PassReport),
}

impl std::fmt::Display for Committed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Committed::Compaction(r) => write!(
                f,
                "{} batches, {} records folded ({} rows into {}), {} left for a later pass",
                r.batches,
                r.records,
                r.rows_before,
                r.rows_after,
                r.skipped.len() + r.failed.len()
            ),
            Committed::Refresh(r) => write!(
                f,
                "{} cache rows written, {} records left for a later roll-up",
                r.updated,
                r.skipped.len() + r.failed.len()
            ),
            Committed::Deleted(rows) => write!(f, "{rows} slot rows deleted"),
            Committed::Pass(r) => write!(
                f,
                "compaction: {}; roll-up: {}",
                Committed::Compaction(r.compaction.clone()),
                Committed::Refresh(r.refresh.clone())
            ),
            Committed::Moved(r) => write!(
                f,
                "{} batches, {} records' counts moved ({} in all), {} left for a later pass",
                r.batches,
                r.records,
                r.moved,
                r.skipped.len() + r.failed.len()
            ),
        }
    }
}

/// What verifying (and repairing) a counter that follows a child table found: each record's
/// count set against its child rows, read in one snapshot per page of records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FollowReport {
    /// Records whose count was set against their child rows (every record with slot rows or
    /// counted child rows).
    pub records: u64,
    /// Records whose count differed from what their child rows add up to.
    pub drifted: u64,
    /// The first [`FollowReport::SAMPLE`] of them.
    pub drift: Vec<Drift>,
    /// Records whose count was repaired (`repair_follow_all`): the difference added to one
    /// slot, so that the count equals the child rows again.
    pub repaired: u64,
    /// The counter's triggers on the child table that exist and are enabled.
    pub triggers_enabled: u64,
    /// The triggers the counter's migration creates: 3, one per event. Fewer enabled: the count
    /// no longer follows every change of the child table.
    pub triggers_expected: u64,
    /// slotted's follow triggers on other tables that still write into this counter's table:
    /// left from a table the counter followed before (see the guide's "Removal"). They add
    /// that table's changes to the count.
    pub stray_triggers: u64,
    /// PostgreSQL: foreign keys that the counter's trigger relies on and that are gone. Where
    /// the migration found a foreign key from the child's column to the table between (a count
    /// `through` it), an `INSERT` leaves the lock on the row between to the key's check; a key
    /// dropped, made deferrable or its check trigger disabled since then leaves a comment
    /// added while its post moves counted for the old parent. Run the counter's migration
    /// again (down and up).
    pub foreign_keys_missing: u64,
}

impl FollowReport {
    /// How many drifting records [`FollowReport::drift`] lists.
    pub const SAMPLE: usize = 100;

    /// Whether every record's count equals its child rows, every trigger is there and enabled,
    /// no trigger of another table writes into the counter's, and no foreign key the triggers
    /// rely on is gone.
    pub fn is_exact(&self) -> bool {
        self.drifted == self.repaired
            && self.triggers_enabled == self.triggers_expected
            && self.stray_triggers == 0
            && self.foreign_keys_missing == 0
    }
}

/// One record whose count differed from its child rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The record's key, as `Debug` shows it.
    pub key: String,
    /// What its slots held.
    pub counted: i64,
    /// What its child rows add up to.
    pub child_rows: i64,
}
