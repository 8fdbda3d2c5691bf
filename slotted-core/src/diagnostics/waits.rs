//! The lock waits on a counter table: PostgreSQL's, read per table; InnoDB's, read once and
//! told apart by table and by the row's primary key.

use super::{LockWait, LockWaits};
use crate::dialect::{CounterBackend, Dialect};
use crate::exec::Exec;
use crate::sql::diagnostics::{self as sql, MysqlWaitRow, PgWaitRow};
use crate::table::{CounterSpec, Storage};

/// The waits of two samples together: one entry per waiting session and row, the longest wait.
pub(super) fn merge(before: LockWaits, now: LockWaits) -> LockWaits {
    match (before, now) {
        (LockWaits::Seen(mut all), LockWaits::Seen(now)) => {
            for wait in now {
                match all.iter_mut().find(|w| {
                    (w.waiter, &w.record, w.slot, w.bucket)
                        == (wait.waiter, &wait.record, wait.slot, wait.bucket)
                }) {
                    Some(w) => {
                        if wait.waited_ms > w.waited_ms {
                            *w = wait;
                        }
                    }
                    None => all.push(wait),
                }
            }
            LockWaits::Seen(all)
        }
        (LockWaits::Seen(_), other) | (other, _) => other,
    }
}

pub(super) async fn lock_waits<E: Exec>(spec: &CounterSpec, exec: &mut E) -> LockWaits {
    let result = match E::Backend::DIALECT {
        Dialect::Postgres => postgres_waits(spec, exec).await,
        _ => return LockWaits::NotPossible,
    };
    match result {
        Ok(waits) => LockWaits::Seen(waits),
        Err(e) => LockWaits::Unavailable {
            reason: e.to_string(),
        },
    }
}

fn cut(query: &str) -> String {
    let query = query.split_whitespace().collect::<Vec<_>>().join(" ");
    match query.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &query[..i]),
        None => query,
    }
}

async fn postgres_waits<E: Exec>(
    spec: &CounterSpec,
    exec: &mut E,
) -> diesel::QueryResult<Vec<LockWait>> {
    let rows = exec
        .load::<_, PgWaitRow>(sql::postgres_lock_waits(spec))
        .await?;
    let mut waits: Vec<LockWait> = Vec::new();
    for row in rows {
        // In the shared table, a row of another counter is that counter's wait.
        if let (Storage::Shared { record_type }, Some(rt)) = (&spec.storage, &row.record_type) {
            if rt != record_type {
                continue;
            }
        }
        if waits.iter().any(|w| row.waiter == w.waiter) {
            continue;
        }
        waits.push(LockWait {
            waiter: row.waiter,
            blockers: row
                .blockers
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect(),
            record: row.record,
            slot: row.slot,
            bucket: row.bucket,
            waited_ms: row.waited_ms,
            lock: row.lock_kind,
            query: cut(&row.query),
        });
    }
    Ok(waits)
}

/// The waits of InnoDB's lock tables that are on this counter's table.
pub(super) fn mysql_waits(spec: &CounterSpec, rows: &[MysqlWaitRow]) -> Vec<LockWait> {
    let mut waits: Vec<LockWait> = Vec::new();
    for row in rows {
        if innodb_table(&row.lock_table, &row.db_prefix).as_deref() != Some(spec.table) {
            continue;
        }
        let key = row
            .lock_data
            .clone()
            .as_deref()
            .filter(|_| row.lock_index == "PRIMARY" && !row.lock_mode.contains("GAP"))
            .and_then(|data| primary_key_of(spec, data));
        if let Some(PrimaryKey {
            record_type: Some(rt),
            ..
        }) = &key
        {
            if matches!(spec.storage, Storage::Shared { record_type } if record_type != rt) {
                continue;
            }
        }
        if let Some(wait) = waits.iter_mut().find(|w| w.waiter == row.waiter) {
            if !wait.blockers.contains(&row.blocker) {
                wait.blockers.push(row.blocker);
            }
            continue;
        }
        let (record, slot, bucket) = match key {
            Some(k) => (Some(k.record), k.slot, k.bucket),
            None => (None, None, None),
        };
        waits.push(LockWait {
            waiter: row.waiter,
            blockers: vec![row.blocker],
            record,
            slot,
            bucket,
            waited_ms: row.waited_ms,
            lock: row.lock_mode.clone(),
            query: cut(&row.query),
        });
    }
    waits
}

