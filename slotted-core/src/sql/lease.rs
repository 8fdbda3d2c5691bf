//! The maintainer's lease: one maintainer of a database at a time does the passes, the others
//! stand by (see `maintenance/maintainer.rs`).

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::{statement, TOTAL};
use crate::dialect::{CounterBackend, Dialect};

/// The advisory-lock class of the lease on PostgreSQL (`'slom'`), beside the writer indices'
/// (`'slot'`).
const LEASE_LOCK_CLASS: i32 = 0x736c_6f6d;

/// Holds or takes the lease for this session, as the text of one `slotted_total`: `1` when the
/// session holds it (it held it, or took it now), `0` when another session does. A session
/// lock, held until the session ends: PostgreSQL an advisory lock of this database; MySQL and
/// MariaDB a named lock of this database's name (`GET_LOCK`, which a Galera cluster keeps per
/// node). SQLite has none: always `1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldLease<'a> {
    key: i32,
    _unused: std::marker::PhantomData<&'a ()>,
}

impl HoldLease<'_> {
    /// The lease `key` (of one set of counters: see `maintenance/maintainer.rs`).
    pub fn new(key: i32) -> Self {
        HoldLease {
            key,
            _unused: std::marker::PhantomData,
        }
    }
}

/// MySQL's lock name of the lease `key`: `slotted.maintainer.<key>.<database>`, cut to the 64
/// characters a lock name may have.
fn mysql_name(key: i32) -> String {
    format!("LEFT(CONCAT('slotted.maintainer.', {key}, '.', DATABASE()), 64)")
}

impl<DB: CounterBackend> QueryFragment<DB> for HoldLease<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match DB::DIALECT {
            Dialect::Postgres => out.push_sql(&format!(
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                 AND classid = {LEASE_LOCK_CLASS} AND objid = {key} AND objsubid = 2 \
                 AND pid = pg_backend_pid() \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) \
                 OR pg_try_advisory_lock({LEASE_LOCK_CLASS}, {key}) THEN '1' ELSE '0' END AS ",
                key = self.key
            )),
            Dialect::Mysql => {
                let name = mysql_name(self.key);
                out.push_sql(&format!(
                    "SELECT CAST(CASE WHEN IS_USED_LOCK({name}) = CONNECTION_ID() THEN 1 \
                     ELSE COALESCE(GET_LOCK({name}, 0), 0) END AS CHAR) AS "
                ))
            }
            Dialect::Sqlite => out.push_sql("SELECT '1' AS "),
        }
        out.push_identifier(TOTAL)
    }
}

/// Gives the lease back (before its connection goes back to a pool, where a session lock would
/// otherwise stay held): one `slotted_total`, ignored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseLease<'a> {
    key: i32,
    _unused: std::marker::PhantomData<&'a ()>,
}

impl ReleaseLease<'_> {
    pub fn new(key: i32) -> Self {
        ReleaseLease {
            key,
            _unused: std::marker::PhantomData,
        }
    }
}

impl<DB: CounterBackend> QueryFragment<DB> for ReleaseLease<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match DB::DIALECT {
            Dialect::Postgres => out.push_sql(&format!(
                "SELECT CAST(pg_advisory_unlock({LEASE_LOCK_CLASS}, {}) AS TEXT) AS ",
                self.key
            )),
            Dialect::Mysql => out.push_sql(&format!(
                "SELECT CAST(RELEASE_LOCK({}) AS CHAR) AS ",
                mysql_name(self.key)
            )),
            Dialect::Sqlite => out.push_sql("SELECT '1' AS "),
        }
        out.push_identifier(TOTAL)
    }
}

statement!(by_text: HoldLease, ReleaseLease);
