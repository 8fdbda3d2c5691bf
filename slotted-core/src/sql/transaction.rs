//! `BEGIN` and `COMMIT` as statements of their own, for the sync face on MySQL and MariaDB (and
//! PostgreSQL's `SET LOCAL jit = off` for maintenance batches), and the statements of the guard
//! around slotted's own transactions on MySQL and MariaDB (`exec::guard`).
//!
//! Diesel 2.3's transaction manager sends them with `batch_execute`, which on `MysqlConnection`
//! turns multi-statements on, runs the text, and turns them off again: three round trips for
//! each, seven for a transaction of one increment where three suffice. As prepared statements
//! (cached by type, like the increment) they take one round trip each. See
//! `exec::sync::SyncExec::begin`.

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::QueryResult;

/// `BEGIN`: a type of its own, so that Diesel caches its prepared statement by type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Begin;

/// `COMMIT`, as [`Begin`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Commit;

/// SQLite's `BEGIN IMMEDIATE`: the write lock first, through the busy timeout. A deferred
/// transaction that reads, then writes, fails at once with `database is locked` (no busy
/// timeout applies to that upgrade) whenever another writer committed after its read began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BeginImmediate;

/// PostgreSQL's `SET LOCAL jit = off`, the first statement of a maintenance batch's own
/// transaction: a batch's statements read and write thousands of rows, their estimates cross
/// `jit_above_cost` (100,000 by default) as a backlog grows, and each then pays its compilation
/// (about 0.4 s here), every batch again. Beside 32 writers at 10^5 records, a maintainer with
/// a backlog made no pass within 20 s with JIT, 16 with it off (docs/bench/scale-live-*). Not
/// in a savepoint: `SET LOCAL` would outlive it, to the end of the caller's transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JitOff;

/// The guard's first statement: the session's `autocommit` kept in a user variable, then off, so
/// that no statement of the transaction can commit on its own should the server end the
/// transaction behind the client's back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AutocommitOff;

/// The guard's last statement, after `COMMIT` or `ROLLBACK`: the session's `autocommit` as
/// [`AutocommitOff`] found it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AutocommitBack;

/// The guard's marker: a savepoint that lives exactly as long as the server-side transaction
/// that took it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark;

/// The guard's check before `COMMIT`: fails with 1305 (`SAVEPOINT slotted_tx does not exist`)
/// when the transaction that took [`Mark`] has ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckMark;

/// `ROLLBACK` sent by the guard itself, whatever Diesel's transaction manager records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RollbackAll;

/// The name of the guard's savepoint ([`Mark`]); Diesel names its own `diesel_savepoint_N`.
pub(crate) const MARK_NAME: &str = "slotted_tx";

/// A transaction-control statement of the guard: its text, to send unprepared where a server
/// refuses to prepare it (MySQL's `ER_UNSUPPORTED_PS`), and its place in the guard's memory of
/// such refusals.
pub(crate) trait Control: Copy + Send + Sync + 'static {
    const SQL: &'static str;
    const BIT: u8;
}

macro_rules! control {
    ($($ty:ident = $bit:literal),*) => {$(
        impl Control for $ty {
            const SQL: &'static str = <$ty>::SQL;
            const BIT: u8 = 1 << $bit;
        }
    )*};
}
control!(
    AutocommitOff = 0,
    AutocommitBack = 1,
    Mark = 2,
    CheckMark = 3,
    RollbackAll = 4
);

macro_rules! tx_control {
    ($($ty:ident => $sql:literal),*) => {$(
        impl $ty {
            #[allow(dead_code)] // read by the guard's statements only
            const SQL: &'static str = $sql;
        }
        impl<DB: Backend> QueryFragment<DB> for $ty {
            fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
                out.push_sql($sql);
                Ok(())
            }
        }
        impl QueryId for $ty {
            type QueryId = $ty;
            const HAS_STATIC_QUERY_ID: bool = true;
        }
    )*};
}
tx_control!(
    Begin => "BEGIN",
    Commit => "COMMIT",
    BeginImmediate => "BEGIN IMMEDIATE",
    JitOff => "SET LOCAL jit = off",
    AutocommitOff => "SET @slotted_autocommit = @@autocommit, autocommit = 0",
    AutocommitBack => "SET autocommit = @slotted_autocommit",
    Mark => "SAVEPOINT slotted_tx",
    CheckMark => "RELEASE SAVEPOINT slotted_tx",
    RollbackAll => "ROLLBACK"
);