/// The table of InnoDB's `` `db`.`table` ``, when it is in the current database (`prefix`,
/// `` `db`.` ``), its backquotes undoubled.
fn innodb_table(lock_table: &str, prefix: &str) -> Option<String> {
    let quoted = lock_table.strip_prefix(prefix)?.strip_suffix('`')?;
    Some(quoted.replace("``", "`"))
}

/// A counter row's primary key, read back from InnoDB's `lock_data`.
#[derive(Debug, PartialEq, Eq)]
struct PrimaryKey {
    record_type: Option<String>,
    record: String,
    bucket: Option<i64>,
    slot: Option<i16>,
}

/// Parses InnoDB's `lock_data` of a counter table's primary key: its columns in key order,
/// `, `-separated, strings in single quotes (`'posts.likes', 7, 3`). `None` for the pseudo-rows
/// (`supremum pseudo-record`) and anything else.
fn primary_key_of(spec: &CounterSpec, data: &str) -> Option<PrimaryKey> {
    let values = split_lock_data(data)?;
    let mut values = values.into_iter();
    let record_type = match spec.storage {
        Storage::Shared { .. } => Some(values.next()?),
        Storage::Table => None,
    };
    let record = record_text(
        (0..spec.key_columns().len())
            .map(|_| values.next())
            .collect::<Option<Vec<_>>>()?,
    );
    let bucket = match spec.bucket {
        Some(_) => Some(values.next()?.parse().ok()?),
        None => None,
    };
    let slot = values.next()?.parse().ok();
    if values.next().is_some() {
        return None;
    }
    Some(PrimaryKey {
        record_type,
        record,
        bucket,
        slot,
    })
}

/// A record's key as the diagnostics show it: its value, or a composite key's values as
/// `(7, 1.0.0)` (as `sql::diagnostics::key_text` writes it on PostgreSQL).
pub(super) fn record_text(mut values: Vec<String>) -> String {
    if values.len() == 1 {
        return values.remove(0);
    }
    format!("({})", values.join(", "))
}

fn split_lock_data(data: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut chars = data.trim().chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => value.push(chars.next()?),
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        value.push('\'');
                    }
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            let trimmed = value.trim();
            if trimmed.is_empty() || trimmed.contains(' ') {
                return None;
            }
            value = trimmed.to_owned();
        }
        values.push(value);
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.next() {
            None => return Some(values),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyKind;
    use crate::table::TEST_SPEC as SPEC;

    #[test]
    fn innodb_lock_data_gives_the_row() {
        let key = primary_key_of(&SPEC, "7, 3").unwrap();
        assert_eq!((key.record.as_str(), key.slot), ("7", Some(3)));
        let text = CounterSpec {
            key: &[KeyKind::Text],
            ..SPEC
        };
        let key = primary_key_of(&text, "'a, ''b''\\\\', 0").unwrap();
        assert_eq!(key.record, "a, 'b'\\");
        let shared = CounterSpec {
            storage: Storage::Shared {
                record_type: "posts.likes",
            },
            ..SPEC
        };
        let key = primary_key_of(&shared, "'posts.likes', 12, 1").unwrap();
        assert_eq!(key.record_type.as_deref(), Some("posts.likes"));
        assert_eq!((key.record.as_str(), key.slot), ("12", Some(1)));
        let composite = CounterSpec {
            key: &[KeyKind::Integer, KeyKind::Text],
            ..SPEC
        };
        let key = primary_key_of(&composite, "7, '1.0.0', 2").unwrap();
        assert_eq!((key.record.as_str(), key.slot), ("(7, 1.0.0)", Some(2)));
        assert_eq!(primary_key_of(&composite, "7, 2"), None);
        assert_eq!(primary_key_of(&SPEC, "supremum pseudo-record"), None);
        assert_eq!(primary_key_of(&SPEC, "1, 2, 3"), None);
    }

    #[test]
    fn innodb_names_the_table_in_the_current_database_only() {
        let db = "`test`.`";
        assert_eq!(
            innodb_table("`test`.`posts_likes_slots`", db).as_deref(),
            Some("posts_likes_slots")
        );
        assert_eq!(innodb_table("`test`.`a``b`", db).as_deref(), Some("a`b"));
        assert_eq!(innodb_table("`other`.`posts_likes_slots`", db), None);
    }
}
