//! Each backend's SQL for the scale benchmark: sizes, vacuum and rebuild, the hand-written fold.

use diesel::connection::SimpleConnection;
use diesel::sql_types::BigInt;
use diesel::{QueryableByName, RunQueryDsl};
use slotted_core::CounterConnection;
use slotted_examples::BoxError;

#[derive(QueryableByName)]
pub struct Number {
    #[diesel(sql_type = BigInt)]
    pub n: i64,
}

/// A record's count, as the plain-table anchor reads it.
#[derive(QueryableByName)]
#[allow(dead_code)] // read only to load them, as `totals` does
pub struct Pair {
    #[diesel(sql_type = BigInt)]
    k: i64,
    #[diesel(sql_type = BigInt)]
    pub n: i64,
}

/// What one backend needs beyond Diesel: its SQL for sizes, casts and the hand-written fold.
pub trait Server:
    CounterConnection + SimpleConnection + diesel::r2d2::R2D2Connection + Sized + 'static
{
    const NAME: &'static str;
    /// `SIGNED` on MySQL, `BIGINT` elsewhere.
    const INT: &'static str;
    /// The one `BIGINT` column `n` of the one row `sql` returns.
    fn number(&mut self, sql: &str) -> Result<i64, BoxError>;
    /// The rows of `table`.
    fn rows(&mut self, table: &str) -> Result<i64, BoxError> {
        self.number(&format!(
            "SELECT CAST(COUNT(*) AS {}) AS n FROM {table}",
            Self::INT
        ))
    }
    /// The sum of `table`'s `count` column: every count a slot table holds.
    fn sum(&mut self, table: &str) -> Result<i64, BoxError> {
        self.number(&format!(
            "SELECT CAST(COALESCE(SUM(count), 0) AS {}) AS n FROM {table}",
            Self::INT
        ))
    }
    /// The rows `sql` returns, as `Pair`s: how many.
    fn pairs(&mut self, sql: &str) -> Result<usize, BoxError>;
    /// Table and index bytes of `table`, after the database's statistics were refreshed.
    fn bytes(&mut self, table: &str) -> Result<i64, BoxError>;
    /// Refreshes the planner's statistics of `table`, as autovacuum or InnoDB's automatic
    /// statistics would after a bulk load.
    fn analyze(&mut self, table: &str) -> Result<(), BoxError>;
    /// The dead rows the table leaves behind and the runs that clean them, as the server counts
    /// them (PostgreSQL: `n_dead_tup` and autovacuum runs of the table; MariaDB: InnoDB's history
    /// list length, server-wide, and 0).
    fn dead(&mut self, table: &str) -> Result<(i64, i64), BoxError>;
    /// The names of `dead`'s two figures, for the report.
    const DEAD_COLUMNS: (&'static str, &'static str);
    /// What makes a table's freed space reusable without rebuilding it; its name.
    fn reclaim(&mut self, table: &str) -> Result<&'static str, BoxError>;
    /// Rebuilds a table to its minimal size; the command's name.
    fn rebuild(&mut self, table: &str) -> Result<&'static str, BoxError>;
    /// Folds the anchor's rows of records `low..=high` into one row each, by hand.
    /// With `locked`, the same fold in a transaction that first locks the range's rows no other
    /// transaction holds (`SELECT … FOR UPDATE SKIP LOCKED`), as `compact_all` must so that it
    /// never waits behind a writer: what that lock costs, the fold unchanged (so not exact
    /// beside writers: a measure, not a way to compact).
    fn fold_by_hand(&mut self, low: i64, high: i64, locked: bool) -> Result<(), BoxError>;
    /// The live run's maintenance written by hand over records `low..=high`, as plain SQL beside
    /// live writers: the fold of `scale_live_hits_slots` (exact beside writers: a writer's new
    /// row is added to, not refused), the roll-up into `scale_live.hits_count`, and the
    /// retention `DELETE` of `scale_live_daily_slots` before `cutoff`. Each its own statement or
    /// transaction.
    fn maintain_by_hand(&mut self, low: i64, high: i64, cutoff: i64) -> Result<(), BoxError>;
    /// The roll-up of the records in `keys` (a comma-separated list), written by hand: their
    /// totals from `scale_live_hits_slots` into `scale_live.anchor_count`, one statement.
    fn roll_up_by_hand(&mut self, keys: &str) -> Result<(), BoxError>;
}

