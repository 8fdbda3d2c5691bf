//! MySQL's rows as a table: `JSON_TABLE(?, '$[*]' COLUMNS (record_id BIGINT PATH '$[0]' ERROR ON
//! EMPTY ERROR ON ERROR, …)) AS <alias>`, the rows one bound JSON text, each column typed as the
//! counter table's (a text key `VARCHAR(n) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`, as the
//! migration makes it), so that a join on it compares as the key column does.
//!
//! What it replaces: a derived table of `SELECT ? AS record_id, … UNION ALL SELECT …`, for which
//! MariaDB 10.11 prepares a query block per row (2,997 rows: a `DELETE` of 17–18 ms against
//! 8.5 ms this way; `docs/bench/scale-mysql-fold-statements.txt`). Not a table value constructor
//! (`VALUES`): MariaDB types its columns by the first row (text cut short), and a fold through
//! one lost counts on Galera beside writers, not understood (`docs/guide/scale.md`). Not a
//! `(…) IN ((…), …)` list: MariaDB builds its ranges on the first column only and reads (so, in
//! REPEATABLE READ, locks and waits for) every slot row of each record, a writer's too.
//!
//! `JSON_TABLE` reads a value at its column's type, and does not always say when it cannot
//! (MariaDB 10.11 clamps 70000 into a `SMALLINT` as 32767, `ERROR ON ERROR` notwithstanding):
//! every value here is written from a Rust value of its column's own type, a key checked against
//! the counter's key kinds and length before it gets here. `ERROR ON EMPTY` fails a statement
//! with a value missing instead of reading `NULL`. Needs MariaDB 10.6 or MySQL 8.0.

use std::borrow::Cow;
use std::fmt::{Display, Write};
use std::sync::OnceLock;

use diesel::query_builder::AstPass;
use diesel::QueryResult;

use super::BUCKET;
use crate::dialect::CounterBackend;
use crate::key::{KeyKind, KeyPart, KeyValue};
use crate::table::CounterSpec;

/// A statement's rows as JSON text, built on the first walk of the statement (Diesel walks one
/// more than once: for its text, for its binds) and bound from there.
#[derive(Debug, Clone, Default)]
pub(crate) struct JsonRows(OnceLock<Result<String, String>>);

impl JsonRows {
    /// `[[…], …]`, one array per row of `rows`, its values written by `row`.
    pub(crate) fn text<R>(
        &self,
        rows: &[R],
        mut row: impl FnMut(&mut JsonRow<'_>, &R) -> Result<(), String>,
    ) -> QueryResult<&str> {
        let built = self.0.get_or_init(|| {
            let mut text = String::with_capacity(rows.len() * 16 + 2);
            text.push('[');
            for (i, r) in rows.iter().enumerate() {
                text.push_str(if i == 0 { "[" } else { ",[" });
                row(
                    &mut JsonRow {
                        text: &mut text,
                        first: true,
                    },
                    r,
                )?;
                text.push(']');
            }
            text.push(']');
            Ok(text)
        });
        built.as_deref().map_err(|what| {
            diesel::result::Error::SerializationError(
                format!("slotted: {what} cannot go into JSON_TABLE").into(),
            )
        })
    }
}

/// One row's array, value by value.
pub(crate) struct JsonRow<'s> {
    text: &'s mut String,
    first: bool,
}

impl JsonRow<'_> {
    fn next(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.text.push(',');
        }
    }

    /// An integer.
    pub(crate) fn int(&mut self, value: impl Display) {
        self.next();
        let _ = write!(self.text, "{value}");
    }

    /// A JSON string: `"`, `\` and control characters escaped.
    fn string(&mut self, value: &str) {
        self.next();
        self.text.push('"');
        for c in value.chars() {
            match c {
                '"' => self.text.push_str("\\\""),
                '\\' => self.text.push_str("\\\\"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(self.text, "\\u{:04x}", u32::from(c));
                }
                c => self.text.push(c),
            }
        }
        self.text.push('"');
    }

    /// The values of [`columns`]' head: the key's parts, then `bucket` when the counter has
    /// buckets.
    pub(crate) fn row_id(
        &mut self,
        spec: &CounterSpec,
        key: &KeyValue<'_>,
        bucket: i64,
    ) -> Result<(), String> {
        self.key(key)?;
        if spec.bucket.is_some() {
            self.int(bucket);
        }
        Ok(())
    }

    /// Each of the key's parts.
    fn key(&mut self, key: &KeyValue<'_>) -> Result<(), String> {
        for part in key.parts() {
            match part {
                KeyPart::SmallInt(v) => self.int(v),
                KeyPart::Integer(v) => self.int(v),
                KeyPart::BigInt(v) => self.int(v),
                KeyPart::UnsignedInteger(v) => self.int(v),
                KeyPart::UnsignedBigInt(v) => self.int(v),
                KeyPart::Text(v) => self.string(v),
                #[cfg(feature = "chrono")]
                KeyPart::Date(v) => self.string(&v.format("%Y-%m-%d").to_string()),
                other => return Err(format!("a {:?} key", other.kind())),
            }
        }
        Ok(())
    }
}

/// The columns of a `JSON_TABLE` of rows: the key's (typed as the counter table's), [`bucket`,]
/// then `tail`; a row's values for the head are [`JsonRow::row_id`]'s.
pub(crate) fn columns(
    spec: &CounterSpec,
    tail: &[(&'static str, &'static str)],
) -> QueryResult<Vec<(&'static str, Cow<'static, str>)>> {
    let mut columns = Vec::with_capacity(spec.key_columns().len() + 1 + tail.len());
    for (column, kind) in spec.key_columns().iter().zip(spec.key_column_kinds()) {
        let sql_type: Cow<'static, str> = match kind {
            KeyKind::SmallInt => "SMALLINT".into(),
            KeyKind::Integer => "INT".into(),
            KeyKind::BigInt => "BIGINT".into(),
            KeyKind::UnsignedInteger => "INT UNSIGNED".into(),
            KeyKind::UnsignedBigInt => "BIGINT UNSIGNED".into(),
            KeyKind::Date => "DATE".into(),
            KeyKind::Text => format!(
                "VARCHAR({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                spec.max_key_length
            )
            .into(),
            other => {
                return Err(diesel::result::Error::SerializationError(
                    format!("slotted: a {other:?} key cannot go into JSON_TABLE").into(),
                ))
            }
        };
        columns.push((*column, sql_type));
    }
    if spec.bucket.is_some() {
        columns.push((BUCKET, "BIGINT".into()));
    }
    columns.extend(tail.iter().map(|&(column, t)| (column, Cow::Borrowed(t))));
    Ok(columns)
}

/// `JSON_TABLE(?, '$[*]' COLUMNS (c T PATH '$[0]' ERROR ON EMPTY ERROR ON ERROR, …)) AS alias`,
/// `json` bound as text.
pub(crate) fn push<'b, DB: CounterBackend>(
    out: &mut AstPass<'_, 'b, DB>,
    json: &'b str,
    columns: &[(&'static str, Cow<'static, str>)],
    alias: &str,
) -> QueryResult<()> {
    out.push_sql("JSON_TABLE(");
    DB::push_text(out, json)?;
    out.push_sql(", '$[*]' COLUMNS (");
    for (i, (column, sql_type)) in columns.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_identifier(column)?;
        out.push_sql(&format!(
            " {sql_type} PATH '$[{i}]' ERROR ON EMPTY ERROR ON ERROR"
        ));
    }
    out.push_sql(")) AS ");
    out.push_sql(alias);
    Ok(())
}
