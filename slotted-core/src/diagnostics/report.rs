//! The report, printed for an operator.

use std::fmt;

use super::{Advice, ContentionReport, LockWait, LockWaits, TableReport};
use crate::dialect::Dialect;
use crate::table::Storage;

impl fmt::Display for ContentionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slotted contention report ({}", self.dialect.name())?;
        match (self.dialect, self.samples) {
            (Dialect::Sqlite, _) => writeln!(f, ")")?,
            (_, 1) => writeln!(f, ", lock waits: one look)")?,
            (_, n) => writeln!(f, ", lock waits: {n} looks)")?,
        }
        if let Some(writers) = &self.writers {
            write!(
                f,
                "writer indices held (sessions writing with the connection strategy): {}",
                writers.held
            )?;
            match writers.highest {
                Some(highest) => writeln!(f, ", the highest {highest}")?,
                None => writeln!(f)?,
            }
        }
        for table in &self.tables {
            writeln!(f)?;
            table.fmt(f)?;
        }
        Ok(())
    }
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = &self.spec;
        let scope = match spec.storage {
            Storage::Shared { record_type } => format!(" (`{record_type}` rows)"),
            Storage::Table => String::new(),
        };
        let bucket = match spec.bucket {
            Some(width) => format!(", {width:?} buckets").to_lowercase(),
            None => String::new(),
        };
        let strategy = format!("{:?}", spec.strategy).to_lowercase();
        writeln!(
            f,
            "{} in {}{scope}: {} slots, {strategy} strategy{bucket}",
            spec.qualified_name(),
            spec.table,
            spec.slots,
        )?;
        let per_record = if self.records == 0 {
            0.0
        } else {
            self.rows as f64 / self.records as f64
        };
        writeln!(
            f,
            "  rows {}, records {}, {per_record:.1} rows per record, at most {} per read",
            self.rows, self.records, self.max_rows_per_group
        )?;
        let share = if self.rows == 0 {
            0.0
        } else {
            100.0 * self.compactable_rows as f64 / self.rows as f64
        };
        writeln!(
            f,
            "  a compaction would remove {} rows ({share:.0}%)",
            self.compactable_rows
        )?;
        if !self.hottest.is_empty() {
            writeln!(f, "  records with the most rows:")?;
            let width = self.hottest.iter().map(|h| h.key.len()).max().unwrap_or(0);
            for hot in &self.hottest {
                write!(
                    f,
                    "    {:<width$}  {} rows, {} of {} slots in use",
                    hot.key, hot.rows, hot.slots_in_use, spec.slots
                )?;
                if spec.bucket.is_some() {
                    write!(f, ", {} buckets", hot.buckets)?;
                }
                writeln!(f)?;
            }
        }
        match &self.lock_waits {
            LockWaits::NotPossible => writeln!(
                f,
                "  lock waits: none to show (SQLite lets one writer in at a time for the whole \
                 database; the others wait on the busy timeout)"
            )?,
            LockWaits::Unavailable { reason } => {
                writeln!(f, "  lock waits: unavailable ({reason})")?
            }
            LockWaits::Seen(waits) if waits.is_empty() => writeln!(f, "  lock waits: none")?,
            LockWaits::Seen(waits) => {
                writeln!(f, "  lock waits: {}", waits.len())?;
                for wait in waits {
                    writeln!(f, "    {wait}")?;
                }
            }
        }
        if !self.advice.is_empty() {
            writeln!(f, "  advice:")?;
            for advice in &self.advice {
                writeln!(f, "    - {advice}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for LockWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.record, self.slot) {
            (Some(record), Some(slot)) => write!(f, "record {record} slot {slot}")?,
            (Some(record), None) => write!(f, "record {record}")?,
            (None, _) => write!(f, "a row not named")?,
        }
        if let Some(bucket) = self.bucket {
            write!(f, " bucket {bucket}")?;
        }
        write!(f, ": session {} waits", self.waiter)?;
        if let Some(ms) = self.waited_ms {
            write!(f, " ({ms} ms)")?;
        }
        let blockers: Vec<String> = self.blockers.iter().map(i64::to_string).collect();
        if !blockers.is_empty() {
            write!(f, " for session {}", blockers.join(", "))?;
        }
        if !self.lock.is_empty() {
            write!(f, ", lock {}", self.lock)?;
        }
        if !self.query.is_empty() {
            write!(f, ": {}", self.query)?;
        }
        Ok(())
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Advice::RaiseSlots {
                record,
                waiting,
                slots,
                suggested,
            } => {
                let whom = match record {
                    Some(r) => format!("record {r}"),
                    None => "this table".to_owned(),
                };
                let writers = if *waiting == 1 { "writer" } else { "writers" };
                if suggested > slots {
                    write!(
                        f,
                        "raise the slot count: {waiting} {writers} of {whom} wait for a slot row; \
                         try `slots = {suggested}` (now {slots}), about as many slots as the \
                         record has concurrent writers at peak"
                    )
                } else {
                    write!(
                        f,
                        "{waiting} {writers} of {whom} wait for a slot row, and `slots = {slots}` \
                         is the most there is: shorten the transactions that hold it"
                    )
                }
            }
            Advice::Compact { rows_removed, rows } => write!(
                f,
                "compact: {rows_removed} of its {rows} rows would go, and every read sums the \
                 rows of its record; run `compact_all` (from a periodic job)"
            ),
            Advice::MoreWritersThanSlots {
                writers,
                slots,
                suggested,
            } => write!(
                f,
                "raise the slot count: {writers} sessions hold a writer index on this database, \
                 more than the {slots} slots, so some of them share a slot; try \
                 `slots = {suggested}`"
            ),
            Advice::LowerSlots {
                rows_per_read,
                slots,
                suggested,
            } => write!(
                f,
                "lower the slot count: a read sums up to {rows_per_read} rows, yet no writer \
                 waited on this table while looking; if none waits at peak load either, try \
                 `slots = {suggested}` (now {slots}) for cheaper reads"
            ),
        }
    }
}