/// For `fold_by_hand`: `BEGIN; `, the locking read of the anchor's rows `low..=high`, and
/// `; COMMIT`, when `locked`; else empty.
fn lock_first(locked: bool, low: i64, high: i64) -> (&'static str, String, &'static str) {
    if !locked {
        return ("", String::new(), "");
    }
    let lock = format!(
        "SELECT record_id, slot, count FROM scale_anchor_hits_slots \
         WHERE record_id BETWEEN {low} AND {high} ORDER BY record_id, slot FOR UPDATE SKIP LOCKED; "
    );
    ("BEGIN; ", lock, "; COMMIT")
}

#[cfg(feature = "postgres")]
impl Server for diesel::PgConnection {
    const NAME: &'static str = "postgres";
    const INT: &'static str = "BIGINT";

    fn number(&mut self, sql: &str) -> Result<i64, BoxError> {
        Ok(diesel::sql_query(sql).get_result::<Number>(self)?.n)
    }

    fn pairs(&mut self, sql: &str) -> Result<usize, BoxError> {
        Ok(diesel::sql_query(sql).load::<Pair>(self)?.len())
    }

    fn analyze(&mut self, table: &str) -> Result<(), BoxError> {
        Ok(self.batch_execute(&format!("ANALYZE {table}"))?)
    }

    fn bytes(&mut self, table: &str) -> Result<i64, BoxError> {
        self.analyze(table)?;
        self.number(&format!("SELECT pg_total_relation_size('{table}') AS n"))
    }

    const DEAD_COLUMNS: (&'static str, &'static str) = ("dead tuples", "autovacuum runs");

    fn dead(&mut self, table: &str) -> Result<(i64, i64), BoxError> {
        let sql = |column: &str| {
            format!(
                "SELECT CAST(COALESCE(MAX({column}), 0) AS BIGINT) AS n FROM pg_stat_user_tables \
                 WHERE relname = '{table}'"
            )
        };
        Ok((
            self.number(&sql("n_dead_tup"))?,
            self.number(&sql("autovacuum_count"))?,
        ))
    }

    fn reclaim(&mut self, table: &str) -> Result<&'static str, BoxError> {
        self.batch_execute(&format!("VACUUM {table}"))?;
        Ok("VACUUM")
    }

    fn rebuild(&mut self, table: &str) -> Result<&'static str, BoxError> {
        self.batch_execute(&format!("VACUUM FULL {table}"))?;
        Ok("VACUUM FULL")
    }

    fn fold_by_hand(&mut self, low: i64, high: i64, locked: bool) -> Result<(), BoxError> {
        // One statement per batch: delete the rows and insert their sums.
        let (begin, lock, commit) = lock_first(locked, low, high);
        self.batch_execute(&format!(
            "{begin}{lock}WITH gone AS (DELETE FROM scale_anchor_hits_slots \
             WHERE record_id BETWEEN {low} AND {high} RETURNING record_id, count) \
             INSERT INTO scale_anchor_hits_slots (record_id, slot, count) \
             SELECT record_id, 0, SUM(count) FROM gone GROUP BY record_id HAVING SUM(count) <> 0{commit}"
        ))?;
        Ok(())
    }

    fn maintain_by_hand(&mut self, low: i64, high: i64, cutoff: i64) -> Result<(), BoxError> {
        self.batch_execute(&format!(
            "WITH gone AS (DELETE FROM scale_live_hits_slots \
             WHERE record_id BETWEEN {low} AND {high} RETURNING record_id, count) \
             INSERT INTO scale_live_hits_slots (record_id, slot, count) \
             SELECT record_id, 0, SUM(count) FROM gone GROUP BY record_id HAVING SUM(count) <> 0 \
             ON CONFLICT (record_id, slot) DO UPDATE \
             SET count = scale_live_hits_slots.count + excluded.count; \
             UPDATE scale_live SET hits_count = s.total FROM (SELECT record_id, SUM(count) AS total \
             FROM scale_live_hits_slots WHERE record_id BETWEEN {low} AND {high} GROUP BY record_id) s \
             WHERE scale_live.id = s.record_id; \
             DELETE FROM scale_live_daily_slots \
             WHERE record_id BETWEEN {low} AND {high} AND bucket < {cutoff}"
        ))?;
        Ok(())
    }

    fn roll_up_by_hand(&mut self, keys: &str) -> Result<(), BoxError> {
        self.batch_execute(&format!(
            "UPDATE scale_live SET anchor_count = s.total FROM (SELECT record_id, SUM(count) AS total \
             FROM scale_live_hits_slots WHERE record_id IN ({keys}) GROUP BY record_id) s \
             WHERE scale_live.id = s.record_id"
        ))?;
        Ok(())
    }
}

#[cfg(feature = "mysql")]
impl Server for diesel::MysqlConnection {
    const NAME: &'static str = "mysql";
    const INT: &'static str = "SIGNED";

