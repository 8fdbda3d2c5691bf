//! The flush log of the write-behind buffer, `slotted_flushes`: one row per flushed chunk,
//! written in the chunk's transaction, so that a retry after a COMMIT of unknown outcome can
//! tell whether the chunk is already in the database.

use diesel::deserialize::{self, QueryableByName};
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::row::NamedRow;
use diesel::QueryResult;

use super::statement;
use crate::dialect::CounterBackend;

/// The flush log's table.
pub const FLUSHES_TABLE: &str = "slotted_flushes";
const ID: &str = "id";
const FLUSHED_AT: &str = "flushed_at";

/// `INSERT INTO slotted_flushes (id, flushed_at) VALUES (?, ?)`: fails with a unique violation
/// when the chunk was committed already.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogFlush<'a> {
    pub id: &'a i64,
    pub at: &'a i64,
}

impl<DB: CounterBackend> QueryFragment<DB> for LogFlush<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("INSERT INTO ");
        out.push_identifier(FLUSHES_TABLE)?;
        out.push_sql(" (");
        out.push_identifier(ID)?;
        out.push_sql(", ");
        out.push_identifier(FLUSHED_AT)?;
        out.push_sql(") VALUES (");
        DB::push_big_int(&mut out, self.id)?;
        out.push_sql(", ");
        DB::push_big_int(&mut out, self.at)?;
        out.push_sql(")");
        Ok(())
    }
}

/// `SELECT id FROM slotted_flushes WHERE id = ?`: one row when the chunk was committed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FindFlush<'a>(pub &'a i64);

impl<DB: CounterBackend> QueryFragment<DB> for FindFlush<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        out.push_identifier(ID)?;
        out.push_sql(" FROM ");
        out.push_identifier(FLUSHES_TABLE)?;
        out.push_sql(" WHERE ");
        out.push_identifier(ID)?;
        out.push_sql(" = ");
        DB::push_big_int(&mut out, self.0)
    }
}

/// `DELETE FROM slotted_flushes WHERE flushed_at < ?`: forgets old chunks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PruneFlushes<'a>(pub &'a i64);

impl<DB: CounterBackend> QueryFragment<DB> for PruneFlushes<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("DELETE FROM ");
        out.push_identifier(FLUSHES_TABLE)?;
        out.push_sql(" WHERE ");
        out.push_identifier(FLUSHED_AT)?;
        out.push_sql(" < ");
        DB::push_big_int(&mut out, self.0)
    }
}

/// A row of [`FindFlush`].
pub(crate) struct FlushId(#[allow(dead_code)] pub i64);

impl<DB: CounterBackend> QueryableByName<DB> for FlushId {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        DB::read_big_int(row, ID).map(FlushId)
    }
}

statement!(by_text: LogFlush, FindFlush, PruneFlushes);

/// The flush log's `CREATE TABLE`, with an index on `flushed_at` for pruning.
pub(crate) fn up_sql(dialect: crate::Dialect) -> String {
    use crate::Dialect;
    let q = |ident: &str| match dialect {
        Dialect::Mysql => format!("`{ident}`"),
        Dialect::Sqlite | Dialect::Postgres => format!("\"{ident}\""),
    };
    let (table, id, at) = (q(FLUSHES_TABLE), q(ID), q(FLUSHED_AT));
    let index = q("slotted_flushes_flushed_at");
    let header = "-- slotted: the write-behind buffer's flush log (exactly-once flushes).\n";
    match dialect {
        Dialect::Mysql => format!(
            "{header}CREATE TABLE {table} (\n    {id} BIGINT NOT NULL,\n    {at} BIGINT NOT NULL,\n    \
             PRIMARY KEY ({id}),\n    INDEX {index} ({at})\n) ENGINE=InnoDB;\n"
        ),
        Dialect::Sqlite | Dialect::Postgres => format!(
            "{header}CREATE TABLE {table} (\n    {id} BIGINT NOT NULL,\n    {at} BIGINT NOT NULL,\n    \
             PRIMARY KEY ({id})\n);\nCREATE INDEX {index} ON {table} ({at});\n"
        ),
    }
}

/// The flush log's `DROP TABLE`.
pub(crate) fn down_sql(dialect: crate::Dialect) -> String {
    match dialect {
        crate::Dialect::Mysql => format!("DROP TABLE `{FLUSHES_TABLE}`;\n"),
        _ => format!("DROP TABLE \"{FLUSHES_TABLE}\";\n"),
    }
}