    fn number(&mut self, sql: &str) -> Result<i64, BoxError> {
        Ok(diesel::sql_query(sql).get_result::<Number>(self)?.n)
    }

    fn pairs(&mut self, sql: &str) -> Result<usize, BoxError> {
        Ok(diesel::sql_query(sql).load::<Pair>(self)?.len())
    }

    fn analyze(&mut self, table: &str) -> Result<(), BoxError> {
        Ok(self.batch_execute(&format!("ANALYZE TABLE {table}"))?)
    }

    fn bytes(&mut self, table: &str) -> Result<i64, BoxError> {
        self.analyze(table)?;
        self.number(
            &format!(
                "SELECT CAST(data_length + index_length AS SIGNED) AS n FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = '{table}'"
            ),
        )
    }

    const DEAD_COLUMNS: (&'static str, &'static str) = ("history list length", "-");

    fn dead(&mut self, _table: &str) -> Result<(i64, i64), BoxError> {
        let length = self.number(
            "SELECT CAST(COALESCE(MAX(count), -1) AS SIGNED) AS n FROM information_schema.innodb_metrics \
             WHERE name = 'trx_rseg_history_len'",
        )?;
        Ok((length, 0))
    }

    fn reclaim(&mut self, _table: &str) -> Result<&'static str, BoxError> {
        // InnoDB's purge frees deleted rows' space for reuse on its own; nothing to run.
        Ok("(purge)")
    }

    fn rebuild(&mut self, table: &str) -> Result<&'static str, BoxError> {
        self.batch_execute(&format!("OPTIMIZE TABLE {table}"))?;
        Ok("OPTIMIZE TABLE")
    }

    fn fold_by_hand(&mut self, low: i64, high: i64, locked: bool) -> Result<(), BoxError> {
        // No writable CTE: each record with more than one row keeps its lowest slot's row, set
        // to the sum, and loses the others; one transaction. (Summing into a temporary table,
        // deleting the range and inserting the sums was 4x slower at 10^6 records.)
        let (_, lock, _) = lock_first(locked, low, high);
        self.batch_execute(&format!(
            "BEGIN; {lock}\
             UPDATE scale_anchor_hits_slots a JOIN (SELECT record_id, MIN(slot) AS slot, \
             SUM(count) AS total FROM scale_anchor_hits_slots WHERE record_id BETWEEN {low} AND {high} \
             GROUP BY record_id HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot = f.slot \
             SET a.count = f.total; \
             DELETE a FROM scale_anchor_hits_slots a JOIN (SELECT record_id, MIN(slot) AS slot \
             FROM scale_anchor_hits_slots WHERE record_id BETWEEN {low} AND {high} \
             GROUP BY record_id HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot > f.slot; \
             COMMIT"
        ))?;
        Ok(())
    }

    fn maintain_by_hand(&mut self, low: i64, high: i64, cutoff: i64) -> Result<(), BoxError> {
        // The fold as `fold_by_hand`'s, in one transaction; then the roll-up and the retention.
        self.batch_execute(&format!(
            "BEGIN; \
             UPDATE scale_live_hits_slots a JOIN (SELECT record_id, MIN(slot) AS slot, \
             SUM(count) AS total FROM scale_live_hits_slots WHERE record_id BETWEEN {low} AND {high} \
             GROUP BY record_id HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot = f.slot \
             SET a.count = f.total; \
             DELETE a FROM scale_live_hits_slots a JOIN (SELECT record_id, MIN(slot) AS slot \
             FROM scale_live_hits_slots WHERE record_id BETWEEN {low} AND {high} \
             GROUP BY record_id HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot > f.slot; \
             COMMIT; \
             UPDATE scale_live p JOIN (SELECT record_id, SUM(count) AS total FROM scale_live_hits_slots \
             WHERE record_id BETWEEN {low} AND {high} GROUP BY record_id) s ON p.id = s.record_id \
             SET p.hits_count = s.total; \
             DELETE FROM scale_live_daily_slots \
             WHERE record_id BETWEEN {low} AND {high} AND bucket < {cutoff}"
        ))?;
        Ok(())
    }

    fn roll_up_by_hand(&mut self, keys: &str) -> Result<(), BoxError> {
        self.batch_execute(&format!(
            "UPDATE scale_live p JOIN (SELECT record_id, SUM(count) AS total \
             FROM scale_live_hits_slots WHERE record_id IN ({keys}) GROUP BY record_id) s \
             ON p.id = s.record_id SET p.anchor_count = s.total"
        ))?;
        Ok(())
    }
}
